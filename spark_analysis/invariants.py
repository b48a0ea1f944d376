"""Invariants 1 to 8 (docs/guarantees.md) at scale.

Theory of operation
-------------------
Each check returns a DataFrame with one row per violation, counted exactly
as ``sgcs.sim.checks.violations()`` counts it on a pandas-sized trace,
under the same keys ("1_duplicate" ... "8_without_outcome"); the
definitions (incarnations split at ``recover`` rows, unicasts keyed apart,
rolled-back messages voided, a ``grace`` for messages in flight) are those
of checks.py, whose docstrings give the details. Everything is joins,
aggregations and window functions partitioned by node or message, so
nothing is collected and no step is quadratic in a node's deliveries.
Trace order is the ``pos`` column (readers.py); t is only used to prune.

1. Duplicates: ``row_number`` over (node, incarnation, stream, seq) > 1.
2. FIFO: a seq not above the running max of the earlier rows of its stream.
3. Total order: checks.py compares every node with the node that delivered
   the most in the group (ties: the one whose first delivery comes first).
   Here: one window ranks the reference node's deliveries, a join gives each
   node's deliveries those ranks, and ``lag`` over the node's own order
   counts adjacent inversions. O(deliveries), no node pairs.
4. Causal order: checks.py keeps, per node, a vector of the latest seq seen
   per stream; a delivery of m at n at row i violates when some stream j has
   cause_m[j] (the sender's latest seq on j before sending m) above n's
   latest delivered seq on j before i, and n delivers (j, cause_m[j]) after
   i. Materialising vectors would cost deliveries x senders. Instead,
   observe that such an x = (j, cause_m[j]) first appeared before m was sent
   and is last delivered at n after i: m *overtook* x at n, inside x's
   window at n (its latency there). Candidate pairs (m, x) come from a join
   of deliveries on (node, time bucket), with x's window spread over the
   buckets it covers, then filtered on ``pos`` (m sent after x's first row,
   delivered before x's last delivery at n); so the work is linear in the
   deliveries, and the candidates are the overtakings, which a total order
   group has none of and a FIFO or causal group few. Each candidate is then checked exactly: two "latest value
   before a position" look-ups (cause_m[j] at the sender, and n's latest on
   j before i), each a window over the real rows of the (node, stream)
   pairs that have candidates, with the candidates as marker rows.
5. Virtual synchrony: per (node, incarnation, group) the deliveries between
   consecutive installed views form a segment keyed by (view_id,
   next_view_id); a segment's set is summarised by its size and two sums of
   32-bit message hashes (order-free, no overflow); per key the most common
   signature (ties: the segment whose view row comes first) is the
   reference, and every other segment is a violation. Examples name the
   symmetric difference, computed only for the example segments.
6. Loss among survivors: checks.py's expected deliveries (send view members
   that stay with the sender: in their next view and, if they report a
   transitional view, among the members that moved with them; or that stay
   up if they never install a later view) as a join, minus the deliveries
   (an anti join); messages their sender withdrew are exempt, as in checks.py.
7. Rolled-back messages delivered (a join; withdrawn ones too, in a view
   their sender installed after withdrawing them), and optimistic messages
   delivered in an installed view lacking a member of their optimistic view
   (``array_except`` once per distinct pair of views).

checks.py applies 3 and 4 to every group; its docstring says to run them on
groups of that order. ``invariant_violations`` does that itself: 3 on total
and safe groups, 4 on causal, total and safe ones (total order is causal
too), by the ``order`` column of the rows; ``all_groups=True`` checks every
group, as checks.py literally does.
"""

from __future__ import annotations

from typing import Any, Callable

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from .common import MESSAGE, installed_views, is_optimistic, multicast, with_incarnation, without_rolled_back

GRACE = 2.0
MAX_EXAMPLES = 5
KEYS = ("1_duplicate", "2_fifo", "3_total", "4_causal", "5_virtual_synchrony",
        "6_loss_among_survivors", "7_rolled_back_delivered", "7_outside_optimistic_view", "8_without_outcome")
