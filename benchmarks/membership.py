"""Membership metrics of simulator runs (trace schema 1, docs/traces.md).

Usage::

    python benchmarks/membership.py RUN [RUN...] [--json]

Each RUN is a directory written by ``sgcs simulate ... --out RUN``. The script
reads ``RUN/meta.json`` and only the membership rows of ``RUN/events`` (kinds
view, suspect, unsuspect, crash, recover, join, leave; the Parquet scan drops
send and deliver rows before they are materialised), and reports:

Crash detection (one entry per ``crash`` row, node X at time tc)
    ``first_suspicion``: delay from tc to the first ``suspect`` row, at any
    node, whose target is X. This is the failure detector's speed.
    ``exclusion``: for every *survivor*, the delay from tc until it has
    installed a view without X, in every group where its current view at tc
    held X. Survivors are the nodes with no crash row and no leave row in that
    group, other than X, whose installed view just before tc contained X
    (a node that never saw X has nothing to exclude). Median and max over the
    survivors that did it, and how many never did. Delays are given in
    seconds and in gossip rounds (seconds / gossip_interval, the scenario's
    ``[protocol] gossip_interval`` or 0.1), because the protocol's timeouts
    scale with rounds: rounds make runs with different intervals comparable.

False positives
    ``suspects``: suspect rows (in a run without faults, all are false).
    ``unsuspects``: unsuspect rows, and ``unsuspects_busy``: those with reason
    "busy" (a suspected node was alive but slow, e.g. paused).
    ``live_exclusions``: (view row, node Y) pairs where a node installs a view
    that drops Y from its previous installed view in that group although Y
    had no crash row, no leave row in that group, at or before that row, and
    had started (it is not a node that only a later join fault starts). These
    are the damaging false positives: a live member was thrown out.

Partition heal (one entry per ``heal`` fault of the scenario, at th)
    ``converged``: the time from th until every node that is in the group at
    the end of the run (its last join/leave/crash row is a join) holds an
    installed view containing all those nodes (0 if their views at th
    already did); null if some never does, or if the trace has no join rows
    to tell who is in a group at the end.

Blocked time
    For each node and group, every run of ``optimistic`` view rows (kind view,
    optimistic true) ends at the next installed view row. The interval from
    the first optimistic row to that installed view is how long a sender
    without optimistic delivery would have been blocked by the change. Total,
    median and max per change, and how many runs never ended.

Views
    Installed view rows (kind view, optimistic not true), distinct installed
    view ids, and optimistic view rows: the cost of membership churn.

Rows are kept in trace order (stable-sorted by t); "before"/"after" compare
row positions, so events at the same instant keep their causal order.
Membership lists are interned: every distinct member set is converted to a
Python set once, and per-row questions (does it contain X, what did it drop)
are answered per distinct set or per distinct pair of sets.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from sgcs.transport.params import Params

DEFAULT_GOSSIP_INTERVAL = Params().gossip_interval
"""Seconds per gossip round when the scenario does not set one (Config's default)."""
KINDS = ("view", "suspect", "unsuspect", "crash", "recover", "join", "leave")
COLUMNS = ("t", "node", "kind", "group", "view_id", "members", "optimistic", "target", "reason")
MAX_EXAMPLES = 5
DIGITS = 6
"""JSON numbers are rounded to this many decimals (no 5.000000000000001 rounds)."""


@dataclass(frozen=True)
class Trace:
    """The membership rows of one run.

    ``rows`` is indexed by position in trace order and has the columns t,
    node, kind, group, view_id, target, reason, installed (an installed view),
    optimistic_view (an optimistic view) and mid (index into ``member_sets``
    for installed views, -1 otherwise).
    """

    run: Path
    meta: dict[str, Any]
    rows: pd.DataFrame
    member_sets: list[frozenset[int]]

    @property
    def gossip_interval(self) -> float:
        protocol = self.meta.get("scenario", {}).get("protocol", {}) or {}
        return float(protocol.get("gossip_interval", DEFAULT_GOSSIP_INTERVAL))

    def scenario_faults(self, action: str) -> list[dict[str, Any]]:
        faults = self.meta.get("scenario", {}).get("faults", []) or []
        return [f for f in faults if action in f]

    def views(self) -> pd.DataFrame:
        return self.rows[self.rows["installed"]]

    def of_kind(self, kind: str) -> pd.DataFrame:
        return self.rows[self.rows["kind"] == kind]


# ---------------------------------------------------------------- loading


def load_trace(run: str | Path) -> Trace:
    """Read meta.json and the membership rows of RUN/events."""
    run = Path(run)
    meta_path, events = run / "meta.json", run / "events"
    if not meta_path.is_file():
        raise ValueError(f"{run}: no meta.json (not a run directory written by sgcs simulate)")
    parts = sorted(events.glob("*.parquet")) if events.is_dir() else []
    if not parts:
        raise ValueError(f"{run}: no events/*.parquet")
    meta = json.loads(meta_path.read_text())
    table = ds.dataset([str(p) for p in parts], format="parquet").to_table(
        columns=list(COLUMNS), filter=pc.field("kind").isin(list(KINDS))
    )
    is_view = pc.equal(table["kind"], "view")
    is_optimistic = pc.fill_null(table["optimistic"], False)
    installed = pc.and_(is_view, pc.invert(is_optimistic)).to_numpy(zero_copy_only=False)
    optimistic_view = pc.and_(is_view, is_optimistic).to_numpy(zero_copy_only=False)
    mids, member_sets = intern_members(table["members"], installed)
    rows = table.drop_columns(["members", "optimistic"]).to_pandas()
    rows["installed"] = installed
    rows["optimistic_view"] = optimistic_view
    rows["mid"] = mids
    order = np.argsort(rows["t"].to_numpy(), kind="stable")
    rows = rows.iloc[order].reset_index(drop=True)
    return Trace(run, meta, rows, member_sets)


def intern_members(members: pa.ChunkedArray, wanted: np.ndarray) -> tuple[np.ndarray, list[frozenset[int]]]:
    """Membership id per row (-1 where not wanted) and the distinct member sets."""
    lists = members.combine_chunks()
    offsets = lists.offsets.to_numpy()
    values = lists.values.to_numpy(zero_copy_only=False)
    mids = np.full(len(lists), -1, dtype=np.int64)
    ids: dict[bytes, int] = {}
    sets: list[frozenset[int]] = []
    for i in np.flatnonzero(wanted):
        chunk = values[offsets[i]:offsets[i + 1]]
        key = chunk.tobytes()
        mid = ids.get(key)
        if mid is None:
            mid = ids[key] = len(sets)
            sets.append(frozenset(chunk.tolist()))
        mids[i] = mid
    return mids, sets


# ---------------------------------------------------------------- helpers


def _num(value: Any) -> float | None:
    """A JSON-ready float (None for NaN/None), rounded to DIGITS decimals."""
    if value is None:
        return None
    value = float(value)
    return None if np.isnan(value) else round(value, DIGITS)


def _rounds(seconds: float | None, gossip_interval: float) -> float | None:
    return None if seconds is None else _num(seconds / gossip_interval)


def _per_mid(sets: list[frozenset[int]], test: Callable[[frozenset[int]], bool]) -> np.ndarray:
    """test(set) for every interned member set, as a bool array indexed by mid."""
    return np.fromiter((test(s) for s in sets), dtype=bool, count=len(sets))


def _first_pos(rows: pd.DataFrame, keys: list[str]) -> pd.Series:
    """Position of the first row per key (keys are columns of ``rows``)."""
    return rows.reset_index(names="pos").groupby(keys)["pos"].min()


def members_at_end(trace: Trace) -> dict[str, set[int]]:
    """Per group, the nodes whose last join/leave (that group) or crash row is a join."""
    rows = trace.rows
    life = rows[rows["kind"].isin(("join", "leave", "crash"))]
    crashes = life[life["kind"] == "crash"]
    result: dict[str, set[int]] = {}
    for group in life.loc[life["kind"] == "join", "group"].dropna().unique():
        mine = life[life["group"] == group]
        last = pd.concat([mine, crashes]).sort_index(kind="stable").groupby("node").tail(1)
        result[str(group)] = set(last.loc[last["kind"] == "join", "node"].astype(int))
    return result


# ---------------------------------------------------------------- crash detection


def crash_metrics(trace: Trace) -> list[dict[str, Any]]:
    """One entry per crash row: first suspicion and exclusion by the survivors."""
    crashes = trace.of_kind("crash")
    crashed = set(crashes["node"].astype(int))
    left = set(map(tuple, trace.of_kind("leave")[["node", "group"]].itertuples(index=False)))
    return [
        one_crash(trace, int(node), float(t), int(pos), crashed, left)
        for pos, node, t in zip(crashes.index, crashes["node"], crashes["t"])
    ]


def one_crash(trace: Trace, x: int, tc: float, pos: int, crashed: set[int],
              left: set[tuple[int, str]]) -> dict[str, Any]:
    gossip = trace.gossip_interval
    rows, views = trace.rows, trace.views()
    suspects = rows[(rows["kind"] == "suspect") & (rows["target"] == x) & (rows.index > pos)]
    first_suspicion = _num(suspects["t"].iloc[0] - tc) if len(suspects) else None

    views = views.assign(has_x=_per_mid(trace.member_sets, lambda s: x in s)[views["mid"].to_numpy()])
    current = views[views.index < pos].groupby(["node", "group"], sort=False).tail(1)
    current = current[current["has_x"]]
    keep = [n not in crashed and n != x and (n, g) not in left for n, g in zip(current["node"], current["group"])]
    waiting = current.loc[keep, ["node", "group"]]
    excluded = views[(views.index > pos) & ~views["has_x"]].drop_duplicates(["node", "group"])[["node", "group", "t"]]
    pairs = waiting.merge(excluded, on=["node", "group"], how="left")
    never = pairs["t"].isna().groupby(pairs["node"]).any()
    done = pairs.groupby("node")["t"].max()[~never] - tc
    median = _num(done.median()) if len(done) else None
    worst = _num(done.max()) if len(done) else None
    return {
        "node": x,
        "t": _num(tc),
        "first_suspicion_s": first_suspicion,
        "first_suspicion_rounds": _rounds(first_suspicion, gossip),
        "survivors": int(len(never)),
        "exclusion_median_s": median,
        "exclusion_median_rounds": _rounds(median, gossip),
        "exclusion_max_s": worst,
        "exclusion_max_rounds": _rounds(worst, gossip),
        "never_excluded": int(never.sum()),
    }


# ---------------------------------------------------------------- false positives


def false_positives(trace: Trace) -> dict[str, Any]:
    unsuspects = trace.of_kind("unsuspect")
    exclusions = live_exclusions(trace)
    examples = []
    for (pos, t, node, group, view_id), ys in exclusions.groupby(
        ["pos", "t", "node", "group", "view_id"], sort=True, dropna=False
    )["excluded"]:
        if len(examples) == MAX_EXAMPLES:
            break
        examples.append({"t": _num(t), "node": int(node), "group": group,
                         "view_id": None if pd.isna(view_id) else str(view_id),
                         "excluded": sorted(int(y) for y in ys)})
    return {
        "suspects": int((trace.rows["kind"] == "suspect").sum()),
        "unsuspects": int(len(unsuspects)),
        "unsuspects_busy": int((unsuspects["reason"] == "busy").sum()),
        "live_exclusions": int(len(exclusions)),
        "live_excluded_nodes": int(exclusions["excluded"].nunique()),
        "live_exclusion_examples": examples,
    }


def dropped_members(trace: Trace) -> pd.DataFrame:
    """(pos, t, node, group, view_id, excluded): each member an installed view
    dropped relative to the same node's previous installed view in that group."""
    views = trace.views()
    previous = views.groupby(["node", "group"], sort=False)["mid"].shift(1)
    changed = views[previous.notna() & (previous != views["mid"])]
    sets = trace.member_sets
    cache: dict[tuple[int, int], list[int]] = {}
    positions: list[int] = []
    excluded: list[int] = []
    for pos, before, after in zip(changed.index, previous[changed.index].astype(int), changed["mid"]):
        key = (before, after)
        if key not in cache:
            cache[key] = sorted(sets[before] - sets[after])
        positions.extend([pos] * len(cache[key]))
        excluded.extend(cache[key])
    out = changed.loc[positions, ["t", "node", "group", "view_id"]]
    out.insert(0, "pos", np.asarray(positions, dtype=np.int64))
    out["excluded"] = np.asarray(excluded, dtype=np.int64)
    return out.reset_index(drop=True)


def live_exclusions(trace: Trace) -> pd.DataFrame:
    """The dropped members that had not crashed or left and had started."""
    dropped = dropped_members(trace)
    rows = trace.rows
    first_crash = _first_pos(rows[rows["kind"] == "crash"], ["node"])
    first_leave = _first_pos(rows[rows["kind"] == "leave"], ["node", "group"])
    first_join = _first_pos(rows[rows["kind"] == "join"], ["node"])
    pending = {n for f in trace.scenario_faults("join") for n in f["join"]}
    y, pos = dropped["excluded"], dropped["pos"]
    crash_at = y.map(first_crash)
    leave_at = pd.Series(
        first_leave.reindex(pd.MultiIndex.from_arrays([y, dropped["group"]])).to_numpy(), index=dropped.index
    )
    join_at = y.map(first_join)
    gone = (crash_at <= pos) | (leave_at <= pos)
    started = ~y.isin(pending) | (join_at <= pos)
    return dropped[~gone & started].reset_index(drop=True)


# ---------------------------------------------------------------- partition heal


def heal_metrics(trace: Trace) -> list[dict[str, Any]]:
    """One entry per heal fault: time until every final member holds the final membership."""
    final = members_at_end(trace)
    gossip = trace.gossip_interval
    out = []
    for fault in trace.scenario_faults("heal"):
        th = float(fault["at"])
        waits = [converge_times(trace, group, members, th) for group, members in final.items()]
        times = pd.concat(waits) if waits else pd.Series(dtype=float)
        converged = _num(times.max()) if len(times) and not times.isna().any() else None
        out.append({
            "t": _num(th),
            "converged_s": converged,
            "converged_rounds": _rounds(converged, gossip),
            "unconverged_nodes": int(times.isna().sum()),
        })
    return out


def converge_times(trace: Trace, group: str, members: set[int], th: float) -> pd.Series:
    """Per final member of ``group``: seconds after th until its installed
    view holds every final member (0 if its view at th already does; NaN: never)."""
    views = trace.views()
    views = views[views["group"] == group]
    full = _per_mid(trace.member_sets, lambda s: members <= s)[views["mid"].to_numpy()]
    at_heal = views[views["t"] <= th].groupby("node").tail(1).index
    candidates = views[full & ((views["t"] > th) | views.index.isin(at_heal))]
    first = candidates.groupby("node")["t"].first().reindex(sorted(members))
    return first.clip(lower=th) - th


# ---------------------------------------------------------------- blocked time and views


def blocked_metrics(trace: Trace) -> dict[str, Any]:
    """Optimistic-view-to-installed-view intervals, per node and group."""
    rows = trace.rows
    views = rows[rows["installed"] | rows["optimistic_view"]]
    installed = views["installed"].astype(np.int64)
    run = installed.groupby([views["node"], views["group"]]).cumsum() - installed
    views = views.assign(run=run)
    keys = ["node", "group", "run"]
    started = views[views["optimistic_view"]].groupby(keys)["t"].min()
    ended = views[views["installed"]].groupby(keys)["t"].first()
    ends = ended.reindex(started.index)
    spans = (ends - started).dropna()
    return {
        "changes": int(len(spans)),
        "total_s": _num(spans.sum()),
        "median_s": _num(spans.median()) if len(spans) else None,
        "max_s": _num(spans.max()) if len(spans) else None,
        "unresolved": int(ends.isna().sum()),
    }


def view_counts(trace: Trace) -> dict[str, int]:
    views = trace.views()
    return {
        "installed": int(len(views)),
        "distinct_ids": int(views["view_id"].nunique()),
        "optimistic": int(trace.rows["optimistic_view"].sum()),
    }


# ---------------------------------------------------------------- report


def measure(run: str | Path) -> dict[str, Any]:
    """All membership metrics of one run, as a JSON-ready dict."""
    trace = load_trace(run)
    return {
        "run": str(trace.run),
        "nodes": trace.meta.get("nodes"),
        "duration": trace.meta.get("duration"),
        "gossip_interval": trace.gossip_interval,
        "crashes": crash_metrics(trace),
        "false_positives": false_positives(trace),
        "heals": heal_metrics(trace),
        "blocked": blocked_metrics(trace),
        "views": view_counts(trace),
    }


def _pair(seconds: float | None, rounds: float | None) -> str:
    return "never" if seconds is None else f"{seconds:.3f}s {rounds:.1f}r"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}s"


