"""Windowed "recent" aggregates and derived alarms (Gryphon's region 5): a
collapse keeps, per issue, the average price and the largest drop over the
last W events (a ``float[W]`` window column); an expand with rules of its own
turns each change of that drop into an event of an ``alarms`` space, and a
subscriber selects ``drop > 20``. A drop of 25 inside the window gives one
alarm, a drop of 15 none, a slow fall spread wider than the window none. On
random streams the alarms equal a model computed from the definition; rows
never hold more than W prices; joiners and returning durable subscribers get
the windows by snapshot."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_flows_engine import Bus

from sgcs.services.flows import FlowEngine, FlowGraph, State, wire
from sgcs.services.flows.engine import Phase
from sgcs.services.flows.store import FlowStore
from sgcs.services.flows.syntax import FlowError
from sgcs.services.flows.window import drawdown

W = 4
BOUND = 20.0
REGION5 = f"""
name = "sim"
total_order = true  # the Bus is one total order; per-key order: test_flows_perkey.py
[spaces.quotes]
fields = "issue: str, price: float, volume: float"
[spaces.drops]
key = "issue: str"
values = "avg: float, n: int, recent: float[{W}], drop: float"
[spaces.alarms]
fields = "issue: str, drop: float"
[[arcs]]
from = "quotes"
to = "drops"
collapse = ["[i,p,v] -> <i: p, 1, window(p), 0>",
            "[i,p,v], <i: avg, n, w, d> -> <i: avg + (p - avg) / (n + 1), n + 1, push(w, p), drawdown(push(w, p))>"]
[[arcs]]
from = "drops"
to = "alarms"
expand = ["[i, d] -> <i: d>", "[i, d], <i: d0> -> <i: d>"]
values = "drop"
"""
GRAPH = FlowGraph.from_toml(REGION5)


def start() -> tuple[Bus, FlowEngine, FlowEngine]:
    bus = Bus()
    keeper, publisher = FlowEngine(GRAPH, "keeper", 1, keeper=True), FlowEngine(GRAPH, "pub", 2)
    bus.join(keeper)
    bus.run(1, keeper.subscribe_keeper(0.0))
    bus.run(1, keeper.tick(5.0))  # no other keeper: it starts alone
    bus.join(publisher)
    bus.settle()
    return bus, keeper, publisher


def subscriber(bus: Bus, me: int, space: str, predicate: str) -> tuple[FlowEngine, int]:
    engine = FlowEngine(GRAPH, f"s{me}", me)
    bus.join(engine)
    sub_id, out = engine.subscribe(space, predicate)
    bus.run(me, out)
    bus.settle()
    assert all(s.phase is Phase.LIVE for s in engine.subs.values())
    return engine, sub_id


def received(bus: Bus, member: int, sub_id: int) -> list[tuple[object, ...]]:
    return [event for who, event in bus.delivered.get(sub_id, []) if who == member]


def model_drops(events: list[tuple[str, float, float]]) -> list[tuple[str, float]]:
    """Each change of an issue's drop over its last W prices, from the definition."""
    prices: dict[str, list[float]] = {}
    drops: dict[str, float] = {}
    changes = []
    for issue, price, _ in events:
        recent = (prices.setdefault(issue, []) + [price])[-W:]
        prices[issue] = recent
        drop = max((recent[i] - recent[j] for i in range(len(recent)) for j in range(i, len(recent))), default=0.0)
        if drops.get(issue) != drop:
            drops[issue] = drop
            changes.append((issue, drop))
    return changes