TOTAL_ORDERS = ("total", "safe")
CAUSAL_ORDERS = ("causal", "total", "safe")
BUCKET_S = 0.1
"""Time bucket of invariant 4's candidate join: about a typical delivery latency."""

_STREAM = ["run", "node", "incarnation", "group", "sender", "unicast"]


def prepare(events_df: DataFrame) -> DataFrame:
    """The events with ``incarnation`` and ``unicast``; persist it when running every check."""
    return with_incarnation(events_df).withColumn("unicast", F.col("dest").isNotNull())


def _deliveries(ev: DataFrame) -> DataFrame:
    return ev.where(F.col("kind") == "deliver")


def _of_orders(rows: DataFrame, orders: tuple[str, ...] | None) -> DataFrame:
    return rows if orders is None else rows.where(F.col("order").isin(*orders))


# ---------------------------------------------------------------- 1, 2


def duplicates(ev: DataFrame) -> DataFrame:
    """Invariant 1: deliver rows of a message the node (incarnation) had already delivered."""
    w = Window.partitionBy(*_STREAM, "seq").orderBy("pos")
    rows = _deliveries(ev).withColumn("nth", F.row_number().over(w))
    return rows.where(F.col("nth") > 1).select("run", "t", "node", "group", "sender", "seq", "pos")


def fifo(ev: DataFrame) -> DataFrame:
    """Invariant 2: deliver rows whose seq is not above every earlier one of their stream."""
    w = Window.partitionBy(*_STREAM).orderBy("pos").rowsBetween(Window.unboundedPreceding, -1)
    rows = _deliveries(ev).withColumn("highest_before", F.max("seq").over(w))
    bad = F.col("highest_before").isNotNull() & (F.col("seq") <= F.col("highest_before"))
    return rows.where(bad).select("run", "t", "node", "group", "sender", "seq", "highest_before", "pos")


# ---------------------------------------------------------------- 3


def total_order(ev: DataFrame, orders: tuple[str, ...] | None = TOTAL_ORDERS) -> DataFrame:
    """Invariant 3: adjacent inversions of each node's deliveries against the reference node's ranks."""
    d = _of_orders(_deliveries(ev).where(~F.col("unicast")), orders).select(
        "run", "group", "node", "sender", "seq", "t", "pos")
    sizes = d.groupBy("run", "group", "node").agg(F.count("*").alias("n"), F.min("pos").alias("first"))
    pick = Window.partitionBy("run", "group").orderBy(F.desc("n"), "first")
    reference = (sizes.withColumn("r", F.row_number().over(pick)).where("r = 1")
                 .select("run", "group", F.col("node").alias("ref_node")))
    in_ref = d.join(reference, (d.run == reference.run) & (d.group == reference.group)
                    & (d.node == reference.ref_node)).drop(reference.run).drop(reference.group)
    ranked = in_ref.withColumn("rank", F.row_number().over(Window.partitionBy("run", "group").orderBy("pos")) - 1)
    # checks.py builds {message: index}: a message repeated in the reference keeps its last index
    ranks = ranked.groupBy("run", "group", "sender", "seq", "ref_node").agg(F.max("rank").alias("rank"))
    order = Window.partitionBy("run", "group", "node").orderBy("pos")
    seqs = d.join(ranks, ["run", "group", "sender", "seq"])
    seqs = (seqs.withColumn("prev_rank", F.lag("rank").over(order))
            .withColumn("prev_sender", F.lag("sender").over(order)).withColumn("prev_seq", F.lag("seq").over(order)))
    return seqs.where(F.col("rank") < F.col("prev_rank")).select(
        "run", "t", "node", "group", "sender", "seq", "prev_sender", "prev_seq", "ref_node", "pos")


# ---------------------------------------------------------------- 4


