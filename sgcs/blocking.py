"""A blocking facade over the trio API, for programs that do not use trio.

Theory of operation
-------------------
Each ``BlockingNode`` owns a thread running ``trio.run``, whose main task
enters ``sgcs.open_node`` and waits to be told to stop. Only that thread
touches the driver and the sans-I/O node, which thus need no locks; even
reads (``statistics()``, ``view``, ``groups``) run there, since the node
changes those structures between two of its awaits.

Commands (join, send, leave) cross over with ``trio.from_thread.run``: the
calling thread blocks while a trio task runs the trio API's coroutine, then
gets its result or its exception unchanged (``UsageError``, ``WouldBlock``).
Each call is a task that the driver serialises like any other: a thread's
sends keep its FIFO order, a blocking ``send`` waits as ``await send`` does.

Events flow back through one reader task per group into a ``_Bridge``: a
deque under a ``threading.Condition``, bounded at ``Config.app_queue``. The
trio thread never blocks on it: when it is full the reader awaits a
``trio.Event`` that the next consuming thread sets with the non-waiting
``TrioToken.run_sync_soon``. The driver's channel then fills and
backpressure reaches the network as in the trio API; a group holds at most
``2 * app_queue + 1`` events on their way to the application. Alternatives
cost more: a waiting ``queue.Queue.put`` stalls the trio thread (every group
and timer), ``to_thread.run_sync(q.put)`` takes a thread hop per event and
``from_thread.run(group.receive)`` a scheduler round trip per event.

End of stream: ``receive`` raises ``GroupClosed`` (``for event in group``
stops) once the group is left or the node closes; events not yet taken are
discarded, as leaving drains them in the trio API. A ``UsageError`` from the
stream (the group refused this member) comes after the events before it.

Shutdown: ``close()`` ends every stream, tells the main task to stop and
joins the thread. The group tasks are cancelled and leave gracefully (LEAVE
goes out in a shielded, bounded scope), ``open_node`` closes the sockets and
``trio.run`` returns: no thread or socket outlives ``close()``. The thread is
no daemon (one would be killed mid-work at exit); nodes still open at exit
are closed by the hook ``threading`` runs before joining non-daemon threads
(as ``concurrent.futures`` does), so exit does not hang on them. An
exception escaping ``trio.run`` (a driver bug) is kept and raised from
pending and later ``receive`` calls, later commands and ``close()``.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import math
import os
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator
from functools import partial
from types import TracebackType
from typing import Any, NoReturn, TypeVar, cast

import trio

from . import api
from .actions import MessageId
from .api import Event, GroupHandle, NodeHandle, View
from .io.ended import GroupClosed
from .io.signals import exit_on_sigterm
from .config import Config, Order
from .errors import UsageError
from .io.trio_driver import DriverStatistics
from .state_transfer import GroupState
from .node import NodeStatistics

__all__ = ["BlockingGroup", "BlockingNode", "GroupClosed", "open_node"]

T = TypeVar("T")
Trace = str | os.PathLike[str] | None
Members = tuple[int, ...] | None
_CLOSED = "this sgcs node is closed; open a new one with sgcs.blocking.open_node"


class _Bridge:
    """Bounded event buffer from one trio task to any number of threads."""

    def __init__(self, capacity: int, token: trio.lowlevel.TrioToken) -> None:
        self._events: collections.deque[Event] = collections.deque()
        self._capacity, self._token = capacity, token
        self._condition = threading.Condition(threading.Lock())
        self._room: trio.Event | None = None  # the reader waits on it for room
        self._ended = False
        self._error: BaseException | None = None  # raised instead of GroupClosed

    async def put(self, event: Event) -> None:
        """Trio side: append ``event``, waiting (in trio) while the buffer is full."""
        while True:
            with self._condition:
                if self._ended:
                    return  # nobody will read it
                if len(self._events) < self._capacity:
                    self._events.append(event)
                    self._condition.notify()
                    return
                room = self._room = trio.Event()
            await room.wait()

    def get(self, timeout: float | None) -> Event:
        """Thread side: the next event; raises TimeoutError or the end of stream."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._condition:
            while not self._events:
                if self._ended:
                    raise self._error or GroupClosed("the group was left or its node closed")
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise TimeoutError(f"no event within {timeout} s")
                self._condition.wait(remaining)
            event = self._events.popleft()
            room, self._room = self._room, None
        self._wake(room)
        return event

    async def put_many(self, events: list[Event]) -> None:
        """Trio side: append ``events`` in order, waiting while the buffer is full."""
        start = 0
        while start < len(events):
            with self._condition:
                if self._ended:
                    return
                room_left = self._capacity - len(self._events)
                if room_left > 0:
                    taken = events[start : start + room_left]
                    self._events.extend(taken)
                    start += len(taken)
                    self._condition.notify_all()
                    continue
                room = self._room = trio.Event()
            await room.wait()

    def get_many(self, max_events: int, timeout: float | None) -> list[Event]:
        """Thread side: the next events, at least one, at most ``max_events``."""
        events = [self.get(timeout)]
        with self._condition:
            while self._events and len(events) < max_events:
                events.append(self._events.popleft())
            room, self._room = self._room, None
        self._wake(room)
        return events

    def end(self, error: BaseException | None = None, *, discard: bool = True) -> None:
        """Any thread: end the stream (once); ``error`` replaces GroupClosed."""
        with self._condition:
            if self._ended:
                return
            self._ended, self._error = True, error
            if discard:
                self._events.clear()
            room, self._room = self._room, None
            self._condition.notify_all()
        self._wake(room)

    def _wake(self, room: trio.Event | None) -> None:
        if room is not None:
            with contextlib.suppress(trio.RunFinishedError):  # else the reader is gone with its run
                self._token.run_sync_soon(room.set)


