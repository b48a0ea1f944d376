"""Quick pandas checks of a trace: invariants 1 to 8 (docs/invariants.md).

Theory of operation
-------------------
The Spark package checks every invariant on big traces; these helpers check
them on traces small enough for pandas, for tests and for a quick look after
a run.

A node that crashes and recovers restarts with fresh state, including its
sequence numbers and its delivery history. Its history is therefore split
into incarnations at each ``recover`` row (row order is event order), and an
invariant is checked within one incarnation of the delivering node. Unicasts
have their own per-destination sequence numbers, so they are keyed apart from
multicasts.

Invariant 5 (virtual synchrony) cuts each incarnation's multicast deliveries
in a group into segments at its installed ``view`` rows (those whose
``optimistic`` is not True): the segment between views Vi and Vi+1 is keyed
by the pair of view ids, and every segment with the same key must hold the
same set of messages. Sets are compared through an order-free hash (the sum
of per-message hashes), so a million deliveries cost a few vectorised
passes; only the keys whose hashes disagree are expanded into Python sets to
name the missing or extra messages. Deliveries after an incarnation's last
view, or before its first, are not constrained.

Invariant 7 (optimistic messages) has two parts: a message with a
``rollback`` row anywhere is delivered nowhere (nor one its sender withdrew,
in a view that sender installs after withdrawing it), and a message sent with
``optimistic`` True under optimistic view O is delivered only in installed
views whose members include all of O's (taken from the ``view`` rows with
``optimistic`` True). The subset test is done once per distinct (O, delivery
view) pair, not once per delivery. Messages are ``(group, sender, seq)``,
which is unique across incarnations, and only multicasts count for 5 and 7.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from sgcs.errors import UsageError

_KEY = ["node", "incarnation", "group", "sender", "unicast"]


def read_events(run: str | Path) -> Any:
    """The ``events`` table of a run directory as a pandas DataFrame."""
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise UsageError("reading a trace needs pyarrow and pandas; run: pip install 'sgcs[sim]'") from None
    import pandas as pd
    import pyarrow as pa

    # Nullable integers: a float64 column (pandas' default for ints with
    # nulls) would round the sequence numbers of real nodes, which carry the
    # incarnation in their high 32 bits, and merge distinct messages.
    return pq.read_table(Path(run) / "events").to_pandas(
        types_mapper=lambda kind: pd.Int64Dtype() if kind == pa.int64() else None)


def _with_incarnation(events: Any) -> Any:
    """Every row, with ``incarnation`` (of the row's node) and ``unicast``; shared by
    the delivery checks and the view segmentation so both split histories alike."""
    events = events.reset_index(drop=True)
    incarnation = (events["kind"] == "recover").astype("int64").groupby(events["node"]).cumsum()
    return events.assign(incarnation=incarnation, unicast=events["dest"].notna())


def deliveries(events: Any) -> Any:
    """Deliver rows, with ``incarnation`` (of the delivering node) and ``unicast``."""
    rows = _with_incarnation(events)
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
    send's view never delivered, although it and the sender stayed connected.

    A message sent in view V (for an optimistic send: its optimistic view,
    which is the id of the view it is delivered in) must be delivered by every
    node that installed V and whose next installed view still contains the
    sender, unless a ``transitional`` row of that node for V leaves the sender
    out of the members that moved with it; if that node installed no later view, by every such node that
    stays up while the sender stays up. Rolled-back messages are exempt, and so
    are messages their sender withdrew (sent under a proposal it gave up for
    another coordinator's: a coordinator that proposes again with the same
    members names the new proposal like the old, so the view id alone cannot
    tell them apart; ``voided_deliveries`` checks that nobody delivers them in
    a view their sender installs after withdrawing them). Messages sent in the
    last ``grace`` seconds may still be in flight.
    """
    import numpy as np

    end = events["t"].max()
    sends = _without_withdrawn(_without_rolled_back(
        events[(events["kind"] == "send") & events["dest"].isna() & (events["t"] <= end - grace)], events),
        events)[["t", "group", "sender", "seq", "view_id"]]
    rows = _with_incarnation(events)
    views = rows[(rows["kind"] == "view") & ~_optimistic(rows)]
    views = views.assign(next_members=views.groupby(_INCARNATION, sort=False)["members"].shift(-1))
    expected = sends.merge(views[["group", "view_id", "node", "incarnation", "next_members"]], on=["group", "view_id"])
    moved = rows[rows["kind"] == "transitional"][["group", "view_id", "node", "incarnation", "members"]]
    expected = expected.merge(moved.drop_duplicates(subset=["group", "view_id", "node", "incarnation"])
                              .rename(columns={"members": "moved"}),
                              on=["group", "view_id", "node", "incarnation"], how="left")
    has_next = expected["next_members"].notna()
    stays = [bool(n) and s in m and (not isinstance(t, (list, tuple, np.ndarray)) or s in t)
             for s, m, n, t in zip(expected["sender"], expected["next_members"], has_next, expected["moved"])]
    expected = expected[~has_next.to_numpy() | np.array(stays, dtype=bool)]
    churn = rows[rows["kind"].isin(["crash", "leave"])]
    node_gone = expected.merge(churn[["node", "incarnation"]].drop_duplicates().assign(gone=True),
                               on=["node", "incarnation"], how="left")["gone"].fillna(False).to_numpy(dtype=bool)
    sender_gone = expected["sender"].map(churn.groupby("node")["t"].max()).fillna(-1.0).to_numpy() > \
        expected["t"].to_numpy()
    expected = expected[expected["next_members"].notna().to_numpy() | ~(node_gone | sender_gone)]
    got = deliveries(events)[["node", "incarnation", "group", "sender", "seq"]].drop_duplicates()
    merged = expected.merge(got, on=["node", "incarnation", "group", "sender", "seq"], how="left", indicator=True)
    missing = merged[merged["_merge"] == "left_only"]
    return missing.drop(columns=["_merge", "next_members", "incarnation", "moved"]).reset_index(drop=True)


def violations(events: Any, grace: float = 2.0) -> dict[str, int]:
    """Counts for invariants 1 to 7 on a pandas-sized trace (3 and 4 apply to
    groups of that order; run them on such groups). Invariant 7 has two counts:
    rolled-back messages delivered, and optimistic messages delivered in a view
    that lacks a member of their optimistic view."""
    return {
        "1_duplicate": len(duplicate_deliveries(events)),
        "2_fifo": len(out_of_order_deliveries(events)),
        "3_total": total_order_violations(events),
        "4_causal": causal_violations(events),
        "5_virtual_synchrony": len(virtual_synchrony_violations(events)),
        "6_loss_among_survivors": len(undelivered_among_survivors(events, grace)),
        "7_rolled_back_delivered": len(voided_deliveries(events)),
        "7_outside_optimistic_view": len(optimistic_view_violations(events)),
        "8_without_outcome": len(without_outcome(events, grace)),
    }


OUTCOMES = ("deliver", "rollback", "not_delivered")
"""Trace kinds that end a multicast at its sender: its own delivery, a
rollback, or a ``not_delivered`` row with its reason."""


def without_outcome(events: Any, grace: float = 2.0) -> Any:
    """Invariant 8 (one outcome per message): multicasts whose sender stayed up
    (no crash or leave row of that incarnation after the send) and that have,
    at their sender, neither a delivery nor a ``rollback`` nor a
    ``not_delivered`` row. Messages sent in the last ``grace`` seconds may
    still be in flight."""
    end = events["t"].max()
    rows = _with_incarnation(events)
    sends = rows[(rows["kind"] == "send") & ~rows["unicast"] & (rows["t"] <= end - grace)]
    sends = sends[["t", "node", "incarnation", *_MESSAGE, "view_id"]]
    ends = rows[rows["kind"].isin(["crash", "leave"])].groupby(["node", "incarnation"])["t"].min().rename("gone")
    sends = sends.merge(ends.reset_index(), on=["node", "incarnation"], how="left")
    sends = sends[sends["gone"].isna()].drop(columns="gone")
    outcome = rows[rows["kind"].isin(OUTCOMES) & ~rows["unicast"] & (rows["node"] == rows["sender"])]
    outcome = outcome[["node", "incarnation", *_MESSAGE]].drop_duplicates().assign(_outcome=True)
    merged = sends.merge(outcome, on=["node", "incarnation", *_MESSAGE], how="left")
    return merged[merged["_outcome"].isna()].drop(columns=["_outcome", "incarnation"]).reset_index(drop=True)


def reach(events: Any, grace: float = 2.0) -> Any:
    """Per multicast: the fraction of the members of its send view that delivered it
    (the reliability distribution; plain gossip is bimodal: all or almost none)."""
    import numpy as np

    end = events["t"].max()
    sends = _without_rolled_back(events[(events["kind"] == "send") & events["dest"].isna() & (events["t"] <= end - grace)],
                                 events)
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
    delivery per stream at send time, which FIFO makes sufficient). Only
    inversions count: a node that joined after that earlier message, or left
    before it, never delivers it, and invariant 6 judges whether it should."""
    import numpy as np

    rows = _without_rolled_back(events[events["kind"].isin(["send", "deliver"]) & events["dest"].isna()], events)
    violations = 0
    for _, group_rows in rows.groupby("group", sort=False):
        senders = sorted(set(group_rows["sender"].dropna().astype("int64")))
        column = {s: i for i, s in enumerate(senders)}
        records = list(zip(group_rows["node"], group_rows["kind"], group_rows["sender"].astype("int64"),
                           group_rows["seq"].astype("int64")))
        causes = _send_vectors(records, column)
        delivered_at = {(node, sender, seq): i for i, (node, kind, sender, seq) in enumerate(records)
                        if kind == "deliver"}
        seen: dict[int, Any] = {}
        for i, (node, kind, sender, seq) in enumerate(records):
            if kind != "deliver":
                continue
            vector = seen.setdefault(node, np.zeros(len(senders), dtype=np.int64))
            cause = causes.get((sender, seq))
            if cause is not None:
                for j in np.flatnonzero(vector < cause).tolist():
                    if delivered_at.get((node, senders[j], int(cause[j])), -1) > i:
                        violations += 1
                        break
            vector[column[sender]] = seq
    return violations


def _send_vectors(records: list[tuple[int, str, int, int]], column: dict[int, int]) -> dict[tuple[int, int], Any]:
    """Per message, its sender's latest delivered or sent seq per stream just before sending it."""
    import numpy as np

    latest: dict[int, Any] = {}
    causes: dict[tuple[int, int], Any] = {}
    for node, kind, sender, seq in records:
        vector = latest.setdefault(node, np.zeros(len(column), dtype=np.int64))
        if kind == "send":
            causes[(sender, seq)] = vector.copy()
        vector[column[sender]] = seq
    return causes


