"""Trace writer: schema 1 (docs/traces.md).

Theory of operation
-------------------
A run directory holds ``meta.json``, ``events/``, ``net/`` and ``stats/`` (occupancy
samples, a column set added to schema 1); the three
datasets are Parquet part files (``part-00000.parquet``...) so that Spark,
pandas and pyarrow read them as one table each. The simulator writes one
run's files from one process; real member processes (``sgcs.io.recorder``)
share a run directory, each naming its part files with its own prefix
(``part-<node>-00000.parquet``), so names sort by node, then in write order.

``EventsWriter.add`` is on the simulator's hot path: it only appends
``(t, node, TraceEvent)`` to three lists. When the buffered rows (plus the
members of buffered ``view`` rows, which can be thousands each) reach a
budget, the buffer becomes one Arrow record batch, column by column, and is
written as one row group; a part file is closed after a number of row groups.
Memory therefore stays bounded however long the run. Rows are written in the
order they were added, which is the order events happened.

``NetCounters`` keeps, for the current time bucket only, per-message-type
lists of per-node counters. The simulator calls ``roll`` at each bucket
boundary, which turns the non-zero counters into ``net`` rows.

pyarrow is imported lazily, so that the protocol package never needs it; a
missing pyarrow is a ``UsageError`` telling the user what to install.
"""

from __future__ import annotations

import json
from collections import Counter
from operator import attrgetter
from pathlib import Path
from typing import Any

import numpy as np

from .actions import TraceEvent
from .errors import UsageError

SCHEMA_VERSION = 1
ROW_BUDGET = 200_000
"""Buffered rows (counting each view member as a row) before a row group is written."""
ROW_GROUPS_PER_PART = 32
NET_COLUMNS = ("sent_count", "sent_bytes", "recv_count", "recv_bytes", "lost_count")
_SENT, _SENT_BYTES, _RECV, _RECV_BYTES, _LOST = range(5)


def pyarrow_modules() -> tuple[Any, Any]:
    """(pyarrow, pyarrow.parquet), or a UsageError saying how to get them."""
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError:
        raise UsageError(
            "writing a trace needs pyarrow, which is not installed; run: pip install 'sgcs[sim]'"
        ) from None
    return pyarrow, pyarrow.parquet


def events_schema() -> Any:
    pa, _ = pyarrow_modules()
    return pa.schema(
        [
            ("t", pa.float64()),
            ("node", pa.int64()),
            ("kind", pa.string()),
            ("group", pa.string()),
            ("sender", pa.int64()),
            ("seq", pa.int64()),
            ("order", pa.string()),
            ("view_id", pa.string()),
            ("members", pa.list_(pa.int64())),
            ("optimistic", pa.bool_()),
            ("target", pa.int64()),
            ("size", pa.int32()),
            ("dest", pa.int64()),
            ("reason", pa.string()),
        ],
        metadata={"sgcs.schema": str(SCHEMA_VERSION)},
    )


def net_schema() -> Any:
    pa, _ = pyarrow_modules()
    return pa.schema(
        [("t", pa.float64()), ("node", pa.int64()), ("msg_type", pa.string())]
        + [(name, pa.int64()) for name in NET_COLUMNS],
        metadata={"sgcs.schema": str(SCHEMA_VERSION)},
    )


# TraceEvent fields in schema order, after t and node.
_EVENT_FIELDS = ("kind", "group", "sender", "seq", "order", "view_id", "members",
                 "optimistic", "target", "size", "dest", "reason")


