"""Long randomized exploration of the protocol's property machines.

Runs the hypothesis state machines (``tests/test_node.py``: the adversarial
network in FIFO, causal, total and safe order, with crashes and restarts;
``tests/test_membership_properties.py``: membership under loss, pauses,
crashes, restarts and joins, FIFO and total) again and again with fresh seeds
until the time budget is spent, and reports examples run and violations
found, each with the command that replays it.

Run: ``python benchmarks/explore.py --minutes 60 [--examples 200]``.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGETS = ["tests/test_node.py", "tests/test_membership_properties.py"]
MACHINES = "adversarial or membership_network"
MACHINE_COUNT = 10
"""Machines the selection runs: 4 adversarial orders and 2 membership orders,
the total and safe orders (adversarial) and total order (membership) with
promises by gossip, and FIFO membership with the ring form of the detector."""


def run_round(seed: int, examples: int) -> tuple[bool, str]:
    env = dict(os.environ, SGCS_ADVERSARIAL_EXAMPLES=str(examples), SGCS_MEMBERSHIP_EXAMPLES=str(examples))
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *TARGETS, "-k", MACHINES,
               f"--hypothesis-seed={seed}"]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    failed = re.findall(r"^FAILED (\S+)", done.stdout, re.M)
    return done.returncode == 0, ", ".join(failed) or done.stdout[-300:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--examples", type=int, default=200, help="examples per machine per round")
    args = parser.parse_args(argv)
    deadline = time.monotonic() + args.minutes * 60
    rounds = examples = 0
    violations: list[str] = []
    while time.monotonic() < deadline:
        seed = random.SystemRandom().getrandbits(32)
        ok, detail = run_round(seed, args.examples)
        rounds += 1
        examples += args.examples * MACHINE_COUNT  # an upper bound when a machine stops at its first failure
        if not ok:
            violations.append(f"seed {seed}: {detail}; replay: SGCS_ADVERSARIAL_EXAMPLES={args.examples} "
                              f"SGCS_MEMBERSHIP_EXAMPLES={args.examples} pytest {' '.join(TARGETS)} "
                              f"-k '{MACHINES}' --hypothesis-seed={seed}")
        print(f"round {rounds} seed {seed}: {'ok' if ok else 'VIOLATION ' + detail}", flush=True)
    print(f"summary: {rounds} rounds, about {examples} examples, {len(violations)} violations", flush=True)
    for line in violations:
        print(line)
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
