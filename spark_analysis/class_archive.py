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

build_class_archive.py makes it once per machine (scripts/setup.sh calls
``python -m sgcs.analysis.build_class_archive``): a child process simulates the default
scenario into a temporary directory and analyses it with the archive option,
stops Spark and waits for the JVM to exit, so the archive is complete; the
parent renames it into place only then. A partial archive must never be in
place: the JVM crashes on a truncated one (it checks the header, not the
length). ``java_options`` (here) gives the options that use it, when it exists.

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
import sys
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
