"""A queue replicated on the members of a group through ordered delivery
(beyond the message-queue paper; docs/queues.md).

Theory of operation
-------------------
State-machine replication: every replica keeps the queue in its own
``QueueStore`` and applies the same operations in the same order, so every
replica holds the same messages with the same tags. The operations are sgcs
multicasts in a group ``sgcs.rq.<name>`` in **safe** order (sgcs delivers a
message once every member of the view holds it) and therefore also in total
order:

* PUT(id, priority, expiry, body): append, unless that id was applied before
  (a resend after a rollback is applied once);
* GET(consumer, request, count, time, delivery limit): retire, then lease the
  next ``count`` messages (highest priority, then oldest) to ``consumer``;
* ACK(consumer, tags) / RELEASE(consumer, tags); PURGE: delete dead messages.

**Only the op decides.** A replica's own clock and configuration never do,
for wall clocks differ between members and a retirement made on one
replica's timer would make it diverge. A PUT carries its message's absolute
expiry (the putter's ``time.time()`` plus the TTL, in ms); a GET carries its
issuer's ``time.time()`` and applying it first retires (makes DEAD) the ready
messages whose expiry is not after that time, then leases: the same op gives
the same result everywhere. So the GET issuer's clock decides whether a
message is still alive; with skewed clocks a TTL is longer or shorter by the
skew, never different between replicas. A GET of 0 messages only retires
(``expire``). The delivery limit is counted as in ``QueueStore``: a lease
given back by RELEASE or by a view change counts as a delivery, and a message
given back at its limit is retired. Each GET carries its issuer's limit, and
the one in force is the last applied GET's: before the first GET nothing was
handed out, so nothing depended on it. Replicas opened with the same limit
(the intended use) simply apply it. Retired messages stay DEAD in the
replica's store (``info().dead``, ``dead_letters()``) until a PURGE.
Every op starts with a version byte (``OP_VERSION``); an op of another
version, like any that does not decode, is dropped and counted.

A view change is one more operation in the stream (virtual synchrony: every
replica installs it after the same messages): the leases of members that left
or failed are released at that point everywhere. The consumer is a member: its
``get`` multicasts GET and returns what its own replica leased to it.

**Acknowledged means replicated.** ``put`` returns when the replica of the
caller has applied its PUT; under safe order that happens only once every
member of the view holds the PUT, so a message whose ``put`` returned survives
the kill -9 of every replica but one. A PUT sent during a view change may come
back in a ``Rollback`` or a ``NotDelivered``; the replica then sends its
unapplied PUTs again (the id makes that idempotent). A GET not answered within
5 s is asked again.

Limits: a replica that restarts (or a member that joins later) has no state
transfer here, so it cannot catch up: run replicas from the start and replace
a failed one by starting a new queue. The set of applied ids kept for dedup is
bounded (``dedup_window``). Receive is at least once across a consumer's crash
(its leases go back to the queue).
"""

from __future__ import annotations

import itertools
import os
import struct
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Union

import trio

import sgcs
from sgcs.errors import DecodeError, UsageError

from ..tasks import background
from .store import (
    MAX_BODY,
    PRIORITIES,
    Message,
    QueueInfo,
    QueueStore,
    check_body,
    check_priority,
    check_queue_name,
    check_ttl,
)

OP_VERSION = 2
"""First byte of every op (version 1 had none, no TTL and no delivery limit)."""
PUT, GET, ACK, RELEASE, PURGE = 1, 2, 3, 4, 5
_HEAD = struct.Struct(">BB")
_PUT = struct.Struct(">BB16sBQ")
_GET = struct.Struct(">BBQHQI")
_TAGS = struct.Struct(">BBH")
_U64 = struct.Struct(">Q")
QUEUE = "q"
MAX_TAGS = 4_096
MAX_DELIVERY_LIMIT = 0xFFFF_FFFF
MAX_TTL = 10 * 365 * 86_400.0
"""Seconds; a TTL beyond is surely a mistake (the expiry travels as u64 milliseconds)."""


@dataclass(frozen=True, slots=True)
class Put:
    msg_id: bytes
    priority: int
    expires_ms: int
    """The sender's wall clock (ms since the epoch) plus the TTL; 0: no TTL."""
    body: bytes


