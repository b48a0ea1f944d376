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

* PUT(id, priority, body): append, unless that id was applied before (a
  resend after a rollback is applied once);
* GET(consumer, request, count): lease the next ``count`` messages (highest
  priority, then oldest) to ``consumer``;
* ACK(consumer, tags) / RELEASE(consumer, tags).

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
from collections import OrderedDict
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import trio

import sgcs
from sgcs.errors import DecodeError, UsageError

from ..tasks import background
from .store import MAX_BODY, PRIORITIES, Message, QueueStore, check_body, check_priority, check_queue_name

PUT, GET, ACK, RELEASE = 1, 2, 3, 4
_PUT = struct.Struct(">B16sB")
_GET = struct.Struct(">BQH")
_TAGS = struct.Struct(">BH")
_U64 = struct.Struct(">Q")
QUEUE = "q"
MAX_TAGS = 4_096


def _encode_tags(kind: int, tags: Sequence[int]) -> bytes:
    return _TAGS.pack(kind, len(tags)) + b"".join(_U64.pack(t) for t in tags)


def decode_op_untrusted(data: bytes) -> tuple[int, tuple[object, ...]]:
    """One operation, or ``DecodeError``."""
    if not data:
        raise DecodeError("length", "empty op")
    kind = data[0]
    if kind == PUT:
        if len(data) < _PUT.size or len(data) - _PUT.size > MAX_BODY:
            raise DecodeError("length", "put")
        _, msg_id, priority = _PUT.unpack_from(data)
        if priority >= PRIORITIES:
            raise DecodeError("field", f"priority {priority}")
        return PUT, (msg_id, priority, data[_PUT.size:])
    if kind == GET:
        if len(data) != _GET.size:
            raise DecodeError("length", "get")
        _, request, count = _GET.unpack(data)
        if not 1 <= count <= MAX_TAGS:
            raise DecodeError("field", f"count {count}")
        return GET, (request, count)
    if kind in (ACK, RELEASE):
        if len(data) < _TAGS.size:
            raise DecodeError("length", "tags")
        _, count = _TAGS.unpack_from(data)
        if count > MAX_TAGS or len(data) != _TAGS.size + 8 * count:
            raise DecodeError("length", "tags")
        return kind, tuple(_U64.unpack_from(data, _TAGS.size + 8 * i)[0] for i in range(count))
    raise DecodeError("type", str(kind))


