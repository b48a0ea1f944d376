"""ADS modules and handles over an sgcs group (the ADS middleware; docs/handles.md).

Theory of operation
-------------------
A module **attaches** to a data field at the start of its life and
**detaches** at the end: here ``attach(node, field)`` joins the sgcs group
``field`` in total order for the life of an ``async with`` block and runs two
tasks, a dispatcher and a sender. In between the module makes handles:

* ``module.p2p(node, tcd)``: point-to-point send to one node (sgcs reliable unicast);
* ``module.multicast(tcd, node=None)``: multicast to the data field,
  optionally meant for one node only (every member gets it; the others drop it);
* ``module.receive(*tcds)``: multi-TCD receive; handles may share codes,
  each gets its own copy;
* ``await module.receive_exclusive(tcd)``: single-TCD receive, exclusive in
  the whole group (``claims.py``: a claim in total order, every member answers,
  the earliest claim wins); a second claim raises ``ExclusiveRefused``.

**Merges.** A module that starts alone, or a side of a partition, grants codes
in its own view, so two views that merge may both hold one code. After every
view change the members exchange their claim tables (HOLDINGS, one multicast
each) and apply one rule to the same reports at the same point of the total
order (``claims.py``, "Merges"): the earliest grant keeps the code (equal
times: the lowest member id). The loser's handle gives the frames it already
had, then raises ``ExclusiveLost``; every member's table names the same holder
(``module.holder(tcd)``), and ``await module.reconciled()`` waits for the
current view's exchange. Claims under way when a view brings members their
view lacked start again in the new view, so they are put to every member.

**Priority sending.** The application gives only a handle and a data
priority (0-9, higher first). ``send`` puts the frame into the module's
priority queue and returns; the sender task hands frames to sgcs one at a time,
highest priority first, FIFO inside a priority. sgcs's flow control (the
window of unstable messages) blocks the sender task, so while the link is busy
the queue fills and an urgent frame **overtakes** every bulk frame still
waiting in it. A frame already handed to sgcs is not overtaken: the group's
total order decides from there. The queue holds at most ``send_queue`` frames;
``send`` waits for room (the block policy). The middleware's own control
frames go before every application priority.

**Survival signals** (the paper's section 2.3). A task sends this module's
survival signal to every other member every interval T and ticks the
three-stage monitor (``survival.py``: N missed signals (any unicast from a
node counts as one; multicasts do not, being delivered in total order, maybe
late), M probes, then the
suspect's neighbours are asked; dead only when they confirm, busy when one
heard it, unreachable when the ask went unanswered; "node shutdown" when no
other node is left alive). Its verdicts, and the data field's view changes,
become ``NodeEvent``s on every receive handle made with ``liveness=True``
(and on ``module.watch()``): from the monitor ``suspected``, ``alive``,
``busy``, ``unreachable``, ``dead``, ``shutdown``; from the view ``joined``,
``left`` (planned) and ``failed`` (sgcs excluded the node from the view:
frames no longer reach it, but that is sgcs's membership, not the paper's
confirmed death). The survival frames are unicasts sent without waiting
(``block=False``): a signal that cannot go now is dropped and counted, never
queued behind data. sgcs's own detector's ``MemberSuspected``/``MemberBusy``
are not passed on: the handles' survival signals are the monitor's.

**Maintenance** (the paper's online maintenance). ``await module.restrict()``
multicasts MAINTENANCE in total order; every member records the node as in
maintenance when it delivers it (``maintenance`` events) and refuses
point-to-point and targeted sends to it with ``NodeInMaintenance``;
``await module.lift()`` ends it (``resumed``). A frame queued before the
sender learnt of the maintenance is refused when its turn comes, and one that
crossed the announcement on the wire is dropped by the node in maintenance:
both are counted. Multicasts to the whole field still reach it. A module in
maintenance announces it again after every view change, so newcomers learn it.

A receive handle buffers at most ``queue_size`` events; when one is full the
dispatcher waits (back-pressure up to sgcs's own event queue). Frames that do
not decode are dropped and counted in ``statistics``.
"""

