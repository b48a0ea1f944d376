"""The paper's cases (issue 20), counted message by message on the pure post offices."""

from __future__ import annotations

import pytest

from sgcs.errors import UsageError
from sgcs.services.mailboxes.messages import Envelope, Kind, decode_envelope_untrusted, make_name
from sgcs.services.mailboxes.postoffice import PostOffice, Settings
from sgcs.services.mailboxes.sim import World, check_exactly_once


def mi(domain: int, ident: str) -> str:
    return make_name("wf", domain, "host", ident)


def fresh(domains: int = 6) -> World:
    return World(domains, Settings(retry_initial=5.0, retry_max=5.0))


def test_same_domain_costs_no_inter_domain_message() -> None:
    world = fresh()
    a, b = mi(0, "a"), mi(0, "b")
    world.create(0, a)
    world.create(0, b)
    for i in range(5):
        world.send(a, b, f"m{i}".encode())
    assert world.flight == [] and sum(world.sent.values()) == 0
    assert [m.content for m in world.pull(b)] == [b"m0", b"m1", b"m2", b"m3", b"m4"]


def test_unknown_receiver_one_query_answer_then_book_and_friends_updated() -> None:
    world = fresh()
    a, b = mi(0, "a"), mi(1, "b")
    world.create(0, a)
    world.create(1, b)
    world.move(b, 2)
    world.settle()
    world.sent.clear()
    world.send(a, b, b"hello")
    world.settle()
    assert world.sent[Kind.QUERY.value] == 1 and world.sent[Kind.ANSWER.value] == 1
    assert world.sent[Kind.MAIL.value] == 1
    assert world.pos[0].book[b] == (2, 1)  # type: ignore[union-attr]
    assert world.pos[2].mailboxes[b].friends == {0}  # type: ignore[union-attr]
    assert [m.content for m in world.pull(b)] == [b"hello"]


def test_acquaintance_exactly_one_inter_domain_mail_no_query() -> None:
    world = fresh()
    a, b = mi(0, "a"), mi(1, "b")
    world.create(0, a)
    world.create(1, b)
    world.send(a, b, b"first")  # the home is the current PO: known from the name, answered by a query
    world.settle()
    world.sent.clear()
    world.send(a, b, b"second")
    world.settle()
    assert world.sent[Kind.MAIL.value] == 1
    assert world.sent[Kind.QUERY.value] == 0 and world.sent[Kind.ANSWER.value] == 0
    assert world.sent[Kind.MAIL_ACK.value] == 1  # the one message added for reliability
    assert [m.content for m in world.pull(b)] == [b"first", b"second"]


def test_move_with_fifty_in_flight_forwards_one_batch() -> None:
    world = fresh()
    a, b = mi(0, "a"), mi(1, "b")
    world.create(0, a)
    world.create(1, b)
    world.send(a, b, b"warm-up")
    world.settle()
    world.pull(b)
    for i in range(50):
        world.send(a, b, f"m{i}".encode())
    while world.flight:  # the mails reach PO 1 and are acknowledged; the MI has not pulled
        world.deliver()
    assert len(world.pos[1].mailboxes[b].mails) == 50  # type: ignore[union-attr]
    world.sent.clear()
    world.move(b, 2)
    world.settle()
    assert world.sent[Kind.FORWARD.value] == 1
    assert world.pos[1].statistics().sent[Kind.FORWARD.value] == 1  # type: ignore[union-attr]
    assert world.sent[Kind.MAIL.value] == 0
    got = world.pull(b)
    assert [m.content for m in got] == [f"m{i}".encode() for i in range(50)]
    assert check_exactly_once(world, {(a, b): 51}) == []


def test_move_with_three_friend_domains_three_updates_two_controls() -> None:
    world = fresh(7)
    target = mi(0, "target")  # home 0
    world.create(0, target)
    world.move(target, 1)
    world.settle()
    senders = [mi(d, f"s{d}") for d in (3, 4, 5)]
    for d, s in zip((3, 4, 5), senders):
        world.create(d, s)
        world.send(s, target, b"hi")
    world.settle()
    assert world.pos[1].mailboxes[target].friends == {3, 4, 5}  # type: ignore[union-attr]
    world.sent.clear()
    world.move(target, 2)
    world.settle()
    assert world.sent[Kind.UPDATE.value] == 3
    assert world.sent[Kind.DEREG.value] + world.sent[Kind.HOME_UPDATE.value] == 2
    assert world.sent[Kind.QUERY.value] == world.sent[Kind.ANSWER.value] == 0
    for d in (3, 4, 5):
        assert world.pos[d].book[target] == (2, 2)  # type: ignore[union-attr]
    assert world.pos[0].home[target] == (2, 2)  # type: ignore[union-attr]
    assert len(world.pull(target)) == 3


