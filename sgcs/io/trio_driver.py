"""The trio driver: real UDP and IP multicast under the sans-I/O node.

Theory of operation
-------------------
The driver owns one ``sgcs.node.Node`` and its sockets (``sockets.py``), and
runs these tasks in one nursery:

* a receive loop per socket: it drains up to ``RECEIVE_BATCH`` datagrams that
  the kernel already holds, then hands them to ``node.handle_datagram`` in one
  node call; only when the socket is empty does it wait for it to be readable;
* a timer loop that sleeps until ``node.next_deadline()`` or until it is
  poked because a node call moved that deadline earlier, then calls
  ``node.handle_timeout``;
* an accept loop on the host-check listener (``sockets.py``), which accepts
  every TCP connection and closes it unread (``accept_and_close``), and one
  short task per host check under way (see "Host checks" below).

Application commands (join, leave, send) run in the caller's task. Every node
call, whoever makes it, goes through ``TrioDriver.call``: yield once to the
other tasks, call the node with ``trio.current_time()``, carry out the
returned actions in order. Calling and routing happen without a yield in
between, so the actions of successive node calls are carried out in the order
the node produced them. When routing has to wait (a full socket buffer or
event queue), the call holds the node lock until it is done, and later calls
queue for that lock, which is fair (FIFO). That is what keeps delivery order
intact on the way to the application: without it, two tasks waiting on one
full queue could interleave their deliveries. Taking the time right before
the call keeps ``now`` non-decreasing from the node's point of view.

Routing is a table keyed by action type. ``Send`` and ``Multicast`` go to the
unicast socket (a multicast to the group address, or to every peer when
multicast is off). A send error (EPERM from a firewall, ENETUNREACH...) is
counted by errno name and never raised: UDP is unreliable anyway and the
protocol above the wire repairs loss. ``Deliver``, ``ViewInstalled``,
``OptimisticView``, ``Rollback``, ``NotDelivered``, ``TransitionalView``,
``MemberSuspected``, ``MemberBusy`` and
``GroupError`` go to the group's bounded memory channel (``Config.app_queue``).
``TraceEvent`` goes to the trace recorder (``recorder.py``) when the node was
opened with ``trace=DIR``, which also counts every datagram sent and
received and flushes to disk every ``recorder.FLUSH_EVERY`` seconds from a
task of its own; without a trace the node emits no trace events at all.

Fast path: a route first tries to finish at once (a non-blocking ``sendto``
on the stdlib socket, ``send_nowait`` into the channel) and only when that
would block returns an awaitable that waits (socket writable, room in the
channel). Awaiting per action would cost a trip through trio's scheduler per
datagram and per delivery; each node call still yields once, when it takes
the lock. Likewise the timer loop is poked only when a call moved the node's
deadline before the one it sleeps until, not after every call. Timers that
a call made due run at the end of that call when the call handled datagrams
(an ordered group's promise) or was a multicast after a quiet spell
(``FLUSH_AT_ONCE_GAP``); a burst of sends leaves its flush to the timer loop,
which runs once the sender yields, so the burst shares datagrams.

Backpressure: when a group's channel is full, the task routing into it waits,
holding the node lock. Receive loops then stop reading, the kernel's socket
buffer fills and finally drops datagrams, which the protocol sees as loss; an
application ``send`` waits too. Nothing is dropped silently here: events that
cannot reach the application (its group is being left, or routing was
cancelled at shutdown) are counted in ``DriverStatistics.events_discarded``.

Refusals (ICMP "port unreachable", Linux): a datagram sent to a port nobody
listens on any more earns an ICMP error, which the unicast socket queues on its
error queue (IP_RECVERR, see ``sockets.py``). A member that crashed leaves its
port closed, so this is the quickest crash signal there is. The error queue
makes the socket readable-with-error: the unicast receive loop reads the
reports (``sockets.read_refusals``) whenever it wakes with no datagram, or
when ``recvfrom`` raises ECONNREFUSED, and hands the refused destinations to
``node.handle_unreachable``, whose actions are routed like any other. The
reports are counted in ``DriverStatistics.unreachable``; a node without that
method simply ignores them. The option has a cost that the send routes
absorb: while a refusal is pending the kernel fails the next ``sendto``
(with ECONNREFUSED, whatever its destination) without sending it, so a send
refused that way is retried (``SEND_REFUSED_RETRIES``), not counted as lost.
A send waiting for room reads the error queue itself, since an unread report
keeps the socket signalled and would otherwise turn that wait into a spin;
what it reads waits in the driver for the receive loop's next turn.

Host checks: a host that vanished (power, cable, a partition) sends no ICMP,
so the refusals above never come and a suspect's whole pull stage
(``probe_count * probe_interval``) would pass before its neighbours are
asked. When the node starts suspecting a member it emits ``CheckHost``
(``Config.host_check``), and the driver starts a task that tries a TCP
handshake with the member's address (``sockets.check_host``: a few
handshakes, 0.1 s apart, within 0.35 s). Every node listens there, and a
kernel completes the handshake even while the process is stopped, so a
completed one leaves the pull stage to run its course: a paused member keeps
all its time. A refusal (RST) or no answer in time goes to
``node.handle_host_unreachable``, which ends the pull stage as an ICMP
refusal does, unless the member was heard from meanwhile. One check runs per
member at a time (a second ``CheckHost`` for it meanwhile is dropped); checks
and their outcomes are counted in ``DriverStatistics`` (``host_checks``...).

Shutdown: leaving a group drains its channel (the application has stopped
reading, and a router may be waiting for room), then calls ``node.leave`` and
sends the LEAVE datagram under a shielded, bounded scope, so even a cancelled
block says goodbye; only then is the channel closed. Leaving ``open_driver``
closes every channel (ending any ``async for`` over a group), cancels the
nursery and closes the sockets: no task and no socket outlives the block.
"""