def test_the_papers_largest_recent_drop_raises_one_alarm() -> None:
    bus, keeper, publisher = start()
    alarmed, alarms = subscriber(bus, 3, "alarms", f"drop > {BOUND:g}")
    watcher, every = subscriber(bus, 4, "alarms", "true")
    stream = [("A", p, 1.0) for p in (100.0, 110.0, 95.0)]  # a drop of 15: none
    stream += [("B", p, 1.0) for p in (100.0, 110.0, 95.0, 85.0)]  # 25 within the last 4: one
    stream += [("C", p, 1.0) for p in (110.0, 105.0, 100.0, 95.0, 90.0, 85.0, 80.0)]  # 30 over 7 events, 15 over 4
    stream += [("D", p, 1.0) for p in (120.0, 95.0, 96.0, 97.0, 98.0, 99.0)]  # 25, then it leaves the window
    bus.run(2, publisher.publish("quotes", stream))
    bus.settle()
    assert received(bus, 3, alarms) == [("B", 25.0), ("D", 25.0)]
    assert received(bus, 4, every) == model_drops(stream)  # one event per change of the drop
    assert ("D", 0.0) in model_drops(stream)  # "recent": D's drop is 0 again once 120 left the window
    rows = keeper.rows(next(s for s in keeper.subs if keeper.subs[s].keeper))
    assert rows[("B",)] == (97.5, 4, (100.0, 110.0, 95.0, 85.0), 25.0)  # average and window of the paper's state
    assert rows[("C",)][2] == (95.0, 90.0, 85.0, 80.0)


@settings(max_examples=40, deadline=None)
@given(before=st.lists(st.tuples(st.sampled_from("XY"), st.integers(60, 140).map(float), st.just(1.0)), max_size=15),
       after=st.lists(st.tuples(st.sampled_from("XY"), st.integers(60, 140).map(float), st.just(1.0)), max_size=30))
def test_alarms_equal_the_definition_and_a_late_joiner_gets_the_windows(
        before: list[tuple[str, float, float]], after: list[tuple[str, float, float]]) -> None:
    bus, keeper, publisher = start()
    bus.run(2, publisher.publish("quotes", before))
    bus.settle()
    # joins after `before`: its hidden copy of `drops` comes by snapshot, windows included
    late, alarms = subscriber(bus, 3, "alarms", f"drop > {BOUND:g}")
    bus.run(2, publisher.publish("quotes", after))
    bus.settle()
    changes = model_drops(before + after)[len(model_drops(before)):]
    assert received(bus, 3, alarms) == [c for c in changes if c[1] > BOUND]
    hidden = next(s for s in late.subs.values() if s.expands_into == "alarms")
    assert hidden.state is not None and hidden.state.rows == keeper.subs[1].state.rows  # type: ignore[union-attr]


def test_a_window_holds_at_most_w_prices_per_key() -> None:
    collapse = GRAPH.collapse_of("drops")
    assert collapse is not None and collapse.has_windows
    state, rng = State(collapse), random.Random(3)
    for _ in range(5_000):
        state.apply((rng.choice("ABC"), float(rng.randrange(1, 200)), 1.0))
    assert len(state.rows) == 3
    for _, n, recent, drop in state.rows.values():
        assert isinstance(recent, tuple) and isinstance(n, int)
        assert len(recent) == W and drop == drawdown(recent) and n > 1_000


def test_a_row_cuts_a_window_to_its_columns_size() -> None:
    graph = FlowGraph("cut")
    graph.history("q", "k: str, p: float")
    graph.state("s", "k: str", "big: float[6], small: float[2]")
    arc = graph.collapse("q", "s", ["[k, p] -> <k: window(p), window(p)>",
                                    "[k, p], <k: b, s> -> <k: push(b, p), push(b, p)>"])  # a float[6] into a float[2]
    assert arc.collapse is not None
    state = State(arc.collapse)
    state.apply_all(("x", float(p)) for p in range(10))
    assert state.rows[("x",)] == ((4.0, 5.0, 6.0, 7.0, 8.0, 9.0), (8.0, 9.0))


