"""The reliable stream as a pure state machine: a hypothesis stateful test drives
3 to 5 members through loss, duplication, reordering and delay, and checks
exactly-once FIFO delivery, then that healing the network delivers everything
and empties every buffer."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from sgcs.msgtype import MsgType
from sgcs.roster import roster_of
from sgcs.records import FULL, RESYNC, Aggregate, OutDigest, OutNack, OutNull, OutRecords, OutStable
from sgcs.transport.params import Params
from sgcs.transport.reliable import ReliableStream
from sgcs.transport.stability import Floors

from _memnet import Datagram, MemoryNetwork, losing
from _stability_rounds import measure

PARAMS = Params(fragment_size=16, window_max=256)


class Peer:
    """A ``ReliableStream`` as an endpoint of the shared in-memory network: its
    datagrams are the stream's outputs, handed to the receiving stream's
    handler for their kind; what it delivers goes to ``delivered``."""

    def __init__(self, stream: ReliableStream) -> None:
        self.stream = stream
        self.delivered: list[tuple[int, int, bytes]] = []

    def next_deadline(self) -> float | None:
        return self.stream.next_deadline()

    def handle_timeout(self, now: float) -> list:
        return self.stream.on_timeout(now)

    def handle_datagram(self, src: int, out: object, now: float) -> list:
        stream = self.stream
        if isinstance(out, OutRecords):
            self.delivered += [(m.sender, m.seq, m.payload) for m in stream.on_records(src, out.records, out.kind, now)]
        elif isinstance(out, OutNack):
            return stream.on_nack(src, out.sender, out.ranges, out.pull)
        elif isinstance(out, OutDigest):
            return stream.on_digest(src, out.entries, now, out.aggregate)
        elif isinstance(out, OutNull):
            stream.on_acks(src, out.acks, now)
        elif isinstance(out, OutStable):
            return stream.on_stable(src, out.roster, out.entries)
        return []


class StreamNetwork(MemoryNetwork[Peer]):
    """Outputs with no ``dst`` (records, stability announcements) go to every other member."""

    def fan_out(self, src: int, out: Any) -> list[Datagram]:
        return self.to_others(src, out) if out.dst is None else [Datagram(src, out.dst, out)]


class LossyNetwork(RuleBasedStateMachine):
    @initialize(count=st.integers(3, 5), seed=st.integers(0, 2**16))
    def start(self, count: int, seed: int) -> None:
        members = tuple(range(1, count + 1))
        self.net = StreamNetwork({i: Peer(ReliableStream(i, members, PARAMS, random.Random(seed + i), 0.0))
                                  for i in members})
        self.sent: list[tuple[int, int, bytes]] = []

    @rule(data=st.data(), payload=st.binary(max_size=40))
    def send(self, data: st.DataObject, payload: bytes) -> None:
        sender = data.draw(st.sampled_from(sorted(self.net.nodes)))
        peer = self.net.nodes[sender]
        if peer.stream.send_delay() is None:
            return  # window full: the application waits
        seq, outputs = peer.stream.send(payload, self.net.now)
        self.sent.append((sender, seq, payload))
        peer.delivered.append((sender, seq, payload))  # a sender delivers its own
        self.net.submit(sender, outputs)

    @rule(data=st.data(), duplicate=st.booleans())
    def deliver(self, data: st.DataObject, duplicate: bool) -> None:
        if self.net.in_flight:
            index = data.draw(st.integers(0, len(self.net.in_flight) - 1))  # reordering
            self.net.deliver(index, keep_copy=duplicate)

    @rule(data=st.data())
    def drop(self, data: st.DataObject) -> None:
        if self.net.in_flight:
            self.net.drop(data.draw(st.integers(0, len(self.net.in_flight) - 1)))

    @rule(step=st.sampled_from([0.001, 0.01, 0.05, 0.2, 1.0]))
    def advance(self, step: float) -> None:  # delay: time passes with datagrams still in flight
        self.net.advance(step)

    @invariant()
    def exactly_once_fifo(self) -> None:
        for node, peer in self.net.nodes.items():
            ids = [(s, q) for s, q, _ in peer.delivered]
            assert len(ids) == len(set(ids)), f"node {node} delivered a message twice"
            last: dict[int, int] = {}
            for sender, seq, _ in peer.delivered:
                assert seq > last.get(sender, 0), f"node {node}: FIFO broken for sender {sender}"
                last[sender] = seq

    def teardown(self) -> None:
        if not hasattr(self, "net"):
            return
        for _ in range(5_000):  # heal: no more loss, until everything is stable and quiet
            self.net.flush()
            self.net.advance(0.05)
            if not self.net.in_flight and all(p.next_deadline() is None for p in self.net.nodes.values()):
                break
        expected = sorted(self.sent)
        for node, peer in self.net.nodes.items():
            assert sorted(peer.delivered) == expected, f"node {node} is missing messages after healing"
            assert peer.stream.window() == 0, f"node {node} still buffers unstable records"


LossyNetwork.TestCase.settings = settings(max_examples=80, stateful_step_count=60, deadline=None)
test_lossy_network = LossyNetwork.TestCase


@pytest.mark.parametrize("window, expected", [(0, 0.0), (128, 0.001), (255, 0.255), (256, None)])
def test_send_delay_grows_to_infinite_at_the_window(window: int, expected: float | None) -> None:
    stream = ReliableStream(1, (1, 2), Params(window_max=256, send_delay_scale=0.001), random.Random(1), 0.0)
    for _ in range(window):
        stream.send(b"x", 0.0)  # member 2 never ACKs, so nothing becomes stable
    delay = stream.send_delay()
    assert delay == pytest.approx(expected) if expected is not None else delay is None


def test_excluding_a_silent_member_releases_the_window() -> None:
    stream = ReliableStream(1, (1, 2, 3), Params(window_max=8), random.Random(1), 0.0)
    for _ in range(8):
        stream.send(b"x", 0.0)
    # positions 1, 2, 3: our level-1 predecessor is 2 (window {2, 1}), level 0 is 3
    stream.on_digest(2, (), 0.1, Aggregate(1, roster_of((1, 2, 3)).tag, ((1, 8),)))
    assert stream.send_delay() is None  # member 3 has not said it holds them
    stream.set_members((1, 2))
    stream.on_digest(2, (), 0.2, Aggregate(0, roster_of((1, 2)).tag, ((1, 8),)))
    assert stream.window() == 0 and stream.send_delay() == 0.0


def test_stability_gossip_from_another_roster_or_position_is_ignored() -> None:
    stream = ReliableStream(1, (1, 2), Params(window_max=8), random.Random(1), 0.0)
    stream.send(b"x", 0.0)
    stream.on_digest(2, (), 0.1, Aggregate(0, roster_of((1, 2, 3)).tag, ((1, 1),)))  # another view
    stream.on_digest(2, (), 0.1, Aggregate(1, roster_of((1, 2)).tag, ((1, 1),)))  # no such level
    assert stream.window() == 1
    stream.on_digest(2, (), 0.1, Aggregate(0, roster_of((1, 2)).tag, ((1, 1),)))
    assert stream.window() == 0


def test_stability_gossip_goes_to_the_hypercube_targets() -> None:
    members = tuple(range(10))
    stream = ReliableStream(3, members, Params(gossip_interval=0.1), random.Random(1), 0.0)
    stream.send(b"x", 0.0)
    targets = {}
    for round_ in range(1, 9):
        now = round_ * 0.1 + 0.05
        for out in stream.on_timeout(now):
            if isinstance(out, OutDigest):
                targets[out.aggregate.level] = out.dst
    assert targets == {0: 4, 1: 5, 2: 7, 3: 1}  # 3 + 2**k mod 10, k < ceil(log2 10)


def test_large_message_is_fragmented_and_reassembled() -> None:
    members = (1, 2)
    a, b = (ReliableStream(i, members, PARAMS, random.Random(i), 0.0) for i in members)
    payload = bytes(range(256)) * 3
    seq, (out,) = a.send(payload, 0.0)
    assert len(out.records) == len(payload) // PARAMS.fragment_size
    delivered = b.on_records(1, tuple(reversed(out.records)), MsgType.DATA, 0.1)
    assert [(m.seq, m.payload) for m in delivered] == [(seq, payload)]


def test_lying_ack_cannot_make_gap_listing_loop() -> None:
    a = ReliableStream(1, (1, 2, 3), PARAMS, random.Random(1), 0.0)
    a.on_acks(3, ((2, 2**62),), 0.0)  # member 3 claims member 2 sent 2**62 records
    out = a.on_timeout(1.0)
    nack = next(o for o in out if isinstance(o, OutNack))
    assert nack.ranges[-1][1] - nack.ranges[0][0] < 2**17


@pytest.mark.parametrize("in_step", [False, True])
def test_a_message_is_stable_everywhere_within_log2_n_rounds(in_step: bool) -> None:
    """The stability all-reduce moves a value up one level per round, whatever
    the members' phases (clocks are local): every level whose floors changed
    goes out in the round, not when the member's cycle reaches it (it took
    38 rounds at N = 128 when it waited)."""
    n = 100  # above ACK_MATRIX_MAX: the all-reduce alone
    spans, digests = measure(n, seed=0, messages=5, latency=0.001, interval=0.1, in_step=in_step)
    assert max(spans) <= math.ceil(math.log2(n)), spans
    assert digests <= math.ceil(math.log2(n)), digests  # at most one per level per round


def test_stability_digests_carry_only_changed_floors_numbered_per_level() -> None:
    members = tuple(range(100))
    tag = roster_of(members).tag
    stream = ReliableStream(3, members, Params(gossip_interval=0.1, max_members=4_096),
                            random.Random(1), 0.0)
    stream.send(b"x", 0.0)
    rounds = []
    for round_ in range(1, 4):
        digests = [o for o in stream.on_timeout(round_ * 0.1 + 0.1) if isinstance(o, OutDigest)]
        rounds.append({d.aggregate.level: d for d in digests})
    first = rounds[0]
    assert sorted(first) == list(range(7))  # a new view: every level's first digest lists everything
    assert all(d.aggregate.flags == FULL and d.aggregate.seq == 1 for d in first.values())
    assert first[0].aggregate.floors == ((3, 1),) and first[6].aggregate.floors == ((3, 0),)
    assert all(d.entries == ((3, 1),) for d in first.values())  # repair: how far we hold the stream
    for round_, later in enumerate(rounds[1:], start=2):
        (level,) = later  # then only the round's own level: nothing changed, so nothing listed
        assert later[level].aggregate.flags == 0 and later[level].aggregate.floors == ()
        assert later[level].aggregate.seq == 2, "numbered per level: its partner sees none missing"
    # our level-0 predecessor (member 2) holds it: our floor at level 1 rises, and only that goes out
    assert stream.on_digest(2, (), 0.45, Aggregate(0, tag, ((3, 1),), 0, 1, FULL)) == []
    (news,) = [o for o in stream.on_timeout(0.5) if isinstance(o, OutDigest) and o.aggregate.floors]
    assert (news.dst, news.aggregate.level, news.aggregate.floors) == (5, 1, ((3, 1),))


def test_a_missed_stability_delta_is_answered_by_a_full_digest() -> None:
    members = tuple(range(100))
    tag = roster_of(members).tag
    params = Params(gossip_interval=0.1, max_members=4_096)
    sender, partner = (ReliableStream(me, members, params, random.Random(me), 0.0) for me in (3, 5))
    sender.send(b"x", 0.0)
    assert partner.on_digest(3, (), 0.1, Aggregate(1, tag, (), 0, 1, FULL)) == []
    assert partner.on_digest(3, (), 0.2, Aggregate(1, tag, (), 0, 2)) == []  # in step
    (ask,) = partner.on_digest(3, (), 0.3, Aggregate(1, tag, (), 0, 4))  # number 3 was lost
    assert (ask.dst, ask.aggregate.level, ask.aggregate.flags) == (3, 1, RESYNC)
    (full,) = sender.on_digest(5, ask.entries, 0.3, ask.aggregate)
    assert (full.dst, full.aggregate.level, full.aggregate.flags) == (5, 1, FULL)
    assert full.aggregate.floors == ((3, 0),) and full.entries == ((3, 1),)
    (pull,) = partner.on_digest(3, full.entries, 0.3, full.aggregate)  # in step again: no request
    assert isinstance(pull, OutNack) and pull.pull, "and the repair entry shows what it lacks"
    assert sender.on_digest(7, ask.entries, 0.3, ask.aggregate) == [], "only our partner of that level may ask"


def test_a_stability_announcement_of_our_roster_is_taken_and_a_lagging_one_answered() -> None:
    members = (1, 2, 3)
    tag = roster_of(members).tag
    a = ReliableStream(1, members, Params(window_max=8), random.Random(1), 0.0)
    a.send(b"x", 0.0)
    assert a.on_stable(2, roster_of((1, 2)).tag, ((1, 1),)) == [] and a.window() == 1  # another view's word
    assert a.on_stable(2, tag, ((1, 1),)) == [] and a.window() == 0  # every member of ours holds it
    (answer,) = a.on_stable(3, tag, ((1, 0),))  # 3 lags on our stream: we tell it what we know
    assert (answer.dst, answer.roster, answer.entries) == (3, tag, ((1, 1),))


@pytest.mark.parametrize("known_stable", [False, True])
def test_a_newcomer_whose_copy_starts_at_the_cut_takes_part_in_that_streams_all_reduce(known_stable: bool) -> None:
    """A message of the old view still unstable at the change: the newcomer
    holds the stream from the cut on and keeps no state for it, so it used to
    ignore the stream's floors and its successors never learnt it; the
    message stayed unstable at its sender, whose total order then waited
    (membership-churn-total.toml, seed 51: no delivery in the last 15 s).
    A member that knows the stream stable that far tells what it knows."""
    members = tuple(range(100))
    tag = roster_of(members).tag
    newcomer = ReliableStream(99, members, Params(gossip_interval=0.1, max_members=4_096), random.Random(9), 0.0)
    newcomer.set_members(members, starts={96: 4})  # the cut: 96's stream up to 4 is the old view's
    if known_stable:
        newcomer.state.stable[96] = 4
    newcomer.on_digest(98, (), 0.05, Aggregate(0, tag, ((96, 3),), 0, 1, FULL))  # our level-0 predecessor
    digests = [o for o in newcomer.on_timeout(0.2) if isinstance(o, OutDigest)]
    told = {d.dst: dict(d.aggregate.floors).get(96) for d in digests}
    if known_stable:
        assert set(told.values()) <= {None, 4}, "a stream known stable: its known prefix, at every level"
    else:
        assert told[0] == 4, "level 0: how far we hold it ourselves"
        assert told[1] == 3, "level 1: the least of ours and our predecessor's"


def test_newcomers_before_the_sender_let_its_old_views_messages_become_stable() -> None:
    """1, 2 and 3 had a view; 4, 5 and 6 join, each copy of 1's stream
    starting at the cut, after the two messages 1 sent just before (still
    unstable at 1, with timestamps 1 and 2). The newcomers are 1's
    predecessors at levels 0 and 1. Each used to take one floor of 1's
    stream, pass on what changed and retire, never sending its own (level
    0): 1 heard no floor of its stream at those levels, its messages stayed
    unstable, its promise clock at 0, and with promises by gossip no member
    delivered again (randomized membership machine, seed 3978430701: every
    member's total order waited 30 s on a floor stuck at 0)."""
    members = (1, 2, 3, 4, 5, 6)
    params = Params(gossip_interval=0.1)
    streams = {i: ReliableStream(i, members[:3] if i <= 3 else (i,), params, random.Random(i), 0.0, ordered=True)
               for i in members}
    records = []
    for clock in (1, 2):
        _, outputs = streams[1].send(b"m%d" % clock, 0.0, clock=clock)
        records += [r for o in outputs if isinstance(o, OutRecords) for r in o.records]
    for old in (2, 3):
        streams[old].on_records(1, tuple(records), MsgType.DATA, 0.0)
    for i, stream in streams.items():  # the new view starts the streams new to each member at the cut
        new = (4, 5, 6) if i <= 3 else members
        stream.set_members(members, starts={m: 2 if m == 1 else 0 for m in new if m != i})
        stream.promise_gossip, stream.promise_nulls, stream.lamport = True, False, 2
    net = StreamNetwork({i: Peer(stream) for i, stream in streams.items()})
    net.run_events(5.0, latency=0.001)
    assert streams[1].window() == 0, "every member holds 1's messages (the newcomers from the cut on)"
    assert {i: s.promise_floor() for i, s in streams.items()} == dict.fromkeys(members, 2)
    assert all(not s.stability._rejoined for s in streams.values()), "the newcomers retire the stream once it is stable"


def test_a_member_that_knew_a_stream_stable_in_the_view_before_passes_its_floors_on() -> None:
    """5 and 6 had a view; 5 froze for a change (its stability capped) and
    sent two messages, which 6 took for stable in that view and dropped.
    In the six-member view that follows, 6 held 5's stream with no
    stability state and knew it stable: it passed no floor of it on, every
    level after it stayed at 0, 5's messages stayed unstable at 5, its
    promise clock at 0, and with promises by gossip no member delivered
    again (randomized total-order machine, explore.py seed 1675452131)."""
    members = (1, 2, 3, 4, 5, 6)
    params = Params(gossip_interval=0.1)
    streams = {i: ReliableStream(i, (5, 6) if i >= 5 else (i,), params, random.Random(i), 0.0, ordered=True)
               for i in members}
    streams[5].stability_cap = {5: 0}
    records = []
    for clock in (1, 2):
        _, outputs = streams[5].send(b"m%d" % clock, 0.0, clock=clock)
        records += [r for o in outputs if isinstance(o, OutRecords) for r in o.records]
    old = StreamNetwork({i: Peer(streams[i]) for i in (5, 6)})
    streams[6].on_records(5, tuple(records), MsgType.DATA, 0.0)
    old.run_events(2.0, latency=0.001)
    assert streams[6].state.stable.get(5) == 2 and not streams[6].state.store.get(5), "stable at 6 in the view before"
    assert streams[5].window() == 2, "capped at 5"
    for i, stream in streams.items():
        stream.stability_cap = None
        stream.set_members(members, starts={m: 0 for m in members if m != i and (i < 5 or m < 5)})
        stream.promise_gossip, stream.promise_nulls, stream.lamport = True, False, 2
        if i < 5:
            stream.on_records(5, tuple(records), MsgType.DATA, 2.0)
    net = StreamNetwork({i: Peer(stream) for i, stream in streams.items()}, now=2.0)
    net.run_events(7.0, latency=0.001)
    assert streams[5].window() == 0, "every member holds 5's messages, 6 included"
    assert {i: s.promise_floor() for i, s in streams.items()} == dict.fromkeys(members, 2)


def test_own_messages_unstable_for_two_cycles_ask_the_predecessors() -> None:
    """Promises by gossip wait on our oldest own unstable message; if a
    predecessor's last update of our stream was lost (it retired the stream
    after one more cycle), we ask every predecessor what it knows."""
    members = tuple(range(100))
    stream = ReliableStream(3, members, Params(gossip_interval=0.1, max_members=4_096),
                            random.Random(1), 0.0)
    stream.promise_gossip = True
    stream.send(b"x", 0.0, clock=5)
    asked: list[tuple[int, int]] = []
    for step in range(1, 40):
        asked += [(stream.state.round, o.dst) for o in stream.on_timeout(step * 0.1 + 0.1) if isinstance(o, OutStable)]
    depth = math.ceil(math.log2(100))
    assert {r for r, _ in asked} == {1 + 2 * depth, 1 + 4 * depth}  # every two cycles while it waits
    assert sorted(d for r, d in asked if r == 1 + 2 * depth) == sorted((3 - (1 << k)) % 100 for k in range(depth))


def test_the_promise_floor_is_the_least_clock_any_member_vouches_for() -> None:
    members = (0, 1, 2, 3)
    stream = ReliableStream(0, members, Params(), random.Random(1), 0.0)
    stream.promise_gossip = True
    stream.lamport = 9
    assert stream.promise_floor() == 0, "no predecessor has spoken yet"
    tag = roster_of(members).tag
    stream.on_digest(3, (), 0.1, Aggregate(0, tag, (), 7))  # level 0: member 3
    stream.on_digest(2, (), 0.1, Aggregate(1, tag, (), 8))  # level 1: members 1 and 2
    assert stream.promise_floor() == 7
    stream.send(b"x", 0.1, clock=10)
    stream.lamport = 10
    stream.on_digest(3, (), 0.2, Aggregate(0, tag, (), 12))
    assert stream.promise_floor() == 8
    stream.on_digest(2, (), 0.2, Aggregate(1, tag, (), 12))
    assert stream.promise_floor() == 9, "our own unstable message (timestamp 10) holds our word at 9"


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_stability_all_reduce_drains_every_buffer_through_loss(seed: int) -> None:
    """80 members (above ``ACK_MATRIX_MAX``: stability comes from the gossiped
    all-reduce alone, in deltas) lose 5 % of all datagrams while ten of them
    send; once the loss stops, every member delivers everything once and
    every buffer empties: a lost delta is noticed by its number and answered
    by a full digest, or stability would stall for good."""
    rng = random.Random(seed)
    members = tuple(range(80))
    params = Params(gossip_interval=0.05, max_members=4_096)
    net = StreamNetwork({i: Peer(ReliableStream(i, members, params, random.Random(rng.random()), 0.0))
                         for i in members})
    net.tap = losing(lambda _: rng.random() < 0.05)
    sent = []
    for step in range(10):
        sender = rng.choice(members)
        seq, outputs = net.nodes[sender].stream.send(b"m%d" % step, net.now)
        sent.append((sender, seq))
        net.nodes[sender].delivered.append((sender, seq, b"m%d" % step))
        net.submit(sender, outputs)
        net.run_events(net.now + 0.3, latency=0.001)
    net.tap = None
    net.run_events(net.now + 30.0, latency=0.001)
    replay = f"replay: pytest 'tests/test_transport_reliable.py::test_the_stability_all_reduce_drains_every_buffer_through_loss[{seed}]'"
    for node, peer in net.nodes.items():
        assert sorted((s, q) for s, q, _ in peer.delivered) == sorted(sent), f"node {node} misses messages; {replay}"
        assert peer.stream.window() == 0, f"node {node} still buffers unstable records; {replay}"
        assert peer.next_deadline() is None, f"node {node} still gossips; {replay}"


@settings(max_examples=400, deadline=None)
@given(depth=st.integers(1, 8), data=st.data())
def test_changed_floor_levels_are_exactly_those_whose_floor_moved(depth: int, data: st.DataObject) -> None:
    """``_note_floors`` marks a level for its next digest in one pass over the
    inputs; it must mark exactly the levels whose floor (``_floor_at``) differs
    from before the change, whatever moved: how far we hold the sender, its
    stable prefix, or one predecessor's value."""
    members = tuple(range(1 << depth))
    stream = ReliableStream(0, members, Params(max_members=4_096), random.Random(1), 0.0)
    values = st.integers(0, 6)
    sender = 1
    inbound = stream._inbound_of(sender)
    inbound.contig = data.draw(values)
    stream.state.stable[sender] = data.draw(values)
    if data.draw(st.booleans()):
        stream.stability._floors.setdefault(sender, Floors()).row = data.draw(st.lists(values, min_size=depth,
                                                                                max_size=depth))
    before = [stream.stability._floor_at(sender, level, stream.contig_of(sender)) for level in range(depth)]
    contig_before, low_before = inbound.contig, stream.state.stable[sender]
    what = data.draw(st.sampled_from(["contig", "low", "level"]))
    level, value_before = -1, 0
    if what == "contig":
        inbound.contig += data.draw(st.integers(0, 3))
    elif what == "low":
        stream.state.stable[sender] += data.draw(st.integers(0, 3))
    else:
        level = data.draw(st.integers(0, depth - 1))
        floors = stream.stability._floors.setdefault(sender, Floors())
        row = floors.row = floors.row or [0] * depth
        value_before = row[level]
        row[level] += data.draw(st.integers(0, 3))
    after = [stream.stability._floor_at(sender, k, stream.contig_of(sender)) for k in range(depth)]
    for floors in stream.stability._floors.values():  # nothing left to send: the marks below are this change's alone
        floors.unsent = 0
    for listed in stream.stability._unsent_at:
        listed.clear()
    stream.stability._unsent_count = 0
    stream.stability.note_floors(sender, contig_before, low_before, level, value_before)
    expected = sum(1 << k for k in range(depth) if before[k] != after[k])
    assert stream.stability._unsent_of(sender) == expected, (before, after)
    assert {k for k, listed in enumerate(stream.stability._unsent_at) if sender in listed} == \
        {k for k in range(depth) if expected >> k & 1}
    assert stream.stability._unsent_count == (1 if expected else 0)


def test_the_levels_left_to_send_agree_with_each_senders_mask() -> None:
    """Each level's set of senders to list next and each sender's mask of
    levels are two views of one thing, through sends, merges, digests,
    stability and forgetting."""
    members = tuple(range(80))
    rng = random.Random(5)
    net = StreamNetwork({i: Peer(ReliableStream(i, members, Params(gossip_interval=0.05, max_members=4_096),
                                                random.Random(i), 0.0)) for i in members})
    net.tap = losing(lambda _: rng.random() < 0.05)
    for step in range(12):
        sender = rng.choice(members)
        net.submit(sender, net.nodes[sender].stream.send(b"x", net.now)[1])
        net.run_events(net.now + 0.2, latency=0.001)
        for peer in net.nodes.values():
            stream = peer.stream
            by_level = {(s, level) for level, senders in enumerate(stream.stability._unsent_at) for s in senders}
            by_mask = {(s, level) for s, floors in stream.stability._floors.items() for level in range(stream.state.depth)
                       if floors.unsent >> level & 1}
            assert by_level == by_mask
            assert stream.stability._unsent_count == sum(1 for floors in stream.stability._floors.values() if floors.unsent)
            assert all(f.row is not None or f.others or f.unsent for f in stream.stability._floors.values()), \
                "no sender's record kept empty"


def test_during_a_view_change_nothing_past_the_snapshot_is_acknowledged() -> None:
    """Safe order delivers a message once every member acknowledged it. A
    member that answered a proposal (its snapshot holds sender 3 up to 1) and
    then received sender 3's second message will not deliver it in the old
    view, so neither its piggybacked ACKs nor its nulls may claim it: a member
    left out of the change delivered, safely, a replicated queue's PUT that
    nobody else ever delivered (nemesis, queue workload, seed 1581192924)."""
    members = (1, 2, 3)
    a, c = ReliableStream(1, members, PARAMS, random.Random(1), 0.0), ReliableStream(3, members, PARAMS,
                                                                                      random.Random(3), 0.0)
    _, (first,) = c.send(b"one", 0.0)
    a.on_records(3, first.records, MsgType.DATA, 0.0)
    a.stability_cap = {3: 1}  # the snapshot a.'s answer froze
    _, (second,) = c.send(b"two", 0.1)
    a.on_records(3, second.records, MsgType.DATA, 0.1)
    _, (mine,) = a.send(b"a's", 0.2)
    assert mine.records[0].acks == ((3, 1),), "the piggybacked ACK stops at the snapshot"
    nulls = [o for o in a.on_timeout(10.0) if isinstance(o, OutNull)]
    assert all(high <= 1 for null in nulls for _, high in null.acks)
    a.stability_cap = None  # the next view
    b = ReliableStream(1, members, PARAMS, random.Random(1), 0.0)
    b.on_records(3, first.records, MsgType.DATA, 0.0)
    b.on_records(3, second.records, MsgType.DATA, 0.1)
    _, (theirs,) = b.send(b"b's", 0.2)
    assert theirs.records[0].acks == ((3, 2),), "without a change, every record received is acknowledged"
    # and a's first message after the change carries the full ACK it held back
    a.stability_cap = None
    _, (after,) = a.send(b"a's next", 0.3)
    assert after.records[0].acks == ((3, 2),), "causal order: the later message lists everything received"
