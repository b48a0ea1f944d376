"""Per-key order for interpretation subscribers (perkey.py): which graphs
qualify and why; replicas of a state converge under a FIFO group whose
deliveries interleave differently at every member, with publishers sharing
keys, a member crashing with forwarded events in flight, and joiners that
get the state at a vector cut; every publication is settled exactly once;
and a graph that needs a total order still joins a TOTAL group."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

import sgcs
from _net import private_multicast  # type: ignore[import-not-found]  # tests/ is on pytest's path
from sgcs.services.flows import FlowEngine, FlowGraph, open_flows, wire
from sgcs.services.flows.engine import Deliver, Multicast, Output, Settled, Unicast
from sgcs.services.flows.perkey import analyse, owner
from sgcs.services.flows.syntax import FlowError

MARKET = """
name = "market"
per_key_order = true
[spaces.quotes]
fields = "issue: str, price: float, volume: float"
[spaces.prices]
key = "issue: str"
values = "maxPrice: float, curPrice: float"
[spaces.tally]
key = "issue: str"
values = "n: int, total: float, last: float"
[[arcs]]
from = "quotes"
to = "prices"
collapse = ["[i,p,v] -> <i: p, p>",
            "[i,p,v], <i: maxP, curP>, p > maxP -> <i: p, p>",
            "[i,p,v], <i: maxP, curP>, p <= maxP -> <i: maxP, p>"]