def test_a_returning_durable_subscriber_to_a_windowed_state_gets_a_snapshot(tmp_path) -> None:  # type: ignore[no-untyped-def]
    bus, keeper, publisher = start()
    bus.run(2, publisher.publish("quotes", [("X", p, 1.0) for p in (100.0, 130.0, 90.0)]))
    bus.settle()
    store = FlowStore(tmp_path / "s.db")
    store.save("drops", "true", keeper.subs[1].state.rows)  # type: ignore[union-attr]  # rows it once had
    s0 = store.load("drops", "true")
    assert s0 == {("X",): (106.66666666666667, 3, (100.0, 130.0, 90.0), 40.0)}  # windows come back as tuples
    bus.run(2, publisher.publish("quotes", [("X", p, 1.0) for p in (91.0, 92.0, 93.0)]))
    bus.settle()
    engine = FlowEngine(GRAPH, "durable", 5)
    bus.join(engine)
    sub_id, out = engine.subscribe("drops", durable=True, s0=s0)
    bus.run(5, out)
    bus.settle()
    sub = engine.subs[sub_id]
    assert sub.phase is Phase.LIVE and sub.catchup_events == 0 and sub.transfer_bytes > 0
    assert engine.rows(sub_id) == keeper.subs[1].state.rows  # type: ignore[union-attr]
    store.close()


def test_windows_travel_in_snapshots_and_hostile_ones_are_refused() -> None:
    snap = wire.Snapshot("n", "drops", ((("X",), (1.5, 2, (1.0, 2.0), 0.0)),))
    decoded = wire.decode_untrusted(wire.encode(snap))
    assert isinstance(decoded, wire.Snapshot) and decoded.rows[0][1][2] == [1.0, 2.0]
    for bad in (b'[["X"],[1.5,2,["a"],0.0]]', b'[["X"],[1.5,2,[[1.0]],0.0]]', b'[["X"],[1.5,2,[true],0.0]]'):
        with pytest.raises(Exception) as caught:
            wire.decode_untrusted(b'F1{"t":"snap","nonce":"n","space":"drops","rows":[' + bad + b"]}")
        assert type(caught.value).__name__ == "DecodeError"


@pytest.mark.parametrize("build, message", [
    (lambda g: g.state("s", "k: str", "w: float[0]"), "needs a size from 1"),
    (lambda g: g.history("h", "w: float[3]"), "only as a state value"),
    (lambda g: g.state("s", "w: float[3]", "v: float"), "only as a state value"),
    (lambda g: g.collapse("quotes", "drops", ["[i,p,v] -> <i: p, 1, p, 0>"]), "must be float[4], the rule gives float"),
    (lambda g: g.collapse("quotes", "drops", ["[i,p,v] -> <i: p, 1, window(p), wmax(p)>"]), "wmax needs float[], got float"),
    (lambda g: g.collapse("quotes", "drops", ["[i,p,v], <i: a, n, w, d>, w < 3 -> <i: a, n, w, d>"]), "two numbers"),
])
def test_window_type_errors(build, message: str) -> None:  # type: ignore[no-untyped-def]
    graph = FlowGraph("t")
    graph.history("quotes", "issue: str, price: float, volume: float")
    graph.state("drops", "issue: str", f"avg: float, n: int, recent: float[{W}], drop: float")
    with pytest.raises(FlowError, match=message.replace("[", r"\[").replace("]", r"\]")):
        build(graph)


@pytest.mark.parametrize("arc, message", [
    ({}, "has a window column"),
    ({"rules": ["[i, d] -> <i: d>"], "values": "recent"}, "interprets scalar columns"),
    ({"rules": ["[i, d] -> <i: d>"], "values": "nope"}, "is not a value column"),
    ({"values": "drop"}, "values= needs rules of its own"),
])
def test_expand_arc_errors(arc: dict[str, object], message: str) -> None:
    graph = FlowGraph.from_toml(REGION5[:REGION5.index("[[arcs]]\nfrom = \"drops\"")])
    with pytest.raises(FlowError, match=message):
        graph.expand("drops", "alarms", **arc)  # type: ignore[arg-type]
