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

**Survival signals.** sgcs's failure detector already has the paper's three
stages (missed heartbeats, direct probes, asking others) and its "busy, not
dead" verdict. Each view change and suspicion becomes a ``NodeEvent`` on
every receive handle made with ``liveness=True`` (and on ``module.watch()``):
``joined``, ``left`` (planned), ``failed``, ``suspected``, ``busy``.

A receive handle buffers at most ``queue_size`` events; when one is full the
dispatcher waits (back-pressure up to sgcs's own event queue). Frames that do
not decode are dropped and counted in ``statistics``.
"""

from __future__ import annotations

import heapq
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Literal, Union

import trio

import sgcs
from sgcs.errors import DecodeError, UsageError

from . import tcd as codes
from .claims import ClaimTable, PendingClaim

CONTROL_PRIORITY = codes.PRIORITIES
"""Above every application priority: claims and answers never wait behind data."""

UNICAST_RETRY = 0.005
"""Seconds between tries of a unicast whose window is full."""

NodeEventKind = Literal["joined", "left", "failed", "suspected", "busy"]


class ExclusiveRefused(UsageError):
    """Another module of the group holds (or claimed first) this single-TCD receive."""


@dataclass(frozen=True, slots=True)
class Data:
    """Application data received on a handle."""

    tcd: int
    data: bytes
    sender: int
    priority: int


@dataclass(frozen=True, slots=True)
class NodeEvent:
    """A survival signal: a node ``joined``, ``left`` (planned), ``failed``, is ``suspected`` or ``busy``."""

    kind: NodeEventKind
    node: int
    at: float
    """``trio.current_time()`` when this module learnt it."""


HandleEvent = Union[Data, NodeEvent]


@dataclass
class ModuleStatistics:
    sent: int = 0
    received: int = 0
    dropped_undecodable: int = 0
    dropped_not_for_us: int = 0
    undeliverable: int = 0
    """Point-to-point sends to a node that was not in the view when their turn came."""


class SendHandle:
    """Sends frames of one transaction code, to the field or to one node."""

    def __init__(self, module: Module, tcd: int, *, to: int | None, target: int) -> None:
        self._module, self.tcd, self._to, self._target = module, tcd, to, target

    async def send(self, data: bytes, *, priority: int = 0) -> None:
        """Queue ``data`` at ``priority`` (0-9, higher first); returns once it is queued."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise UsageError(f"data must be bytes, got {type(data).__name__}")
        codes.check_priority(priority)
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

    async def receive(self) -> HandleEvent:
        """The next ``Data`` or ``NodeEvent``; raises ``trio.EndOfChannel`` once closed."""
        return await self._receive.receive()

    def __aiter__(self) -> AsyncIterator[HandleEvent]:
        return self._receive.__aiter__()

    async def close(self) -> None:
        """Stop receiving; an exclusive handle releases its code to the group."""
        if self.closed:
            return
        self.closed = True
        self._module._handles.remove(self)
        await self._send.aclose()
        if self.exclusive is not None:
            tcd, nonce = self.exclusive
            await self._module._control(codes.TCD_RELEASE, codes.encode_claim(tcd, nonce))


@dataclass
class _Claim:
    done: trio.Event = field(default_factory=trio.Event)
    result: PendingClaim | None = None


class Module:
    """An attached ADS module; make it with ``attach``."""

    def __init__(self, group: sgcs.GroupHandle, *, queue_size: int, send_queue: int) -> None:
        self.group = group
        self.me = group.node_id
        self.statistics = ModuleStatistics()
        self._queue_size = queue_size
        self._send_queue = send_queue
        self._heap: list[tuple[int, int, bytes, int | None]] = []
        self._counter = 0
        self._work = trio.Event()
        self._room = trio.Event()
        self._handles: list[ReceiveHandle] = []
        self._claims = ClaimTable(self.me)
        self._claim_waiters: dict[tuple[int, int], _Claim] = {}
        self._members: tuple[int, ...] = ()
        self._view_ready = trio.Event()
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
        if any(h.exclusive and h.exclusive[0] == tcd for h in self._handles):
            raise ExclusiveRefused(f"this module already holds single-TCD receive of code {tcd}")
        nonce = int.from_bytes(os.urandom(8), "big") or 1
        self._claims.start_claim(tcd, nonce)
        waiter = _Claim()
        self._claim_waiters[(tcd, nonce)] = waiter
        await self._control(codes.TCD_CLAIM, codes.encode_claim(tcd, nonce))
        with trio.move_on_after(timeout) as scope:
            await waiter.done.wait()
        self._claim_waiters.pop((tcd, nonce), None)
        result = waiter.result
        if scope.cancelled_caught or result is None or not result.won:
            self._claims.pending.pop((tcd, nonce), None)
            await self._control(codes.TCD_ABANDON, codes.encode_claim(tcd, nonce))
            holders = sorted(result.holders) if result else []
            why = f"held by member {holders[0]}" if holders else f"no decision within {timeout} s"
            raise ExclusiveRefused(f"single-TCD receive of code {tcd} refused: {why}")
        handle = ReceiveHandle(self, frozenset({tcd}), liveness=liveness, queue_size=self._queue_size,
                               exclusive=(tcd, nonce))
        self._handles.append(handle)
        return handle

    async def flush(self) -> None:
        """Wait until every queued frame was handed to sgcs."""
        await self._idle.wait()

    # ------------------------------------------------------------ sending

    async def _enqueue(self, priority: int, frame: bytes, to: int | None) -> None:
        while len(self._heap) >= self._send_queue and priority < CONTROL_PRIORITY:
            self._room = trio.Event()
            await self._room.wait()
        self._counter += 1
        heapq.heappush(self._heap, (-priority, self._counter, frame, to))
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
            _, _, frame, to = heapq.heappop(self._heap)
            self._room.set()
            while True:
                try:
                    await self.group.send(frame, to=to)
                    self.statistics.sent += 1
                except sgcs.WouldBlock:
                    # a unicast window is full: sgcs raises even with block=True, so wait here
                    await trio.sleep(UNICAST_RETRY)
                    continue
                except UsageError:
                    if to is None:
                        raise  # a multicast refused is a bug of ours, not the network's
                    self.statistics.undeliverable += 1
                break

    # ------------------------------------------------------------ receiving

    async def _dispatch(self) -> None:
        async for event in self.group:
            if isinstance(event, sgcs.Delivery):
                await self._on_delivery(event)
            elif isinstance(event, sgcs.ViewChange):
                await self._on_view(event)
            elif isinstance(event, sgcs.MemberSuspected):
                await self._signal("suspected", event.member)
            elif isinstance(event, sgcs.MemberBusy):
                await self._signal("busy", event.member)

    async def _on_view(self, change: sgcs.ViewChange) -> None:
        first = not self._view_ready.is_set()
        self._members = change.members
        self._view_ready.set()
        for claim in self._claims.on_view(change.members):
            self._decided(claim)
        if first:
            return
        for kind, nodes in (("joined", change.joined), ("left", change.left), ("failed", change.failed)):
            for node in nodes:
                await self._signal(kind, node)  # type: ignore[arg-type]

    async def _signal(self, kind: NodeEventKind, node: int) -> None:
        event = NodeEvent(kind, node, trio.current_time())
        for handle in list(self._handles):
            if handle.liveness and not handle.closed:
                await handle._send.send(event)

    async def _on_delivery(self, delivery: sgcs.Delivery) -> None:
        try:
            frame = codes.decode_frame_untrusted(delivery.payload)
            if frame.tcd >= codes.RESERVED_MIN:
                await self._on_control(frame, delivery.sender)
                return
        except DecodeError:
            self.statistics.dropped_undecodable += 1
            return
        if frame.target not in (0, self.me):
            self.statistics.dropped_not_for_us += 1
            return
        data = Data(frame.tcd, frame.data, delivery.sender, frame.priority)
        self.statistics.received += 1
        for handle in list(self._handles):
            if frame.tcd in handle.tcds and not handle.closed:
                await handle._send.send(data)

    async def _on_control(self, frame: codes.Frame, sender: int) -> None:
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
        else:
            raise DecodeError("field", f"unknown reserved code {frame.tcd}")

    def _decided(self, claim: PendingClaim) -> None:
        waiter = self._claim_waiters.get((claim.tcd, claim.nonce))
        if waiter is not None:
            waiter.result = claim
            waiter.done.set()

    async def _detach(self) -> None:
        for handle in list(self._handles):
            await handle.close()
        with trio.move_on_after(2.0):
            await self.flush()


@asynccontextmanager
async def attach(node: sgcs.NodeHandle, field: str, *, queue_size: int = 1_024,
                 send_queue: int = 10_000) -> AsyncIterator[Module]:
    """Attach a module to the data field ``field`` (an sgcs group in total order)
    for the duration of the block; leaving it detaches: exclusive codes are
    released, queued frames get up to 2 s to go out, and the group is left."""
    if type(queue_size) is not int or queue_size < 1 or type(send_queue) is not int or send_queue < 1:
        raise UsageError("queue_size and send_queue must be positive ints")
    async with node.join(field, order=sgcs.Order.TOTAL) as group, trio.open_nursery() as nursery:
        module = Module(group, queue_size=queue_size, send_queue=send_queue)
        nursery.start_soon(module._dispatch)
        nursery.start_soon(module._send_loop)
        await module._view_ready.wait()
        try:
            yield module
        finally:
            with trio.CancelScope(shield=True):
                await module._detach()
            nursery.cancel_scope.cancel()
