"""Delivery latency per delivery order.

Theory of operation
-------------------
A multicast is identified by (run, group, sender, seq). Its latency at a
node is that node's first ``deliver`` row time minus the ``send`` row time.
The sender's own delivery is left out, as ``sgcs bench`` does: under FIFO
it happens at the instant of sending and would pull every percentile to
zero, while under total order it measures the ordering wait, which the other
members see as well. Unicasts (``dest`` not null) are left out: they are not
ordered and have their own numbering.

The order of a message is its ``send`` row's ``order`` column.
``latency_quantiles`` computes, in one aggregation, the count, max, mean and
the latency at every percent (0, 0.01, ..., 1), from which the report takes
both the p50/p90/p99 summary and the CDF plot (``summary_from_quantiles``):
one Spark job instead of two. Percentiles come from ``percentile_approx`` with an accuracy of 10,000
(relative rank error 1e-4), which keeps memory per group bounded however
many deliveries a trace holds; ``max`` and ``count`` are exact.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from .common import MESSAGE, multicast

ACCURACY = 10_000
QUANTILES = (0.5, 0.9, 0.99)
LEVELS = tuple(i / 100 for i in range(101))
"""Quantile levels of ``latency_quantiles``: every percent, so 0.5, 0.9 and 0.99 are among them."""


def delivery_latencies(events_df: DataFrame) -> DataFrame:
    """One row per (message, delivering node other than the sender): run, order, group,
    sender, seq, node, latency (seconds)."""
    sends = (events_df.where((F.col("kind") == "send") & multicast())
             .groupBy(*MESSAGE).agg(F.min("t").alias("t_send"), F.first("order", ignorenulls=True).alias("order")))
    delivered = (events_df.where((F.col("kind") == "deliver") & multicast() & (F.col("node") != F.col("sender")))
                 .groupBy(*MESSAGE, "node").agg(F.min("t").alias("t_deliver")))
    return (delivered.join(sends, MESSAGE)
            .select("run", F.coalesce("order", F.lit("unknown")).alias("order"), "group", "sender", "seq", "node",
                    (F.col("t_deliver") - F.col("t_send")).alias("latency")))


def latency_summary(latencies: DataFrame) -> DataFrame:
    """Per (run, order): count, p50, p90, p99, max and mean latency in seconds."""
    q = F.percentile_approx("latency", list(QUANTILES), ACCURACY)
    return (latencies.groupBy("run", "order")
            .agg(F.count("*").alias("count"), q.alias("q"), F.max("latency").alias("max"),
                 F.avg("latency").alias("mean"))
            .select("run", "order", "count", F.col("q")[0].alias("p50"), F.col("q")[1].alias("p90"),
                    F.col("q")[2].alias("p99"), "max", "mean"))


def latency_cdf(latencies: DataFrame, points: int = 200) -> DataFrame:
    """Per (run, order): ``latency`` at ``points`` evenly spaced quantiles (0 to 1), for a CDF plot."""
    levels = [i / (points - 1) for i in range(points)]
    return (latencies.groupBy("run", "order")
            .agg(F.percentile_approx("latency", levels, ACCURACY).alias("latency"))
            .withColumn("quantile", F.array(*[F.lit(x) for x in levels])))


def latency_quantiles(latencies: DataFrame) -> DataFrame:
    """Per (run, order): count, max, mean, and ``latency`` at each of ``LEVELS`` (an array)."""
    return (latencies.groupBy("run", "order")
            .agg(F.count("*").alias("count"), F.max("latency").alias("max"), F.avg("latency").alias("mean"),
                 F.percentile_approx("latency", list(LEVELS), ACCURACY).alias("latency")))


def summary_from_quantiles(row: dict[str, Any]) -> dict[str, Any]:
    """count, p50, p90, p99, max and mean from one row of ``latency_quantiles``."""
    at = {round(level, 2): value for level, value in zip(LEVELS, row["latency"])}
    return {"count": row["count"], **{f"p{round(q * 100)}": at[q] for q in QUANTILES},
            "max": row["max"], "mean": row["mean"]}
