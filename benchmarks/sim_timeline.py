"""Wall time at each simulated second of one run: where in a run the time goes.

Usage::

    .venv/bin/python benchmarks/sim_timeline.py SCENARIO --out RUN [--duration S] [--nodes N] [--workers W]

Runs ``sgcs.sim.run.simulate`` (what ``sgcs simulate`` runs, with a trace
written to RUN) and prints ``wall  simulated`` each time the simulated clock
passes a whole second, then the summary's wall time. A run whose cost per
simulated second climbs is paying for state that grows (benchmarks/README.md,
"Session 17").
"""

from __future__ import annotations

import argparse
import contextlib
import time
from collections.abc import Callable, Iterator

import sgcs.sim.run as run
from sgcs.sim.scenario import load_scenario


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenario")
    parser.add_argument("--out", required=True)
    parser.add_argument("--duration", type=float)
    parser.add_argument("--nodes", type=int)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    started = time.perf_counter()
    last = [-1]

    @contextlib.contextmanager
    def timeline(total: float, show: bool) -> Iterator[Callable[[float], None]]:
        def update(simulated: float) -> None:
            if int(simulated) != last[0]:
                last[0] = int(simulated)
                print(f"{time.perf_counter() - started:8.1f} s wall  {simulated:6.2f} s simulated", flush=True)
        yield update

    run._progress_bar = timeline  # type: ignore[assignment]
    scenario = load_scenario(args.scenario, duration=args.duration, nodes=args.nodes)
    summary = run.simulate(scenario, args.out, progress=True, workers=args.workers)
    print(f"simulation {summary.wall_seconds:.1f} s, {time.perf_counter() - started:.1f} s in all")


if __name__ == "__main__":
    main()
