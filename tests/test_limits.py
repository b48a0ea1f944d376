"""Every cap of the table in docs/limits.md: drive the
state machine past the cap, then check the policy (what is kept, what is
dropped or refused) and the counter that reports it. A short flood of each
kind (tests/_flood.py, the harness of benchmarks/flood.py) checks that the
heap stays bounded."""

from __future__ import annotations

import random

import pytest

from sgcs.config import Config, Order
from sgcs.errors import UsageError
from sgcs.membership.change import MAX_REJECTED, BoundedSet
from sgcs.membership.agreement import ViewAgreement
from sgcs.node import MAX_GROUPS, Node
from sgcs.ordering.total import PROMISES_MAX, OrderedMessage, OrderingLayer
from sgcs.transport.reassembly import Reassembly
from sgcs.records import MORE_FRAGMENTS, Record
from sgcs.transport.params import Params
from sgcs.transport.reliable import SENDER_BUFFER_FACTOR, ReliableStream
from sgcs.transport.unicast import UnicastStreams
from sgcs.membership.messages import Propose, decode_untrusted
from sgcs.wire import MsgType

import _flood as flood

WINDOW = 32
PARAMS = Params(fragment_size=10, window_max=WINDOW, max_message=100, reassembly_timeout=5.0)
ME, PEER = 1, 2


def stream() -> ReliableStream:
    return ReliableStream(ME, (ME, PEER), PARAMS, random.Random(0), 0.0)


def rec(seq: int, more: bool = False, payload: bytes = b"x" * 10, sender: int = PEER) -> Record:
    return Record(sender, seq, (), MORE_FRAGMENTS if more else 0, payload)


def feed(s: ReliableStream, records: list[Record], now: float = 0.0) -> list:
    return s.on_records(PEER, tuple(records), MsgType.DATA, now)


# ---------------------------------------------------------------------- reliable multicast stream


def test_out_of_order_records_per_sender_stop_at_window_max() -> None:
    s = stream()
    assert feed(s, [rec(seq) for seq in range(2, 2 + 3 * WINDOW)]) == []  # record 1 never comes
    assert s.statistics().buffered == WINDOW - 1  # 2 .. 1 + window_max
    assert s.drops()["beyond_window"] == 2 * WINDOW + 1
    assert feed(s, [rec(2**62)]) == [] and s.drops()["beyond_window"] == 2 * WINDOW + 2


def test_unstable_records_of_one_sender_stop_at_the_sender_buffer_cap() -> None:
    s = stream()  # PEER never gossips: nothing of it becomes stable here
    cap = SENDER_BUFFER_FACTOR * WINDOW
    delivered = feed(s, [rec(seq) for seq in range(1, cap + 21)])
    assert len(delivered) == cap and s.statistics().buffered == cap
    assert s.drops() == {"sender_buffer_full": 20}
    assert s.contig_of(PEER) == cap  # the dropped records count as lost: NACKs fetch them later


def test_a_message_that_never_ends_is_dropped_at_max_message_and_its_tail_skipped() -> None:
    s = stream()
    records = [rec(seq, more=True) for seq in range(1, 16)] + [rec(16), rec(17, payload=b"next")]
    delivered = feed(s, records)
    assert s.drops() == {"reassembly_oversize": 1}  # 11 fragments of 10 bytes > max_message 100
    assert [m.payload for m in delivered] == [b"next"]  # the tail (12..16) is never a message


def test_a_message_of_exactly_max_message_bytes_is_delivered() -> None:
    s = stream()
    delivered = feed(s, [rec(seq, more=seq < 10) for seq in range(1, 11)])
    assert [len(m.payload) for m in delivered] == [100] and s.drops() == {}


def test_a_partial_message_is_dropped_after_the_reassembly_timeout() -> None:
    s = stream()
    feed(s, [rec(1, more=True), rec(2, more=True)], now=1.0)
    assert s.next_deadline() is not None and s.next_deadline() <= 1.0 + PARAMS.reassembly_timeout
    s.on_timeout(5.9)
    assert "reassembly_timeout" not in s.drops()
    s.on_timeout(6.0)
    assert s.drops() == {"reassembly_timeout": 1}
    delivered = feed(s, [rec(3), rec(4, payload=b"whole")], now=7.0)  # 3 ended the dropped message
    assert [m.payload for m in delivered] == [b"whole"]