def _withdrawn(events: Any) -> Any:
    """``not_delivered`` rows of reason ``withdrawn`` at the message's sender (multicasts)."""
    if "reason" not in events:
        return events.iloc[0:0]
    return events[(events["kind"] == "not_delivered") & (events["reason"] == "withdrawn") & events["dest"].isna()
                  & (events["node"] == events["sender"])]


def _without_withdrawn(rows: Any, events: Any) -> Any:
    """``rows`` minus those of messages their sender withdrew."""
    withdrawn = _withdrawn(events)[["group", "sender", "seq"]].drop_duplicates()
    if withdrawn.empty:
        return rows
    keys = rows[["group", "sender", "seq"]].merge(withdrawn.assign(_withdrawn=True), on=["group", "sender", "seq"],
                                                  how="left")["_withdrawn"].fillna(False).to_numpy(dtype=bool)
    return rows[~keys]


def _without_rolled_back(rows: Any, events: Any) -> Any:
    """Rolled-back messages void: nobody delivers them, and what their sender
    sent next does not depend on them (invariant 7)."""
    rolled = events.loc[events["kind"] == "rollback", ["group", "sender", "seq"]].drop_duplicates()
    if rolled.empty:
        return rows
    keys = rows[["group", "sender", "seq"]].merge(rolled.assign(_rolled=True), on=["group", "sender", "seq"],
                                                  how="left")["_rolled"].fillna(False).to_numpy(dtype=bool)
    return rows[~keys]


