"""The sans-I/O flow engine under a simulated total-order group (issue 19,
build items 3, 5, 6): random interleavings of publishing, joining, delivering
and answering; after the dust settles every joiner's state equals the
keeper's (no gap, no duplicate), durable subscribers catch up by expansion,
and publisher-side filtering never withholds an event somebody wants."""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from sgcs.services.flows import FlowEngine, FlowGraph, wire
from sgcs.services.flows.engine import Deliver, Multicast, Output, Phase, Unicast
from sgcs.services.flows.syntax import Value

GRAPH = FlowGraph.from_toml("""
name = "sim"
total_order = true  # the Bus is one total order; per-key order: test_flows_perkey.py
[spaces.quotes]
fields = "issue: str, price: float, volume: float"
[spaces.prices]
key = "issue: str"
values = "maxPrice: float, curPrice: float"
[spaces.counts]
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
to = "counts"
collapse = ["[i,p,v] -> <i: 1, p>", "[i,p,v], <i: n, l> -> <i: n + 1, p>"]
""")
GROUP = "flows:sim:quotes"
ISSUES = ["A", "B", "C", "D"]


@dataclass
class Bus:
    """One total-order group: a log every member reads from its join on, and unicast inboxes."""

    log: list[tuple[str, int, object]] = field(default_factory=list)  # ("msg", sender, payload) | ("view", 0, members)
    members: dict[int, FlowEngine] = field(default_factory=dict)
    cursor: dict[int, int] = field(default_factory=dict)
    inbox: dict[int, list[tuple[int, bytes]]] = field(default_factory=dict)
    delivered: dict[int, list[tuple[int, tuple[object, ...]]]] = field(default_factory=dict)
    group: str = GROUP

    def join(self, engine: FlowEngine) -> None:
        self.members[engine.me] = engine
        self.inbox[engine.me] = []
        self.log.append(("view", 0, tuple(sorted(self.members))))
        self.cursor[engine.me] = len(self.log) - 1

    def run(self, member: int, outputs: list[Output]) -> None:
        for out in outputs:
            if isinstance(out, Multicast):
                self.log.append(("msg", member, out.payload))
            elif isinstance(out, Unicast):
                self.inbox[out.member].append((member, out.payload))
            elif isinstance(out, Deliver):
                self.delivered.setdefault(out.sub_id, []).append((member, out.event))

    def step(self, member: int) -> bool:
        engine = self.members[member]
        if self.inbox[member]:
            sender, payload = self.inbox[member].pop(0)
            self.run(member, engine.on_delivery(self.group, sender, payload, 0.0))
            return True
        if self.cursor[member] < len(self.log):
            kind, sender, body = self.log[self.cursor[member]]
            self.cursor[member] += 1
            if kind == "view":
                self.run(member, engine.on_view(self.group, body))  # type: ignore[arg-type]
            else:
                self.run(member, engine.on_delivery(self.group, sender, body, 0.0))  # type: ignore[arg-type]
            return True
        return False

    def settle(self, lazy: int | None = None) -> None:
        """Deliver everything; ``lazy`` moves only when nobody else can (a slow keeper)."""
        while True:
            while any([self.step(m) for m in sorted(self.members) if m != lazy]):
                pass
            if lazy is None or lazy not in self.members or not self.step(lazy):
                return


def start() -> tuple[Bus, FlowEngine, FlowEngine]:
    bus = Bus()
    keeper, publisher = FlowEngine(GRAPH, "keeper", 1, keeper=True), FlowEngine(GRAPH, "pub", 2)
    bus.join(keeper)
    bus.run(1, keeper.subscribe_keeper(0.0))
    bus.run(1, keeper.tick(5.0))  # no other keeper: it starts alone
    bus.join(publisher)
    bus.settle()
    return bus, keeper, publisher


quotes = st.tuples(st.sampled_from(ISSUES), st.integers(1, 9).map(float), st.just(1.0))