[[arcs]]
from = "quotes"
to = "tally"
collapse = ["[i,p,v] -> <i: 1, p, p>", "[i,p,v], <i: n, t, l> -> <i: n + 1, t + p, p>"]
"""

# Two exchanges into one state, keyed by NAS(issue) through one transform and by name through the other.
EXCHANGES = """
name = "stocks"
per_key_order = true
[spaces.NYSE]
fields = "issue: str, price: float, capital: float"
[spaces.NASDAQ]
fields = "name: str, price: float, volume: float"
[spaces.trades]
fields = "name: str, price: float, volume: float"
[spaces.prices]
key = "name: str"
values = "maxPrice: float, curPrice: float"
[[arcs]]
from = "NYSE"
to = "trades"
transform = "[issue:i, price:p, capital:c] -> [name: NAS(i), price: p, volume: c/p]"
[[arcs]]
from = "NASDAQ"
to = "trades"
select = "price > 0"
[[arcs]]
from = "trades"
to = "prices"
collapse = ["[n,p,v] -> <n: p, p>", "[n,p,v], <n: maxP, curP> -> <n: maxP, p>"]
"""


# --- the analysis -------------------------------------------------------------------------------

def test_a_state_keyed_like_its_source_gets_per_key_order() -> None:
    graph = FlowGraph.from_toml(MARKET)
    order, why = graph.order_for("quotes")
    assert order == "perkey" and "issue" in why and "prices" in why and "tally" in why
    engine = FlowEngine(graph, "m", 1)
    assert engine.per_key("flows:market:quotes") and engine.order_of("flows:market:quotes") == "fifo"


def test_keys_are_compared_through_transforms_across_roots() -> None:
    graph = FlowGraph.from_toml(EXCHANGES)
    analysis = analyse(graph, "NYSE")
    assert analysis.order == "perkey" and [str(k) for k in analysis.key] != []
    assert "NAS(issue)" in analysis.reason
    assert analyse(graph, "NASDAQ").order == "perkey" and "name" in analyse(graph, "NASDAQ").reason
    # the two roots meet in prices: one group, partitioned by the key's value whichever root it came from
    engine = FlowEngine(graph, "m", 1)
    (group,) = engine.groups
    assert engine.per_key(group)
    members = (3, 5, 8)
    nyse = engine._owner(engine.groups[group], "NYSE", ("ibm", 1.0, 2.0))
    engine.groups[group].view = members
    nyse = engine._owner(engine.groups[group], "NYSE", ("ibm", 1.0, 2.0))
    nasdaq = engine._owner(engine.groups[group], "NASDAQ", ("NAS:IBM", 1.0, 2.0))
    assert nyse == nasdaq == owner(("NAS:IBM",), members)


def test_total_order_is_the_default_and_allowing_per_key_order_changes_the_fingerprint() -> None:
    default = FlowGraph.from_toml(MARKET.replace("per_key_order = true\n", ""))
    order, why = default.order_for("quotes")
    assert order == "total" and "per-key order would suffice" in why and "per_key_order = true" in why
    assert FlowEngine(default, "m", 1).order_of("flows:market:quotes") == "total"
    assert default.fingerprint() != FlowGraph.from_toml(MARKET).fingerprint()
    with pytest.raises(FlowError, match="per_key_order is true or false"):
        FlowGraph.from_toml('per_key_order = "yes"\n' + MARKET.replace("per_key_order = true\n", ""))


def test_two_keyings_of_one_root_need_a_total_order() -> None:
    graph = FlowGraph.from_toml(MARKET)
    graph.state("by_volume", "volume: float", "n: int")
    graph.collapse("quotes", "by_volume", ["[i,p,v] -> <v: 1>", "[i,p,v], <v: n> -> <v: n + 1>"])
    order, why = graph.order_for("quotes")
    assert order == "total"
    assert "keyed differently" in why and "by_volume" in why and "two owners" in why
    assert FlowEngine(graph, "m", 1).order_of("flows:market:quotes") == "total"


def test_a_state_fed_through_an_expand_needs_a_total_order() -> None:
    graph = FlowGraph.from_toml(MARKET)
    graph.history("changes", "issue: str, price: float, volume: float")
    graph.expand("prices", "changes")
    graph.state("last_change", "issue: str", "price: float")
    graph.collapse("changes", "last_change", ["[i,p,v] -> <i: p>", "[i,p,v], <i: q> -> <i: p>"])
    order, why = graph.order_for("quotes")
    assert order == "total" and "last_change" in why and "expand" in why


def test_an_expand_into_a_history_keeps_per_key_order() -> None:
    graph = FlowGraph.from_toml(MARKET)
    graph.history("changes", "issue: str, price: float, volume: float")
    graph.expand("prices", "changes")
    assert graph.order_for("quotes")[0] == "perkey"


def test_required_total_order_wins_and_is_part_of_the_fingerprint() -> None:
    graph = FlowGraph.from_toml(MARKET)
    before = graph.fingerprint()
    graph.require_total_order("quotes")
    order, why = graph.order_for("quotes")
    assert order == "total" and "required for quotes" in why
    assert graph.fingerprint() != before
    everywhere = FlowGraph.from_toml('total_order = true\n' + MARKET)
    assert everywhere.order_for("quotes")[0] == "total"
    listed = FlowGraph.from_toml('total_order = ["tally"]\n' + MARKET)
    assert listed.order_for("quotes")[0] == "total"
    with pytest.raises(FlowError, match="total_order is true, false or a list"):
        FlowGraph.from_toml('total_order = 3\n' + MARKET)
    with pytest.raises(FlowError, match="unknown space 'nope'"):
        graph.require_total_order("nope")


def test_no_state_downstream_stays_fifo() -> None:
    graph = FlowGraph.from_toml('name = "feed"\n[spaces.quotes]\nfields = "issue: str, price: float, volume: float"\n')
    assert graph.order_for("quotes")[0] == "fifo"
    assert not FlowEngine(graph, "m", 1).per_key("flows:feed:quotes")


# --- a FIFO group with virtual synchrony, simulated ----------------------------------------------

@dataclass
class FifoBus:
    """Per-sender FIFO streams with virtual synchrony, nothing more: every
    receiver reads the senders' streams in its own random interleaving; at a
    view change every survivor first delivers the same messages of the old
    view (a crashed member's: the same prefix at all), then the new view."""

    rng: random.Random
    group: str = "flows:market:quotes"
    members: dict[int, FlowEngine] = field(default_factory=dict)
    streams: dict[int, list[tuple[int, bytes]]] = field(default_factory=dict)  # sender -> [(seq, payload)]
    read: dict[tuple[int, int], int] = field(default_factory=dict)  # (receiver, sender) -> index read
    start: dict[tuple[int, int], int] = field(default_factory=dict)  # (receiver, sender) -> first index it gets
    unicasts: dict[tuple[int, int], list[bytes]] = field(default_factory=dict)  # (sender, receiver) -> FIFO
    settled: dict[int, set[int]] = field(default_factory=dict)
    delivered: dict[tuple[int, int], list[tuple[Any, ...]]] = field(default_factory=dict)
    now: float = 0.0

    def run(self, member: int, outputs: list[Output]) -> None:
        for out in outputs:
            if isinstance(out, Multicast):
                stream = self.streams.setdefault(member, [])
                stream.append((len(stream) + 1, out.payload))
            elif isinstance(out, Unicast):
                if out.member in self.members:
                    self.unicasts.setdefault((member, out.member), []).append(out.payload)
            elif isinstance(out, Settled):
                self.settled.setdefault(member, set()).add(out.ticket)
            elif isinstance(out, Deliver):
                self.delivered.setdefault((member, out.sub_id), []).append(out.event)

    def view(self) -> None:
        members = sorted(self.members)
        for m in members:
            self.run(m, self.members[m].on_view(self.group, members))

    def join(self, engine: FlowEngine) -> None:
        self.flush(unicasts=self.rng.random() < 0.5)
        self.members[engine.me] = engine
        for sender in self.streams:
            self.read[(engine.me, sender)] = len(self.streams[sender])  # it gets what is sent from now on
        self.view()

    def crash(self, member: int) -> None:
        """``member`` stops. Survivors get the same prefix of what it sent, then the view without it."""
        del self.members[member]
        stream = self.streams.get(member, [])
        got = [self.read.get((m, member), 0) for m in self.members]
        keep = self.rng.randint(max(got, default=0), len(stream))  # some survivor may have more than others
        self.streams[member] = stream[:keep]
        for key in [k for k in self.unicasts if member in k]:
            del self.unicasts[key]
        self.flush(unicasts=self.rng.random() < 0.5)
        del self.streams[member]
        self.view()

    def flush(self, unicasts: bool = True) -> None:
        """Virtual synchrony: every member delivers every multicast sent in the
        view so far. Unicasts are not bound to views: at a view change they may
        still be on their way (a forward then reaches an owner in the next view)."""
        while any(self._choices(m, unicasts) for m in self.members):
            self.step(self.rng.choice(sorted(self.members)), unicasts)

    def _choices(self, receiver: int, unicasts: bool = True) -> list[tuple[str, int]]:
        out = [("m", s) for s, stream in self.streams.items() if self.read.get((receiver, s), 0) < len(stream)]
        if not unicasts:
            return out
        return out + [("u", s) for (s, r), queue in self.unicasts.items() if r == receiver and queue]

    def step(self, receiver: int, unicasts: bool = True) -> bool:
        choices = self._choices(receiver, unicasts)
        if not choices:
            return False
        kind, sender = self.rng.choice(sorted(choices))
        engine = self.members[receiver]
        if kind == "u":
            payload = self.unicasts[(sender, receiver)].pop(0)
            self.run(receiver, engine.on_delivery(self.group, sender, payload, self.now))
        else:
            index = self.read.get((receiver, sender), 0)
            seq, payload = self.streams[sender][index]
            self.read[(receiver, sender)] = index + 1
            self.run(receiver, engine.on_delivery(self.group, sender, payload, self.now, seq))
        return True

    def wander(self, steps: int) -> None:
        for _ in range(steps):
            if self.members:
                self.step(self.rng.choice(sorted(self.members)))

    def tick(self, dt: float) -> None:
        self.now += dt
        for m in sorted(self.members):
            self.run(m, self.members[m].tick(self.now))


actions = st.lists(st.tuples(st.sampled_from(["publish", "publish", "publish", "wander", "wander", "join", "subscribe",
                                              "crash", "tick"]),
                             st.integers(0, 2**16)), min_size=5, max_size=40)


@settings(max_examples=120, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), script=actions)
def test_replicas_converge_with_every_event_applied_once(seed: int, script: list[tuple[str, int]]) -> None:
    rng = random.Random(seed)
    graph = FlowGraph.from_toml(MARKET)
    bus = FifoBus(rng)
    keepers = [FlowEngine(graph, f"k{i}", i, keeper=True, retry_after=1.0) for i in (1, 2)]
    bus.join(keepers[0])
    bus.run(1, keepers[0].subscribe_keeper(0.0))
    bus.tick(5.0)  # no other keeper: k1 starts alone
    bus.join(keepers[1])
    bus.run(2, keepers[1].subscribe_keeper(bus.now))
    publishers = [FlowEngine(graph, f"p{i}", i) for i in (3, 4)]
    for p in publishers:
        bus.join(p)
    bus.flush()
    published: dict[int, list[tuple[str, float, float]]] = {3: [], 4: []}
    tickets: dict[int, set[int]] = {3: set(), 4: set()}
    joined: list[FlowEngine] = []
    joiners: list[tuple[FlowEngine, int]] = []
    next_id, price = 10, 0.0
    for action, arg in script:
        if action == "publish":
            who = publishers[arg % 2]
            events = []
            for _ in range(1 + arg % 5):
                price += 1.0  # every event its own price: a sum over a key tells a duplicate or a loss
                events.append((f"I{rng.randrange(6)}", price, 1.0))
            ticket, out = who.publish_ticket("quotes", events)
            assert ticket is not None
            tickets[who.me].add(ticket)
            published[who.me] += events
            bus.run(who.me, out)
        elif action == "wander":
            bus.wander(1 + arg % 30)
        elif action == "join" and len(joined) < 3:
            joined.append(FlowEngine(graph, f"j{next_id}", next_id, retry_after=1.0))
            bus.join(joined[-1])
            next_id += 1
        elif action == "subscribe" and len(joiners) < len(joined):
            joiners.append(_subscribe(bus, joined[len(joiners)]))  # it may have delivered events the keeper has not
        elif action == "crash" and 2 in bus.members:
            bus.crash(2)  # a keeper that owns keys, with forwards to it in flight
        elif action == "tick":
            bus.tick(0.5)
    joiners += [_subscribe(bus, j) for j in joined[len(joiners):]]
    for _ in range(20):  # let retries and re-routing finish
        bus.flush()
        bus.tick(1.5)
    bus.flush()
    replicas = [(e, e.rows(s)) for e, s in [(k, _keeper_tally(k)) for k in keepers if k.me in bus.members]]
    replicas += [(j, j.rows(s)) for j, s in joiners]
    reference = replicas[0][1]
    everything = published[3] + published[4]
    by_issue: dict[str, list[float]] = {}
    for issue, p, _ in everything:
        by_issue.setdefault(issue, []).append(p)
    # exactly once: per issue the count and the sum of distinct prices
    assert {k[0]: (r[0], r[1]) for k, r in reference.items()} == {i: (len(ps), sum(ps)) for i, ps in by_issue.items()}
    for engine, rows in replicas:
        assert rows == reference, f"{engine.name} differs from {replicas[0][0].name}"
    for who in (3, 4):  # every publication has its outcome at its publisher
        assert bus.settled.get(who, set()) == tickets[who]
    assert all(not p._parts and not p._open_tickets for p in publishers)