from __future__ import annotations

import enum
import dataclasses
import errno
import math
import os
import random
import signal
import socket
import time
import typing
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Awaitable, Union

import trio

from ..actions import (
    Action,
    CheckHost,
    Deliver,
    GroupError,
    MemberBusy,
    MemberSuspected,
    MessageId,
    Multicast,
    NotDelivered,
    OptimisticView,
    Rollback,
    Send,
    TraceEvent,
    TransitionalView,
    ViewInstalled,
)
from ..config import Config, Order
from ..errors import UsageError, WouldBlock
from ..node import Node
from .signals import EXIT_STATUS, sigterm_free
from .event_queue import EventQueue
from .recorder import FLUSH_EVERY, TraceRecorder
from .sockets import Endpoint, HostAnswer, NodeSockets, accept_and_close, check_host, open_sockets, read_refusals
from .timings import HistogramSnapshot, Timings

AppEvent = Union[Deliver, ViewInstalled, OptimisticView, Rollback, NotDelivered, TransitionalView, MemberSuspected,
                 MemberBusy, GroupError]
"""What a group's channel carries; ``sgcs.api`` turns them into public events."""
_COUNTED_EVENTS = tuple(kind for kind in typing.get_args(AppEvent) if kind is not GroupError)
"""Events that count in ``events_discarded`` when a cancelled route never
hands them over."""

RECEIVE_SIZE = 65_536
"""Bytes asked of recvfrom: any UDP datagram fits, so none is truncated before
the node can count it (the wire codec caps what it accepts)."""
RECEIVE_BATCH = 64
"""Datagrams one node call may take from a socket's kernel buffer: enough to
spread the call's cost, few enough to keep the other tasks' turns short."""
RECEIVE_ERROR_PAUSE = 0.01
"""Seconds to pause after a receive error, so a persistent one cannot spin the CPU."""
SEND_YIELD_EVERY = 64
"""Sends one task may make before it yields to the others: their records share
datagrams meanwhile (up to ``Config.bundle_size``), and the receive loops
still get a turn at least this often."""
FLUSH_AT_ONCE_GAP = 0.0005
"""A multicast made at least this long (seconds) after the one before is
flushed in the sender's own node call: after a quiet spell it goes out
without waiting for the timer task's turn (0.1-0.2 ms when other members'
datagrams arrive at the same time). Sends closer together than this leave
the flush to the timer task, so a burst still shares datagrams (natural
batching)."""
LEAVE_GRACE = 2.0
"""Seconds a group exit may wait for the node lock before leaving without it."""
SEND_REFUSED_RETRIES = 3
"""Times a send failed with ECONNREFUSED (an earlier datagram's refusal, not
this one's) is tried again before it is counted as a send error."""
MAX_PENDING_REFUSALS = 1_024
"""Refused destinations the driver holds for the node; past the cap further
ones are counted (``unreachable``) but not handed over: a burst names the same
few dead members again and again."""

_entropy = random.SystemRandom()


