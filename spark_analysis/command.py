"""The body of ``sgcs analyze RUN... [--master URL] [--out DIR]`` (sgcs/apps/cli.py only parses).

Theory of operation
-------------------
Runs report.analyze with a rich progress display on stderr (one step per
job, with the job's name and the elapsed time; shown by default only when
stderr is a terminal), then prints the headline figures and where the
report is on stdout. Bad input is a ``UsageError`` (the CLI prints it as one
line and exits 2): a missing or non-trace directory, several runs without
``--out``, pyspark not installed, or Parquet that Spark cannot read as a
trace (an ``AnalysisException``, e.g. a missing column).
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Iterator

from sgcs.errors import UsageError

from .session import _pyspark

STEPS = 17
"""Progress steps of one analysis: Spark start, reading, 13 jobs, writing (and one to spare)."""


@contextmanager
def _progress(show: bool) -> Iterator[object]:
    if not show:
        yield lambda label: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("sgcs analyze"), BarColumn(), TextColumn("{task.description}"), TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("", total=STEPS)
        yield lambda label: bar.update(task, description=label, advance=1)


def run_analyze(runs: list[str], out: str | None, master: str | None, progress: bool | None) -> int:
    """Analyse ``runs``; print the headline and the report path. Returns the exit code."""
    from .readers import check_run

    for run in runs:
        check_run(run)  # before Spark starts: bad input fails in a fraction of a second
    _pyspark()
    from pyspark.errors import AnalysisException

    from .report import analyze, headline

    show = sys.stderr.isatty() if progress is None else progress
    try:
        with _progress(show) as step:
            metrics = analyze(runs, out, master, progress=step)  # type: ignore[arg-type]
    except AnalysisException as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UsageError(f"cannot read the trace: {first}") from None
    for line in headline(metrics):
        print(line)
    print(f"report: {metrics['out']}/report.md (metrics.json and plots alongside), {metrics['wall_seconds']:.1f} s")
    return 0
