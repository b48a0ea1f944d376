"""Members starting together: count the views that a live member they list never installs.

Five simulated members, total order, 1% loss, join within ``--spread``
seconds of each other (node 0 first), for 8 simulated seconds; every
invariant checked. A view installed by only some of the members it lists
means one of them skipped it: 88 of 798 such start-ups had one while a
coordinator proposed again before every INSTALLED of its last commit came (a
member that missed the commit took the next proposal); 0 since it waits
(docs/guarantees.md).

Run: ``python benchmarks/startup_sweep.py [--seeds 1:400] [--spreads 0.05,0.3]``.
Prints each run with a partial view or a violation (with its seed), then a
summary line.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]


def scenario_text(seed: int, spread: float, loss: float = 0.01) -> str:
    rng = random.Random(seed)
    lines = [f"seed = {seed}", "nodes = 5", "duration = 8.0", "[network]",
             "latency_ms = { median = 1.0, sigma = 0.5 }", f"loss = {loss}", "duplicate = 0.0",
             "[[groups]]", 'name = "g"', 'order = "total"', 'members = "all"', "rate = 20.0", "size = 64"]
    for node in range(1, 5):
        lines += ["[[faults]]", f"at = {round(rng.uniform(0.0, spread), 3)}", f"join = [{node}]"]
    return "\n".join(lines) + "\n"


def run_one(seed: int, spread: float) -> tuple[list[str], dict[str, int]]:
    """(views a listed member never installed, violated invariants and their counts)."""
    from sgcs.sim.checks import read_events, violations
    from sgcs.sim.run import simulate
    from sgcs.sim.scenario import load_scenario

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "startup.toml"
        path.write_text(scenario_text(seed, spread))
        simulate(load_scenario(path), Path(tmp) / "run", progress=False)
        events = read_events(Path(tmp) / "run")
    views = events[(events["kind"] == "view") & (events["optimistic"] != True)]  # noqa: E712
    partial = sorted(v for v, rows in views.groupby("view_id") if set(rows["members"].iloc[0]) - set(rows["node"]))
    return partial, {k: n for k, n in violations(events).items() if n}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", default="1:400", help="first:last (last excluded)")
    parser.add_argument("--spreads", default="0.05,0.3", help="join spreads in seconds, comma-separated")
    args = parser.parse_args(argv)
    first, last = (int(x) for x in args.seeds.split(":"))
    spreads = [float(x) for x in args.spreads.split(",")]
    started, runs, bad = time.monotonic(), 0, 0
    for seed in range(first, last):
        for spread in spreads:
            partial, found = run_one(seed, spread)
            runs += 1
            if partial or found:
                bad += 1
                print(f"seed {seed} spread {spread}: partial views {partial}, violations {found}", flush=True)
    print(f"summary: {runs} start-ups, {bad} with a partial view or a violation, {time.monotonic() - started:.0f} s")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
