"""The one place that builds a SparkSession for sgcs jobs.

Theory of operation
-------------------
Every job in this package takes DataFrames and returns DataFrames; only this
module knows how Spark is started. ``spark_session`` returns the active
session if there is one (tests share one session-scoped session; ``sgcs
sweep`` and ``sgcs analyze`` in one process share it too), otherwise builds
one with:

* ``local[*]`` unless a master URL is given (``--master spark://host:7077``);
* the driver bound to loopback, so a local run sends nothing beyond it;
* no web UI and no console progress bar (``sgcs`` shows its own progress
  with rich), and log4j at ERROR through a bundled properties file, because
  Spark's INFO/WARN chatter would bury the command's output
  (written to a temp file, not shipped as package data, so any install has it);
* few shuffle partitions (traces are at most tens of millions of rows and
  the machine has few cores: 200 tiny tasks per shuffle cost more than the
  work) and adaptive execution to coalesce them further;
* UTC as the session time zone, so nothing depends on the host's zone;
* Arrow for ``toPandas`` (the small results the report plots);
* no DataFrame debugging context: with it, PySpark records the Python call
  site in the JVM around every DataFrame and Column function, five or so
  Py4J round trips each, which was about half of the calls that building the
  jobs' plans makes (the jobs' errors lose the Python line of the failing
  call; PySpark reads the setting once per process).

``tune_for_rows`` adapts the SQL settings to the input's size: below
``SMALL_ROWS`` rows a job is dominated by per-stage overhead (scheduling,
adaptive re-planning, Java code generation), so it runs with one shuffle
partition per core, no adaptive execution, no whole-stage code generation and
no generated code for single expressions either (``spark.sql.codegen.factoryMode``
NO_CODEGEN: projections, predicates and orderings are interpreted; compiling
them with Janino cost more than evaluating them over a small trace);
bigger inputs get them back, where they pay.

A JVM started for a small input (``small_input``) also gets
``SMALL_INPUT_JVM``: on a small trace most of the time goes into warming the
JVM up, and these flags halve it. It also gets ``SMALL_INPUT_PAGE``, Spark's
memory page (``spark.buffer.pageSize``): by default a 1g driver gets 8 MB
pages, and every sort, hash aggregation and hash join of every task takes at
least one, zeroed, for a few hundred rows; most of the garbage collector's time
went into that (3.4 s of GC pauses over two analyses of the default run, 1.5 s
with 256 KB pages).

The driver also maps the classes it loads from a class-data-sharing archive
when the set-up built one (class_archive.py): the JVM starts in about half the
time, and a first analysis is 2 s shorter.

``SGCS_SPARK_MEMORY`` sets the driver memory (default: ``memory``, which
``sgcs analyze`` picks by ``driver_memory``: 1g below SMALL_ROWS event rows,
4g above; 2g otherwise): in local mode the driver runs every task, so this is
the job's whole heap. It only applies when this call starts the JVM.
"""

from __future__ import annotations

import os
import sys
import tempfile
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

from sgcs.errors import UsageError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DEFAULT_MASTER = "local[*]"
SHUFFLE_PARTITIONS = 8
SMALL_ROWS = 2_000_000
DEFAULT_MEMORY = "2g"


SMALL_INPUT_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:ReservedCodeCacheSize=240m"
"""JVM flags for small inputs: the quick C1 compiler only (Spark's own code is compiled
at every start, and C2's optimising pass does not pay back in a job of seconds), a
serial collector for a small heap, and the code cache of a tiered JVM (C1 alone gets 48 MB,
which a session that analyses several traces, such as the tests', fills: the JVM then stops
compiling and runs everything interpreted)."""


SMALL_INPUT_PAGE = "256k"
"""spark.buffer.pageSize of a JVM started for a small input (see the module doc); a record
larger than a page still gets a page of its own size."""


def driver_memory(rows: int) -> str:
    """Driver heap for an input of ``rows`` event rows: the JVM takes all of -Xmx it is given
    long before it needs it, so a small trace gets a small heap."""
    return "1g" if rows < SMALL_ROWS else "4g"
