"""Durable subscription state in SQLite (stdlib ``sqlite3``, WAL).

Theory of operation (durable subscriptions; docs/flows.md, "State transfer and
durable subscriptions"): the
state a durable subscriber last held lives *with the subscriber*, in its own
SQLite file: one row per ``(space, predicate, key)``. The shell stores the
rows a batch of deliveries changed before it reads the next batch, so after
a crash the file holds a state the subscriber really had (perhaps a few
events old, never a state it never had). On return under the same name with
the same file, these rows are the ``s0`` its catch-up request carries; a
keeper computes the expansion from them to the current rows.

A keeper stores its full states the same way (predicate ``true``), to start
from them when it finds no other keeper. JSON keeps the values typed (int,
float, str, bool, and windows as lists); the schema re-checks them on load.
"""

from __future__ import annotations

import json
import os
import sqlite3
from typing import Any, Mapping

from .collapse import Key, Row

_SCHEMA = """
CREATE TABLE IF NOT EXISTS rows (space TEXT NOT NULL, predicate TEXT NOT NULL, key TEXT NOT NULL,
                                 row TEXT NOT NULL, PRIMARY KEY (space, predicate, key)) WITHOUT ROWID;
"""


class FlowStore:
    """The durable rows of one member's subscriptions."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._db = sqlite3.connect(os.fspath(path), isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)

    def load(self, space: str, predicate: str) -> dict[Key, Row] | None:
        """The rows last stored for this subscription; None if it never was."""
        found = self._db.execute("SELECT key, row FROM rows WHERE space = ? AND predicate = ?",
                                 (space, predicate)).fetchall()
        if not found:
            return None
        return {tuple(json.loads(k)): _row(json.loads(r)) for k, r in found}

    def save(self, space: str, predicate: str, rows: Mapping[Key, Row]) -> None:
        if not rows:
            return
        values = [(space, predicate, json.dumps(list(k)), json.dumps(list(r))) for k, r in rows.items()]
        db = self._db
        db.execute("BEGIN")
        try:
            db.executemany("INSERT OR REPLACE INTO rows (space, predicate, key, row) VALUES (?, ?, ?, ?)", values)
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def close(self) -> None:
        self._db.close()


def _row(values: list[Any]) -> Row:
    # JSON has no tuples: a window column (float[W]) comes back as a list
    return tuple(tuple(v) if isinstance(v, list) else v for v in values)
