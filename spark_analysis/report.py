"""``sgcs analyze``: every job over one or more runs, written as report.md, metrics.json and PNGs.

Theory of operation
-------------------
``analyze`` checks every run directory first (bad input is a UsageError
before Spark starts), then reads the runs into one events, one net and one
(optional) stats DataFrame with a ``run`` column, persists the events (every
job scans them), and runs the jobs in a fixed order: row counts, latency,
reliability, invariants, failure detection, load, view changes and
occupancy. Each job reduces the trace to a small table that is collected
with ``toPandas``; nothing proportional to the trace leaves Spark.

The results form one JSON-ready dict, ``{"runs": {run: metrics}, ...}``,
written as ``metrics.json``; ``report.md`` shows the same figures as
tables, with the plots from plots.py next to it. Each plot is drawn in a
worker thread as soon as its table is collected, while Spark runs the next
jobs (into a temporary directory: the report directory gets them only when
every job has succeeded).

What the first job learns of the trace (the event kinds, delivery orders and
optimistic sends present) lets the invariant checks that it proves idle
count 0 without a job of their own (invariants.check_invariants).

Where the report goes: ``RUN/report/`` for one run. Several runs are one
comparison that belongs to none of them, so they need ``out``: a UsageError
says so rather than writing into the first run's directory.

After that first job, the others run two at a time (``CONCURRENT_JOBS``,
from threads: Spark runs jobs submitted from several threads side by side),
and the metrics keep the fixed order of ``SECTIONS`` whichever ends first.

``progress(label)`` is called before each job, for the command's progress
display. ``headline(metrics)`` gives the few figures the command prints.
"""

from __future__ import annotations

import json
import math
import shutil
import tempfile
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

from sgcs.errors import UsageError

from . import plots
from .readers import check_run

DIGITS = 6
Progress = Callable[[str], None]
SECTIONS = ("meta", "rows", "latency", "reliability", "invariants", "detection", "load", "views", "occupancy")
CONCURRENT_JOBS = 2
"""Jobs submitted to Spark at once. A job of a small trace is mostly the driver's work (planning,
Py4J calls, Java code warming up) with short task bursts between; two at a time fill both the
driver and the executor cores. The default run's first analysis: 11.0 s one at a time, 9.3 to
9.6 s two at a time; three gained nothing more (benchmarks/README.md, "Session 17")."""


def _pandas(frame: Any) -> Any:
    """``frame.toPandas()``, typed Any: pandas ships no type information here."""
    return frame.toPandas()



def _clean(value: Any) -> Any:
    """JSON-ready: numpy scalars to Python, NaN to None, floats rounded to DIGITS decimals."""
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if hasattr(value, "tolist"):
        return _clean(value.tolist())
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float):
        return None if math.isnan(value) or math.isinf(value) else round(value, DIGITS)
    return value


def _records(df: Any, run: str, drop: tuple[str, ...] = ("run",)) -> list[dict[str, Any]]:
    rows = df[df["run"] == run].drop(columns=[c for c in drop if c in df.columns])
    return [_clean(r) for r in rows.to_dict("records")]


def output_dir(runs: list[str], out: str | None) -> Path:
    if out is not None:
        return Path(out)
    if len(runs) == 1:
        return Path(runs[0]) / "report"
    raise UsageError("several runs need --out DIR (a comparison belongs to none of the runs)")


class _Plotter:
    """Draws each plot in a worker thread as soon as the job that makes its table is done,
    while Spark runs the next jobs, into a temporary directory; ``finish`` moves the files
    into the report directory, so nothing is written there unless the analysis gets that far."""

    KEYS = ("latency_cdf", "reliability", "load_by_type", "occupancy", "view_changes")

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sgcs-plots")
        self._dir = Path(tempfile.mkdtemp(prefix="sgcs-plots-"))
        self._drawn: dict[str, Future[str | None]] = {}

    def draw(self, key: str, plot: Callable[..., str | None], *tables: Any) -> None:
        self._drawn[key] = self._pool.submit(plot, *tables, self._dir)

    def finish(self, out: Path) -> dict[str, str | None]:
        figures = {key: self._drawn[key].result() for key in self.KEYS}
        for name in figures.values():
            if name is not None:
                shutil.move(str(self._dir / name), str(out / name))
        return figures

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        shutil.rmtree(self._dir, ignore_errors=True)


