"""Gossip rounds for heartbeat news to reach every member, in the simulator.

Usage::

    python benchmarks/news_rounds.py [--sizes 64,1024] [--seconds 12] [--loss 0] [--busy-half] [--json OUT]

Theory of operation
-------------------
The SGCS paper (section 4.1) sends each round's heartbeat list to the member
at ``self + 2**(r-1)``, so that with synchronous rounds and nothing lost a
counter reaches every member in ceil(log2 N) rounds; with per-node clocks out
of phase a member may pass on news in the round it received it, so it often
takes fewer. This script measures the distribution on whole nodes
(``sgcs.node.Node``, the roster form of the heartbeat) in the simulator, whose
nodes each run on their own clock (a random offset and drift, so their gossip
rounds are out of phase).

One group of every node, 1 ms median latency (lognormal), no application
traffic, or with ``--busy-half`` a seeded random half of the members
multicasting about once per gossip round (``benchmarks/claims_sim.py``,
``busy_half``) while the other half never does; then only the quiet members'
news is followed, the news that busy members have to relay.

* Made: a ``Simulator`` subclass reads a node's own counter around each of its
  timer events; when it rose, that value was made then (exact simulated time).
* Known everywhere: every ``--sample`` of a round (0.1 by default) the minimum
  over all nodes of their counter tables is taken (every node holds the same
  sorted member list once the view is installed; samples before that are
  skipped); a value is known everywhere at the first sample where that
  minimum reaches it.
* Rounds = (known - made) / gossip_interval, for the values made after a
  warm-up of 3 s and at least 4 ceil(log2 N) rounds before the end (later
  ones could not finish); values that did not finish by the end are counted
  as ``unfinished``. The sampling rounds each figure up by at most one
  sample period.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

if __name__ == "__main__":  # run as a script: the repository (benchmarks, simulations) goes on the path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.claims_sim import _busy_half_simulator, busy_half  # noqa: E402

GOSSIP = 0.1
WARM_UP = 3.0


def _recording(base: type) -> type:
    """``base`` (a ``Simulator``) that records when each node's own counter rises."""

    class Recording(base):  # type: ignore[misc, valid-type]
        made: list[tuple[int, float, int]]

        def _timer(self, t: float, node_id: int, incarnation: int, x: Any) -> None:
            node = self.nodes[node_id]
            before = _own_counter(node)
            super()._timer(t, node_id, incarnation, x)
            after = _own_counter(node)
            if after is not None and after != before:
                self.made.append((node_id, t, after))

    return Recording


def _own_counter(node: Any) -> int | None:
    if node is None:
        return None
    det = node.detector
    return int(det.counters[det._index[det.me]])


def measure(n: int, seconds: float, loss: float, busy: bool, sample: float, seed: int, work: Path) -> dict[str, Any]:
    from sgcs.sim.scenario import build_scenario
    from sgcs.sim.simulator import Simulator, no_collections

    scenario = build_scenario({
        "seed": seed, "nodes": n, "duration": seconds,
        "network": {"latency_ms": {"median": 1.0, "sigma": 0.5}, "loss": loss},
        "protocol": {"gossip_interval": GOSSIP, "max_members": max(n, 4_096)},
        "groups": [{"name": "g", "order": "fifo", "members": "all", "rate": 5.0 * n if busy else 0.0,
                    "size": 64}],
    })
    busy_set = busy_half(seed, n) if busy else frozenset()
    base = _busy_half_simulator(busy_set) if busy else Simulator
    cls = _recording(base)
    out = work / f"news-{n}-{'busy' if busy else 'idle'}"
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    sim = cls(scenario, out)
    sim.made = []
    times: list[float] = []
    lows: list[np.ndarray] = []
    with no_collections():
        sim.start()
        with sim.running() as advance:
            steps = int(seconds / (sample * GOSSIP))
            for k in range(1, steps + 1):
                t = k * sample * GOSSIP
                advance(t)
                low = _table_minimum(sim.nodes, n)
                if low is not None:
                    times.append(t)
                    lows.append(low)
        sim.finish()
    wall = time.perf_counter() - started
    rounds, unfinished = _rounds(sim.made, times, lows, n, seconds, busy_set)
    return _summary(n, loss, busy, sample, rounds, unfinished, wall)


