"""Per-member network load by message type (the paper's O(log N) claim).

Theory of operation
-------------------
The ``net`` table holds, per run, time bucket, node and ``msg_type``, the
datagrams and bytes that node sent and received. Load per member is traffic
divided by *live node-seconds*, not by ``nodes * duration``: a crashed node,
or one that a later join fault starts, sends nothing, and counting it would
make a run with faults look cheaper per member than it is.

A node is live in a bucket when it sent anything in it (any ``msg_type``):
every live member sends a heartbeat each ``gossip_interval``, far more
often than the 1 s buckets, so a bucket without a send means a node that is
down, paused or not started. Each live (node, bucket) contributes the
bucket's width, ``min(net_bucket, duration - t)`` (the last bucket may be
cut short by the run's end).

``per_member_load`` returns one row per (run, msg_type):
``msgs_per_member_per_s``, ``bytes_per_member_per_s`` (sent) and
``recv_msgs_per_member_per_s``, ``recv_bytes_per_member_per_s``, all over
the run's live node-seconds, plus ``nodes`` (meta.json's N) so that a sweep
can fit load against N. ``total_load`` sums them over message types.
Results are unordered (a sort costs Spark an extra job; callers sort the
small collected table).
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

LOAD_COLUMNS = ("msgs_per_member_per_s", "bytes_per_member_per_s",
                "recv_msgs_per_member_per_s", "recv_bytes_per_member_per_s")
_SOURCES = ("sent_count", "sent_bytes", "recv_count", "recv_bytes")


def live_node_seconds(net_df: DataFrame, runs_meta_df: DataFrame) -> DataFrame:
    """(run, live_node_seconds): the summed width of every bucket in which a node sent something."""
    meta = runs_meta_df.select("run", "duration", "net_bucket")
    live = (net_df.groupBy("run", "t", "node").agg(F.sum("sent_count").alias("sent"))
            .where(F.col("sent") > 0)
            .join(F.broadcast(meta), "run"))
    width = F.least(F.col("net_bucket"), F.greatest(F.col("duration") - F.col("t"), F.lit(0.0)))
    # A trace without a duration (hand-made) falls back to whole buckets.
    width = F.coalesce(width, F.col("net_bucket"), F.lit(1.0))
    return live.groupBy("run").agg(F.sum(width).alias("live_node_seconds"))


def per_member_load(net_df: DataFrame, runs_meta_df: DataFrame) -> DataFrame:
    """Per (run, msg_type): messages and bytes sent and received per live member per second."""
    seconds = live_node_seconds(net_df, runs_meta_df)
    sums = net_df.groupBy("run", "msg_type").agg(*[F.sum(c).alias(c) for c in _SOURCES])
    rates = [(F.col(src) / F.col("live_node_seconds")).alias(name) for src, name in zip(_SOURCES, LOAD_COLUMNS)]
    return (sums.join(seconds, "run")
            .join(F.broadcast(runs_meta_df.select("run", "nodes")), "run", "left")
            .select("run", "nodes", "msg_type", *rates))


def total_load(load_df: DataFrame) -> DataFrame:
    """Per run: the four rates of ``per_member_load`` summed over message types."""
    return load_df.groupBy("run", "nodes").agg(*[F.sum(c).alias(c) for c in LOAD_COLUMNS])
