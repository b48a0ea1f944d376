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
runs one ``simulations.run.simulate`` in its Python worker and writes the
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
each N is fitted by :mod:`spark_analysis.fit` (log2 N and linear in N, with
R², and a verdict).

Outputs in ``DIR``: ``runs/<point>/`` (a trace with ``summary.json``, or
``error.txt``), ``report.md``, ``metrics.json`` (``sweep``, ``runs``,
``load``, ``detection``, ``fits``), ``load_vs_n.png``,
``load_by_type_vs_n.png`` and ``detection_vs_n.png`` (matplotlib, Agg),
written by :mod:`spark_analysis.sweep_report`.
Exit code 0, or 1 when a point failed (the others are still analysed).

SWEEP.toml
----------
::

    base = "../scenarios/default.toml"   # a scenario file, relative to this file;
                                         # or an inline [base] table holding a scenario
    duration = 20.0                      # optional: replaces the base's duration
    seeds = [1, 2]                       # optional: repetitions (default: the base's seed)
    net_bucket = 1.0                     # optional: seconds per net-table bucket
    [grid]                               # key = [values]; every combination is a point
    nodes = [16, 64, 256]
    "network.loss" = [0.0, 0.05]         # dotted paths into the scenario
    "protocol.suspect_factor" = [1, 2]   # any sgcs.Config field
    "groups[0].rate" = [1.0, 10.0]       # groups and faults by index

