"""State transfer to joiners (``join(..., state=...)``, sgcs/state_transfer.py),
over loopback multicast: a member that joins a group with state receives a
snapshot at one point of the total order and then every later delivery once,
so its state equals the others'; a member alone founds the group after
``founder_after``; bad uses are refused in one line."""

from __future__ import annotations

import struct
from collections.abc import Callable

import pytest
import trio

import sgcs
from _net import private_multicast

SECRET = b"state transfer test secret"
WAIT = 30.0


class Log:
    """The application's state: every payload delivered, in order."""

    def __init__(self) -> None:
        self.items: list[bytes] = []

    def get_state(self) -> bytes:
        return b"".join(struct.pack(">I", len(i)) + i for i in self.items)

    def set_state(self, state: bytes) -> None:
        items, at = [], 0
        while at < len(state):
            (size,) = struct.unpack_from(">I", state, at)
            items.append(state[at + 4:at + 4 + size])
            at += 4 + size
        self.items = items


async def consume(group: sgcs.GroupHandle, log: Log) -> None:
    async for event in group:
        if isinstance(event, sgcs.Delivery):
            log.items.append(event.payload)


async def wait_for(predicate: Callable[[], bool], what: str) -> None:
    with trio.fail_after(WAIT):
        while not predicate():
            await trio.sleep(0.02)


async def test_a_late_joiner_gets_the_state_then_every_later_delivery_once() -> None:
    net = private_multicast(beacon_interval=0.1)
    logs = {name: Log() for name in "abc"}
    async with trio.open_nursery() as nursery, \
            sgcs.open_node(sgcs.Config(name="a", secret=SECRET, **net)) as na, \
            na.join("g", order=sgcs.Order.TOTAL, state=logs["a"]) as a, \
            sgcs.open_node(sgcs.Config(name="b", secret=SECRET, **net)) as nb, \
            nb.join("g", order=sgcs.Order.TOTAL, state=logs["b"]) as b:
        nursery.start_soon(consume, a, logs["a"])
        nursery.start_soon(consume, b, logs["b"])
        await wait_for(lambda: len(a.view.members) == 2 and a.has_state and b.has_state, "a group of two")
        await a.send_many([b"a%d" % i for i in range(100)])
        await b.send_many([b"b%d" % i for i in range(100)])
        async with sgcs.open_node(sgcs.Config(name="c", secret=SECRET, **net)) as nc, \
                nc.join("g", order=sgcs.Order.TOTAL, state=logs["c"]) as c:
            nursery.start_soon(consume, c, logs["c"])
            for i in range(100):  # the writers go on while c joins
                await a.send(b"x%d" % i)
                await trio.sleep(0.002)
            await wait_for(lambda: c.has_state, "c's snapshot")
            await c.send_many([b"c%d" % i for i in range(20)])
            await wait_for(lambda: all(len(log.items) == 320 for log in logs.values()), "every delivery everywhere")
            assert logs["c"].items == logs["a"].items == logs["b"].items  # the same items, in the same order
            assert len(set(logs["c"].items)) == 320  # each once
            assert c.transfers == 1 and a.transfers == 0  # b may have had one, had a founded alone first
        nursery.cancel_scope.cancel()


async def test_a_member_alone_founds_the_group_and_gets_its_own_messages() -> None:
    net = private_multicast(beacon_interval=0.1)
    log = Log()
    async with sgcs.open_node(sgcs.Config(name="solo", secret=SECRET, **net)) as node, \
            node.join("g", order="safe", state=log) as group, trio.open_nursery() as nursery:
        nursery.start_soon(consume, group, log)
        await group.send(b"first")
        await wait_for(lambda: log.items == [b"first"], "its own message")
        assert group.has_state and group.transfers == 0
        nursery.cancel_scope.cancel()


async def test_bad_uses_are_refused_in_one_line() -> None:
    net = private_multicast(beacon_interval=0.1)
    async with sgcs.open_node(sgcs.Config(name="x", secret=SECRET, **net)) as node:
        with pytest.raises(sgcs.UsageError, match="total or safe"):
            async with node.join("g", order=sgcs.Order.FIFO, state=Log()):
                pass
        with pytest.raises(sgcs.UsageError, match="get_state"):
            async with node.join("g", order=sgcs.Order.TOTAL, state=object()):  # type: ignore[arg-type]
                pass