@settings(max_examples=80, deadline=None)
@given(data=st.data())
def test_joiners_during_a_stream_hold_the_keepers_state(data: st.DataObject) -> None:
    bus, keeper, publisher = start()
    joiners: list[tuple[FlowEngine, int, str]] = []
    for _ in range(data.draw(st.integers(5, 40), label="steps")):
        action = data.draw(st.sampled_from(["publish", "join", "deliver", "deliver", "deliver"]))
        if action == "publish":
            bus.run(2, publisher.publish("quotes", data.draw(st.lists(quotes, min_size=1, max_size=4))))
        elif action == "join" and len(joiners) < 5:
            engine = FlowEngine(GRAPH, f"j{len(joiners)}", 10 + len(joiners))
            bus.join(engine)
            space = data.draw(st.sampled_from(["counts", "prices"]))
            predicate = data.draw(st.sampled_from(["true", 'issue = "A"', 'issue < "C"']))
            sub_id, out = engine.subscribe(space, predicate)
            joiners.append((engine, sub_id, predicate))
            bus.run(engine.me, out)
        else:
            bus.step(data.draw(st.sampled_from(sorted(bus.members))))
    bus.settle(lazy=data.draw(st.sampled_from([None, 1]), label="slow keeper"))
    for engine, sub_id, predicate in joiners:
        bus.run(engine.me, engine.tick(0.0))  # a request held back until a keeper was in sight
    bus.settle()
    for engine, sub_id, predicate in joiners:
        sub = engine.subs[sub_id]
        assert sub.phase is Phase.LIVE
        kept = next(s for s in keeper.subs.values() if s.compiled.space == sub.compiled.space)
        assert kept.state is not None and sub.state is not None
        wanted = {k: r for k, r in kept.state.rows.items() if predicate == "true" or
                  (predicate == 'issue = "A"' and k == ("A",)) or (predicate == 'issue < "C"' and k[0] < "C")}  # type: ignore[operator]
        assert sub.state.rows == wanted
    counts = next(s for s in keeper.subs.values() if s.compiled.space == "counts")
    assert counts.state is not None
    assert sum(n for n, _ in counts.state.rows.values()) == publisher.statistics().events_sent  # type: ignore[misc]


@settings(max_examples=60, deadline=None)
@given(before=st.lists(quotes, min_size=1, max_size=10), away=st.lists(quotes, max_size=40))
def test_a_durable_subscriber_catches_up_by_expansion(before: list[tuple[str, float, float]],
                                                      away: list[tuple[str, float, float]]) -> None:
    bus, keeper, publisher = start()
    first = FlowEngine(GRAPH, "d", 20)
    bus.join(first)
    sub_id, out = first.subscribe("prices", "true", durable=True)
    bus.run(20, out)
    bus.settle()
    bus.run(2, publisher.publish("quotes", before))
    bus.settle()
    assert first.subs[sub_id].phase is Phase.LIVE
    s0 = dict(first.rows(sub_id))
    del bus.members[20]  # it leaves
    if away:
        bus.run(2, publisher.publish("quotes", away))
    bus.settle()
    back = FlowEngine(GRAPH, "d", 21)  # the same name, a new member id
    bus.join(back)
    sub_id, out = back.subscribe("prices", "true", durable=True, s0=s0)
    bus.run(21, out)
    bus.settle()
    sub = back.subs[sub_id]
    kept = next(s for s in keeper.subs.values() if s.compiled.space == "prices")
    assert kept.state is not None and sub.phase is Phase.LIVE and back.rows(sub_id) == kept.state.rows
    changed = [k for k, r in kept.state.rows.items() if s0.get(k) != r]
    assert sub.catchup_events <= 2 * len(changed)
    assert all(back.rows(sub_id)[k][0] >= s0[k][0] for k in s0)  # type: ignore[operator]  # nothing taken back


@settings(max_examples=60, deadline=None)
@given(events=st.lists(quotes, min_size=1, max_size=30), wants=st.lists(st.sampled_from(ISSUES), max_size=3))
def test_publisher_side_filtering_withholds_only_unwanted_events(events: list[tuple[str, float, float]],
                                                                 wants: list[str]) -> None:
    feed = FlowGraph.from_toml('name = "feed"\n[spaces.quotes]\nfields = "issue: str, price: float, volume: float"\n')
    publisher, subscriber = FlowEngine(feed, "pub", 1), FlowEngine(feed, "sub", 2)
    group = "flows:feed:quotes"
    predicate = " | ".join(f'issue = "{w}"' for w in wants) or "false"
    sub_id, out = subscriber.subscribe("quotes", predicate)
    publisher.on_view(group, [1, 2])
    unfiltered = publisher.publish("quotes", events[:1])  # not yet heard from the subscriber: all is sent
    assert len(unfiltered) == 1
    announce = next(o for o in out if isinstance(o, Multicast))
    publisher.on_delivery(group, 2, announce.payload, 0.0)
    sent = publisher.publish("quotes", events)
    got = []
    for message in sent:
        assert isinstance(message, Multicast)
        got += [o.event for o in subscriber.on_delivery(group, 1, message.payload, 0.0) if isinstance(o, Deliver)]
    assert got == [e for e in events if e[0] in wants]
    stats = publisher.statistics()
    assert stats.events_filtered_at_publisher == sum(1 for e in events if e[0] not in wants)
    assert (stats.bytes_saved_at_publisher > 0) == (stats.events_filtered_at_publisher > 0)
    assert subscriber.on_delivery(group, 1, b"F1{not json", 0.0) == [] and subscriber.statistics().garbage == 1
    assert wire.decode_untrusted(announce.payload).name == "sub"  # type: ignore[union-attr]