@dataclass(frozen=True, slots=True)
class Get:
    request: int
    count: int
    """Messages to lease; 0: only retire (``ReplicatedQueue.expire``)."""
    now_ms: int
    """The issuer's wall clock (ms since the epoch): messages that expired by then are retired first."""
    delivery_limit: int
    """The issuer's delivery limit (0: none); in force from this GET on, at every replica."""


@dataclass(frozen=True, slots=True)
class Settle:
    release: bool
    tags: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Purge:
    pass


Op = Union[Put, Get, Settle, Purge]


def encode_op(op: Op) -> bytes:
    if isinstance(op, Put):
        return _PUT.pack(OP_VERSION, PUT, op.msg_id, op.priority, op.expires_ms) + op.body
    if isinstance(op, Get):
        return _GET.pack(OP_VERSION, GET, op.request, op.count, op.now_ms, op.delivery_limit)
    if isinstance(op, Settle):
        return (_TAGS.pack(OP_VERSION, RELEASE if op.release else ACK, len(op.tags))
                + b"".join(_U64.pack(t) for t in op.tags))
    return _HEAD.pack(OP_VERSION, PURGE)


def decode_op_untrusted(data: bytes) -> Op:
    """One operation, or ``DecodeError``."""
    data = bytes(data)
    if len(data) < _HEAD.size:
        raise DecodeError("length", "short op")
    version, kind = _HEAD.unpack_from(data)
    if version != OP_VERSION:
        raise DecodeError("version", str(version))
    if kind == PUT:
        if len(data) < _PUT.size or len(data) - _PUT.size > MAX_BODY:
            raise DecodeError("length", "put")
        _, _, msg_id, priority, expires_ms = _PUT.unpack_from(data)
        if priority >= PRIORITIES:
            raise DecodeError("field", f"priority {priority}")
        return Put(msg_id, priority, expires_ms, data[_PUT.size:])
    if kind == GET:
        if len(data) != _GET.size:
            raise DecodeError("length", "get")
        _, _, request, count, now_ms, limit = _GET.unpack(data)
        if count > MAX_TAGS:
            raise DecodeError("field", f"count {count}")
        return Get(request, count, now_ms, limit)
    if kind in (ACK, RELEASE):
        if len(data) < _TAGS.size:
            raise DecodeError("length", "tags")
        _, _, count = _TAGS.unpack_from(data)
        if count > MAX_TAGS or len(data) != _TAGS.size + 8 * count:
            raise DecodeError("length", "tags")
        return Settle(kind == RELEASE, tuple(_U64.unpack_from(data, _TAGS.size + 8 * i)[0] for i in range(count)))
    if kind == PURGE:
        if len(data) != _HEAD.size:
            raise DecodeError("length", "purge")
        return Purge()
    raise DecodeError("type", str(kind))


def _ms(seconds: float) -> int:
    return int(seconds * 1000)