def _latest_before(markers: DataFrame, real: DataFrame) -> DataFrame:
    """For each marker (run, group, node, stream, pos, lookup): the seq of the last real row of
    that (run, group, node, stream) strictly before ``pos``: among every real row for lookup
    "cause", among delivery rows for lookup "seen" (``value``, null: none). One window serves both."""
    part = ["run", "group", "node", "stream"]
    real = real.join(markers.select(*part).distinct(), part, "left_semi").select(
        *part, "pos", F.lit(None).cast("string").alias("lookup"), F.col("seq").alias("any_seq"),
        F.when(F.col("kind") == "deliver", F.col("seq")).alias("deliver_seq"), F.lit(1).alias("is_real"))
    marks = markers.select(*part, "pos", "lookup", *[F.lit(None).cast("long").alias(c) for c in ("any_seq", "deliver_seq")],
                           F.lit(0).alias("is_real"))
    # a marker sorts before a real row at its own pos, so that row is not "before" it
    w = Window.partitionBy(*part).orderBy("pos", "is_real").rowsBetween(Window.unboundedPreceding, 0)
    rows = real.unionByName(marks).withColumn("any_last", F.last("any_seq", ignorenulls=True).over(w)).withColumn(
        "deliver_last", F.last("deliver_seq", ignorenulls=True).over(w))
    value = F.when(F.col("lookup") == "cause", F.col("any_last")).otherwise(F.col("deliver_last"))
    return rows.where(F.col("is_real") == 0).select(*part, "pos", "lookup", value.alias("value"))


def _overtaking_pairs(rows: DataFrame, sends: DataFrame) -> DataFrame:
    """Candidate (m delivered at node at m_pos, x delivered there later): m was sent after
    x's first row anywhere, and delivered before x's last delivery at that node (see the
    module doc). ``sends`` gives m_send_pos and m_send_node per message."""
    d = rows.where(F.col("kind") == "deliver")
    last = d.groupBy(*MESSAGE, "node").agg(F.max("pos").alias("x_last"), F.max_by("t", "pos").alias("x_last_t"))
    first = rows.groupBy(*MESSAGE).agg(F.min("pos").alias("x_first"), F.min_by("t", "pos").alias("x_first_t"))
    buckets = F.sequence(F.floor(F.col("x_first_t") / BUCKET_S), F.floor(F.col("x_last_t") / BUCKET_S))
    xs = (last.join(first, MESSAGE).withColumn("bucket", F.explode(buckets))
          .withColumnRenamed("sender", "x_sender").withColumnRenamed("seq", "x_seq"))
    ms = d.select("run", "group", "node", F.col("sender").alias("m_sender"), F.col("seq").alias("m_seq"),
                  F.col("pos").alias("m_pos"), F.col("t").alias("m_t"),
                  F.floor(F.col("t") / BUCKET_S).alias("bucket")).join(sends, ["run", "group", "m_sender", "m_seq"])
    pairs = ms.join(xs, ["run", "group", "node", "bucket"])
    # m sent before x existed cannot depend on x: in a correct total order group that is every
    # pair, so this keeps the candidates to true overtakings
    inside = (F.col("m_send_pos") > F.col("x_first")) & (F.col("m_pos") < F.col("x_last"))
    return pairs.where(inside).drop("bucket")


