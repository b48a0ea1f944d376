"""Kill -9 trials of 8 real sgcs processes: the wedge hunt of the
virtual-synchrony work.

Each trial runs ``../shared/bench/peers/kinship_membership.py --system sgcs
--scenario kill`` (8 members on loopback form one view, one is killed with
SIGKILL) and reads its JSON line. A trial *wedges* when some survivor never
installs a view without the victim within the harness's kill timeout (60 s).
Every other trial of ``--busy-every`` runs beside two busy loops that compete
for the cores, since the wedge showed only on a loaded machine.

Run: ``python benchmarks/kill_trials.py --trials 200 [--dump DIR]``. Prints
one line per trial and a summary: wedges, start-up failures, and the median
and maximum time until every survivor excluded the victim.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HARNESS = ROOT.parent / "shared" / "bench" / "peers" / "kinship_membership.py"


def _spin(stop_at: float) -> None:
    while time.time() < stop_at:
        pass


def trial(busy: bool, dump: Path | None, timeout: float) -> dict:
    env = dict(os.environ, SGCS_DIR=str(ROOT))
    command = [sys.executable, str(HARNESS), "--system", "sgcs", "--scenario", "kill"]
    if dump is not None:
        command += ["--dump", str(dump)]
    spinners = []
    if busy:
        stop_at = time.time() + timeout
        spinners = [multiprocessing.Process(target=_spin, args=(stop_at,), daemon=True) for _ in range(2)]
        for spinner in spinners:
            spinner.start()
    try:
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": "harness timed out"}
    finally:
        for spinner in spinners:
            spinner.terminate()
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        return {"error": f"no result (exit {done.returncode}): {done.stderr.strip()[-300:]}"}
    return json.loads(lines[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--busy-every", type=int, default=2, help="every k-th trial runs beside two busy loops")
    parser.add_argument("--dump", type=Path, help="write every member's events here for a trial that misses")
    parser.add_argument("--timeout", type=float, default=150.0, help="seconds per trial, harness included")
    args = parser.parse_args(argv)
    if not HARNESS.exists():
        parser.error(f"the harness is missing: {HARNESS}")
    detect: list[float] = []
    wedges = failures = 0
    for i in range(args.trials):
        busy = args.busy_every > 0 and i % args.busy_every == 1
        result = trial(busy, args.dump, args.timeout)
        if result.get("error") or result.get("converge_s") is None:
            failures += 1
            verdict = f"no start: {result.get('error')}"
        elif result.get("detect_all_s") is None:
            wedges += 1
            verdict = f"WEDGE: excluded by {result.get('detected_by')} of 7 {result.get('dump', '')}"
        else:
            detect.append(float(result["detect_all_s"]))
            verdict = f"all excluded in {result['detect_all_s']:.3f} s"
        print(f"trial {i + 1}/{args.trials} {'busy' if busy else 'idle'}: converge "
              f"{result.get('converge_s') or float('nan'):.2f} s, {verdict}", flush=True)
    print(f"summary: {args.trials} trials, {wedges} wedges, {failures} did not start; exclusion by every survivor: "
          + (f"median {statistics.median(detect):.3f} s, max {max(detect):.3f} s" if detect else "none"), flush=True)
    return 1 if wedges or failures else 0


if __name__ == "__main__":
    sys.exit(main())