@dataclass(frozen=True, slots=True)
class DriverStatistics:
    """Counters of the trio driver since the node opened."""

    send_errors: int
    send_error_reasons: dict[str, int] = field(default_factory=dict)
    """Send errors by errno name, e.g. {"ENETUNREACH": 3}."""
    receive_errors: int = 0
    events_discarded: int = 0
    """Deliveries and view changes that found no reader: their group was being
    left, or routing was cancelled at shutdown."""
    unreachable: int = 0
    """ICMP "port unreachable" reports for datagrams this node sent (Linux)."""
    host_checks: int = 0
    """Host checks of suspects started (``Config.host_check``)."""
    host_checks_answered: int = 0
    """... whose host completed a TCP handshake: the member's process exists."""
    host_checks_refused: int = 0
    """... refused (RST): nobody listens there any more."""
    host_checks_silent: int = 0
    """... with no answer in time: the host vanished, or the path to it."""
    host_checks_failed: int = 0
    """... that failed on our side (no file descriptor or port): no verdict."""
    host_check_accepts: int = 0
    """TCP connections from other members' host checks, accepted and closed unread."""
    delivery_latency: HistogramSnapshot | None = None
    """Own multicasts, sampled: send to own delivery (``sgcs/io/timings.py``)."""
    view_change_duration: HistogramSnapshot | None = None
    """First optimistic view of a change to its installed view, per change."""


@dataclass(slots=True)
class _GroupQueue:
    events: EventQueue[AppEvent]
    leaving: bool = False


