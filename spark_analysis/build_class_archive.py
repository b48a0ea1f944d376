"""Builds the class-data-sharing archive of class_archive.py (see its module doc): ``python -m
sgcs.analysis.build_class_archive [--force]``, run by scripts/setup.sh.

Theory of operation
-------------------
A child process (``--dump PARTIAL``) simulates the default scenario into a
temporary directory, analyses it with a JVM started with
``-XX:ArchiveClassesAtExit=PARTIAL``, stops Spark and waits for the JVM to
exit, so the archive is complete; only then does the parent rename it into
place (the JVM crashes on a truncated archive), and it removes archives of
other keys (an older JDK's or pyspark's).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from .class_archive import QUIET, archive_path, enabled


def build(force: bool = False) -> Path | None:
    """Build the archive unless it exists; returns its path, or None when it cannot be built."""
    path = archive_path()
    if path is None or not enabled():
        return None
    if path.is_file() and not force:
        return path
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    partial = path.with_suffix(f".{os.getpid()}.partial")
    done = subprocess.run([sys.executable, "-m", "sgcs.analysis.build_class_archive", "--dump", str(partial)],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0 or not partial.is_file() or partial.stat().st_size == 0:
        partial.unlink(missing_ok=True)
        last = done.stderr.strip().splitlines()[-1:] or ["no archive written"]
        print(f"spark class archive: not built ({last[0]}); analyses start without it", file=sys.stderr)
        return None
    os.replace(partial, path)
    for stale in path.parent.glob("spark-classes-*.jsa"):
        if stale != path:
            stale.unlink(missing_ok=True)
    return path


def _dump(partial: Path) -> None:
    """In a child process: analyse a small run with a JVM that writes its classes to ``partial`` at exit."""
    from pyspark import SparkContext

    from sgcs.sim.run import simulate
    from sgcs.sim.scenario import load_scenario
    from sgcs.analysis.report import analyze
    from sgcs.analysis.session import spark_session

    with tempfile.TemporaryDirectory(prefix="sgcs-class-archive-") as work:
        run = str(Path(work) / "run")
        simulate(load_scenario(), run, progress=False)
        spark = spark_session(memory="1g", small_input=True, java_extra=f"-XX:ArchiveClassesAtExit={partial} {QUIET}")
        analyze([run], out=str(Path(work) / "report"))
        spark.stop()
        gateway = SparkContext._gateway
        if gateway is not None and gateway.proc is not None:  # the JVM exits when its stdin closes
            gateway.proc.stdin.close()
            gateway.proc.wait(timeout=300)


def main(argv: list[str]) -> int:
    if argv[:1] == ["--dump"] and len(argv) == 2:
        _dump(Path(argv[1]))
        return 0
    existed = (archive_path() or Path("/nonexistent")).is_file()
    built = build(force="--force" in argv)
    if built is not None and (not existed or "--force" in argv):
        print(f"spark class archive: built {built}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