def causal(ev: DataFrame, orders: tuple[str, ...] | None = CAUSAL_ORDERS) -> DataFrame:
    """Invariant 4: deliveries that came before a message their sender had delivered or sent
    before sending them (checks.py's causal_violations, computed from candidate pairs)."""
    rows = ev.where(F.col("kind").isin("send", "deliver") & ~F.col("unicast"))
    rows = without_rolled_back(_of_orders(rows, orders), ev).select(
        "run", "group", "node", "kind", "sender", "seq", "t", "pos")
    sends = rows.where(F.col("kind") == "send").groupBy("run", "group", F.col("sender").alias("m_sender"),
                                                          F.col("seq").alias("m_seq")).agg(
        F.max("pos").alias("m_send_pos"), F.max_by("node", "pos").alias("m_send_node"))
    # persisted: the look-ups and the final join read the candidates, and they are few (see the module doc)
    pairs = _overtaking_pairs(rows, sends).persist()
    stream_rows = rows.select("run", "group", "node", "kind", F.col("sender").alias("stream"), "pos", "seq")
    markers = pairs.select("run", "group", F.col("m_send_node").alias("node"), F.col("x_sender").alias("stream"),
                           F.col("m_send_pos").alias("pos"), F.lit("cause").alias("lookup")).unionByName(
        pairs.select("run", "group", "node", F.col("x_sender").alias("stream"), F.col("m_pos").alias("pos"),
                     F.lit("seen").alias("lookup"))).distinct()
    found = _latest_before(markers, stream_rows)
    cause = found.where(F.col("lookup") == "cause").select(
        "run", "group", F.col("node").alias("m_send_node"), F.col("stream").alias("x_sender"),
        F.col("pos").alias("m_send_pos"), F.col("value").alias("cause_seq"))
    seen = found.where(F.col("lookup") == "seen").select(
        "run", "group", "node", F.col("stream").alias("x_sender"), F.col("pos").alias("m_pos"),
        F.col("value").alias("seen_seq"))
    checked = (pairs.join(cause, ["run", "group", "m_send_node", "x_sender", "m_send_pos"])
               .join(seen, ["run", "group", "node", "x_sender", "m_pos"], "left"))
    late = (F.coalesce("cause_seq", F.lit(0)) == F.col("x_seq")) & (F.coalesce("seen_seq", F.lit(0)) < F.col("x_seq"))
    return (checked.where(late).groupBy("run", "group", "node", "m_pos")
            .agg(F.first("m_t").alias("t"), F.first("m_sender").alias("sender"), F.first("m_seq").alias("seq"),
                 F.min_by(F.struct("x_sender", "x_seq"), "x_sender").alias("before"))
            .select("run", "t", "node", "group", "sender", "seq", F.col("before.x_sender").alias("late_sender"),
                    F.col("before.x_seq").alias("late_seq"), F.col("m_pos").alias("pos")))


# ---------------------------------------------------------------- 5


_SEGMENT = ["run", "node", "incarnation", "group", "segment"]
_VIEW_PAIR = ["run", "group", "view_id", "next_view_id"]
_SIGNATURE = ["count", "h1", "h2"]
_MASK32 = 0xFFFFFFFF


def _segments(ev: DataFrame) -> tuple[DataFrame, DataFrame]:
    """(segments, delivered): installed views that have a next one in their incarnation, with
    the signature of the multicasts delivered between them; and those deliveries, deduplicated."""
    is_view = (F.col("kind") == "view") & ~is_optimistic()
    rows = ev.where(is_view | ((F.col("kind") == "deliver") & ~F.col("unicast"))).select(
        "run", "node", "incarnation", "group", "view_id", "sender", "seq", "pos", is_view.alias("is_view"))
    incarnation = Window.partitionBy("run", "node", "incarnation", "group").orderBy("pos")
    rows = rows.withColumn("segment", F.sum(F.col("is_view").cast("long")).over(
        incarnation.rowsBetween(Window.unboundedPreceding, 0)))
    views = (rows.where("is_view").withColumn("next_view_id", F.lead("view_id").over(incarnation))
             .where(F.col("next_view_id").isNotNull()))
    delivered = rows.where(~F.col("is_view") & (F.col("segment") > 0)).dropDuplicates([*_SEGMENT, "sender", "seq"])
    h = F.xxhash64("sender", "seq")
    sets = delivered.groupBy(*_SEGMENT).agg(
        F.count("*").alias("count"), F.sum(h.bitwiseAND(F.lit(_MASK32))).alias("h1"),
        F.sum(F.shiftrightunsigned(h, 32)).alias("h2"))
    segments = views.select(*_SEGMENT, "view_id", "next_view_id", "pos").join(sets, _SEGMENT, "left").fillna(
        0, subset=_SIGNATURE)
    return segments, delivered.select(*_SEGMENT, "sender", "seq")