class TrioDriver:
    """Runs one sans-I/O node over real sockets; see the module docstring."""

    def __init__(self, node: Node, sockets: NodeSockets, recorder: TraceRecorder | None = None) -> None:
        self.node = node
        self.sockets = sockets
        self.recorder = recorder
        self.timings = Timings()
        self._me = node.id
        self._lock = trio.Lock()
        self._poke = trio.Event()
        self._timer_due = -math.inf
        """When the sleeping timer loop wakes up; -inf while it is awake (it
        reads the node's deadline itself before sleeping again)."""
        self._progress = trio.Event()
        self._progress_wanted = False
        """A sender waits on ``_progress``: set it after the next node call."""
        self._queues: dict[str, _GroupQueue] = {}
        self._nursery: trio.Nursery | None = None
        self._closed = False
        self.terminated = False
        """SIGTERM came while the node ran (``sgcs.io.signals``)."""
        self._send_errors: Counter[str] = Counter()
        self._receive_errors = 0
        self._discarded = 0
        self._unreachable = 0
        self._sends_unyielded = 0
        """Sends since the last one that yielded to the other tasks (``_send_now``)."""
        self._last_multicast_at = -math.inf
        """When the last multicast was made (``FLUSH_AT_ONCE_GAP``)."""
        self._refused: list[Endpoint] = []
        """Refused destinations read from the error queue, not yet given to the node."""
        self._checking: set[int] = set()
        """Members whose host check is under way (one at a time each)."""
        self._host_checks: Counter[HostAnswer] = Counter()
        self._accepts = 0

    @property
    def config(self) -> Config:
        return self.node.config

    @property
    def address(self) -> Endpoint:
        return self.sockets.address

    @property
    def closed(self) -> bool:
        return self._closed

    def statistics(self) -> DriverStatistics:
        return DriverStatistics(
            send_errors=sum(self._send_errors.values()),
            send_error_reasons=dict(self._send_errors),
            receive_errors=self._receive_errors,
            events_discarded=self._discarded,
            unreachable=self._unreachable,
            host_checks=sum(self._host_checks.values()) + len(self._checking),
            host_checks_answered=self._host_checks[HostAnswer.ANSWERED],
            host_checks_refused=self._host_checks[HostAnswer.REFUSED],
            host_checks_silent=self._host_checks[HostAnswer.SILENT],
            host_checks_failed=self._host_checks[HostAnswer.FAILED],
            host_check_accepts=self._accepts,
            delivery_latency=self.timings.delivery.snapshot(),
            view_change_duration=self.timings.view_change.snapshot(),
        )

    # ------------------------------------------------------------------ node calls

    async def call(self, command: Callable[[float], list[Action]]) -> None:
        """Call the node (``command(now)``) and carry out its actions, in order.
        UsageError from the node reaches the caller unchanged."""
        if self._closed:
            raise UsageError("this sgcs node is closed; open a new one with sgcs.open_node")
        await self._call(command)

    async def _call(self, command: Callable[[float], list[Action]]) -> None:
        # The driver's own tasks come here directly: one may be woken with a
        # datagram just after shutdown began, and must not fail for it.
        await trio.lowlevel.checkpoint()  # every node call gives the other tasks a turn
        if self._lock.locked():
            # A call's routing is waiting (socket or channel full): queue behind
            # it, in FIFO order, so actions keep the order the node made them.
            async with self._lock:
                await self._route(self._run(command))
            return
        # Nobody waits: call and route without a yield in between, so no other
        # call can come between; take the lock only if routing has to wait.
        wait = self._start_route(self._run(command))
        if wait is not None:
            self._lock.acquire_nowait()
            try:
                await wait
            finally:
                self._lock.release()

    def _run(self, command: Callable[[float], list[Action]]) -> list[Action]:
        now = trio.current_time()
        actions = command(now)
        if self._timer_due > -math.inf and not self._poke.is_set():
            # The timer sleeps and is not yet poked: the call may have moved the
            # deadline earlier. (Once poked it wakes and reads the deadline itself,
            # so the sends of one batch ask the node only once.)
            deadline = self.node.next_deadline()
            # Due already (a send's flush, say) is no exception: the timer task
            # runs at the next scheduling point, after the sender yields, so the
            # sends made meanwhile share the flush (natural batching).
            if deadline is not None and deadline < self._timer_due:
                self._poke.set()
        if self._progress_wanted:  # the call may have freed the flow-control window
            self._progress_wanted = False
            self._progress.set()
            self._progress = trio.Event()
        return actions

    async def multicast(self, group: str, payload: bytes, block: bool = True) -> MessageId:
        """Multicast under flow control: wait for the node's send delay, and while
        the window is full wait for the node to make progress (ACKs arriving).
        ``block=False`` raises ``WouldBlock`` instead of waiting. Returns the
        message's id."""
        sent: list[MessageId] = []

        def send(now: float) -> list[Action]:
            actions = self.node.multicast(group, payload, now)
            assert self.node.last_sent is not None
            sent.append(self.node.last_sent)  # read before any other call can send
            self.timings.sent(group, self.node.last_sent.seq, now)  # before its delivery can be routed
            quiet = now - self._last_multicast_at >= FLUSH_AT_ONCE_GAP
            self._last_multicast_at = now
            return actions + self._due_timers(now) if quiet else actions

        while True:
            if self._closed:
                raise UsageError("this sgcs node is closed; open a new one with sgcs.open_node")
            progress = self._progress
            ready = self.node.send_ready_at(group, trio.current_time())
            if ready is not None and ready <= trio.current_time():
                try:
                    await self._send_now(send)
                    return sent[0]
                except WouldBlock:
                    if not block:
                        raise
                    continue  # the window filled while we waited for the lock
            if not block:
                raise WouldBlock(f"group {group!r}: the flow-control window is full")
            if ready is None:
                self._progress_wanted = True
                await progress.wait()
            else:
                await trio.sleep_until(ready)

    def _due_timers(self, now: float) -> list[Action]:
        """The node's timers that are due at ``now`` (a send's flush), run in the current call."""
        deadline = self.node.next_deadline()
        return self.node.handle_timeout(now) if deadline is not None and deadline <= now else []

    async def unicast(self, group: str, member: int, payload: bytes, block: bool = True) -> MessageId:
        """Send ``payload`` to ``member`` reliably. While ``member`` has not
        acknowledged ``window_max`` earlier unicasts, wait for the node to make
        progress, as a multicast waits for its window; ``block=False`` raises
        ``WouldBlock`` instead. Returns the message's id."""
        sent: list[MessageId] = []

        def send(now: float) -> list[Action]:
            actions = self.node.unicast(group, member, payload, now)
            assert self.node.last_sent is not None
            sent.append(self.node.last_sent)
            return actions

        while True:
            progress = self._progress
            try:
                await self.call(send)
                return sent[0]
            except WouldBlock:
                if not block:
                    raise
            self._progress_wanted = True
            await progress.wait()

    async def _send_now(self, command: Callable[[float], list[Action]]) -> None:
        """A send's node call. It yields to the other tasks only every
        ``SEND_YIELD_EVERY`` sends (or when it must wait): the sends made in
        between queue in the node's outbox, and the timer task flushes them
        together once the sender yields (natural batching, as JGroups' bundler:
        at low load a sender yields after every send, so nothing waits)."""
        if self._lock.locked() or self._closed or self._sends_unyielded >= SEND_YIELD_EVERY:
            self._sends_unyielded = 0
            await self._call(command)
            return
        await trio.lowlevel.checkpoint_if_cancelled()
        self._sends_unyielded += 1
        wait = self._start_route(self._run(command))
        if wait is not None:
            self._lock.acquire_nowait()
            try:
                await wait
            finally:
                self._lock.release()

    async def open_group(
        self, name: str, order: Order | str, members: Iterable[int] | None
    ) -> EventQueue[AppEvent]:
        """Join ``name``; the returned channel carries its events, the first
        being the initial view."""
        events: EventQueue[AppEvent] = EventQueue(self.config.app_queue)
        member_list = None if members is None else list(members)

        def join(now: float) -> list[Action]:
            actions = self.node.join(name, now, order=order, members=member_list)
            self._queues[name] = _GroupQueue(events)  # before routing: the view goes here
            return actions

        try:
            await self.call(join)
        except BaseException:
            if name in self._queues and self._queues[name].events is events:
                await self.close_group(name, events)  # joined, but the caller gets no handle
            events.close()
            events.close_reader()
            raise
        return events

    async def close_group(self, name: str, events: EventQueue[AppEvent]) -> None:
        """Leave ``name`` and close its queue; safe to call twice or after shutdown."""
        queue = self._queues.get(name)
        if queue is None or queue.events is not events:
            return
        queue.leaving = True
        self._discarded += events.discard()  # the reader is gone; free a router waiting for room
        if not self._closed and name in self.node.groups:
            await self._leave(name)
        events.close()
        del self._queues[name]
        self.timings.left(name)

    async def _leave(self, name: str) -> None:
        # Shielded: a block cancelled by its caller still says goodbye, so the
        # others need not wait to suspect us. Bounded: a node stalled by another
        # group's full queue must not hang the exit.
        with trio.CancelScope(shield=True, deadline=trio.current_time() + LEAVE_GRACE):
            settle_by = trio.current_time() + min(self.node.params.takeover_timeout, LEAVE_GRACE / 2)
            while not await self._leave_unless_changing(name, settle_by):
                await trio.sleep(self.node.params.view_repeat_interval / 4)
        if name in self.node.groups and self._nursery is not None:
            # Timed out waiting for the lock: leave anyway; the LEAVE datagram
            # may then overtake datagrams still queued behind the stall.
            self._nursery.start_soon(self._route, self.node.leave(name, trio.current_time()))

    async def _leave_unless_changing(self, name: str, settle_by: float) -> bool:
        """Leave ``name`` unless a view change we answered is under way: its
        commit may list us, and leaving now we would be listed in a view we
        never install (five members shutting down over namespaces: 4 views
        in 300 runs). Checked and done in one node call, so no proposal is
        answered in between. After ``settle_by`` (``takeover_timeout``, at
        most half of ``LEAVE_GRACE``) we leave anyway. Returns whether we left."""
        left = False

        def command(now: float) -> list[Action]:
            nonlocal left
            if self._answered_change(name) and trio.current_time() < settle_by:
                return []
            left = True
            return self.node.leave(name, now)

        await self.call(command)
        return left

    def _answered_change(self, name: str) -> bool:
        return self.node.answered_change(name)

    # ------------------------------------------------------------------ tasks

    def start(self, nursery: trio.Nursery) -> None:
        self._nursery = nursery
        for sock in self.sockets.raw_receivers:
            nursery.start_soon(self._receive_loop, sock)
        nursery.start_soon(self._timer_loop)
        if self.sockets.listener is not None:
            nursery.start_soon(self._accept_loop, self.sockets.listener)
        if self.recorder is not None:
            nursery.start_soon(self._trace_loop, self.recorder)
        if sigterm_free() and trio.lowlevel.current_root_task() is not None:
            nursery.start_soon(self._sigterm_loop, nursery.cancel_scope)

    async def _sigterm_loop(self, scope: trio.CancelScope) -> None:
        """SIGTERM cancels the code inside ``open_node``: its groups say
        goodbye, and ``open_driver`` ends the process with status 143."""
        try:
            with trio.open_signal_receiver(signal.SIGTERM) as signals:
                async for _ in signals:
                    self.terminated = True
                    scope.cancel()
                    return
        except RuntimeError:
            return  # not trio's main thread (a guest run under asyncio): SIGTERM stays the default

    def shut(self) -> None:
        """Refuse new calls and end every group's event stream."""
        self._closed = True
        for queue in self._queues.values():
            queue.events.close()

    async def _receive_loop(self, sock: socket.socket) -> None:
        """``sock`` is non-blocking: drain what it holds, wait only when empty."""
        error_queue = self.sockets.error_queue and sock is self.sockets.raw_unicast
        while True:
            batch, outcome = _read_batch(sock)
            if batch:
                await self._call(partial(self._handle_datagrams, batch))
            if outcome is _Outcome.REFUSED and not error_queue:
                outcome = _Outcome.FAILED  # e.g. ECONNRESET on some platforms: count it, pause
            if error_queue:
                if outcome is _Outcome.REFUSED or not batch:
                    # Woken with no datagram: most likely an error report (EPOLLERR),
                    # which must be read or the socket stays signalled.
                    self._collect_refusals()
                if self._refused:
                    await self._call(self._handle_refusals)
            if outcome is _Outcome.FAILED:
                self._receive_errors += 1
                await trio.sleep(RECEIVE_ERROR_PAUSE)
            elif outcome is _Outcome.EMPTY:
                await trio.lowlevel.wait_readable(sock)
            # FULL or REFUSED: more may be waiting, read again at once.

    def _collect_refusals(self) -> None:
        """Read the unicast socket's error queue into ``_refused``; no node call,
        so a task that must not call the node (a waiting send) may do it too."""
        refused, others = read_refusals(self.sockets.raw_unicast)
        self._unreachable += len(refused)
        self._receive_errors += others  # ICMP reports that say nothing about a member's process
        room = MAX_PENDING_REFUSALS - len(self._refused)
        self._refused += refused[:room]

    def _handle_refusals(self, now: float) -> list[Action]:
        refused, self._refused = self._refused, []
        handle_unreachable = getattr(self.node, "handle_unreachable", None)
        if handle_unreachable is None:  # a node from before failure detection
            return []
        actions: list[Action] = []
        for address in dict.fromkeys(refused):  # a burst to one dead member is one signal
            actions += handle_unreachable(address, now)
        return actions

    def _handle_datagrams(self, batch: list[tuple[Any, bytes]], now: float) -> list[Action]:
        actions: list[Action] = []
        if self.recorder is not None:
            for _src, data in batch:
                self.recorder.received(data)
        for src, data in batch:
            actions += self.node.handle_datagram(src, data, now)
        # Timers these datagrams made due (an ordered group's promise after a
        # quiet spell) fire in this call, not a scheduler turn later.
        return actions + self._due_timers(now)

    async def _accept_loop(self, listener: socket.socket) -> None:
        """Other members' host checks: the handshake is all they need, which
        the kernel made already; accept and close, never read."""
        while True:
            accepted, failed = accept_and_close(listener)
            self._accepts += accepted
            if failed:  # e.g. out of file descriptors: the queue waits, do not spin
                await trio.sleep(RECEIVE_ERROR_PAUSE)
            else:
                await trio.lowlevel.wait_readable(listener)

    async def _host_check(self, member: int, address: Endpoint) -> None:
        try:
            answer = await check_host(address)
            self._host_checks[answer] += 1
            if answer in (HostAnswer.REFUSED, HostAnswer.SILENT):
                await self._call(partial(self.node.handle_host_unreachable, member, address))
        finally:
            self._checking.discard(member)

    async def _timer_loop(self) -> None:
        while True:
            deadline = self.node.next_deadline()
            if deadline is not None and trio.current_time() >= deadline:
                await self._call(self.node.handle_timeout)
                continue
            self._poke = trio.Event()
            self._timer_due = math.inf if deadline is None else deadline
            try:
                with trio.move_on_at(self._timer_due):
                    await self._poke.wait()
            finally:
                self._timer_due = -math.inf

    async def _trace_loop(self, recorder: TraceRecorder) -> None:
        while True:
            await trio.sleep(FLUSH_EVERY)
            recorder.flush({group: self.node.occupancy(group) for group in self.node.groups})

    # ------------------------------------------------------------------ routing

    async def _route(self, actions: list[Action]) -> None:
        wait = self._start_route(actions)
        if wait is not None:
            await wait

    def _start_route(self, actions: list[Action]) -> Awaitable[None] | None:
        """Route ``actions`` in order until one has to wait; then return an
        awaitable that finishes that one and the rest."""
        for index, action in enumerate(actions):
            wait = _ROUTES[type(action)](self, action)
            if wait is not None:
                return self._finish_route(wait, actions, index)
        return None

    async def _finish_route(self, wait: Awaitable[None], actions: list[Action], index: int) -> None:
        routed = index
        try:
            await wait
            routed += 1
            for action in actions[index + 1 :]:
                pending = _ROUTES[type(action)](self, action)
                if pending is not None:
                    await pending
                routed += 1
        finally:
            # Cancelled mid-way (shutdown, or a cancelled send): count what
            # never reached the application rather than lose it silently.
            self._discarded += sum(isinstance(a, _COUNTED_EVENTS) for a in actions[routed:])

    # Each route finishes at once and returns None, or returns what to await
    # to finish (see "Fast path" in the module docstring).

    def _send(self, action: Send) -> Awaitable[None] | None:
        if self.recorder is not None:
            self.recorder.sent(action.msg_type, len(action.data))
        return self._sendto(action.data, action.dst)

    def _multicast(self, action: Multicast) -> Awaitable[None] | None:
        if self.recorder is not None:
            self.recorder.sent(action.msg_type, len(action.data))
        fanout = self.sockets.fanout
        for i, destination in enumerate(fanout):
            wait = self._sendto(action.data, destination)
            if wait is not None:
                return self._multicast_rest(wait, action.data, fanout[i + 1 :])
        return None

    async def _multicast_rest(self, wait: Awaitable[None], data: bytes, rest: tuple[Endpoint, ...]) -> None:
        await wait
        for destination in rest:
            await self._sendto_waiting(data, destination)

    def _sendto(self, data: bytes, destination: Any) -> Awaitable[None] | None:
        try:
            self.sockets.raw_unicast.sendto(data, destination)
        except BlockingIOError:
            return self._sendto_waiting(data, destination)  # the socket buffer is full
        except ConnectionRefusedError:
            return self._sendto_again(data, destination)
        except OSError as exc:
            self._count_send_error(exc)
        return None

    def _sendto_again(self, data: bytes, destination: Any) -> Awaitable[None] | None:
        """The kernel reported an earlier datagram's refusal on this send, and
        did not send it (see "Refusals" in the module docstring): try again."""
        for _ in range(SEND_REFUSED_RETRIES):
            try:
                self.sockets.raw_unicast.sendto(data, destination)
            except BlockingIOError:
                return self._sendto_waiting(data, destination)
            except ConnectionRefusedError:
                continue
            except OSError as exc:
                self._count_send_error(exc)
            return None
        self._count_send_error(ConnectionRefusedError(errno.ECONNREFUSED, "refused"))
        return None

    async def _sendto_waiting(self, data: bytes, destination: Any) -> None:
        raw = self.sockets.raw_unicast
        refusals = 0
        while True:
            try:
                raw.sendto(data, destination)
                return
            except BlockingIOError:
                if self.sockets.error_queue:
                    self._collect_refusals()  # an unread report would end every wait at once
                await trio.lowlevel.wait_writable(raw)
            except ConnectionRefusedError as exc:
                refusals += 1
                if refusals > SEND_REFUSED_RETRIES:
                    self._count_send_error(exc)
                    return
            except OSError as exc:
                self._count_send_error(exc)
                return

    def _count_send_error(self, exc: OSError) -> None:
        self._send_errors[errno.errorcode.get(exc.errno or 0, type(exc).__name__)] += 1

    def _deliver(self, action: Deliver) -> Awaitable[None] | None:
        if action.sender == self._me and action.dest is None:
            self.timings.delivered(action.group, action.seq, trio.current_time())
        return self._to_app(action)

    def _change_began(self, action: OptimisticView) -> Awaitable[None] | None:
        self.timings.change_began(action.group, trio.current_time())
        return self._to_app(action)

    def _change_ended(self, action: ViewInstalled) -> Awaitable[None] | None:
        self.timings.change_ended(action.group, trio.current_time())
        name_of = self.node.name_of
        names = tuple((m, name) for m in action.members if (name := name_of(m)) is not None)
        return self._to_app(dataclasses.replace(action, names=names))

    def _not_delivered(self, action: NotDelivered) -> Awaitable[None] | None:
        if action.to is None:
            self.timings.ended(action.group, action.message.seq)
        return self._to_app(action)

    def _rolled_back(self, action: Rollback) -> Awaitable[None] | None:
        for sender, seq in action.messages:
            if sender == self._me:
                self.timings.ended(action.group, seq)
        return self._to_app(action)

    def _to_app(self, action: AppEvent) -> Awaitable[None] | None:
        queue = self._queues.get(action.group)
        if queue is None or queue.leaving:
            self._discarded += 1
            return None
        try:
            if not queue.events.put_nowait(action):
                return self._to_app_waiting(queue, action)  # full: backpressure
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            self._discarded += 1
        return None

    async def _to_app_waiting(self, queue: _GroupQueue, action: AppEvent) -> None:
        try:
            await queue.events.put(action)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            self._discarded += 1

    def _check_host(self, action: CheckHost) -> None:
        if self._nursery is None or action.member in self._checking:
            return  # not started yet, or a check of this member is under way
        host, port = typing.cast(Endpoint, action.address)  # the node's addresses are recvfrom's here
        self._checking.add(action.member)
        self._nursery.start_soon(self._host_check, action.member, (host, port))

    def _trace_event(self, action: TraceEvent) -> None:
        if self.recorder is not None:
            self.recorder.event(action)

    def _ignore(self, action: Action) -> None:
        """Node outputs the public API has no event for yet."""