def _subscribe(bus: FifoBus, joiner: FlowEngine) -> tuple[FlowEngine, int]:
    sub_id, out = joiner.subscribe("tally", "true", now=bus.now)
    bus.run(joiner.me, out)
    return joiner, sub_id


def _keeper_tally(engine: FlowEngine) -> int:
    return next(s for s, sub in engine.subs.items() if sub.keeper and sub.compiled.space == "tally")


def test_per_publisher_fifo_alone_does_not_converge() -> None:
    """Why owners: two publishers multicasting one key's events themselves,
    read in different interleavings, leave the replicas apart. (The check the
    property test makes is able to fail.)"""
    graph = FlowGraph.from_toml(MARKET)
    a, b = FlowEngine(graph, "a", 1, keeper=True), FlowEngine(graph, "b", 2, keeper=True)
    for e in (a, b):
        e.on_view("flows:market:quotes", (1, 2))
        e.tick(0.0)
        e.subscribe_keeper(0.0)
        e.tick(5.0)
    one = wire.encode(wire.KeyedEvents("quotes", 1, 1, 1, (("X", 1.0, 1.0),)))
    two = wire.encode(wire.KeyedEvents("quotes", 2, 1, 1, (("X", 2.0, 1.0),)))
    # whichever of 1 and 2 is X's owner, its event is applied and the other is skipped as misrouted
    x_owner = owner(("X",), (1, 2))
    for engine, order in ((a, [(1, one), (2, two)]), (b, [(2, two), (1, one)])):
        for sender, payload in order:
            engine.on_delivery("flows:market:quotes", sender, payload, 0.0, 1)
    ta, tb = a.rows(_keeper_tally(a)), b.rows(_keeper_tally(b))
    assert ta == tb == {("X",): (1, float(x_owner), float(x_owner))}
    assert a.statistics().events_misrouted == b.statistics().events_misrouted == 1
    # without the owner check each replica would hold both, last = its own order's last: 2.0 at a, 1.0 at b


