"""One simulation run end to end: out directory, meta.json, progress, summary.

Theory of operation
-------------------
``simulate`` prepares ``RUN/`` (refusing to scribble over a directory that is
not an earlier trace), writes ``meta.json`` first so that even a run that hits
a bug leaves its seed and scenario behind, runs the ``Simulator`` with an
optional progress bar over simulated time, then writes ``summary.json`` and
returns a ``RunSummary``. Wall-clock time is read here, only for the summary;
the simulation itself never looks at the real clock.

The progress bar (rich, on stderr) is shown only when stderr is a terminal,
and is fed at most once every ``engine.PROGRESS_EVERY`` events, at a low
refresh rate, so it costs nothing measurable.
"""

from __future__ import annotations

import shutil
import sys
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Callable, Iterator

import sgcs
from sgcs.errors import UsageError

from .mailboxes import MailboxSimulator
from .mailreport import format_summary
from .scenario import Scenario
from .parallel import check_workers, run_parallel
from .simulator import RunTotals, Simulator, no_collections
from sgcs.trace import SCHEMA_VERSION, write_json


@dataclass(frozen=True)
class RunSummary:
    out: str
    seed: int
    nodes: int
    duration: float
    wall_seconds: float
    sim_events: int
    rows: int
    net_rows: int
    sends: int
    deliveries: int
    expected_deliveries: int
    unicast_deliveries: int
    drops: int
    datagrams: int
    lost: int
    held: int = 0
    """Sends that waited for flow control (window or send delay)."""
    abandoned: int = 0
    repaired_by_nack: int = 0
    """Summed over the nodes up at the end, as are the next four."""
    repaired_by_gossip: int = 0
    retransmissions: int = 0
    nacks: int = 0
    peak_buffered: int = 0
    """The largest peak buffer (unstable records) of any node up at the end."""
    workers: int = 1
    """Processes the run was split over (``sgcs.sim.parallel``)."""
    peak_rss_bytes: int = 0
    """Peak resident memory of the simulating process, or the sum over the workers."""
    mailboxes: dict[str, Any] | None = None
    """A mailbox scenario's figures (``mailreport.summarise``); None for others."""

    @property
    def reliability(self) -> float:
        """Multicast deliveries / (sends x live group members at send time)."""
        return self.deliveries / self.expected_deliveries if self.expected_deliveries else 1.0

    @property
    def node_seconds_per_wall_second(self) -> float:
        return self.nodes * self.duration / self.wall_seconds if self.wall_seconds > 0 else float("inf")

    def to_json(self) -> dict[str, object]:
        return {**asdict(self), "reliability": self.reliability,
                "node_seconds_per_wall_second": self.node_seconds_per_wall_second}

    def format(self) -> str:
        return "\n".join((
            f"simulated {self.nodes:,} nodes for {self.duration:g} s in {self.wall_seconds:.2f} s wall "
            f"({self.node_seconds_per_wall_second:,.0f} node-seconds per wall second), seed {self.seed}"
            + (f", {self.workers} workers" if self.workers > 1 else ""),
            f"events: {self.sim_events:,} simulated, {self.rows:,} trace rows; "
            f"datagrams: {self.datagrams:,} sent, {self.lost:,} copies lost",
            f"messages: {self.sends:,} sent, {self.deliveries:,} deliveries, {self.drops:,} drops; "
            f"mean reliability {self.reliability:.4f}; {self.held:,} sends waited for flow control",
            f"repairs: {self.repaired_by_nack:,} by NACK, {self.repaired_by_gossip:,} by gossip; "
            f"{self.retransmissions:,} retransmissions, {self.nacks:,} NACKs; peak buffer {self.peak_buffered:,} records; "
            f"peak memory {self.peak_rss_bytes / 2**30:.2f} GB",
            *(() if self.mailboxes is None else (format_summary(self.mailboxes),)),
            f"trace: {self.out} (meta.json, events/, net/, stats/{', mail/' if self.mailboxes else ''})",
        ))