_ROUTES: dict[type, Callable[[TrioDriver, Any], Awaitable[None] | None]] = {
    Send: TrioDriver._send,
    Multicast: TrioDriver._multicast,
    Deliver: TrioDriver._deliver,
    ViewInstalled: TrioDriver._change_ended,
    OptimisticView: TrioDriver._change_began,
    Rollback: TrioDriver._rolled_back,
    NotDelivered: TrioDriver._not_delivered,
    TransitionalView: TrioDriver._to_app,
    MemberSuspected: TrioDriver._to_app,
    MemberBusy: TrioDriver._to_app,
    CheckHost: TrioDriver._check_host,
    GroupError: TrioDriver._to_app,
    TraceEvent: TrioDriver._trace_event,
}
for _kind in typing.get_args(Action):
    # Node outputs the public API does not surface yet: skipped here, so a
    # node that grows a new output never breaks a running driver with a
    # KeyError in its receive or timer loop.
    _ROUTES.setdefault(_kind, TrioDriver._ignore)


class _Outcome(enum.Enum):
    """How a ``_read_batch`` ended."""

    FULL = enum.auto()  # RECEIVE_BATCH datagrams read; the socket may hold more
    EMPTY = enum.auto()  # the socket is empty
    REFUSED = enum.auto()  # ECONNREFUSED: a refusal report is pending on the error queue
    FAILED = enum.auto()  # another receive error