def virtual_synchrony(ev: DataFrame) -> DataFrame:
    """Invariant 5: segments whose set of deliveries differs from the most common one for the
    same pair of consecutive views (one row per differing node incarnation)."""
    segments, _ = _segments(ev)
    variants = segments.groupBy(*_VIEW_PAIR, *_SIGNATURE).agg(
        F.count("*").alias("n"), F.min("pos").alias("first"))
    common = Window.partitionBy(*_VIEW_PAIR).orderBy(F.desc("n"), "first")
    reference = (variants.withColumn("r", F.row_number().over(common)).where("r = 1")
                 .select(*_VIEW_PAIR, *[F.col(c).alias(f"ref_{c}") for c in _SIGNATURE], F.col("first").alias("ref_pos")))
    ref_segment = segments.select("run", F.col("pos").alias("ref_pos"), F.col("node").alias("ref_node"),
                                  F.col("incarnation").alias("ref_incarnation"), F.col("segment").alias("ref_segment"))
    differs = ~(F.col("count") == F.col("ref_count")) | ~(F.col("h1") == F.col("ref_h1")) | ~(F.col("h2") == F.col("ref_h2"))
    return (segments.join(reference, _VIEW_PAIR).where(differs).join(ref_segment, ["run", "ref_pos"])
            .select(*_VIEW_PAIR, "node", "incarnation", "segment", "ref_node", "ref_incarnation", "ref_segment",
                    F.col("count").alias("delivered"), F.col("ref_count").alias("ref_delivered"), "pos"))


def virtual_synchrony_differences(ev: DataFrame, examples: DataFrame) -> DataFrame:
    """For a few rows of ``virtual_synchrony``: the symmetric difference's size and its
    smallest message (as checks.py reports), computed only for those segments."""
    _, delivered = _segments(ev)
    keys = ["run", "node", "incarnation", "group", "segment"]
    ours = examples.select(*keys, "pos").join(delivered, keys)
    theirs = examples.select("run", "group", "pos", *[F.col(f"ref_{c}").alias(c) for c in
                                                      ("node", "incarnation", "segment")]).join(delivered, keys)
    a = ours.select("run", "pos", "sender", "seq", F.lit(1).alias("a"))
    b = theirs.select("run", "pos", "sender", "seq", F.lit(1).alias("b"))
    diff = a.join(b, ["run", "pos", "sender", "seq"], "full").where(F.col("a").isNull() | F.col("b").isNull())
    found = diff.groupBy("run", "pos").agg(F.count("*").alias("difference"),
                                           F.min(F.struct("sender", "seq")).alias("example"))
    return examples.join(found, ["run", "pos"], "left").select(
        *examples.columns, "difference", F.col("example.sender").alias("example_sender"),
        F.col("example.seq").alias("example_seq"))


# ---------------------------------------------------------------- 6


def loss_among_survivors(ev: DataFrame, grace: float = GRACE) -> DataFrame:
    """Invariant 6: (message, node) pairs that a member of the send view owed and never delivered."""
    end = ev.groupBy("run").agg(F.max("t").alias("t_end"))
    sends = (ev.where((F.col("kind") == "send") & multicast()).join(end, "run")
             .where(F.col("t") <= F.col("t_end") - grace).select("run", "t", "group", "sender", "seq", "view_id", "pos"))
    sends = without_rolled_back(sends, ev).join(withdrawn(ev).select(*MESSAGE).distinct(), MESSAGE, "left_anti")
    incarnation = Window.partitionBy("run", "node", "incarnation", "group").orderBy("pos")
    views = installed_views(ev).withColumn("next_members", F.lead("members").over(incarnation)).select(
        "run", "group", "view_id", "node", "incarnation", "next_members")
    expected = sends.join(views, ["run", "group", "view_id"])
    # a transitional row for the send's view names the members that moved with the node
    moved = (ev.where(F.col("kind") == "transitional")
             .select("run", "group", "view_id", "node", "incarnation", F.col("members").alias("moved"))
             .dropDuplicates(["run", "group", "view_id", "node", "incarnation"]))
    expected = expected.join(moved, ["run", "group", "view_id", "node", "incarnation"], "left")
    has_next = F.col("next_members").isNotNull()
    stays = F.array_contains("next_members", F.col("sender")) & \
        (F.col("moved").isNull() | F.array_contains("moved", F.col("sender")))
    expected = expected.where(~has_next | stays)
    churn = ev.where(F.col("kind").isin("crash", "leave"))
    gone = churn.select("run", "node", "incarnation").distinct().withColumn("node_gone", F.lit(True))
    sender_churn = churn.groupBy("run", F.col("node").alias("sender")).agg(F.max("t").alias("sender_churn_t"))
    expected = expected.join(gone, ["run", "node", "incarnation"], "left").join(sender_churn, ["run", "sender"], "left")
    sender_gone = F.coalesce(F.col("sender_churn_t"), F.lit(-1.0)) > F.col("t")
    expected = expected.where(has_next | ~(F.coalesce("node_gone", F.lit(False)) | sender_gone))
    got = _deliveries(ev).select("run", "node", "incarnation", "group", "sender", "seq").distinct()
    missing = expected.join(got, ["run", "node", "incarnation", "group", "sender", "seq"], "left_anti")
    return missing.select("run", "t", "node", "group", "sender", "seq", "view_id", "pos")


