"""Client sessions of the queue manager, as the message-queue paper has them:
Bind is a client's connection answered by "connection OK", each client is
served by its own worker, and Unbind applies one of the two rules to that
client's messages (highest: at once, its waiting sends are dead for the
monitor; lowest: everything waiting is processed first). Push delivery by
callback and by async iterator with bounded prefetch; a disconnect in the
middle of a delivery loses and duplicates nothing; one slow or misbehaving
client does not hold up the others. Real sgcs nodes on loopback, in one process."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

import sgcs
from _net import private_multicast
from sgcs.services.queues import ConnectionOK, Message, QueueManager, SessionClosed, Unbind
from sgcs.services.queues.manager import open_queue_manager

pytestmark = pytest.mark.integration  # real sockets

SECRET = b"queue sessions test secret"
WAIT = 20.0


@asynccontextmanager
async def manager(name: str = "a", net: dict[str, Any] | None = None, **options: Any) -> AsyncIterator[QueueManager]:
    config = sgcs.Config(name=name, secret=SECRET, **(net or private_multicast(beacon_interval=0.1)))
    async with sgcs.open_node(config) as node, open_queue_manager(node, name, **options) as qm:
        yield qm


async def until(condition: Any, what: str) -> None:
    with trio.fail_after(WAIT):
        while not condition():
            await trio.sleep(0.01)
    assert condition(), what


def bodies(count: int, prefix: str = "m") -> list[tuple[bytes, int]]:
    return [(f"{prefix}{i}".encode(), 0) for i in range(count)]


async def test_bind_answers_connection_ok_and_serves_one_session_per_client() -> None:
    async with manager() as qm:
        qm.create_queue("q", durable=False)
        ok, session = await qm.connect("c1")
        assert ok == ConnectionOK("c1", session.number, "a") and session.state == "open"
        assert set(qm.sessions) == {"c1"}
        with pytest.raises(sgcs.UsageError, match="client 'c1' is already bound"):
            await qm.connect("c1")
        for bad in ("", "x" * 201, 7):
            with pytest.raises(sgcs.UsageError, match="client id is a non-empty str"):
                await qm.connect(bad)  # type: ignore[arg-type]
        with pytest.raises(sgcs.UsageError, match="not bound here"):
            session.send("nope", b"x")
        with pytest.raises(sgcs.UsageError, match="priority must be"):
            session.send("q", b"x", 10)
        await session.put("q", b"result after the connection OK", 3)
        assert qm.memory.info("q").ready == 1
        gone = await session.unbind()
        assert (gone.dead, gone.processed) == (0, 0) and session.state == "unbound" and qm.sessions == {}
        with pytest.raises(SessionClosed, match="unbound"):
            session.send("q", b"x")
        again, second = await qm.connect("c1")  # bound again: a new session
        assert again.session == session.number + 1 and second is not session
        await second.unbind()


async def test_queue_life_cycle_keeps_its_deprecated_names() -> None:
    async with manager() as qm:
        with pytest.warns(DeprecationWarning, match="create_queue"):
            qm.bind("old", durable=False)
        assert qm.memory.is_bound("old")
        with pytest.warns(DeprecationWarning, match="delete_queue"):
            assert qm.unbind("old", Unbind.HIGHEST) is True
        assert not qm.memory.is_bound("old")


async def test_unbind_highest_leaves_the_waiting_sends_dead_for_the_monitor() -> None:
    """MQ-4: five sends still in the inbox when an urgent unbind comes are never
    processed; the client learns it, the monitor purges them, counters say so."""
    async with manager(dead_purge_interval=0.3) as qm:
        qm.create_queue("q", durable=False)
        _, session = await qm.connect("c1")
        tickets = [session.send("q", body, priority) for body, priority in bodies(5)]
        gone = await session.unbind(Unbind.HIGHEST)  # no checkpoint in between: the worker never ran
        assert (gone.rule, gone.dead, gone.processed) == (Unbind.HIGHEST, 5, 0)
        for ticket in tickets:
            assert ticket.done and isinstance(ticket.error, SessionClosed)
            with pytest.raises(SessionClosed, match="was not sent"):
                await ticket.wait()
        assert qm.memory.info("q").ready == 0
        assert [(d.client, d.target, d.size) for d in qm.dead_requests] == [("c1", "q", 2)] * 5
        assert qm.statistics.dead_requests == 5
        await until(lambda: not qm.dead_requests, "the monitor purges dead requests")
        assert qm.statistics.dead_requests_purged == 5


async def test_unbind_lowest_processes_every_waiting_send_first_in_priority_order() -> None:
    """MQ-5 and MQ-3: the gentle unbind commits the five sends and the urgent one
    first; nothing is dead; afterwards the session refuses sends."""
    async with manager() as qm:
        qm.create_queue("q", durable=False)
        _, session = await qm.connect("c1")
        tickets = [session.send("q", body, priority) for body, priority in bodies(5)]
        tickets.append(session.send("q", b"p1", 9))
        gone = await session.unbind(Unbind.LOWEST)
        assert (gone.dead, gone.processed, gone.released) == (0, 6, 0)
        assert all(t.done and t.error is None for t in tickets) and qm.dead_requests == []
        committed = [row[0] for row in qm.memory._db.execute("SELECT body FROM messages WHERE queue='q' ORDER BY seq")]
        assert committed == [b"p1", b"m0", b"m1", b"m2", b"m3", b"m4"]
        with pytest.raises(SessionClosed):
            await session.put("q", b"late")


async def test_push_by_callback_in_priority_order_and_a_failing_callback_redelivers() -> None:
    async with manager() as qm:
        qm.create_queue("jobs", durable=False)
        await qm.put_many("jobs", [(f"{i}".encode(), i % 3) for i in range(30)])
        _, session = await qm.connect("worker")
        seen: list[tuple[bytes, int]] = []

        async def work(message: Message) -> None:
            seen.append((message.body, message.deliveries))
            if message.body == b"boom" and message.deliveries == 1:
                raise RuntimeError("the client's bug")
            await session.ack([message])

        subscription = session.subscribe("jobs", work, prefetch=4)
        await until(lambda: len(seen) == 30, "30 pushed")
        expected = sorted(range(30), key=lambda i: (-(i % 3), i))
        assert [int(body) for body, _ in seen] == expected  # highest priority first, FIFO within one
        await qm.put("jobs", b"boom", 1)  # pushed as it arrives, no polling by the client
        await until(lambda: len(seen) == 32, "the failed one is redelivered")
        assert seen[30:] == [(b"boom", 1), (b"boom", 2)]
        assert session.statistics.callback_errors == 1 and isinstance(session.last_callback_error, RuntimeError)
        assert session.statistics.peak_held <= 4 and subscription.held == 0
        assert qm.memory.info("jobs").ready == qm.memory.info("jobs").leased == 0
        await session.unbind()


async def test_push_by_async_iterator_and_the_prefetch_bounds_what_is_held() -> None:
    async with manager() as qm:
        qm.create_queue("jobs", durable=False)
        await qm.put_many("jobs", bodies(50))
        _, session = await qm.connect("worker")
        stream = session.messages("jobs", prefetch=5)
        await until(lambda: stream.buffered == 5, "the buffer fills to the prefetch")
        await trio.sleep(0.2)  # and no further, however long the client waits
        info = qm.memory.info("jobs")
        assert (info.leased, info.ready, stream.held, session.held) == (5, 45, 5, 5)
        got = []
        async for message in stream:
            got.append(message.body)
            await session.ack([message])
            assert qm.memory.info("jobs").leased <= 5
            if len(got) == 50:
                break
        assert got == [body for body, _ in bodies(50)]
        assert session.statistics.peak_held == 5 and session.statistics.handed_out == 50
        await qm.put("jobs", b"later")
        await until(lambda: stream.buffered == 1, "pushed when it arrives")
        await stream.aclose()  # the buffered one goes back unseen
        again = await qm.get("jobs", timeout=5)
        assert (again.body, again.deliveries) == (b"later", 1)
        await qm.ack([again])
        with pytest.raises(sgcs.UsageError, match="prefetch must be an int"):
            session.messages("jobs", prefetch=0)
        await session.unbind()


async def test_an_urgent_disconnect_mid_delivery_loses_and_duplicates_nothing() -> None:
    async with manager() as qm:
        qm.create_queue("jobs", durable=False)
        await qm.put_many("jobs", [(f"{i}".encode(), 0) for i in range(100)])
        _, a = await qm.connect("a")
        acked_a, handed_a = [], []
        async for message in a.messages("jobs", prefetch=10):
            handed_a.append(message.msg_id)
            if len(handed_a) == 21:
                in_hand = message
                break
            await a.ack([message])
            acked_a.append(message.msg_id)
        held = a.held
        assert 1 <= held <= 10
        gone = await a.unbind(Unbind.HIGHEST)
        assert (gone.released, gone.returned_unseen, gone.dead) == (1, held - 1, 0)
        with pytest.raises(SessionClosed):
            await a.ack([in_hand])  # too late: it went back to the queue
        assert qm.memory.info("jobs").leased == 0 and qm.memory.info("jobs").ready == 80
        _, b = await qm.connect("b")
        got_b = await b.get_many("jobs", 100, timeout=5)
        await b.ack(got_b)
        ids_b = [m.msg_id for m in got_b]
        assert len(ids_b) == 80 and set(acked_a).isdisjoint(ids_b) and len(set(acked_a) | set(ids_b)) == 100
        assert set(handed_a) & set(ids_b) == {in_hand.msg_id}  # only the unacked one is seen twice
        assert {m.msg_id: m.deliveries for m in got_b if m.deliveries != 1} == {in_hand.msg_id: 2}
        await b.unbind()


async def test_a_gentle_disconnect_mid_delivery_hands_out_the_buffer_and_waits_for_acks() -> None:
    async with manager() as qm:
        qm.create_queue("jobs", durable=False)
        await qm.put_many("jobs", [(f"{i}".encode(), 0) for i in range(100)])
        _, a = await qm.connect("a")
        result: list[Any] = []
        acked = []
        async with trio.open_nursery() as nursery:
            async for message in a.messages("jobs", prefetch=10):
                if len(acked) == 5:
                    nursery.start_soon(_store, result, a.unbind(Unbind.LOWEST))
                    await trio.sleep(0.05)
                    assert a.state == "unbinding"
                await a.ack([message])
                acked.append(message.msg_id)
            # the iterator ended once the buffer was handed out
        (gone,) = result
        assert (gone.released, gone.returned_unseen, gone.dead) == (0, 0, 0)
        assert 6 <= len(acked) <= 15 and len(set(acked)) == len(acked)
        info = qm.memory.info("jobs")
        assert (info.leased, info.ready) == (0, 100 - len(acked))


async def _store(box: list[Any], coroutine: Any) -> None:
    box.append(await coroutine)


async def test_a_slow_consumer_does_not_starve_the_other_sessions() -> None:
    """MQ-9 for push: a client whose callback never returns holds its prefetch
    and no more; the others take every other message meanwhile. Unbound, its
    messages go to them, once each."""
    async with manager() as qm:
        qm.create_queue("jobs", durable=False)
        acked: dict[str, list[bytes]] = {"fast1": [], "fast2": []}
        sessions = {}
        for client in ("slow", "fast1", "fast2"):
            _, sessions[client] = await qm.connect(client)
        stuck = trio.Event()

        async def slow(message: Message) -> None:
            await stuck.wait()  # never set: a client that hangs

        def fast(client: str) -> Any:
            async def callback(message: Message) -> None:
                await sessions[client].ack([message])
                acked[client].append(message.msg_id)
            return callback

        sessions["slow"].subscribe("jobs", slow, prefetch=4)
        for client in ("fast1", "fast2"):
            sessions[client].subscribe("jobs", fast(client), prefetch=4)
        await qm.put_many("jobs", bodies(200))
        def done() -> int:
            return len(acked["fast1"]) + len(acked["fast2"])

        await until(lambda: done() + sessions["slow"].held == 200, "the others go on")
        held = sessions["slow"].held
        assert 1 <= held <= 4 and sessions["slow"].statistics.peak_held <= 4
        assert len(acked["fast1"]) >= 10 and len(acked["fast2"]) >= 10, {k: len(v) for k, v in acked.items()}
        gone = await sessions["slow"].unbind(Unbind.HIGHEST)  # its callback is cancelled
        assert (gone.released, gone.returned_unseen) == (1, held - 1)
        await until(lambda: done() == 200, "its messages go to the others")
        every = acked["fast1"] + acked["fast2"]
        assert len(set(every)) == 200
        for client in ("fast1", "fast2"):
            await sessions[client].unbind()


async def test_a_flooding_or_blocked_sender_does_not_hold_up_the_others(tmp_path: Path) -> None:
    """Each client has its own worker: another client's send is served while one
    client has thousands waiting, or is stuck on a full queue."""
    async with manager(path=tmp_path / "a.db", fsync="off", max_depth=10) as qm:
        qm.create_queue("flood", durable=False)  # the memory store has no depth limit here
        qm.create_queue("full")  # the durable store holds at most 10 messages a queue
        qm.create_queue("other")
        _, flood = await qm.connect("flood", max_pending=5_000)
        _, light = await qm.connect("light")
        tickets = [flood.send("flood", body, 0) for body, _ in bodies(4_000)]
        await light.put("other", b"served")
        assert flood.pending >= 2_000, f"light waited for {4_000 - flood.pending} of the flood's sends"
        await tickets[-1].wait()
        assert all(t.error is None for t in tickets) and qm.memory.info("flood").ready == 4_000
        _, stuck = await qm.connect("stuck")
        await stuck.put("full", b"fits")
        blocked = [stuck.send("full", body, 0) for body, _ in bodies(20)]  # does not fit: waits for room
        await trio.sleep(0.2)
        with trio.fail_after(5):
            await light.put("other", b"served again")
        assert not any(t.done for t in blocked) and stuck.pending == 20
        gone = await stuck.unbind(Unbind.HIGHEST)
        assert gone.dead == 20 and qm.store.info("full").ready == 1
        await flood.unbind()
        await light.unbind()


async def test_push_from_another_nodes_queue_and_an_urgent_disconnect_gives_it_back(tmp_path: Path) -> None:
    net = private_multicast(beacon_interval=0.1)
    async with manager("b", net, path=tmp_path / "b.db") as b, manager("a", net) as a:
        b.create_queue("q")
        await b.put_many("q", bodies(50))
        with trio.fail_after(WAIT):
            while "b" not in a.known_nodes:
                await trio.sleep(0.02)
        _, session = await a.connect("remote-client")
        got = []
        async for message in session.messages("q@b", prefetch=8):
            assert message.node == "b"
            got.append(message.msg_id)
            if len(got) == 30:
                break
            await session.ack([message])
        held = session.held
        assert 1 <= held <= 8 and session.statistics.peak_held <= 8
        gone = await session.unbind(Unbind.HIGHEST)
        assert (gone.released, gone.returned_unseen) == (1, held - 1)
        await until(lambda: b.store.info("q").leased == 0 and b.store.info("q").ready == 21, "given back at b")
        rest = await b.get_many("q", 50, timeout=1)
        assert len(rest) == 21 and not {m.msg_id for m in rest} & set(got[:29])
