"""Flows: the figures docs/flows.md quotes, on one core, no network.

    PYTHONPATH=. SGCS_PURE_PYTHON=1 python benchmarks/flows_bench.py [match|filter|expand|compile|all]

* ``match``: events per second through 1,000 subscriptions of random
  predicates (one ``Matcher``: equal predicates shared, equalities and ranges
  indexed), against evaluating every distinct predicate (no index) and the
  1,000 compiled predicates one by one.
* ``filter``: bytes a publisher sends with and without publisher-side
  filtering, for subscribers to a few issues each (sans-I/O engines that
  exchanged their subscriptions as they would in a group).
* ``expand``: A* expansion against forward BFS on random state changes:
  time per key and sequence length.
* ``compile``: a few paths before and after R1-R3.
"""

from __future__ import annotations

import itertools
import os
import random
import statistics
import sys
import time
from typing import Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from sgcs.services.flows import (Collapse, EventSchema, FlowEngine, FlowGraph, State, StateSchema,  # noqa: E402
                                 compile_subscription, event_paths, wire)
from sgcs.services.flows.compiler import Matcher  # noqa: E402
from sgcs.services.flows.engine import Multicast  # noqa: E402
from sgcs.services.flows.evaluate import compile_predicate  # noqa: E402
from sgcs.services.flows.expand import Expander  # noqa: E402
from sgcs.services.flows.syntax import render  # noqa: E402

MARKET = """
name = "market"
[spaces.quotes]
fields = "issue: str, price: float, volume: float"
[spaces.trades]
fields = "name: str, price: float, value: float"
[spaces.big]
fields = "name: str, price: float, value: float"
[spaces.prices]
key = "issue: str"
values = "maxPrice: float, curPrice: float"
[[arcs]]
from = "quotes"
to = "trades"
transform = "[issue:i, price:p, volume:v] -> [name: NAS(i), price: p, value: p * v]"
[[arcs]]
from = "trades"
to = "big"
select = "value > 10000"
[[arcs]]
from = "quotes"
to = "prices"
collapse = ["[i,p,v] -> <i: p, p>",
            "[i,p,v], <i: maxP, curP>, p > maxP -> <i: p, p>",
            "[i,p,v], <i: maxP, curP>, p <= maxP -> <i: maxP, p>"]
"""
FEED = MARKET[:MARKET.index("[spaces.prices]")] + MARKET[MARKET.index("[[arcs]]"):MARKET.index('[[arcs]]\nfrom = "quotes"\nto = "prices"')]
"""The same without the state: nothing needs every event, so the publisher can filter."""
ISSUES = [f"I{i:03d}" for i in range(200)]


def random_predicate(rng: random.Random, anchored: bool = False) -> str:
    issue = f'issue = "{rng.choice(ISSUES)}"'
    price = f"price {rng.choice(['<', '>'])} {rng.randrange(10, 990)}"
    volume = f"volume > {rng.randrange(150, 200)}"
    shapes = [f"{issue} & {price}", f"{issue} | {volume}", f"({issue} & {price}) | {volume} & {price}", issue,
              f"{price} & {volume}"]
    return rng.choice([f"{issue} & {price}", f"{issue} & {volume}", issue] if anchored else shapes)


def events(rng: random.Random, count: int) -> list[tuple[str, float, float]]:
    return [(rng.choice(ISSUES), float(rng.randrange(1, 1000)), float(rng.randrange(1, 200))) for _ in range(count)]


def bench_match(subscriptions: int = 1_000, count: int = 20_000) -> None:
    for anchored in (False, True):
        _bench_match(subscriptions, count, anchored)