_INCARNATION = ["node", "incarnation", "group"]
_SEGMENT = [*_INCARNATION, "segment"]
_VIEW_PAIR = ["group", "view_id", "next_view_id"]
_MESSAGE = ["group", "sender", "seq"]


def _optimistic(rows: Any) -> Any:
    """``optimistic`` as plain bools (null, absent or False all mean "not optimistic")."""
    import pandas as pd

    if "optimistic" not in rows:
        return pd.Series(False, index=rows.index)
    return rows["optimistic"].eq(True).fillna(False).astype(bool)


def _view_segments(events: Any) -> tuple[Any, Any]:
    """Invariant 5's segments and the multicast deliveries in them.

    Returns ``(segments, delivered)``: one segment row per installed view that
    has a next installed view in the same incarnation and group (``view_id``,
    ``next_view_id``, and ``hash``/``count`` of its set of messages), and the
    deduplicated deliver rows tagged with their segment. ``segment`` is the
    running count of installed views, so it needs one grouped cumsum in row order.
    """
    import pandas as pd

    rows = _with_incarnation(events)
    is_view = (rows["kind"] == "view") & ~_optimistic(rows)
    rows = rows[is_view | ((rows["kind"] == "deliver") & ~rows["unicast"])]
    rows = rows[[*_INCARNATION, "kind", "view_id", "sender", "seq"]].assign(is_view=is_view[rows.index])
    rows["segment"] = rows["is_view"].astype("int64").groupby([rows[k] for k in _INCARNATION], sort=False).cumsum()
    views = rows[rows["is_view"]].copy()
    views["next_view_id"] = views.groupby(_INCARNATION, sort=False)["view_id"].shift(-1)
    views = views[views["next_view_id"].notna()]
    delivered = rows[~rows["is_view"] & (rows["segment"] > 0)].drop_duplicates([*_SEGMENT, "sender", "seq"])
    delivered = delivered.assign(hash=pd.util.hash_pandas_object(delivered[["sender", "seq"]], index=False))
    sets = delivered.groupby(_SEGMENT, sort=False)["hash"].agg(["sum", "size"])
    # reindex, not a left merge: a merge's NaN for empty segments would turn the uint64 hashes to floats
    sets = sets.reindex(pd.MultiIndex.from_frame(views[_SEGMENT]), fill_value=0)
    segments = views[[*_SEGMENT, "view_id", "next_view_id"]].reset_index(drop=True)
    return segments.assign(hash=sets["sum"].to_numpy(), count=sets["size"].to_numpy()), delivered


