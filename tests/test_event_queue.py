"""The driver's per-group event queue: order, capacity, batches and the two
ways it ends (the writer closes: drain then EndOfChannel; the reader leaves)."""

from __future__ import annotations

import pytest
import trio

from sgcs.io.event_queue import EventQueue


def test_events_come_out_in_order_and_a_full_queue_refuses_more() -> None:
    queue: EventQueue[int] = EventQueue(3)
    assert [queue.put_nowait(i) for i in range(4)] == [True, True, True, False]
    assert queue.get_nowait() == 0
    assert queue.put_nowait(3)
    assert queue.get_many_nowait(10) == [1, 2, 3]
    with pytest.raises(trio.WouldBlock):
        queue.get_nowait()


def test_get_many_takes_at_most_its_limit() -> None:
    queue: EventQueue[int] = EventQueue(10)
    for i in range(5):
        queue.put_nowait(i)
    assert queue.get_many_nowait(2) == [0, 1] and len(queue) == 3


def test_a_closed_queue_drains_then_ends_and_a_left_one_breaks_its_writer() -> None:
    queue: EventQueue[int] = EventQueue(4)
    queue.put_nowait(1)
    queue.close()
    assert queue.get_nowait() == 1
    with pytest.raises(trio.EndOfChannel):
        queue.get_nowait()
    left: EventQueue[int] = EventQueue(4)
    left.put_nowait(1)
    assert left.close_reader() == 1
    with pytest.raises(trio.BrokenResourceError):
        left.put_nowait(2)
    with pytest.raises(trio.ClosedResourceError):
        left.get_nowait()


async def test_a_writer_waits_for_room_and_a_reader_for_an_event() -> None:
    queue: EventQueue[int] = EventQueue(1)
    got: list[int] = []

    async def read() -> None:
        for _ in range(3):
            got.append(await queue.get())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(read)
        for i in range(3):
            with trio.fail_after(5):
                await queue.put(i)
    assert got == [0, 1, 2]
