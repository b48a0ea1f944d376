"""Read trace directories (schema 1, docs/traces.md) into DataFrames.

Theory of operation
-------------------
A run directory holds ``meta.json``, ``events/`` and ``net/`` (Parquet part
files), and optionally ``stats/``. Every reader takes a list of run
directories and returns one DataFrame with an added ``run`` column (the
directory path exactly as given), so that every job can group by run and a
sweep can analyse hundreds of runs in one plan.

Events carry order: within a node, row order is event order (deliveries in
particular). Spark does not keep file row order through shuffles, so
``read_events`` adds ``pos``, a long that sorts rows in trace order: the
part file's index (part files sort by name in write order) in the high bits
and Parquet's ``_metadata.row_index`` in the low 40 bits. A trace of real
processes has a file set per member, so there ``pos`` is the rank by
``t`` (one host clock), ties broken by file order; that ranking runs in one
partition, which real traces, thousands of rows per second, can afford. Jobs order by
``pos``, never by ``t`` alone, because many events share an instant.

Optional event columns (``dest``, ``reason``, ``optimistic``...) are added as
typed nulls when a trace lacks them, so jobs can rely on the full schema.

``runs_meta`` turns each ``meta.json`` into one row (built from literals in
the JVM: a DataFrame made with ``createDataFrame`` from Python rows would start a
Python worker in every job that reads it): nodes, duration, seed,
loss, gossip_interval (the scenario's ``[protocol]`` value or Config's default, 0.1),
net_bucket, the group orders, and the pause faults (which the events do not
record, but which false-suspicion counting needs).

Bad input (a missing directory, a directory that is not a trace, a part
file that is not Parquet or lacks t/node/kind or t/node/msg_type) raises
``UsageError`` with one line naming the run, before any Spark job.
"""

from __future__ import annotations

import json
from functools import reduce
from pathlib import Path
from typing import Any, Iterable

from sgcs.errors import UsageError
from sgcs.transport.params import Params

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

DEFAULT_GOSSIP_INTERVAL = Params().gossip_interval
"""Seconds per gossip round when a scenario does not set one (sgcs.Config's default)."""
ROW_INDEX_BITS = 40
"""``pos`` = part index << 40 | row index: 10^12 rows per part file is far beyond any trace."""
REAL_SOURCE = "real"
"""meta.json's ``scenario.source`` in traces of real processes (``sgcs.io.recorder``)."""

EVENT_COLUMNS: dict[str, T.DataType] = {
    "t": T.DoubleType(), "node": T.LongType(), "kind": T.StringType(), "group": T.StringType(),
    "sender": T.LongType(), "seq": T.LongType(), "order": T.StringType(), "view_id": T.StringType(),
    "members": T.ArrayType(T.LongType()), "optimistic": T.BooleanType(), "target": T.LongType(),
    "size": T.IntegerType(), "dest": T.LongType(), "reason": T.StringType(),
}
NET_COLUMNS: dict[str, T.DataType] = {
    "t": T.DoubleType(), "node": T.LongType(), "msg_type": T.StringType(),
    **{c: T.LongType() for c in ("sent_count", "sent_bytes", "recv_count", "recv_bytes", "lost_count")},
}
STATS_COLUMNS: dict[str, T.DataType] = {
    "t": T.DoubleType(), "node": T.LongType(), "group": T.StringType(),
    "buffered": T.LongType(), "window": T.LongType(),
}

META_SCHEMA = T.StructType([
    T.StructField("run", T.StringType(), False),
    T.StructField("nodes", T.LongType()),
    T.StructField("duration", T.DoubleType()),
    T.StructField("seed", T.LongType()),
    T.StructField("loss", T.DoubleType()),
    T.StructField("gossip_interval", T.DoubleType()),
    T.StructField("net_bucket", T.DoubleType()),
    T.StructField("orders", T.MapType(T.StringType(), T.StringType())),
    T.StructField("pauses", T.ArrayType(T.StructType([
        T.StructField("node", T.LongType()), T.StructField("start", T.DoubleType()),
        T.StructField("end", T.DoubleType())]))),
    T.StructField("scenario", T.StringType()),
])


