"""Per-key order against total order on the same flow graph, over loopback.

    PYTHONPATH=. SGCS_PURE_PYTHON=1 python benchmarks/flows_order.py [--members 3] [--publishers 3]
        [--batches 200] [--batch 10] [--issues 50] [--runs 3] [--keys random|owned] [--promises auto|gossip]

The graph is the max/current collapse plus a tally per issue; every state is
keyed by issue, so the service chooses per-key order (FIFO groups, each
issue's events multicast by its owner). The same graph with
``require_total_order()`` runs in a TOTAL group. Each run starts fresh
nodes in this process (one keeper, the others subscribing to the tally);
``--publishers`` of them publish ``--batches`` batches of ``--batch`` events
each over random issues, one batch at a time, waiting for each to be
delivered at the publisher (``publish`` returns once its events are applied
there). Measured per run:

* publish latency: the time ``publish`` waits, median and p99 over batches;
* throughput: events published / time from the first publish until every
  member's tally holds every event.

``--keys random``: every publisher publishes any issue, so most events go
through their owner (a unicast, then the owner's multicast). ``--keys
owned``: each publisher publishes only the issues it owns in the view (the
same issues in both modes), as when each exchange lists its own issues: no
forwarding. ``--promises gossip`` runs total order as sgcs does above 64
members (promises ride on the stability all-reduce, sgcs.Config.promises).

Runs alternate per-key and total (``--runs`` of each); the medians of the
per-run figures are printed, and the ratio total / per-key. Every run checks
that all tallies are equal and count every event once.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from typing import Any

import trio

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))

import sgcs  # noqa: E402
from _net import private_multicast  # type: ignore[import-not-found]  # noqa: E402
from sgcs.services.flows import FlowGraph, open_flows  # noqa: E402
from sgcs.services.flows.perkey import owner  # noqa: E402

GRAPH = """
name = "market"
per_key_order = true
[spaces.quotes]
fields = "issue: str, price: float, volume: float"
[spaces.prices]
key = "issue: str"
values = "maxPrice: float, curPrice: float"
[spaces.tally]
key = "issue: str"
values = "n: int, last: float"
[[arcs]]
from = "quotes"
to = "prices"
collapse = ["[i,p,v] -> <i: p, p>",
            "[i,p,v], <i: maxP, curP>, p > maxP -> <i: p, p>",
            "[i,p,v], <i: maxP, curP>, p <= maxP -> <i: maxP, p>"]
[[arcs]]
from = "quotes"
to = "tally"
collapse = ["[i,p,v] -> <i: 1, p>", "[i,p,v], <i: n, l> -> <i: n + 1, p>"]
"""
SECRET = b"flows order benchmark secret"


def graph_for(mode: str) -> FlowGraph:
    graph = FlowGraph.from_toml(GRAPH)
    if mode == "total":
        graph.require_total_order()
    assert graph.order_for("quotes")[0] == ("perkey" if mode == "perkey" else "total")
    return graph


async def one_run(mode: str, args: argparse.Namespace, seed: int) -> dict[str, float]:
    graph, net = graph_for(mode), private_multicast(beacon_interval=0.1)
    rng = random.Random(seed)
    latencies: list[float] = []
    async with trio.open_nursery() as nursery:
        members: list[Any] = []
        ready = trio.Event()
        done = trio.Event()

        async def member(index: int) -> None:
            config = sgcs.Config(name=f"m{index}", secret=SECRET, promises=args.promises, **net)
            async with sgcs.open_node(config) as node, open_flows(node, graph, keeper=index == 0) as flows:
                tally = flows.kept("tally") if index == 0 else await flows.subscribe("tally")
                members.append((flows, tally))
                if len(members) == args.members:
                    ready.set()
                await done.wait()
        for index in range(args.members):
            nursery.start_soon(member, index)
        await ready.wait()
        (group,) = members[0][0].engine.groups
        with trio.fail_after(30):
            while any(len(f.view(group)) < args.members or len(f.engine.groups[group].peers) < args.members - 1
                      for f, _ in members):
                await trio.sleep(0.02)
            for _, tally in members:
                await tally.ready()
        await trio.sleep(0.5)  # every subscription announced: publishers filter alike in both modes
        total_events = args.publishers * args.batches * args.batch

        issues = [f"I{i:03d}" for i in range(args.issues)]

        async def publish(flows: Any) -> None:
            mine = issues
            if args.keys == "owned":
                view = tuple(sorted(flows.view(group)))
                mine = [i for i in issues if owner((i,), view) == flows.node.id]
            for _ in range(args.batches):
                batch = [(rng.choice(mine), float(rng.randrange(1, 1000)), 1.0) for _ in range(args.batch)]
                started = time.perf_counter()
                await flows.publish("quotes", batch)
                latencies.append(time.perf_counter() - started)
        started = time.perf_counter()
        async with trio.open_nursery() as publishers:
            for flows, _ in members[:args.publishers]:
                publishers.start_soon(publish, flows)
        with trio.fail_after(60):
            while any(sum(r[0] for r in tally.rows().values()) < total_events for _, tally in members):
                await trio.sleep(0.002)
        elapsed = time.perf_counter() - started
        rows = [tally.rows() for _, tally in members]
        assert all(r == rows[0] for r in rows) and sum(r[0] for r in rows[0].values()) == total_events
        forwarded = sum(f.statistics().events_forwarded for f, _ in members)
        done.set()
    latencies.sort()
    return {"events_per_s": total_events / elapsed, "latency_ms_median": 1000 * statistics.median(latencies),
            "latency_ms_p99": 1000 * latencies[int(0.99 * (len(latencies) - 1))], "forwarded": forwarded}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--members", type=int, default=3)
    parser.add_argument("--publishers", type=int, default=3)
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--batch", type=int, default=10)
    parser.add_argument("--issues", type=int, default=50)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--keys", choices=("random", "owned"), default="random")
    parser.add_argument("--promises", choices=("auto", "gossip"), default="auto")
    args = parser.parse_args()
    if not 1 <= args.publishers <= args.members:
        parser.error("--publishers must be between 1 and --members")
    results: dict[str, list[dict[str, float]]] = {"perkey": [], "total": []}
    for run in range(args.runs):
        for mode in ("perkey", "total"):  # alternated, so drift on a shared machine hits both
            result = trio.run(one_run, mode, args, run)
            results[mode].append(result)
            print(f"run {run + 1} {mode:6}: {result['events_per_s']:8.0f} events/s, publish latency median"
                  f" {result['latency_ms_median']:6.2f} ms, p99 {result['latency_ms_p99']:6.2f} ms,"
                  f" forwarded {result['forwarded']:.0f}", flush=True)
    medians = {mode: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for mode, rs in results.items()}
    for mode, m in medians.items():
        print(f"median {mode:6}: {m['events_per_s']:8.0f} events/s, publish latency median {m['latency_ms_median']:.2f}"
              f" ms, p99 {m['latency_ms_p99']:.2f} ms")
    print(f"per-key / total: throughput x{medians['perkey']['events_per_s'] / medians['total']['events_per_s']:.2f},"
          f" median latency x{medians['perkey']['latency_ms_median'] / medians['total']['latency_ms_median']:.2f},"
          f" p99 latency x{medians['perkey']['latency_ms_p99'] / medians['total']['latency_ms_p99']:.2f}")


if __name__ == "__main__":
    main()
