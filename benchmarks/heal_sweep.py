"""Partition-heal sweep: the 14-node churn scenario with one partition of each
duration, in causal, total and safe order, every invariant checked.

A partition that heals while the two sides are still agreeing on their own
views is the hardest moment for virtual synchrony: one side may be left out of
the other's commit. This sweep runs the churn scenario of
``tests/test_sim_membership.py`` (a crash, a pause, two joins, a recovery, a
leave) with its partition lasting 0.2, 0.4, ... 4.0 s, several seeds each,
and counts invariant violations (``sgcs.sim.checks.violations``, which
includes invariant 8: every multicast of a live sender has an outcome there).

Run: ``python benchmarks/heal_sweep.py [--orders total,safe,causal]
[--seeds 5] [--durations 0.2:4.0:0.2] [--jobs 2]``. Each failing run prints
the command that replays it.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

NETWORK = {"latency_ms": {"median": 1.0, "sigma": 0.5}, "loss": 0.03, "duplicate": 0.01}
PARTITION_AT = 8.0
SIDES = [[0, 1, 2, 3, 4, 6], [7, 8, 9, 10, 11, 12, 13]]


def churn(heal_after: float) -> list[dict]:
    """The churn of ``tests/test_sim_membership.py`` with a partition of ``heal_after`` seconds."""
    return [
        {"at": 2.0, "crash": [5]},
        {"at": 4.0, "pause": [7], "for": 3.0},
        {"at": 5.0, "join": [12, 13]},
        {"at": PARTITION_AT, "partition": SIDES},
        {"at": round(PARTITION_AT + heal_after, 3), "heal": True},
        {"at": 14.0, "recover": [5]},
        {"at": 17.0, "leave": [9]},
    ]


def scenario_text(order: str, seed: int, heal_after: float) -> str:
    from _scenario import group, scenario_toml

    return scenario_toml(seed=seed, nodes=14, duration=24.0, network=NETWORK,
                         groups=[group(order=order, rate=25.0, size=64)], faults=churn(heal_after))


def run_one(order: str, seed: int, heal_after: float) -> tuple[str, int, float, dict[str, int], str]:
    from sgcs.sim.checks import read_events, violations
    from sgcs.sim.run import simulate
    from sgcs.sim.scenario import load_scenario

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"heal-{order}-{seed}-{heal_after}.toml"
        path.write_text(scenario_text(order, seed, heal_after))
        scenario = load_scenario(path)
        simulate(scenario, Path(tmp) / "run", progress=False)
        found = violations(read_events(Path(tmp) / "run"))
        if order == "causal":
            found.pop("3_total")
        return order, seed, heal_after, found, scenario_text(order, seed, heal_after)


def durations(spec: str) -> list[float]:
    low, high, step = (float(x) for x in spec.split(":"))
    count = int(round((high - low) / step)) + 1
    return [round(low + i * step, 3) for i in range(count)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--orders", default="causal,total,safe")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--first-seed", type=int, default=1)
    parser.add_argument("--durations", default="0.2:4.0:0.2", help="low:high:step, in seconds")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args(argv)
    runs = [(o, s, d) for o in args.orders.split(",") for d in durations(args.durations)
            for s in range(args.first_seed, args.first_seed + args.seeds)]
    started = time.monotonic()
    totals: dict[str, int] = {}
    failing = 0
    with ProcessPoolExecutor(args.jobs) as pool:
        for order, seed, heal, found, text in pool.map(run_one, *zip(*runs)):
            for key, n in found.items():
                totals[key] = totals.get(key, 0) + n
            bad = {k: n for k, n in found.items() if n}
            if bad:
                failing += 1
                print(f"FAIL {order} seed {seed} partition {heal} s: {bad}; replay: write the scenario below to "
                      f"x.toml and run `sgcs simulate x.toml`\n{text}", flush=True)
            else:
                print(f"ok   {order} seed {seed} partition {heal} s", flush=True)
    elapsed = time.monotonic() - started
    print(f"summary: {len(runs)} runs, {failing} with violations, {elapsed:.0f} s; totals {totals}")
    return 1 if failing else 0


if __name__ == "__main__":
    sys.exit(main())
