"""Durable post-office records in SQLite (stdlib ``sqlite3``, WAL).

Theory of operation (how a post office survives a crash and restart): the post office's whole
state is a set of records ``(table, key) -> JSON``. After each batch of inputs
the shell commits the changed records in one transaction *before* any output
leaves, so whatever another PO or a host was told (an acknowledgement, a
DEREG, a FORWARD) is already on disk. WAL with ``synchronous=NORMAL`` keeps
every committed transaction across a kill -9 of the process (only a power
loss may drop the last ones); ``synchronous=FULL`` (``durable_fsync=True``)
survives that too, at an fsync per commit.

``incarnation`` counts the starts of this PO; it tells other POs which of two
member ids claiming one domain is the newer.
"""

from __future__ import annotations

import json
import os
import sqlite3
from typing import Any, Iterable

from .postoffice import Record

_SCHEMA = """
CREATE TABLE IF NOT EXISTS records (tbl TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL,
                                    PRIMARY KEY (tbl, key)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
"""


class Store:
    """One post office's records in one SQLite file."""

    def __init__(self, path: str | os.PathLike[str], *, durable_fsync: bool = False) -> None:
        self._db = sqlite3.connect(os.fspath(path), isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(f"PRAGMA synchronous={'FULL' if durable_fsync else 'NORMAL'}")
        self._db.executescript(_SCHEMA)

    def load(self) -> list[Record]:
        rows = self._db.execute("SELECT tbl, key, value FROM records").fetchall()
        return [(tbl, key, json.loads(value)) for tbl, key, value in rows]

    def commit(self, records: Iterable[Record]) -> None:
        upserts: list[tuple[str, str, str]] = []
        deletes: list[tuple[str, str]] = []
        for table, key, value in records:
            if value is None:
                deletes.append((table, key))
            else:
                upserts.append((table, key, json.dumps(value, separators=(",", ":"))))
        if not upserts and not deletes:
            return
        db = self._db
        db.execute("BEGIN")
        try:
            if deletes:
                db.executemany("DELETE FROM records WHERE tbl = ? AND key = ?", deletes)
            if upserts:
                db.executemany("INSERT OR REPLACE INTO records (tbl, key, value) VALUES (?, ?, ?)", upserts)
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def next_incarnation(self) -> int:
        db = self._db
        db.execute("BEGIN")
        row = db.execute("SELECT value FROM meta WHERE name = 'incarnation'").fetchone()
        value = (row[0] if row else 0) + 1
        db.execute("INSERT OR REPLACE INTO meta (name, value) VALUES ('incarnation', ?)", (value,))
        db.execute("COMMIT")
        return value

    def close(self) -> None:
        self._db.close()


def read_table(path: str | os.PathLike[str], table: str) -> list[tuple[str, Any]]:
    """Read one table of a (possibly live) store, for checkers and tools."""
    db = sqlite3.connect(f"file:{os.fspath(path)}?mode=ro", uri=True)
    try:
        rows = db.execute("SELECT key, value FROM records WHERE tbl = ?", (table,)).fetchall()
    finally:
        db.close()
    return [(key, json.loads(value)) for key, value in rows]
