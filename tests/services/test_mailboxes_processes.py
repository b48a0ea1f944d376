"""Exactly once with real processes: post offices killed with SIGKILL and
restarted from SQLite while MIs move and payloads are duplicated and
reordered (a small run of benchmarks/mailboxes_crash.py; issue 20)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_kill_nine_during_moves_loses_and_repeats_nothing() -> None:
    command = [sys.executable, str(ROOT / "benchmarks" / "mailboxes_crash.py"), "--domains", "3", "--per-domain", "2",
               "--mails", "1200", "--burst", "1", "--kill-every", "1.5", "--move-min", "0.2", "--move-max", "0.6",
               "--duplicate", "0.2", "--reorder", "0.2", "--timeout", "50", "--seed", "3"]
    run = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    out = run.stdout
    figures = {k: int(v) for k, v in re.findall(r"^\s+(\w+): (\d+)$", out, re.M)}
    kills = int(re.search(r"(\d+) kills$", out, re.M).group(1))  # type: ignore[union-attr]
    assert kills >= 1, out
    assert figures["sent"] == 1200 and figures["delivered"] == 1200, out + run.stderr
    assert figures["lost"] == figures["duplicated"] == figures["out_of_order"] == 0, out
    assert run.returncode == 0, out + run.stderr
