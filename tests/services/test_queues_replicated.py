"""The replicated queue: three replicas in one process over real sockets apply
the same operations in the same order; a consumer that leaves hands its leases
back; TTL and the delivery limit retire the same messages at every replica
(the ops decide, never a replica's clock); the op codec refuses garbage."""

from __future__ import annotations

import random
from collections.abc import Callable
from contextlib import AsyncExitStack

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

import sgcs
from _net import private_multicast
from sgcs.errors import DecodeError
from sgcs.services.queues import replicated as rq
from sgcs.services.queues.replicated import decode_op_untrusted, encode_op, open_replicated_queue

SECRET = b"replicated test secret"
WAIT = 20.0


@given(st.binary(max_size=60))
def test_ops_decode_or_raise_decode_error(data: bytes) -> None:
    for raw in (data, bytes([rq.OP_VERSION]) + data):
        try:
            decode_op_untrusted(raw)
        except DecodeError:
            pass


OPS: list[rq.Op] = [
    rq.Put(b"i" * 16, 9, 1_700_000_000_123, b"body"),
    rq.Put(b"j" * 16, 0, 0, b""),
    rq.Get(7, 3, 1_700_000_000_456, 5),
    rq.Get(8, 0, 0, 0),
    rq.Settle(False, (1, 2), 9),
    rq.Settle(True, ()),
    rq.Purge(3),
    rq.Hello(1 << 63, 4, 1_000, 2**64 - 1),
    rq.State(7, 0, 2, b"image"),
]


@pytest.mark.parametrize("op", OPS, ids=lambda o: type(o).__name__)
def test_ops_round_trip_and_anything_else_raises_decode_error(op: rq.Op) -> None:
    data = encode_op(op)
    assert decode_op_untrusted(data) == op
    fixed_length = not isinstance(op, (rq.Put, rq.State))  # a PUT's body, a STATE's chunk take what follows
    head = rq._PUT.size if isinstance(op, rq.Put) else rq._STATE.size
    for cut in range(len(data) if fixed_length else head):
        with pytest.raises(DecodeError):
            decode_op_untrusted(data[:cut])
    if fixed_length:
        with pytest.raises(DecodeError):
            decode_op_untrusted(data + b"\x00")
    with pytest.raises(DecodeError, match="version"):  # the former layouts had no version byte
        decode_op_untrusted(bytes([1]) + data[1:])
    with pytest.raises(DecodeError):
        decode_op_untrusted(encode_op(rq.Get(1, rq.MAX_TAGS + 1, 0, 0)))


async def test_three_replicas_apply_the_same_puts_gets_and_acks() -> None:
    net = private_multicast(beacon_interval=0.1)
    async with AsyncExitStack() as stack:
        replicas = []
        for i in range(3):
            node = await stack.enter_async_context(sgcs.open_node(sgcs.Config(name=f"r{i}", secret=SECRET, **net)))
            replicas.append(await stack.enter_async_context(open_replicated_queue(node, "jobs", replicas=3)))
        with trio.fail_after(WAIT):
            while not all(len(r.members) == 3 for r in replicas):
                await trio.sleep(0.02)
        producer, consumer, third = replicas
        rng = random.Random(3)
        items = [(b"%d" % i, rng.randrange(10)) for i in range(300)]
        with trio.fail_after(WAIT):
            ids = await producer.put_many(items)
        # acknowledged means every replica holds it
        assert all(r.depth() >= 1 for r in replicas)
        with trio.fail_after(WAIT):
            while not all(r.depth() == 300 for r in replicas):
                await trio.sleep(0.02)
        got = []
        with trio.fail_after(WAIT):
            while len(got) < 300:
                batch = await consumer.get_many(50, timeout=5)
                got += batch
                await consumer.ack(batch)
            while not all(r.depth() == 0 for r in replicas):
                await trio.sleep(0.02)
        assert sorted(m.msg_id for m in got) == sorted(ids)
        assert [m.priority for m in got] == sorted((p for _, p in items), reverse=True)
        assert [r.store.info("q").ready for r in replicas] == [0, 0, 0]


