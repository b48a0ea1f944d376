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

**Primary component** (Amir's rule for replication over a group
communication system). ``replicas`` is the size of the replica set; a view
holding more than half of it is primary, and only there do ops apply. In any
other view every op is refused at every member of it (the same decision
everywhere: it depends on the view alone), and the writer gets
``NotPrimary``, so a minority never acknowledges a write. A view of a
majority is primary only once its HELLOs show that it holds a majority of
the last primary's members that still hold its state, or every replica
(``_why_not_primary``): a restarted replica holds nothing, so the first
primary of fresh replicas needs the whole replica set (a restarted replica
cannot tell a first start from a lost history). A primary view that settled
only in a transitional view (``Hello.tentative``), or that a replica saw
decided and left before it settled (``Hello.attempt``), may or may not hold
on the other side: the next primary needs all of its members.

**State transfer.** A view change is one more point in the stream (virtual
synchrony: the members that move together deliver the same ops before it).
In every primary view ops first wait: each replica multicasts HELLO(view, generation, applied, digest), where ``generation``
counts the primary views its state went through and ``digest`` chains every
op it applied. Once all are delivered (the same point in every stream) the
replica with the highest (generation, applied), lowest id on ties, is the
provider. If every replica's standing equals the provider's, that is the
settle point. Otherwise the provider snapshots its state there (its SQLite
image, the dedup ids, the op count, the digest) and multicasts it in STATE
chunks, and the delivery of the last chunk is the settle point, for every
replica: the ones behind load the snapshot there, and none, the provider
included, applies an op of this view before it. (The provider applying at
once acknowledged writes that the others, still fetching when the view
changed, never held: nemesis, queue workload, seed 1581192924.) At the
settle point every replica applies the ops held since the view began. The
leases of consumers not in the view or behind (restarted, back from a
minority) go back there. A view that changes before it settles applied
nothing it held: the writers send their ops again.

