"""Unicast streams across restarts: numbers start after the sender's
incarnation << 32, a receiver starts a new incarnation's stream afresh, and
a restarted destination gets a new stream (found by the mailbox simulation:
a survivor kept numbering on from 1,446 to a restarted post office, which
waited for ever for 1, until the survivor's window filled)."""

from __future__ import annotations

from sgcs.transport.params import Params
from sgcs.transport.records import Record
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