def test_a_lost_keyed_multicast_is_routed_again_or_bounced_to_its_publisher() -> None:
    graph = FlowGraph.from_toml(MARKET)
    pub, other = FlowEngine(graph, "p", 1), FlowEngine(graph, "o", 2)
    for e in (pub, other):
        e.on_view("flows:market:quotes", (1, 2))
    mine = next(f"I{i}" for i in range(50) if owner((f"I{i}",), (1, 2)) == 1)
    ticket, out = pub.publish_ticket("quotes", [(mine, 1.0, 1.0)])
    (sent,) = out
    assert isinstance(sent, Multicast) and sent.tag is not None and sent.tag[:2] == (1, ticket)
    again = pub.on_lost("flows:market:quotes", sent.tag)  # rolled back: the same event, a new part
    assert len(again) == 1 and isinstance(again[0], Multicast) and again[0].tag != sent.tag
    assert pub.statistics().events_rerouted == 1
    bounce = other.on_lost("flows:market:quotes", (1, ticket, 99))  # the owner's relay was lost
    assert bounce == [Unicast("flows:market:quotes", 1, wire.encode(wire.Bounce(ticket, 99)))]
    assert other.on_lost("flows:market:quotes", (7, 1, 1)) == []  # its publisher is gone


# --- on sgcs over loopback -------------------------------------------------------------------------

