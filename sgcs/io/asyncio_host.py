"""The trio driver under asyncio: trio runs as a guest of the asyncio loop.

Theory of operation
-------------------
The sgcs driver is trio code tuned for its hot path (raw non-blocking
sockets, parking lots, one node lock). Rather than port it to a second
library, an asyncio program runs it unchanged in trio's *guest mode*
(``trio.lowlevel.start_guest_run``): trio's scheduler runs inside the asyncio
loop's thread, as callbacks that asyncio schedules, and only trio's wait for
I/O happens in a helper thread. A trio program pays nothing for this.

One ``GuestRun`` per asyncio loop hosts every sgcs node opened on that loop
(trio allows one run per thread). The first ``open_node`` starts it, the last
one to close stops it and waits until trio has finished, so no trio task
outlives the program's last node.

asyncio code and trio tasks share one thread, so they never run at the same
time: asyncio code may read the node's state (views, statistics) as any trio
task may, between two of the node's awaits. They still cannot await each
other's primitives, so they meet at two bridges:

* ``GuestRun.call`` runs a trio coroutine function as a trio task and awaits
  its result in asyncio through an asyncio future, which the trio task
  resolves directly (same thread). Cancelling the asyncio caller cancels the
  trio task; an exception (``UsageError``, ``WouldBlock``) comes out unchanged.
* ``GuestRun.hold`` enters a trio async context manager (a node, a group) in
  a trio task of its own, which keeps it open until ``release`` is called, so
  that it is entered and left in one trio task as trio requires.

Events reach asyncio through an ``EventBridge``: a trio task per group moves
batches from the group's trio queue into a deque that the asyncio reader
takes from, bounded at ``Config.app_queue``. When the deque is full the trio
task waits, the group's trio queue fills behind it and backpressure reaches
the network as in the trio API. Wake-ups across the bridge go through
``TrioToken.run_sync_soon`` (asyncio to trio) and asyncio futures (trio to
asyncio), never through a primitive of the other library.
"""

from __future__ import annotations

import asyncio
import weakref
from collections import deque
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any, Generic, TypeVar

import trio

from ..errors import SgcsError, UsageError
from . import signals
from .ended import GroupClosed

T = TypeVar("T")
E = TypeVar("E")

_runs: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, GuestRun] = weakref.WeakKeyDictionary()
"""The guest run hosting each loop's nodes, while it has any."""


class GuestStopped(SgcsError):
    """The trio guest run ended while an asyncio call was waiting on it."""


