"""The queue store: named queues in one SQLite database (the message-queue
paper's "queue manager per node"; docs/queues.md).

Theory of operation
-------------------
The message-queue paper's queue manager holds named queues, memory or disk,
with four operations: Send, Receive, Bind and Unbind. Here one ``QueueStore``
is one SQLite database: a file for durable queues (WAL mode), ``":memory:"``
for memory queues. Both run the same code, so both keep the same rules.

* **Priorities** 0-9 (as RabbitMQ): a receive takes the ready message of the
  highest priority, and the oldest (lowest row id) among those: FIFO inside a
  priority. The index ``(queue, state, priority DESC, seq)`` makes that one
  index probe.
* **A write is acknowledged only once committed.** ``put``/``put_many`` return
  after their ``COMMIT``. ``fsync`` states what the commit survives: ``"full"``
  (``synchronous=FULL``: the WAL is fsynced at every commit; survives power
  loss), ``"normal"`` (the default, ``synchronous=NORMAL``: the WAL is written
  at every commit and fsynced at checkpoints; survives ``kill -9`` of the
  process, since the written pages are in the OS, but the last commits can be
  lost in a power cut), ``"off"`` (no fsync at all; also survives ``kill -9``).
  Receives, acknowledgements and releases are never fsynced by themselves
  (``_tx(relaxed=True)``): at-least-once tolerates losing them, and the
  next put's fsync takes them along.
* **Receive with acknowledgement**: ``get`` leases messages to a consumer
  (state LEASED, owner, optional deadline); ``ack`` deletes them, ``release``
  (or the consumer's death: ``release_consumer``, or the deadline:
  ``expire``) makes them READY again, so they are received again. Opening a
  store releases every lease of the previous incarnation, whose consumers were
  served by the process that died. This is at-least-once: a consumer that
  processed a message and died before its ack sees it again.
* **Transactional receive**: ``transaction()`` leases messages to the
  transaction and buffers its puts; ``commit`` deletes the received messages
  and inserts the puts in one SQLite transaction, ``rollback`` (or a crash)
  returns them.
* **Unbind**, the paper's two rules: ``Unbind.HIGHEST`` (urgent) unbinds at
  once and leaves undelivered messages DEAD for the monitor
  (``purge_dead``); ``Unbind.LOWEST`` stops new sends, lets receivers drain
  the queue and unbinds it when the last message is acknowledged.
* **Store and forward** (see ``forward.py``): a send to another node's queue
  is committed to the transmission table ``xmit`` first. Its id is the pair
  (this store's ``origin``, its ``xmit`` row id): AUTOINCREMENT never reuses a
  row id, and ``origin`` is drawn once and kept in the file. The receiving
  store commits forwarded messages with ``accept_forwarded``, which records
  each id in ``seen`` in the same transaction, so a retransmission after a
  crash of either side is recognised and only acknowledged again. The sender
  sends its ``floor`` (the lowest id it still holds for that receiver): ids
  below it were all acknowledged, so the receiver forgets them in ``seen``
  and refuses anything below the highest floor it was told. That bounds
  ``seen`` by the sender's unacknowledged messages.
* **TTL**: a message put with a ``ttl`` carries its expiry (wall clock,
  ``time.time()``, so it holds across restarts) in ``expires_at``; a receive
  dead-letters expired ready messages before it leases. A remote send keeps
  its expiry in its ``xmit`` row; the forwarder sends the *remaining*
  milliseconds (the two nodes' clocks differ) and the receiver puts the
  message with that TTL on its own clock. A row that expires here, unsent or
  sent with no acknowledgement awaited any more, is not sent (again): it
  moves, in one transaction, to this store's queue ``xmit.expired`` (bound on
  first use), a ready message with the id it would have had at the receiver
  (``forwarded_id``). Nothing expires silently.

Bounded memory: a queue holds at most ``max_depth`` messages (ready, leased
or dead); a put beyond raises ``QueueFull``, and a forwarded batch that does
not fit is not acknowledged (the sender retries later: back-pressure).

Not thread-safe: one store is used from one thread (the manager's trio thread).
"""

from __future__ import annotations

import enum
import math
import os
import sqlite3
import struct
import time
from collections.abc import Callable, Container, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass

from sgcs.errors import SgcsError, UsageError

