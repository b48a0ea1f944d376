"""Reliability per message: the fraction of live view members that delivered it.

Theory of operation
-------------------
For each multicast (run, group, sender, seq) with a ``send`` row, its
*view* is the membership of the view named by the send's ``view_id`` (the
first ``view`` row with that id; an optimistic send names its optimistic
view, whose id is that of the view it is delivered in, as in
simulations/checks.py's ``reach``).

A member is *live* for a message sent at t when it is not down at any
moment of [t, t + grace]: down means between a ``crash`` row and the node's
next ``recover`` row, or between a ``leave`` row in that group and the
node's next ``join`` in it. A paused or partitioned member is live: the
protocol owes it the message. ``fraction`` = (live members that delivered
it) / (live members). Rolled-back messages (they must be delivered nowhere)
and messages sent in the last ``grace`` seconds (possibly still in flight)
are left out, like checks.py does.

``reliability_bins`` is the histogram with each bin's sum and minimum of
fractions, so that ``summary_from_bins`` derives the summary from it without
a second Spark job. ``reliability_histogram`` bins fractions into ``BINS`` equal bins over
[0, 1) plus a bin for exactly 1.0, because plain gossip is bimodal: the
mass sits at 1.0 and near 0, and a full-delivery bin makes that visible.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from .common import MESSAGE, multicast, without_rolled_back

GRACE = 2.0
BINS = 20


def _down_intervals(events: DataFrame) -> DataFrame:
    """(run, node, group or null, start, end): crash..recover (any group) and leave..join (that group)."""
    def spans(kinds: tuple[str, str], keys: list[str]) -> DataFrame:
        rows = events.where(F.col("kind").isin(*kinds)).select("run", "node", "group", "kind", "t", "pos")
        order = Window.partitionBy("run", "node", *keys).orderBy("pos")
        rows = rows.withColumn("next_t", F.lead("t").over(order)).withColumn("next_kind", F.lead("kind").over(order))
        end = F.when(F.col("next_kind") == kinds[1], F.col("next_t")).otherwise(F.lit(float("inf")))
        group = F.col("group") if keys else F.lit(None).cast("string")
        return rows.where(F.col("kind") == kinds[0]).select("run", "node", group.alias("group"),
                                                            F.col("t").alias("start"), end.alias("end"))
    return spans(("crash", "recover"), []).unionByName(spans(("leave", "join"), ["group"]))


def _sends(events: DataFrame, grace: float) -> DataFrame:
    end = events.groupBy("run").agg(F.max("t").alias("t_end"))
    sends = events.where((F.col("kind") == "send") & multicast()).select(*MESSAGE, "t", "view_id")
    sends = sends.join(end, "run").where(F.col("t") <= F.col("t_end") - grace).drop("t_end")
    return without_rolled_back(sends.dropDuplicates(MESSAGE), events)


def per_message(events_df: DataFrame, grace: float = GRACE) -> DataFrame:
    """One row per multicast: run, group, sender, seq, t, live_members, delivered, fraction."""
    views = (events_df.where(F.col("kind") == "view").groupBy("run", "group", "view_id")
             .agg(F.min_by("members", "pos").alias("members")))
    expected = (_sends(events_df, grace).join(views, ["run", "group", "view_id"])
                .select(*MESSAGE, "t", F.explode("members").alias("node")))
    down = _down_intervals(events_df)
    overlaps = ((expected.run == down.run) & (expected.node == down.node)
                & (down.group.isNull() | (down.group == expected.group))
                & (down.start <= expected.t + grace) & (down.end > expected.t))
    live = expected.join(down, overlaps, "left_anti")
    got = (events_df.where((F.col("kind") == "deliver") & multicast()).select(*MESSAGE, "node").distinct()
           .withColumn("delivered", F.lit(1)))
    counted = live.join(got, [*MESSAGE, "node"], "left")
    return (counted.groupBy(*MESSAGE, "t")
            .agg(F.count("*").alias("live_members"), F.count("delivered").alias("delivered"))
            .withColumn("fraction", F.col("delivered") / F.col("live_members")))


def reliability_summary(messages: DataFrame) -> DataFrame:
    """Per run: messages, mean and min fraction, and the fraction of messages at 100%."""
    return (messages.groupBy("run")
            .agg(F.count("*").alias("messages"), F.avg("fraction").alias("mean"), F.min("fraction").alias("min"),
                 F.avg((F.col("fraction") >= 1.0).cast("double")).alias("full_fraction")))


def reliability_histogram(messages: DataFrame, bins: int = BINS) -> DataFrame:
    """Per (run, bin): ``low`` (bin's lower edge; 1.0 is its own bin), messages, share."""
    low = F.when(F.col("fraction") >= 1.0, F.lit(1.0)).otherwise(F.floor(F.col("fraction") * bins) / bins)
    counts = messages.groupBy("run", low.alias("low")).agg(F.count("*").alias("messages"))
    total = Window.partitionBy("run")
    return counts.withColumn("share", F.col("messages") / F.sum("messages").over(total))


def reliability_bins(messages: DataFrame, bins: int = BINS) -> DataFrame:
    """Per (run, bin): ``low``, messages, and the sum and min of the fractions in the bin."""
    low = F.when(F.col("fraction") >= 1.0, F.lit(1.0)).otherwise(F.floor(F.col("fraction") * bins) / bins)
    return (messages.groupBy("run", low.alias("low"))
            .agg(F.count("*").alias("messages"), F.sum("fraction").alias("sum"), F.min("fraction").alias("min")))


def summary_from_bins(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One run's summary and histogram from its ``reliability_bins`` rows (plain dicts)."""
    messages = sum(r["messages"] for r in rows)
    if not messages:
        return {"messages": 0, "mean": None, "min": None, "full_fraction": None, "histogram": []}
    full = sum(r["messages"] for r in rows if r["low"] >= 1.0)
    return {"messages": messages, "mean": sum(r["sum"] for r in rows) / messages,
            "min": min(r["min"] for r in rows), "full_fraction": full / messages,
            "histogram": [{"low": r["low"], "messages": r["messages"], "share": r["messages"] / messages}
                          for r in rows]}