async def test_leases_of_a_member_that_leaves_are_released_everywhere() -> None:
    net = private_multicast(beacon_interval=0.1)
    async with sgcs.open_node(sgcs.Config(name="a", secret=SECRET, **net)) as na, \
            open_replicated_queue(na, "jobs", replicas=3) as a, \
            sgcs.open_node(sgcs.Config(name="b", secret=SECRET, **net)) as nb, \
            open_replicated_queue(nb, "jobs", replicas=3) as b:
        async with sgcs.open_node(sgcs.Config(name="c", secret=SECRET, **net)) as nc, \
                open_replicated_queue(nc, "jobs", replicas=3):
            with trio.fail_after(WAIT):
                await a.wait_writable()  # a first start needs the whole replica set
        with trio.fail_after(WAIT):
            while not (len(a.members) == 2 and len(b.members) == 2 and a.writable):
                await trio.sleep(0.02)
            await a.put(b"x", 1)
        async with sgcs.open_node(sgcs.Config(name="c", secret=SECRET, **net)) as nc:
            # c joins late and receives the state ("x") by transfer; "y" outranks "x", so c's
            # GET leases the same message at every replica
            async with open_replicated_queue(nc, "jobs", replicas=3) as c:
                with trio.fail_after(WAIT):
                    while len(a.members) < 3:
                        await trio.sleep(0.02)
                    await a.put(b"y", 2)
                    while c.depth() < 2:
                        await trio.sleep(0.02)
                    (m,) = await c.get_many(1, timeout=5)
                assert m.body == b"y"
                assert a.store.info("q").leased == 1
        with trio.fail_after(WAIT):
            while a.store.info("q").leased or b.store.info("q").leased:
                await trio.sleep(0.02)
            again = await b.get_many(2, timeout=5)
        assert sorted(x.body for x in again) == [b"x", b"y"]
        assert any(x.deliveries == 2 for x in again)


class _Nursery:
    """Stands in for the replica's nursery: records what it would start."""

    def __init__(self) -> None:
        self.started: list[object] = []

    def start_soon(self, *call: object) -> None:
        self.started.append(call)


def _fixed_clock(at: float) -> Callable[[], float]:
    return lambda: at


def _state(replica: object) -> list[tuple[object, ...]]:
    db = replica.store._db  # type: ignore[attr-defined]
    return db.execute("SELECT seq, msg_id, priority, state, owner, deliveries, expires_at FROM messages "
                      "ORDER BY seq").fetchall()


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(
    st.tuples(st.just("put"), st.sampled_from([1, 2, 3]), st.integers(0, 5), st.integers(0, 9), st.integers(0, 4)),
    st.tuples(st.just("get"), st.sampled_from([1, 2, 3]), st.integers(0, 3), st.integers(0, 6), st.integers(0, 3)),
    st.tuples(st.just("ack"), st.sampled_from([1, 2, 3]), st.integers(0, 20), st.just(0), st.just(0)),
    st.tuples(st.just("release"), st.sampled_from([1, 2, 3]), st.integers(0, 20), st.just(0), st.just(0)),
    st.tuples(st.just("fail"), st.sampled_from([1, 2, 3]), st.just(0), st.just(0), st.just(0)),
    st.tuples(st.just("purge"), st.just(1), st.just(0), st.just(0), st.just(0)),
), max_size=50))
def test_replicas_fed_one_stream_hold_the_same_queue(ops: list[tuple[str, int, int, int, int]]) -> None:
    """The replicated state machine is deterministic: three replicas applying the same
    ordered stream (puts with repeated ids and TTLs, gets at various issuers' times and
    delivery limits, acks, releases, a member's failure, purges) end equal, dead
    messages included, and a repeated PUT id is applied once. Each replica's own
    clock is different and never consulted."""
    import types

    replicas = []
    for me, skew in ((1, 0.0), (2, 500.0), (3, -500.0)):
        group = types.SimpleNamespace(node_id=me)
        replica = rq.ReplicatedQueue(group, "jobs", replicas=3,  # type: ignore[arg-type]
                                     dedup_window=100, delivery_limit=me)
        replica._nursery = _Nursery()  # type: ignore[assignment]
        replica.clock = _fixed_clock(1_000.0 + skew)
        replicas.append(replica)
    put_ids = set()
    for request, (kind, member, arg, extra, extra2) in enumerate(ops, 1):  # each request its own id
        op: rq.Op | None
        if kind == "put":  # expiry at 1,000 s + 0..4 s of the putter's clock; 0: no TTL
            op = rq.Put(bytes([arg]) * 16, extra, 1_000_000 + 1_000 * extra2 if extra2 else 0, b"body")
            put_ids.add(arg)
        elif kind == "get":  # the issuer's time 999..1,005 s, its limit 0..3
            op = rq.Get(request, arg, 999_000 + 1_000 * extra, extra2)
        elif kind in ("ack", "release"):
            op = rq.Settle(kind == "release", (arg,), request)
        elif kind == "purge":
            op = rq.Purge(request)
        else:
            op = None
        for replica in replicas:
            if op is None:
                replica.store.release_consumer(f"m:{member}")
            else:
                replica._apply(member, op, rq.encode_op(op))

    first = _state(replicas[0])
    assert all(_state(r) == first for r in replicas[1:])
    assert all(r.dead_letters() == replicas[0].dead_letters() for r in replicas[1:])
    assert len({row[1] for row in first}) == len(first)  # each id at most once
    assert len(first) <= len(put_ids)


