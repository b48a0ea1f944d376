"""What a durable replica of a replicated queue keeps beside its queue: its
standing (ops applied, digest, generation, last primary view, tentative flag,
attempted view, delivery limit in force) and its dedup window, in the same
SQLite database as the queue and written in the same transactions, so a
replica restarted after ``kill -9`` holds a state some replica had at some
point of the stream (docs/queues.md, Durable replicas).

These tables travel in a provider's snapshot image too; a replica that loads
one writes its own standing and the snapshot's dedup ids over them.
"""

from __future__ import annotations

import sqlite3
import struct
from collections.abc import Sequence
from dataclasses import dataclass

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS rq_standing(one INTEGER PRIMARY KEY CHECK(one = 1), name TEXT NOT NULL, "
    "value BLOB NOT NULL)",
    "CREATE TABLE IF NOT EXISTS rq_dedup(n INTEGER PRIMARY KEY, id BLOB NOT NULL)",
)
_RECORD = struct.Struct(">QQQI?QHH")
"""applied, digest, generation, delivery limit in force (0: none), tentative,
attempted generation, then the counts of the primary's and the attempt's members."""
_U64 = struct.Struct(">Q")


@dataclass(frozen=True, slots=True)
class Record:
    """A replica's standing, as ``ReplicatedQueue`` holds it."""
    applied: int
    digest: int
    generation: int
    limit: int
    tentative: bool
    primary: tuple[int, ...]
    attempt_generation: int
    attempt: tuple[int, ...]

    def encode(self) -> bytes:
        return (_RECORD.pack(self.applied, self.digest, self.generation, self.limit, self.tentative,
                             self.attempt_generation, len(self.primary), len(self.attempt))
                + b"".join(_U64.pack(m) for m in self.primary + self.attempt))

    @classmethod
    def decode(cls, data: bytes) -> Record:
        applied, digest, generation, limit, tentative, attempt_generation, count, attempted = \
            _RECORD.unpack_from(data)
        if len(data) != _RECORD.size + 8 * (count + attempted):
            raise ValueError("replica record of the wrong length")
        ids = tuple(_U64.unpack_from(data, _RECORD.size + 8 * i)[0] for i in range(count + attempted))
        return cls(applied, digest, generation, limit, tentative, ids[:count], attempt_generation, ids[count:])


def create(db: sqlite3.Connection) -> None:
    for statement in _SCHEMA:
        db.execute(statement)


def load(db: sqlite3.Connection, name: str) -> tuple[Record | None, list[bytes]]:
    """The standing saved for queue ``name`` (None: a new replica) and its dedup
    ids, oldest first. Raises ``ValueError`` if the file is another queue's."""
    row = db.execute("SELECT name, value FROM rq_standing").fetchone()
    if row is None:
        return None, []
    if row[0] != name:
        raise ValueError(f"it holds a replica of queue {row[0]!r}, not {name!r}")
    ids = [bytes(r[0]) for r in db.execute("SELECT id FROM rq_dedup ORDER BY n")]
    return Record.decode(bytes(row[1])), ids


def save(db: sqlite3.Connection, name: str, record: Record, new_ids: Sequence[bytes], last: int,
         window: int) -> None:
    """Write the standing and the ids remembered since the last save (numbered
    up to ``last``), and forget those that fell out of the dedup window."""
    db.execute("INSERT OR REPLACE INTO rq_standing VALUES(1, ?, ?)", (name, record.encode()))
    if new_ids:
        first = last - len(new_ids) + 1
        db.executemany("INSERT OR REPLACE INTO rq_dedup VALUES(?, ?)",
                       [(first + i, key) for i, key in enumerate(new_ids)])
        db.execute("DELETE FROM rq_dedup WHERE n <= ?", (last - window,))


def replace_ids(db: sqlite3.Connection, ids: Sequence[bytes]) -> None:
    """The dedup window becomes ``ids`` (a loaded snapshot's), numbered 1 to len(ids)."""
    db.execute("DELETE FROM rq_dedup")
    db.executemany("INSERT INTO rq_dedup VALUES(?, ?)", [(i + 1, key) for i, key in enumerate(ids)])