class _Jobs:
    """Runs the jobs over the shared DataFrames, collecting per-run metrics and plot tables."""

    def __init__(self, spark: Any, runs: list[str], progress: Progress, plotter: _Plotter) -> None:
        from . import readers
        from .invariants import prepare

        self.spark, self.runs, self.progress, self.plotter = spark, runs, progress, plotter
        self.meta_rows = readers.meta_rows(runs)
        self.meta_df = readers.runs_meta(spark, runs)
        self.orders: set[str] | None = None
        self.kinds: set[str] | None = None
        self.optimistic_sends: bool | None = None
        self.events = prepare(readers.read_events(spark, runs)).persist()
        self.net = readers.read_net(spark, runs)
        self.stats = readers.read_stats(spark, runs)
        self.metrics: dict[str, dict[str, Any]] = {run: {} for run in runs}
        self.tables: dict[str, Any] = {}

    def put(self, section: str, per_run: Callable[[str], Any]) -> None:
        for run in self.runs:
            self.metrics[run][section] = per_run(run)

    def meta_and_rows(self) -> None:
        import pandas as pd
        from pyspark.sql import functions as F

        from .readers import dataset_rows

        self.progress("reading traces")
        # meta.json's fields as runs_meta has them, from the parsed files (no Spark job)
        meta = pd.DataFrame([{k: v for k, v in row.items() if k not in ("scenario", "pauses", "orders")}
                             for row in self.meta_rows])
        # One job: rows per kind, and what tells the invariant checks which of them have
        # nothing to check (the orders and kinds present, optimistic sends); also the first
        # scan of the events, which fills their cache.
        kinds = self.events.groupBy("run", "kind", "order").agg(
            F.count("*").alias("n"), F.count(F.when(F.col("optimistic"), 1)).alias("optimistic")).collect()
        self.orders = {str(r["order"]) for r in kinds if r["order"] is not None}
        self.kinds = {str(r["kind"]) for r in kinds if r["kind"] is not None}
        self.optimistic_sends = any(r["kind"] == "send" and r["optimistic"] for r in kinds)
        counts: dict[str, dict[str, int]] = {run: {} for run in self.runs}
        for r in sorted(kinds, key=lambda r: (r["run"], r["kind"] or "")):
            by_kind = counts[r["run"]]
            by_kind[str(r["kind"])] = by_kind.get(str(r["kind"]), 0) + int(r["n"])

        def rows(run: str) -> dict[str, Any]:
            by_kind = counts[run]
            return {"events": sum(by_kind.values()), "net": dataset_rows(run, "net"),
                    "stats": dataset_rows(run, "stats"), "by_kind": by_kind}

        self.put("meta", lambda run: _records(meta, run)[0])
        self.put("rows", rows)

    def latency(self) -> None:
        from .latency import LEVELS, delivery_latencies, latency_quantiles, summary_from_quantiles

        self.progress("latency")
        table = _pandas(latency_quantiles(delivery_latencies(self.events))).sort_values(["run", "order"])
        self.tables["latency_cdf"] = table.assign(quantile=[list(LEVELS)] * len(table))
        self.plotter.draw("latency_cdf", plots.latency_cdf, self.tables["latency_cdf"])
        self.put("latency", lambda run: {r["order"]: _clean(summary_from_quantiles(r))
                                         for r in table[table["run"] == run].to_dict("records")})

    def reliability(self) -> None:
        from .reliability import BINS, per_message, reliability_bins, summary_from_bins

        self.progress("reliability")
        bins = _pandas(reliability_bins(per_message(self.events))).sort_values(["run", "low"])
        per_run = {run: summary_from_bins(_records(bins, run)) for run in self.runs}
        self.tables["reliability_hist"] = bins.assign(share=[
            m / per_run[r]["messages"] for r, m in zip(bins["run"], bins["messages"])])
        self.tables["reliability_bins"] = BINS
        self.plotter.draw("reliability", plots.reliability_histogram, self.tables["reliability_hist"], BINS)
        self.put("reliability", lambda run: _clean(per_run[run]))

    def invariants(self) -> None:
        from .invariants import check_invariants

        found = check_invariants(self.events, self.runs, progress=lambda key: self.progress(f"invariant {key}"),
                                 orders=self.orders, kinds=self.kinds, optimistic_sends=self.optimistic_sends)
        self.put("invariants", lambda run: _clean(found[run]))

    def detection(self) -> None:
        from .detection import detection_times, false_suspicions

        self.progress("failure detection")
        crashes = _pandas(detection_times(self.events, self.meta_df)).sort_values(["run", "t", "node"])
        false = _pandas(false_suspicions(self.events, self.meta_df))
        self.put("detection", lambda run: {"crashes": _records(crashes, run),
                                           "false_suspicions": (_records(false, run) or [{}])[0]})

    def load(self) -> None:
        from .load import LOAD_COLUMNS, per_member_load

        self.progress("load per member")
        by_type = _pandas(per_member_load(self.net, self.meta_df)).sort_values(["run", "msg_type"])
        self.tables["load"] = by_type
        self.plotter.draw("load_by_type", plots.load_by_type, by_type)

        def per_run(run: str) -> dict[str, Any]:
            rows = _records(by_type, run, ("run", "nodes"))
            total = {c: sum(r[c] or 0.0 for r in rows) for c in LOAD_COLUMNS}
            return {"total": total, "by_msg_type": {r.pop("msg_type"): r for r in rows}}

        self.put("load", per_run)

    def views(self) -> None:
        from .views import blocked_spans, view_changes, view_counts

        self.progress("view changes")
        changes = _pandas(view_changes(self.events)).sort_values(["run", "start"])
        # one row per (node, group, change): small next to the trace, and the plot wants them
        spans = _pandas(blocked_spans(self.events).select("run", "started", "ended", "span"))
        counts = _pandas(view_counts(self.events))
        self.tables["view_changes"], self.tables["blocked_spans"] = changes, spans
        self.plotter.draw("view_changes", plots.view_changes, changes, spans)
        self.put("views", lambda run: {
            "changes": _change_summary(changes[changes["run"] == run]),
            "blocked": _blocked_summary(spans[spans["run"] == run]),
            "counts": (_records(counts, run) or [{}])[0],
            "change_list": _records(changes, run)[:50]})

    def occupancy(self) -> None:
        from .occupancy import occupancy_over_time, occupancy_summary

        self.progress("occupancy")
        if self.stats is None:
            self.tables["occupancy"] = None
            self.plotter.draw("occupancy", plots.occupancy, None)
            self.put("occupancy", lambda run: "not recorded")
            return
        summary = _pandas(occupancy_summary(self.stats))
        self.tables["occupancy"] = _pandas(occupancy_over_time(self.stats)).sort_values(["run", "group", "t"])
        self.plotter.draw("occupancy", plots.occupancy, self.tables["occupancy"])
        recorded = set(summary["run"])
        self.put("occupancy", lambda run: {r.pop("group"): r for r in _records(summary, run)}
                 if run in recorded else "not recorded")

    def run_all(self) -> None:
        self.meta_and_rows()  # first: it fills the events' cache and tells the invariants what to skip
        jobs = (self.invariants, self.reliability, self.detection, self.views, self.latency, self.load,
                self.occupancy)  # the longest first, so the two lanes end together
        with ThreadPoolExecutor(max_workers=CONCURRENT_JOBS, thread_name_prefix="sgcs-jobs") as pool:
            running = [pool.submit(job) for job in jobs]
            try:
                for job_done in running:
                    job_done.result()
            except BaseException:
                for job_done in running:
                    job_done.cancel()
                raise
        # the sections in a fixed order, whichever job ended first
        self.metrics = {run: {key: found[key] for key in SECTIONS if key in found}
                        for run, found in self.metrics.items()}
        self.events.unpersist()