def test_stale_address_book_path_reaches_the_mover() -> None:
    """Sender's book says PO 1; the MI went 1 -> 2 -> 3 and the sender was no
    friend (its update was lost): the tombstone at 1 forwards, the ack tells
    the sender the new address."""
    world = fresh()
    a, b = mi(0, "a"), mi(1, "b")
    world.create(0, a)
    world.create(1, b)
    world.send(a, b, b"one")
    world.settle()
    world.pull(b)
    world.pos[1].mailboxes[b].friends.clear()  # type: ignore[union-attr]  # as if 0 never became a friend
    world.move(b, 2)
    world.settle()
    world.move(b, 3)
    world.settle()
    assert world.pos[0].book[b] == (1, 0)  # type: ignore[union-attr]  # stale
    world.sent.clear()
    world.send(a, b, b"two")
    world.settle()
    assert [m.content for m in world.pull(b)] == [b"two"]
    assert world.pos[0].book[b][0] == 2  # type: ignore[union-attr]  # learnt from 1's tombstone
    world.send(a, b, b"three")
    world.settle()
    assert [m.content for m in world.pull(b)] == [b"three"]
    assert world.pos[0].book[b][0] == 3  # type: ignore[union-attr]


def test_expired_tombstone_makes_the_sender_ask_the_home() -> None:
    world = World(4, Settings(retry_initial=1.0, retry_max=1.0, tombstone_lifetime=2.0))
    a, b = mi(0, "a"), mi(1, "b")
    world.create(0, a)
    world.create(1, b)
    world.send(a, b, b"one")
    world.settle()
    world.pos[1].mailboxes[b].friends.clear()  # type: ignore[union-attr]
    world.move(b, 2)
    world.settle()
    world.advance(5.0)
    assert b not in world.pos[1].tombstones  # type: ignore[union-attr]
    world.sent.clear()
    world.send(a, b, b"two")
    world.settle()
    assert world.sent[Kind.NACK.value] == 1 and world.sent[Kind.QUERY.value] == 1
    assert [m.content for m in world.pull(b)] == [b"one", b"two"]


def test_bad_calls_raise_usage_error() -> None:
    po = PostOffice(0)
    with pytest.raises(UsageError):
        po.create_mi(mi(1, "x"), 0.0)
    po.create_mi(mi(0, "x"), 0.0)
    with pytest.raises(UsageError):
        po.send_mail(mi(0, "nobody"), mi(0, "x"), "", b"", 0.0)
    with pytest.raises(UsageError):
        po.move(mi(0, "x"), 0, 0.0)
    with pytest.raises(UsageError):
        make_name("a|b", 0, "h", "i")


@pytest.mark.parametrize("data", [b"", b"[]", b"not json", b'["mail", 1, [[1,2]]]', b'["nope", 0, 1]',
                                  b'["query", -1, "wf|0|h|a"]', b'["query", 0, "no-name"]', b"[" * 5000])
def test_garbage_is_refused_by_the_decoder(data: bytes) -> None:
    from sgcs.errors import DecodeError

    with pytest.raises(DecodeError):
        decode_envelope_untrusted(data)


def test_envelope_round_trip() -> None:
    env = Envelope(Kind.ANSWER, 3, [mi(0, "a"), 2, 7])
    assert decode_envelope_untrusted(env.encode()) == env


def test_resolution_takes_the_newest_address() -> None:
    world = fresh()
    c = mi(0, "c")
    world.create(0, c)
    for d in (2, 1, 0):
        world.move(c, d)
        world.settle()
    po1 = world.pos[1]
    assert po1 is not None and po1.tombstones[c][:2] == (0, 3)
    po1.book[c] = (2, 2)  # older than the tombstone: not taken
    assert po1._resolve(c) == 0
    po1.book[c] = (2, 99)  # newer: taken
    assert po1._resolve(c) == 2


def test_an_ack_for_an_older_holding_does_not_release_a_newer_one() -> None:
    """A mail aimed at PO 2, whose tombstone hands it back to PO 1, which takes
    it on again under a new token: a late copy of PO 2's ack for the first
    transmission names the old token and must not release the new holding."""
    world = fresh()
    a, c = mi(1, "a"), mi(0, "c")
    world.create(1, a)
    world.create(0, c)
    for d in (2, 1, 0):  # tombstones: PO 2 -> 1, PO 1 -> 0; c is at 0
        world.move(c, d)
        world.settle()
    po1 = world.pos[1]
    assert po1 is not None
    po1.book[c] = (2, 99)  # a wrong address that looks newest
    world.send(a, c, b"y")
    ((_, _, first_token),) = po1.outbox.values()
    world.deliver()  # PO 2's tombstone takes it on, forwards it to 1, acks the first token
    assert sorted((f.kind.value, f.to) for f in world.flight) == [("mail", 1), ("mail_ack", 1)]
    ack = next(i for i, f in enumerate(world.flight) if f.kind.value == "mail_ack")
    world.deliver(ack, duplicate=True)  # a copy of the ack stays in flight
    forward = next(i for i, f in enumerate(world.flight) if f.kind.value == "mail")
    world.deliver(forward)  # PO 1's tombstone takes the mail on again, under a new token
    ((_, target, token),) = po1.outbox.values()
    assert target == 0 and token != first_token
    late = next(i for i, f in enumerate(world.flight) if f.kind.value == "mail_ack" and f.to == 1)
    world.deliver(late)
    assert len(po1.outbox) == 1  # still held
    world.settle()
    assert [m.content for m in world.pull(c)] == [b"y"]