def test_forgetting_a_sender_forgets_its_partial_message() -> None:
    s = stream()
    feed(s, [rec(1, more=True)])
    s.set_members((ME,))
    assert s.next_deadline() is None or s.next_deadline() > PARAMS.reassembly_timeout


# ---------------------------------------------------------------------- unicast and reassembly


def test_unicast_drops_records_beyond_the_window_and_times_out_partial_messages() -> None:
    u = UnicastStreams(ME, PARAMS)
    u.on_records(PEER, tuple(rec(seq) for seq in range(2, 2 + 2 * WINDOW)))
    assert u.drops == {"beyond_window": WINDOW + 1} and u.buffered() == WINDOW - 1
    u = UnicastStreams(ME, PARAMS)
    u.on_timeout(10.0, 64)
    u.on_records(PEER, (rec(1, more=True),))  # no clock given: the next timer starts the timeout
    assert u.next_deadline() == 10.0
    u.on_timeout(11.0, 64)
    assert u.next_deadline() == 16.0
    u.on_timeout(16.0, 64)
    assert u.drops == {"reassembly_timeout": 1}
    messages, _ = u.on_records(PEER, (rec(2), rec(3, payload=b"ok")))
    assert [m.payload for m in messages] == [b"ok"]


def test_reassembly_holds_at_most_max_message_bytes() -> None:
    r, drops = Reassembly(), {}
    for seq in range(1, 1000):
        r.push(rec(seq, more=True), 0.0, 100, 5.0, drops)
        assert r.size <= 100
    assert drops == {"reassembly_oversize": 1}  # dropped once; the rest is its tail
    assert r.skipping and r.fragments == [] and r.size == 0
    assert r.push(rec(1000), 0.0, 100, 5.0, drops) is None and r.idle()  # the tail ends
    assert r.push(rec(1001, payload=b"new"), 0.0, 100, 5.0, drops) == [rec(1001, payload=b"new")]


# ---------------------------------------------------------------------- membership and group


def test_joiners_past_max_members_are_refused_and_counted() -> None:
    agreement = ViewAgreement(ME, (ME, PEER), Params(max_members=4), 0.0)
    outputs = agreement.merge_with(dict.fromkeys(range(10, 20), 1), 10, 0.0)
    assert outputs, "a proposal for the view at its cap"
    assert len(agreement.wanted()) == 4 and agreement.refused_joiners == 8
    assert agreement.merge_with({30: 1}, 30, 0.0) == []  # refused at once, no proposal
    assert agreement.refused_joiners == 9


def test_proposals_that_only_grow_keep_one_sent_under_entry() -> None:
    agreement = ViewAgreement(ME, (ME, PEER), PARAMS, 0.0)
    for attempt in range(1, 200):  # a coordinator re-proposing for every new joiner
        members = tuple(sorted({0, ME, PEER, *range(10, 10 + attempt)}))
        msg = Propose(0, 5, attempt, 0, members)
        assert agreement.on_propose(0, msg, (attempt, {}), 0.0)
    assert agreement.answer is not None and len(agreement.answer.sent_under) == 1  # each was dominated by the next
    assert agreement.answer.sent_under[0][1] == 199
    shrunk = Propose(0, 5, 500, 0, (0, ME, PEER))
    flush = agreement.on_propose(0, shrunk, (300, {}), 0.0)[-1]
    assert decode_untrusted(MsgType.FLUSH, flush.body).rollback == 300  # sent under a larger view: rolled back


def test_joining_with_more_members_than_max_members_is_a_usage_error() -> None:
    node = Node(ME, Config(secret=b"limits-test-secret", max_members=3), random.Random(0))
    with pytest.raises(UsageError, match=r"Config.max_members is 3"):
        node.join("g", 0.0, members=[1, 2, 3, 4])
    assert node.groups == ()


def test_a_node_joins_at_most_max_groups() -> None:
    node = Node(ME, Config(secret=b"limits-test-secret"), random.Random(0))
    for i in range(MAX_GROUPS):
        node.join(f"g{i}", 0.0, members=[ME])
    with pytest.raises(UsageError, match=f"at most {MAX_GROUPS} groups"):
        node.join("one-more", 0.0, members=[ME])


def test_refused_members_are_remembered_up_to_the_cap_oldest_forgotten() -> None:
    rejected = BoundedSet(MAX_REJECTED)
    for member in range(MAX_REJECTED + 10):
        rejected.add(member)
    assert len(rejected) == MAX_REJECTED and rejected.forgotten == 10
    assert 9 not in rejected and 10 in rejected and MAX_REJECTED + 9 in rejected