def _change_summary(changes: Any) -> dict[str, Any]:
    """views.view_change_summary, for one run's collected changes."""
    if changes.empty:
        return {"changes": 0}
    return _clean({"changes": len(changes), "to_first_median_s": changes["to_first_s"].median(),
                   "to_all_median_s": changes["to_all_s"].median(), "to_all_max_s": changes["to_all_s"].max()})


def _blocked_summary(spans: Any) -> dict[str, Any]:
    """views.blocked_summary (benchmarks/membership.py's definition), for one run's collected spans."""
    done = spans["span"].dropna()
    return _clean({"changes": len(done), "total_s": done.sum() if len(done) else None,
                   "median_s": done.median() if len(done) else None, "max_s": done.max() if len(done) else None,
                   "unresolved": int(spans["ended"].isna().sum())})


def analyze(runs: list[str], out: str | None = None, master: str | None = None,
            progress: Progress | None = None) -> dict[str, Any]:
    """Run every job over ``runs``; write report.md, metrics.json and the plots; return the metrics."""
    if not runs:
        raise UsageError("no run directory given")
    for run in runs:
        check_run(run)
    target = output_dir(runs, out)
    say = progress or (lambda label: None)
    started = time.monotonic()
    say("starting Spark")
    from .readers import event_rows
    from .session import SMALL_ROWS, driver_memory, spark_session, tune_for_rows

    rows = event_rows(runs)
    spark = spark_session(master, memory=driver_memory(rows), small_input=rows < SMALL_ROWS)
    tune_for_rows(spark, rows)
    plotter = _Plotter()
    try:
        jobs = _Jobs(spark, runs, say, plotter)
        jobs.run_all()
        say("writing the report")
        target.mkdir(parents=True, exist_ok=True)
        figures = plotter.finish(target)
    finally:
        plotter.close()
    metrics = {"runs": jobs.metrics, "plots": figures, "spark_master": spark.sparkContext.master,
               "wall_seconds": round(time.monotonic() - started, 3)}
    metrics = _clean(metrics)
    (target / "metrics.json").write_text(json.dumps(metrics, indent=2, default=str) + "\n")
    from .markdown import render

    (target / "report.md").write_text(render(metrics))
    metrics["out"] = str(target)
    return metrics


