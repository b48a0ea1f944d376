"""A class-data-sharing archive of the Java classes an analysis loads, so Spark starts and warms up sooner.

Theory of operation
-------------------
A Spark driver loads some 15,000 classes from pyspark's 280 jars the first time
it plans and runs a query: parsing, verifying and linking them is a large part
of the JVM's start and of a first analysis on a small trace. The JVM can map
classes it loaded once from an archive instead (application class-data
sharing, JDK 13 and later: ``-XX:ArchiveClassesAtExit`` writes the archive when
the JVM exits, ``-XX:SharedArchiveFile`` uses it). On the default run: the
JVM's start 4.0 to 4.6 s without, 2.3 to 2.6 s with it; the first analysis
13.0 to 14.3 s without, 11.0 to 12.3 s with it (one job at a time;
benchmarks/README.md, "Session 17").

``build`` makes it once per machine (scripts/setup.sh calls ``python -m
spark_analysis.class_archive``): a child process simulates the default
scenario into a temporary directory and analyses it with the archive option,
stops Spark and waits for the JVM to exit, so the archive is complete; the
parent renames it into place only then. A partial archive must never be in
place: the JVM crashes on a truncated one (it checks the header, not the
length). ``java_options`` gives the options that use it, when it exists.

The archive is only valid for the Java runtime and the jars that made it, so
its name carries a key of both (the java binary's path, size and time, and
pyspark's version): a new JDK or pyspark finds no archive, and runs as before
until the set-up builds one again. A mismatch the key cannot see (a jar
changed in place) costs nothing either: the JVM checks the class path itself
and ignores the archive (its warning is silenced). It lives in the virtual
environment (``sys.prefix``), so a fresh clone's set-up builds its own; where
that is not writable there is no archive, and nothing else changes.
``SGCS_SPARK_CLASS_ARCHIVE=0`` turns it off.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ENV_SWITCH = "SGCS_SPARK_CLASS_ARCHIVE"
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"
"""A JVM that cannot use the archive (the class path changed) says so on stderr, and carries on."""


def _java() -> Path | None:
    """The java that spark-submit runs: $JAVA_HOME/bin/java, else java on the PATH."""
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    return Path(found).resolve() if found and Path(found).exists() else None


def archive_path() -> Path | None:
    """Where the archive for this Java runtime and pyspark goes, or None (no java, no pyspark)."""
    java = _java()
    try:
        import pyspark
    except ImportError:
        return None
    if java is None:
        return None
    stat = java.stat()
    key = hashlib.sha256(f"{java}:{stat.st_size}:{stat.st_mtime_ns}:{pyspark.__version__}".encode()).hexdigest()
    return Path(sys.prefix) / "share" / "sgcs" / f"spark-classes-{key[:16]}.jsa"


def enabled() -> bool:
    return os.environ.get(ENV_SWITCH, "1") != "0"


def java_options() -> str:
    """The driver's JVM options that use the archive, or "" when there is none."""
    path = archive_path() if enabled() else None
    if path is None or not path.is_file():
        return ""
    return f"-XX:SharedArchiveFile={path} {QUIET}"


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
    done = subprocess.run([sys.executable, "-m", "spark_analysis.class_archive", "--dump", str(partial)],
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

    from simulations.run import simulate
    from simulations.scenario import load_scenario
    from spark_analysis.report import analyze
    from spark_analysis.session import spark_session

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
