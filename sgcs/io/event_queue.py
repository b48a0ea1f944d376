"""A group's bounded event queue, from the trio driver to the application.

Theory of operation
-------------------
Every delivery crosses this queue, so it is built for that one job rather
than taken from ``trio.open_memory_channel``, whose generality (many senders
and receivers, statistics, clones) costs about a microsecond per event on
each side. Here there is one writer (the driver's routing, which keeps the
node's order) and one reader (the ``GroupHandle``), and events are taken in
batches when the reader wants them (``get_many_nowait``).

* Capacity is counted in events (``Config.app_queue``). ``put_nowait``
  refuses an event when full; the driver then awaits ``put``, which parks
  until the reader makes room: backpressure reaches the network.
* ``close()`` (writer side: the group was left or the node closed) lets the
  reader drain what is queued, then raises ``trio.EndOfChannel``.
  ``close_reader()`` (the application left) discards the queue; writers get
  ``trio.BrokenResourceError`` and the reader ``trio.ClosedResourceError``,
  as with a memory channel.
"""

from __future__ import annotations

from collections import deque
from typing import Generic, TypeVar

import trio

T = TypeVar("T")


class EventQueue(Generic[T]):
    """Bounded FIFO of events, one writer and one reader, in one trio run."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {capacity}")
        self._items: deque[T] = deque()
        self._capacity = capacity
        self._writer_closed = False
        self._reader_closed = False
        self._reader = trio.lowlevel.ParkingLot()
        self._room = trio.lowlevel.ParkingLot()

    def __len__(self) -> int:
        return len(self._items)

    # ------------------------------------------------------------------ writer

    def put_nowait(self, item: T) -> bool:
        """Append ``item``; False (nothing appended) while the queue is full."""
        if self._reader_closed:
            raise trio.BrokenResourceError("the reader left")
        if self._writer_closed:
            raise trio.ClosedResourceError("the queue was closed")
        if len(self._items) >= self._capacity:
            return False
        self._items.append(item)
        if self._reader:
            self._reader.unpark_all()
        return True

    async def put(self, item: T) -> None:
        """Append ``item``, waiting while the queue is full."""
        while not self.put_nowait(item):
            await self._room.park()

    def discard(self) -> int:
        """Writer side: drop every queued event (the reader is going away);
        returns how many, and frees a writer waiting for room."""
        discarded = len(self._items)
        self._items.clear()
        self._room.unpark_all()
        return discarded

    def close(self) -> None:
        """Writer side: no more events; the reader drains, then gets EndOfChannel."""
        self._writer_closed = True
        self._reader.unpark_all()
        self._room.unpark_all()

    # ------------------------------------------------------------------ reader

    def get_nowait(self) -> T:
        """The next event; trio.WouldBlock when none is queued."""
        items = self._items
        if items:
            item = items.popleft()
            if self._room and len(items) < self._capacity:
                self._room.unpark_all()
            return item
        return self._empty()

    def get_many_nowait(self, limit: int) -> list[T]:
        """Up to ``limit`` queued events, at least one (else as ``get_nowait``)."""
        items = self._items
        if not items:
            return [self._empty()]
        if len(items) <= limit:
            taken = list(items)
            items.clear()
        else:
            taken = [items.popleft() for _ in range(limit)]
        if self._room:
            self._room.unpark_all()
        return taken

    async def get(self) -> T:
        """The next event, waiting for one."""
        while True:
            try:
                return self.get_nowait()
            except trio.WouldBlock:
                await self._reader.park()

    def close_reader(self) -> int:
        """Reader side: stop reading; returns how many queued events were discarded."""
        discarded = len(self._items)
        self._items.clear()
        self._reader_closed = True
        self._room.unpark_all()
        self._reader.unpark_all()
        return discarded

    def _empty(self) -> T:
        if self._reader_closed:
            raise trio.ClosedResourceError("this group handle was left")
        if self._writer_closed:
            raise trio.EndOfChannel
        raise trio.WouldBlock