SECRET = b"flows test secret"
WAIT = 20.0


def _config(name: str, net: dict[str, Any]) -> sgcs.Config:
    return sgcs.Config(name=name, secret=SECRET, **net)


async def _until(flows: Any, count: int) -> None:
    (group,) = flows.engine.groups
    with trio.fail_after(WAIT):
        while len(flows.view(group)) < count or len(flows.engine.groups[group].peers) < count - 1:
            await trio.sleep(0.02)


async def test_three_members_publishing_the_same_keys_converge_per_key() -> None:
    net, graph = private_multicast(beacon_interval=0.1), FlowGraph.from_toml(MARKET)
    rng = random.Random(5)
    async with sgcs.open_node(_config("k", net)) as nk, open_flows(nk, graph, keeper=True) as k, \
            sgcs.open_node(_config("a", net)) as na, open_flows(na, graph) as a, \
            sgcs.open_node(_config("b", net)) as nb, open_flows(nb, graph) as b:
        assert k.engine.order_of("flows:market:quotes") == "fifo" and k.engine.per_key("flows:market:quotes")
        await _until(a, 3)
        tallies = [k.kept("tally"), await a.subscribe("tally"), await b.subscribe("tally")]
        with trio.fail_after(WAIT):
            for t in tallies:
                await t.ready()
        prices = iter(range(1, 10**6))
        sent: list[tuple[str, float, float]] = []

        async def publish(flows: Any) -> None:
            for _ in range(40):
                batch = [(f"I{rng.randrange(8)}", float(next(prices)), 1.0) for _ in range(5)]
                sent.extend(batch)
                await flows.publish("quotes", batch)  # returns once applied here: its own tally shows it
        async with trio.open_nursery() as nursery:
            for flows in (k, a, b):
                nursery.start_soon(publish, flows)
        want = {(i,): (sum(1 for e in sent if e[0] == i), sum(e[1] for e in sent if e[0] == i)) for i, _, _ in sent}
        with trio.fail_after(WAIT):
            while any({key: row[:2] for key, row in t.rows().items()} != want for t in tallies):
                await trio.sleep(0.02)
        assert tallies[0].rows() == tallies[1].rows() == tallies[2].rows()  # the last price per key too
        assert sum(f.statistics().events_forwarded for f in (k, a, b)) > 0  # owners did relay


async def test_a_graph_that_needs_a_total_order_still_joins_a_total_group() -> None:
    net = private_multicast(beacon_interval=0.1)
    graph = FlowGraph.from_toml(MARKET)
    graph.require_total_order("quotes")  # history subscribers who compare events across keys
    async with sgcs.open_node(_config("k", net)) as nk, open_flows(nk, graph, keeper=True) as k, \
            sgcs.open_node(_config("a", net)) as na, open_flows(na, graph) as a:
        assert k.engine.order_of("flows:market:quotes") == "total" and not a.engine.per_key("flows:market:quotes")
        await _until(a, 2)
        seen = [await k.subscribe("quotes"), await a.subscribe("quotes")]
        await trio.sleep(0.3)  # both subscriptions announced

        async def publish(flows: Any, tag: str) -> None:
            for i in range(30):
                await flows.publish("quotes", [(f"{tag}{i % 3}", float(i), 1.0)])
        async with trio.open_nursery() as nursery:
            nursery.start_soon(publish, k, "K")
            nursery.start_soon(publish, a, "A")
        with trio.fail_after(WAIT):
            got = [[await s.receive() for _ in range(60)] for s in seen]
        assert got[0] == got[1]  # one order across keys and publishers at both