from __future__ import annotations

import heapq
import inspect
import os
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, Union

import trio

import sgcs
from sgcs.errors import DecodeError, UsageError

from ..tasks import background
from . import tcd as codes
from .claims import ClaimTable, Loss, PendingClaim
from .survival import Send, SurvivalMonitor, SurvivalParams, Verdict

CONTROL_PRIORITY = codes.PRIORITIES
"""Above every application priority: claims and answers never wait behind data."""

NodeEventKind = Literal["joined", "left", "failed", "suspected", "alive", "busy", "unreachable", "dead", "shutdown",
                        "maintenance", "resumed"]
LossReason = Literal["merge"]


class ExclusiveRefused(UsageError):
    """Another module of the group holds (or claimed first) this single-TCD receive."""


class ExclusiveLost(ExclusiveRefused):
    """This module's single-TCD receive of ``tcd`` went to member ``holder``.

    ``reason`` "merge": two views that each granted the code merged, and the
    merge rule (earliest grant; equal times, lowest member id) kept the other
    grant. The handle raises it once the frames it already had are read (and on
    every receive after); ``receive_exclusive`` raises it when the loss came
    before the handle was made. A subclass of ``ExclusiveRefused``: code that
    handles a refused claim handles this one too."""

    def __init__(self, tcd: int, holder: int, reason: LossReason = "merge") -> None:
        super().__init__(f"single-TCD receive of code {tcd} lost to member {holder} ({reason}: "
                         f"granted there first); claim it again once it is free")
        self.tcd, self.holder, self.reason = tcd, holder, reason

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.tcd, self.holder, self.reason)


class NodeInMaintenance(UsageError):
    """A point-to-point or targeted send to a node in maintenance (``Module.restrict``)."""

    def __init__(self, node: int) -> None:
        super().__init__(f"node {node} is in maintenance: point-to-point and targeted sends to it are refused "
                         f"until it lifts the restriction (see module.maintenance)")
        self.node = node

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.node,)


@dataclass(frozen=True, slots=True)
class Data:
    """Application data received on a handle."""

    tcd: int
    data: bytes
    sender: int
    priority: int


@dataclass(frozen=True, slots=True)
class NodeEvent:
    """A survival signal about ``node``.

    From the survival monitor: ``suspected`` (N signals missed), ``alive``
    (heard again after any of the following), ``busy`` (a neighbour still
    hears it), ``unreachable`` (nobody confirmed either way), ``dead``
    (neighbours confirmed the silence), ``shutdown`` (about this module's own
    node: no other node is alive). From the view: ``joined``, ``left``
    (planned), ``failed`` (excluded by sgcs). From maintenance: ``maintenance``,
    ``resumed``."""

    kind: NodeEventKind
    node: int
    at: float
    """Wall-clock time (``time.time()``, seconds since the epoch) when this
    module learnt it: comparable between processes up to their hosts' clock
    skew (trio's clock starts at a random origin in each process)."""


HandleEvent = Union[Data, NodeEvent]


@dataclass
class ModuleStatistics:
    sent: int = 0
    received: int = 0
    dropped_undecodable: int = 0
    dropped_not_for_us: int = 0
    undeliverable: int = 0
    """Point-to-point sends to a node that was not in the view when their turn came."""
    reconciliations: int = 0
    """Views whose exchange of claim tables completed here."""
    exclusive_lost: int = 0
    """Single-TCD codes this module lost to the merge rule."""
    claims_restarted: int = 0
    """Claims started again because a new view brought members their view lacked."""
    survival_sent: int = 0
    """Survival frames (signals, probes, asks and their answers) handed to sgcs."""
    survival_unsent: int = 0
    """Survival frames dropped because sgcs could not take them at once (window full, node not in the view)."""
    stale_answers: int = 0
    """Answers to an ask that was already over, or from a node not asked."""
    refused_maintenance: int = 0
    """Queued point-to-point or targeted frames refused at their turn: the node had entered maintenance."""
    dropped_in_maintenance: int = 0
    """Point-to-point or targeted frames that reached this module while in maintenance (sent before the sender knew)."""