def _bench_match(subscriptions: int, count: int, anchored: bool) -> None:
    rng = random.Random(1)
    graph = FlowGraph.from_toml(MARKET)
    matcher = Matcher(graph, "quotes")
    texts = [random_predicate(rng, anchored) for _ in range(subscriptions)]
    for i, text in enumerate(texts):
        (path,) = compile_subscription(graph, "quotes", text).paths
        matcher.add(path, str(i))
    stream = events(rng, count)
    start = time.perf_counter()
    matched = sum(len(matcher.match(e)) for e in stream)
    shared = time.perf_counter() - start
    candidates, evaluated = matcher.candidates / count, matcher.evaluated / count
    start = time.perf_counter()
    unindexed = sum(len(matcher.match_unindexed(e)) for e in stream[: count // 4])
    every = (time.perf_counter() - start) * 4
    one_by_one = [compile_predicate(p.predicate) for t in texts for p in compile_subscription(graph, "quotes", t).paths]
    names = ("issue", "price", "volume")
    start = time.perf_counter()
    naive = sum(sum(1 for p in one_by_one if p(dict(zip(names, e)))) for e in stream[: count // 4])
    alone = (time.perf_counter() - start) * 4
    kind = "random predicates, each with an issue equality" if anchored else "random predicates (3 of 5 shapes unanchored)"
    print(f"match: {subscriptions} {kind}, {count} events: {count / shared:,.0f} events/s indexed "
          f"({len(matcher.entries)} distinct, {matcher.distinct_nodes} distinct nodes of {matcher.nodes_total};"
          f" {candidates:.1f} candidates, {evaluated:.1f} evaluated per event); every distinct predicate evaluated "
          f"{count / every:,.0f} events/s; one by one {count / alone:,.0f} events/s; {matched / count:.1f} matches "
          f"per event")
    assert naive >= 0 and unindexed >= 0  # (the matches are equal: tests/services/test_flows_index.py)


def bench_filter(subscribers: int = 10, per_subscriber: int = 5, count: int = 10_000, batch: int = 50) -> None:
    rng = random.Random(2)
    graph = FlowGraph.from_toml(FEED)
    publisher = FlowEngine(graph, "pub", 1)
    members = [1] + [10 + i for i in range(subscribers)]
    group = next(iter(publisher.groups))
    publisher.on_view(group, members)
    for i in range(subscribers):
        engine = FlowEngine(graph, f"s{i}", 10 + i)
        picks = rng.sample(ISSUES, per_subscriber)
        _, out = engine.subscribe("trades", " | ".join(f'name = "NAS:{p}"' for p in picks))
        announce = next(o for o in out if isinstance(o, Multicast))
        publisher.on_delivery(group, 10 + i, announce.payload, 0.0)
    stream = events(rng, count)
    for start in range(0, count, batch):
        publisher.publish("quotes", stream[start:start + batch])
    stats = publisher.statistics()
    unfiltered = sum(wire.encoded_events_size("quotes", stream[s:s + batch]) for s in range(0, count, batch))
    print(f"filter: {subscribers} subscribers x {per_subscriber} of {len(ISSUES)} issues, {count} events: sent "
          f"{stats.events_sent} events / {stats.bytes_sent:,} bytes instead of {count} / {unfiltered:,} "
          f"({100 * (1 - stats.bytes_sent / unfiltered):.1f} % saved at the publisher; "
          f"{stats.bytes_saved_at_publisher:,} bytes counting each of the {subscribers} receivers)")


def bench_expand(changes: int = 300) -> None:
    rng = random.Random(3)
    graph = FlowGraph.from_toml(MARKET)
    collapse = graph.collapse_of("prices")
    assert collapse is not None
    expander = Expander(collapse)
    astar_t, bfs_t, astar_len, bfs_len, exact = [], [], 0, 0, 0
    for _ in range(changes):
        state = State(collapse)
        state.apply_all(("X", float(rng.randrange(1, 50)), 0.0) for _ in range(rng.randrange(1, 4)))
        s0 = dict(state.rows)
        state.apply_all(("X", float(rng.randrange(1, 50)), 0.0) for _ in range(rng.randrange(1, 30)))
        t = time.perf_counter()
        found = expander.expand(s0, state.rows)
        astar_t.append(time.perf_counter() - t)
        t = time.perf_counter()
        shortest = expander.bfs_key(("X",), s0[("X",)], state.rows[("X",)])
        bfs_t.append(time.perf_counter() - t)
        assert shortest is not None
        astar_len += len(found.events)
        bfs_len += len(shortest)
        exact += len(found.events) == len(shortest)
    print(f"expand (max/current, {changes} random changes of 1-29 events): A* {statistics.median(astar_t) * 1e3:.2f} ms"
          f" median, mean length {astar_len / changes:.2f}; BFS {statistics.median(bfs_t) * 1e3:.2f} ms, mean length "
          f"{bfs_len / changes:.2f}; equal length in {exact}/{changes}")
    expander = Expander(uniform(4, 2))
    astar_t, bfs_t, lengths, exact = [], [], [], 0
    for _ in range(changes // 3):
        start = tuple(rng.randrange(3) for _ in range(4))
        goal = tuple(rng.randrange(3) for _ in range(4))
        t = time.perf_counter()
        found = expander.expand({("k",): start}, {("k",): goal})
        astar_t.append(time.perf_counter() - t)
        t = time.perf_counter()
        shortest = expander.bfs_key(("k",), start, goal)
        bfs_t.append(time.perf_counter() - t)
        assert shortest is not None
        lengths.append(len(found.events))
        exact += len(found.events) == len(shortest) == found.estimate
    print(f"expand (uniform unconstrained, 4 components, k = 2, {changes // 3} random goals): A* "
          f"{statistics.median(astar_t) * 1e3:.2f} ms median, BFS {statistics.median(bfs_t) * 1e3:.2f} ms; "
          f"length = BFS's = ceil(m/k) in {exact}/{changes // 3}, mean length {statistics.mean(lengths):.2f}")


def uniform(width: int, k: int) -> Collapse:
    """Every k-subset of ``width`` components replaceable by one event, no state guard."""
    names = [f"c{j}" for j in range(width)]
    xs = ", ".join(f"x{i}" for i in range(k))
    history = EventSchema.of("key: str, slot: int, " + ", ".join(f"x{i}: int" for i in range(k)))
    state = StateSchema.of("key: str", ", ".join(f"{n}: int" for n in names))
    rules = [f"[n, s, {xs}] -> <n: {', '.join('0' for _ in names)}>"]
    for slot, subset in enumerate(itertools.combinations(range(width), k)):
        outputs = [f"x{subset.index(j)}" if j in subset else names[j] for j in range(width)]
        rules.append(f"[n, s, {xs}], <n: {', '.join(names)}>, s = {slot} -> <n: {', '.join(outputs)}>")
    return Collapse(history, state, rules)


def bench_compile() -> None:
    graph = FlowGraph("chain")
    for name in "abcdefg":
        graph.history(name, "x: int, y: int")
    graph.transform("a", "b", "[x, y] -> [x + 1, y]")
    graph.transform("b", "c", "[x, y] -> [x * 2, y - x]")
    graph.select("c", "d", "x > 4")
    graph.transform("d", "e", "[x, y] -> [y, x]")
    graph.select("e", "f", "y < 100 & x != 0")
    graph.transform("f", "g", "[x, y] -> [x + y, 7]")
    for path in event_paths(graph, "g") + event_paths(FlowGraph.from_toml(MARKET), "big"):
        print("compile:", path.describe())
    sub = compile_subscription(FlowGraph.from_toml(MARKET), "prices", 'issue = "I007" & maxPrice > 100')
    print(f"compile: subscription to prices {sub.text!r}: {sub.paths[0].describe()}; residual on rows: "
          f"{render(sub.residual)}")


def main(argv: list[str]) -> None:
    which = argv[0] if argv else "all"
    table: dict[str, Callable[[], None]] = {"match": bench_match, "filter": bench_filter, "expand": bench_expand, "compile": bench_compile}
    for name, bench in table.items():
        if which in (name, "all"):
            bench()


if __name__ == "__main__":
    main(sys.argv[1:])
