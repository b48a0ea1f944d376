"""The replicated queue: three replicas in one process over real sockets apply
the same operations in the same order; a consumer that leaves hands its leases
back; the op codec refuses garbage."""

from __future__ import annotations

import random
from contextlib import AsyncExitStack

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

import sgcs
from _net import private_multicast
from sgcs.errors import DecodeError
from sgcs.services.queues.replicated import decode_op_untrusted, open_replicated_queue

SECRET = b"replicated test secret"
WAIT = 20.0


@given(st.binary(max_size=60))
def test_ops_decode_or_raise_decode_error(data: bytes) -> None:
    try:
        decode_op_untrusted(data)
    except DecodeError:
        pass


async def test_three_replicas_apply_the_same_puts_gets_and_acks() -> None:
    net = private_multicast(beacon_interval=0.1)
    async with AsyncExitStack() as stack:
        replicas = []
        for i in range(3):
            node = await stack.enter_async_context(sgcs.open_node(sgcs.Config(name=f"r{i}", secret=SECRET, **net)))
            replicas.append(await stack.enter_async_context(open_replicated_queue(node, "jobs")))
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
            open_replicated_queue(na, "jobs") as a, \
            sgcs.open_node(sgcs.Config(name="b", secret=SECRET, **net)) as nb, \
            open_replicated_queue(nb, "jobs") as b:
        with trio.fail_after(WAIT):
            while not (len(a.members) == 2 and len(b.members) == 2):
                await trio.sleep(0.02)
            await a.put(b"x", 1)
        async with sgcs.open_node(sgcs.Config(name="c", secret=SECRET, **net)) as nc:
            # c joins late: no state transfer, so it holds only what arrives after it joined; "y"
            # outranks "x", so c's GET leases the same message at every replica
            async with open_replicated_queue(nc, "jobs") as c:
                with trio.fail_after(WAIT):
                    while len(a.members) < 3:
                        await trio.sleep(0.02)
                    await a.put(b"y", 2)
                    while c.depth() < 1:
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


@settings(max_examples=100, deadline=None)
@given(st.lists(st.one_of(
    st.tuples(st.just("put"), st.sampled_from([1, 2, 3]), st.integers(0, 5), st.integers(0, 9)),
    st.tuples(st.just("get"), st.sampled_from([1, 2, 3]), st.integers(1, 3), st.just(0)),
    st.tuples(st.just("ack"), st.sampled_from([1, 2, 3]), st.integers(0, 20), st.just(0)),
    st.tuples(st.just("fail"), st.sampled_from([1, 2, 3]), st.just(0), st.just(0)),
), max_size=40))
def test_replicas_fed_one_stream_hold_the_same_queue(ops: list[tuple[str, int, int, int]]) -> None:
    """The replicated state machine is deterministic: three replicas applying the same
    ordered stream (puts with repeated ids, gets, acks, a member's failure) end equal,
    and a repeated PUT id is applied once."""
    import types

    from sgcs.services.queues import replicated as rq

    replicas = []
    for me in (1, 2, 3):
        replica = rq.ReplicatedQueue(types.SimpleNamespace(node_id=me), "jobs", dedup_window=100)  # type: ignore[arg-type]
        replica._nursery = _Nursery()  # type: ignore[assignment]
        replicas.append(replica)
    put_ids = set()
    for kind, member, arg, priority in ops:
        for replica in replicas:
            if kind == "put":
                replica._apply(member, rq.PUT, (bytes([arg]) * 16, priority, b"body"))
            elif kind == "get":
                replica._apply(member, rq.GET, (1, arg))
            elif kind == "ack":
                replica._apply(member, rq.ACK, (arg,))
            else:
                replica.store.release_consumer(f"m:{member}")
        if kind == "put":
            put_ids.add(arg)

    def state(replica: object) -> list[tuple[object, ...]]:
        db = replica.store._db  # type: ignore[attr-defined]
        return db.execute("SELECT seq, msg_id, priority, state, owner FROM messages ORDER BY seq").fetchall()

    first = state(replicas[0])
    assert all(state(r) == first for r in replicas[1:])
    assert len({row[1] for row in first}) == len(first)  # each id at most once
    assert len(first) <= len(put_ids)
