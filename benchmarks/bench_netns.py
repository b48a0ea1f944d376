"""``sgcs bench`` on the terms Corosync's reference runs on: one member per
network namespace on a bridge (``tests/netns.py``), so every datagram crosses
a veth pair and the bridge as it does between Corosync's daemons in
``../shared/bench/corosync/run.sh``, instead of loopback.

The members are the same ``sgcs.apps.bench_member`` processes as ``sgcs
bench`` starts (the same figures: msg/s received per member, latency p50/p99
of the others' messages), each bound to its namespace's address. Prints the
bench's JSON report (``--json``) or its one-line summary. Needs root.

    python benchmarks/bench_netns.py --members 3 --messages 20000 --size 1000 --order total
    python benchmarks/bench_netns.py --members 3 --messages 2500 --size 1000 --order total --rate 250 --json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import netns  # noqa: E402

from sgcs.apps.bench import BenchError, BenchOptions, parse_settings, run_bench  # noqa: E402
from sgcs.errors import UsageError  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--members", type=int, default=3)
    parser.add_argument("--messages", type=int, default=20_000, help="per member")
    parser.add_argument("--size", type=int, default=1_000, help="bytes per message")
    parser.add_argument("--order", default="total")
    parser.add_argument("--rate", type=float, help="messages per second per member (default: unpaced)")
    parser.add_argument("--timeout", type=float, help="seconds for the whole run")
    parser.add_argument("--json", action="store_true", help="print the JSON report")
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=JSON", dest="settings",
                        help="a protocol Config field for every member, as sgcs bench --set (repeatable)")
    args = parser.parse_args(argv)
    problem = netns.unavailable()
    if problem:
        print(f"bench_netns: {problem}", file=sys.stderr)
        return 2
    with netns.hosts(args.members) as hosts:
        try:
            options = BenchOptions(members=args.members, messages=args.messages, size=args.size, order=args.order,
                                   rate=args.rate, timeout=args.timeout, settings=parse_settings(args.settings),
                                   hosts=tuple((hosts.addresses[i], tuple(hosts.prefix(i)))
                                               for i in range(args.members)))
            report = run_bench(options, progress=False)
        except (BenchError, UsageError) as exc:
            print(f"bench_netns: error: {exc}", file=sys.stderr)
            return 1
    print(json.dumps(report.to_json(), indent=1) if args.json else report.summary())
    return 0


if __name__ == "__main__":
    sys.exit(main())
