"""Invariants 1 and 2 on a lossy, duplicating, reordering simulated network, and
the pandas checks of invariants 5 (virtual synchrony) and 7 (optimistic messages)
on small hand-made traces, where each violation is planted on purpose."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from sgcs.sim.checks import (
    duplicate_deliveries,
    optimistic_view_violations,
    out_of_order_deliveries,
    read_events,
    rolled_back_deliveries,
    violations,
    virtual_synchrony_violations,
)
from sgcs.sim.run import simulate
from sgcs.sim.scenario import load_scenario

from _scenario import group

ROUGH = {
    "nodes": 25, "duration": 6.0,
    # wide spread: plenty of reordering
    "network": {"latency_ms": {"median": 2.0, "sigma": 1.5}, "loss": 0.1, "duplicate": 0.3},
    "groups": [group("a", rate=60.0, size=64),
               group("b", order="total", members=[0, 3, 5, 7, 11, 13, 17, 19, 23], rate=30.0, size=16)],
    "faults": [{"at": 2.0, "crash": [5]}, {"at": 3.0, "recover": [5]}],
}


@pytest.mark.parametrize("seed", [1, 2])
def test_no_duplicate_and_increasing_seq(tmp_path: Path, scenario_file: Callable[..., Path], seed: int) -> None:
    scenario = load_scenario(scenario_file("rough", seed=seed, **ROUGH))
    summary = simulate(scenario, tmp_path / "run", progress=False)
    replay = scenario.replay_command(str(tmp_path / "run"))
    events = read_events(tmp_path / "run")
    assert summary.lost > 0 and summary.deliveries > 1000, replay
    twice = duplicate_deliveries(events)
    assert twice.empty, f"invariant 1 broken:\n{twice.head()}\nreplay: {replay}"
    backwards = out_of_order_deliveries(events)
    assert backwards.empty, f"invariant 2 broken:\n{backwards.head()}\nreplay: {replay}"


def test_the_checks_catch_violations() -> None:
    rows = [
        (0.1, 1, "deliver", "g", 2, 1, None),
        (0.2, 1, "deliver", "g", 2, 3, None),
        (0.3, 1, "deliver", "g", 2, 2, None),   # backwards
        (0.4, 1, "deliver", "g", 2, 3, None),   # twice (and not increasing)
        (0.5, 1, "deliver", "g", 2, 1, 1.0),    # a unicast: its own sequence space
        (0.6, 1, "recover", None, None, None, None),
        (0.7, 1, "deliver", "g", 2, 1, None),   # a new incarnation starts afresh
    ]
    events = pd.DataFrame(rows, columns=["t", "node", "kind", "group", "sender", "seq", "dest"])
    assert list(duplicate_deliveries(events)["t"]) == [0.4]
    assert list(out_of_order_deliveries(events)["t"]) == [0.3, 0.4]


COLUMNS = ["t", "node", "kind", "group", "sender", "seq", "order", "view_id", "members",
           "optimistic", "target", "size", "dest", "reason"]
V1, V2, V3, O1 = "v1", "v2", "v3", "o1"


def trace(rows: list[tuple[Any, ...]]) -> pd.DataFrame:
    """A trace from terse rows ``(node, kind, sender, seq, view_id, members, optimistic, dest)``
    (trailing fields optional), in event order, all in group "g"; the other columns
    are filled so the frame looks like one read from Parquet."""
    records = []
    for i, row in enumerate(rows):
        node, kind, sender, seq, view_id, members, optimistic, dest = (*row, *[None] * (8 - len(row)))
        group = None if kind in ("crash", "recover") else "g"
        records.append({"t": i * 0.01, "node": node, "kind": kind, "group": group, "sender": sender,
                        "seq": seq, "order": None, "view_id": view_id, "members": members,
                        "optimistic": optimistic, "target": None, "size": None, "dest": dest,
                        "reason": None})
    return pd.DataFrame(records, columns=COLUMNS)


def view(node: int, view_id: str, members: list[int], optimistic: bool | None = None) -> tuple[Any, ...]:
    return (node, "view", None, None, view_id, members, optimistic)


def deliver(node: int, sender: int, seq: int, view_id: str = V1, dest: int | None = None) -> tuple[Any, ...]:
    return (node, "deliver", sender, seq, view_id, None, False, dest)


def good_rows() -> list[tuple[Any, ...]]:
    """Three nodes that agree: same set between v1 and v2 (in different orders), an
    optimistic message sent under o1 = {1, 2} and delivered in v2 = {1, 2, 3}, a
    rolled-back message delivered nowhere, a unicast and a tail after the last view
    that differ between nodes (neither is constrained)."""
    rows = [view(n, V1, [1, 2, 3]) for n in (1, 2, 3)]
    rows += [deliver(1, 1, 1), deliver(1, 2, 1), deliver(2, 2, 1), deliver(2, 1, 1)]
    rows += [deliver(3, 1, 1), deliver(3, 2, 1), deliver(3, 1, 7, dest=3)]
    rows += [view(n, O1, [1, 2], optimistic=True) for n in (1, 2)]
    rows += [(1, "send", 1, 2, O1, None, True), (2, "send", 2, 2, O1, None, True), (2, "rollback", 2, 2)]
    rows += [view(n, V2, [1, 2, 3], optimistic=False) for n in (1, 2, 3)]
    rows += [deliver(n, 1, 2, V2) for n in (1, 2, 3)]
    rows += [view(n, V3, [1, 2, 3]) for n in (1, 2, 3)]
    return rows + [deliver(1, 3, 1, V3)]


def test_views_and_optimism_hold_on_a_correct_trace() -> None:
    events = trace(good_rows())
    assert virtual_synchrony_violations(events).empty
    assert rolled_back_deliveries(events).empty
    assert optimistic_view_violations(events).empty
    counts = violations(events)
    assert counts["5_virtual_synchrony"] == 0
    assert counts["7_rolled_back_delivered"] == counts["7_outside_optimistic_view"] == 0


def test_virtual_synchrony_catches_a_missing_message() -> None:
    rows = [r for r in good_rows() if r != deliver(2, 1, 1)]   # node 2 misses (1, 1) in v1
    found = virtual_synchrony_violations(trace(rows))
    assert len(found) == 1, found
    row = found.iloc[0]
    assert (row["group"], row["view_id"], row["next_view_id"]) == ("g", V1, V2)
    assert row["node"] == 1 and row["other_node"] == 2   # the odd one out, against the majority
    assert (row["difference"], row["example_sender"], row["example_seq"]) == (1, 1, 1)


def test_virtual_synchrony_catches_an_empty_segment() -> None:
    rows = [r for r in good_rows() if r not in (deliver(3, 1, 2, V2),)]
    found = virtual_synchrony_violations(trace(rows))   # node 3 delivered nothing in v2
    assert list(zip(found["view_id"], found["other_node"], found["difference"])) == [(V2, 3, 1)]


def test_virtual_synchrony_catches_an_extra_message() -> None:
    rows = good_rows()
    rows.insert(rows.index(deliver(3, 2, 1)), deliver(3, 3, 5))
    found = virtual_synchrony_violations(trace(rows))
    assert list(zip(found["other_node"], found["example_sender"], found["example_seq"])) == [(3, 3, 5)]
    assert violations(trace(rows))["5_virtual_synchrony"] == 1


def test_virtual_synchrony_splits_incarnations() -> None:
    """Node 3 crashes in v1 and comes back in v2: its v1 has no next view in that
    incarnation, so missing (2, 1) there is no violation; a new one is compared afresh."""
    rows = [r for r in good_rows() if r != deliver(3, 2, 1)]
    rows.insert(rows.index(view(3, V2, [1, 2, 3], optimistic=False)), (3, "recover"))
    assert virtual_synchrony_violations(trace(rows)).empty
    rows.remove(deliver(3, 1, 2, V2))
    found = virtual_synchrony_violations(trace(rows))
    assert list(zip(found["other_node"], found["other_incarnation"])) == [(3, 1)]


def test_rolled_back_message_must_not_be_delivered() -> None:
    rows = good_rows() + [deliver(3, 2, 2, V3)]
    found = rolled_back_deliveries(trace(rows))
    assert list(zip(found["node"], found["sender"], found["seq"])) == [(3, 2, 2)]
    assert violations(trace(rows))["7_rolled_back_delivered"] == 1


def test_optimistic_message_outside_its_optimistic_view() -> None:
    rows = [view(r[0], O1, [1, 2, 4], True) if r[1] == "view" and r[4] == O1 else r for r in good_rows()]
    found = optimistic_view_violations(trace(rows))   # 4 is in o1 but not in v2
    assert list(zip(found["node"], found["view_id"])) == [(1, V2), (2, V2), (3, V2)]
    assert found["missing"].tolist() == [[4]] * 3
    assert violations(trace(rows))["7_outside_optimistic_view"] == 3


def test_optimistic_message_with_unknown_optimistic_view_is_skipped() -> None:
    rows = [r for r in good_rows() if r[1] != "view" or r[4] != O1]   # o1's members unknown
    rows += [(3, "send", 3, 9, "o9", None, True), deliver(1, 3, 9, "v9")]   # o9 and v9 unknown
    assert optimistic_view_violations(trace(rows)).empty


SMALL = {
    "seed": 3, "nodes": 8, "duration": 3.0,
    "network": {"latency_ms": {"median": 2.0, "sigma": 1.0}, "loss": 0.05},
    "groups": [group("a", rate=40.0, size=32)],
    "faults": [{"at": 1.0, "crash": [2]}, {"at": 1.5, "recover": [2]}],
}


def test_violations_reports_every_invariant_on_a_simulated_run(tmp_path: Path,
                                                               scenario_file: Callable[..., Path]) -> None:
    """A crash and a recovery at 5% loss in a FIFO group: every invariant
    that applies to FIFO holds (3 and 4 are for ordered groups)."""
    simulate(load_scenario(scenario_file("small", **SMALL)), tmp_path / "run", progress=False)
    counts = violations(read_events(tmp_path / "run"))
    assert set(counts) >= {"5_virtual_synchrony", "7_rolled_back_delivered", "7_outside_optimistic_view",
                           "8_without_outcome"}
    fifo = {k: n for k, n in counts.items() if k not in ("3_total", "4_causal")}
    assert fifo == dict.fromkeys(fifo, 0), counts