class ReplicatedQueue:
    """One replica of a replicated queue; open it with ``open_replicated_queue``."""

    def __init__(self, group: sgcs.GroupHandle, name: str, *, dedup_window: int,
                 delivery_limit: int | None = None) -> None:
        self.group = group
        self.name = name
        self.me = group.node_id
        self.delivery_limit = delivery_limit
        """What this replica's GETs carry; the limit in force is the last applied GET's."""
        self.store = QueueStore(":memory:")
        self.store.bind(QUEUE)
        self.applied = 0
        self.dropped_undecodable = 0
        self.members: tuple[int, ...] = ()
        self.clock: Callable[[], float] = time.time
        """The wall clock this replica's PUTs and GETs carry (tests skew it)."""
        self._limit_in_force: int | None = None
        self._dedup: OrderedDict[bytes, None] = OrderedDict()
        self._dedup_window = dedup_window
        self._pending_puts: dict[bytes, tuple[bytes, trio.Event]] = {}
        self._gets: dict[int, tuple[trio.Event, list[Message]]] = {}
        self._requests = itertools.count(1)
        self._changed = trio.Event()
        self._view_ready = trio.Event()

    # ------------------------------------------------------------ client side

    def _put_op(self, body: bytes, priority: int, ttl: float | None) -> tuple[bytes, bytes]:
        """A PUT op and its id; the expiry is absolute (this member's clock), so
        every replica stores the same one."""
        ttl = check_ttl(ttl, MAX_TTL)
        expires_ms = 0 if ttl is None else max(1, _ms(self.clock() + ttl))
        msg_id = os.urandom(16)
        return encode_op(Put(msg_id, check_priority(priority), expires_ms, check_body(body))), msg_id

    async def put(self, body: bytes, priority: int = 0, *, ttl: float | None = None) -> bytes:
        """Replicate one message; returns its id once every replica holds it. ``ttl``:
        seconds after which, still unreceived, it is retired (see ``get_many``)."""
        op, msg_id = self._put_op(body, priority, ttl)
        done = trio.Event()
        self._pending_puts[msg_id] = (op, done)
        await self.group.send(op)
        await done.wait()
        return msg_id

    async def put_many(self, items: Sequence[tuple[bytes, int]], *, ttl: float | None = None) -> list[bytes]:
        """Replicate several messages, pipelined; returns once all are held by every replica."""
        waits = []
        for body, priority in items:
            op, msg_id = self._put_op(body, priority, ttl)
            done = trio.Event()
            self._pending_puts[msg_id] = (op, done)
            waits.append((msg_id, done))
        await self.group.send_many([self._pending_puts[msg_id][0] for msg_id, _ in waits])
        for _, done in waits:
            await done.wait()
        return [msg_id for msg_id, _ in waits]

    def _get_op(self, request: int, count: int) -> bytes:
        return encode_op(Get(request, count, _ms(self.clock()), self.delivery_limit or 0))

    async def get_many(self, count: int = 1, *, timeout: float | None = None) -> list[Message]:
        """Lease up to ``count`` messages to this member, in queue order; waits up to
        ``timeout`` for one (None: forever). Every replica first retires the messages
        whose TTL passed by this member's clock, as the GET carries it."""
        if type(count) is not int or not 1 <= count <= MAX_TAGS:
            raise UsageError(f"count must be an int from 1 to {MAX_TAGS}, got {count!r}")
        with trio.move_on_after(timeout if timeout is not None else float("inf")):
            while True:
                if self.store.info(QUEUE).ready:
                    request = next(self._requests)
                    done, box = trio.Event(), list[Message]()
                    self._gets[request] = (done, box)
                    try:
                        await self.group.send(self._get_op(request, count))
                        with trio.move_on_after(5):  # rolled back, or slow: ask again
                            await done.wait()
                    finally:
                        self._gets.pop(request, None)
                    if box:
                        return box
                await self._changed.wait()
        return []

    async def expire(self) -> None:
        """Have every replica retire the messages whose TTL passed by this member's
        clock, leasing nothing (a GET of 0); returns once this replica applied it."""
        while True:
            request = next(self._requests)
            done = trio.Event()
            self._gets[request] = (done, [])
            try:
                await self.group.send(self._get_op(request, 0))
                with trio.move_on_after(5):  # rolled back, or slow: ask again
                    await done.wait()
            finally:
                self._gets.pop(request, None)
            if done.is_set():
                return

    async def ack(self, messages: Sequence[Message]) -> None:
        await self._settle(messages, release=False)

    async def release(self, messages: Sequence[Message]) -> None:
        """Give messages back; each counts as a delivery toward the delivery limit."""
        await self._settle(messages, release=True)

    async def _settle(self, messages: Sequence[Message], *, release: bool) -> None:
        tags = [m.tag for m in messages]
        for start in range(0, len(tags), MAX_TAGS):
            await self.group.send(encode_op(Settle(release, tuple(tags[start:start + MAX_TAGS]))))

    async def purge_dead(self) -> None:
        """Delete the dead messages at every replica (at the same point of the stream)."""
        await self.group.send(encode_op(Purge()))

    _nursery: trio.Nursery

    def depth(self) -> int:
        info = self.store.info(QUEUE)
        return info.ready + info.leased

    def info(self) -> QueueInfo:
        """This replica's view of the queue: ready per priority, leased, and ``dead``
        (retired for their TTL or delivery limit, until ``purge_dead``)."""
        return self.store.info(QUEUE)

    def dead_letters(self) -> list[tuple[bytes, int, bytes]]:
        """The retired messages as (id, priority, body), in the order they were put."""
        return self.store.dead_messages(QUEUE)

    # ------------------------------------------------------------ the replicated state machine

    async def _run(self) -> None:
        async for event in self.group:
            if isinstance(event, sgcs.Delivery):
                try:
                    op = decode_op_untrusted(event.payload)
                except DecodeError:
                    self.dropped_undecodable += 1
                    continue
                self._apply(event.sender, op)
            elif isinstance(event, sgcs.ViewChange):
                self.members = event.members
                self._view_ready.set()
                for member in (*event.left, *event.failed):
                    self.store.release_consumer(f"m:{member}")  # counts as a delivery: may retire
                self._notify()
            elif isinstance(event, sgcs.Rollback) or (isinstance(event, sgcs.NotDelivered) and event.to is None):
                await self._resend_puts()  # one of ours may be among them

    def _apply(self, sender: int, op: Op) -> None:
        """Apply one op of the ordered stream. Only what the op carries may decide
        (never this replica's clock or configuration): that keeps replicas equal."""
        self.applied += 1
        if isinstance(op, Put):
            self._apply_put(sender, op)
        elif isinstance(op, Get):
            self._apply_get(sender, op)
        elif isinstance(op, Settle):
            if op.release:
                self.store.release(op.tags, f"m:{sender}")
            else:
                self.store.ack(op.tags, f"m:{sender}")
        else:
            self.store.purge_dead(QUEUE)
        self._notify()

    def _apply_put(self, sender: int, op: Put) -> None:
        if op.msg_id not in self._dedup:
            self._dedup[op.msg_id] = None
            if len(self._dedup) > self._dedup_window:
                self._dedup.popitem(last=False)
            expires_at = op.expires_ms / 1000 if op.expires_ms else None
            self.store.put_many(QUEUE, [(op.body, op.priority)], [op.msg_id], expires_at=expires_at)
        pending = self._pending_puts.pop(op.msg_id, None) if sender == self.me else None
        if pending is not None:
            pending[1].set()

    def _apply_get(self, sender: int, op: Get) -> None:
        limit = op.delivery_limit or None
        if limit != self._limit_in_force:
            # Every replica starts with none and changes it here, at the same point of
            # the stream; before the first GET nothing was handed out to count.
            self._limit_in_force = limit
            self.store.set_delivery_limit(QUEUE, limit)
        now = op.now_ms / 1000
        if op.count:
            leased = self.store.get(QUEUE, f"m:{sender}", op.count, now=now)
        else:
            self.store.expire_ttl(now)
            leased = []
        if sender == self.me and op.request in self._gets:
            done, box = self._gets[op.request]
            box.extend(leased)
            done.set()
        elif sender == self.me and leased:  # the asker stopped waiting: give them back
            self._nursery.start_soon(self.release, leased)

    def _notify(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def _resend_puts(self) -> None:
        # Resend every PUT not yet applied rather than only the one named: the
        # ids make it idempotent, and a PUT sent twice is applied once.
        ops = [op for op, _ in self._pending_puts.values()]
        if ops:
            await self.group.send_many(ops)


@asynccontextmanager
async def open_replicated_queue(node: sgcs.NodeHandle, name: str, *, dedup_window: int = 1_000_000,
                                delivery_limit: int | None = None) -> AsyncIterator[ReplicatedQueue]:
    """Be a replica of the replicated queue ``name`` for the duration of the block.

    ``delivery_limit``: a message handed out that many times and released (or
    whose consumer left) is retired, dead, instead of handed out again. Give
    every replica the same: each GET carries its issuer's limit, and the one
    in force at every replica is the last applied GET's."""
    check_queue_name(name)
    if type(dedup_window) is not int or dedup_window < 1:
        raise UsageError(f"dedup_window must be a positive int, got {dedup_window!r}")
    if delivery_limit is not None and (type(delivery_limit) is not int
                                       or not 1 <= delivery_limit <= MAX_DELIVERY_LIMIT):
        raise UsageError(f"delivery_limit must be a positive int or None, got {delivery_limit!r}")
    queue: ReplicatedQueue | None = None
    try:
        async with node.join(f"sgcs.rq.{name}", order=sgcs.Order.SAFE) as group, background() as nursery:
            queue = ReplicatedQueue(group, name, dedup_window=dedup_window, delivery_limit=delivery_limit)
            queue._nursery = nursery
            nursery.start_soon(queue._run)
            await queue._view_ready.wait()
            try:
                yield queue
            finally:
                nursery.cancel_scope.cancel()
    finally:
        if queue is not None:  # closed once its task is gone, not under it
            queue.store.close()