# ---------------------------------------------------------------------- ordering


def test_promises_waiting_per_member_are_capped_oldest_dropped() -> None:
    layer = OrderingLayer(ME, (ME, PEER), Order.TOTAL)
    for i in range(PROMISES_MAX + 5):
        layer.on_null(PEER, ((PEER, 10**9 + i),), i + 1)  # a position its stream never reaches
    assert layer.promises_dropped == 5
    assert len(layer._streams[PEER].promises) == PROMISES_MAX


def test_acks_naming_non_members_leave_no_state() -> None:
    layer = OrderingLayer(ME, (ME, PEER), Order.SAFE)
    layer.on_message(OrderedMessage(PEER, 1, 1, tuple((10_000 + i, 1) for i in range(5_000)), b"m"))
    layer.on_null(PEER, tuple((20_000 + i, 1) for i in range(5_000)), 1)
    assert set(layer._acked[PEER]) <= {ME, PEER}
    assert set(layer._streams) == {ME, PEER}


def test_promises_by_gossip_keep_no_state_for_members_that_do_not_send() -> None:
    members = tuple(range(10_000))
    layer = OrderingLayer(0, members, Order.SAFE, gossip=True)
    for member in members:
        layer.start_at(member, 7 << 32)  # a view's cut: every member's stream base
    layer.on_null(99, ((99, (7 << 32) + 5),), 4)  # a null from a member that never sent
    assert not layer._streams and not layer._clocks  # nothing per silent member
    layer.on_message(OrderedMessage(4_321, (7 << 32) + 1, (7 << 32) + 1, ((5, 1),), b"m", clock=3))
    assert set(layer._streams) == {4_321} and not layer._acked  # no safe-order ACK table either
    assert layer.deliverable() == []  # not yet below the floor
    layer.set_floor(3)
    assert [m.payload for m in layer.deliverable()] == [b"m"]
    stream = layer._streams[4_321]
    assert stream.queue is stream.stamps is stream.promises  # the shared empty deque: none of its own


# ---------------------------------------------------------------------- config


def test_new_limit_fields_are_validated_with_their_range() -> None:
    with pytest.raises(UsageError, match=r"Config.max_members must be in \[2, 32000\], got 1"):
        Config(secret=b"limits-test-secret", max_members=1)
    with pytest.raises(UsageError, match=r"Config.reassembly_timeout must be in \[0.1, 86400.0\]"):
        Config(secret=b"limits-test-secret", reassembly_timeout=0.0)


# ---------------------------------------------------------------------- floods from one source

SMALL = flood.default_config(window_max=64, max_message=32 * 1024, max_members=16, reassembly_timeout=1.0)
SLACK = 2 * 1024 * 1024
"""Interpreter noise and the wire's bounded verified-datagram cache."""


def _records_bound(config: Config) -> int:
    record = flood.record_payload(config) + flood.RECORD_OVERHEAD
    return SENDER_BUFFER_FACTOR * config.window_max * record


@pytest.mark.parametrize("scenario, reason", [
    ("garbage", None), ("bad_mac", "mac"), ("huge_seq", "beyond_window"), ("far_ahead", "beyond_window"),
    # the endless message's records are stable at once in a view of two (the
    # attacker ACKs its own stream, we hold it): the max_message cap stops it
    ("endless_message", "reassembly_oversize"), ("group_tags", None), ("hello_ids", "members_full"),
])
def test_a_flood_from_one_source_stays_under_its_bound(scenario: str, reason: str | None) -> None:
    result = flood.run_flood(scenario, 4_000, SMALL)
    assert result.peak_bytes < _records_bound(SMALL) + SLACK, result.line()
    assert result.retained_bytes <= result.peak_bytes
    if reason is not None:
        assert result.drop_reasons.get(reason, 0) > 0, result.line()
    if scenario == "endless_message":  # 4 s of virtual time: the 1 s timeout fired
        assert result.drop_reasons.get("reassembly_timeout", 0) + result.drop_reasons.get(
            "reassembly_oversize", 0) > 0, result.line()
    if scenario == "group_tags":
        assert result.foreign == 4_000
    if scenario == "hello_ids":
        assert result.members <= SMALL.max_members


def test_a_flood_of_fresh_sender_ids_stays_under_the_per_peer_caps() -> None:
    result = flood.run_flood("sender_ids", 4_000, SMALL)
    assert result.peak_bytes < 4_000 * flood.PEER_STATE + SLACK, result.line()