class GuestRun:
    """trio running as a guest of one asyncio loop; see the module docstring."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._users = 0
        self._ready: asyncio.Future[None] = loop.create_future()
        self._done: asyncio.Future[None] = loop.create_future()
        self._stop = trio.CancelScope()
        self._nursery: trio.Nursery | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._stopping = False

    # ------------------------------------------------------------------ life

    @classmethod
    async def acquire(cls) -> GuestRun:
        """The running loop's guest run, started on first use; pair with ``release``."""
        loop = asyncio.get_running_loop()
        run = _runs.get(loop)
        if run is None:
            run = cls(loop)
            _runs[loop] = run
            run._start()
        run._users += 1
        try:
            await asyncio.shield(run._ready)
        except BaseException:
            await run.release()
            raise
        return run

    def _start(self) -> None:
        trio.lowlevel.start_guest_run(
            self._main,
            run_sync_soon_threadsafe=self._loop.call_soon_threadsafe,
            run_sync_soon_not_threadsafe=self._loop.call_soon,
            done_callback=self._finished,
            host_uses_signal_set_wakeup_fd=True,  # asyncio owns the wakeup fd
        )

    async def _main(self) -> None:
        signals.guest_runs += 1  # SIGTERM stays asyncio's business (``sgcs.io.signals``)
        try:
            await self._serve()
        finally:
            signals.guest_runs -= 1

    async def _serve(self) -> None:
        with self._stop:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                self._token = trio.lowlevel.current_trio_token()
                if not self._ready.done():
                    self._ready.set_result(None)
                if not self._stopping:
                    await trio.sleep_forever()

    def _finished(self, outcome: Any) -> None:
        if _runs.get(self._loop) is self:
            del _runs[self._loop]
        error = getattr(outcome, "error", None)  # only a bug in trio or in this module
        _settle(self._ready, error or GuestStopped("the trio guest run ended before it started"))
        if error is not None:
            _settle(self._done, error)
        elif not self._done.done():
            self._done.set_result(None)

    async def release(self) -> None:
        """Drop one user; the last stops the run and waits until trio has finished."""
        self._users -= 1
        if self._users > 0:
            return
        if _runs.get(self._loop) is self:
            del _runs[self._loop]  # a later open_node starts afresh, once this run has ended
        self._stopping = True
        if self._token is not None:
            self._token.run_sync_soon(self._stop.cancel)
        # else _main sees _stopping as soon as it starts, and returns
        await asyncio.shield(self._done)

    # ------------------------------------------------------------------ bridges

    def run_sync_soon(self, fn: Callable[..., object], *args: object) -> None:
        """Call ``fn(*args)`` in trio's context soon (thread- and signal-safe)."""
        assert self._token is not None
        self._token.run_sync_soon(fn, *args)

    def start_soon(self, async_fn: Callable[..., Awaitable[object]], *args: object) -> None:
        """Start ``async_fn(*args)`` as a task in the guest run's nursery."""
        assert self._nursery is not None
        self.run_sync_soon(self._nursery.start_soon, async_fn, *args)

    async def call(self, async_fn: Callable[..., Awaitable[T]], *args: object) -> T:
        """Await ``async_fn(*args)`` run as a trio task; cancellation crosses over."""
        future: asyncio.Future[T] = self._loop.create_future()
        scope = trio.CancelScope()

        async def task() -> None:
            try:
                with scope:
                    try:
                        result = await async_fn(*args)
                    except Exception as exc:
                        _settle(future, exc)
                    else:
                        if not future.done():
                            future.set_result(result)
            finally:
                _settle(future, GuestStopped("the node closed before this call finished"))

        self.start_soon(task)
        try:
            return await future
        except asyncio.CancelledError:
            future.cancel()  # the trio task's outcome has no reader now
            self.run_sync_soon(scope.cancel)
            raise

    async def hold(
        self, manager: AbstractAsyncContextManager[T], body: Callable[[T], Awaitable[object]] | None = None
    ) -> tuple[T, Callable[[], Awaitable[None]]]:
        """Enter ``manager`` in a trio task of its own and keep it entered,
        running ``body(value)`` meanwhile if given. Returns the value and an
        async function that leaves it (cancelling ``body``) and waits for that."""
        entered: asyncio.Future[T] = self._loop.create_future()
        left: asyncio.Future[None] = self._loop.create_future()
        scope = trio.CancelScope()

        async def holder() -> None:
            try:
                async with manager as value:
                    if entered.done():  # the asyncio side gave up while we entered
                        return
                    entered.set_result(value)
                    with scope:
                        if body is None:
                            await trio.sleep_forever()
                        else:
                            await body(value)
            except Exception as exc:
                _settle(entered if not entered.done() else left, exc)
            finally:
                _settle(entered, GuestStopped("the trio guest run ended while entering"))
                if not left.done():
                    left.set_result(None)

        async def leave() -> None:
            self.run_sync_soon(scope.cancel)
            await asyncio.shield(left)  # a cancelled exit still lets trio leave in the background

        self.start_soon(holder)
        try:
            value = await entered
        except asyncio.CancelledError:
            entered.cancel()
            self.run_sync_soon(scope.cancel)
            raise
        return value, leave


def _settle(future: asyncio.Future[Any], error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)


class EventBridge(Generic[E]):
    """A group's events on their way from a trio task to an asyncio reader."""

    def __init__(self, run: GuestRun, capacity: int) -> None:
        self._run = run
        self._capacity = capacity
        self._items: deque[E] = deque()
        self._reader: asyncio.Future[None] | None = None
        self._room: trio.Event | None = None
        self._ended = False
        self._error: Exception | None = None

    def __len__(self) -> int:
        return len(self._items)

    # ------------------------------------------------------------------ trio side

    async def feed(self, receive_many: Callable[[int], Awaitable[list[E]]]) -> None:
        """Move batches from ``receive_many`` until its stream ends (trio task)."""
        try:
            while True:
                while len(self._items) >= self._capacity:
                    self._room = trio.Event()
                    await self._room.wait()
                self._items.extend(await receive_many(self._capacity - len(self._items)))
                self._wake()
        except trio.EndOfChannel:
            pass
        except UsageError as exc:  # the group refused us: raised after the events before it
            self._error = exc
        finally:
            self._ended = True
            self._wake()

    def _wake(self) -> None:
        reader, self._reader = self._reader, None
        if reader is not None and not reader.done():
            reader.set_result(None)

    # ------------------------------------------------------------------ asyncio side

    async def get_many(self, limit: int) -> list[E]:
        """At least one event, at most ``limit``; ``GroupClosed`` at the end."""
        while not self._items:
            if self._error is not None:
                raise self._error
            if self._ended:
                raise GroupClosed("the group was left or its node closed")
            self._reader = asyncio.get_running_loop().create_future()
            await self._reader
        items = self._items
        taken = [items.popleft() for _ in range(min(limit, len(items)))]
        if self._room is not None and len(items) < self._capacity:
            self._run.run_sync_soon(self._room.set)
            self._room = None
        return taken

    async def pause(self) -> None:
        """Let the loop's other tasks run (a reader draining a full bridge would not)."""
        await asyncio.sleep(0)

    def get_nowait(self) -> E | None:
        """The next queued event, or None when none is queued."""
        if not self._items:
            return None
        item = self._items.popleft()
        if self._room is not None:
            self._run.run_sync_soon(self._room.set)
            self._room = None
        return item