# ---------------------------------------------------------------- 8


OUTCOMES = ("deliver", "rollback", "not_delivered")


def without_outcome(ev: DataFrame, grace: float = GRACE) -> DataFrame:
    """Invariant 8: multicasts whose sender (incarnation) stayed up and that have, at
    their sender, no ``deliver``, ``rollback`` or ``not_delivered`` row."""
    end = ev.groupBy("run").agg(F.max("t").alias("t_end"))
    sends = (ev.where((F.col("kind") == "send") & multicast()).join(end, "run")
             .where(F.col("t") <= F.col("t_end") - grace)
             .select("run", "t", "node", "incarnation", "group", "sender", "seq", "view_id", "pos"))
    gone = (ev.where(F.col("kind").isin("crash", "leave")).select("run", "node", "incarnation").distinct())
    sends = sends.join(gone, ["run", "node", "incarnation"], "left_anti")
    outcome = (ev.where(F.col("kind").isin(*OUTCOMES) & multicast() & (F.col("node") == F.col("sender")))
               .select("run", "node", "incarnation", "group", "sender", "seq").distinct())
    missing = sends.join(outcome, ["run", "node", "incarnation", "group", "sender", "seq"], "left_anti")
    return missing.select("run", "t", "node", "group", "sender", "seq", "view_id", "pos")


# ---------------------------------------------------------------- 7


def withdrawn(ev: DataFrame) -> DataFrame:
    """``not_delivered`` rows of reason ``withdrawn`` at the message's sender (multicasts)."""
    if "reason" not in ev.columns:
        return ev.limit(0)
    return ev.where((F.col("kind") == "not_delivered") & (F.col("reason") == "withdrawn") & multicast()
                    & (F.col("node") == F.col("sender")))


def rolled_back_delivered(ev: DataFrame) -> DataFrame:
    """Invariant 7, first part: multicast deliveries of a message rolled back anywhere, or of
    a message its sender withdrew in a view that sender installed after withdrawing it."""
    mc = ev.where(multicast())
    rolled = mc.where(F.col("kind") == "rollback").select(*MESSAGE).distinct()
    delivered = mc.where(F.col("kind") == "deliver")
    columns = ("run", "t", "node", "group", "sender", "seq", "view_id", "pos")
    w = withdrawn(ev).select("node", "incarnation", *MESSAGE, F.col("t").alias("t_withdrawn"))
    views = installed_views(ev).select("run", "node", "incarnation", "group", "view_id", F.col("t").alias("t_view"))
    later = (w.join(views, ["run", "node", "incarnation", "group"]).where(F.col("t_view") >= F.col("t_withdrawn"))
             .select(*MESSAGE, "view_id").distinct())
    return delivered.join(rolled, MESSAGE).select(*columns).unionByName(
        delivered.join(later, [*MESSAGE, "view_id"]).select(*columns))