def test_hostile_subscriptions_from_a_peer_are_counted_not_fatal() -> None:
    engine = FlowEngine(GRAPH, "pub", 1)
    deep = "(" * 3_000 + "true" + ")" * 3_000
    hostile = [wire.Sub("evil", GRAPH.fingerprint(), False, (("quotes", deep[:4_000]),)),
               wire.Sub("evil", GRAPH.fingerprint(), False, (("nowhere", "true"), ("quotes", "price <"))),
               wire.Sub("evil", "another graph", True, ())]
    for message in hostile:
        assert engine.on_delivery(GROUP, 9, wire.encode(message), 0.0) in ([], [engine.announce(GROUP)])
    assert engine.statistics().garbage == 4
    assert engine.on_delivery(GROUP, 9, b"F1" + b'{"t":"ev","root":"quotes","events":[["A",' + b"9" * 400 + b',1.0]]}',
                              0.0) == []
    assert engine.statistics().garbage == 5  # a price too large for a float


EXPANDING = FlowGraph.from_toml("""
name = "sim"
total_order = true  # the Bus is one total order; per-key order: test_flows_perkey.py
[spaces.quotes]
fields = "issue: str, price: float, volume: float"
[spaces.prices]
key = "issue: str"
values = "maxPrice: float, curPrice: float"
[spaces.changes]
fields = "issue: str, price: float, volume: float"
[spaces.alarms]
fields = "issue: str, price: float, volume: float"
[[arcs]]
from = "quotes"
to = "prices"
collapse = ["[i,p,v] -> <i: p, p>",
            "[i,p,v], <i: maxP, curP>, p > maxP -> <i: p, p>",
            "[i,p,v], <i: maxP, curP>, p <= maxP -> <i: maxP, p>"]
[[arcs]]
from = "prices"
to = "changes"
expand = true
[[arcs]]
from = "changes"
to = "alarms"
select = "price > 5"
""")


@settings(max_examples=40, deadline=None)
@given(events=st.lists(quotes, min_size=1, max_size=30))
def test_an_expand_arc_runs_at_every_subscriber(events: list[tuple[str, float, float]]) -> None:
    from sgcs.services.flows import Expander, State
    bus = Bus()
    keeper, publisher = FlowEngine(EXPANDING, "keeper", 1, keeper=True), FlowEngine(EXPANDING, "pub", 2)
    bus.join(keeper)
    bus.run(1, keeper.subscribe_keeper(0.0))
    bus.run(1, keeper.tick(5.0))
    bus.join(publisher)
    subscriber = FlowEngine(EXPANDING, "alarmed", 3)
    bus.join(subscriber)
    sub_id, out = subscriber.subscribe("alarms")
    bus.run(3, out)
    bus.settle()
    assert all(s.phase is Phase.LIVE for s in subscriber.subs.values())
    assert EXPANDING.publishable_roots() == ["quotes"]
    bus.run(2, publisher.publish("quotes", events))
    bus.settle()
    collapse = EXPANDING.collapse_of("prices")
    assert collapse is not None
    state, expander, expected = State(collapse), Expander(collapse), []
    for event in events:
        key = collapse.key_of(event)
        before = state.rows.get(key)
        if state.apply(event) is not None:
            found, _, _, _ = expander.expand_key(key, before, state.rows[key])
            expected += [e for e in found if e[1] > 5]  # type: ignore[operator]
    assert [event for who, event in bus.delivered.get(sub_id, [])] == expected