def test_asyncio_members_transfer_state_as_trio_members_do() -> None:
    """Under asyncio the stateful group hands events over one call at a time
    (no bridge reads ahead of ``get_state``): a late joiner's state equals the
    others' and holds every delivery once."""
    import asyncio

    net = private_multicast(beacon_interval=0.1)
    logs = {name: Log() for name in "abc"}

    async def consume_asyncio(group: sgcs.GroupHandle, log: Log) -> None:
        async for event in group:
            if isinstance(event, sgcs.Delivery):
                log.items.append(event.payload)

    async def until(predicate: Callable[[], bool]) -> None:
        async with asyncio.timeout(WAIT):
            while not predicate():
                await asyncio.sleep(0.02)

    async def main() -> None:
        async with sgcs.open_node(sgcs.Config(name="a", secret=SECRET, **net)) as na, \
                na.join("g", order=sgcs.Order.TOTAL, state=logs["a"]) as a, \
                sgcs.open_node(sgcs.Config(name="b", secret=SECRET, **net)) as nb, \
                nb.join("g", order=sgcs.Order.TOTAL, state=logs["b"]) as b:
            tasks = [asyncio.create_task(consume_asyncio(a, logs["a"])),
                     asyncio.create_task(consume_asyncio(b, logs["b"]))]
            await until(lambda: len(a.view.members) == 2 and a.has_state and b.has_state)
            await a.send_many([b"a%d" % i for i in range(100)])
            async with sgcs.open_node(sgcs.Config(name="c", secret=SECRET, **net)) as nc, \
                    nc.join("g", order=sgcs.Order.TOTAL, state=logs["c"]) as c:
                tasks.append(asyncio.create_task(consume_asyncio(c, logs["c"])))
                for i in range(100):  # the writers go on while c joins
                    await b.send(b"x%d" % i)
                    await asyncio.sleep(0.002)
                await until(lambda: c.has_state)
                await c.send_many([b"c%d" % i for i in range(20)])
                await until(lambda: all(len(log.items) == 220 for log in logs.values()))
                assert logs["c"].items == logs["a"].items == logs["b"].items
                assert len(set(logs["c"].items)) == 220 and c.transfers == 1
            for task in tasks:
                task.cancel()

    asyncio.run(main())


def test_blocking_members_transfer_state_with_get_state_in_the_receivers_wait() -> None:
    """The blocking facade pulls each event of a stateful group from the
    caller's thread: ``get_state`` runs while that thread waits in
    ``receive``, so the snapshot is of exactly the events it returned."""
    import threading
    import time

    from sgcs.blocking import open_node

    net = private_multicast(beacon_interval=0.1)
    logs = {name: Log() for name in "abc"}
    threads: list[threading.Thread] = []

    def consume_blocking(group, log: Log) -> None:  # type: ignore[no-untyped-def]
        for event in group:
            if isinstance(event, sgcs.Delivery):
                log.items.append(event.payload)

    def until(predicate: Callable[[], bool]) -> None:
        deadline = time.monotonic() + WAIT
        while not predicate():
            assert time.monotonic() < deadline, "timed out"
            time.sleep(0.02)

    def start(group, log: Log) -> None:  # type: ignore[no-untyped-def]
        thread = threading.Thread(target=consume_blocking, args=(group, log))
        thread.start()
        threads.append(thread)

    with open_node(sgcs.Config(name="a", secret=SECRET, **net)) as na, \
            na.join("g", order=sgcs.Order.SAFE, state=logs["a"]) as a, \
            open_node(sgcs.Config(name="b", secret=SECRET, **net)) as nb, \
            nb.join("g", order=sgcs.Order.SAFE, state=logs["b"]) as b:
        start(a, logs["a"])
        start(b, logs["b"])
        until(lambda: len(a.view.members) == 2 and a.has_state and b.has_state)
        a.send_many([b"a%d" % i for i in range(100)])
        with open_node(sgcs.Config(name="c", secret=SECRET, **net)) as nc, \
                nc.join("g", order=sgcs.Order.SAFE, state=logs["c"]) as c:
            start(c, logs["c"])
            for i in range(100):  # the writers go on while c joins
                b.send(b"x%d" % i)
                time.sleep(0.002)
            until(lambda: c.has_state)
            c.send_many([b"c%d" % i for i in range(20)])
            until(lambda: all(len(log.items) == 220 for log in logs.values()))
            assert logs["c"].items == logs["a"].items == logs["b"].items
            assert len(set(logs["c"].items)) == 220 and c.transfers == 1
    for thread in threads:  # each stream ended (GroupClosed) when its node closed
        thread.join(timeout=WAIT)
        assert not thread.is_alive()


def test_a_blocking_stateful_receive_times_out_and_ends_when_left() -> None:
    from sgcs.blocking import open_node

    net = private_multicast(beacon_interval=0.1)
    with open_node(sgcs.Config(name="solo", secret=SECRET, **net)) as node:
        group = node.join("g", order="total", state=Log())
        assert isinstance(group.receive(timeout=WAIT), sgcs.ViewChange)  # the initial view
        with pytest.raises(TimeoutError):
            group.receive(timeout=0.05)
        group.leave()
        with pytest.raises(sgcs.GroupClosed):
            group.receive(timeout=0.05)