class BlockingNode:
    """A running sgcs node served by its own trio thread; get one from ``open_node``.

    Every method may be called from any thread except the node's own."""

    def __init__(self, config: Config, trace: Trace = None) -> None:
        self._config, self._id, self._address = config, -1, ("", 0)
        self._handle: NodeHandle  # these three are set in the trio thread before open_node returns
        self._token: trio.lowlevel.TrioToken
        self._nursery: trio.Nursery
        self._stop, self._ready, self._lock = trio.Event(), threading.Event(), threading.Lock()
        self._closing = False
        self._failure: BaseException | None = None
        self._restore_sigterm: Callable[[], None] | None = None
        self._bridges: set[_Bridge] = set()  # of the groups not left: close() or a failure ends them
        self._thread = threading.Thread(target=self._serve, name=f"sgcs-node-{config.name}", args=(config, trace))

    # ------------------------------------------------------------------ trio thread

    def _serve(self, config: Config, trace: Trace) -> None:
        """The thread: run the node, then end every stream, with the failure if any."""
        try:
            trio.run(self._main, config, trace)
        except BaseException as exc:  # kept and re-raised in the callers' threads
            while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
                exc = exc.exceptions[0]  # out of the groups our nurseries wrap it in
            self._failure = exc
        finally:
            with self._lock:
                self._closing = True
                bridges = list(self._bridges)
            for bridge in bridges:
                bridge.end(self._failure)
            self._ready.set()

    async def _main(self, config: Config, trace: Trace) -> None:
        async with api.open_node(config, trace=trace) as handle:
            self._handle, self._id, self._address = handle, handle.id, handle.address
            self._token = trio.lowlevel.current_trio_token()
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                self._ready.set()
                await self._stop.wait()
                nursery.cancel_scope.cancel()  # each group task leaves its group on the way out

    async def _start_group(self, name: str, order: Order | str, members: Members,
                           state: GroupState | None) -> BlockingGroup:
        if self._closing:  # checked in this thread: the nursery may be closed already
            raise UsageError(_CLOSED)
        return cast(BlockingGroup, await self._nursery.start(self._run_group, name, order, members, state))

    async def _run_group(self, name: str, order: Order | str, members: Members, state: GroupState | None,
                         task_status: Any) -> None:
        # The bridge is ended by whoever ends the group: leave(), close() or,
        # for a failure, _serve, which alone knows the exception.
        bridge = _Bridge(self._config.app_queue, self._token)
        async with self._handle.join(name, order=order, members=members, state=state) as handle:
            with self._lock:
                self._bridges.add(bridge)
            group = BlockingGroup(self, handle, bridge, pulled=state is not None)
            task_status.started(group)
            if state is not None:
                # No reader: an event taken ahead of the application would be
                # left out of the ``get_state`` that a later event may call for.
                # ``receive`` pulls each event from the caller's thread.
                await group._left.wait()
                return
            try:
                while True:  # ends when leave() closes the handle's channel
                    try:
                        events = await handle.receive_many()
                    except trio.EndOfChannel:
                        break
                    await bridge.put_many(events)
            except UsageError as exc:  # the group refused us: the reader's to see
                bridge.end(exc, discard=False)

    # ------------------------------------------------------------------ callers' threads

    def _call(self, function: Callable[..., Awaitable[T]], *args: Any) -> T:
        """Run ``function(*args)`` in the trio thread and return its result."""
        if self._closing or self._failure is not None:
            self._raise_closed()
        with contextlib.suppress(trio.RunFinishedError, trio.Cancelled):  # the run ended meanwhile
            return trio.from_thread.run(function, *args, trio_token=self._token)
        self._raise_closed()  # outside the except: the failure keeps its own context

    def _read(self, read: Callable[[], T]) -> T:
        """Node state: read in the trio thread while it runs, directly once it ended."""
        if not self._closing:
            with contextlib.suppress(trio.RunFinishedError):
                return trio.from_thread.run_sync(read, trio_token=self._token)
        self._join_thread()
        return read()

    def _raise_closed(self) -> NoReturn:
        self._join_thread()  # a failure is known only once the run has ended
        if self._failure is not None:
            raise self._failure
        raise UsageError(_CLOSED)

    def _join_thread(self) -> None:  # called once the run is ending: a short, bounded wait
        if threading.current_thread() is not self._thread and self._thread.ident is not None:
            self._thread.join()

    @property
    def id(self) -> int:
        """This node's member id."""
        return self._id

    @property
    def name(self) -> str:
        return self._config.name

    @property
    def config(self) -> Config:
        return self._config

    @property
    def closed(self) -> bool:
        """close() was called, or the node failed."""
        return self._closing

    @property
    def address(self) -> tuple[str, int]:
        """``(host, port)`` of the node's unicast socket."""
        return self._address

    @property
    def groups(self) -> tuple[str, ...]:
        """Names of the groups this node belongs to; () once closed."""
        return self._read(lambda: self._handle.groups)

    def statistics(self) -> NodeStatistics:
        """The protocol's counters: datagrams, deliveries, drops by reason."""
        return self._read(self._handle.statistics)

    def io_statistics(self) -> DriverStatistics:
        """The driver's counters: send and receive errors, discarded events."""
        return self._read(self._handle.io_statistics)

    def name_of(self, member: int) -> str | None:
        """``member``'s ``Config.name``, if this node has heard it."""
        return self._read(lambda: self._handle.name_of(member))

    def join(
        self, name: str, *, order: Order | str = Order.FIFO, members: Iterable[int] | None = None,
        state: GroupState | None = None
    ) -> BlockingGroup:
        """Join group ``name`` until ``leave()`` (or the end of a ``with`` block).

        ``order``, ``members`` and ``state`` as in ``sgcs.NodeHandle.join``;
        the first event is always the initial view. With ``state``,
        ``get_state`` is called in the node's thread while the thread that
        called ``receive`` waits in it, so it sees exactly the events
        ``receive`` returned before (the application's other threads must not
        change the state meanwhile)."""
        member_ids = None if members is None else tuple(members)
        return self._call(self._start_group, name, order, member_ids, state)

    def close(self) -> None:
        """Leave every group, close the sockets and stop the trio thread.

        Idempotent. Re-raises an exception that ended the trio thread."""
        with self._lock:
            first, self._closing = not self._closing, True
            bridges = list(self._bridges)
        if first:
            for bridge in bridges:
                bridge.end()
            with contextlib.suppress(trio.RunFinishedError):  # else the run already ended (failed)
                self._token.run_sync_soon(self._stop.set)
        self._join_thread()
        _open_nodes.discard(self)
        if self._restore_sigterm is not None:
            self._restore_sigterm()
            self._restore_sigterm = None
        if self._failure is not None:
            raise self._failure

    def __enter__(self) -> BlockingNode:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        try:
            self.close()
        except BaseException as failure:
            if failure is not error:  # already on its way out of the block
                raise

    def __repr__(self) -> str:
        state = " closed" if self._closing else ""
        return f"<sgcs.blocking.BlockingNode {self.name!r} id={self._id} {self._address[0]}:{self._address[1]}{state}>"