def test_when_the_answering_keeper_dies_another_keeper_answers_the_retry() -> None:
    bus, first_keeper, publisher = start()
    second = FlowEngine(GRAPH, "keeper2", 3, keeper=True)
    bus.join(second)
    bus.run(3, second.subscribe_keeper(0.0))
    bus.settle()
    assert all(s.phase is Phase.LIVE for s in second.subs.values())  # a transfer from the first keeper
    bus.run(2, publisher.publish("quotes", [("A", 3.0, 1.0), ("B", 4.0, 1.0)]))
    bus.settle()
    joiner = FlowEngine(GRAPH, "late", 9)
    bus.join(joiner)
    sub_id, out = joiner.subscribe("counts")
    bus.run(9, out)
    while not joiner.subs[sub_id].requested:  # the joiner learns of the keepers, then asks...
        assert any([bus.step(m) for m in sorted(bus.members) if not joiner.subs[sub_id].requested])
    del bus.members[1]  # ... but the first keeper, the one to answer, dies at once
    bus.log.append(("view", 0, tuple(sorted(bus.members))))
    bus.settle()
    assert joiner.subs[sub_id].phase is Phase.BUFFERING  # asked, no answer: keeper2 saw keeper 1 in the view
    bus.run(2, publisher.publish("quotes", [("A", 5.0, 1.0)]))
    bus.run(9, joiner.tick(10.0))  # the retry: a new cut, answered by the keeper left
    bus.settle()
    kept = next(s for s in second.subs.values() if s.compiled.space == "counts")
    assert joiner.subs[sub_id].phase is Phase.LIVE and kept.state is not None
    assert joiner.rows(sub_id) == kept.state.rows


def test_a_lone_keeper_starts_from_its_stored_rows_plus_what_it_buffered() -> None:
    bus = Bus()
    keeper, publisher = FlowEngine(GRAPH, "keeper", 1, keeper=True), FlowEngine(GRAPH, "pub", 2)
    bus.join(keeper)
    bus.join(publisher)
    stored: dict[str, dict[tuple[Value, ...], tuple[Value, ...]]] = {"counts": {("A",): (7, 1.0)}}
    bus.run(1, keeper.subscribe_keeper(0.0, stored))
    bus.settle()
    bus.run(2, publisher.publish("quotes", [("A", 2.0, 1.0), ("B", 3.0, 1.0)]))
    bus.settle()
    counts = next(s for s in keeper.subs.values() if s.compiled.space == "counts")
    assert counts.phase is Phase.BUFFERING  # no other keeper in sight: it waits keeper_solo_after
    bus.run(1, keeper.tick(0.5))
    assert counts.phase is Phase.BUFFERING
    bus.run(1, keeper.tick(1.0))
    assert counts.phase is Phase.LIVE and keeper.rows(counts.sub_id) == {("A",): (8, 2.0), ("B",): (1, 3.0)}


def test_a_keeper_serves_its_own_members_subscriptions() -> None:
    """A subscription on a keeper's own member needs no other keeper: one made
    while the keeper copy waits goes LIVE with it, one made later at once, and
    both then follow the stream like the keeper copy."""
    bus = Bus()
    keeper = FlowEngine(GRAPH, "keeper", 1, keeper=True)
    bus.join(keeper)
    bus.run(1, keeper.subscribe_keeper(0.0, {"counts": {("A",): (7, 1.0)}}))
    early, out = keeper.subscribe("counts", 'issue = "A"', now=0.0)
    bus.run(1, out)
    bus.settle()
    assert keeper.subs[early].phase is Phase.WAITING_CUT  # its keeper copy is not LIVE yet
    bus.run(1, keeper.tick(1.0))
    assert keeper.subs[early].phase is Phase.LIVE and keeper.rows(early) == {("A",): (7, 1.0)}
    bus.run(1, keeper.publish("quotes", [("A", 2.0, 1.0), ("B", 3.0, 1.0)]))
    bus.settle()
    late, out = keeper.subscribe("counts", "true", now=2.0)
    bus.run(1, out)
    assert keeper.subs[late].phase is Phase.LIVE and keeper.rows(late) == {("A",): (8, 2.0), ("B",): (1, 3.0)}
    bus.run(1, keeper.publish("quotes", [("A", 5.0, 1.0)]))
    bus.settle()
    assert keeper.rows(early) == {("A",): (9, 5.0)} and keeper.rows(late) == {("A",): (9, 5.0), ("B",): (1, 3.0)}