Grid keys are scenario paths: ``nodes``, ``duration``, ``network.*``,
``protocol.*``, ``groups[i].*`` and ``faults[i].*`` (``seed`` is given by
``seeds``). Each value list is non-empty, without repeats. A point is named
from its values, e.g. ``n256_loss0.05_seed1``. The *series* of a point is
its grid values other than ``nodes``: fits are made per series, over N.
"""

from __future__ import annotations

import itertools
import math
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sgcs.errors import UsageError
from sgcs.membership.detector import suspect_rounds

MAX_POINTS = 10_000
"""A grid bigger than this is surely a mistake (a typo'd list of values)."""
_TOP_KEYS = ("base", "duration", "seeds", "net_bucket", "grid")
_KEY_RE = re.compile(r"^[A-Za-z_]\w*(\[\d+\])?(\.[A-Za-z_]\w*(\[\d+\])?)*$")
_PART_RE = re.compile(r"^([A-Za-z_]\w*)(?:\[(\d+)\])?$")
_LABELS = {"nodes": "n"}


@dataclass(frozen=True)
class Point:
    """One simulation of the sweep; ``raw`` is its scenario as parsed TOML."""

    name: str
    params: tuple[tuple[str, Any], ...]
    """(grid key, value) in grid order."""
    seed: int
    nodes: int
    raw: dict[str, Any] = field(repr=False)
    source: str = ""
    suspect_timeout: float = 0.0
    """suspect_factor * max(3, ceil(log2 N)) * gossip_interval, the detector's first-suspicion bound (s)."""

    @property
    def series(self) -> str:
        """The grid values other than nodes, e.g. ``loss=0.05``; ``all`` when none."""
        parts = [f"{_short(key)}={_text(value)}" for key, value in self.params if key != "nodes"]
        return ", ".join(parts) or "all"


@dataclass(frozen=True)
class Sweep:
    """A validated sweep file."""

    path: str
    grid: tuple[tuple[str, tuple[Any, ...]], ...]
    seeds: tuple[int, ...]
    net_bucket: float
    points: tuple[Point, ...]

    def to_json(self) -> dict[str, Any]:
        return {"file": self.path, "grid": {k: list(v) for k, v in self.grid},
                "seeds": list(self.seeds), "net_bucket": self.net_bucket, "points": len(self.points)}


# ------------------------------------------------------------------ parsing


def load_sweep(path: str | Path) -> Sweep:
    """Read, validate and expand a sweep file (see the module docstring)."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise UsageError(f"cannot read sweep file {path}: {exc.strerror or exc}") from None
    return parse_sweep(text, path)


def parse_sweep(text: str, path: str | Path = "<sweep>") -> Sweep:
    """Validate sweep TOML; a ``base`` path is resolved against ``path``'s directory."""
    path = Path(path)
    try:
        table = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{path}: invalid TOML: {exc}") from None
    for key in table:
        if key not in _TOP_KEYS:
            raise UsageError(f"{key}: unknown sweep key; allowed: {', '.join(_TOP_KEYS)}")
    base = _base(table.get("base"), path.parent)
    if "duration" in table:
        base["duration"] = table["duration"]  # validated with the scenario, per point
    seeds = _seeds(table.get("seeds"), base)
    net_bucket = _net_bucket(table.get("net_bucket", 1.0))
    grid = _grid(table.get("grid", {}))
    points = expand(base, grid, seeds, str(path))
    return Sweep(str(path), grid, seeds, net_bucket, tuple(order_points(points)))


def _base(value: Any, directory: Path) -> dict[str, Any]:
    if value is None:
        raise UsageError('base: required; a scenario file (base = "x.toml") or an inline [base] table')
    if isinstance(value, dict):
        return dict(value)
    if not isinstance(value, str):
        raise UsageError(f"base: must be a scenario file path or a table, got {value!r}")
    file = directory / value
    try:
        return tomllib.loads(file.read_text())
    except OSError as exc:
        raise UsageError(f"base: cannot read {file}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"base: {file}: invalid TOML: {exc}") from None


def _seeds(value: Any, base: dict[str, Any]) -> tuple[int, ...]:
    if value is None:
        seed = base.get("seed", 0)
        return (seed,) if isinstance(seed, int) and not isinstance(seed, bool) else (0,)
    ok = isinstance(value, list) and value and all(isinstance(s, int) and not isinstance(s, bool) for s in value)
    if not ok or any(s < 0 for s in value):
        raise UsageError(f"seeds: must be a non-empty array of integers >= 0, got {value!r}")
    if len(set(value)) != len(value):
        raise UsageError("seeds: lists a seed twice")
    return tuple(value)


def _net_bucket(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 3600:
        raise UsageError(f"net_bucket: must be a number of seconds in (0, 3600], got {value!r}")
    return float(value)


def _grid(table: Any) -> tuple[tuple[str, tuple[Any, ...]], ...]:
    if not isinstance(table, dict):
        raise UsageError(f"grid: must be a table ([grid]), got {table!r}")
    grid = []
    for key, values in table.items():
        path = f"grid.{key}"
        if not _KEY_RE.match(key):
            raise UsageError(f"{path}: not a scenario path like nodes, network.loss or groups[0].rate")
        if key == "seed":
            raise UsageError(f"{path}: give repetitions as seeds = [...] at the top level")
        if not isinstance(values, list) or not values:
            raise UsageError(f"{path}: must be a non-empty array of values, got {values!r}")
        if any(isinstance(v, dict) for v in values):
            raise UsageError(f"{path}: values must be numbers, strings, booleans or arrays, not tables")
        if len({repr(v) for v in values}) != len(values):
            raise UsageError(f"{path}: lists a value twice")
        grid.append((key, tuple(values)))
    return tuple(grid)


# ------------------------------------------------------------------ expansion


def expand(base: dict[str, Any], grid: tuple[tuple[str, tuple[Any, ...]], ...],
           seeds: tuple[int, ...], source: str = "<sweep>") -> list[Point]:
    """Every combination of grid values and seeds, as validated points (grid order)."""
    keys = [key for key, _ in grid]
    labels = _labels(keys)
    combos = list(itertools.product(*(values for _, values in grid)))
    if len(combos) * len(seeds) > MAX_POINTS:
        raise UsageError(f"grid: {len(combos) * len(seeds)} points; at most {MAX_POINTS}")
    points: list[Point] = []
    for combo, seed in itertools.product(combos, seeds):
        params = tuple(zip(keys, combo))
        name = "_".join([*(f"{labels[k]}{_text(v)}" for k, v in params), f"seed{seed}"])
        points.append(_point(base, params, seed, name, source))
    names = [p.name for p in points]
    if len(set(names)) != len(names):
        raise UsageError("grid: two points get the same run name; use values that differ in letters or digits")
    return points


def _point(base: dict[str, Any], params: tuple[tuple[str, Any], ...], seed: int, name: str, source: str) -> Point:
    from simulations.scenario import build_scenario

    raw = _deep_copy(base)
    raw["seed"] = seed
    for key, value in params:
        set_path(raw, key, value)
    try:
        scenario = build_scenario(raw, f"{source}:{name}")
    except UsageError as exc:
        raise UsageError(f"{exc} (sweep point {name})") from None
    config = scenario.config
    timeout = config.suspect_factor * suspect_rounds(scenario.nodes) * config.gossip_interval
    return Point(name, params, seed, scenario.nodes, raw, f"{source}:{name}", timeout)


def set_path(raw: dict[str, Any], key: str, value: Any) -> None:
    """Set a dotted scenario path (``network.loss``, ``groups[0].rate``) in ``raw``."""
    parts = key.split(".")
    node: Any = raw
    for depth, part in enumerate(parts):
        name, index = _PART_RE.match(part).groups()  # type: ignore[union-attr]
        last = depth == len(parts) - 1
        where = ".".join(parts[: depth + 1])
        if index is None:
            if last:
                node[name] = value
                return
            node = node.setdefault(name, {})
        else:
            entries = node.get(name)
            if not isinstance(entries, list) or int(index) >= len(entries):
                count = len(entries) if isinstance(entries, list) else 0
                raise UsageError(f"grid.{key}: the base scenario has {count} {name}, no {name}[{index}]")
            if last:
                entries[int(index)] = value
                return
            node = entries[int(index)]
        if not isinstance(node, dict):
            raise UsageError(f"grid.{key}: {where} in the base scenario is not a table")


def order_points(points: list[Point]) -> list[Point]:
    """Biggest N first (stable), so the long simulations start at once."""
    return sorted(points, key=lambda p: -p.nodes)


def _labels(keys: list[str]) -> dict[str, str]:
    """Short labels for run names: the last path part, unless two keys share it."""
    short = {key: _LABELS.get(key, _short(key)) for key in keys}
    counts = {label: list(short.values()).count(label) for label in short.values()}
    return {key: (label if counts[label] == 1 else re.sub(r"[^\w]+", "-", key)) for key, label in short.items()}


def _short(key: str) -> str:
    return re.sub(r"\[\d+\]", "", key.rsplit(".", 1)[-1])


def _text(value: Any) -> str:
    """A value as it appears in a run name: no spaces, slashes or quotes."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, list):
        return "+".join(_text(v) for v in value)
    return re.sub(r"[^\w.+-]+", "-", str(value))


def _deep_copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _deep_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_deep_copy(v) for v in value]
    return value


# ------------------------------------------------------------------ Spark tasks


def task_of(point: Point, out: Path, net_bucket: float) -> dict[str, Any]:
    """What one Spark task needs: plain data, so it pickles to any executor."""
    return {"name": point.name, "out": str(out / "runs" / point.name), "raw": point.raw,
            "source": point.source, "net_bucket": net_bucket}


def run_point(task: dict[str, Any]) -> dict[str, Any]:
    """Executor side: run one simulation. Never raises: a failure is a result."""
    import time
    import traceback

    from simulations.run import simulate
    from simulations.scenario import build_scenario

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


# ------------------------------------------------------------------ analysis

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
    return [{k: _plain(v) for k, v in row.items()} for row in frame.to_dict(orient="records")]


def _plain(value: Any) -> Any:
    """JSON-safe: numpy scalars to Python, NaN and infinities to None."""
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


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
    from spark_analysis.session import spark_session

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