def _table_minimum(nodes: list[Any], n: int) -> np.ndarray | None:
    """Per member, the lowest counter any node holds; None until every node watches all ``n``."""
    tables = [node.detector.counters for node in nodes if node is not None]
    if len(tables) != n or any(len(table) != n for table in tables):
        return None
    return np.minimum.reduce(tables)


def _rounds(made: list[tuple[int, float, int]], times: list[float], lows: list[np.ndarray], n: int,
            seconds: float, busy: frozenset[int]) -> tuple[np.ndarray, int]:
    if not times:
        return np.zeros(0), 0
    t = np.array(times)
    low = np.stack(lows)  # samples x members, non-decreasing down each column (no wrap in a short run)
    last_judged = seconds - 4 * math.ceil(math.log2(n)) * GOSSIP
    delays: list[float] = []
    unfinished = 0
    for origin, at, value in made:
        if origin in busy or at < max(WARM_UP, t[0]) or at > last_judged:
            continue
        column = low[:, origin]
        first = int(np.searchsorted(column, value, side="left"))
        if first >= len(t):
            unfinished += 1
            continue
        first = max(first, int(np.searchsorted(t, at, side="left")))
        delays.append((t[first] - at) / GOSSIP)
    return np.array(delays), unfinished


def _summary(n: int, loss: float, busy: bool, sample: float, rounds: np.ndarray, unfinished: int,
             wall: float) -> dict[str, Any]:
    d = math.ceil(math.log2(n))
    out: dict[str, Any] = {"n": n, "loss": loss, "busy_half": busy, "log2_n": math.log2(n), "ceil_log2_n": d,
                           "values": int(len(rounds)), "unfinished": unfinished, "resolution_rounds": sample,
                           "wall": wall}
    if len(rounds):
        out.update({"median": float(np.median(rounds)), "p90": float(np.percentile(rounds, 90)),
                    "p99": float(np.percentile(rounds, 99)), "max": float(rounds.max()),
                    "within_ceil_log2_n": float((rounds <= d + sample / 2).mean())})
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="64,1024", help="comma-separated N")
    parser.add_argument("--seconds", type=float, default=12.0, help="simulated seconds per run")
    parser.add_argument("--loss", type=float, default=0.0, help="per datagram per receiver")
    parser.add_argument("--busy-half", action="store_true",
                        help="half the members multicast about once per round; follow the quiet half's news")
    parser.add_argument("--sample", type=float, default=0.1, help="sampling period, in gossip rounds")
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None, help="write the figures to this file")
    args = parser.parse_args(argv)
    try:
        sizes = [int(s) for s in args.sizes.split(",")]
    except ValueError:
        parser.error(f"--sizes: comma-separated integers, got {args.sizes!r}")
    if any(s < 2 for s in sizes) or not 0 <= args.loss < 1 or not 0 < args.sample <= 1:
        parser.error("--sizes >= 2, 0 <= --loss < 1, 0 < --sample <= 1")
    if args.seconds < WARM_UP + 4 * math.ceil(math.log2(max(sizes))) * GOSSIP + 1:
        parser.error(f"--seconds too short to judge any value at N={max(sizes)}")
    results = []
    print("| N | traffic | loss | values | median | p90 | p99 | max | <= ceil(log2 N) | unfinished | wall s |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory(prefix="sgcs-news-") as tmp:
        for n in sizes:
            r = measure(n, args.seconds, args.loss, args.busy_half, args.sample, args.seed, Path(tmp))
            results.append(r)
            traffic = "half busy (quiet half's news)" if r["busy_half"] else "none"
            if r["values"]:
                print(f"| {n:,} | {traffic} | {r['loss']:g} | {r['values']:,} | {r['median']:.1f} | {r['p90']:.1f} "
                      f"| {r['p99']:.1f} | {r['max']:.1f} | {r['within_ceil_log2_n']:.1%} (d={r['ceil_log2_n']}) "
                      f"| {r['unfinished']} | {r['wall']:.0f} |", flush=True)
            else:
                print(f"| {n:,} | {traffic} | {r['loss']:g} | 0 | | | | | | {r['unfinished']} | {r['wall']:.0f} |",
                      flush=True)
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
