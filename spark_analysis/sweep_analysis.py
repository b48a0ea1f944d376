"""The analysis of a sweep's runs (``sgcs sweep``), as Spark DataFrame jobs over
all the traces at once: per-member load (messages and bytes per second, sent
and received, by ``msg_type`` and in total) and failure-detection times, each
against N, with growth fits of the mean over seeds at each N
(:mod:`sgcs.analysis.fit`). :mod:`sgcs.analysis.sweep_report` writes them out.
"""

from __future__ import annotations

import math
from typing import Any

from .sweep_spec import Point, Sweep

LOAD_METRICS = ("msgs_per_member_per_s", "bytes_per_member_per_s",
                "recv_msgs_per_member_per_s", "recv_bytes_per_member_per_s")
DETECTION_METRICS = ("first_suspicion_s", "exclusion_median_s", "exclusion_max_s")
_DETECTION_KINDS = ("crash", "recover", "suspect", "view", "join", "leave")


def _busiest_member(net: Any, meta: Any) -> Any:
    """Per run: the largest messages sent per second by any one member (hot spots)."""
    from pyspark.sql import functions as F

    per_node = net.groupBy("run", "node").agg(F.sum("sent_count").alias("sent"))
    return (per_node.groupBy("run").agg(F.max("sent").alias("sent")).join(meta, "run")
            .select("run", (F.col("sent") / F.col("duration")).alias("max_msgs_per_member_per_s")))


def analyse_runs(spark: Any, sweep: Sweep, results: list[dict[str, Any]]) -> dict[str, Any]:
    """Load and detection tables of the successful runs, and their fits against N."""
    from pyspark.sql import functions as F

    from .detection import detection_times
    from .load import per_member_load
    from .readers import read_events, read_net, runs_meta

    ok = [r for r in results if r["ok"]]
    if not ok:
        return {"load": [], "detection": [], "fits": {"load": [], "detection": []}}
    points = {r["out"]: _find(sweep, r["name"]) for r in ok}  # the readers key runs by directory
    runs = list(points)
    meta, net = runs_meta(spark, runs), read_net(spark, runs)
    load = _load_table(per_member_load(net, meta).toPandas(), _busiest_member(net, meta).toPandas(), points)
    if not any("crash" in fault for p in points.values() for fault in p.raw.get("faults", [])):
        return {"load": _records(load), "detection": [], "fits": {"load": _load_fits(load), "detection": []}}
    # Only the kinds detection needs: the send and deliver rows are most of a trace.
    events = read_events(spark, runs).where(F.col("kind").isin(*_DETECTION_KINDS))
    detection = detection_times(events, meta).withColumnsRenamed({"node": "victim", "t": "at"})
    detection = _detection_table(detection.toPandas(), points)
    fits = {"load": _load_fits(load), "detection": _detection_fits(detection)}
    return {"load": _records(load), "detection": _records(detection), "fits": fits}


def _find(sweep: Sweep, name: str) -> Point:
    return next(p for p in sweep.points if p.name == name)


def _load_table(load: Any, busiest: Any, points: dict[str, Point]) -> Any:
    """Every (run, msg_type) with zeros where a run sent none, plus a ``total`` row per run."""
    import pandas as pd

    full = pd.MultiIndex.from_product([sorted(set(load["run"])), sorted(set(load["msg_type"]))],
                                      names=["run", "msg_type"])
    long = load.set_index(["run", "msg_type"])[list(LOAD_METRICS)].reindex(full, fill_value=0.0).reset_index()
    totals = long.groupby("run", as_index=False)[list(LOAD_METRICS)].sum().assign(msg_type="total")
    totals = totals.merge(busiest, on="run", how="left")
    long = pd.concat([long, totals], ignore_index=True)
    return _with_points(long, points).sort_values(["series", "nodes", "seed", "msg_type"], ignore_index=True)


def _detection_table(detection: Any, points: dict[str, Point]) -> Any:
    return _with_points(detection, points).sort_values(["series", "nodes", "seed", "at"], ignore_index=True)


def _with_points(frame: Any, points: dict[str, Point]) -> Any:
    """``run`` (a directory, as the readers key runs) becomes the point's name, plus its coordinates."""
    frame = frame.copy()
    chosen = [points[run] for run in frame["run"]]
    frame["run"] = [p.name for p in chosen]
    frame["series"] = [p.series for p in chosen]
    frame["nodes"] = [p.nodes for p in chosen]
    frame["seed"] = [p.seed for p in chosen]
    frame["suspect_timeout_s"] = [p.suspect_timeout for p in chosen]
    return frame


def _load_fits(load: Any) -> list[dict[str, Any]]:
    fits = []
    for (series, msg_type), rows in load.groupby(["series", "msg_type"], sort=True):
        for metric in LOAD_METRICS:
            fit = _fit_means(rows, metric)
            if fit is not None:
                fits.append({"series": series, "msg_type": msg_type, "metric": metric, **fit})
    return fits


def _detection_fits(detection: Any) -> list[dict[str, Any]]:
    fits = []
    for series, rows in detection.groupby("series", sort=True):
        for metric in DETECTION_METRICS:
            fit = _fit_means(rows.dropna(subset=[metric]), metric)
            if fit is not None:
                fits.append({"series": series, "metric": metric, **fit})
    return fits


def _fit_means(rows: Any, metric: str) -> dict[str, Any] | None:
    """Fit the mean over seeds at each N; None with fewer than two distinct N."""
    from .fit import fit_growth

    means = rows.groupby("nodes")[metric].mean().dropna()
    if len(means) < 2:
        return None
    return fit_growth([int(n) for n in means.index], [float(v) for v in means.values]).to_json()


def _records(frame: Any) -> list[dict[str, Any]]:
    return [{k: plain(v) for k, v in row.items()} for row in frame.to_dict(orient="records")]


def plain(value: Any) -> Any:
    """JSON-safe: numpy scalars to Python, NaN and infinities to None."""
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
