"""Queue managers over real sgcs groups on loopback (in one process): the wire
codec, remote put by store and forward, remote get with ack, redelivery when
the consumer leaves, long poll, unbound targets, restarts of the receiving
manager from its SQLite file, and the TTL of a remote send (the remaining time
travels; what expires before it goes is kept at the sender)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import time

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

import sgcs
from _net import private_multicast
from sgcs.errors import DecodeError
from sgcs.services.queues import wire
from sgcs.services.queues.manager import open_queue_manager
from sgcs.services.queues.store import XMIT_EXPIRED, Forwarded, forwarded_id

SECRET = b"queues test secret!!"
WAIT = 20.0


def config(name: str, net: dict[str, Any]) -> sgcs.Config:
    return sgcs.Config(name=name, secret=SECRET, **net)


PACKETS = [
    wire.Hello("node-a"),
    wire.Forward(7, 3, (Forwarded(3, "q", 9, b"x" * 10, 1_500), Forwarded(4, "r", 0, b""),
                        Forwarded(5, "q", 1, b"y", 0xFFFF_FFFF))),
    wire.ForwardAck(7, False, (3, 4)),
    wire.Get(1, 500, 10, 30_000, "q"),
    wire.Messages(1, False, (wire.Item(10, 5, 2, b"id", b"body"),)),
    wire.Ack(True, (1, 2, 3)),
]


@pytest.mark.parametrize("packet", PACKETS, ids=lambda p: type(p).__name__)
def test_packets_round_trip_and_truncations_raise_decode_error(packet: wire.Packet) -> None:
    data = wire.encode(packet)
    assert wire.decode_untrusted(data) == packet
    for cut in range(len(data)):
        with pytest.raises(DecodeError):
            wire.decode_untrusted(data[:cut])
    with pytest.raises(DecodeError):
        wire.decode_untrusted(data + b"\x00")


@given(st.binary(max_size=80))
def test_garbage_raises_only_decode_error(data: bytes) -> None:
    try:
        wire.decode_untrusted(data)
    except DecodeError:
        pass
    try:
        wire.decode_untrusted(bytes([wire.MAGIC, wire.VERSION]) + data)
    except DecodeError:
        pass


def test_a_packet_of_the_former_version_is_refused() -> None:
    """Version 1 had no TTL in FWD items: its packets must not be misread as version 2."""
    v1_forward = bytes([wire.MAGIC, 1, wire.FWD]) + (7).to_bytes(8, "big") + (3).to_bytes(8, "big") + \
        (1).to_bytes(2, "big") + (3).to_bytes(8, "big") + bytes([9]) + b"\x01q" + (1).to_bytes(4, "big") + b"x"
    with pytest.raises(DecodeError, match="version"):
        wire.decode_untrusted(v1_forward)
    with pytest.raises(DecodeError, match="version"):
        wire.decode_untrusted(bytes([wire.MAGIC, 1]) + wire.encode(wire.Hello("a"))[2:])


async def until_known(manager: Any, *names: str) -> None:
    with trio.fail_after(WAIT):
        while not all(n in manager.known_nodes for n in names):
            await trio.sleep(0.02)


async def test_store_and_forward_then_remote_get_in_priority_order(tmp_path: Path) -> None:
    net = private_multicast(beacon_interval=0.1)
    async with sgcs.open_node(config("b", net)) as nb, open_queue_manager(nb, "b", path=tmp_path / "b.db",
                                                                          audit=True) as b, \
            sgcs.open_node(config("a", net)) as na, open_queue_manager(na, "a", path=tmp_path / "a.db") as a:
        b.create_queue("orders")
        # the sender does not wait for b: commit locally, forward later
        items = [(f"{i}".encode(), i % 10) for i in range(500)]
        await a.put_many("orders@b", items)
        assert a.store.xmit_count() > 0 or b.queues()[0].ready == 500
        await until_known(a, "b")
        with trio.fail_after(WAIT):
            while a.store.xmit_count() or b.store.info("orders").ready < 500:
                await trio.sleep(0.05)
        assert all(n == 1 for n in b.store.audit_counts().values()) and len(b.store.audit_counts()) == 500
        got = []
        with trio.fail_after(WAIT):
            while len(got) < 500:
                batch = await a.get_many("orders@b", 64, timeout=5)
                got += batch
                await a.ack(batch)
        assert [m.priority for m in got] == sorted((p for _, p in items), reverse=True)
        assert {m.node for m in got} == {"b"}
        with trio.fail_after(WAIT):
            while b.store.info("orders").leased:
                await trio.sleep(0.05)
        assert b.store.info("orders").ready == 0


async def test_long_poll_and_missing_queue(tmp_path: Path) -> None:
    net = private_multicast(beacon_interval=0.1)
    async with sgcs.open_node(config("b", net)) as nb, open_queue_manager(nb, "b", path=tmp_path / "b.db") as b, \
            sgcs.open_node(config("a", net)) as na, open_queue_manager(na, "a") as a:
        b.create_queue("q", durable=False)
        await until_known(a, "b")
        with pytest.raises(sgcs.UsageError, match="not bound at node 'b'"):
            await a.get("nope@b", timeout=5)
        async with trio.open_nursery() as nursery:
            result: list[Any] = []

            async def consumer() -> None:
                result.append(await a.get("q@b", timeout=10))

            nursery.start_soon(consumer)
            await trio.sleep(0.3)
            assert not result  # parked at b
            await b.put("q", b"late", 4)
        (message,) = result
        assert (message.body, message.priority) == (b"late", 4)
        await a.release([message])  # given back: ready again at once
        again = await a.get("q@b", timeout=5)
        assert again.msg_id == message.msg_id and again.deliveries == 2
        await a.ack([again])
        with pytest.raises(TimeoutError):
            await a.get("q@b", timeout=0.2)
        await b.put("q", b"now", 1)
        ready = await a.get("q@b", timeout=0)  # timeout 0 still asks once
        assert ready.body == b"now"


async def test_a_consumer_that_leaves_without_ack_gets_its_messages_redelivered(tmp_path: Path) -> None:
    net = private_multicast(beacon_interval=0.1)
    async with sgcs.open_node(config("b", net)) as nb, open_queue_manager(nb, "b", path=tmp_path / "b.db") as b:
        b.create_queue("q")
        await b.put_many("q", [(b"one", 1), (b"two", 1)])
        async with sgcs.open_node(config("c1", net)) as n1, open_queue_manager(n1, "c1") as c1:
            await until_known(c1, "b")
            taken = await c1.get_many("q@b", 2, timeout=5)
            assert [m.body for m in taken] == [b"one", b"two"]
            assert b.store.info("q").leased == 2
        # c1 left without acking: the view change gives its leases back
        async with sgcs.open_node(config("c2", net)) as n2, open_queue_manager(n2, "c2") as c2:
            await until_known(c2, "b")
            again = await c2.get_many("q@b", 2, timeout=10)
            assert [(m.body, m.deliveries) for m in again] == [(b"one", 2), (b"two", 2)]
            await c2.ack(again)


async def test_forwarding_resumes_after_the_receiver_restarts(tmp_path: Path) -> None:
    net = private_multicast(beacon_interval=0.1)
    async with sgcs.open_node(config("a", net)) as na, open_queue_manager(na, "a", path=tmp_path / "a.db",
                                                                          retry=0.3) as a:
        await a.put_many("q@b", [(b"%d" % i, 0) for i in range(200)])  # b does not exist yet
        await trio.sleep(0.3)
        assert a.store.xmit_count("b") == 200
        for round_ in range(2):
            async with sgcs.open_node(config("b", net)) as nb, open_queue_manager(
                    nb, "b", path=tmp_path / "b.db", audit=True) as b:
                b.create_queue("q")
                if round_ == 0:
                    await a.put_many("q@b", [(b"%d" % i, 0) for i in range(200, 400)])
                    with trio.fail_after(WAIT):
                        while b.store.info("q").ready < 100:
                            await trio.sleep(0.01)
                else:
                    with trio.fail_after(WAIT):
                        while a.store.xmit_count("b"):
                            await trio.sleep(0.05)
                    counts = b.store.audit_counts()
                    assert len(counts) == 400 and set(counts.values()) == {1}
                    assert b.store.info("q").ready == 400


async def test_a_full_remote_queue_pushes_back_and_nothing_is_lost(tmp_path: Path) -> None:
    net = private_multicast(beacon_interval=0.1)
    async with sgcs.open_node(config("b", net)) as nb, open_queue_manager(
            nb, "b", path=tmp_path / "b.db", max_depth=50, audit=True) as b, \
            sgcs.open_node(config("a", net)) as na, open_queue_manager(na, "a", path=tmp_path / "a.db",
                                                                       retry=0.2) as a:
        b.create_queue("q")
        await a.put_many("q@b", [(b"%d" % i, 0) for i in range(200)])
        with trio.fail_after(WAIT):
            while b.store.info("q").ready < 50:
                await trio.sleep(0.02)
        await trio.sleep(0.5)
        assert b.store.info("q").ready == 50 and b.statistics.refused_full > 0
        refused = b.statistics.refused_full
        assert refused < 5_000, "the sender backs off instead of hammering a full queue"
        got = 0
        with trio.fail_after(WAIT):
            while got < 200:
                batch = await b.get_many("q", 20, timeout=5)
                await b.ack(batch)
                got += len(batch)
        assert a.store.xmit_count() == 0 or got == 200
        assert len(b.store.audit_counts()) == 200 and set(b.store.audit_counts().values()) == {1}


async def test_a_push_consumer_with_a_delivery_limit_and_a_dead_letter_queue(tmp_path: Path) -> None:
    """``consume`` hands messages over as they come; a message released
    ``delivery_limit`` times lands in the dead-letter queue, as does one
    whose TTL passed; a bad ttl on a remote target is refused in one line."""
    net = private_multicast(beacon_interval=0.1)
    async with sgcs.open_node(config("a", net)) as na, open_queue_manager(na, "a", path=tmp_path / "a.db") as a:
        a.create_queue("jobs", delivery_limit=2, dead_letter="jobs.dead")
        await a.put("jobs", b"poison", 9)
        await a.put("jobs", b"work", 0)
        seen: list[tuple[bytes, int]] = []
        with trio.fail_after(WAIT):
            async for message in a.consume("jobs"):
                seen.append((message.body, message.deliveries))
                if message.body == b"poison":
                    await a.release([message])  # fails twice: dead-lettered
                else:
                    await a.ack([message])
                if len(seen) == 3:
                    break
        assert seen == [(b"poison", 1), (b"poison", 2), (b"work", 1)]
        dead = await a.get("jobs.dead", timeout=5)
        assert dead.body == b"poison" and dead.deliveries == 1
        await a.put("jobs", b"stale", ttl=0.05)
        await trio.sleep(0.1)
        with pytest.raises(TimeoutError):
            await a.get("jobs", timeout=0.2)
        assert (await a.get("jobs.dead", timeout=5)).body == b"stale"
        with pytest.raises(sgcs.UsageError, match="ttl must be positive seconds up to"):
            await a.put("jobs@b", b"x", ttl=0)
        with pytest.raises(sgcs.UsageError, match="ttl must be positive seconds up to"):
            await a.put("jobs@b", b"x", ttl=50 * 86_400)
        assert a.store.xmit_count() == 0


async def test_a_remote_ttl_counts_the_time_in_the_transmission_queue(tmp_path: Path) -> None:
    """A send to q@b with a TTL: the time it waits at the sender counts (the remaining
    milliseconds are forwarded, and b counts them on its own clock); one that expires
    before b is reachable is not sent but moved to the sender's queue xmit.expired,
    counted; one without a TTL is forwarded and kept as before."""
    net = private_multicast(beacon_interval=0.1)
    async with sgcs.open_node(config("a", net)) as na, open_queue_manager(na, "a", path=tmp_path / "a.db") as a:
        sent_at = time.time()
        await a.put("q@b", b"short", 3, ttl=3.0)
        await a.put("q@b", b"plain", 0)
        await a.put("q@b", b"gone", 5, ttl=0.2)  # b does not exist yet
        with trio.fail_after(WAIT):
            while not a.statistics.expired_in_transmission:
                await trio.sleep(0.05)
        assert a.statistics.expired_in_transmission == 1 and a.store.xmit_count("b") == 2
        gone = await a.get(XMIT_EXPIRED, timeout=1)
        assert (gone.body, gone.priority, gone.msg_id) == (b"gone", 5, forwarded_id(a.store.origin, 3))
        await a.ack([gone])
        await trio.sleep(max(0.0, sent_at + 1.0 - time.time()))  # "short" has 2 s left
        async with sgcs.open_node(config("b", net)) as nb, open_queue_manager(nb, "b", path=tmp_path / "b.db") as b:
            b.create_queue("q", dead_letter="q.dead")
            with trio.fail_after(WAIT):
                while a.store.xmit_count("b"):
                    await trio.sleep(0.02)
            expiry = dict(b.store._db.execute("SELECT body, expires_at FROM messages WHERE queue='q'").fetchall())
            # b's expiry is the remaining time from arrival: about sent_at + 3 s on this one
            # clock, not arrival + 3 s (the forwarded TTL is not the original one)
            assert expiry[b"plain"] is None and abs(expiry[b"short"] - (sent_at + 3.0)) < 0.25
            await trio.sleep(max(0.0, expiry[b"short"] + 0.05 - time.time()))
            (plain,) = await b.get_many("q", 5, timeout=1)
            assert plain.body == b"plain"
            dead = await b.get("q.dead", timeout=1)
            assert (dead.body, dead.msg_id) == (b"short", forwarded_id(a.store.origin, 1))
        assert a.statistics.expired_in_transmission == 1 and a.store.xmit_count() == 0
