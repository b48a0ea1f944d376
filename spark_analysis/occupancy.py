"""Buffer and flow-window occupancy, from the optional ``stats`` dataset.

Theory of operation
-------------------
``RUN/stats/`` (when the simulator records it) holds one row per time
bucket boundary, node and group: ``buffered`` (the messages the node holds,
which stability and garbage collection bound) and ``window`` (its records
not yet stable: the flow window's occupancy, which makes senders wait at
``window_max``). A trace
without it reports "not recorded": ``readers.read_stats`` returns None and
the report says so.

``occupancy_summary`` gives p50, p99 and max of both over every (bucket,
node) row of a run and group; ``occupancy_over_time`` gives, per bucket,
the mean and max over nodes, which is what the report plots.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

ACCURACY = 10_000
METRICS = ("buffered", "window")


def occupancy_summary(stats_df: DataFrame) -> DataFrame:
    """Per (run, group): rows, and p50/p99/max of buffered and window."""
    aggs = []
    for name in METRICS:
        q = F.percentile_approx(name, [0.5, 0.99], ACCURACY)
        aggs += [q[0].alias(f"{name}_p50"), q[1].alias(f"{name}_p99"), F.max(name).alias(f"{name}_max")]
    return stats_df.groupBy("run", "group").agg(F.count("*").alias("rows"), *aggs)


def occupancy_over_time(stats_df: DataFrame) -> DataFrame:
    """Per (run, group, t): mean and max over nodes of buffered and window."""
    aggs = [f(name).alias(f"{name}_{f.__name__}") for name in METRICS for f in (F.mean, F.max)]
    return stats_df.groupBy("run", "group", "t").agg(*aggs)