def test_a_request_sent_again_applies_once() -> None:
    """A write is sent again when a view change leaves its outcome open; a GET
    the state already holds must not lease twice, even from a restarted
    replica (whose request ids are fresh, not counted from 1 again)."""
    import types

    replica = rq.ReplicatedQueue(types.SimpleNamespace(node_id=1), "jobs", replicas=1,  # type: ignore[arg-type]
                                 dedup_window=100)
    replica._nursery = _Nursery()  # type: ignore[assignment]
    for n in range(3):
        put = rq.Put(bytes([n]) * 16, 0, 0, b"body")
        replica._apply(2, put, rq.encode_op(put))
    get = rq.Get(replica._request()[1], 1, 0, 0)
    for _ in range(2):
        replica._apply(2, get, rq.encode_op(get))
    assert replica.info().leased == 1 and replica.applied == 5
    assert replica._request()[1] != replica._request()[1]


async def _converged(replicas: list[rq.ReplicatedQueue], dead: int, leased: int = 0) -> None:
    """Wait until every replica holds ``dead`` dead and ``leased`` leased messages, and the same queue."""
    with trio.fail_after(WAIT):
        while not (all((r.info().dead, r.info().leased) == (dead, leased) for r in replicas)
                   and len({r.applied for r in replicas}) == 1
                   and all(_state(r) == _state(replicas[0]) for r in replicas[1:])):
            await trio.sleep(0.02)


async def test_ttl_and_delivery_limit_retire_the_same_messages_at_every_replica() -> None:
    """Three replicas with skewed clocks: whether a message expired is decided by the
    clock of the GET's issuer, carried in the GET, so every replica retires the same
    messages (the putter's replica would have kept them). A message released
    ``delivery_limit`` times is retired at every replica too."""
    net = private_multicast(beacon_interval=0.1)
    async with AsyncExitStack() as stack:
        replicas = []
        for i in range(3):
            node = await stack.enter_async_context(sgcs.open_node(sgcs.Config(name=f"t{i}", secret=SECRET, **net)))
            replicas.append(await stack.enter_async_context(
                open_replicated_queue(node, "jobs", replicas=3, delivery_limit=2)))
        with trio.fail_after(WAIT):
            while not all(len(r.members) == 3 for r in replicas):
                await trio.sleep(0.02)
        producer, ahead, behind = replicas
        now = producer.clock()
        ahead.clock = _fixed_clock(now + 1_000.0)
        behind.clock = _fixed_clock(now - 1_000.0)
        with trio.fail_after(WAIT):
            short = await producer.put_many([(b"a1", 5), (b"a2", 5), (b"a3", 5)], ttl=30)
            await producer.put(b"b1", 0)
            (first,) = await behind.get_many(1, timeout=5)  # 1,000 s behind: a1 is alive
            await behind.ack([first])
            (second,) = await ahead.get_many(1, timeout=5)  # 1,000 s ahead: a2, a3 expired
        assert (first.body, second.body) == (b"a1", b"b1")
        await _converged(replicas, 2, leased=1)  # an ack and a get of two members: either order
        for r in replicas:
            assert [(i, b) for i, _, b in r.dead_letters()] == [(short[1], b"a2"), (short[2], b"a3")]
            assert (r.info().dead, r.info().leased, r.info().ready) == (2, 1, 0)

        # the delivery limit: handed out twice and released twice, then retired
        await ahead.ack([second])
        with trio.fail_after(WAIT):
            poison = await producer.put(b"poison", 9)
            for round_ in range(2):
                (m,) = await replicas[round_].get_many(1, timeout=5)
                assert (m.msg_id, m.deliveries) == (poison, round_ + 1)
                await replicas[round_].release([m])
        await _converged(replicas, 3)
        for r in replicas:
            assert [b for _, _, b in r.dead_letters()] == [b"a2", b"a3", b"poison"]
            assert (r.info().ready, r.info().leased) == (0, 0)
        assert await behind.get_many(1, timeout=0.3) == []

        # an explicit sweep retires without leasing; a purge empties the dead letters everywhere
        await producer.put(b"late", 1, ttl=0.05)
        await trio.sleep(0.1)
        with trio.fail_after(WAIT):
            await producer.expire()
            await _converged(replicas, 4)
            await producer.purge_dead()
            await _converged(replicas, 0)
        assert [r.info().dead for r in replicas] == [0, 0, 0]
        assert [r.dropped_undecodable for r in replicas] == [0, 0, 0]
