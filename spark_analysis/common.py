"""Row selections shared by the jobs, with the same meanings as simulations/checks.py.

Theory of operation
-------------------
Every job works on the events DataFrame of ``readers.read_events`` (columns
of trace schema 1 plus ``run`` and ``pos``). The few derived notions that
several jobs need are defined once here:

* ``is_optimistic``: the ``optimistic`` column as a plain bool (null means
  not optimistic), so an *installed* view is a ``view`` row that is not
  optimistic and an *optimistic view* is one that is.
* ``with_incarnation``: a node that crashes and recovers restarts with fresh
  state, so its history is split at each ``recover`` row: ``incarnation`` is
  the number of the node's ``recover`` rows at or before the row (a running
  count in ``pos`` order), exactly as checks.py does.
* ``multicast``: a row whose ``dest`` is null (unicasts have their own
  per-destination sequence numbers and are keyed apart).
* ``rolled_back``: the distinct (run, group, sender, seq) of ``rollback``
  rows; checks.py voids those messages for invariants 4, 6 and 7.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

MESSAGE = ["run", "group", "sender", "seq"]


def is_optimistic() -> Column:
    return F.coalesce(F.col("optimistic"), F.lit(False))


def installed_views(events: DataFrame) -> DataFrame:
    return events.where((F.col("kind") == "view") & ~is_optimistic())


def optimistic_views(events: DataFrame) -> DataFrame:
    return events.where((F.col("kind") == "view") & is_optimistic())


def multicast() -> Column:
    return F.col("dest").isNull()


def with_incarnation(events: DataFrame) -> DataFrame:
    """Every row with ``incarnation`` of its node (running count of recover rows)."""
    by_node = Window.partitionBy("run", "node").orderBy("pos").rowsBetween(Window.unboundedPreceding, 0)
    recover = F.when(F.col("kind") == "recover", 1).otherwise(0)
    return events.withColumn("incarnation", F.sum(recover).over(by_node))


def rolled_back(events: DataFrame) -> DataFrame:
    return events.where(F.col("kind") == "rollback").select(*MESSAGE).distinct()


def without_rolled_back(rows: DataFrame, events: DataFrame) -> DataFrame:
    """``rows`` minus those of rolled-back messages (checks.py's _without_rolled_back)."""
    # broadcast: rollbacks are rare, and a shuffle of every delivery here would be repeated per use
    return rows.join(F.broadcast(rolled_back(events)), MESSAGE, "left_anti")