class ReplicatedQueue:
    """One replica of a replicated queue; open it with ``open_replicated_queue``."""

    def __init__(self, group: sgcs.GroupHandle, name: str, *, dedup_window: int) -> None:
        self.group = group
        self.name = name
        self.me = group.node_id
        self.store = QueueStore(":memory:")
        self.store.bind(QUEUE)
        self.applied = 0
        self.dropped_undecodable = 0
        self.members: tuple[int, ...] = ()
        self._dedup: OrderedDict[bytes, None] = OrderedDict()
        self._dedup_window = dedup_window
        self._pending_puts: dict[bytes, tuple[bytes, trio.Event]] = {}
        self._gets: dict[int, tuple[trio.Event, list[Message]]] = {}
        self._requests = itertools.count(1)
        self._changed = trio.Event()
        self._view_ready = trio.Event()

    # ------------------------------------------------------------ client side

    async def put(self, body: bytes, priority: int = 0) -> bytes:
        """Replicate one message; returns its id once every replica holds it."""
        op = _PUT.pack(PUT, os.urandom(16), check_priority(priority)) + check_body(body)
        msg_id = op[1:17]
        done = trio.Event()
        self._pending_puts[msg_id] = (op, done)
        await self.group.send(op)
        await done.wait()
        return msg_id

    async def put_many(self, items: Sequence[tuple[bytes, int]]) -> list[bytes]:
        """Replicate several messages, pipelined; returns once all are held by every replica."""
        waits = []
        for body, priority in items:
            op = _PUT.pack(PUT, os.urandom(16), check_priority(priority)) + check_body(body)
            done = trio.Event()
            self._pending_puts[op[1:17]] = (op, done)
            waits.append((op[1:17], done))
        await self.group.send_many([self._pending_puts[msg_id][0] for msg_id, _ in waits])
        for _, done in waits:
            await done.wait()
        return [msg_id for msg_id, _ in waits]

    async def get_many(self, count: int = 1, *, timeout: float | None = None) -> list[Message]:
        """Lease up to ``count`` messages to this member, in queue order; waits up to
        ``timeout`` for one (None: forever)."""
        if type(count) is not int or not 1 <= count <= MAX_TAGS:
            raise UsageError(f"count must be an int from 1 to {MAX_TAGS}, got {count!r}")
        with trio.move_on_after(timeout if timeout is not None else float("inf")):
            while True:
                if self.store.info(QUEUE).ready:
                    request = next(self._requests)
                    done, box = trio.Event(), list[Message]()
                    self._gets[request] = (done, box)
                    try:
                        await self.group.send(_GET.pack(GET, request, count))
                        with trio.move_on_after(5):  # rolled back, or slow: ask again
                            await done.wait()
                    finally:
                        self._gets.pop(request, None)
                    if box:
                        return box
                await self._changed.wait()
        return []

    async def ack(self, messages: Sequence[Message]) -> None:
        tags = [m.tag for m in messages]
        for start in range(0, len(tags), MAX_TAGS):
            await self.group.send(_encode_tags(ACK, tags[start:start + MAX_TAGS]))

    async def release(self, messages: Sequence[Message]) -> None:
        tags = [m.tag for m in messages]
        for start in range(0, len(tags), MAX_TAGS):
            await self.group.send(_encode_tags(RELEASE, tags[start:start + MAX_TAGS]))

    _nursery: trio.Nursery

    def depth(self) -> int:
        info = self.store.info(QUEUE)
        return info.ready + info.leased

    # ------------------------------------------------------------ the replicated state machine

    async def _run(self) -> None:
        async for event in self.group:
            if isinstance(event, sgcs.Delivery):
                try:
                    kind, args = decode_op_untrusted(event.payload)
                except DecodeError:
                    self.dropped_undecodable += 1
                    continue
                self._apply(event.sender, kind, args)
            elif isinstance(event, sgcs.ViewChange):
                self.members = event.members
                self._view_ready.set()
                for member in (*event.left, *event.failed):
                    self.store.release_consumer(f"m:{member}")
                self._notify()
            elif isinstance(event, sgcs.Rollback) or (isinstance(event, sgcs.NotDelivered) and event.to is None):
                await self._resend_puts()  # one of ours may be among them

    def _apply(self, sender: int, kind: int, args: tuple[object, ...]) -> None:
        self.applied += 1
        if kind == PUT:
            msg_id, priority, body = args
            assert isinstance(msg_id, bytes) and isinstance(priority, int) and isinstance(body, bytes)
            if msg_id not in self._dedup:
                self._dedup[msg_id] = None
                if len(self._dedup) > self._dedup_window:
                    self._dedup.popitem(last=False)
                self.store.put_many(QUEUE, [(body, priority)], [msg_id])
            pending = self._pending_puts.pop(msg_id, None) if sender == self.me else None
            if pending is not None:
                pending[1].set()
        elif kind == GET:
            request, count = args
            assert isinstance(request, int) and isinstance(count, int)
            leased = self.store.get(QUEUE, f"m:{sender}", count)
            if sender == self.me and request in self._gets:
                done, box = self._gets[request]
                box.extend(leased)
                done.set()
            elif sender == self.me and leased:  # the asker stopped waiting: give them back
                self._nursery.start_soon(self.release, leased)
        else:
            tags = [t for t in args if isinstance(t, int)]
            if kind == ACK:
                self.store.ack(tags, f"m:{sender}")
            else:
                self.store.release(tags, f"m:{sender}")
        self._notify()

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
async def open_replicated_queue(node: sgcs.NodeHandle, name: str, *,
                                dedup_window: int = 1_000_000) -> AsyncIterator[ReplicatedQueue]:
    """Be a replica of the replicated queue ``name`` for the duration of the block."""
    check_queue_name(name)
    if type(dedup_window) is not int or dedup_window < 1:
        raise UsageError(f"dedup_window must be a positive int, got {dedup_window!r}")
    queue: ReplicatedQueue | None = None
    try:
        async with node.join(f"sgcs.rq.{name}", order=sgcs.Order.SAFE) as group, background() as nursery:
            queue = ReplicatedQueue(group, name, dedup_window=dedup_window)
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