def _first_members(views: DataFrame, name: str) -> DataFrame:
    return views.groupBy("run", "view_id").agg(F.min_by("members", "pos").alias(name))


def outside_optimistic_view(ev: DataFrame) -> DataFrame:
    """Invariant 7, second part: deliveries of an optimistic message in an installed view that
    lacks a member of its optimistic view (``missing`` lists them)."""
    mc = ev.where(multicast())
    views = mc.where(F.col("kind") == "view")
    o_members = _first_members(views.where(is_optimistic()), "o_members").withColumnRenamed("view_id", "optimistic_view")
    d_members = _first_members(views.where(~is_optimistic()), "d_members")
    sends = (mc.where((F.col("kind") == "send") & (F.col("optimistic") == True))  # noqa: E712 (a Column)
             .groupBy(*MESSAGE).agg(F.min_by("view_id", "pos").alias("optimistic_view")))
    delivered = mc.where(F.col("kind") == "deliver").select("run", "t", "node", "group", "sender", "seq",
                                                             "view_id", "pos").join(sends, MESSAGE)
    pairs = (delivered.select("run", "optimistic_view", "view_id").distinct()
             .join(o_members, ["run", "optimistic_view"]).join(d_members, ["run", "view_id"])
             .withColumn("missing", F.array_sort(F.array_except("o_members", "d_members")))
             .where(F.size("missing") > 0).select("run", "optimistic_view", "view_id", "missing"))
    return delivered.join(pairs, ["run", "optimistic_view", "view_id"])


# ---------------------------------------------------------------- all of them


def _builders(ev: DataFrame, grace: float, all_groups: bool) -> dict[str, Callable[[], DataFrame]]:
    total_orders, causal_orders = (None, None) if all_groups else (TOTAL_ORDERS, CAUSAL_ORDERS)
    return {
        "1_duplicate": lambda: duplicates(ev),
        "2_fifo": lambda: fifo(ev),
        "3_total": lambda: total_order(ev, total_orders),
        "4_causal": lambda: causal(ev, causal_orders),
        "5_virtual_synchrony": lambda: virtual_synchrony(ev),
        "6_loss_among_survivors": lambda: loss_among_survivors(ev, grace),
        "7_rolled_back_delivered": lambda: rolled_back_delivered(ev),
        "7_outside_optimistic_view": lambda: outside_optimistic_view(ev),
        "8_without_outcome": lambda: without_outcome(ev, grace),
    }


def invariant_violations(events_df: DataFrame, grace: float = GRACE,
                         all_groups: bool = False) -> dict[str, DataFrame]:
    """One DataFrame of violation rows per invariant key (each has ``run`` and ``pos``).
    ``events_df`` may be raw (readers.read_events) or already ``prepare``d."""
    ev = events_df if "incarnation" in events_df.columns else prepare(events_df)
    return {key: build() for key, build in _builders(ev, grace, all_groups).items()}


def _counts_and_examples(df: DataFrame, max_examples: int) -> tuple[dict[str, int], dict[str, list[dict[str, Any]]]]:
    """Per run: the count and the first ``max_examples`` rows (by pos), in one job."""
    by_run = Window.partitionBy("run")
    ranked = df.withColumn("_n", F.count("*").over(by_run)).withColumn(
        "_i", F.row_number().over(by_run.orderBy("pos")))
    counts: dict[str, int] = {}
    examples: dict[str, list[dict[str, Any]]] = {}
    for row in ranked.where(F.col("_i") <= max(max_examples, 1)).collect():
        record = row.asDict(recursive=True)
        run = record["run"]
        counts[run] = int(record.pop("_n"))
        if record.pop("_i") <= max_examples:
            examples.setdefault(run, []).append({k: v for k, v in record.items() if k not in ("run", "pos")})
    return counts, examples


