"""Repeat the real-process acceptance runs and count what went wrong.

* ``loopback``: ``tests/test_real_traces.py``'s five members in total order
  with a kill (real processes on 127.0.0.1, a shared trace).
* ``namespaces``: the same run on three network namespaces, over IP
  multicast and over the peer-list fallback (``tests/test_namespaces.py``;
  needs root).

Each run is one pytest process; its figures line ("views installed by only
some of their live members: [...]; violations {...}; views not installed by a
member that was leaving: [...]") is parsed. Prints, per kind: runs,
failures, runs with a view installed by only some of its live members, runs
with a view that a member leaving gracefully missed (its leave crossed the
commit), and the sum of each invariant's violations.

Run: ``python benchmarks/real_runs.py --kind loopback --runs 50``.
"""

from __future__ import annotations

import argparse
import ast
import os
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KINDS = {
    "loopback": ["tests/test_real_traces.py", "-k", "five_members_total_order_with_a_kill"],
    "namespaces": ["tests/test_namespaces.py"],
}
_FIGURES = re.compile(r"views installed by only some of their live members: (\[.*?\]); violations (\{.*?\})"
                      r"(?:; views not installed by a member that was leaving: (\[.*?\]))?")


Figures = list[tuple[list[str], dict[str, int], list[str]]]
"""Per cluster run: views installed by only some live members, violations, views a leaving member missed."""


def run_once(kind: str, keep: Path | None = None) -> tuple[bool, Figures, str]:
    """One pytest process. With ``keep`` (a file path), a run that fails or
    installs a partial view leaves its output there and its traces beside it
    (``keep`` without the suffix), for the trace checker to read again."""
    base = None if keep is None else keep.with_suffix("")
    command = [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", *KINDS[kind]]
    if base is not None:
        command.append(f"--basetemp={base}")
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, env=dict(os.environ), timeout=900)
    figures = [(ast.literal_eval(partial), ast.literal_eval(found), ast.literal_eval(leaving or "[]"))
               for partial, found, leaving in _FIGURES.findall(done.stdout)]
    if keep is not None and base is not None:
        if done.returncode != 0 or any(partial or leaving for partial, _, leaving in figures):
            keep.write_text(done.stdout + done.stderr)
        else:
            shutil.rmtree(base, ignore_errors=True)
    tail = "\n".join(done.stdout.strip().splitlines()[-3:])
    return done.returncode == 0, figures, tail


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kind", choices=sorted(KINDS), default="loopback")
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--keep", type=Path, default=None, help="folder for the output and traces of runs that fail or install a partial view")
    args = parser.parse_args(argv)
    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    failed = partial_runs = members_runs = leaving_runs = 0
    totals: Counter[str] = Counter()
    for i in range(1, args.runs + 1):
        ok, figures, tail = run_once(args.kind, None if args.keep is None else args.keep / f"run-{i}.txt")
        failed += not ok
        for partial, found, leaving in figures:
            members_runs += 1
            partial_runs += bool(partial)
            leaving_runs += bool(leaving)
            totals.update(found)
        state = "ok" if ok else "FAIL"
        print(f"run {i}: {state}; {[(p, {k: n for k, n in f.items() if n}, q) for p, f, q in figures]}"
              + ("" if ok else f"\n{tail}"), flush=True)
    print(f"summary: {args.kind}, {args.runs} runs ({members_runs} cluster runs), {failed} failed, "
          f"{partial_runs} with a view installed by only some of its live members, {leaving_runs} with a view "
          f"a gracefully leaving member missed, violations {dict(totals)}, {time.monotonic() - started:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
