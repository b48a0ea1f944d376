"""Failure detection: time to suspect and exclude a crashed node, and false suspicions.

Theory of operation
-------------------
The definitions are those of benchmarks/membership.py, computed with joins so
they scale to traces of millions of rows.

``detection_times``: one row per ``crash`` row (node X at time tc, row
position p).

* ``first_suspicion_s``: from tc to the first ``suspect`` row after p, at
  any node, whose target is X.
* Survivors: the nodes with no crash row (at any time), other than X,
  whose last installed view before p in a group held X, and that did not
  leave that group before installing a view without X. ``exclusion`` for a survivor is the delay until it has installed a
  view without X (after p) in *every* such group; ``survivors`` counts them,
  ``never_excluded`` those that never did, and ``exclusion_median_s`` /
  ``exclusion_max_s`` summarise the others (an exact median, interpolated
  like pandas).
* With ``runs_meta_df`` the delays are also given in gossip rounds
  (seconds / gossip_interval), which makes runs with different intervals
  comparable.

``false_suspicions``: per run, ``suspects`` (all suspect rows) and
``false_suspects``: those whose target, at that row, was up (its last
crash/recover row before it is not a crash), had not left (its last
join/leave row is not a leave) and was not paused (pause faults come from
meta.json; without ``runs_meta_df`` pauses are unknown and ignored).
``false_per_node_per_s`` divides by nodes x duration (meta.json's, or the
distinct nodes and last event time of the trace without meta).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from .common import installed_views

_CRASH = ["run", "x", "tc", "p"]


def _crashes(events: DataFrame) -> DataFrame:
    return events.where(F.col("kind") == "crash").select(
        "run", F.col("node").alias("x"), F.col("t").alias("tc"), F.col("pos").alias("p"))


def _first_suspicion(events: DataFrame, crashes: DataFrame) -> DataFrame:
    suspects = events.where(F.col("kind") == "suspect").select("run", "target", "t", "pos")
    joined = crashes.join(suspects, (crashes.run == suspects.run) & (suspects.target == crashes.x)
                          & (suspects.pos > crashes.p)).drop(suspects.run)
    return joined.groupBy(*_CRASH).agg((F.min_by("t", "pos") - F.col("tc")).alias("first_suspicion_s"))


def _views_around(views: DataFrame, crashes: DataFrame, before: bool) -> DataFrame:
    """Installed views before (or after) each crash row, with ``has_x``."""
    side = views.pos < crashes.p if before else views.pos > crashes.p
    joined = crashes.join(views, (views.run == crashes.run) & side).drop(views.run)
    return joined.withColumn("has_x", F.array_contains("members", F.col("x")))


def _survivor_exclusions(events: DataFrame, crashes: DataFrame) -> DataFrame:
    """Per (crash, survivor): ``never`` (some group never excluded X) and ``done_t``."""
    views = installed_views(events).select("run", "node", "group", "members", "t", "pos")
    current = (_views_around(views, crashes, before=True).groupBy(*_CRASH, "node", "group")
               .agg(F.max_by("has_x", "pos").alias("has_x")).where("has_x"))
    crashed = events.where(F.col("kind") == "crash").select("run", "node").distinct()
    left = (events.where(F.col("kind") == "leave").groupBy("run", "node", "group")
            .agg(F.min("pos").alias("p_leave")))
    waiting = current.where(F.col("node") != F.col("x")).join(crashed, ["run", "node"], "left_anti")
    excluded = (_views_around(views, crashes, before=False).where(~F.col("has_x"))
                .groupBy(*_CRASH, "node", "group").agg(F.min_by("t", "pos").alias("t_ex"),
                                                       F.min("pos").alias("p_ex")))
    # A member that left the group before excluding X is no survivor there
    # (members of a real run all leave at its end, after the exclusion).
    pairs = (waiting.join(excluded, [*_CRASH, "node", "group"], "left").join(left, ["run", "node", "group"], "left")
             .where(F.col("p_leave").isNull() | (F.col("p_ex").isNotNull() & (F.col("p_ex") < F.col("p_leave")))))
    return pairs.groupBy(*_CRASH, "node").agg(
        F.max(F.col("t_ex").isNull().cast("int")).cast("boolean").alias("never"), F.max("t_ex").alias("done_t"))


def _rounds(seconds: str) -> Column:
    return (F.col(seconds) / F.col("gossip_interval")).alias(seconds.removesuffix("_s") + "_rounds")


def detection_times(events_df: DataFrame, runs_meta_df: DataFrame | None = None) -> DataFrame:
    """One row per crash: run, node, t, first_suspicion_s, survivors, exclusion_median_s,
    exclusion_max_s, never_excluded (and the same delays in rounds with ``runs_meta_df``)."""
    crashes = _crashes(events_df)
    survivors = _survivor_exclusions(events_df, crashes)
    delay = F.when(~F.col("never"), F.col("done_t") - F.col("tc"))
    summary = survivors.groupBy(*_CRASH).agg(
        F.count("*").alias("survivors"), F.median(delay).alias("exclusion_median_s"),
        F.max(delay).alias("exclusion_max_s"), F.sum(F.col("never").cast("long")).alias("never_excluded"))
    out = (crashes.join(_first_suspicion(events_df, crashes), _CRASH, "left").join(summary, _CRASH, "left")
           .select("run", F.col("x").alias("node"), F.col("tc").alias("t"), "p", "first_suspicion_s",
                   F.coalesce("survivors", F.lit(0)).alias("survivors"), "exclusion_median_s", "exclusion_max_s",
                   F.coalesce("never_excluded", F.lit(0)).alias("never_excluded")))
    if runs_meta_df is not None:
        out = out.join(F.broadcast(runs_meta_df.select("run", "gossip_interval")), "run", "left").select(
            *out.columns, *[_rounds(c) for c in ("first_suspicion_s", "exclusion_median_s", "exclusion_max_s")])
    return out.drop("p")  # unordered: a sort costs an extra Spark job, callers sort the few rows


def _last_state(suspects: DataFrame, events: DataFrame, kinds: tuple[str, str]) -> DataFrame:
    """Per suspect row: the kind of its target's last row among ``kinds`` before it (or null)."""
    life = events.where(F.col("kind").isin(*kinds)).select(
        "run", F.col("node").alias("target"), F.col("pos").alias("lpos"), F.col("kind").alias("lkind"))
    joined = suspects.join(life, ["run", "target"]).where(F.col("lpos") < F.col("pos"))
    return joined.groupBy("run", "pos").agg(F.max_by("lkind", "lpos").alias(f"last_{kinds[0]}"))