def virtual_synchrony_violations(events: Any) -> Any:
    """Invariant 5: incarnations that delivered a different set of multicasts
    between the same two consecutive installed views than the reference one.

    Per (group, view_id, next_view_id), the reference is the incarnation whose
    set is the most common one (so one node that missed a message is the one
    reported, not everyone else). One row per disagreeing incarnation: the
    reference ``node``/``incarnation``, the ``other_node``/``other_incarnation``,
    ``difference`` (symmetric difference size) and an example message
    (``example_sender``, ``example_seq``).
    """
    import pandas as pd

    segments, delivered = _view_segments(events)
    variants = segments.drop_duplicates([*_VIEW_PAIR, "hash", "count"]).groupby(_VIEW_PAIR, sort=False).size()
    suspect = variants[variants > 1].reset_index()[_VIEW_PAIR]
    segments = segments.merge(suspect, on=_VIEW_PAIR)
    columns = [*_VIEW_PAIR, "node", "incarnation", "other_node", "other_incarnation",
               "difference", "example_sender", "example_seq"]
    if segments.empty:
        return pd.DataFrame(columns=columns)
    tagged = delivered.merge(segments[_SEGMENT], on=_SEGMENT)
    sets = {k: frozenset(zip(r["sender"], r["seq"])) for k, r in tagged.groupby(_SEGMENT, sort=False)}
    found: list[tuple[Any, ...]] = []
    for pair, members in segments.groupby(_VIEW_PAIR, sort=False):
        keys = [tuple(k) for k in members[_SEGMENT].itertuples(index=False)]
        signatures = list(zip(members["hash"], members["count"]))
        common = Counter(signatures).most_common(1)[0][0]  # ties: the first one met
        ref_key = keys[signatures.index(common)]
        reference = sets.get(ref_key, frozenset())
        for key, signature in zip(keys, signatures):
            if signature != common:
                diff = reference ^ sets.get(key, frozenset())
                sender, seq = min(diff)
                found.append((*pair, *ref_key[:2], *key[:2], len(diff), int(sender), int(seq)))
    return pd.DataFrame(found, columns=columns)