def _with_differences(df: DataFrame, ev: DataFrame, max_examples: int) -> list[dict[str, Any]]:
    """Invariant 5's first examples per run, with their differences (an extra job, run only
    when there are violations)."""
    by_run = Window.partitionBy("run").orderBy("pos")
    few = df.withColumn("_i", F.row_number().over(by_run)).where(F.col("_i") <= max_examples).drop("_i")
    return [row.asDict(recursive=True) for row in virtual_synchrony_differences(ev, few).collect()]


_ORDERS_CHECKED = {"3_total": TOTAL_ORDERS, "4_causal": CAUSAL_ORDERS}
"""Checks that look only at groups of these orders (unless ``all_groups``)."""
_KINDS_NEEDED = {"1_duplicate": {"deliver"}, "2_fifo": {"deliver"}, "3_total": {"deliver"},
                 "4_causal": {"send", "deliver"}, "5_virtual_synchrony": {"view"},
                 "6_loss_among_survivors": {"send", "view"}, "7_rolled_back_delivered": {"deliver"},
                 "7_outside_optimistic_view": {"send", "deliver", "view"}, "8_without_outcome": {"send"}}
"""Event kinds without which a check finds nothing: it reads rows of each through an inner join
(7_outside_optimistic_view also needs an optimistic send row)."""


def _nothing_to_check(key: str, all_groups: bool, orders: set[str] | None, kinds: set[str] | None,
                      optimistic_sends: bool | None) -> bool:
    """Whether what the caller knows of the trace proves that check ``key`` finds no violation."""
    checked = _ORDERS_CHECKED.get(key)
    if orders is not None and not all_groups and checked is not None and not orders & set(checked):
        return True
    if kinds is not None and not _KINDS_NEEDED[key] <= kinds:
        return True
    if kinds is not None and key == "7_rolled_back_delivered" and not kinds & {"rollback", "not_delivered"}:
        return True
    return key == "7_outside_optimistic_view" and optimistic_sends is False


def check_invariants(events_df: DataFrame, runs: list[str], grace: float = GRACE, all_groups: bool = False,
                     max_examples: int = MAX_EXAMPLES,
                     progress: Callable[[str], None] | None = None,
                     orders: set[str] | None = None, kinds: set[str] | None = None,
                     optimistic_sends: bool | None = None) -> dict[str, dict[str, Any]]:
    """Per run, per key: {"count": int, "examples": [row dicts]} (zero counts included).
    What the caller knows of the trace, when it does: ``orders``, the orders of
    its groups; ``kinds``, the event kinds in it; ``optimistic_sends``, whether
    any send row is optimistic. A check that these prove idle (of orders absent,
    or lacking a kind it joins, see _KINDS_NEEDED) counts 0 without a Spark job
    (the causal check alone took 7 of the 40 s of analysing the FIFO-only default run)."""
    ev = events_df if "incarnation" in events_df.columns else prepare(events_df)
    result: dict[str, dict[str, Any]] = {run: {} for run in runs}
    # built one at a time: building a plan costs Spark analysis time, which the progress should show
    for key, build in _builders(ev, grace, all_groups).items():
        if _nothing_to_check(key, all_groups, orders, kinds, optimistic_sends):
            for run in runs:
                result[run][key] = {"count": 0, "examples": []}
            continue
        if progress is not None:
            progress(key)
        df = build()
        counts, examples = _counts_and_examples(df, max_examples)
        if key == "5_virtual_synchrony" and examples:
            examples = {}
            for row in sorted(_with_differences(df, ev, max_examples), key=lambda r: r["pos"]):
                examples.setdefault(row.pop("run"), []).append({k: v for k, v in row.items() if k != "pos"})
        for run in runs:
            result[run][key] = {"count": counts.get(run, 0), "examples": examples.get(run, [])}
    return result


def invariant_counts(events_df: DataFrame, grace: float = GRACE, all_groups: bool = False) -> dict[str, dict[str, int]]:
    """Per run: {key: count}, with the keys of checks.violations()."""
    runs = [r["run"] for r in events_df.select("run").distinct().collect()]
    found = check_invariants(events_df, runs, grace, all_groups, max_examples=0)
    return {run: {key: v["count"] for key, v in keys.items()} for run, keys in found.items()}