PRIORITIES = 10
"""Priorities are 0 (lowest) to 9 (highest), as RabbitMQ's recommended range."""
READY, LEASED, DEAD = 0, 1, 2
FSYNC_MODES = {"full": "FULL", "normal": "NORMAL", "off": "OFF"}
MAX_QUEUE_NAME = 200
MAX_BODY = 16 * 1024 * 1024
DEFAULT_MAX_DEPTH = 10_000_000
XMIT_EXPIRED = "xmit.expired"
"""The local queue that receives remote sends whose TTL ran out before they were forwarded."""
MAX_FORWARD_TTL = 0xFFFF_FFFF / 1000
"""Seconds: a forwarded TTL travels as u32 milliseconds (about 49.7 days)."""
_ID = struct.Struct(">QQ")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS queues(name TEXT PRIMARY KEY, draining INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS messages(
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    queue TEXT NOT NULL,
    priority INTEGER NOT NULL,
    msg_id BLOB NOT NULL,
    body BLOB NOT NULL,
    state INTEGER NOT NULL DEFAULT 0,
    owner TEXT,
    lease_until REAL,
    deliveries INTEGER NOT NULL DEFAULT 0);
CREATE INDEX IF NOT EXISTS messages_ready ON messages(queue, state, priority DESC, seq);
CREATE INDEX IF NOT EXISTS messages_owner ON messages(owner) WHERE owner IS NOT NULL;
CREATE TABLE IF NOT EXISTS xmit(
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    dest TEXT NOT NULL,
    queue TEXT NOT NULL,
    priority INTEGER NOT NULL,
    body BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS xmit_dest ON xmit(dest, seq);
CREATE TABLE IF NOT EXISTS depth(queue TEXT PRIMARY KEY, n INTEGER NOT NULL) WITHOUT ROWID;
CREATE TRIGGER IF NOT EXISTS depth_insert AFTER INSERT ON messages BEGIN
    INSERT INTO depth VALUES(NEW.queue, 1) ON CONFLICT(queue) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER IF NOT EXISTS depth_delete AFTER DELETE ON messages BEGIN
    UPDATE depth SET n = n - 1 WHERE queue = OLD.queue;
END;
CREATE TRIGGER IF NOT EXISTS depth_move AFTER UPDATE OF queue ON messages BEGIN
    UPDATE depth SET n = n - 1 WHERE queue = OLD.queue;
    INSERT INTO depth VALUES(NEW.queue, 1) ON CONFLICT(queue) DO UPDATE SET n = n + 1;
END;
CREATE TABLE IF NOT EXISTS seen(origin INTEGER NOT NULL, seq INTEGER NOT NULL, PRIMARY KEY(origin, seq)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS floors(origin INTEGER PRIMARY KEY, floor INTEGER NOT NULL);
"""
_AUDIT = "CREATE TABLE IF NOT EXISTS audit(msg_id BLOB NOT NULL);"
_ADDED_COLUMNS = (("queues", "delivery_limit", "INTEGER"), ("queues", "dead_letter", "TEXT"),
                  ("messages", "expires_at", "REAL"), ("xmit", "expires_at", "REAL"))
"""Columns added after the first schema: a store file written before gets them at open."""
_ADDED_INDEXES = ("CREATE INDEX IF NOT EXISTS xmit_expiry ON xmit(expires_at) WHERE expires_at IS NOT NULL;"
                  "CREATE INDEX IF NOT EXISTS messages_expiry ON messages(queue, expires_at) "
                  "WHERE state = 0 AND expires_at IS NOT NULL;")
"""Indexes on added columns, created once the columns exist: the forwarder looks for expired
rows often, and every receive for expired ready messages (without the index, a scan of the
queue's ready messages per receive: 852 get+ack/s on 3,000 messages)."""


class QueueFull(SgcsError):
    """The queue holds ``max_depth`` messages; receive some, then send again."""


class Unbind(enum.Enum):
    """The paper's two unbind rules."""

    HIGHEST = "highest"
    """Urgent: unbind now; undelivered messages become dead, for the monitor to purge."""
    LOWEST = "lowest"
    """Gentle: refuse new sends, let receivers drain the queue, unbind once it is empty."""


@dataclass(frozen=True, slots=True)
class Message:
    """One received message; ``tag`` names it for ``ack`` and ``release``."""

    tag: int
    queue: str
    msg_id: bytes
    priority: int
    body: bytes
    deliveries: int
    """How many times it was handed out, this time included (above 1: a redelivery)."""
    node: str = ""
    """The queue manager that holds it, for a message received from another node ("": local)."""


@dataclass(frozen=True, slots=True)
class QueueInfo:
    """What ``sgcs queue ls`` shows for one queue."""

    name: str
    bound: bool
    draining: bool
    depth: tuple[int, ...]
    """Ready messages per priority, index 0 to 9."""
    leased: int
    dead: int
    bytes: int
    """Body bytes of every message in the queue (ready, leased and dead)."""

    @property
    def ready(self) -> int:
        return sum(self.depth)


@dataclass(frozen=True, slots=True)
class Outgoing:
    """A row of the transmission queue, waiting to be forwarded."""

    seq: int
    dest: str
    queue: str
    priority: int
    body: bytes
    expires_at: float | None = None
    """Wall-clock expiry (``time.time()`` of this node), or None: no TTL."""

    def ttl_ms(self, now: float) -> int:
        """The TTL to forward at ``now``: remaining milliseconds (at least 1,
        at most u32), 0 for none. The caller sends only rows not expired at ``now``."""
        if self.expires_at is None:
            return 0
        return max(1, min(0xFFFF_FFFF, math.ceil((self.expires_at - now) * 1000)))


@dataclass(frozen=True, slots=True)
class Forwarded:
    """A forwarded message as the receiving node decodes it."""

    seq: int
    queue: str
    priority: int
    body: bytes
    ttl_ms: int = 0
    """Milliseconds it may still wait unreceived, counted from its arrival here; 0: no TTL."""


@dataclass(frozen=True, slots=True)
class AcceptResult:
    accepted: int
    duplicates: int
    dead: int
    """Forwarded to a queue that is not bound here: kept as dead messages."""
    done: tuple[int, ...] = ()
    """Transmission ids committed here (now or before): the sender may forget them."""
    full: bool = False
    """Some messages did not fit (``max_depth``) and were left out of ``done``."""


def check_priority(priority: object) -> int:
    if type(priority) is not int or not 0 <= priority < PRIORITIES:
        raise UsageError(f"priority must be an int from 0 to {PRIORITIES - 1}, got {priority!r}")
    return priority


def check_queue_name(name: object) -> str:
    if not isinstance(name, str) or not name or len(name.encode()) > MAX_QUEUE_NAME or "@" in name:
        raise UsageError(f"queue name must be a non-empty str of at most {MAX_QUEUE_NAME} bytes without '@', got {name!r}")
    return name


def check_body(body: object) -> bytes:
    if not isinstance(body, (bytes, bytearray, memoryview)):
        raise UsageError(f"a message body must be bytes, got {type(body).__name__}")
    data = bytes(body)
    if len(data) > MAX_BODY:
        raise UsageError(f"a message body may have at most {MAX_BODY} bytes, got {len(data)}")
    return data


def check_ttl(ttl: object, most: float | None = None) -> float | None:
    """A TTL in seconds (positive, at most ``most``), or None."""
    if ttl is None:
        return None
    if not isinstance(ttl, (int, float)) or isinstance(ttl, bool) or not ttl > 0 or (most is not None and ttl > most):
        bound = "" if most is None else f" up to {most:g}"
        raise UsageError(f"ttl must be positive seconds{bound} or None, got {ttl!r}")
    return float(ttl)


def split_target(target: str) -> tuple[str, str | None]:
    """``"q"`` -> ("q", None); ``"q@node"`` -> ("q", "node")."""
    if not isinstance(target, str):
        raise UsageError(f"a queue target is a str 'queue' or 'queue@node', got {target!r}")
    queue, at, node = target.partition("@")
    check_queue_name(queue)
    if at and not node:
        raise UsageError(f"queue target {target!r} names no node after '@'")
    return queue, (node or None)


def forwarded_id(origin: int, seq: int) -> bytes:
    """The id of a message forwarded from store ``origin``'s transmission row ``seq``."""
    return _ID.pack(origin, seq)


class QueueStore:
    """Named queues in one SQLite database; ``path=":memory:"`` for memory queues."""

    def __init__(self, path: str | os.PathLike[str] = ":memory:", *, fsync: str = "normal",
                 max_depth: int = DEFAULT_MAX_DEPTH, audit: bool = False, release_leases: bool = True) -> None:
        """``release_leases``: give back at open every lease of the previous
        incarnation (its consumers died with it). A replica of a replicated
        queue passes False: its leases are replicated state, given back only
        by the ops of the stream."""
        if fsync not in FSYNC_MODES:
            raise UsageError(f"fsync must be one of {', '.join(FSYNC_MODES)}, got {fsync!r}")
        if type(max_depth) is not int or max_depth < 1:
            raise UsageError(f"max_depth must be a positive int, got {max_depth!r}")
        self.path = os.fspath(path)
        self.durable = self.path != ":memory:"
        self.fsync = fsync
        self.max_depth = max_depth
        self.audit = audit
        self._depth = 0
        """Open transactions: 0, or 1 plus the savepoints nested in it (``batch``)."""
        try:
            self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as exc:
            raise UsageError(f"cannot open queue store {self.path}: {exc}") from None
        self._db.execute("PRAGMA busy_timeout=10000")
        if self.durable:
            self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(f"PRAGMA synchronous={FSYNC_MODES[fsync]}")
        self._create_schema()
        self.origin = self._origin()
        self.dead_lettered = 0
        """Messages moved to a dead-letter queue (or made dead) for their delivery limit or TTL."""
        self.recovered_leases = self._release_all() if release_leases else 0
        self._tx_counter = 0

    # ------------------------------------------------------------ plumbing

    def _create_schema(self) -> None:
        self._db.executescript("BEGIN IMMEDIATE;" + _SCHEMA + "COMMIT;")
        for table, column, kind in _ADDED_COLUMNS:
            if column not in {row[1] for row in self._db.execute(f"PRAGMA table_info({table})")}:
                self._db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
        script = _SCHEMA + _ADDED_INDEXES + (_AUDIT if self.audit else "")
        # Depths are recounted at open (O(messages), once): a file written before the
        # triggers existed, or by any other writer, starts right.
        self._db.executescript("BEGIN IMMEDIATE;" + script + "DELETE FROM depth;"
                               "INSERT INTO depth SELECT queue, count(*) FROM messages GROUP BY queue;COMMIT;")

    @contextmanager
    def _tx(self, relaxed: bool = False) -> Iterator[sqlite3.Connection]:
        """One SQLite write transaction: committed on success, rolled back on
        error. Inside another (``batch``) it is a savepoint of that one.

        ``relaxed``: a change that at-least-once delivery tolerates losing
        (a lease, which a restart gives back anyway; an acknowledgement,
        whose loss means one more delivery) is not fsynced by itself under
        ``fsync="full"``: written to the WAL like ``"normal"``, it survives
        ``kill -9``, and the next full commit (a put) fsyncs it too. A power
        cut loses only such changes, never a put (as RabbitMQ syncs publishes
        before confirming them, and acknowledgements lazily)."""
        outer = self._depth == 0
        name = f"s{self._depth}"
        relax = relaxed and outer and self.fsync == "full"
        if relax:
            self._db.execute("PRAGMA synchronous=NORMAL")
        try:
            with self._transaction(outer, name) as db:
                yield db
        finally:
            if relax:
                self._db.execute("PRAGMA synchronous=FULL")

    @contextmanager
    def _transaction(self, outer: bool, name: str) -> Iterator[sqlite3.Connection]:
        self._db.execute("BEGIN IMMEDIATE" if outer else f"SAVEPOINT {name}")
        self._depth += 1
        try:
            yield self._db
        except BaseException:
            self._depth -= 1
            self._db.execute("ROLLBACK" if outer else f"ROLLBACK TO {name}")
            if not outer:
                self._db.execute(f"RELEASE {name}")
            raise
        self._depth -= 1
        self._db.execute("COMMIT" if outer else f"RELEASE {name}")

    def batch(self) -> AbstractContextManager[sqlite3.Connection]:
        """One transaction around several calls, all committed or none (each
        call's own transaction becomes a savepoint of it). The connection it
        yields may write tables of the caller's own in the same transaction."""
        return self._tx()

    def _origin(self) -> int:
        row = self._db.execute("SELECT value FROM meta WHERE key='origin'").fetchone()
        if row is not None:
            return int.from_bytes(row[0], "big")
        origin = int.from_bytes(os.urandom(8), "big") >> 1  # 63 bits: fits SQLite's signed INTEGER
        with self._tx():
            self._db.execute("INSERT OR IGNORE INTO meta VALUES('origin', ?)", (origin.to_bytes(8, "big"),))
        row = self._db.execute("SELECT value FROM meta WHERE key='origin'").fetchone()
        return int.from_bytes(row[0], "big")

    def _release_all(self) -> int:
        with self._tx():
            released = self._db.execute(
                "UPDATE messages SET state=0, owner=NULL, lease_until=NULL WHERE state=1").rowcount
            self._retire_over_limit()
            return released

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> QueueStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------ bind / unbind

    def bind(self, queue: str, *, delivery_limit: int | None = None, dead_letter: str | None = None) -> None:
        """Create the queue, or bind it again (a draining queue accepts sends
        again), with its policy: a message handed out ``delivery_limit`` times
        and released (or whose consumer died) is not handed out again, and a
        message whose TTL passed neither; both go to the ``dead_letter`` queue
        (bound here if it is not), or become dead messages (``purge_dead``)."""
        check_queue_name(queue)
        if delivery_limit is not None and (type(delivery_limit) is not int or delivery_limit < 1):
            raise UsageError(f"delivery_limit must be a positive int or None, got {delivery_limit!r}")
        if dead_letter is not None and (check_queue_name(dead_letter) == queue):
            raise UsageError(f"queue {queue!r} cannot be its own dead-letter queue")
        with self._tx():
            for name, limit, dlq in ((dead_letter, None, None), (queue, delivery_limit, dead_letter)):
                if name is None:
                    continue
                if name == dead_letter and self.is_bound(name):
                    continue  # keep the dead-letter queue's own policy
                self._db.execute(
                    "INSERT INTO queues(name, draining, delivery_limit, dead_letter) VALUES(?, 0, ?, ?) "
                    "ON CONFLICT(name) DO UPDATE SET draining=0, delivery_limit=excluded.delivery_limit, "
                    "dead_letter=excluded.dead_letter", (name, limit, dlq))

    def is_bound(self, queue: str) -> bool:
        return self._db.execute("SELECT 1 FROM queues WHERE name=?", (queue,)).fetchone() is not None

    def _accepts(self, queue: str) -> bool:
        row = self._db.execute("SELECT draining FROM queues WHERE name=?", (queue,)).fetchone()
        return row is not None and row[0] == 0

    def unbind(self, queue: str, rule: Unbind = Unbind.LOWEST) -> bool:
        """Unbind ``queue`` by one of the paper's rules; True if it is unbound now
        (always for HIGHEST; for LOWEST only when it was already empty)."""
        if not isinstance(rule, Unbind):
            raise UsageError(f"rule must be Unbind.HIGHEST or Unbind.LOWEST, got {rule!r}")
        if not self.is_bound(queue):
            raise UsageError(f"queue {queue!r} is not bound here")
        with self._tx():
            if rule is Unbind.HIGHEST:
                self._db.execute(
                    "UPDATE messages SET state=2, owner=NULL, lease_until=NULL WHERE queue=? AND state!=2", (queue,))
                self._db.execute("DELETE FROM queues WHERE name=?", (queue,))
                return True
            self._db.execute("UPDATE queues SET draining=1 WHERE name=?", (queue,))
            return self._finish_drain(queue)

    def _finish_drain(self, queue: str) -> bool:
        """Inside a transaction: unbind a draining queue that holds no live message."""
        row = self._db.execute("SELECT draining FROM queues WHERE name=?", (queue,)).fetchone()
        if row is None or row[0] == 0:
            return row is None
        live = self._db.execute("SELECT 1 FROM messages WHERE queue=? AND state!=2 LIMIT 1", (queue,)).fetchone()
        if live is None:
            self._db.execute("DELETE FROM queues WHERE name=?", (queue,))
            return True
        return False

    def purge_dead(self, queue: str | None = None) -> int:
        """The dead-message monitor's step: delete dead messages; returns how many."""
        with self._tx():
            if queue is None:
                return self._db.execute("DELETE FROM messages WHERE state=2").rowcount
            return self._db.execute("DELETE FROM messages WHERE state=2 AND queue=?", (queue,)).rowcount

    # ------------------------------------------------------------ send

    def _room(self, queue: str, count: int) -> bool:
        # The depth table is kept by triggers in the same transactions: O(1), not a count of the queue.
        row = self._db.execute("SELECT n FROM depth WHERE queue=?", (queue,)).fetchone()
        return (int(row[0]) if row else 0) + count <= self.max_depth

    def put(self, queue: str, body: bytes, priority: int = 0, msg_id: bytes | None = None) -> bytes:
        """Commit one message; returns its id."""
        return self.put_many(queue, [(body, priority)], [msg_id] if msg_id is not None else None)[0]

    def put_many(self, queue: str, items: Sequence[tuple[bytes, int]],
                 msg_ids: Sequence[bytes] | None = None, *, ttl: float | None = None,
                 now: float | None = None, expires_at: float | None = None) -> list[bytes]:
        """Commit ``(body, priority)`` pairs in one transaction (a group commit); returns their ids.
        ``ttl``: seconds (wall clock, ``now`` or ``time.time()``) after which a message still
        not received is dead-lettered instead of handed out; or ``expires_at``, that
        moment itself (a replicated queue's PUT carries it, so every replica stores the same)."""
        rows = [(check_body(body), check_priority(priority)) for body, priority in items]
        if check_ttl(ttl) is not None and expires_at is not None:
            raise UsageError("give ttl or expires_at, not both")
        expires = expires_at if ttl is None else (time.time() if now is None else now) + ttl
        ids = list(msg_ids) if msg_ids is not None else [os.urandom(16) for _ in rows]
        if len(ids) != len(rows) or not all(isinstance(i, bytes) and 0 < len(i) <= 64 for i in ids):
            raise UsageError("msg_ids must give one id of 1 to 64 bytes per message")
        if not self._accepts(queue):
            raise UsageError(f"queue {queue!r} is not bound (or is draining); bind it before sending")
        if not self._room(queue, len(rows)):
            raise QueueFull(f"queue {queue!r} holds its max_depth of {self.max_depth} messages")
        with self._tx():
            self._db.executemany(
                "INSERT INTO messages(queue, priority, msg_id, body, expires_at) VALUES(?, ?, ?, ?, ?)",
                [(queue, priority, msg_id, body, expires) for (body, priority), msg_id in zip(rows, ids)])
        return ids

    def put_rows(self, queue: str, rows: Sequence[tuple[bytes, int, bytes, float | None]]) -> None:
        """Commit ``(body, priority, msg_id, expires_at)`` rows, checked already, in one
        transaction: a replicated queue's PUTs, each with the expiry its op carries."""
        if not self._accepts(queue):
            raise UsageError(f"queue {queue!r} is not bound (or is draining); bind it before sending")
        if not self._room(queue, len(rows)):
            raise QueueFull(f"queue {queue!r} holds its max_depth of {self.max_depth} messages")
        with self._tx():
            self._db.executemany(
                "INSERT INTO messages(queue, priority, msg_id, body, expires_at) VALUES(?, ?, ?, ?, ?)",
                [(queue, priority, msg_id, body, expires) for body, priority, msg_id, expires in rows])

    # ------------------------------------------------------------ receive

    def get(self, queue: str, consumer: str, count: int = 1, *, lease_until: float | None = None,
            now: float | None = None) -> list[Message]:
        """Lease up to ``count`` ready messages to ``consumer``: highest priority first,
        FIFO inside a priority. Empty list: nothing ready. Messages whose TTL
        passed (by ``now``, default ``time.time()``) are dead-lettered first."""
        if not isinstance(consumer, str) or not consumer:
            raise UsageError("consumer must be a non-empty str naming who will ack")
        if type(count) is not int or count < 1:
            raise UsageError(f"count must be a positive int, got {count!r}")
        if not self.is_bound(queue):
            raise UsageError(f"queue {queue!r} is not bound here; bind it first")
        with self._tx(relaxed=True):
            self._retire_expired(time.time() if now is None else now, queue)
            rows = self._db.execute(
                "SELECT seq, priority, msg_id, body, deliveries FROM messages WHERE queue=? AND state=0 "
                "ORDER BY priority DESC, seq LIMIT ?", (queue, count)).fetchall()
            self._db.executemany(
                "UPDATE messages SET state=1, owner=?, lease_until=?, deliveries=deliveries+1 WHERE seq=?",
                [(consumer, lease_until, row[0]) for row in rows])
        return [Message(seq, queue, msg_id, priority, body, deliveries + 1)
                for seq, priority, msg_id, body, deliveries in rows]

    def ack(self, tags: Iterable[int], consumer: str | None = None) -> int:
        """Delete acknowledged messages (those leased to ``consumer`` if given); returns how many."""
        tags = list(tags)
        with self._tx(relaxed=True):
            done = self._delete_leased(tags, consumer)
            self._finish_drains(tags)
        return done

    def _delete_leased(self, tags: list[int], consumer: str | None) -> int:
        sql = "DELETE FROM messages WHERE seq=? AND state=1" + (" AND owner=?" if consumer is not None else "")
        args = [(tag, consumer) if consumer is not None else (tag,) for tag in tags]
        # rowcount, not total_changes: the depth triggers change rows too
        return int(self._db.executemany(sql, args).rowcount)

    def _finish_drains(self, _tags: list[int]) -> None:
        for (queue,) in self._db.execute("SELECT name FROM queues WHERE draining=1").fetchall():
            self._finish_drain(queue)

    def release(self, tags: Iterable[int], consumer: str | None = None) -> int:
        """Make leased messages ready again (a negative acknowledgement)."""
        sql = "UPDATE messages SET state=0, owner=NULL, lease_until=NULL WHERE seq=? AND state=1"
        sql += " AND owner=?" if consumer is not None else ""
        with self._tx(relaxed=True):
            # rowcount, not total_changes: the depth triggers change rows too
            done = int(self._db.executemany(sql, [(t, consumer) if consumer is not None else (t,)
                                                  for t in tags]).rowcount)
            self._retire_over_limit()
            return done

    def return_unseen(self, tags: Iterable[int], consumer: str) -> int:
        """Give back messages leased to ``consumer`` that never reached its application
        (a session's prefetch buffer): ready again with the delivery count they had
        before that lease, so they count neither as redeliveries nor toward a
        delivery limit. Returns how many."""
        with self._tx(relaxed=True):
            return int(self._db.executemany(
                "UPDATE messages SET state=0, owner=NULL, lease_until=NULL, deliveries=max(deliveries - 1, 0) "
                "WHERE seq=? AND state=1 AND owner=?", [(tag, consumer) for tag in tags]).rowcount)

    def renew(self, tag: int, consumer: str, lease_until: float | None) -> bool:
        """Extend the lease of one message if ``consumer`` still holds it; False if it
        does not (its lease ran out and it went back to the queue)."""
        with self._tx(relaxed=True):
            return self._db.execute("UPDATE messages SET lease_until=? WHERE seq=? AND state=1 AND owner=?",
                                    (lease_until, tag, consumer)).rowcount == 1

    def release_consumer(self, consumer: str) -> int:
        """The consumer died: everything leased to it is ready again."""
        with self._tx():
            done = self._db.execute(
                "UPDATE messages SET state=0, owner=NULL, lease_until=NULL WHERE state=1 AND owner=?",
                (consumer,)).rowcount
            self._retire_over_limit()
            return done

    def leases_of(self, queue: str, consumer: str) -> list[int]:
        """The tags leased to ``consumer`` in ``queue``, oldest first."""
        return [row[0] for row in self._db.execute(
            "SELECT seq FROM messages WHERE queue=? AND state=1 AND owner=? ORDER BY seq", (queue, consumer))]

    def leased_to(self, queue: str, consumer: str, tags: Sequence[int]) -> list[int]:
        """Those of ``tags`` that are leased to ``consumer`` now, in the order given."""
        return self._tags_where(queue, tags, "state=1 AND owner=?", (consumer,))

    def present(self, queue: str, tags: Sequence[int]) -> list[int]:
        """Those of ``tags`` still in ``queue`` (ready, leased or dead), in the order given."""
        return self._tags_where(queue, tags, "1", ())

    def _tags_where(self, queue: str, tags: Sequence[int], where: str, args: tuple[object, ...]) -> list[int]:
        found: set[int] = set()
        for start in range(0, len(tags), 500):
            chunk = list(tags[start:start + 500])
            marks = ",".join("?" * len(chunk))
            found.update(row[0] for row in self._db.execute(
                f"SELECT seq FROM messages WHERE queue=? AND {where} AND seq IN ({marks})", (queue, *args, *chunk)))
        return [tag for tag in tags if tag in found]

    def lease_owners(self, queue: str) -> list[str]:
        """The consumers holding a lease in ``queue``."""
        return [row[0] for row in self._db.execute(
            "SELECT DISTINCT owner FROM messages WHERE queue=? AND state=1 ORDER BY owner", (queue,))]

    def snapshot(self) -> bytes:
        """The whole store as bytes (SQLite's image of the database), for ``restore``."""
        return self._db.serialize()

    def restore(self, image: bytes) -> None:
        """Replace the whole store by a ``snapshot`` of another, in one transaction."""
        with self.loading(image) as load, self._tx():
            load()

    @contextmanager
    def loading(self, image: bytes) -> Iterator[Callable[[], None]]:
        """Stage a ``snapshot`` of another store; the ``load()`` it yields
        replaces this store's content by it. In a durable store, call it inside
        ``batch()``: the new content commits with the batch's other writes, or
        none of it does (a crash between the two would leave a state nobody
        had). A memory store takes the image at once (nothing to survive), and
        ``load()`` does nothing. A bad image raises ``sqlite3.DatabaseError``
        before anything changes."""
        if not self.durable:
            self._db.deserialize(image)
            self._db.execute("PRAGMA quick_check").fetchall()  # a bad image raises here
            with self._tx():
                self._keep_origin()
            yield lambda: None
            return
        # SQLite attaches a file, not bytes, and not inside a transaction: the
        # image goes to a file beside the store, attached for the copy.
        staged = f"{self.path}.loading"
        with open(staged, "wb") as out:
            # The image of a WAL store says so in bytes 18-19; attached as it is,
            # it would grow -wal and -shm files beside it. Rollback mode needs none.
            out.write(image[:18] + b"\x01\x01" + image[20:] if image[18:20] == b"\x02\x02" else image)
        try:
            check = sqlite3.connect(staged)
            try:
                check.execute("PRAGMA quick_check").fetchall()
            finally:
                check.close()
            self._db.execute("ATTACH DATABASE ? AS staged", (staged,))
            try:
                yield self._copy_staged
            finally:
                self._db.execute("DETACH DATABASE staged")
        finally:
            os.unlink(staged)

    def _copy_staged(self) -> None:
        """Every table of this store takes the staged image's rows (columns by
        name: a file written before a column was added has it last)."""
        with self._tx():
            staged = {row[0] for row in self._db.execute("SELECT name FROM staged.sqlite_master WHERE type='table'")}
            tables = [row[0] for row in self._db.execute("SELECT name FROM main.sqlite_master WHERE type='table'")]
            # Last: an INSERT into an AUTOINCREMENT table writes its sqlite_sequence row, even of no rows.
            for table in sorted(tables, key=lambda name: name == "sqlite_sequence"):
                self._db.execute(f"DELETE FROM main.{table}")
                if table not in staged:
                    continue
                ours = [row[1] for row in self._db.execute(f"PRAGMA main.table_info({table})")]
                theirs = {row[1] for row in self._db.execute(f"PRAGMA staged.table_info({table})")}
                columns = ", ".join(c for c in ours if c in theirs)
                self._db.execute(f"INSERT INTO main.{table}({columns}) SELECT {columns} FROM staged.{table}")
            # The triggers counted the copy on top of the copied counts: count again.
            self._db.execute("DELETE FROM depth")
            self._db.execute("INSERT INTO depth SELECT queue, count(*) FROM messages GROUP BY queue")
            self._keep_origin()

    def _keep_origin(self) -> None:
        """The image came with its store's transmission origin: this store keeps its own."""
        self._db.execute("INSERT OR REPLACE INTO meta VALUES('origin', ?)", (self.origin.to_bytes(8, "big"),))

    def expire(self, now: float) -> int:
        """Leases whose deadline passed become ready again; returns how many."""
        with self._tx():
            done = self._db.execute(
                "UPDATE messages SET state=0, owner=NULL, lease_until=NULL "
                "WHERE state=1 AND lease_until IS NOT NULL AND lease_until <= ?", (now,)).rowcount
            self._retire_over_limit()
            return done

    def expire_ttl(self, now: float | None = None) -> int:
        """Dead-letter every ready message whose TTL passed (wall clock); returns how many."""
        with self._tx():
            return self._retire_expired(time.time() if now is None else now, None)

    def set_delivery_limit(self, queue: str, delivery_limit: int | None) -> int:
        """Change a bound queue's delivery limit (its dead-letter queue stays) and, in the
        same transaction, retire ready messages already at the new limit; returns how many."""
        if delivery_limit is not None and (type(delivery_limit) is not int or delivery_limit < 1):
            raise UsageError(f"delivery_limit must be a positive int or None, got {delivery_limit!r}")
        with self._tx():
            self._db.execute("UPDATE queues SET delivery_limit=? WHERE name=?", (delivery_limit, queue))
            return self._retire_over_limit()

    def dead_messages(self, queue: str) -> list[tuple[bytes, int, bytes]]:
        """The dead messages of ``queue`` as (id, priority, body), oldest first."""
        return [(bytes(i), int(p), bytes(b)) for i, p, b in self._db.execute(
            "SELECT msg_id, priority, body FROM messages WHERE queue=? AND state=2 ORDER BY seq", (queue,))]

    def _retire_over_limit(self) -> int:
        """Inside a transaction: ready messages handed out ``delivery_limit`` times go to the dead letters."""
        return self._retire(
            "SELECT m.seq, q.dead_letter FROM messages m JOIN queues q ON q.name = m.queue WHERE m.state = 0 "
            "AND q.delivery_limit IS NOT NULL AND m.deliveries >= q.delivery_limit", ())

    def _retire_expired(self, now: float, queue: str | None) -> int:
        where = "" if queue is None else " AND m.queue = ?"
        return self._retire(
            "SELECT m.seq, q.dead_letter FROM messages m LEFT JOIN queues q ON q.name = m.queue WHERE m.state = 0 "
            "AND m.expires_at IS NOT NULL AND m.expires_at <= ?" + where, (now,) if queue is None else (now, queue))

    def _retire(self, select: str, args: tuple[object, ...]) -> int:
        """Move the selected messages to their queue's dead-letter queue (a fresh message
        there: no TTL, no deliveries), or make them dead where the queue has none."""
        rows = self._db.execute(select, args).fetchall()
        moved = [(dlq, seq) for seq, dlq in rows if dlq is not None and self.is_bound(dlq)]
        self._db.executemany("UPDATE messages SET queue=?, deliveries=0, expires_at=NULL WHERE seq=?", moved)
        dead = [(seq,) for seq, dlq in rows if dlq is None or not self.is_bound(dlq)]
        self._db.executemany("UPDATE messages SET state=2 WHERE seq=?", dead)
        self.dead_lettered += len(rows)
        return len(rows)

    def transaction(self) -> Transaction:
        """A transactional receive (and send): see ``Transaction``."""
        self._tx_counter += 1
        return Transaction(self, f"tx:{id(self)}:{self._tx_counter}")

    # ------------------------------------------------------------ inspection

    def queues(self) -> list[QueueInfo]:
        """Every queue that is bound or still holds messages (dead ones of an unbound queue too)."""
        names = {row[0] for row in self._db.execute("SELECT name FROM queues")}
        names |= {row[0] for row in self._db.execute("SELECT DISTINCT queue FROM messages")}
        return [self.info(name) for name in sorted(names)]

    def info(self, queue: str) -> QueueInfo:
        depth = [0] * PRIORITIES
        leased = dead = size = 0
        for priority, state, count, nbytes in self._db.execute(
                "SELECT priority, state, count(*), coalesce(sum(length(body)), 0) FROM messages WHERE queue=? "
                "GROUP BY priority, state", (queue,)):
            size += nbytes
            if state == READY:
                depth[priority] = count
            elif state == LEASED:
                leased += count
            else:
                dead += count
        row = self._db.execute("SELECT draining FROM queues WHERE name=?", (queue,)).fetchone()
        return QueueInfo(queue, row is not None, bool(row and row[0]), tuple(depth), leased, dead, size)

    # ------------------------------------------------------------ store and forward: sending side

    def enqueue_remote(self, dest: str, queue: str, items: Sequence[tuple[bytes, int]], *,
                       ttl: float | None = None, now: float | None = None) -> list[int]:
        """Commit messages for ``queue`` on node ``dest`` to the transmission queue;
        returns their transmission ids (the second half of their message ids).
        ``ttl``: seconds (wall clock, ``now`` or ``time.time()``) the message may
        take to be received, transmission included (see ``xmit_expire``)."""
        check_queue_name(queue)
        if not isinstance(dest, str) or not dest or len(dest.encode()) > MAX_QUEUE_NAME:
            raise UsageError(f"destination node name must be a non-empty str, got {dest!r}")
        ttl = check_ttl(ttl, MAX_FORWARD_TTL)
        expires = None if ttl is None else (time.time() if now is None else now) + ttl
        rows = [(dest, queue, check_priority(priority), check_body(body), expires) for body, priority in items]
        with self._tx():
            self._db.executemany("INSERT INTO xmit(dest, queue, priority, body, expires_at) VALUES(?, ?, ?, ?, ?)",
                                 rows)
            last = int(self._db.execute("SELECT seq FROM sqlite_sequence WHERE name='xmit'").fetchone()[0])
        return list(range(last - len(rows) + 1, last + 1))

    def xmit_dests(self) -> list[str]:
        return [row[0] for row in self._db.execute("SELECT DISTINCT dest FROM xmit ORDER BY dest")]

    def xmit_pending(self, dest: str, *, after: int = 0, limit: int = 256, max_bytes: int = 48_000,
                     now: float | None = None) -> list[Outgoing]:
        """Rows for ``dest`` with ids above ``after``, oldest first, up to ``limit`` rows and about
        ``max_bytes``; rows expired by ``now`` (default ``time.time()``) are left for ``xmit_expire``."""
        out: list[Outgoing] = []
        size = 0
        for seq, queue, priority, body, expires_at in self._db.execute(
                "SELECT seq, queue, priority, body, expires_at FROM xmit WHERE dest=? AND seq>? "
                "AND (expires_at IS NULL OR expires_at > ?) ORDER BY seq LIMIT ?",
                (dest, after, time.time() if now is None else now, limit)):
            if out and size + len(body) > max_bytes:
                break
            out.append(Outgoing(seq, dest, queue, priority, body, expires_at))
            size += len(body) + len(queue) + 16
        return out

    def xmit_floor(self, dest: str) -> int:
        """The lowest transmission id still held for ``dest`` (every lower one was acknowledged by it)."""
        row = self._db.execute("SELECT min(seq) FROM xmit WHERE dest=?", (dest,)).fetchone()
        if row[0] is not None:
            return int(row[0])
        return self.xmit_total() + 1

    def xmit_done(self, dest: str, seqs: Iterable[int]) -> int:
        """``dest`` committed these: forget them here."""
        with self._tx():
            # rowcount, not total_changes: the depth triggers change rows too
            return int(self._db.executemany("DELETE FROM xmit WHERE seq=? AND dest=?", [(s, dest) for s in seqs]).rowcount)

    def xmit_expire(self, now: float | None = None, *, in_flight: Container[int] = ()) -> int:
        """Move transmission rows whose TTL passed by ``now`` (default ``time.time()``) to the
        local queue ``XMIT_EXPIRED``, in one transaction; returns how many. Rows in
        ``in_flight`` (sent, acknowledgement awaited) stay: the receiver may hold them
        already, and they expire there too; if no acknowledgement comes, the next try
        finds them here expired."""
        with self._tx():
            rows = [row for row in self._db.execute(
                "SELECT seq, priority, body FROM xmit WHERE expires_at IS NOT NULL AND expires_at <= ? ORDER BY seq",
                (time.time() if now is None else now,)).fetchall() if row[0] not in in_flight]
            if not rows:
                return 0
            self._db.execute("INSERT OR IGNORE INTO queues(name) VALUES(?)", (XMIT_EXPIRED,))
            self._db.executemany("INSERT INTO messages(queue, priority, msg_id, body) VALUES(?, ?, ?, ?)",
                                 [(XMIT_EXPIRED, p, forwarded_id(self.origin, seq), body) for seq, p, body in rows])
            self._db.executemany("DELETE FROM xmit WHERE seq=?", [(seq,) for seq, _, _ in rows])
        self.dead_lettered += len(rows)
        return len(rows)

    def xmit_count(self, dest: str | None = None) -> int:
        if dest is None:
            return int(self._db.execute("SELECT count(*) FROM xmit").fetchone()[0])
        return int(self._db.execute("SELECT count(*) FROM xmit WHERE dest=?", (dest,)).fetchone()[0])

    def xmit_total(self) -> int:
        """How many messages were ever committed to the transmission queue."""
        row = self._db.execute("SELECT seq FROM sqlite_sequence WHERE name='xmit'").fetchone()
        return int(row[0]) if row else 0

    # ------------------------------------------------------------ store and forward: receiving side

    def accept_forwarded(self, origin: int, floor: int, batch: Sequence[Forwarded], *,
                         now: float | None = None) -> AcceptResult:
        """Commit a forwarded batch from store ``origin`` idempotently, in one transaction.

        Every message listed in the result's ``done`` is committed here (now or
        before), so the sender may forget it. A message whose queue is full
        (``max_depth``) is not committed and not listed (``full`` is set): the
        sender keeps it and sends it again later. A message with a ``ttl_ms``
        expires that long after ``now`` (default ``time.time()``): this node's clock."""
        if type(origin) is not int or type(floor) is not int:
            raise UsageError("origin and floor must be ints")
        arrived = time.time() if now is None else now
        accepted = duplicates = dead = 0
        done: list[int] = []
        full = False
        with self._tx():
            row = self._db.execute("SELECT floor FROM floors WHERE origin=?", (origin,)).fetchone()
            known_floor = int(row[0]) if row else 0
            if floor > known_floor:
                self._db.execute("INSERT INTO floors VALUES(?, ?) ON CONFLICT(origin) DO UPDATE SET floor=excluded.floor",
                                 (origin, floor))
                self._db.execute("DELETE FROM seen WHERE origin=? AND seq<?", (origin, floor))
                known_floor = floor
            for message in batch:
                if message.seq < known_floor or self._db.execute(
                        "SELECT 1 FROM seen WHERE origin=? AND seq=?", (origin, message.seq)).fetchone():
                    duplicates += 1
                    done.append(message.seq)
                    continue
                if not self._room(message.queue, 1):  # depth is kept by triggers, so this sees our inserts
                    full = True
                    continue
                state = READY if self._accepts(message.queue) else DEAD
                dead += state == DEAD
                accepted += state == READY
                msg_id = forwarded_id(origin, message.seq)
                expires = arrived + message.ttl_ms / 1000 if message.ttl_ms else None
                self._db.execute("INSERT INTO messages(queue, priority, msg_id, body, state, expires_at) "
                                 "VALUES(?, ?, ?, ?, ?, ?)",
                                 (message.queue, message.priority, msg_id, message.body, state, expires))
                self._db.execute("INSERT INTO seen VALUES(?, ?)", (origin, message.seq))
                if self.audit:
                    self._db.execute("INSERT INTO audit VALUES(?)", (msg_id,))
                done.append(message.seq)
        return AcceptResult(accepted, duplicates, dead, tuple(done), full)

    def seen_count(self) -> int:
        return int(self._db.execute("SELECT count(*) FROM seen").fetchone()[0])

    def audit_counts(self) -> dict[bytes, int]:
        """With ``audit=True``: how many times each forwarded id was committed to a queue here."""
        return {bytes(msg_id): int(n) for msg_id, n in
                self._db.execute("SELECT msg_id, count(*) FROM audit GROUP BY msg_id")}


class Transaction:
    """A transactional receive: messages it gets are leased to it and removed
    only by ``commit``, in the same SQLite transaction as its puts; ``rollback``
    (or an exception in its ``with`` block, or a crash) returns them."""

    def __init__(self, store: QueueStore, owner: str) -> None:
        self._store = store
        self._owner = owner
        self._tags: list[int] = []
        self._puts: list[tuple[str, bytes, int]] = []
        self._open = True

    def _check_open(self) -> None:
        if not self._open:
            raise UsageError("this transaction is finished; start another with store.transaction()")

    def get(self, queue: str, count: int = 1) -> list[Message]:
        self._check_open()
        messages = self._store.get(queue, self._owner, count)
        self._tags.extend(m.tag for m in messages)
        return messages

    def put(self, queue: str, body: bytes, priority: int = 0) -> None:
        """Buffer a send; it is committed with the transaction."""
        self._check_open()
        if not self._store._accepts(queue):
            raise UsageError(f"queue {queue!r} is not bound (or is draining); bind it before sending")
        self._puts.append((queue, check_body(body), check_priority(priority)))

    def commit(self) -> None:
        self._check_open()
        self._open = False
        store = self._store
        with store._tx():
            store._delete_leased(self._tags, self._owner)
            store._db.executemany("INSERT INTO messages(queue, priority, msg_id, body) VALUES(?, ?, ?, ?)",
                                  [(q, p, os.urandom(16), b) for q, b, p in self._puts])
            store._finish_drains(self._tags)

    def rollback(self) -> None:
        self._check_open()
        self._open = False
        self._store.release(self._tags, self._owner)

    def __enter__(self) -> Transaction:
        return self

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> None:
        if not self._open:
            return
        if kind is None:
            self.commit()
        else:
            self.rollback()