class SendHandle:
    """Sends frames of one transaction code, to the field or to one node."""

    def __init__(self, module: Module, tcd: int, *, to: int | None, target: int) -> None:
        self._module, self.tcd, self._to, self._target = module, tcd, to, target

    async def send(self, data: bytes, *, priority: int = 0) -> None:
        """Queue ``data`` at ``priority`` (0-9, higher first); returns once it is queued."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise UsageError(f"data must be bytes, got {type(data).__name__}")
        codes.check_priority(priority)
        self._module._check_access(self._target)
        frame = codes.encode_frame(self.tcd, bytes(data), priority=priority, target=self._target)
        await self._module._enqueue(priority, frame, self._to)


class ReceiveHandle:
    """Receives the frames of its codes (and survival signals with ``liveness``)."""

    def __init__(self, module: Module, tcds: frozenset[int], *, liveness: bool, queue_size: int,
                 exclusive: tuple[int, int] | None = None) -> None:
        self._module = module
        self.tcds = tcds
        self.liveness = liveness
        self.exclusive = exclusive
        self._send, self._receive = trio.open_memory_channel[HandleEvent](queue_size)
        self.closed = False
        self.lost: ExclusiveLost | None = None
        """Set when the merge rule took this handle's code: it receives nothing more."""

    async def receive(self) -> HandleEvent:
        """The next ``Data`` or ``NodeEvent``; raises ``trio.EndOfChannel`` once
        closed, ``ExclusiveLost`` (after the frames already queued) once its code was lost."""
        try:
            return await self._receive.receive()
        except trio.EndOfChannel:
            if self.lost is not None:
                raise self.lost from None
            raise

    def __aiter__(self) -> AsyncIterator[HandleEvent]:
        return self

    async def __anext__(self) -> HandleEvent:
        try:
            return await self.receive()
        except trio.EndOfChannel:
            raise StopAsyncIteration from None

    async def close(self) -> None:
        """Stop receiving; an exclusive handle releases its code to the group."""
        if self.closed:
            return
        self.closed = True
        self._module._handles.remove(self)
        await self._send.aclose()
        if self.exclusive is not None:
            tcd, nonce = self.exclusive
            self._module._claims.give_up(tcd, nonce)
            await self._module._control(codes.TCD_RELEASE, codes.encode_claim(tcd, nonce))

    def _lose(self, error: ExclusiveLost) -> None:
        """The dispatcher's: the code went elsewhere. No RELEASE: the winner's record already replaced ours."""
        self.lost = error
        self.closed = True
        self._module._handles.remove(self)
        self._send.close()  # the reader gets what is queued, then ``error``


@dataclass
class _Claim:
    nonce: int
    """The claim's current nonce (a claim started again in a new view gets a new one)."""
    done: trio.Event = field(default_factory=trio.Event)
    result: PendingClaim | None = None


class Group(Protocol):
    """What a module uses of ``sgcs.GroupHandle`` (a test may give it an in-memory
    group; one whose ``send`` takes no ``block`` must not wait on a unicast)."""

    @property
    def node_id(self) -> int: ...

    async def send(self, payload: bytes, *, to: int | None = None) -> object: ...

    def __aiter__(self) -> AsyncIterator[sgcs.Event]: ...


def _new_nonce() -> int:
    return int.from_bytes(os.urandom(8), "big") or 1