def unsafe_deliveries(events: Any) -> Any:
    """Safe order (EVS's SAFE, checked apart from invariants 1 to 8): a message
    one member delivered in a view's regular part (before any ``transitional``
    row of that view at that member) was held by every member of the view, so
    every member that installed the view and then a next one delivers it in
    that view, in its regular or its transitional part, unless it was left
    out alone (its ``transitional`` row names only itself, or its next view
    is itself alone: such a member holds no agreed cut and delivers only its
    own messages, docs/guarantees.md).
    One row (``node``,
    ``incarnation``, ``group``, ``view_id``, ``sender``, ``seq``) per member
    that did not. (A member that received a message after answering a
    proposal acknowledged it, its sender delivered it safely, and no member
    moving on delivered it: a replicated queue lost an acknowledged PUT.)"""
    import pandas as pd

    columns = [*_INCARNATION, "view_id", "sender", "seq"]
    if "order" not in events:
        return pd.DataFrame(columns=columns)
    rows = _with_incarnation(events)
    is_view = (rows["kind"] == "view") & ~_optimistic(rows)
    is_deliver = (rows["kind"] == "deliver") & ~rows["unicast"]
    rows = rows[is_view | is_deliver | (rows["kind"] == "transitional")].assign(is_view=is_view)
    keys = [rows[k] for k in _INCARNATION]
    rows["segment"] = rows["is_view"].astype("int64").groupby(keys, sort=False).cumsum()
    after = (rows["kind"] == "transitional").astype("int64")
    rows["transitional"] = after.groupby([*keys, rows["segment"]], sort=False).cumsum() > 0
    views = rows[rows["is_view"]].copy()
    views["next_view_id"] = views.groupby(_INCARNATION, sort=False)["view_id"].shift(-1)
    views["next_members"] = views.groupby(_INCARNATION, sort=False)["members"].shift(-1)
    moved_on = views[views["next_view_id"].notna()]
    went_alone = [list(m) == [n] for n, m in zip(moved_on["node"], moved_on["next_members"])]
    moved_on = moved_on[~pd.Series(went_alone, index=moved_on.index, dtype=bool)][[*_INCARNATION, "view_id"]]
    trans = rows[rows["kind"] == "transitional"]
    by_itself = pd.Series([list(m) == [n] for n, m in zip(trans["node"], trans["members"])], index=trans.index,
                          dtype=bool)
    alone = trans[by_itself][[*_INCARNATION, "view_id"]]
    moved_on = moved_on.merge(alone.drop_duplicates().assign(alone=True), on=[*_INCARNATION, "view_id"], how="left")
    moved_on = moved_on[moved_on["alone"].isna()].drop(columns="alone")
    delivered = rows[rows["kind"] == "deliver"]
    safe = delivered[(delivered["order"] == "safe") & ~delivered["transitional"]]
    messages = safe[["group", "view_id", "sender", "seq"]].drop_duplicates()
    expected = moved_on.merge(messages, on=["group", "view_id"])
    got = delivered[columns].drop_duplicates()
    merged = expected.merge(got, on=columns, how="left", indicator=True)
    return merged[merged["_merge"] == "left_only"][columns].reset_index(drop=True)


