"""``sgcs sweep``: a grid of simulations run as Spark tasks, then analysed together.

Theory of operation
-------------------
A sweep file names a base scenario and a grid of values to vary. The driver
expands the grid into *points* (the cartesian product of the grid values,
times the seeds), validates every point's scenario before Spark starts (so a
bad value fails in one line, naming the key and the point), and orders them
big N first: with ``local[K]`` the K slots then finish together instead of
one slot running the largest simulation alone at the end.

The points go to Spark as one partition each,
``sc.parallelize(points, len(points)).map(run_point).collect()``; each task
runs one ``sgcs.sim.run.simulate`` in its Python worker and writes the
trace to ``DIR/runs/<point-name>/``. A task never raises: a failed simulation
comes back as a failed result (its traceback in the run's ``error.txt``), so
one bad point does not cost the others. While ``collect`` runs in a thread,
the driver polls Spark's status tracker (points done) and the run
directories (which points are running) for a rich progress bar on stderr.

The runs are then analysed together, as Spark DataFrame jobs over all the
traces at once (``readers``, ``load.per_member_load``,
``detection.detection_times``): per-member load (messages and bytes per
second, sent and received, by ``msg_type`` and in total) against N, and
failure-detection time (first suspicion of each crashed node, and when the
survivors' views exclude it) against N. Per series, the mean over seeds at
each N is fitted by :mod:`sgcs.analysis.fit` (log2 N and linear in N, with
R², and a verdict).

Outputs in ``DIR``: ``runs/<point>/`` (a trace with ``summary.json``, or
``error.txt``), ``report.md``, ``metrics.json`` (``sweep``, ``runs``,
``load``, ``detection``, ``fits``), ``load_vs_n.png``,
``load_by_type_vs_n.png`` and ``detection_vs_n.png`` (matplotlib, Agg),
written by :mod:`sgcs.analysis.sweep_report`.
Exit code 0, or 1 when a point failed (the others are still analysed).

The sweep file is parsed and expanded by :mod:`sgcs.analysis.sweep_spec`, and
the runs analysed by :mod:`sgcs.analysis.sweep_analysis`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sgcs.errors import UsageError

from .sweep_analysis import analyse_runs
from .sweep_spec import Point, Sweep, load_sweep

# ------------------------------------------------------------------ Spark tasks


def task_of(point: Point, out: Path, net_bucket: float) -> dict[str, Any]:
    """What one Spark task needs: plain data, so it pickles to any executor."""
    return {"name": point.name, "out": str(out / "runs" / point.name), "raw": point.raw,
            "source": point.source, "net_bucket": net_bucket}


def run_point(task: dict[str, Any]) -> dict[str, Any]:
    """Executor side: run one simulation. Never raises: a failure is a result."""
    import time
    import traceback

    from sgcs.sim.run import simulate
    from sgcs.sim.scenario import build_scenario

    out = Path(task["out"])
    (out / "error.txt").unlink(missing_ok=True)  # a stale one would mark this run failed
    started = time.perf_counter()
    result: dict[str, Any] = {"name": task["name"], "out": str(out), "ok": False, "summary": None, "error": None}
    try:
        scenario = build_scenario(task["raw"], task["source"])
        summary = simulate(scenario, out, net_bucket=task["net_bucket"], progress=False)
    except Exception as exc:  # noqa: BLE001 - reported per point, the other points go on
        out.mkdir(parents=True, exist_ok=True)
        (out / "error.txt").write_text(traceback.format_exc())
        first_line = (str(exc).splitlines() or [""])[0]
        result["error"] = f"{type(exc).__name__}: {first_line} (traceback in {out / 'error.txt'})"
    else:
        result.update(ok=True, summary=summary.to_json())
    result["wall_seconds"] = time.perf_counter() - started
    return result


def run_tasks(spark: Any, tasks: list[dict[str, Any]], progress: SweepProgress) -> list[dict[str, Any]]:
    """One Spark task per point, in the given order; progress polled while they run."""
    import time

    from pyspark import InheritableThread

    sc = spark.sparkContext
    group = f"sgcs-sweep-{id(tasks)}"
    box: dict[str, Any] = {}

    def work() -> None:
        sc.setJobGroup(group, "sgcs sweep: simulations")
        try:
            box["results"] = sc.parallelize(tasks, len(tasks)).map(run_point).collect()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the driver thread
            box["error"] = exc

    started = time.time() - 1.0  # file mtimes have coarse resolution on some file systems
    thread = InheritableThread(target=work, daemon=True)
    thread.start()
    try:
        while thread.is_alive():
            thread.join(0.5)
            progress.points(_tasks_done(sc, group), _running(tasks, started))
    except KeyboardInterrupt:
        sc.cancelJobGroup(group)
        raise
    if "error" in box:
        raise box["error"]
    progress.points(len(tasks), [])
    return box["results"]


def _tasks_done(sc: Any, group: str) -> int:
    tracker, done = sc.statusTracker(), 0
    for job in tracker.getJobIdsForGroup(group):
        info = tracker.getJobInfo(job)
        for stage_id in info.stageIds if info else ():
            stage = tracker.getStageInfo(stage_id)
            done += stage.numCompletedTasks if stage else 0
    return done


def _running(tasks: list[dict[str, Any]], since: float) -> list[str]:
    """Points whose trace is being written now (seen through the shared file system)."""
    running = []
    for task in tasks:
        out = Path(task["out"])
        try:
            fresh = (out / "meta.json").stat().st_mtime >= since
        except OSError:
            continue
        if fresh and not (out / "summary.json").exists() and not (out / "error.txt").exists():
            running.append(task["name"])
    return running


class SweepProgress:
    """rich progress on stderr for the whole command: points done / total, then what runs now.

    With ``show`` False (stderr not a terminal, or --no-progress) it shows
    nothing; the summary still goes to stdout.
    """

    def __init__(self, total: int, show: bool) -> None:
        self.total, self.show = total, show
        self.bar: Any = None  # a rich Progress while shown
        self.task: Any = None

    def __enter__(self) -> SweepProgress:
        if self.show:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            columns = (TextColumn("sweep"), BarColumn(), MofNCompleteColumn(), TextColumn("points"),
                       TimeElapsedColumn(), TextColumn("{task.fields[current]}"))
            self.bar = Progress(*columns, console=Console(stderr=True), refresh_per_second=2, transient=True)
            self.bar.__enter__()
            self.task = self.bar.add_task("sweep", total=self.total, current="")
        return self

    def phase(self, text: str) -> None:
        if self.bar is not None:
            self.bar.update(self.task, current=text)

    def points(self, done: int, running: list[str]) -> None:
        more = " ..." if len(running) > 3 else ""
        self.phase("running " + ", ".join(running[:3]) + more if running else "simulating")
        if self.bar is not None:
            self.bar.update(self.task, completed=done)

    def __exit__(self, *exc: Any) -> None:
        if self.bar is not None:
            self.bar.__exit__(*exc)


# ------------------------------------------------------------------ the command


def run_sweep(path: str | Path, out: str | Path, *, master: str | None = None, parallel: int | None = None,
              progress: bool | None = None) -> int:
    """``sgcs sweep``: run every point as a Spark task, analyse, write DIR; 1 if a point failed."""
    import sys
    import time

    from .sweep_report import headline, write_json, write_plots, write_report

    started = time.perf_counter()
    if parallel is not None and parallel < 1:
        raise UsageError(f"--parallel: must be at least 1, got {parallel}")
    sweep = load_sweep(path)
    out = _prepare_dir(Path(out))
    with SweepProgress(len(sweep.points), sys.stderr.isatty() if progress is None else progress) as bar:
        bar.phase("starting Spark")
        spark = _spark(master or (f"local[{parallel}]" if parallel else None))
        results = run_tasks(spark, [task_of(p, out, sweep.net_bucket) for p in sweep.points], bar)
        simulated = time.perf_counter()
        bar.phase("analysing the runs with Spark")
        analysis = analyse_runs(spark, sweep, results)
        metrics = {"sweep": _sweep_record(sweep, results, spark, started, simulated, path, out),
                   "runs": _run_records(sweep, results), **analysis}
        bar.phase("plotting")
        plots = write_plots(out, metrics)
    metrics["sweep"]["wall_seconds"] = time.perf_counter() - started
    write_json(out / "metrics.json", metrics)
    report = write_report(out, metrics, plots)
    print(headline(metrics, report))
    for failed in metrics["sweep"]["failed"]:
        print(f"sgcs sweep: point {failed['name']} failed: {failed['error']}", file=sys.stderr)
    return 1 if metrics["sweep"]["failed"] else 0


_OUTPUTS = ("report.md", "metrics.json", "load_vs_n.png", "load_by_type_vs_n.png", "detection_vs_n.png")


def _prepare_dir(out: Path) -> Path:
    """DIR/runs/ exists; the outputs of an earlier sweep are gone (a plot it had and we lack would mislead)."""
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out}: exists and is not a directory")
    try:
        (out / "runs").mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--out {out}: cannot create the directory: {exc.strerror}") from None
    for name in _OUTPUTS:
        (out / name).unlink(missing_ok=True)
    return out


def _spark(master: str | None) -> Any:
    import os
    import sys

    # Workers must run this interpreter, the one that has sgcs and simulations installed.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from sgcs.analysis.session import spark_session

    return spark_session(master, app="sgcs sweep")


def _sweep_record(sweep: Sweep, results: list[dict[str, Any]], spark: Any, started: float, simulated: float,
                  path: str | Path, out: Path) -> dict[str, Any]:
    import time

    failed = [{"name": r["name"], "error": r["error"]} for r in results if not r["ok"]]
    return {**sweep.to_json(), "command": f"sgcs sweep {path} --out {out}", "out": str(out),
            "master": spark.sparkContext.master, "failed": failed,
            "simulate_seconds": simulated - started, "analysis_seconds": time.perf_counter() - simulated,
            "wall_seconds": time.perf_counter() - started}


def _run_records(sweep: Sweep, results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    points = {p.name: p for p in sweep.points}
    records = []
    for result in results:
        point = points[result["name"]]
        records.append({**result, "series": point.series, "nodes": point.nodes, "seed": point.seed,
                        "params": {k: v for k, v in point.params}, "suspect_timeout_s": point.suspect_timeout})
    return records