def simulate(
    scenario: Scenario,
    out: str | Path,
    *,
    net_bucket: float = 1.0,
    progress: bool | None = None,
    workers: int = 1,
) -> RunSummary:
    """Run ``scenario`` and write its trace to ``out``; progress None: only on
    a TTY. ``workers`` > 1 splits the run over that many processes
    (``sgcs.sim.parallel``; the scenario needs ``latency_ms.min`` > 0)."""
    out = Path(out)
    check_workers(scenario, workers)
    prepare_out(out)
    write_json(out / "meta.json", meta_of(scenario, net_bucket, workers))
    show = sys.stderr.isatty() if progress is None else progress
    if workers > 1:
        started = time.perf_counter()  # wall clock for the summary only
        with _progress_bar(scenario.duration, show) as update:
            totals = run_parallel(scenario, out, net_bucket, workers, update)
        summary = _summarise(scenario, totals, out, time.perf_counter() - started, workers)
        write_json(out / "summary.json", summary.to_json())
        return summary
    simulator = Simulator(scenario, out, net_bucket) if scenario.mailboxes is None else \
        MailboxSimulator(scenario, out, net_bucket)
    # The collector stays off until the run's objects are gone: switched on
    # while they live (gigabytes at 10,000 nodes, all in its youngest
    # generation after a run without it), the summary's allocations made it
    # walk them all, a quarter of a 20 s, 10,000-node run's wall time.
    with no_collections():
        started = time.perf_counter()  # wall clock for the summary only
        with _progress_bar(scenario.duration, show) as update:
            simulator.run(update)
        wall = time.perf_counter() - started
        summary = _summarise(scenario, simulator.totals(), out, wall, workers)
        if isinstance(simulator, MailboxSimulator):
            summary = replace(summary, mailboxes=simulator.report(out))
        del simulator  # no cycles once finished: reference counting frees the run here
    write_json(out / "summary.json", summary.to_json())
    return summary


def meta_of(scenario: Scenario, net_bucket: float, workers: int = 1) -> dict[str, object]:
    return {
        "schema": SCHEMA_VERSION,
        "seed": scenario.seed,
        "nodes": scenario.nodes,
        "duration": scenario.duration,
        "scenario": scenario.to_json(),
        "sgcs_version": sgcs.__version__,
        "net_bucket": net_bucket,
        "workers": workers,
        "replay": scenario.replay_command(),
    }


def prepare_out(out: Path) -> None:
    """Create ``out``; an earlier trace there is replaced, anything else refused."""
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out}: exists and is not a directory")
    if out.is_dir() and any(out.iterdir()):
        if not (out / "meta.json").is_file():
            raise UsageError(f"--out {out}: directory is not empty and holds no sgcs trace; choose a new directory")
        for stale in ("events", "net", "stats", "mail"):
            shutil.rmtree(out / stale, ignore_errors=True)
        (out / "summary.json").unlink(missing_ok=True)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--out {out}: cannot create the directory: {exc.strerror}") from None


def _summarise(scenario: Scenario, totals: RunTotals, out: Path, wall: float, workers: int) -> RunSummary:
    counters = totals.counters
    return RunSummary(
        out=str(out), seed=scenario.seed, nodes=scenario.nodes, duration=scenario.duration,
        wall_seconds=wall, sim_events=totals.events, rows=totals.rows,
        net_rows=totals.net_rows, sends=counters.sends, deliveries=counters.deliveries,
        expected_deliveries=counters.expected, unicast_deliveries=counters.unicast_deliveries,
        drops=totals.kinds.get("drop", 0), datagrams=counters.datagrams, lost=counters.lost,
        held=counters.held, abandoned=counters.abandoned, repaired_by_nack=totals.repaired_by_nack,
        repaired_by_gossip=totals.repaired_by_gossip, retransmissions=totals.retransmissions,
        nacks=totals.nacks, peak_buffered=totals.peak_buffered, workers=workers,
        peak_rss_bytes=totals.peak_rss_bytes,
    )


@contextmanager
def _progress_bar(total: float, show: bool) -> Iterator[Callable[[float], None] | None]:
    if not show:
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    columns = (
        TextColumn("simulating"), BarColumn(),
        TextColumn("{task.completed:.1f}/{task.total:g} s simulated"),
        TimeElapsedColumn(), TimeRemainingColumn(),
    )
    with Progress(*columns, console=Console(stderr=True), refresh_per_second=4, transient=True) as bar:
        task = bar.add_task("simulate", total=total)
        yield lambda t: bar.update(task, completed=t)