def rolled_back_deliveries(events: Any) -> Any:
    """Invariant 7, first part: deliver rows (multicast) of a message that has a
    ``rollback`` row on any node; a rolled-back message must be delivered nowhere."""
    multicast = events[events["dest"].isna()]
    rolled = multicast[multicast["kind"] == "rollback"][_MESSAGE].drop_duplicates()
    delivered = multicast[multicast["kind"] == "deliver"]
    return delivered.merge(rolled, on=_MESSAGE)[["t", "node", *_MESSAGE, "view_id"]]


def withdrawn_deliveries(events: Any) -> Any:
    """Invariant 7, withdrawn part: deliver rows (multicast) of a message its
    sender withdrew, in a view that sender installed after withdrawing it
    (``NotDelivered``: no member of the sender's next view delivers it)."""
    rows = _with_incarnation(events)
    withdrawn = _withdrawn(rows)[["t", "node", "incarnation", *_MESSAGE]]
    if withdrawn.empty:
        return rows.iloc[0:0][["t", "node", *_MESSAGE, "view_id"]]
    views = rows[(rows["kind"] == "view") & ~_optimistic(rows)][["t", "node", "incarnation", "group", "view_id"]]
    later = withdrawn.merge(views, on=["node", "incarnation", "group"], suffixes=("", "_view"))
    later = later[later["t_view"] >= later["t"]][[*_MESSAGE, "view_id"]].drop_duplicates()
    delivered = rows[(rows["kind"] == "deliver") & ~rows["unicast"]]
    return delivered.merge(later, on=[*_MESSAGE, "view_id"])[["t", "node", *_MESSAGE, "view_id"]]


def voided_deliveries(events: Any) -> Any:
    """Invariant 7, first part: deliveries of a rolled-back message, or of a
    withdrawn one in a view its sender installed after withdrawing it."""
    import pandas as pd

    return pd.concat([rolled_back_deliveries(events), withdrawn_deliveries(events)], ignore_index=True)


def optimistic_view_violations(events: Any) -> Any:
    """Invariant 7, second part: deliveries of a message sent optimistically under
    view O in an installed view that lacks some member of O.

    O's members come from the optimistic ``view`` rows with that id, the delivery
    view's from the installed ones. Messages whose O is unknown, or delivered in
    a view with no installed row, are skipped (nothing to compare). The subset
    test runs once per distinct (O, delivery view) pair. ``missing`` lists O's
    members absent from the delivery view.
    """
    multicast = events[events["dest"].isna()]
    optimistic = _optimistic(multicast)
    views = multicast[multicast["kind"] == "view"]
    members_of = {
        flag: views[optimistic[views.index] == flag].drop_duplicates("view_id").set_index("view_id")["members"]
        for flag in (True, False)
    }
    sends = multicast[(multicast["kind"] == "send") & optimistic][[*_MESSAGE, "view_id"]]
    sends = sends.rename(columns={"view_id": "optimistic_view"}).drop_duplicates(_MESSAGE)
    delivered = multicast[multicast["kind"] == "deliver"][["t", "node", *_MESSAGE, "view_id"]]
    delivered = delivered.merge(sends, on=_MESSAGE)
    pairs = delivered[["optimistic_view", "view_id"]].drop_duplicates()
    missing: dict[tuple[str, str], list[int]] = {}
    for o_view, d_view in zip(pairs["optimistic_view"], pairs["view_id"]):
        if o_view in members_of[True].index and d_view in members_of[False].index:
            absent = set(members_of[True][o_view]) - set(members_of[False][d_view])
            if absent:
                missing[(o_view, d_view)] = sorted(int(m) for m in absent)
    keys = list(zip(delivered["optimistic_view"], delivered["view_id"]))
    delivered = delivered.assign(missing=[missing.get(k) for k in keys])
    return delivered[delivered["missing"].notna()].reset_index(drop=True)