# Written to a temp file at start-up rather than shipped as package data, so
# that any install (editable or not) gets it. The shell loggers (repl, Python gateway) at the root's level
# keeps Spark from announcing "Setting default log level" in every run.
_LOG4J_PROPERTIES = """\
rootLogger.level = error
logger.repl.name = org.apache.spark.repl.Main
logger.repl.level = error
logger.gateway.name = org.apache.spark.api.python.PythonGatewayServer
logger.gateway.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
"""


def _log4j_file() -> Path:
    path = Path(tempfile.gettempdir()) / f"sgcs-log4j2-{os.getuid()}.properties"
    if not path.is_file() or path.read_text() != _LOG4J_PROPERTIES:
        path.write_text(_LOG4J_PROPERTIES)
    return path


def _pyspark() -> object:
    try:
        import pyspark
    except ImportError:
        raise UsageError("sgcs analyze needs pyspark; run: pip install 'sgcs[analysis]'") from None
    return pyspark


def _quiet_warnings() -> None:
    """pyspark warns that pandas 3 is untested, and its toPandas uses a deprecated keyword; the
    jobs only call toPandas on small results. Set on every call (also when a session exists),
    since a caller such as pytest may have reset the filters since the session started."""
    warnings.filterwarnings("ignore", message=".*PySpark does not yet fully support pandas.*")
    warnings.filterwarnings("ignore", message=".*copy keyword is deprecated.*")


def tune_for_rows(spark: SparkSession, rows: int) -> None:
    """Runtime SQL settings for an input of ``rows`` event rows (see the module doc)."""
    small = rows < SMALL_ROWS
    cores = max(1, spark.sparkContext.defaultParallelism)
    spark.conf.set("spark.sql.shuffle.partitions", str(cores if small else max(SHUFFLE_PARTITIONS, 2 * cores)))
    spark.conf.set("spark.sql.adaptive.enabled", str(not small).lower())
    spark.conf.set("spark.sql.codegen.wholeStage", str(not small).lower())
    spark.conf.set("spark.sql.codegen.factoryMode", "NO_CODEGEN" if small else "FALLBACK")


def driver_java_options(small_input: bool, java_extra: str = "") -> str:
    """The driver JVM's options: quiet logging, the small-input flags, the class archive (or
    ``java_extra`` instead of it: the archive's own build passes the option that writes it)."""
    from .class_archive import java_options

    options = [f"-Dlog4j2.configurationFile=file:{_log4j_file()}"]
    if small_input:
        options.append(SMALL_INPUT_JVM)
    options.append(java_extra or java_options())
    return " ".join(option for option in options if option)


def spark_session(master: str | None = None, app: str = "sgcs", memory: str | None = None,
                  small_input: bool = False, java_extra: str = "") -> SparkSession:
    """The active SparkSession, or a new one configured for sgcs (see the module doc).
    ``memory``, ``small_input`` and ``java_extra`` only matter when this call starts the JVM."""
    _pyspark()
    from pyspark.sql import SparkSession

    _quiet_warnings()
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # silences the "resolves to loopback" warning
    # Python workers (UDFs, sgcs sweep's simulation tasks) must run this interpreter, which has
    # sgcs installed; Spark reads this once, when the first session starts.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    executor_java = f"-Dlog4j2.configurationFile=file:{_log4j_file()}" + (f" {SMALL_INPUT_JVM}" if small_input else "")
    builder = (
        SparkSession.builder.master(master or DEFAULT_MASTER)
        .appName(app)
        .config("spark.driver.memory", os.environ.get("SGCS_SPARK_MEMORY", memory or DEFAULT_MEMORY))
        .config("spark.driver.extraJavaOptions", driver_java_options(small_input, java_extra))
        .config("spark.executor.extraJavaOptions", executor_java)  # not the archive: another machine's
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(SHUFFLE_PARTITIONS))
        .config("spark.sql.adaptive.enabled", "true")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.python.sql.dataFrameDebugging.enabled", "false")
    )
    if small_input:
        builder = builder.config("spark.buffer.pageSize", SMALL_INPUT_PAGE)
    if master is None or master.startswith("local"):
        builder = builder.config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session