class BlockingGroup:
    """Membership of one group; get one from ``BlockingNode.join``.

    ``receive()`` or ``for event in group`` give the group's events; the
    stream ends (``GroupClosed``) when the group is left or the node closes."""

    def __init__(self, node: BlockingNode, group: GroupHandle, bridge: _Bridge, *, pulled: bool = False) -> None:
        """``pulled``: a stateful group, whose events ``receive`` takes one at
        a time in the node's thread (no reader task, no bridge)."""
        self._node, self._group, self._bridge = node, group, bridge
        self._name, self._node_id = group.name, group.node_id
        self._pulled = pulled
        self._left = trio.Event()
        """Set in the node's thread once a pulled group is left: its task ends."""

    @property
    def has_state(self) -> bool:
        """Whether this member holds the group's state (joined with ``state=``)."""
        return self._pulled and self._node._read(lambda: bool(getattr(self._group, "has_state", False)))

    @property
    def transfers(self) -> int:
        """Snapshots this member received (joined with ``state=``)."""
        return self._node._read(lambda: int(getattr(self._group, "transfers", 0))) if self._pulled else 0

    @property
    def name(self) -> str:
        return self._name

    @property
    def node_id(self) -> int:
        """This node's member id."""
        return self._node_id

    @property
    def view(self) -> View:
        """The current view; once left or closed, the last one this node held."""
        return self._node._read(lambda: self._group.view)

    def send(self, payload: bytes, *, to: int | None = None, block: bool = True) -> MessageId:
        """Multicast ``payload`` to the group (this node delivers it too), or
        unicast it to member ``to``, reliably; returns the message's id.

        Blocks the calling thread under flow control, as ``GroupHandle.send``
        waits; ``block=False`` raises ``sgcs.WouldBlock`` instead."""
        return self._node._call(partial(self._group.send, payload, to=to, block=block))

    def send_many(self, payloads: Iterable[bytes], *, block: bool = True) -> list[MessageId]:
        """Multicast each payload in order, returning their ids: one round trip
        to the node's thread for the whole batch, where ``send`` pays one per message."""
        return self._node._call(partial(self._group.send_many, list(payloads), block=block))

    def receive_many(self, max_events: int = 1_024, timeout: float | None = None) -> list[Event]:
        """The next events, at least one and at most ``max_events``: waits up to
        ``timeout`` for the first, then takes those already buffered."""
        if max_events < 1:
            raise UsageError(f"max_events must be at least 1, got {max_events}")
        if self._pulled:
            return [self.receive(timeout)]
        return self._bridge.get_many(max_events, timeout)

    def receive(self, timeout: float | None = None) -> Event:
        """The next event, waiting up to ``timeout`` seconds (None: no limit).

        Raises ``TimeoutError`` when none came in time, ``GroupClosed`` once
        the group is left or the node closed."""
        if self._pulled:
            return self._pull(timeout)
        return self._bridge.get(timeout)

    def _pull(self, timeout: float | None) -> Event:
        if self._left.is_set() or self._node.closed:
            raise GroupClosed(f"group {self._name!r} was left or its node closed")
        try:
            return self._node._call(self._receive_within, timeout)
        except UsageError:
            if self._node.closed:
                raise GroupClosed(f"group {self._name!r} was left or its node closed") from None
            raise

    async def _receive_within(self, timeout: float | None) -> Event:
        with trio.move_on_after(math.inf if timeout is None else timeout):
            return await self._group.receive()
        raise TimeoutError(f"no event of group {self._name!r} within {timeout} s")

    def __iter__(self) -> Iterator[Event]:
        """The events until the group is left or the node closes."""
        with contextlib.suppress(GroupClosed):
            while True:
                yield self.receive(None)

    def leave(self) -> None:
        """Leave the group gracefully; the event stream ends. Idempotent."""
        self._bridge.end()  # first: frees the reader task if it waits for room
        with self._node._lock:
            self._node._bridges.discard(self._bridge)
        if not self._node.closed:
            with contextlib.suppress(UsageError):  # closed meanwhile: the node left it
                self._node._call(self._leave)

    async def _leave(self) -> None:
        await self._group.leave()
        self._left.set()

    def __enter__(self) -> BlockingGroup:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.leave()

    def __repr__(self) -> str:
        return f"<sgcs.blocking.BlockingGroup {self._name!r} node={self._node_id}>"


_open_nodes: set[BlockingNode] = set()


def _close_open_nodes() -> None:
    for node in list(_open_nodes):
        with contextlib.suppress(BaseException):  # a failure: exiting anyway, and its thread has ended
            node.close()


# Runs before the interpreter waits for non-daemon threads (see the docstring).
getattr(threading, "_register_atexit", atexit.register)(_close_open_nodes)


def open_node(config: Config, *, trace: Trace = None) -> BlockingNode:
    """Start an sgcs node in its own trio thread; return it once it runs.

    Use it as a context manager, or call ``close()``; a node left open is
    closed at interpreter exit. ``trace`` and the errors (``UsageError`` for a
    port in use...) are those of ``sgcs.open_node``."""
    if not isinstance(config, Config):
        raise UsageError(f"open_node needs an sgcs.Config, got {type(config).__name__}")
    node = BlockingNode(config, trace)
    node._thread.start()
    node._ready.wait()
    if node._failure is not None:
        node._thread.join()
        raise node._failure
    _open_nodes.add(node)
    # SIGTERM raises SystemExit(143) in the main thread: ``with`` blocks close
    # their groups (LEAVE) and nodes; peers see this one leave, not fail
    node._restore_sigterm = exit_on_sigterm()
    return node
