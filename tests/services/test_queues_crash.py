"""Store and forward with real processes and kill -9, a short run of
``benchmarks/queues_crash.py`` (the acceptance run sends 100,000 messages with
at least 10 kills of each process; this one 3,000 with 2 of each)."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_producer_manager_and_consumer_killed_and_restarted_lose_and_duplicate_nothing(tmp_path: Path) -> None:
    seed = random.SystemRandom().randrange(10**6)
    cmd = [sys.executable, str(ROOT / "benchmarks" / "queues_crash.py"), "--messages", "3000", "--kills", "2",
           "--rate", "300", "--kill-every", "1.0", "--seed", str(seed), "--dir", str(tmp_path), "--timeout", "120"]
    print("replay:", " ".join(cmd))
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert done.returncode in (0, 1), done.stdout + done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    # kills go round-robin at ~1 s; a producer that finished is not killed any more
    assert min(result["kills"].values()) >= 1 and sum(result["kills"].values()) >= 5, result
    assert result["remote_queue_commits_distinct_ids"] == 3000 and result["remote_queue_ids_committed_twice"] == 0
    assert result["consumer_recorded"] == 3000 and result["consumer_missing"] == 0
    assert result["producer_xmit_left"] == 0 and result["exactly_once"], result
