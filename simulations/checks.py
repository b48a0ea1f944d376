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