class _PartWriter:
    """Writes record batches as row groups into rotating part files."""

    def __init__(self, directory: Path, schema: Any, prefix: str = "", groups_per_part: int | None = None,
                 first_part: int = 0) -> None:
        self._pa, self._pq = pyarrow_modules()
        self._dir = directory
        self._schema = schema
        self._prefix = prefix
        self._groups_per_part = ROW_GROUPS_PER_PART if groups_per_part is None else groups_per_part
        self._writer: Any = None
        self._part = first_part
        self._groups_in_part = 0
        directory.mkdir(parents=True, exist_ok=True)

    def write(self, columns: list[Any]) -> None:
        batch = self._pa.record_batch(columns, schema=self._schema)
        if self._writer is None:
            self._writer = self._pq.ParquetWriter(self._hidden_path(), self._schema, compression="zstd")
        self._writer.write_batch(batch)
        self._groups_in_part += 1
        if self._groups_in_part >= self._groups_per_part:
            self._close_part()

    def close(self, empty_columns: list[Any]) -> None:
        """Close; a run without rows still gets one (empty) part file."""
        if self._writer is None and self._part == 0:
            self.write(empty_columns)
        self._close_part()

    @property
    def parts(self) -> int:
        """Part files closed so far."""
        return self._part

    def cut(self) -> None:
        """Close the current part file: what is written next starts a new one."""
        self._close_part()

    def _final_path(self) -> Path:
        return self._dir / f"part-{self._prefix}{self._part:05d}.parquet"

    def _hidden_path(self) -> Path:
        """Where a part is written until complete: readers skip hidden files,
        so a process killed mid-write leaves no truncated part behind."""
        return self._dir / f".{self._final_path().name}.inprogress"

    def _close_part(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._hidden_path().rename(self._final_path())
            self._writer = None
            self._part += 1
            self._groups_in_part = 0


class EventsWriter:
    """Buffers event rows and writes them to ``RUN/events/``.

    ``prefix`` and ``groups_per_part`` as in ``_PartWriter``: a real member
    writes every flush as a complete part file of its own, so that a process
    killed with SIGKILL leaves readable files behind."""

    def __init__(self, directory: Path, prefix: str = "", groups_per_part: int | None = None) -> None:
        self._pa, _ = pyarrow_modules()
        import pyarrow.compute

        self._pc = pyarrow.compute
        self._schema = events_schema()
        self._parts = _PartWriter(directory, self._schema, prefix, groups_per_part)
        self._t: list[float] = []
        self._node: list[int] = []
        self._events: list[TraceEvent] = []
        self._weight = 0
        self.rows = 0
        self.kinds: Counter[str] = Counter()
        """Rows written per kind."""

    def add(self, t: float, node: int, event: TraceEvent) -> None:
        self._t.append(t)
        self._node.append(node)
        self._events.append(event)
        members = event.members
        self._weight += 1 if members is None else 1 + len(members)
        if self._weight >= ROW_BUDGET:
            self.flush()

    def flush(self) -> None:
        if not self._t:
            return
        columns = self._columns()
        self._parts.write(columns)
        self.rows += len(self._t)
        for entry in self._pc.value_counts(columns[2]).to_pylist():
            self.kinds[entry["values"]] += entry["counts"]
        self._t, self._node, self._events, self._weight = [], [], [], 0

    def close(self) -> None:
        self.flush()
        self._parts.close(self._columns())

    def cut(self) -> int:
        """Write what is buffered and close the part file; the part files closed so far."""
        self.flush()
        self._parts.cut()
        return self._parts.parts

    def _columns(self) -> list[Any]:
        pa, schema, events = self._pa, self._schema, self._events
        columns = [pa.array(self._t, pa.float64()), pa.array(self._node, pa.int64())]
        for name in _EVENT_FIELDS:
            if name == "members":
                columns.append(self._members_column())
                continue
            values = list(map(attrgetter(name), events))
            columns.append(pa.array(values, schema.field(name).type))
        return columns

    def _members_column(self) -> Any:
        """The ``members`` lists, built from numpy copies of each distinct
        tuple: at 10,000 nodes every initial ``view`` row lists 10,000
        members, and they are all one shared tuple."""
        pa = self._pa
        arrays: dict[int, np.ndarray] = {}  # id(tuple) -> its ids; the rows keep the tuples alive
        offsets, chunks, missing, total = [0], [], [], 0
        for event in self._events:
            members = event.members
            missing.append(members is None)
            if members is not None:
                ids = arrays.get(id(members))
                if ids is None:
                    ids = arrays[id(members)] = np.fromiter(members, np.int64, len(members))
                chunks.append(ids)
                total += len(ids)
            offsets.append(total)
        values = np.concatenate(chunks) if chunks else np.zeros(0, np.int64)
        return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), pa.array(values, pa.int64()),
                                        type=pa.list_(pa.int64()), mask=pa.array(missing, pa.bool_()))


