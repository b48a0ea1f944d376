"""The public API: open a node, join groups, send, and read events.

Theory of operation
-------------------
``open_node`` runs a ``sgcs.io.TrioDriver`` for the duration of an ``async
with`` block and hands out a ``NodeHandle``. ``NodeHandle.join`` is itself an
async context manager: entering it joins the group, leaving it leaves the group
gracefully (the LEAVE datagram goes out even when the block is cancelled).
Blocks nest in that order, so every group is left before its node closes::

    config = sgcs.Config(name="alice", secret=b"...")
    async with sgcs.open_node(config) as node:
        async with node.join("chat", order=sgcs.Order.TOTAL) as group:
            await group.send(b"hello")              # multicast, delivered to self too
            await group.send(b"psst", to=member_id) # unicast inside the group
            async for event in group:               # sgcs.Delivery | sgcs.ViewChange | ...
                ...

A group's events come in the node's delivery order through a bounded queue of
``Config.app_queue`` events. While it is full the node stops reading the
network and ``send`` waits (backpressure), so a program that sends much
without reading should read in another task.

Besides ``Delivery`` and ``ViewChange`` a group yields ``OptimisticView``
(a view change began; messages sent from now on are optimistic),
``Rollback`` (optimistic messages that were delivered nowhere),
``NotDelivered`` (one of our own messages that we will not deliver, and why),
``TransitionalView`` (the deliveries that follow are among fewer members),
``MemberSuspected`` and ``MemberBusy`` (what the failure detector thinks of
a member). A program that does not care about an event type skips it.

**One outcome per message.** ``send`` returns the message's ``MessageId``.
Every multicast a member sends and survives to see ends at that member with
exactly one of: its own ``Delivery`` (``(delivery.sender, delivery.seq) ==
(id.sender, id.seq)``), a ``Rollback`` listing ``(id.sender, id.seq)``, or a
``NotDelivered`` naming ``id`` (docs/guarantees.md).

The handles are thin: every command goes through the driver to the sans-I/O
node, whose ``UsageError`` (unknown member, payload too big, not bytes, group
already left) reaches the caller unchanged.

Under asyncio (``open_node`` asks sniffio which library runs it) the same
driver runs as a trio guest of the asyncio loop (``sgcs.io.asyncio_host``),
and the handles are subclasses that carry each command into a trio task and
take events from a bridge: same calls, events and errors for both.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Union

import sniffio
import trio


def _load_numpy_without_blas_threads() -> None:
    """Load numpy with one OpenBLAS thread, unless the program chose already.

    sgcs uses numpy for element-wise work on heartbeat tables, never for
    linear algebra. Loading OpenBLAS starts a thread per core, which costs a
    process about 0.1 s of CPU while it starts: 8 members starting together
    on 2 cores formed their view 60 ms later for it. A program that loaded
    numpy first, or set ``OPENBLAS_NUM_THREADS`` itself, keeps its own choice
    (docs/membership.md, "Concurrent start-up")."""
    if "numpy" in sys.modules or "OPENBLAS_NUM_THREADS" in os.environ:
        return
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    try:
        import numpy  # noqa: F401
    finally:
        del os.environ["OPENBLAS_NUM_THREADS"]  # read once, at load; children get the program's environment


_load_numpy_without_blas_threads()


from .actions import (Delivery, GroupError, MemberBusy, MemberSuspected, MessageId, NotDelivered, OptimisticView, Rollback,  # noqa: E402
                      TransitionalView, View, ViewInstalled)
from .config import Config, Order
from .errors import UsageError
from .io.ended import GroupClosed
from .io.event_queue import EventQueue
from .io.trio_driver import AppEvent, DriverStatistics, TrioDriver, open_driver
from .node import NodeStatistics
from .state_transfer import GroupState, StateTransfer, framed

if TYPE_CHECKING:  # loaded on first use under asyncio: a trio program never imports asyncio
    from .io.asyncio_host import EventBridge, GuestRun


@dataclass(frozen=True, slots=True)
class ViewChange:
    """A new view of the group was installed; later deliveries happen in it.

    Every member of the new view installs it after the same set of messages
    (virtual synchrony), so this is the point to re-plan by membership, e.g.
    reassign work that ``left`` or ``failed`` members held."""

    view_id: str
    members: tuple[int, ...]
    """Member ids, sorted."""
    group: str
    joined: tuple[int, ...] = ()
    """Members new in this view."""
    left: tuple[int, ...] = ()
    """Members that left the group gracefully since the previous view."""
    failed: tuple[int, ...] = ()
    """Members excluded as failed (crashed, or unresponsive during the change).

    A member named in both ``failed`` and ``joined`` is in both views but did
    not move from the previous one with you: it restarted, or it comes back
    from a view of its own (a partition). Treat it as a new process: what it
    held is gone. A ``TransitionalView`` before this event names the members
    that did move with you."""

    names: Mapping[int, str] = field(default_factory=dict, hash=False)
    """``Config.name`` of the members whose name this node has heard (each
    member tells its own to a group it joins, and hears the others' answers).
    Names are for people; ids are identity (two members may share a name)."""

    @property
    def view(self) -> View:
        return View(self.view_id, self.members)


@dataclass(frozen=True, slots=True)
class GroupStatistics:
    """One group's state at this node (``NodeHandle.group_statistics``)."""

    members: int
    """Members in the installed view."""
    held: int
    """Messages held here: unstable records, plus those waiting for a view change or their order."""
    window: int
    """Unstable records: the flow window in use (``send`` waits at ``Config.window_max``)."""
    changing_view: bool
    """A view change is under way: sends are optimistic."""


Event = Union[Delivery, ViewChange, OptimisticView, Rollback, NotDelivered, TransitionalView, MemberSuspected,
              MemberBusy]
"""What iterating over a group yields."""

RECEIVE_MANY_MAX = 1_024
"""Events one ``receive_many`` returns at most when the caller sets no limit."""
RECEIVE_YIELD_EVERY = 16
"""Events ``GroupHandle.receive`` may return from a non-empty queue before it
yields to trio's scheduler (it always does when it has to wait)."""


def _event_of(action: AppEvent) -> Event:
    """The public event for one action of a group's channel."""
    # Deliveries first: they are nearly all the traffic.
    if type(action) is Delivery:
        return action  # the node's output is the public event
    if isinstance(action, ViewInstalled):
        return ViewChange(
            action.view_id, action.members, action.group, tuple(action.joined), tuple(action.left),
            tuple(action.failed), dict(action.names)
        )
    if isinstance(action, (OptimisticView, Rollback, NotDelivered, TransitionalView, MemberSuspected, MemberBusy)):
        return action  # the node's output is the public event, as for deliveries
    if isinstance(action, GroupError):
        raise UsageError(action.message)  # the group refused us (e.g. another order)
    raise TypeError(f"no public event for {type(action).__name__}")  # a bug: the driver routes only AppEvent


class GroupHandle:
    """Membership of one group; get one from ``NodeHandle.join``.

    Iterate over it (``async for event in group``) or call ``receive()`` for
    the group's events; the stream ends when the group is left or the node
    closes.
    """

    def __init__(self, driver: TrioDriver, name: str, receive: EventQueue[AppEvent]) -> None:
        self._driver = driver
        self._name = name
        self._receive = receive
        self._left = False
        self._unyielded = 0
        self._last_view = View(*driver.node.view(name))

    @property
    def name(self) -> str:
        return self._name

    @property
    def node_id(self) -> int:
        return self._driver.node.id

    @property
    def view(self) -> View:
        """The current view; after leaving, the last one this node held."""
        self._refresh_view()
        return self._last_view

    def _refresh_view(self) -> None:
        if not self._left and not self._driver.closed and self._name in self._driver.node.groups:
            self._last_view = View(*self._driver.node.view(self._name))

    async def send(self, payload: bytes, *, to: int | None = None, block: bool = True) -> MessageId:
        """Multicast ``payload`` to the group (this node delivers it too), or
        unicast it to member ``to``, reliably. Returns the message's id: a
        multicast's outcome here (its ``Delivery``, a ``Rollback`` or a
        ``NotDelivered``) names it.

        Flow control: waits while the group's window of unstable messages is
        full (``Config.window_max``) or its send delay has not passed, and while
        this group's event queue is full; a unicast waits while ``to`` has not
        acknowledged ``window_max`` earlier ones. ``block=False`` raises
        ``sgcs.WouldBlock`` instead of waiting."""
        if self._left:
            raise UsageError(f"group {self._name!r} was left; join it again to send")
        if to is None:
            return await self._driver.multicast(self._name, payload, block=block)
        return await self._driver.unicast(self._name, to, payload, block=block)

    async def receive(self) -> Event:
        """The next event; raises ``sgcs.GroupClosed`` (a ``trio.EndOfChannel``) once the group is left.

        Always a cancellation point; a scheduling point when it waits, and at
        least every ``RECEIVE_YIELD_EVERY`` events otherwise (yielding per
        event would cost a trip through trio's scheduler per message)."""
        try:
            if self._unyielded < RECEIVE_YIELD_EVERY:
                await trio.lowlevel.checkpoint_if_cancelled()
                try:
                    action = self._receive.get_nowait()
                except trio.WouldBlock:
                    pass
                else:
                    self._unyielded += 1
                    return _event_of(action)
            self._unyielded = 0
            return _event_of(await self._receive.get())
        except trio.ClosedResourceError:
            raise GroupClosed(f"group {self._name!r} was left or its node closed") from None

    async def receive_many(self, max_events: int | None = None) -> list[Event]:
        """The next events, at least one: waits for the first, then takes every
        event already queued (at most ``max_events``). Same order and end of
        stream as ``receive``, without a scheduler trip per event: the call for
        a program that handles deliveries in batches."""
        if max_events is not None and max_events < 1:
            raise UsageError(f"max_events must be at least 1, got {max_events}")
        events = [await self.receive()]
        limit = RECEIVE_MANY_MAX if max_events is None else max_events
        if len(events) < limit and len(self._receive):
            for action in self._receive.get_many_nowait(limit - len(events)):
                events.append(action if type(action) is Delivery else _event_of(action))
        return events

    async def send_many(self, payloads: Iterable[bytes], *, block: bool = True) -> list[MessageId]:
        """Multicast each payload in order, as ``send`` does one; returns their
        ids. Sends between two yields share datagrams (bundling), so a batch
        costs few datagrams. With ``block=False``, ``sgcs.WouldBlock`` says the
        window filled; the payloads before the one refused were sent."""
        if self._left:
            raise UsageError(f"group {self._name!r} was left; join it again to send")
        multicast = self._driver.multicast
        return [await multicast(self._name, payload, block=block) for payload in payloads]

    def __aiter__(self) -> AsyncIterator[Event]:
        return self

    async def __anext__(self) -> Event:
        try:
            return await self.receive()
        except trio.EndOfChannel:
            raise StopAsyncIteration from None

    async def leave(self) -> None:
        """Leave the group gracefully; the event stream ends. Idempotent."""
        if self._left:
            return
        self._refresh_view()  # keep the last view readable after leaving
        self._left = True
        await self._driver.close_group(self._name, self._receive)
        self._receive.close_reader()

    def __repr__(self) -> str:
        state = "left" if self._left else f"{len(self.view)} members"
        return f"<sgcs.GroupHandle {self._name!r} node={self.node_id} {state}>"


class NodeHandle:
    """A running sgcs node; get one from ``open_node``."""

    def __init__(self, driver: TrioDriver) -> None:
        self._driver = driver

    @property
    def id(self) -> int:
        """This node's member id."""
        return self._driver.node.id

    @property
    def name(self) -> str:
        return self._driver.config.name

    def name_of(self, member: int) -> str | None:
        """``member``'s ``Config.name``, if this node has heard it (None otherwise):
        to show a ``Delivery.sender`` to people."""
        return self._driver.node.name_of(member)

    @property
    def config(self) -> Config:
        return self._driver.config

    @property
    def address(self) -> tuple[str, int]:
        """``(host, port)`` of the node's unicast socket."""
        return self._driver.address

    @property
    def groups(self) -> tuple[str, ...]:
        """Names of the groups this node belongs to."""
        return self._driver.node.groups

    def statistics(self) -> NodeStatistics:
        """The protocol's counters: datagrams, deliveries, drops by reason."""
        return self._driver.node.statistics()

    def io_statistics(self) -> DriverStatistics:
        """The driver's counters: send and receive errors, discarded events."""
        return self._driver.statistics()

    def group_statistics(self) -> dict[str, GroupStatistics]:
        """The state of each group this node belongs to, by name."""
        node = self._driver.node
        result = {}
        for name in node.groups:
            held, window = node.occupancy(name)
            result[name] = GroupStatistics(len(node.view(name)[1]), held, window, node.changing_view(name))
        return result

    @asynccontextmanager
    async def join(
        self, group: str, *, order: Order | str = Order.FIFO, members: Iterable[int] | None = None,
        state: GroupState | None = None
    ) -> AsyncIterator[GroupHandle]:
        """Join ``group`` for the duration of the block, then leave it gracefully.

        ``order`` is the group's delivery order. ``members``: the known member
        ids (no discovery); None: discover the others, whose arrival shows up
        as ``ViewChange`` events. The first event is always the initial view.

        ``state``: an object with ``get_state() -> bytes`` and
        ``set_state(bytes)``. A member that joins a group whose members hold
        state receives a snapshot of it, then every delivery after it,
        exactly once (``sgcs.state_transfer``; total or safe order only, and
        every member of the group must pass ``state``)."""
        if state is not None:
            if order not in (Order.TOTAL, Order.SAFE, "total", "safe"):
                raise UsageError(f"state transfer needs order total or safe, not {order!r}")
            if not (callable(getattr(state, "get_state", None)) and callable(getattr(state, "set_state", None))):
                raise UsageError("state must have get_state() -> bytes and set_state(bytes)")
        receive = await self._driver.open_group(group, order, members)
        handle: GroupHandle
        if state is None:
            handle = GroupHandle(self._driver, group, receive)
        else:
            assert self._driver._nursery is not None
            handle = _StatefulGroupHandle(self._driver, group, receive)
            handle.transfer = StateTransfer(handle, state, self._driver._nursery,
                                            3 * self._driver.config.beacon_interval)
        try:
            yield handle
        finally:
            await handle.leave()

    def __repr__(self) -> str:
        host, port = self.address
        return f"<sgcs.NodeHandle {self.name!r} id={self.id} {host}:{port}>"


class _StatefulGroupHandle(GroupHandle):
    """A ``GroupHandle`` with state transfer (``NodeHandle.join(..., state=...)``):
    payloads travel framed, events come through ``StateTransfer``."""

    transfer: StateTransfer

    @property
    def has_state(self) -> bool:
        """Whether this member holds the group's state (see ``sgcs.state_transfer``)."""
        return self.transfer.has_state

    @property
    def transfers(self) -> int:
        """Snapshots this member received."""
        return self.transfer.transfers

    async def send(self, payload: bytes, *, to: int | None = None, block: bool = True) -> MessageId:
        return await super().send(framed([payload])[0], to=to, block=block)

    async def send_many(self, payloads: Iterable[bytes], *, block: bool = True) -> list[MessageId]:
        return await super().send_many(framed(payloads), block=block)

    async def _send_raw(self, payload: bytes, *, to: int | None = None) -> MessageId:
        return await super().send(payload, to=to)

    async def receive(self) -> Event:
        transfer = self.transfer
        try:
            while not transfer.ready:
                founding = transfer.founding_at()
                with trio.move_on_at(math.inf if founding is None else founding):
                    transfer.take(await self._receive.get())
                    continue
                transfer.found_alone()
        except trio.ClosedResourceError:
            raise GroupClosed(f"group {self._name!r} was left or its node closed") from None
        return _event_of(transfer.ready.popleft())

    async def receive_many(self, max_events: int | None = None) -> list[Event]:
        """One event at a time: ``get_state`` must see exactly the events returned before."""
        if max_events is not None and max_events < 1:
            raise UsageError(f"max_events must be at least 1, got {max_events}")
        return [await self.receive()]


class _AsyncioGroupHandle(GroupHandle):
    """``GroupHandle`` for an asyncio program: the same calls, each carried
    into the trio guest run that hosts the node (``sgcs.io.asyncio_host``).

    State is read directly (one thread); commands run as trio tasks; events
    arrive through an ``EventBridge`` fed by a trio task of the group."""

    def __init__(self, run: GuestRun, group: GroupHandle, bridge: EventBridge[Event] | None,
                 leave: Callable[[], Awaitable[None]]) -> None:
        """``bridge`` None: a stateful group, whose events are pulled one at a
        time by a trio call (``get_state`` runs inside ``receive``)."""
        super().__init__(group._driver, group.name, group._receive)
        self._run = run
        self._group = group
        self._bridge = bridge
        self._leave_trio = leave

    @property
    def has_state(self) -> bool:
        """Whether this member holds the group's state (joined with ``state=``)."""
        return isinstance(self._group, _StatefulGroupHandle) and self._group.has_state

    @property
    def transfers(self) -> int:
        """Snapshots this member received (joined with ``state=``)."""
        return self._group.transfers if isinstance(self._group, _StatefulGroupHandle) else 0

    async def send(self, payload: bytes, *, to: int | None = None, block: bool = True) -> MessageId:
        if self._left:
            raise UsageError(f"group {self._name!r} was left; join it again to send")
        return await self._run.call(partial(self._group.send, payload, to=to, block=block))

    async def send_many(self, payloads: Iterable[bytes], *, block: bool = True) -> list[MessageId]:
        if self._left:
            raise UsageError(f"group {self._name!r} was left; join it again to send")
        return await self._run.call(partial(self._group.send_many, list(payloads), block=block))

    async def receive(self) -> Event:
        if self._left:
            raise GroupClosed(f"group {self._name!r} was left")
        if self._bridge is None:  # stateful: the trio handle hands events over one at a time
            return await self._run.call(self._group.receive)
        self._unyielded += 1
        if self._unyielded >= RECEIVE_YIELD_EVERY:  # let other asyncio tasks run, as trio's receive does
            self._unyielded = 0
            await self._bridge.pause()
        event = self._bridge.get_nowait()
        return event if event is not None else (await self._bridge.get_many(1))[0]

    async def receive_many(self, max_events: int | None = None) -> list[Event]:
        if max_events is not None and max_events < 1:
            raise UsageError(f"max_events must be at least 1, got {max_events}")
        if self._left:
            raise GroupClosed(f"group {self._name!r} was left")
        if self._bridge is None:
            return [await self.receive()]
        return await self._bridge.get_many(RECEIVE_MANY_MAX if max_events is None else max_events)

    async def leave(self) -> None:
        if self._left:
            return
        self._refresh_view()
        self._left = True
        await self._leave_trio()


class _AsyncioNodeHandle(NodeHandle):
    """``NodeHandle`` for an asyncio program; see ``_AsyncioGroupHandle``."""

    def __init__(self, run: GuestRun, node: NodeHandle) -> None:
        super().__init__(node._driver)
        self._run = run
        self._node = node

    @asynccontextmanager
    async def join(
        self, group: str, *, order: Order | str = Order.FIFO, members: Iterable[int] | None = None,
        state: GroupState | None = None
    ) -> AsyncIterator[GroupHandle]:
        from .io.asyncio_host import EventBridge

        handle: _AsyncioGroupHandle
        if state is not None:
            # No bridge: an event taken ahead of the application would be left
            # out of the ``get_state`` that a later event may call for.
            joined, leave = await self._run.hold(self._node.join(group, order=order, members=members, state=state))
            handle = _AsyncioGroupHandle(self._run, joined, None, leave)
        else:
            bridge: EventBridge[Event] = EventBridge(self._run, self.config.app_queue)
            joined, leave = await self._run.hold(
                self._node.join(group, order=order, members=members),
                lambda trio_group: bridge.feed(trio_group.receive_many)
            )
            handle = _AsyncioGroupHandle(self._run, joined, bridge, leave)
        try:
            yield handle
        finally:
            await handle.leave()


@asynccontextmanager
async def open_node(config: Config, *, trace: str | os.PathLike[str] | None = None) -> AsyncIterator[NodeHandle]:
    """Run an sgcs node on real sockets for the duration of the block.

    Works under trio and under asyncio (where the trio driver runs as a guest
    of the asyncio loop, see ``sgcs.io.asyncio_host``), with the same handles,
    events and errors.

    ``trace``: a run directory to record trace schema 1 into (the format of
    ``sgcs simulate``, so ``sgcs analyze`` and ``sgcs.sim.checks`` check
    real runs too). The members of one run share one fresh directory; it
    needs pyarrow (``pip install 'sgcs[sim]'``).

    Raises ``UsageError`` when the sockets cannot be opened (port in use,
    unknown interface, no multicast), saying which Config field to change.
    Leaving the block stops every task of the node and closes its sockets."""
    if not isinstance(config, Config):
        raise UsageError(f"open_node needs an sgcs.Config, got {type(config).__name__}")
    library = sniffio.current_async_library()
    if library == "trio":
        async with open_driver(config, trace) as driver:
            yield NodeHandle(driver)
    elif library == "asyncio":
        async with _open_asyncio_node(config, trace) as node:
            yield node
    else:
        raise UsageError(f"sgcs runs under trio or asyncio, not {library}")


@asynccontextmanager
async def _open_asyncio_node(config: Config, trace: str | os.PathLike[str] | None) -> AsyncIterator[NodeHandle]:
    from .io.asyncio_host import GuestRun

    run = await GuestRun.acquire()
    try:
        node, close = await run.hold(open_node(config, trace=trace))
        try:
            yield _AsyncioNodeHandle(run, node)
        finally:
            await close()
    finally:
        await run.release()