def table_rows(result: dict[str, Any]) -> list[tuple[str, str]]:
    """(label, cell) lines of one run, for the human table."""
    lines: list[tuple[str, str]] = []
    for c in result["crashes"]:
        name = f"crash {c['node']}@{c['t']:g}"
        nobody = "-" if c["survivors"] == 0 else None
        lines += [
            (f"{name} first suspect", _pair(c["first_suspicion_s"], c["first_suspicion_rounds"])),
            (f"{name} exclude median", nobody or _pair(c["exclusion_median_s"], c["exclusion_median_rounds"])),
            (f"{name} exclude max", nobody or _pair(c["exclusion_max_s"], c["exclusion_max_rounds"])),
            (f"{name} never excluded", f"{c['never_excluded']}/{c['survivors']}"),
        ]
    fp = result["false_positives"]
    lines += [
        ("suspects", str(fp["suspects"])),
        ("unsuspects (busy)", f"{fp['unsuspects']} ({fp['unsuspects_busy']})"),
        ("live exclusions (nodes)", f"{fp['live_exclusions']} ({fp['live_excluded_nodes']})"),
    ]
    for h in result["heals"]:
        cell = _pair(h["converged_s"], h["converged_rounds"])
        if h["unconverged_nodes"]:
            cell += f" ({h['unconverged_nodes']} nodes never)"
        lines.append((f"heal@{h['t']:g} converged", cell))
    b, v = result["blocked"], result["views"]
    lines += [
        ("blocked total (changes)", f"{_seconds(b['total_s'])} ({b['changes']})"),
        ("blocked median / max", f"{_seconds(b['median_s'])} / {_seconds(b['max_s'])}"),
        ("blocked unresolved", str(b["unresolved"])),
        ("views installed / ids", f"{v['installed']} / {v['distinct_ids']}"),
        ("optimistic views", str(v["optimistic"])),
    ]
    return lines


