"""Unicast streams across restarts: numbers start after the sender's
incarnation << 32, a receiver starts a new incarnation's stream afresh, and
a restarted destination gets a new stream (found by the mailbox simulation:
a survivor kept numbering on from 1,446 to a restarted post office, which
waited for ever for 1, until the survivor's window filled)."""

from __future__ import annotations

from sgcs.transport.params import Params
from sgcs.records import Record
from sgcs.transport.unicast import UnicastStreams

ME, PEER = 1, 2


def streams(incarnation: int = 0) -> UnicastStreams:
    return UnicastStreams(ME, Params(fragment_size=100, window_max=8), incarnation=incarnation)


def records(first: int, count: int) -> tuple[Record, ...]:
    return tuple(Record(PEER, seq, (), 0, f"m{seq}".encode(), 0) for seq in range(first, first + count))


def test_a_senders_unicasts_are_numbered_after_its_incarnation() -> None:
    first, send = streams(incarnation=3).send(PEER, b"x", 0.0)
    assert first == (3 << 32) + 1 and send.records[0].seq == first
    assert streams().send(PEER, b"x", 0.0)[0] == 1


def test_a_receiver_starts_a_restarted_senders_stream_afresh() -> None:
    u = streams()
    delivered, ack = u.on_records(PEER, records((1 << 32) + 1, 3), 0.0, incarnation=1)
    assert [m.seq for m in delivered] == [(1 << 32) + 1, (1 << 32) + 2, (1 << 32) + 3]
    assert ack.high == (1 << 32) + 3
    delivered, ack = u.on_records(PEER, records((2 << 32) + 1, 2), 0.0, incarnation=2)
    assert [m.payload for m in delivered] == [f"m{(2 << 32) + 1}".encode(), f"m{(2 << 32) + 2}".encode()]
    assert u.drops == {}, "the new incarnation's records are not beyond the old stream's window"
    late, _ = u.on_records(PEER, records((2 << 32) + 1, 1), 0.0, incarnation=2)
    assert late == [], "a duplicate within one incarnation is still a duplicate"


def test_a_restarted_destination_gets_a_new_stream() -> None:
    u = streams(incarnation=1)
    for _ in range(5):
        u.send(PEER, b"x", 0.0)
    u.on_ack(PEER, (1 << 32) + 5)
    u.forget(PEER)  # the group does this when it hears PEER's new incarnation
    first, _ = u.send(PEER, b"y", 0.0)
    assert first == (1 << 32) + 1, "the restarted receiver expects the stream's first number"
    receiver = UnicastStreams(PEER, Params(fragment_size=100, window_max=8), incarnation=7)
    delivered, _ = receiver.on_records(ME, (Record(ME, first, (), 0, b"y", 0),), 0.0, incarnation=1)
    assert [m.payload for m in delivered] == [b"y"]


def test_unicasts_a_departed_destination_never_acknowledged_are_named() -> None:
    """Each unicast has an outcome: acknowledged, or named by ``forget``
    when its destination leaves. A message of three fragments half
    acknowledged is still not delivered; one wholly acknowledged is."""
    u = streams()
    one, _ = u.send(PEER, b"a", 0.0)
    two, _ = u.send(PEER, b"b" * 250, 0.0)  # records two..two+2
    three, _ = u.send(PEER, b"c", 0.0)
    u.on_ack(PEER, one)
    u.on_ack(PEER, two + 1)  # the second message's first two fragments only
    assert u.forget(PEER) == [two, three]
    assert u.forget(PEER) == []


def test_a_unicast_to_a_member_that_leaves_gets_not_delivered_at_its_sender() -> None:
    """End to end on one node pair: 1 unicasts to 2, whose ACKs never come
    back; 2 leaves; 1 reports the unicast NotDelivered (destination_left),
    with a trace row of that kind."""
    from sgcs.actions import Multicast, NotDelivered, TraceEvent
    from sgcs.config import Config
    from sgcs.node import Node
    import random

    config = Config(secret=b"a test secret here", node_id=1)
    a = Node(1, config, random.Random(1), resolve=lambda n: n, trace=True)
    b = Node(2, Config(secret=b"a test secret here", node_id=2), random.Random(2), resolve=lambda n: n, trace=True)
    for node in (a, b):
        node.join("g", 0.0, members=[1, 2])
    for action in b.multicast("g", b"hi", 0.05) + b.handle_timeout(0.06):  # a learns where 2 is
        if isinstance(action, Multicast):
            a.handle_datagram(2, action.data, 0.06)
    a.unicast("g", 2, b"hello", 0.1)  # its datagrams are lost: no ACK comes
    sent = a.last_sent
    assert sent is not None and sent.sender == 1
    actions: list[object] = []
    for action in b.leave("g", 0.2):  # 2's LEAVE reaches 1: the view change drops 2
        if isinstance(action, Multicast):
            actions += a.handle_datagram(2, action.data, 0.2)
    now = 0.2
    for _ in range(200):
        now += 0.05
        actions += a.handle_timeout(now)
        if any(isinstance(x, NotDelivered) for x in actions):
            break
    (failed,) = [x for x in actions if isinstance(x, NotDelivered)]
    assert (failed.message, failed.reason, failed.to) == (sent, "destination_left", 2)
    rows = [x for x in actions if isinstance(x, TraceEvent) and x.kind == "not_delivered"]
    assert [(r.sender, r.seq, r.dest, r.reason) for r in rows] == [(1, sent.seq, 2, "destination_left")]
