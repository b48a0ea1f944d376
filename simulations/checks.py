"""Quick pandas checks of a trace: invariants 1 and 2 (shared/DESIGN.md).

Theory of operation
-------------------
The Spark package checks every invariant on big traces; these helpers check
the two per-node ones on traces small enough for pandas, for tests and for a
quick look after a run.

A node that crashes and recovers restarts with fresh state, including its
sequence numbers and its delivery history. Its history is therefore split
into incarnations at each ``recover`` row (row order is event order), and an
invariant is checked within one incarnation of the delivering node. Unicasts
have their own per-destination sequence numbers, so they are keyed apart from
multicasts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sgcs.errors import UsageError

_KEY = ["node", "incarnation", "group", "sender", "unicast"]


def read_events(run: str | Path) -> Any:
    """The ``events`` table of a run directory as a pandas DataFrame."""
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise UsageError("reading a trace needs pyarrow and pandas; run: pip install 'sgcs[analysis]'") from None
    return pq.read_table(Path(run) / "events").to_pandas()


def deliveries(events: Any) -> Any:
    """Deliver rows, with ``incarnation`` (of the delivering node) and ``unicast``."""
    events = events.reset_index(drop=True)
    incarnation = (events["kind"] == "recover").astype("int64").groupby(events["node"]).cumsum()
    rows = events.assign(incarnation=incarnation, unicast=events["dest"].notna())
    return rows[rows["kind"] == "deliver"]


def duplicate_deliveries(events: Any) -> Any:
    """Invariant 1: deliver rows of a message the node had already delivered."""
    rows = deliveries(events)
    return rows[rows.duplicated(subset=[*_KEY, "seq"], keep="first")]


def out_of_order_deliveries(events: Any) -> Any:
    """Invariant 2: deliver rows whose seq is not above every earlier one from that sender."""
    rows = deliveries(events)
    highest = rows.groupby(_KEY, sort=False)["seq"].cummax()
    highest_before = highest.groupby([rows[k] for k in _KEY], sort=False).shift(1)
    return rows[highest_before.notna() & (rows["seq"] <= highest_before)]


def undelivered_among_survivors(events: Any, grace: float = 2.0) -> Any:
    """Invariant 6: (group, sender, seq, node) of multicasts that a member of the
    send's view never delivered, although it and the sender stayed up.

    A node "stays up" when it has no crash, leave or recover row after the send.
    Messages sent in the last ``grace`` seconds of the trace may still be in
    flight and are not checked.
    """
    import pandas as pd

    end = events["t"].max()
    sends = events[(events["kind"] == "send") & events["dest"].isna() & (events["t"] <= end - grace)]
    views = events[events["kind"] == "view"].drop_duplicates("view_id")[["view_id", "members"]]
    expected = sends[["t", "group", "sender", "seq", "view_id"]].merge(views, on="view_id")
    expected = expected.explode("members").rename(columns={"members": "node"})
    expected["node"] = expected["node"].astype("int64")
    churn = events[events["kind"].isin(["crash", "leave", "recover"])][["node", "t"]]
    last_churn = churn.groupby("node")["t"].max()
    for column in ("node", "sender"):
        gone = expected[column].map(last_churn)
        expected = expected[gone.isna() | (gone < expected["t"])]
    got = deliveries(events)[["node", "group", "sender", "seq"]].drop_duplicates()
    merged = expected.merge(got, on=["node", "group", "sender", "seq"], how="left", indicator=True)
    return merged[merged["_merge"] == "left_only"].drop(columns="_merge").reset_index(drop=True)


def violations(events: Any, grace: float = 2.0) -> dict[str, int]:
    """Counts for invariants 1, 2, 3, 4 and 6 on a pandas-sized trace (3 and 4
    apply to groups of that order; run them on such groups)."""
    return {
        "1_duplicate": len(duplicate_deliveries(events)),
        "2_fifo": len(out_of_order_deliveries(events)),
        "3_total": total_order_violations(events),
        "4_causal": causal_violations(events),
        "6_loss_among_survivors": len(undelivered_among_survivors(events, grace)),
    }


def reach(events: Any, grace: float = 2.0) -> Any:
    """Per multicast: the fraction of the members of its send view that delivered it
    (the reliability distribution; plain gossip is bimodal: all or almost none)."""
    end = events["t"].max()
    sends = events[(events["kind"] == "send") & events["dest"].isna() & (events["t"] <= end - grace)]
    views = events[events["kind"] == "view"].drop_duplicates("view_id")[["view_id", "members"]]
    sizes = views.assign(size=views["members"].map(len))[["view_id", "size"]]
    got = deliveries(events).groupby(["group", "sender", "seq"]).size().rename("delivered").reset_index()
    merged = sends[["group", "sender", "seq", "view_id"]].merge(sizes, on="view_id").merge(
        got, on=["group", "sender", "seq"], how="left")
    return (merged["delivered"].fillna(0) / merged["size"]).rename("reach")


def total_order_violations(events: Any) -> int:
    """Invariant 3: nodes whose delivery order of multicasts disagrees with the
    node that delivered the most (per group), counted as order inversions."""
    rows = deliveries(events)
    rows = rows[~rows["unicast"]]
    inversions = 0
    for _, group_rows in rows.groupby("group", sort=False):
        by_node = {n: list(zip(r["sender"], r["seq"])) for n, r in group_rows.groupby("node", sort=False)}
        reference = max(by_node.values(), key=len)
        rank = {m: i for i, m in enumerate(reference)}
        for sequence in by_node.values():
            ranks = [rank[m] for m in sequence if m in rank]
            inversions += sum(1 for a, b in zip(ranks, ranks[1:]) if b < a)
    return inversions


def causal_violations(events: Any) -> int:
    """Invariant 4: deliveries that came before a message their sender had
    delivered or sent before sending them (checked through each sender's latest
    delivery per stream at send time, which FIFO makes sufficient)."""
    import numpy as np

    rows = events[events["kind"].isin(["send", "deliver"]) & events["dest"].isna()]
    violations = 0
    for _, group_rows in rows.groupby("group", sort=False):
        senders = sorted(set(group_rows["sender"].dropna().astype("int64")))
        column = {s: i for i, s in enumerate(senders)}
        latest: dict[int, Any] = {}
        causes: dict[tuple[int, int], Any] = {}
        for node, kind, sender, seq in zip(group_rows["node"], group_rows["kind"], group_rows["sender"], group_rows["seq"]):
            vector = latest.setdefault(node, np.zeros(len(senders), dtype=np.int64))
            if kind == "send":
                causes[(int(sender), int(seq))] = vector.copy()
            vector[column[int(sender)]] = seq
        seen: dict[int, Any] = {}
        for node, kind, sender, seq in zip(group_rows["node"], group_rows["kind"], group_rows["sender"], group_rows["seq"]):
            if kind != "deliver":
                continue
            vector = seen.setdefault(node, np.zeros(len(senders), dtype=np.int64))
            cause = causes.get((int(sender), int(seq)))
            if cause is not None and (vector < cause).any():
                violations += 1
            vector[column[int(sender)]] = seq
    return violations
