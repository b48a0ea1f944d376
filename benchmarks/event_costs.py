"""Where a simulation's time goes, by event type: count, seconds and microseconds per event.

Usage::

    python benchmarks/event_costs.py SCENARIO [--nodes N] [--duration S]

Runs the scenario once in this process (compiled when built) with every event
handler of the simulator timed: datagram arrivals by message type (``data``,
``digest``, ``heartbeat``, ...), node timer wakeups, and the rest by event kind.
Each handler's time includes the protocol work it triggers and the actions it
carries out; the timing itself adds about a microsecond per event. Answers
"which kind of event should get cheaper", which a profile of compiled code,
whose frames are inlined, often cannot.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import tomllib
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Callable

if __name__ == "__main__":  # run as a script: the repository goes on the path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sgcs.sim.engine import ARRIVE, TIMER  # noqa: E402
from sgcs.sim.scenario import build_scenario  # noqa: E402
from sgcs.sim.simulator import Simulator, no_collections  # noqa: E402

Handler = Callable[[float, int, Any, Any], None]


def timed(kind: int, handler: Handler, seconds: defaultdict[str, float], counts: Counter[str]) -> Handler:
    clock = time.perf_counter

    def run(t: float, node: int, a: Any, b: Any) -> None:
        label = f"arrive:{b[2]}" if kind == ARRIVE else "timer" if kind == TIMER else f"kind {kind}"
        start = clock()
        handler(t, node, a, b)
        seconds[label] += clock() - start
        counts[label] += 1

    return run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenario")
    parser.add_argument("--nodes", type=int)
    parser.add_argument("--duration", type=float)
    args = parser.parse_args(argv)
    raw = tomllib.loads(Path(args.scenario).read_text())
    if args.nodes:
        raw["nodes"] = args.nodes
    if args.duration:
        raw["duration"] = args.duration
    seconds: defaultdict[str, float] = defaultdict(float)
    counts: Counter[str] = Counter()
    with tempfile.TemporaryDirectory() as out, no_collections():
        simulator = Simulator(build_scenario(raw, args.scenario), Path(out))
        simulator._dispatch = tuple(timed(kind, handler, seconds, counts)
                                    for kind, handler in enumerate(simulator._dispatch))
        started = time.perf_counter()
        simulator.run()
        wall = time.perf_counter() - started
        del simulator
    total = sum(seconds.values())
    print(f"{raw['nodes']} nodes, {raw['duration']} simulated s: {wall:.1f} s wall, {total:.1f} s in handlers")
    print("| event | count | s | us each | share |\n|---|---:|---:|---:|---:|")
    for label, spent in sorted(seconds.items(), key=lambda item: -item[1]):
        print(f"| {label} | {counts[label]:,} | {spent:.2f} | {spent / counts[label] * 1e6:.1f} | {spent / total:.1%} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
