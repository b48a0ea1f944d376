"""View changes: how long they take, and how long senders would have been blocked.

Theory of operation
-------------------
A *change* is one installed view id V of a group that some node installs
in place of an earlier view of the same incarnation (the views installed at
a node's start, or restart after a crash, are not changes). Its *previous* view is the one most of V's installers held just
before it. A change starts at the earliest of:

* the first optimistic ``view`` row with id V (an optimistic view carries
  the id of the view it proposes, see simulations/checks.py), and
* the first ``suspect`` row whose target V drops from the previous view, at
  or after the previous view's first installation,

and falls back to V's first installation when neither exists (a join merge
whose proposal left no row). ``to_first_s`` and ``to_all_s`` measure from
the start to the first and to the last installation of V.

Blocked time follows benchmarks/membership.py: per node and group, every
run of optimistic view rows ends at the next installed view row; the span
from the run's first optimistic row to that installation is how long a
sender without optimistic delivery would have been blocked. ``changes``,
``total_s``, ``median_s``, ``max_s`` and ``unresolved`` (runs that never
ended) per run. ``view_counts`` gives installed rows, distinct installed ids
and optimistic rows per run, as the benchmark does.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from .common import installed_views, is_optimistic, optimistic_views, with_incarnation

_VIEW = ["run", "group", "view_id"]


def _previous_views(events: DataFrame) -> DataFrame:
    """Per change (run, group, view_id): prev_view_id (the mode over installers) and dropped members."""
    if "incarnation" not in events.columns:
        events = with_incarnation(events)
    views = installed_views(events).select("run", "node", "incarnation", "group", "view_id", "members", "pos")
    # per incarnation: a restarted node's first (singleton) view replaces nothing
    order = Window.partitionBy("run", "node", "incarnation", "group").orderBy("pos")
    views = views.withColumn("prev_view_id", F.lag("view_id").over(order)).withColumn(
        "prev_members", F.lag("members").over(order))
    changes = views.where(F.col("prev_view_id").isNotNull() & (F.col("prev_view_id") != F.col("view_id")))
    votes = changes.groupBy(*_VIEW, "prev_view_id").agg(
        F.count("*").alias("n"), F.first("members").alias("members"), F.first("prev_members").alias("prev_members"))
    best = Window.partitionBy(*_VIEW).orderBy(F.desc("n"), "prev_view_id")
    return (votes.withColumn("rank", F.row_number().over(best)).where("rank = 1")
            .select(*_VIEW, "prev_view_id", F.array_except("prev_members", "members").alias("dropped")))


def view_changes(events_df: DataFrame) -> DataFrame:
    """One row per change: run, group, view_id, members_dropped, start, to_first_s, to_all_s, installers."""
    installs = installed_views(events_df).groupBy(*_VIEW).agg(
        F.min("t").alias("first_install"), F.max("t").alias("last_install"),
        F.countDistinct("node").alias("installers"))
    changes = _previous_views(events_df).join(installs, _VIEW)
    prev_first = installs.select("run", "group", F.col("view_id").alias("prev_view_id"),
                                 F.col("first_install").alias("prev_install"))
    changes = changes.join(prev_first, ["run", "group", "prev_view_id"], "left")
    optimistic = optimistic_views(events_df).groupBy(*_VIEW).agg(F.min("t").alias("optimistic_start"))
    suspects = events_df.where(F.col("kind") == "suspect").select("run", "target", F.col("t").alias("ts"))
    hit = changes.join(suspects, (changes.run == suspects.run) & F.array_contains(changes.dropped, suspects.target)
                       & (suspects.ts >= F.coalesce(changes.prev_install, F.lit(0.0)))
                       & (suspects.ts <= changes.last_install)).drop(suspects.run)
    suspect_start = hit.groupBy(*_VIEW).agg(F.min("ts").alias("suspect_start"))
    start = F.coalesce(F.least("optimistic_start", "suspect_start"), F.col("first_install"))
    return (changes.join(optimistic, _VIEW, "left").join(suspect_start, _VIEW, "left")
            .select(*_VIEW, F.size("dropped").alias("members_dropped"), start.alias("start"),
                    (F.col("first_install") - start).alias("to_first_s"),
                    (F.col("last_install") - start).alias("to_all_s"), "installers"))


def view_change_summary(changes: DataFrame) -> DataFrame:
    """Per run: changes, median and max of to_all_s."""
    return changes.groupBy("run").agg(
        F.count("*").alias("changes"), F.median("to_first_s").alias("to_first_median_s"),
        F.median("to_all_s").alias("to_all_median_s"), F.max("to_all_s").alias("to_all_max_s"))


def blocked_spans(events_df: DataFrame) -> DataFrame:
    """Per (run, node, group, run of optimistic rows): started, ended (null: never), span."""
    views = events_df.where(F.col("kind") == "view").select("run", "node", "group", "t", "pos",
                                                            (~is_optimistic()).alias("installed"))
    order = Window.partitionBy("run", "node", "group").orderBy("pos").rowsBetween(Window.unboundedPreceding, -1)
    views = views.withColumn("stretch", F.coalesce(F.sum(F.col("installed").cast("long")).over(order), F.lit(0)))
    keys = ["run", "node", "group", "stretch"]
    started = views.where(~F.col("installed")).groupBy(*keys).agg(F.min("t").alias("started"))
    ended = views.where("installed").groupBy(*keys).agg(F.min_by("t", "pos").alias("ended"))
    return started.join(ended, keys, "left").withColumn("span", F.col("ended") - F.col("started"))


def blocked_summary(spans: DataFrame) -> DataFrame:
    """Per run: changes, total_s, median_s, max_s, unresolved."""
    return spans.groupBy("run").agg(
        F.count("span").alias("changes"), F.sum("span").alias("total_s"), F.median("span").alias("median_s"),
        F.max("span").alias("max_s"), F.sum(F.col("ended").isNull().cast("long")).alias("unresolved"))


def view_counts(events_df: DataFrame) -> DataFrame:
    """Per run: installed view rows, distinct installed ids, optimistic view rows."""
    views = events_df.where(F.col("kind") == "view")
    installed = ~is_optimistic()
    return views.groupBy("run").agg(
        F.sum(installed.cast("long")).alias("installed"),
        F.countDistinct(F.when(installed, F.col("view_id"))).alias("distinct_ids"),
        F.sum((~installed).cast("long")).alias("optimistic"))