def render_table(results: list[dict[str, Any]]) -> str:
    """Metrics as rows, runs as columns (so runs of one scenario family line up)."""
    columns = [dict(table_rows(r)) for r in results]
    labels = list(dict.fromkeys(label for r in results for label, _ in table_rows(r)))
    headers = [Path(r["run"]).name or r["run"] for r in results]
    width = max(len(label) for label in labels + ["metric"])
    widths = [max([len(h)] + [len(col.get(label, "-")) for label in labels]) for h, col in zip(headers, columns)]
    out = ["  ".join(["metric".ljust(width)] + [h.rjust(w) for h, w in zip(headers, widths)])]
    for label in labels:
        cells = [col.get(label, "-").rjust(w) for col, w in zip(columns, widths)]
        out.append("  ".join([label.ljust(width)] + cells))
    for r in results:
        for e in r["false_positives"]["live_exclusion_examples"]:
            out.append(f"{Path(r['run']).name}: t={e['t']:g} node {e['node']} group {e['group']} "
                       f"view {e['view_id']} dropped live {e['excluded']}")
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="membership.py", description="Membership metrics of sgcs simulator runs (see the module docstring)."
    )
    parser.add_argument("runs", nargs="+", metavar="RUN", help="run directory written by sgcs simulate --out")
    parser.add_argument("--json", action="store_true", help='print {"runs": [...]} instead of a table')
    args = parser.parse_args(argv)
    try:
        results = [measure(run) for run in args.runs]
    except (OSError, ValueError, pa.ArrowException) as exc:
        print(f"membership.py: {exc}", file=sys.stderr)
        return 2
    print(json.dumps({"runs": results}, indent=2) if args.json else render_table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