def _paused(suspects: DataFrame, runs_meta_df: DataFrame | None) -> Column:
    if runs_meta_df is None:
        return F.lit(False)
    return F.exists("pauses", lambda p: (p["node"] == F.col("target")) & (p["start"] <= F.col("t"))
                    & (F.col("t") < p["end"]))


def false_suspicions(events_df: DataFrame, runs_meta_df: DataFrame | None = None) -> DataFrame:
    """Per run: suspects, false_suspects and false_per_node_per_s (see the module doc)."""
    suspects = events_df.where(F.col("kind") == "suspect").select("run", "t", "pos", "node", "target")
    crash_state = _last_state(suspects, events_df, ("crash", "recover"))
    leave_state = _last_state(suspects, events_df, ("leave", "join"))
    rows = suspects.join(crash_state, ["run", "pos"], "left").join(leave_state, ["run", "pos"], "left")
    if runs_meta_df is not None:
        rows = rows.join(F.broadcast(runs_meta_df.select("run", "pauses")), "run", "left")
    false = (F.coalesce(F.col("last_crash"), F.lit("")) != "crash") & \
        (F.coalesce(F.col("last_leave"), F.lit("")) != "leave") & ~F.coalesce(_paused(rows, runs_meta_df), F.lit(False))
    counts = rows.groupBy("run").agg(F.count("*").alias("suspects"),
                                     F.sum(false.cast("long")).alias("false_suspects"))
    scale = _node_seconds(events_df, runs_meta_df)
    runs = events_df.select("run").distinct()
    return (runs.join(counts, "run", "left").join(scale, "run", "left")
            .select("run", F.coalesce("suspects", F.lit(0)).alias("suspects"),
                    F.coalesce("false_suspects", F.lit(0)).alias("false_suspects"),
                    (F.coalesce("false_suspects", F.lit(0)) / F.col("node_seconds")).alias("false_per_node_per_s")))


def _node_seconds(events: DataFrame, runs_meta_df: DataFrame | None) -> DataFrame:
    if runs_meta_df is not None:
        return runs_meta_df.select("run", (F.col("nodes") * F.col("duration")).alias("node_seconds"))
    return events.groupBy("run").agg((F.countDistinct("node") * F.max("t")).alias("node_seconds"))