def _parts(directory: Path) -> list[str]:
    """Part file names as Spark lists them (it skips names starting with _ or .)."""
    if not directory.is_dir():
        return []
    return sorted(p.name for p in directory.glob("*.parquet") if not p.name.startswith(("_", ".")))


def check_run(run: str) -> dict[str, Any]:
    """The run's meta.json, after checking that ``run`` is a trace directory."""
    path = Path(run)
    if not path.is_dir():
        raise UsageError(f"{run}: no such directory")
    meta_path = path / "meta.json"
    if not meta_path.is_file():
        raise UsageError(f"{run}: not a trace directory (no meta.json; write one with sgcs simulate --out)")
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, ValueError) as exc:
        raise UsageError(f"{run}: unreadable meta.json ({exc})") from None
    if not isinstance(meta, dict) or meta.get("schema", 1) != 1:
        raise UsageError(f"{run}: meta.json is not trace schema 1")
    for dataset in ("events", "net"):
        if not _parts(path / dataset):
            raise UsageError(f"{run}: not a trace directory (no {dataset}/*.parquet)")
        _check_columns(run, dataset)
    return meta


REQUIRED = {"events": ("t", "node", "kind"), "net": ("t", "node", "msg_type")}


def _check_columns(run: str, dataset: str) -> None:
    """Every part file of RUN/dataset is Parquet with the columns no job can do without
    (footers only: a bad file fails here in one line, not deep inside a Spark job)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    for name in _parts(Path(run) / dataset):
        try:
            names = set(pq.read_schema(Path(run) / dataset / name).names)
        except (OSError, pa.ArrowException) as exc:
            reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise UsageError(f"{run}: {dataset}/{name} is not readable Parquet ({reason})") from None
        missing = [c for c in REQUIRED[dataset] if c not in names]
        if missing:
            raise UsageError(f"{run}: {dataset}/{name} lacks column(s) {', '.join(missing)}")


def dataset_rows(run: str, dataset: str) -> int | None:
    """Rows of RUN/dataset from the Parquet footers (no Spark job); None when it is absent."""
    import pyarrow.parquet as pq

    parts = _parts(Path(run) / dataset)
    if not parts:
        return None
    return sum(pq.ParquetFile(Path(run) / dataset / name).metadata.num_rows for name in parts)


def event_rows(runs: list[str]) -> int:
    """Event rows of all the runs (footers only)."""
    return sum(dataset_rows(run, "events") or 0 for run in runs)


def _conform(df: DataFrame, columns: dict[str, T.DataType]) -> DataFrame:
    """Cast the known columns and add missing ones as typed nulls (extra columns stay)."""
    present = set(df.columns)
    known = [(F.col(n).cast(d) if n in present else F.lit(None).cast(d)).alias(n) for n, d in columns.items()]
    return df.select(*known, *[c for c in df.columns if c not in columns])


def _union(frames: Iterable[DataFrame]) -> DataFrame:
    return reduce(lambda a, b: a.unionByName(b, allowMissingColumns=True), frames)


def _read_events_one(spark: SparkSession, run: str) -> DataFrame:
    parts = _parts(Path(run) / "events")
    index = F.create_map(*[F.lit(x) for i, name in enumerate(parts) for x in (name, i)])
    df = spark.read.parquet(str(Path(run) / "events")).select("*", "_metadata")
    part = F.coalesce(index[F.col("_metadata.file_name")], F.lit(0)).cast("long")
    pos = F.shiftleft(part, ROW_INDEX_BITS) + F.col("_metadata.row_index")
    events = _conform(df, EVENT_COLUMNS).withColumn("pos", pos).withColumn("run", F.lit(run)).drop("_metadata")
    if check_run(run).get("scenario", {}).get("source") == REAL_SOURCE:
        # Real members write a file set each (sorted by node): their shared
        # clock orders rows across nodes, file order breaks ties within one.
        events = events.withColumn("pos", F.row_number().over(Window.orderBy("t", "pos")).cast("long"))
    return events


def read_events(spark: SparkSession, runs: list[str]) -> DataFrame:
    """Every event row of every run, with ``run`` and ``pos`` (trace order within a run)."""
    for run in runs:
        check_run(run)
    return _union(_read_events_one(spark, run) for run in runs)


def read_net(spark: SparkSession, runs: list[str]) -> DataFrame:
    """The ``net`` rows of every run, with ``run``."""
    for run in runs:
        check_run(run)
    return _union(_conform(spark.read.parquet(str(Path(r) / "net")), NET_COLUMNS).withColumn("run", F.lit(r))
                  for r in runs)


def read_stats(spark: SparkSession, runs: list[str]) -> DataFrame | None:
    """The optional ``stats`` rows of the runs that have them, with ``run``; None if none has."""
    present = [r for r in runs if _parts(Path(r) / "stats")]
    if not present:
        return None
    return _union(_conform(spark.read.parquet(str(Path(r) / "stats")), STATS_COLUMNS).withColumn("run", F.lit(r))
                  for r in present)


def _pauses(scenario: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for fault in scenario.get("faults", []) or []:
        if "pause" in fault:
            start = float(fault.get("at", 0.0))
            end = start + float(fault.get("for", 0.0))
            out += [{"node": int(n), "start": start, "end": end} for n in fault["pause"]]
    return out


def meta_row(run: str, meta: dict[str, Any]) -> dict[str, Any]:
    """One ``runs_meta`` row from a parsed meta.json."""
    scenario = meta.get("scenario", {}) or {}
    protocol = scenario.get("protocol", {}) or {}
    network = scenario.get("network", {}) or {}
    groups = scenario.get("groups", []) or []
    return {
        "run": run,
        "nodes": int(meta["nodes"]) if meta.get("nodes") is not None else None,
        "duration": float(meta["duration"]) if meta.get("duration") is not None else None,
        "seed": int(meta["seed"]) if meta.get("seed") is not None else None,
        "loss": float(network.get("loss", 0.0)),
        "gossip_interval": float(protocol.get("gossip_interval", DEFAULT_GOSSIP_INTERVAL)),
        "net_bucket": float(meta.get("net_bucket", 1.0)),
        "orders": {str(g.get("name")): str(g.get("order", "fifo")) for g in groups},
        "pauses": _pauses(scenario),
        "scenario": json.dumps(scenario, sort_keys=True),
    }


def meta_rows(runs: list[str]) -> list[dict[str, Any]]:
    """``meta_row`` of every run, in the order given (no Spark)."""
    return [meta_row(run, check_run(run)) for run in runs]


def _literal(value: Any, dtype: T.DataType) -> Column:
    """``value`` (a meta_row field) as a literal Column of type ``dtype``."""
    if value is None:
        return F.lit(None).cast(dtype)
    if isinstance(dtype, T.StructType):
        return F.struct(*[_literal(value.get(f.name), f.dataType).alias(f.name) for f in dtype.fields])
    if isinstance(dtype, T.ArrayType):
        return F.array(*[_literal(v, dtype.elementType) for v in value]).cast(dtype)
    if isinstance(dtype, T.MapType):
        return F.create_map(*[F.lit(x) for pair in value.items() for x in pair]).cast(dtype)
    return F.lit(value).cast(dtype)


def runs_meta(spark: SparkSession, runs: list[str]) -> DataFrame:
    """One row per run: its meta.json fields that jobs need (see the module doc).
    Built from literals in the JVM, not ``createDataFrame``: rows parallelised from Python
    are read back by a Python worker in every job that joins them, which costs a small
    trace more than the join."""
    rows = [_literal(row, META_SCHEMA) for row in meta_rows(runs)]
    return spark.range(1).select(F.inline(F.array(*rows)))