class Module:
    """An attached ADS module; make it with ``attach``."""

    def __init__(self, group: Group, *, queue_size: int, send_queue: int,
                 clock: Callable[[], float] = time.time, survival: SurvivalParams | None = None) -> None:
        self.group = group
        self.me = group.node_id
        self._clock = clock
        self.statistics = ModuleStatistics()
        self._queue_size = queue_size
        self._send_queue = send_queue
        self._heap: list[tuple[int, int, bytes, int | None, int]] = []
        self.survival = survival
        """The survival-signal settings (None: no survival signals, only the view's events)."""
        self._monitor = SurvivalMonitor(self.me, survival or SurvivalParams())
        self._send_takes_block = "block" in inspect.signature(group.send).parameters
        self._maintenance: set[int] = set()
        self._maintenance_changed = trio.Event()
        self._counter = 0
        self._work = trio.Event()
        self._room = trio.Event()
        self._handles: list[ReceiveHandle] = []
        self._claims = ClaimTable(self.me)
        self._claim_waiters: dict[tuple[int, int], _Claim] = {}
        self._members: tuple[int, ...] = ()
        self._view_id = ""
        self._view_ready = trio.Event()
        self._changed = trio.Event()
        """Set (and replaced) at every view change and completed exchange: ``reconciled`` waits on it."""
        self._lost_early: dict[tuple[int, int], int] = {}
        """(tcd, nonce) -> holder: codes lost between our claim's win and its handle."""
        self._idle = trio.Event()
        self._idle.set()

    @property
    def queued(self) -> int:
        """Frames waiting in the priority queue (not yet handed to sgcs)."""
        return len(self._heap)

    @property
    def members(self) -> tuple[int, ...]:
        """The data field's members in the current view, sorted."""
        return self._members

    @property
    def maintenance(self) -> frozenset[int]:
        """The members in maintenance, as this module has delivered their announcements."""
        return frozenset(self._maintenance)

    def survival_state(self, node: int) -> str | None:
        """The survival monitor's state of ``node`` ("alive", "suspect", "asking",
        "busy", "unreachable", "dead"); None: not watched (or survival signals off)."""
        state = self._monitor.state(node) if self.survival is not None else None
        return state.value if state is not None else None

    async def restrict(self, *, timeout: float = 10.0) -> None:
        """Enter maintenance: every member refuses point-to-point and targeted
        sends to this node until ``lift``. Returns once this module has
        delivered its own announcement (so every member of the view delivers
        it in the same total order); ``trio.TooSlowError`` after ``timeout``."""
        await self._announce_maintenance(True, timeout)

    async def lift(self, *, timeout: float = 10.0) -> None:
        """Leave maintenance (announced like ``restrict``)."""
        await self._announce_maintenance(False, timeout)

    async def _announce_maintenance(self, on: bool, timeout: float) -> None:
        if type(timeout) not in (int, float) or not timeout > 0:
            raise UsageError(f"timeout must be a positive number of seconds, got {timeout!r}")
        with trio.fail_after(timeout):
            await self._control(codes.TCD_MAINTENANCE, codes.encode_maintenance(on))
            while (self.me in self._maintenance) != on:
                await self._maintenance_changed.wait()

    def _check_access(self, target: int) -> None:
        if target and target != self.me and target in self._maintenance:
            raise NodeInMaintenance(target)

    def holder(self, tcd: int) -> int | None:
        """The member that holds single-TCD code ``tcd`` (or has a claim of it
        under way), by this module's table; None: free. After ``reconciled()``
        every member of the view names the same holder of each granted code."""
        return self._claims.holder(codes.check_app_code(tcd))

    async def reconciled(self) -> None:
        """Wait until the members of the current view have exchanged their claim
        tables and applied the merge rule (at once if they have). If the view
        changes meanwhile, waits for the new view's exchange."""
        while self._claims.reconciled_view != self._view_id:
            await self._changed.wait()

    # ------------------------------------------------------------ handles

    def p2p(self, node: int, tcd: int) -> SendHandle:
        codes.check_app_code(tcd)
        if type(node) is not int or node < 0:
            raise UsageError(f"node must be a member id (an int), got {node!r}")
        return SendHandle(self, tcd, to=node, target=node)

    def multicast(self, tcd: int, node: int | None = None) -> SendHandle:
        codes.check_app_code(tcd)
        if node is not None and (type(node) is not int or node <= 0):
            raise UsageError(f"node must be a member id (an int) or None, got {node!r}")
        return SendHandle(self, tcd, to=None, target=node or 0)

    def receive(self, *tcds: int, liveness: bool = False) -> ReceiveHandle:
        if not tcds:
            raise UsageError("receive needs at least one transaction code")
        handle = ReceiveHandle(self, frozenset(codes.check_app_code(t) for t in tcds), liveness=liveness,
                               queue_size=self._queue_size)
        self._handles.append(handle)
        return handle

    def watch(self) -> ReceiveHandle:
        """Survival signals only."""
        handle = ReceiveHandle(self, frozenset(), liveness=True, queue_size=self._queue_size)
        self._handles.append(handle)
        return handle

    async def receive_exclusive(self, tcd: int, *, liveness: bool = False, timeout: float = 30.0) -> ReceiveHandle:
        """A single-TCD receive handle, exclusive in the whole group.

        Raises ``ExclusiveRefused`` if another module holds the code or claimed it first."""
        codes.check_app_code(tcd)
        if type(timeout) not in (int, float) or not timeout > 0:
            raise UsageError(f"timeout must be a positive number of seconds, got {timeout!r}")
        if tcd in self._claims.mine or any(h.exclusive and h.exclusive[0] == tcd for h in self._handles):
            raise ExclusiveRefused(f"this module already holds single-TCD receive of code {tcd}")
        nonce = _new_nonce()
        self._claims.start_claim(tcd, nonce)
        waiter = _Claim(nonce)
        self._claim_waiters[(tcd, nonce)] = waiter
        try:
            await self._control(codes.TCD_CLAIM, codes.encode_claim(tcd, nonce))
            with trio.move_on_after(timeout):
                await waiter.done.wait()
        except BaseException:
            # cancelled from outside: withdraw, or a code won meanwhile would stay held with no handle
            with trio.CancelScope(shield=True):
                await self._withdraw(tcd, waiter)
            raise
        result = waiter.result
        if result is None or not result.won:  # (a win that raced the timeout still counts: it was granted)
            await self._withdraw(tcd, waiter)
            holders = sorted(result.holders) if result else []
            why = f"held by member {holders[0]}" if holders else f"no decision within {timeout} s"
            raise ExclusiveRefused(f"single-TCD receive of code {tcd} refused: {why}")
        self._claim_waiters.pop((tcd, waiter.nonce), None)
        lost_to = self._lost_early.pop((tcd, waiter.nonce), None)
        if lost_to is not None:
            raise ExclusiveLost(tcd, lost_to)
        handle = ReceiveHandle(self, frozenset({tcd}), liveness=liveness, queue_size=self._queue_size,
                               exclusive=(tcd, waiter.nonce))
        self._handles.append(handle)
        return handle

    async def _withdraw(self, tcd: int, waiter: _Claim) -> None:
        """Forget a claim that will get no handle, won or not, and tell the group (ABANDON)."""
        self._claim_waiters.pop((tcd, waiter.nonce), None)
        self._claims.pending.pop((tcd, waiter.nonce), None)
        self._claims.give_up(tcd, waiter.nonce)
        self._lost_early.pop((tcd, waiter.nonce), None)
        await self._control(codes.TCD_ABANDON, codes.encode_claim(tcd, waiter.nonce))

    async def flush(self) -> None:
        """Wait until every queued frame was handed to sgcs."""
        await self._idle.wait()

    # ------------------------------------------------------------ sending

    async def _enqueue(self, priority: int, frame: bytes, to: int | None) -> None:
        while len(self._heap) >= self._send_queue and priority < CONTROL_PRIORITY:
            self._room = trio.Event()
            await self._room.wait()
        self._counter += 1
        target = codes.decode_frame_untrusted(frame).target
        heapq.heappush(self._heap, (-priority, self._counter, frame, to, target))
        self._idle = trio.Event() if self._idle.is_set() else self._idle
        self._work.set()

    async def _control(self, tcd: int, body: bytes, to: int | None = None) -> None:
        await self._enqueue(CONTROL_PRIORITY, codes.encode_frame(tcd, body), to)

    async def _send_loop(self) -> None:
        while True:
            if not self._heap:
                self._idle.set()
                self._work = trio.Event()
                await self._work.wait()
                continue
            _, _, frame, to, target = heapq.heappop(self._heap)
            self._room.set()
            if target and target != self.me and target in self._maintenance:
                self.statistics.refused_maintenance += 1  # queued before we learnt of it
                continue
            try:
                await self.group.send(frame, to=to)  # waits while a unicast window is full
                self.statistics.sent += 1
            except UsageError:
                if to is None:
                    raise  # a multicast refused is a bug of ours, not the network's
                self.statistics.undeliverable += 1

    # ------------------------------------------------------------ receiving

    async def _dispatch(self) -> None:
        async for event in self.group:
            if isinstance(event, sgcs.Delivery):
                # Only a unicast is news of its sender now: a multicast may be delivered
                # late, repaired by other members or flushed at a view change after its sender fell silent.
                if event.dest is not None and event.sender != self.me and self.survival is not None:
                    await self._act(self._monitor.heard(event.sender, trio.current_time()))
                await self._on_delivery(event)
            elif isinstance(event, sgcs.ViewChange):
                await self._on_view(event)
            # sgcs's own MemberSuspected / MemberBusy are not passed on: the survival monitor's verdicts are

    # ------------------------------------------------------------ survival signals

    async def _survival_loop(self, params: SurvivalParams) -> None:
        """Stage 1's push and every stage's clock: a signal to each member, then a check, every interval."""
        signal = codes.encode_frame(codes.TCD_SIGNAL, b"")
        while True:
            for member in self._members:
                if member != self.me:
                    await self._send_now(signal, member)
            await self._act(self._monitor.tick(trio.current_time()))
            await trio.sleep(params.interval)

    async def _act(self, outputs: list[Send | Verdict]) -> None:
        for output in outputs:
            if isinstance(output, Verdict):
                await self._signal(output.kind, output.node)
            elif output.kind == "probe":
                await self._send_now(codes.encode_frame(codes.TCD_PROBE, b""), output.to)
            else:
                await self._send_now(codes.encode_frame(codes.TCD_ASK, codes.encode_ask(output.about, output.nonce)),
                                     output.to)

    async def _send_now(self, frame: bytes, to: int) -> None:
        """A survival frame goes now or not at all: waiting on one silent member
        would hold every other member's signal back (the silence we measure)."""
        try:
            if self._send_takes_block:
                await self.group.send(frame, to=to, block=False)  # type: ignore[call-arg]
            else:
                await self.group.send(frame, to=to)
            self.statistics.survival_sent += 1
        except (UsageError, sgcs.WouldBlock):  # not in the view (excluded), or its window is full
            self.statistics.survival_unsent += 1

    async def _on_survival(self, frame: codes.Frame, sender: int) -> None:
        if frame.tcd == codes.TCD_PROBE:
            await self._send_now(codes.encode_frame(codes.TCD_PROBE_ACK, b""), sender)
        elif frame.tcd == codes.TCD_ASK:
            about, nonce = codes.decode_ask_untrusted(frame.data)
            age = self._monitor.age(about, trio.current_time())
            await self._send_now(codes.encode_frame(codes.TCD_ASK_REPLY, codes.encode_ask_reply(about, nonce, age)),
                                 sender)
        elif frame.tcd == codes.TCD_ASK_REPLY:
            about, nonce, age = codes.decode_ask_reply_untrusted(frame.data)
            stale = self._monitor.stale_answers
            await self._act(self._monitor.on_answer(sender, about, nonce, age, trio.current_time()))
            self.statistics.stale_answers += self._monitor.stale_answers - stale
        # TCD_SIGNAL and TCD_PROBE_ACK: their arrival (``heard``) is all they say

    async def _on_maintenance(self, on: bool, sender: int) -> None:
        if on == (sender in self._maintenance):
            return  # a repeat (announced again after a view change)
        if on:
            self._maintenance.add(sender)
        else:
            self._maintenance.discard(sender)
        self._maintenance_changed.set()
        self._maintenance_changed = trio.Event()
        await self._signal("maintenance" if on else "resumed", sender)

    async def _on_view(self, change: sgcs.ViewChange) -> None:
        first = not self._view_ready.is_set()
        self._members = change.members
        self._view_id = change.view_id
        # Claims put to a view that lacked some of these members start again first,
        # so that only claims every member of this view was asked about get decided.
        restarted = []
        for claim in self._claims.stale_claims(change.members):
            waiter = self._claim_waiters.pop((claim.tcd, claim.nonce), None)
            fresh = self._claims.restart(claim, _new_nonce())
            if waiter is not None:
                waiter.nonce = fresh.nonce
                self._claim_waiters[(fresh.tcd, fresh.nonce)] = waiter
            restarted.append((claim.nonce, fresh))
        for claim in self._claims.on_view(change.members):
            self._decided(claim)
        # Our report comes after every decision above: a code won on the old
        # view's answers is in it, and the merge rule settles it.
        held, pending = self._claims.begin_exchange(change.view_id, change.members)
        self._view_ready.set()
        self._notify()
        await self._control(codes.TCD_HOLDINGS, codes.encode_holdings(change.view_id, held, pending))
        self._maintenance &= set(change.members) - set(change.joined) | {self.me}
        if self.me in self._maintenance:  # newcomers learn it; members that knew ignore the repeat
            await self._control(codes.TCD_MAINTENANCE, codes.encode_maintenance(True))
        survival = self._monitor.on_view(change.members, change.joined if not first else (), change.left,
                                         trio.current_time()) if self.survival is not None else []
        for old_nonce, fresh in restarted:
            self.statistics.claims_restarted += 1
            await self._control(codes.TCD_ABANDON, codes.encode_claim(fresh.tcd, old_nonce))
            await self._control(codes.TCD_CLAIM, codes.encode_claim(fresh.tcd, fresh.nonce))
        if first:
            return
        # failed before joined: a member named in both restarted (or came back from a partition)
        for kind, nodes in (("left", change.left), ("failed", change.failed), ("joined", change.joined)):
            for node in nodes:
                await self._signal(kind, node)  # type: ignore[arg-type]
        await self._act(survival)

    async def _signal(self, kind: NodeEventKind, node: int) -> None:
        event = NodeEvent(kind, node, time.time())
        for handle in list(self._handles):
            if handle.liveness and not handle.closed:
                await handle._send.send(event)

    async def _on_delivery(self, delivery: sgcs.Delivery) -> None:
        try:
            frame = codes.decode_frame_untrusted(delivery.payload)
            if frame.tcd >= codes.RESERVED_MIN:
                await self._on_control(frame, delivery.sender, delivery.view_id)
                return
        except DecodeError:
            self.statistics.dropped_undecodable += 1
            return
        if frame.target not in (0, self.me):
            self.statistics.dropped_not_for_us += 1
            return
        if frame.target == self.me and delivery.sender != self.me and self.me in self._maintenance:
            self.statistics.dropped_in_maintenance += 1  # sent before the sender delivered our announcement
            return
        data = Data(frame.tcd, frame.data, delivery.sender, frame.priority)
        self.statistics.received += 1
        for handle in list(self._handles):
            if frame.tcd in handle.tcds and not handle.closed:
                await handle._send.send(data)

    async def _on_control(self, frame: codes.Frame, sender: int, view_id: str) -> None:
        if frame.tcd == codes.TCD_CLAIM:
            tcd, nonce = codes.decode_claim_untrusted(frame.data)
            answer = self._claims.on_claim(tcd, sender, nonce, self._members)
            if sender == self.me:
                for claim in (self._claims.own_claim_delivered(tcd, nonce, self._members),
                              self._claims.on_answer(tcd, nonce, self.me, answer)):
                    if claim is not None:
                        self._decided(claim)
            else:
                await self._control(codes.TCD_ANSWER, codes.encode_answer(tcd, sender, nonce, answer), to=sender)
        elif frame.tcd == codes.TCD_ANSWER:
            tcd, claimant, nonce, holder = codes.decode_answer_untrusted(frame.data)
            if claimant == self.me:
                claim = self._claims.on_answer(tcd, nonce, sender, holder)
                if claim is not None:
                    self._decided(claim)
        elif frame.tcd in (codes.TCD_RELEASE, codes.TCD_ABANDON):
            tcd, nonce = codes.decode_claim_untrusted(frame.data)
            self._claims.on_release(tcd, sender, nonce)
        elif frame.tcd in codes.SURVIVAL_CODES:
            await self._on_survival(frame, sender)
        elif frame.tcd == codes.TCD_MAINTENANCE:
            await self._on_maintenance(codes.decode_maintenance_untrusted(frame.data), sender)
        elif frame.tcd == codes.TCD_HOLDINGS:
            reported_for, held, pending = codes.decode_holdings_untrusted(frame.data)
            losses = self._claims.on_report(reported_for, view_id, sender, held, pending)
            if losses is not None:
                self.statistics.reconciliations += 1
                for loss in losses:
                    self._lose(loss)
                self._notify()
        else:
            raise DecodeError("field", f"unknown reserved code {frame.tcd}")

    def _decided(self, claim: PendingClaim) -> None:
        if claim.won:
            # recorded now, in the dispatcher, so the next view's report has it
            # even if the claimant's task has not resumed yet
            self._claims.granted(claim, int(self._clock() * 1_000_000))
        waiter = self._claim_waiters.get((claim.tcd, claim.nonce))
        if waiter is not None:
            waiter.result = claim
            waiter.done.set()

    def _lose(self, loss: Loss) -> None:
        self.statistics.exclusive_lost += 1
        for handle in self._handles:
            if handle.exclusive == (loss.tcd, loss.nonce):
                handle._lose(ExclusiveLost(loss.tcd, loss.holder))
                return
        if (loss.tcd, loss.nonce) in self._claim_waiters:  # won, but its claimant has not made the handle yet
            self._lost_early[(loss.tcd, loss.nonce)] = loss.holder

    def _notify(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def _detach(self) -> None:
        for handle in list(self._handles):
            await handle.close()
        with trio.move_on_after(2.0):
            await self.flush()


@asynccontextmanager
async def attach(node: sgcs.NodeHandle, field: str, *, queue_size: int = 1_024,
                 send_queue: int = 10_000, clock: Callable[[], float] = time.time,
                 survival: SurvivalParams | None = SurvivalParams()) -> AsyncIterator[Module]:
    """Attach a module to the data field ``field`` (an sgcs group in total order)
    for the duration of the block; leaving it detaches: exclusive codes are
    released, queued frames get up to 2 s to go out, and the group is left.
    ``clock``: the wall clock that stamps won codes for the merge rule (seconds).
    ``survival``: the three-stage survival signals' settings (None: off; the
    handles then report only the view's joined, left and failed)."""
    if type(queue_size) is not int or queue_size < 1 or type(send_queue) is not int or send_queue < 1:
        raise UsageError("queue_size and send_queue must be positive ints")
    if not callable(clock):
        raise UsageError(f"clock must be a function returning seconds, got {clock!r}")
    if survival is not None and not isinstance(survival, SurvivalParams):
        raise UsageError(f"survival must be a SurvivalParams or None, got {survival!r}")
    async with node.join(field, order=sgcs.Order.TOTAL) as group, background() as nursery:
        module = Module(group, queue_size=queue_size, send_queue=send_queue, clock=clock, survival=survival)
        nursery.start_soon(module._dispatch)
        nursery.start_soon(module._send_loop)
        if survival is not None:
            nursery.start_soon(module._survival_loop, survival)
        await module._view_ready.wait()
        try:
            yield module
        finally:
            with trio.CancelScope(shield=True):
                await module._detach()
            nursery.cancel_scope.cancel()