def _read_batch(sock: socket.socket) -> tuple[list[tuple[Any, bytes]], _Outcome]:
    """Up to RECEIVE_BATCH datagrams that ``sock`` holds, without waiting."""
    batch: list[tuple[Any, bytes]] = []
    try:
        while len(batch) < RECEIVE_BATCH:
            data, src = sock.recvfrom(RECEIVE_SIZE)
            batch.append((src, data))
    except BlockingIOError:
        return batch, _Outcome.EMPTY
    except ConnectionRefusedError:
        return batch, _Outcome.REFUSED
    except OSError:
        return batch, _Outcome.FAILED
    return batch, _Outcome.FULL


def _incarnation() -> tuple[int, int]:
    """The ``incarnation`` and ``salt`` for ``Node``.

    A process restarted with the same node id must present a new incarnation,
    so that the others tell it from its former self (its sequence numbers
    start over at ``incarnation << 32``). Tenths of a second since the epoch
    differ between two starts unless they fall in the same tenth. They wrap
    every 6.8 years: only a restart that straddles the wrap gets a smaller
    incarnation than its former self. The random salt keeps the nonces of two
    starts within one tenth apart (``sgcs.security``)."""
    return int(time.time() * 10) % 2**31, _entropy.getrandbits(32)


@asynccontextmanager
async def open_driver(config: Config, trace: str | os.PathLike[str] | None = None) -> AsyncIterator[TrioDriver]:
    """Open a node's sockets and run its driver for the duration of the block;
    with ``trace``, record trace schema 1 into that run directory.

    An exception from the block comes out as itself, not wrapped in an
    ExceptionGroup by the driver's nursery."""
    node_id = config.node_id if config.node_id is not None else _entropy.randrange(2**63)
    # The protocol draws from its own seeded Random (sans-I/O rule); only the
    # seed comes from the OS, so real runs differ from one another.
    incarnation, salt = _incarnation()
    node = Node(node_id, config, random.Random(_entropy.getrandbits(64)), trace=trace is not None,
                incarnation=incarnation, salt=salt, now=trio.current_time())
    recorder = None if trace is None else TraceRecorder(trace, node_id, config)
    sockets = await open_sockets(config)
    body_error: BaseException | None = None
    try:
        driver = TrioDriver(node, sockets, recorder)
        async with trio.open_nursery() as nursery:
            driver.start(nursery)
            try:
                yield driver
            except GeneratorExit:
                raise
            except BaseException as exc:  # re-raised below, after the tasks are gone
                body_error = exc
            finally:
                driver.shut()
                nursery.cancel_scope.cancel()
    finally:
        sockets.close()
        if recorder is not None:
            recorder.close()
    if driver.terminated:
        raise SystemExit(EXIT_STATUS)
    if body_error is not None:
        raise body_error