def stats_schema() -> Any:
    pa, _ = pyarrow_modules()
    return pa.schema([("t", pa.float64()), ("node", pa.int64()), ("group", pa.string()),
                      ("buffered", pa.int64()), ("window", pa.int64())],
                     metadata={"sgcs.schema": str(SCHEMA_VERSION)})


class StatsWriter:
    """Per-node, per-group occupancy samples, written to ``RUN/stats/``: at
    every bucket boundary ``t``, the messages a node holds (``buffered``) and
    its flow-control window (``window``: records not yet stable)."""

    def __init__(self, directory: Path, prefix: str = "", groups_per_part: int | None = None) -> None:
        self._pa, _ = pyarrow_modules()
        self._schema = stats_schema()
        self._parts = _PartWriter(directory, self._schema, prefix, groups_per_part)
        self._rows: list[list[Any]] = [[] for _ in self._schema]

    def flush(self) -> None:
        self._write()

    def add(self, t: float, node: int, group: str, buffered: int, window: int) -> None:
        for column, value in zip(self._rows, (t, node, group, buffered, window)):
            column.append(value)
        if len(self._rows[0]) >= ROW_BUDGET:
            self._write()

    def close(self) -> None:
        self._write()
        self._parts.close([self._pa.array([], field.type) for field in self._schema])

    def _write(self) -> None:
        if self._rows[0]:
            columns = [self._pa.array(values, field.type) for values, field in zip(self._rows, self._schema)]
            self._parts.write(columns)
            self._rows = [[] for _ in self._schema]


class NetCounters:
    """Per-node traffic of the current bucket, written to ``RUN/net/``.

    Counters are indexed 0..nodes-1; ``ids`` maps an index to the ``node``
    written in the rows (default: the index itself)."""

    def __init__(self, directory: Path, nodes: int, ids: tuple[int, ...] | None = None, prefix: str = "",
                 groups_per_part: int | None = None) -> None:
        self._pa, _ = pyarrow_modules()
        self._schema = net_schema()
        self._parts = _PartWriter(directory, self._schema, prefix, groups_per_part)
        self._nodes = nodes
        self._ids = tuple(range(nodes)) if ids is None else ids
        self._counts: dict[str, list[list[int]]] = {}
        self._rows: list[list[Any]] = [[] for _ in self._schema]
        self.rows = 0

    def counters(self, label: str) -> list[list[int]]:
        """The five per-node counter lists of one message type (hot path)."""
        counts = self._counts.get(label)
        if counts is None:
            counts = self._counts[label] = [[0] * self._nodes for _ in NET_COLUMNS]
        return counts

    def sent(self, node: int, label: str, size: int) -> None:
        counts = self.counters(label)
        counts[_SENT][node] += 1
        counts[_SENT_BYTES][node] += size

    def received(self, node: int, label: str, size: int) -> None:
        counts = self.counters(label)
        counts[_RECV][node] += 1
        counts[_RECV_BYTES][node] += size

    def lost(self, nodes: list[int], label: str) -> None:
        lost = self.counters(label)[_LOST]
        for node in nodes:
            lost[node] += 1

    def roll(self, bucket_start: float) -> None:
        """Emit the finished bucket's non-zero rows and start a new bucket."""
        rows = self._rows
        for label in sorted(self._counts):
            counts = self._counts[label]
            for index, values in enumerate(zip(*counts)):
                if any(values):
                    for column, value in zip(rows, (bucket_start, self._ids[index], label, *values)):
                        column.append(value)
        self._counts = {}
        if len(rows[0]) >= ROW_BUDGET:
            self._write()

    def flush(self) -> None:
        """Write the rows of finished buckets now."""
        self._write()

    def close(self, bucket_start: float) -> None:
        self.roll(bucket_start)
        self._write()
        self._parts.close(self._arrays([[] for _ in self._schema]))

    def _write(self) -> None:
        if self._rows[0]:
            self._parts.write(self._arrays(self._rows))
            self.rows += len(self._rows[0])
            self._rows = [[] for _ in self._schema]

    def _arrays(self, rows: list[list[Any]]) -> list[Any]:
        return [self._pa.array(values, field.type) for values, field in zip(rows, self._schema)]


def write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n")
