"""Two fault storms that an independent trace check found broke invariants,
run again with every invariant checked (``sgcs.sim.checks.violations``).

* ``heal-window``: 16 nodes, 1% loss, three groups of all 16 members (total
  order 20 msg/s, safe 10 msg/s, causal 10 msg/s), five partitions of random
  sides that each heal after 1.2 to 2.4 s, one every 8 s.
* ``storm``: 14 nodes, 2% loss, 1% duplication, a total-order group (20
  msg/s) and a safe-order group (10 msg/s) of 12 members: a partition with
  two joins during it, a crash of the lowest id, a heal after 2.8 s with a
  1.2 s pause right after it, a recovery, the next two lowest ids crashed,
  two more partitions of 1.4 and 1.5 s, recoveries, a leave, a 2.5 s pause.

Run: ``python benchmarks/evidence.py [--shape heal-window|storm|both]
[--seeds 1:8] [--jobs 2]``. A failing run prints its scenario, which
``sgcs simulate`` replays.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]


def heal_window(seed: int) -> tuple[dict[str, Any], list[str]]:
    rng = random.Random(seed)
    faults: list[dict[str, Any]] = []
    for i in range(5):
        at = 6.0 + 8.0 * i
        side = sorted(rng.sample(range(16), rng.randint(3, 7)))
        faults.append({"at": at, "partition": [side, [n for n in range(16) if n not in side]]})
        faults.append({"at": round(at + rng.uniform(1.2, 2.4), 2), "heal": True})
    fields = {"seed": seed, "nodes": 16, "duration": 50.0,
              "network": {"latency_ms": {"median": 1.0, "sigma": 0.5}, "loss": 0.01, "duplicate": 0.0},
              "groups": [_group("t", "total", 20.0, "all"), _group("s", "safe", 10.0, "all"),
                         _group("c", "causal", 10.0, "all")],
              "faults": faults}
    return fields, ["t", "s", "c"]


def storm(seed: int) -> tuple[dict[str, Any], list[str]]:
    members = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 13]
    faults = [
        {"at": 5.0, "partition": [[0, 1, 2, 3, 4, 5, 10, 12], [6, 7, 8, 9, 11, 13]]},
        {"at": 6.0, "join": [12, 13]}, {"at": 7.0, "crash": [0]},
        {"at": 7.8, "heal": True}, {"at": 7.9, "pause": [3], "for": 1.2}, {"at": 12.0, "recover": [0]},
        {"at": 14.0, "crash": [1, 2]},
        {"at": 17.0, "partition": [[0, 3, 4, 5, 6, 10], [1, 2, 7, 8, 9, 11, 12, 13]]},
        {"at": 18.4, "heal": True}, {"at": 20.0, "recover": [1, 2]},
        {"at": 22.0, "partition": [[0, 1, 2, 3, 4, 5, 6], [7, 8, 9, 10, 11, 12, 13]]}, {"at": 23.5, "heal": True},
        {"at": 25.0, "leave": [9]}, {"at": 26.0, "pause": [5], "for": 2.5},
    ]
    fields = {"seed": seed, "nodes": 14, "duration": 34.0,
              "network": {"latency_ms": {"median": 1.0, "sigma": 0.5}, "loss": 0.02, "duplicate": 0.01},
              "groups": [_group("t", "total", 20.0, members), _group("s", "safe", 10.0, members)],
              "faults": faults}
    return fields, ["t", "s"]


def _group(name: str, order: str, rate: float, members: Any) -> dict[str, Any]:
    return {"name": name, "members": members, "order": order, "rate": rate, "size": 64}


SHAPES = {"heal-window": heal_window, "storm": storm}


def run_one(shape: str, seed: int) -> tuple[str, int, dict[str, dict[str, int]], str]:
    from _scenario import scenario_toml
    from sgcs.sim.checks import read_events, violations
    from sgcs.sim.run import simulate
    from sgcs.sim.scenario import load_scenario

    fields, groups = SHAPES[shape](seed)
    text = scenario_toml(**fields)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{shape}-{seed}.toml"
        path.write_text(text)
        simulate(load_scenario(path), Path(tmp) / "run", progress=False)
        events = read_events(Path(tmp) / "run")
    found: dict[str, dict[str, int]] = {}
    for group in groups:
        counts = violations(events[(events["group"] == group) | events["group"].isna()])
        if dict(fields["groups"][groups.index(group)])["order"] == "causal":
            counts.pop("3_total")
        found[group] = {k: n for k, n in counts.items() if n}
    return shape, seed, found, text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", choices=[*SHAPES, "both"], default="both")
    parser.add_argument("--seeds", default="1:8", help="first:last, inclusive")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args(argv)
    first, last = (int(x) for x in args.seeds.split(":"))
    shapes = list(SHAPES) if args.shape == "both" else [args.shape]
    runs = [(shape, seed) for shape in shapes for seed in range(first, last + 1)]
    started, failing = time.monotonic(), 0
    with ProcessPoolExecutor(args.jobs) as pool:
        for shape, seed, found, text in pool.map(run_one, *zip(*runs)):
            bad = {g: f for g, f in found.items() if f}
            failing += bool(bad)
            print(f"{'FAIL' if bad else 'ok  '} {shape} seed {seed}: {bad or 'every invariant holds'}", flush=True)
            if bad:
                print(text, flush=True)
    print(f"summary: {len(runs)} runs, {failing} with violations, {time.monotonic() - started:.0f} s")
    return 1 if failing else 0


if __name__ == "__main__":
    sys.exit(main())
