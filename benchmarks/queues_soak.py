"""The queues' soak: an hour of sends, receives, joins and kills.

A thin wrapper over ``queues_crash.py``: a producer sends at a steady rate
with random priorities to a durable queue on a queue manager in another
process, a consumer receives with ack; the producer and the consumer are
killed with SIGKILL and restarted all along, and nodes join the queue
managers' group for a few seconds every ``--churn-every`` seconds (half leave,
half are killed). The queue manager lives the whole run, and the RSS of every
process is sampled. At the end: 0 lost, 0 duplicated (counted by id), RSS of
the manager first vs last tenth of the run.

    python benchmarks/queues_soak.py --seconds 3600
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def main() -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=3_600.0)
    parser.add_argument("--rate", type=float, default=300.0, help="messages per second (default 300)")
    parser.add_argument("--kill-every", type=float, default=30.0)
    parser.add_argument("--churn-every", type=float, default=15.0)
    args, rest = parser.parse_known_args()
    messages = int(args.seconds * args.rate)
    cmd = [sys.executable, str(Path(__file__).with_name("queues_crash.py")), "--messages", str(messages),
           "--rate", str(args.rate), "--kills", "1", "--keep-killing", "--kill-every", str(args.kill_every),
           "--victims", "producer,consumer", "--churn-every", str(args.churn_every), "--rss-every", "10",
           "--report-every", "60", "--timeout", str(args.seconds * 2 + 600), *rest]
    return subprocess.call(cmd)


if __name__ == "__main__":
    sys.exit(main())