def headline(metrics: dict[str, Any]) -> list[str]:
    """A few lines per run: latency p50/p99 per order, reliability, invariants, load."""
    lines = []
    for run, m in metrics["runs"].items():
        lat = ", ".join(f"{order} p50 {_ms(v.get('p50'))} p99 {_ms(v.get('p99'))}"
                        for order, v in m.get("latency", {}).items()) or "no deliveries"
        rel = m.get("reliability", {})
        bad = sum(v["count"] for v in m.get("invariants", {}).values())
        total = m.get("load", {}).get("total", {})
        lines += [f"{run}: {m['rows']['events']:,} events, {m['meta'].get('nodes')} nodes",
                  f"  latency: {lat}",
                  f"  reliability: mean {_num(rel.get('mean'), 4)}, {_pct(rel.get('full_fraction'))} of "
                  f"{rel.get('messages', 0)} messages reached every live member",
                  f"  invariant violations: {bad}" + _failing(m.get("invariants", {})),
                  f"  load per member: {_num(total.get('msgs_per_member_per_s'), 1)} msgs/s, "
                  f"{_num(total.get('bytes_per_member_per_s'), 0)} B/s sent"]
    return lines


def _failing(invariants: dict[str, Any]) -> str:
    keys = [f"{k} {v['count']}" for k, v in invariants.items() if v["count"]]
    return f" ({', '.join(keys)})" if keys else ""


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.1f} ms"


def _num(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"