**Transitional views** (Amir's "yellow" actions). A transitional view says
that the ops delivered until the next view reach only its members: the other
members of the view need not have them. Whether another member applied an op
in the regular view, or whether one side's ops will count, is unknown there.
So ops go on applying (the state machine does not stop: every member of the
transitional view applies the same ones), but no write of ours delivered there
is decided: its result is kept, and the next primary view's settle point
decides it. Every member of the old primary view ends with a state that
extends everything any member applied in the regular view (safe order: an op
one member delivered there, every member holds, and delivers in its
transitional view at the latest), so the provider chosen by (generation,
applied) loses no acknowledged write; two sides that applied different ops
after the split have different digests, and the one behind takes the
provider's state. A write whose result we kept is then acknowledged if the
settled state holds it (a PUT's id, a request's id: both are remembered),
and sent again otherwise. (Refusing every op of a minority transitional view
let one member apply an ACK in the regular view while the two others dropped
it, and the next primary handed the message out again: nemesis, queue
workload, seed 1581192924.)

**Acknowledged means replicated.** ``put`` returns when the replica of the
caller has applied its PUT; under safe order that happens only once every
member of the view holds the PUT, so a message whose ``put`` returned survives
the kill -9 of every replica but one. Every write (PUT, GET, ACK, RELEASE,
PURGE) waits until the stream decides it; one that comes back in a
``Rollback`` or a ``NotDelivered``, or that a view change caught unapplied,
is sent again (a PUT's id and the request ids make that idempotent).

**Durable replicas** (``path``; ``replica_disk``). Each op commits in one
SQLite transaction with the replica's standing and the ids it remembers, and
a snapshot loads with its settle point's changes; nothing is acknowledged
before its commit. A replica restarted from its file holds a prefix of its
stream, but the ops it had received and not applied died with it, and
another replica may have applied and acknowledged them: its state is
tentative, like that of a replica left out alone.

Limits: the set of applied ids kept for dedup is bounded (``dedup_window``).
Receive is at least once across a consumer's crash (its leases go back to the
queue). A write refused with ``NotPrimary`` after a partition began may still
have been applied by the primary side (like an unconfirmed publish).
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import struct
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from enum import Enum
from typing import Union

import trio

import sgcs
from sgcs.errors import DecodeError, SgcsError, UsageError

from ..tasks import background
from . import replica_disk
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

OP_VERSION = 5
"""First byte of every op (version 1 had none, no TTL and no delivery limit; version 2
had no primary component, no state transfer and no request ids on ACK, RELEASE, PURGE;
version 3 had no digest and no last primary in HELLO; version 4 no tentative flag in HELLO)."""
PUT, GET, ACK, RELEASE, PURGE, HELLO, STATE = 1, 2, 3, 4, 5, 6, 7
_HEAD = struct.Struct(">BB")
_PUT = struct.Struct(">BB16sBQ")
_GET = struct.Struct(">BBQHQI")
_TAGS = struct.Struct(">BBQH")
_PURGE = struct.Struct(">BBQ")
_HELLO = struct.Struct(">BBQQQQ?QHH")
_STATE = struct.Struct(">BBQII")
_U64 = struct.Struct(">Q")
QUEUE = "q"
MAX_TAGS = 4_096
MAX_DELIVERY_LIMIT = 0xFFFF_FFFF
MAX_TTL = 10 * 365 * 86_400.0
"""Seconds; a TTL beyond is surely a mistake (the expiry travels as u64 milliseconds)."""
STATE_CHUNK = 256 * 1024
"""Bytes of snapshot per STATE op."""
MAX_STATE_CHUNKS = 1 << 16


class NotPrimary(SgcsError):
    """This replica is not in a primary component (a view holding a majority of
    the ``replicas`` configured), so the write was not acknowledged. One sent
    just before a partition may still have been applied by the primary side."""


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
    request: int = 0


@dataclass(frozen=True, slots=True)
class Purge:
    request: int = 0


@dataclass(frozen=True, slots=True)
class Hello:
    """A replica's standing at the start of a primary view: how many primary
    views its state has seen (``generation``) and how many ops it applied."""
    view: int
    generation: int
    applied: int
    digest: int
    """The chain of every op its state applied (``_chain``): equal standing, equal state."""
    primary: tuple[int, ...] = ()
    """The members of the primary view in which its state reached ``generation``."""
    tentative: bool = False
    """That primary view settled here in a transitional view (its other members may never have
    settled it), or this replica was left out of its end alone (it may lack ops the others applied)."""
    attempt_generation: int = 0
    """A primary view this replica saw decided (every HELLO delivered) but left
    before its settle point: others may have settled it at this generation (0: none)."""
    attempt: tuple[int, ...] = ()
    """That view's members."""

    @property
    def standing(self) -> tuple[int, int, int]:
        return self.generation, self.applied, self.digest

    def rank(self, member: int) -> tuple[int, bool, int, int]:
        """The provider is the replica of the highest rank: the most primary views,
        a settled one before a tentative one of the same generation, the most ops, the lowest id."""
        return self.generation, not self.tentative, self.applied, -member


@dataclass(frozen=True, slots=True)
class State:
    """One chunk of the provider's snapshot for the view named by ``view``."""
    view: int
    index: int
    total: int
    chunk: bytes


Op = Union[Put, Get, Settle, Purge, Hello, State]


def encode_op(op: Op) -> bytes:
    if isinstance(op, Put):
        return _PUT.pack(OP_VERSION, PUT, op.msg_id, op.priority, op.expires_ms) + op.body
    if isinstance(op, Get):
        return _GET.pack(OP_VERSION, GET, op.request, op.count, op.now_ms, op.delivery_limit)
    if isinstance(op, Settle):
        return (_TAGS.pack(OP_VERSION, RELEASE if op.release else ACK, op.request, len(op.tags))
                + b"".join(_U64.pack(t) for t in op.tags))
    if isinstance(op, Hello):
        return (_HELLO.pack(OP_VERSION, HELLO, op.view, op.generation, op.applied, op.digest, op.tentative,
                            op.attempt_generation, len(op.primary), len(op.attempt))
                + b"".join(_U64.pack(m) for m in op.primary + op.attempt))
    if isinstance(op, State):
        return _STATE.pack(OP_VERSION, STATE, op.view, op.index, op.total) + op.chunk
    return _PURGE.pack(OP_VERSION, PURGE, op.request)


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
        _, _, request, count = _TAGS.unpack_from(data)
        if count > MAX_TAGS or len(data) != _TAGS.size + 8 * count:
            raise DecodeError("length", "tags")
        tags = tuple(_U64.unpack_from(data, _TAGS.size + 8 * i)[0] for i in range(count))
        return Settle(kind == RELEASE, tags, request)
    if kind == PURGE:
        if len(data) != _PURGE.size:
            raise DecodeError("length", "purge")
        return Purge(_PURGE.unpack(data)[2])
    if kind == HELLO:
        if len(data) < _HELLO.size:
            raise DecodeError("length", "hello")
        _, _, view, generation, applied, digest, tentative, attempt_generation, count, attempted = \
            _HELLO.unpack_from(data)
        if len(data) != _HELLO.size + 8 * (count + attempted):
            raise DecodeError("length", "hello")
        ids = [_U64.unpack_from(data, _HELLO.size + 8 * i)[0] for i in range(count + attempted)]
        return Hello(view, generation, applied, digest, tuple(ids[:count]), tentative, attempt_generation,
                     tuple(ids[count:]))
    if kind == STATE:
        if len(data) < _STATE.size or len(data) - _STATE.size > STATE_CHUNK:
            raise DecodeError("length", "state")
        _, _, view, index, total = _STATE.unpack_from(data)
        if not index < total <= MAX_STATE_CHUNKS:
            raise DecodeError("field", f"chunk {index} of {total}")
        return State(view, index, total, data[_STATE.size:])
    raise DecodeError("type", str(kind))


def _names(members: Iterable[int]) -> str:
    return ", ".join(str(m) for m in sorted(members))


def _ms(seconds: float) -> int:
    return int(seconds * 1000)


def _view_token(view_id: str) -> int:
    """64 bits naming a view in HELLO and STATE ops (a stale one is ignored)."""
    return int.from_bytes(hashlib.blake2b(view_id.encode(), digest_size=8).digest(), "big")


_SNAPSHOT = struct.Struct(">QIIQ")
"""Snapshot head: ops applied, delivery limit in force (0: none), dedup ids, digest, then
the ids (16 bytes each) and the store's SQLite image."""


def _chain(digest: int, sender: int, op: bytes) -> int:
    """The digest after applying ``op`` from ``sender``: replicas that applied the
    same ops in the same order have the same one."""
    data = digest.to_bytes(8, "big") + sender.to_bytes(8, "big") + op
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big")


def _request_id(sender: int, request: int) -> bytes:
    """A request op's id in the dedup window (16 bytes, like a PUT's random id)."""
    return hashlib.blake2b(_U64.pack(sender) + _U64.pack(request), digest_size=16, person=b"sgcs.rq.request").digest()


class Standing(Enum):
    """Where a replica stands in its current view (one at a time)."""
    MINORITY = "minority"
    """Not a primary view: every write is refused (``NotPrimary``)."""
    SYNCING = "syncing"
    """A primary view whose replicas compare their states (HELLOs); ops wait."""
    FETCHING = "fetching"
    """The provider sends its snapshot (STATE chunks): ops wait for its last chunk,
    where the replicas behind load it."""
    SETTLED = "settled"
    """Ops apply as they are delivered."""


@dataclass(eq=False)
class _Pending:
    """One of this replica's own writes, until the stream decides it."""
    op: bytes
    done: trio.Event = field(default_factory=trio.Event)
    leased: list[Message] = field(default_factory=list)
    tags: list[int] = field(default_factory=list)
    """What an ACK or RELEASE settled: the tags still leased to us when it applied."""
    error: SgcsError | None = None
    abandoned: bool = False
    """Its caller stopped waiting: what it leases goes back."""
    kept: bool = False
    """Applied in a transitional view: ``leased`` and ``tags`` are kept until a primary view settles."""

    def finish(self, error: SgcsError | None = None) -> None:
        self.error = error
        self.done.set()


class ReplicatedQueue:
    """One replica of a replicated queue; open it with ``open_replicated_queue``."""

    def __init__(self, group: sgcs.GroupHandle, name: str, *, replicas: int, dedup_window: int,
                 delivery_limit: int | None = None, path: str | os.PathLike[str] | None = None,
                 fsync: str = "normal") -> None:
        self.group = group
        self.name = name
        self.me = group.node_id
        self.replicas = replicas
        """The size of the replica set: a view is primary when it holds more than half."""
        self.delivery_limit = delivery_limit
        """What this replica's GETs carry; the limit in force is the last applied GET's."""
        self.durable = path is not None
        """The replica keeps its state in a file (``path``) and survives a restart."""
        # Its leases are replicated state: only ops of the stream give them back.
        self.store = QueueStore(":memory:" if path is None else path, fsync=fsync, release_leases=False)
        self.store.bind(QUEUE)
        self.applied = 0
        self.digest = 0
        """The chain of every op applied (``_chain``)."""
        self.generation = 0
        """Primary views this replica's state went through (a snapshot's receiver takes the provider's)."""
        self.primary: tuple[int, ...] = ()
        """The members of the primary view in which the state reached ``generation`` (none yet: ())."""
        self.tentative = False
        """That primary view settled here in a transitional view (``Hello.tentative``)."""
        self.attempt: tuple[int, tuple[int, ...]] = (0, ())
        """A primary view decided here and left before its settle point (``Hello.attempt``): (generation, members)."""
        self.standing = Standing.MINORITY
        self._why_not = f"this replica's view holds 1 of {replicas} replicas, not a majority"
        """Why this view is not primary (``NotPrimary``'s message)."""
        self.dropped_undecodable = 0
        self.refused = 0
        """Ops delivered in a minority view, not applied."""
        self.transfers = 0
        """Snapshots this replica loaded."""
        self.members: tuple[int, ...] = ()
        self.view_id = ""
        self.transitional = False
        """A transitional view was delivered in this view: our writes applied now are kept, not decided."""
        self.clock: Callable[[], float] = time.time
        """The wall clock this replica's PUTs and GETs carry (tests skew it)."""
        self._limit_in_force: int | None = None
        self._dedup: OrderedDict[bytes, None] = OrderedDict()
        self._dedup_window = dedup_window
        self._pending: dict[bytes, _Pending] = {}
        self._sent: dict[int, bytes] = {}
        """Seq of our multicasts still undecided -> the pending write they carry."""
        self._changed = trio.Event()
        self._view_ready = trio.Event()
        self._view = 0
        self._hellos: dict[int, Hello] = {}
        self._buffer: list[tuple[int, Op, bytes]] = []
        self._provider = 0
        self._behind: frozenset[int] = frozenset()
        self._next_generation = 0
        self._chunks: dict[int, bytes] = {}
        self._outgoing: tuple[int, list[bytes]] | None = None
        """As provider: the view and the STATE ops we send, until we deliver each."""
        self._resend_later: list[bytes] = []
        """Our writes to send again once ops apply in this view."""
        self._orphans: list[int] = []
        """Tags leased to us by a kept GET whose caller got ``NotPrimary``: given back at the next settle point."""
        self._in_batch = False
        """A ``_durably`` block is open: the ones inside it commit with it."""
        self._puts: list[tuple[bytes, int, bytes, float | None]] = []
        """PUTs applied and not yet inserted into the store (``_flush_puts``)."""
        self._unsaved_ids: list[bytes] = []
        """Dedup ids remembered since the last save (durable replicas)."""
        self._ids_remembered = 0
        """Dedup ids ever remembered: the number of the newest in the file."""
        self.recovered = False
        """A durable replica that began from the state its file held."""
        if self.durable:
            self._recover()

    # ------------------------------------------------------------ durable replicas

    def _recover(self) -> None:
        """Begin from the state the file holds, if any. It is a prefix of what
        the replica applied, but ops it had received and not yet applied died
        with it (another replica may have applied and acknowledged them), so
        its state is tentative: like a replica left out alone, it goes on only
        with replicas that may hold more, or with the whole last primary view.
        What it leased to itself went to a consumer that died with it: given
        back at the next settle point."""
        with self.store.batch() as db:
            replica_disk.create(db)
            try:
                record, ids = replica_disk.load(db, self.name)
            except (ValueError, struct.error) as exc:
                raise UsageError(f"replicated queue {self.name}: cannot use {self.store.path}: {exc}") from None
        if record is None:
            with self._durably():
                pass  # the file names its queue from the start
            return
        self.applied, self.digest, self.generation = record.applied, record.digest, record.generation
        self._limit_in_force = record.limit or None
        self.primary, self.attempt = record.primary, (record.attempt_generation, record.attempt)
        self.tentative = record.applied > 0 or record.generation > 0
        self._dedup = OrderedDict.fromkeys(ids)
        self._ids_remembered = len(ids)
        self._orphans = self.store.leases_of(QUEUE, f"m:{self.me}")
        self.recovered = True
        with self._durably():
            pass

    def _record(self) -> replica_disk.Record:
        return replica_disk.Record(self.applied, self.digest, self.generation, self._limit_in_force or 0,
                                   self.tentative, self.primary, *self.attempt)

    @contextmanager
    def _durably(self, replaced_ids: bool = False) -> Iterator[None]:
        """The changes made inside, with the replica's standing and the dedup
        ids remembered meanwhile, commit in one transaction (durable replicas;
        a memory replica just runs the block). ``replaced_ids``: a snapshot
        replaced the dedup window. Nothing is acknowledged before the commit."""
        if self._in_batch:
            yield  # inside another: it commits the changes, and saves the standing at its end
            return
        self._in_batch = True
        try:
            if not self.durable:
                yield
                self._flush_puts()
                return
            with self.store.batch() as db:
                yield
                self._flush_puts()
                if replaced_ids:
                    replica_disk.replace_ids(db, list(self._dedup))
                    self._ids_remembered, self._unsaved_ids = len(self._dedup), []
                replica_disk.save(db, self.name, self._record(), self._unsaved_ids, self._ids_remembered,
                                  self._dedup_window)
                self._unsaved_ids = []
        finally:
            self._in_batch = False

    # ------------------------------------------------------------ client side

    def _check_writable(self) -> None:
        if self.standing is Standing.MINORITY:
            raise NotPrimary(f"replicated queue {self.name}: {self._why_not}; the write was not sent")

    async def _submit(self, key: bytes, op: bytes) -> _Pending:
        """Send one write and wait until the stream decides it (applied, or refused)."""
        self._check_writable()
        pending = self._pending[key] = _Pending(op)
        await self._send([key])
        try:
            await pending.done.wait()
        finally:
            pending.abandoned = True
        if pending.error is not None:
            raise pending.error
        return pending

    async def _send(self, keys: list[bytes]) -> None:
        ops = [self._pending[k].op for k in keys if k in self._pending]
        ids = await self.group.send_many(ops) if len(ops) > 1 else [await self.group.send(ops[0])] if ops else []
        for key, message in zip(keys, ids):
            if message is not None:
                self._sent[message.seq] = key

    def _request(self) -> tuple[bytes, int]:
        """A fresh request id. Random, not counted: the replicated dedup window
        remembers requests, and a restarted replica's count would begin again."""
        request = int.from_bytes(os.urandom(8), "big")
        return b"r" + _U64.pack(request), request

    def _put_op(self, body: bytes, priority: int, ttl: float | None) -> tuple[bytes, bytes]:
        """A PUT op and its id; the expiry is absolute (this member's clock), so
        every replica stores the same one."""
        ttl = check_ttl(ttl, MAX_TTL)
        expires_ms = 0 if ttl is None else max(1, _ms(self.clock() + ttl))
        msg_id = os.urandom(16)
        return encode_op(Put(msg_id, check_priority(priority), expires_ms, check_body(body))), msg_id

    async def put(self, body: bytes, priority: int = 0, *, ttl: float | None = None) -> bytes:
        """Replicate one message; returns its id once every replica holds it. ``ttl``:
        seconds after which, still unreceived, it is retired (see ``get_many``).
        Raises ``NotPrimary`` in a minority view."""
        op, msg_id = self._put_op(body, priority, ttl)
        await self._submit(msg_id, op)
        return msg_id

    async def put_many(self, items: Sequence[tuple[bytes, int]], *, ttl: float | None = None) -> list[bytes]:
        """Replicate several messages, pipelined; returns once all are held by every replica."""
        self._check_writable()
        keys, waits = [], []
        for body, priority in items:
            op, msg_id = self._put_op(body, priority, ttl)
            waits.append(self._pending.setdefault(msg_id, _Pending(op)))
            keys.append(msg_id)
        await self._send(keys)
        for pending in waits:  # the objects, not the keys: a minority view clears the table
            await pending.done.wait()
            if pending.error is not None:
                raise pending.error
        return keys

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
                self._check_writable()
                if self.standing is Standing.SETTLED and self.store.info(QUEUE).ready:
                    key, request = self._request()
                    pending = await self._submit(key, self._get_op(request, count))
                    if pending.leased:
                        return pending.leased
                else:
                    await self._changed.wait()
        return []

    async def expire(self) -> None:
        """Have every replica retire the messages whose TTL passed by this member's
        clock, leasing nothing (a GET of 0); returns once this replica applied it."""
        key, request = self._request()
        await self._submit(key, self._get_op(request, 0))

    async def ack(self, messages: Sequence[Message]) -> list[Message]:
        """Acknowledge leased messages (removed at every replica); returns once
        this replica applied it, with those acknowledged. A message missing
        there was no longer leased to this member (it was excluded meanwhile,
        e.g. in a partition, and its leases went back to the queue): it will
        be handed out again, so whatever was done for it may be done twice."""
        return await self._settle(messages, release=False)

    async def release(self, messages: Sequence[Message]) -> list[Message]:
        """Give messages back; each counts as a delivery toward the delivery limit.
        Returns those released (see ``ack``)."""
        return await self._settle(messages, release=True)

    async def _settle(self, messages: Sequence[Message], *, release: bool) -> list[Message]:
        by_tag = {m.tag: m for m in messages}
        done: list[Message] = []
        tags = list(by_tag)
        for start in range(0, len(tags), MAX_TAGS):
            key, request = self._request()
            pending = await self._submit(key, encode_op(Settle(release, tuple(tags[start:start + MAX_TAGS]),
                                                               request)))
            done += [by_tag[tag] for tag in pending.tags]
        return done

    async def purge_dead(self) -> None:
        """Delete the dead messages at every replica (at the same point of the stream)."""
        key, request = self._request()
        await self._submit(key, encode_op(Purge(request)))

    _nursery: trio.Nursery

    @property
    def writable(self) -> bool:
        """Whether this replica is in a primary view whose state is settled (writes apply at once)."""
        return self.standing is Standing.SETTLED

    async def wait_writable(self) -> None:
        """Wait until this replica is in a primary view with its state settled: at
        start-up, until a majority of the replicas have met (writes before raise
        ``NotPrimary``); after a partition, until it is back in the majority."""
        while self.standing is not Standing.SETTLED:
            await self._changed.wait()

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

    # ------------------------------------------------------------ events

    async def _run(self) -> None:
        while True:
            try:
                events = await self.group.receive_many()
            except trio.EndOfChannel:
                return
            self._on_events(events)

    def _on_events(self, events: list[sgcs.Event]) -> None:
        """Handle the events that were queued together in one transaction (a
        group commit, for durable replicas). Nothing is acknowledged before it
        commits: a caller woken by an op's result runs only once this task
        yields. The last STATE chunk loads a snapshot, which SQLite attaches
        outside any transaction: STATE ops are handled alone."""
        batch: list[sgcs.Event] = []
        for event in events:
            if isinstance(event, sgcs.Delivery) and event.payload[1:2] == bytes([STATE]):
                self._on_batch(batch)
                batch = []
                self._on_event(event)
            else:
                batch.append(event)
        self._on_batch(batch)

    def _on_batch(self, events: list[sgcs.Event]) -> None:
        if events:
            with self._durably():
                for event in events:
                    self._on_event(event)

    def _on_event(self, event: sgcs.Event) -> None:
        if isinstance(event, sgcs.Delivery):
            try:
                op = decode_op_untrusted(event.payload)
            except DecodeError:
                self.dropped_undecodable += 1
                return
            if event.sender == self.me:
                self._sent.pop(event.seq, None)
            self._on_op(event.sender, op, bytes(event.payload))
        elif isinstance(event, sgcs.ViewChange):
            self._on_view(event)
        elif isinstance(event, sgcs.TransitionalView):
            self._on_transitional(event)
        elif isinstance(event, sgcs.Rollback):
            self._retry([seq for sender, seq in event.messages if sender == self.me])
        elif isinstance(event, sgcs.NotDelivered) and event.to is None:
            self._retry([event.message.seq])

    def _on_op(self, sender: int, op: Op, raw: bytes) -> None:
        if isinstance(op, Hello):
            self._on_hello(sender, op)
        elif isinstance(op, State):
            self._on_state(sender, op)
        elif self.standing is Standing.SETTLED:
            self._apply(sender, op, raw)
        elif self.standing is Standing.MINORITY:
            self.refused += 1
            self._finish_own(sender, op, NotPrimary(
                f"replicated queue {self.name}: delivered in a view of {len(self.members)} of {self.replicas} "
                f"replicas, not a majority; not applied"))
        else:
            self._buffer.append((sender, op, raw))

    @staticmethod
    def _key_of(op: Op) -> bytes | None:
        if isinstance(op, Put):
            return op.msg_id
        if isinstance(op, (Get, Settle, Purge)):
            return b"r" + _U64.pack(op.request)
        return None

    def _finish_own(self, sender: int, op: Op, error: SgcsError | None, leased: list[Message] | None = None,
                    settled: list[int] | None = None) -> None:
        key = self._key_of(op) if sender == self.me else None
        pending = self._pending.get(key) if key is not None else None
        if pending is None or key is None:
            if leased:  # the asker stopped waiting (or never did): give them back
                self._nursery.start_soon(self._give_back, leased)
            return
        if self.transitional and error is None:
            pending.kept, pending.leased, pending.tags = True, list(leased or []), list(settled or [])
            return  # decided where the next primary view settles (``_decide_kept``)
        del self._pending[key]
        if leased:
            if pending.abandoned and error is None:
                self._nursery.start_soon(self._give_back, leased)
            pending.leased.extend(leased)
        pending.tags = settled or []
        pending.finish(error)

    async def _give_back(self, leased: list[Message]) -> None:
        """Release leases nobody waits for. In a minority view it cannot: the
        primary releases them when it excludes this member."""
        try:
            await self.release(leased)
        except NotPrimary:
            pass

    def _retry(self, seqs: list[int]) -> None:
        """Our multicasts that came back (rolled back, not delivered): send again
        what they carried, now if ops apply, else at the next settle point."""
        keys = [self._sent.pop(seq) for seq in seqs if seq in self._sent]
        if self._outgoing is not None and self._outgoing[0] == self._view:
            self._nursery.start_soon(self._send_raw, [op for op in self._outgoing[1] if op])
        if self.standing is Standing.SYNCING and self.me not in self._hellos:
            self._nursery.start_soon(self._send_raw, [self._hello()])
        if keys and self.standing is not Standing.MINORITY:
            self._nursery.start_soon(self._send, keys)

    async def _send_raw(self, ops: list[bytes]) -> None:
        for op in ops:
            await self.group.send(op)

    # ------------------------------------------------------------ views, primary component, state transfer

    def _on_view(self, event: sgcs.ViewChange) -> None:
        """A view change. A view holding a majority of the replicas is primary.
        Its replicas that all moved together from one settled primary view hold
        the same state and go on at once; otherwise each tells its standing
        (HELLO) and, once all are heard, the one furthest on provides its
        snapshot to those behind (Amir's primary component, state by transfer)."""
        if self.standing is Standing.SETTLED and event.members == (self.me,) and len(self.members) > 1:
            with self._durably():
                self.tentative = True  # alone now: as when left out alone (``_on_transitional``)
        self.transitional = False
        self.members, self.view_id = event.members, event.view_id
        self._view = _view_token(event.view_id)
        self._view_ready.set()
        self._hellos, self._chunks, self._outgoing = {}, {}, None
        # Ops buffered in a view that never settled were applied by no member
        # that moved with us: ours go out again once ops apply.
        resend = [k for k in (self._key_of(op) for sender, op, _ in self._buffer if sender == self.me)
                  if k is not None]
        self._buffer = []
        if 2 * len(event.members) <= self.replicas:
            self._enter_minority(f"this replica's view holds {len(event.members)} of {self.replicas} replicas, "
                                 "not a majority")
            return
        # Every primary view begins with the HELLOs, even when its members all
        # come from one primary: one of them may not have settled there (it was
        # still fetching), and going on at once left a primary whose state only
        # a minority of the last one held (nemesis, --outage, seed 1801133701).
        self.standing = Standing.SYNCING
        self._resend_later = resend
        self._nursery.start_soon(self._send_raw, [self._hello()])
        self._notify()

    def _on_transitional(self, event: sgcs.TransitionalView) -> None:
        """The deliveries up to the next view are among ``event.members`` only
        (extended virtual synchrony): ops go on applying, but our writes among
        them are kept, not decided, until a primary view settles (module
        docstring, Transitional views)."""
        self.transitional = True
        if self.standing is Standing.SETTLED and set(event.members) == {self.me} and len(self.members) > 1:
            # Left out alone, we deliver only our own messages from here: ops
            # the others applied in the regular view (safe order: we held
            # them) may never apply here, so our state may lack an
            # acknowledged write. It goes on only as a tentative one.
            with self._durably():
                self.tentative = True

    def _enter_minority(self, why: str) -> None:
        self.standing, self._why_not = Standing.MINORITY, why
        for pending in self._pending.values():
            if pending.kept and pending.leased:
                self._orphans += [m.tag for m in pending.leased]
            pending.finish(NotPrimary(f"replicated queue {self.name}: {why}"
                                      + ("; the write may have been applied" if pending.kept else "")))
        self._pending, self._sent, self._buffer = {}, {}, []
        self._notify()

    def _hello(self) -> bytes:
        return encode_op(Hello(self._view, self.generation, self.applied, self.digest, self.primary,
                               self.tentative, *self.attempt))

    def _on_hello(self, sender: int, hello: Hello) -> None:
        if self.standing is not Standing.SYNCING or hello.view != self._view or sender not in self.members:
            return
        self._hellos[sender] = hello
        if len(self._hellos) < len(self.members):
            return
        # The settle point: the same place in every member's stream.
        provider, best = max(self._hellos.items(), key=lambda kv: kv[1].rank(kv[0]))
        why = self._why_not_primary(best)
        if why is not None:
            self._enter_minority(why)
            return
        self._provider = provider
        self._behind = frozenset(m for m, h in self._hellos.items() if h.standing != best.standing)
        self._next_generation = best.generation + 1
        with self._durably():
            self.attempt = (self._next_generation, self.members)  # until we settle it
        if not self._behind:
            self._become_settled(self._behind)
            return
        self.standing = Standing.FETCHING  # all of us: the last STATE chunk is the settle point
        if self.me == provider:
            image = self._snapshot()
            chunks = [image[i:i + STATE_CHUNK] for i in range(0, len(image), STATE_CHUNK)] or [b""]
            ops = [encode_op(State(self._view, i, len(chunks), c)) for i, c in enumerate(chunks)]
            self._outgoing = (self._view, ops)
            self._nursery.start_soon(self._send_raw, list(ops))

    def _why_not_primary(self, best: Hello) -> str | None:
        """Amir's dynamic linear voting, for replicas that keep their state in
        memory. With every replica here, the best state that survived is the
        one to go on from: nothing newer can be heard from anyone. Otherwise:

        * nobody here holds a primary's state (every replica is new, or
          restarted): only the whole replica set may begin, for a restarted
          replica cannot tell a first start from a lost history (three of
          five replicas, all restarted, once began afresh while the two
          others held the queue, and every write of that fresh start was lost
          when the five met: nemesis, queue workload, seed 1581192924);
        * the best state is tentative (``Hello.tentative``): it settled in a
          transitional view, or its replica was left out alone, or it is a
          durable replica's state after a restart (ops it held but had not
          applied died with it, and others may have applied them). Say it
          settled in a transitional view:
          the members of that primary on the other side may never have settled
          it and may have gone on from the state before, so all of them must
          be here (a side of two settled while the three others went on and
          acknowledged writes, and the two's higher generation won the next
          merge: same run);
        * one of us saw a primary view decided, of a higher generation than
          the best state here, and left it before its settle point: others may
          have settled it, so all of its members must be here (two replicas
          settled a view of five in a transitional view while the three
          others, who had seen it decided, went on from the state before);
        * else a majority of the members of the last primary view any of us
          knows (``best.primary``) *that still hold its state* must be here:
          three of five replicas, two of them restarted, once formed a primary
          with an older state (nemesis, --outage, seed 302475798). Each primary
          then holds a majority of the one before, so no primary can start
          from a state older than an acknowledged write."""
        here = set(self.members)
        if len(here) >= self.replicas:
            return None
        for hello in self._hellos.values():
            if hello.attempt_generation > best.generation and not set(hello.attempt) <= here:
                return (f"replicas {_names(set(hello.attempt) - here)} may hold a newer state (a primary view "
                        f"of {_names(hello.attempt)} was decided, then left before it settled)")
        if not best.primary:
            return f"no replica here holds the queue's state yet, and a first start needs all {self.replicas}"
        if best.tentative and not set(best.primary) <= here:
            return (f"replicas {_names(set(best.primary) - here)} may hold a newer state (the best state here, "
                    f"of the primary view of {_names(best.primary)}, is tentative: it settled as that view ended, "
                    "or its replica was left out alone or restarted)")
        holders = sum(1 for m, h in self._hellos.items() if h.generation == best.generation and m in best.primary)
        if 2 * holders <= len(best.primary):
            return (f"{holders} of the {len(best.primary)} replicas of the latest primary view "
                    f"({_names(best.primary)}) hold its state here, not a majority")
        return None

    def _on_state(self, sender: int, state: State) -> None:
        if sender == self.me and self._outgoing is not None and state.view == self._outgoing[0]:
            ops = self._outgoing[1]
            ops[state.index] = b""  # delivered: not sent again
            if not any(ops):
                self._outgoing = None
        if self.standing is not Standing.FETCHING or state.view != self._view or sender != self._provider:
            return
        behind = self.me in self._behind
        self._chunks[state.index] = state.chunk if behind else b""
        if len(self._chunks) < state.total:
            return
        image = b"".join(self._chunks[i] for i in range(state.total))
        self._chunks = {}
        if behind:
            try:
                # The snapshot and the settle point's changes commit together.
                with self._load(image):
                    self._settle_state(self._behind)
            except (ValueError, struct.error, sqlite3.Error):
                self.dropped_undecodable += 1  # stays behind; the next view change tries again
                return
            self.transfers += 1
        self._become_settled(self._behind, state_settled=behind)

    def _settle_state(self, behind: frozenset[int]) -> None:
        """The settle point's changes to the state: the new generation, and the
        leases of consumers gone or behind go back."""
        with self._durably():
            self._flush_puts()  # before the leases are read
            self.generation, self.primary = self._next_generation, self.members
            # Delivered in a transitional view, the settle point may never reach the
            # members on the other side: they may go on from the state before it.
            self.tentative = self.transitional
            self.attempt = (0, ())
            for owner in self.store.lease_owners(QUEUE):
                member = int(owner[2:]) if owner.startswith("m:") and owner[2:].isdigit() else None
                if member is None or member not in self.members or member in behind:
                    self.store.release_consumer(owner)  # counts as a delivery: may retire

    def _become_settled(self, behind: frozenset[int], state_settled: bool = False) -> None:
        """Ops apply from here: first those delivered while this view settled.
        ``state_settled``: ``_settle_state`` ran already (with a loaded snapshot)."""
        if not state_settled:
            self._settle_state(behind)
        self.standing = Standing.SETTLED
        if not self.transitional:
            self._decide_kept(loaded=self.me in behind)
        buffered, self._buffer = self._buffer, []
        for sender, op, raw in buffered:
            self._apply(sender, op, raw)
        resend, self._resend_later = self._resend_later, []
        self._resend(resend)
        self._notify()

    def _decide_kept(self, loaded: bool) -> None:
        """A primary view settled: decide our writes applied in a transitional
        view. Our own state stands (``loaded`` False): each had the result we
        kept. We took the provider's: each counts if the provider applied it
        (its id is remembered), else it goes out again."""
        again: list[bytes] = []
        for key, pending in list(self._pending.items()):
            if not pending.kept:
                continue
            pending.kept = False
            if not loaded:
                del self._pending[key]
                if pending.leased and pending.abandoned:
                    self._nursery.start_soon(self._give_back, pending.leased)
                pending.finish()
            elif self._remembered(key):
                del self._pending[key]
                op = decode_op_untrusted(pending.op)
                # our leases went back here (we were behind); an ACK took what is gone
                pending.leased = []
                pending.tags = [] if not isinstance(op, Settle) or op.release else \
                    [t for t in op.tags if t not in set(self.store.present(QUEUE, op.tags))]
                pending.finish()
            else:
                pending.leased, pending.tags = [], []
                again.append(key)
        orphans, self._orphans = self._orphans, []
        if orphans and not loaded:
            mine = self.store.leased_to(QUEUE, f"m:{self.me}", orphans)
            if mine:
                key, request = self._request()
                self._pending[key] = _Pending(encode_op(Settle(True, tuple(mine[:MAX_TAGS]), request)))
                again.append(key)
        self._resend_later += again
    def _resend(self, keys: list[bytes]) -> None:
        keys = [k for k in keys if k in self._pending]
        if keys:
            self._nursery.start_soon(self._send, keys)

    def _snapshot(self) -> bytes:
        self._flush_puts()
        head = _SNAPSHOT.pack(self.applied, self._limit_in_force or 0, len(self._dedup), self.digest)
        return head + b"".join(self._dedup) + self.store.snapshot()

    @contextmanager
    def _load(self, image: bytes) -> Iterator[None]:
        """Take a provider's snapshot; what the block does commits with it."""
        applied, limit, count, digest = _SNAPSHOT.unpack_from(image)
        start = _SNAPSHOT.size + 16 * count
        if len(image) < start:
            raise ValueError("short snapshot")
        ids = [image[_SNAPSHOT.size + 16 * i:_SNAPSHOT.size + 16 * (i + 1)] for i in range(count)]
        with self.store.loading(image[start:]) as load, self._durably(replaced_ids=True):
            load()
            self.applied, self._limit_in_force, self.digest = applied, limit or None, digest
            self._dedup = OrderedDict.fromkeys(ids)
            yield

    # ------------------------------------------------------------ the replicated state machine

    def _apply(self, sender: int, op: Op, raw: bytes) -> None:
        """Apply one op of the ordered stream. Only what the op carries may decide
        (never this replica's clock or configuration): that keeps replicas equal."""
        if isinstance(op, (Hello, State)):
            return
        leased: list[Message] = []
        settled: list[int] = []
        with self._durably():  # committed (a durable replica) before anyone hears of it
            if not isinstance(op, Put):
                self._flush_puts()  # what follows reads the store
            self.applied += 1
            self.digest = _chain(self.digest, sender, raw)
            if isinstance(op, Put):
                self._apply_put(op)
            elif not self._first_time(_request_id(sender, op.request)):
                pass  # sent again after a view change that had applied it: once is enough
            elif isinstance(op, Get):
                leased = self._apply_get(sender, op)
            elif isinstance(op, Settle):
                owner = f"m:{sender}"
                settled = self.store.leased_to(QUEUE, owner, op.tags)  # the rest are not this member's now
                if op.release:
                    self.store.release(settled, owner)
                else:
                    self.store.ack(settled, owner)
            else:
                self.store.purge_dead(QUEUE)
        self._finish_own(sender, op, None, leased, settled)
        self._notify()

    def _remembered(self, key: bytes) -> bool:
        """Whether the state holds our write ``key`` (a PUT's id, or ``_request``'s key)."""
        if len(key) == 9:  # a request: b"r" + its number
            key = _request_id(self.me, _U64.unpack_from(key, 1)[0])
        return key in self._dedup

    def _first_time(self, key: bytes) -> bool:
        """Remember ``key`` (a PUT's or a request's id); whether it was new."""
        if key in self._dedup:
            return False
        self._dedup[key] = None
        if len(self._dedup) > self._dedup_window:
            self._dedup.popitem(last=False)
        if self.durable:
            self._unsaved_ids.append(key)
            self._ids_remembered += 1
        return True

    def _apply_put(self, op: Put) -> None:
        if self._first_time(op.msg_id):
            self._puts.append((op.body, op.priority, op.msg_id, op.expires_ms / 1000 if op.expires_ms else None))

    def _flush_puts(self) -> None:
        """Insert the PUTs applied since the last flush, in one statement (a
        statement per PUT cost more than the rest of applying it). Done before
        anything reads or replaces the store, and at the end of every
        ``_durably`` block, inside its transaction."""
        if self._puts:
            rows, self._puts = self._puts, []
            self.store.put_rows(QUEUE, rows)

    def _apply_get(self, sender: int, op: Get) -> list[Message]:
        limit = op.delivery_limit or None
        if limit != self._limit_in_force:
            # Every replica starts with none and changes it here, at the same point of
            # the stream; before the first GET nothing was handed out to count.
            self._limit_in_force = limit
            self.store.set_delivery_limit(QUEUE, limit)
        now = op.now_ms / 1000
        if not op.count:
            self.store.expire_ttl(now)
            return []
        leased = self.store.get(QUEUE, f"m:{sender}", op.count, now=now)
        return leased if sender == self.me else []

    def _notify(self) -> None:
        self._changed.set()
        self._changed = trio.Event()


@asynccontextmanager
async def open_replicated_queue(node: sgcs.NodeHandle, name: str, *, replicas: int, dedup_window: int = 1_000_000,
                                delivery_limit: int | None = None, path: str | os.PathLike[str] | None = None,
                                fsync: str = "normal") -> AsyncIterator[ReplicatedQueue]:
    """Be a replica of the replicated queue ``name`` for the duration of the block.

    ``replicas``: how many replicas the queue has (give every replica the
    same). Writes are accepted only in a view holding more than half of them;
    elsewhere they raise ``NotPrimary``. ``delivery_limit``: a message handed
    out that many times and released (or whose consumer left) is retired,
    dead, instead of handed out again. Give every replica the same: each GET
    carries its issuer's limit, and the one in force at every replica is the
    last applied GET's.

    ``path``: an SQLite file for this replica's state (its own: one per
    replica), so that a restarted replica begins where it stopped instead of
    empty; None keeps the state in memory, and a queue of memory replicas
    loses everything once all of its replicas restart. ``fsync`` as
    ``QueueStore``'s: ``"normal"`` survives ``kill -9``, ``"full"`` also a
    power cut. Keep the node's ``node_id`` across restarts: the leases of a
    replica that came back under another id go back at the next settle point
    as well, but only then."""
    check_queue_name(name)
    if type(replicas) is not int or not 1 <= replicas <= 1_000:
        raise UsageError(f"replicas must be the number of replicas of the queue (1 to 1000), got {replicas!r}")
    if type(dedup_window) is not int or dedup_window < 1:
        raise UsageError(f"dedup_window must be a positive int, got {dedup_window!r}")
    if delivery_limit is not None and (type(delivery_limit) is not int
                                       or not 1 <= delivery_limit <= MAX_DELIVERY_LIMIT):
        raise UsageError(f"delivery_limit must be a positive int or None, got {delivery_limit!r}")
    queue: ReplicatedQueue | None = None
    try:
        async with node.join(f"sgcs.rq.{name}", order=sgcs.Order.SAFE) as group, background() as nursery:
            queue = ReplicatedQueue(group, name, replicas=replicas, dedup_window=dedup_window,
                                    delivery_limit=delivery_limit, path=path, fsync=fsync)
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
