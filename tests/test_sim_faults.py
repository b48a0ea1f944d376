"""Faults in the simulator: crash, recover, partition, heal, pause, join, leave."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from sgcs.sim.checks import read_events
from sgcs.sim.run import simulate
from sgcs.sim.scenario import load_scenario

from _scenario import group, write_scenario

FAULTS = {
    "seed": 21, "nodes": 16, "duration": 10.0,
    "network": {"latency_ms": {"median": 1.0, "sigma": 0.3}, "loss": 0.0},
    "groups": [group(rate=40.0, size=32)],
    "faults": [
        {"at": 1.0, "crash": [1]},
        {"at": 2.0, "partition": [[0, 2, 3, 4, 5], [6, 7, 8, 9]]},
        {"at": 4.0, "recover": [1]},
        {"at": 5.0, "heal": True},
        {"at": 5.5, "join": [14, 15]},
        {"at": 6.0, "pause": [2], "for": 1.5},
        {"at": 8.0, "leave": [3]},
    ],
}


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, str]:
    """The events of the FAULTS run, and the command that replays it."""
    base = tmp_path_factory.mktemp("faults")
    scenario = load_scenario(write_scenario(base / "faults.toml", **FAULTS))
    simulate(scenario, base / "run", progress=False)
    return read_events(base / "run"), scenario.replay_command(str(base / "run"))


def _sends(events: Any) -> Any:
    """Send time of each (group, sender, seq), for joining to deliveries."""
    sends = events[events["kind"] == "send"][["group", "sender", "seq", "t"]]
    return sends.rename(columns={"t": "sent_at"})


def _deliveries_with_send_time(events: Any) -> Any:
    """Deliveries with the time of the latest matching send before them: a
    recovered sender reuses sequence numbers, so the key alone is ambiguous."""
    deliveries = events[events["kind"] == "deliver"].reset_index()
    sends = _sends(events).sort_values("sent_at", kind="stable")
    merged = pd.merge_asof(deliveries.sort_values("t", kind="stable"), sends, left_on="t", right_on="sent_at",
                           by=["group", "sender", "seq"], direction="backward")
    return merged.sort_values("index", kind="stable").set_index("index")


def test_crash_stops_the_node(trace: tuple[Any, str]) -> None:
    events, replay = trace
    node1 = events[events["node"] == 1]
    crash = node1[node1["kind"] == "crash"]
    assert list(crash["t"]) == [1.0], replay
    silent = node1[(node1["t"] > 1.0) & (node1["t"] < 4.0)]
    assert silent.empty, f"a crashed node wrote rows: {silent.head()}; replay: {replay}"
    crashed_sends = events[(events["kind"] == "send") & (events["sender"] == 1) & events["t"].between(1.0, 3.99)]
    assert crashed_sends.empty, replay


def test_recover_restarts_and_rejoins(trace: tuple[Any, str]) -> None:
    events, replay = trace
    node1 = events[(events["node"] == 1) & (events["t"] >= 4.0)]
    assert list(node1["kind"][:3]) == ["recover", "join", "view"], replay
    assert (node1["t"][:3] == 4.0).all(), replay
    assert (node1["kind"] == "deliver").sum() > 10, f"the recovered node delivers again; replay: {replay}"


def test_partition_stops_deliveries_across_the_cut(trace: tuple[Any, str]) -> None:
    events, replay = trace
    component = {n: "a" for n in (0, 2, 3, 4, 5)} | {n: "b" for n in (6, 7, 8, 9)}
    rows = _deliveries_with_send_time(events)
    rows = rows.assign(
        rc=rows["node"].map(lambda n: component.get(n, "rest")),
        sc=rows["sender"].map(lambda n: component.get(n, "rest")),
    )
    during = rows[rows["sent_at"].between(2.0, 4.999)]
    crossing = during[during["rc"] != during["sc"]]
    early = crossing[crossing["t"] < 5.0]
    assert early.empty, f"deliveries across the partition before the heal: {early.head()}; replay: {replay}"
    assert (during["rc"] == during["sc"]).sum() > 0, replay
    # virtual synchrony: what one side sent in its own view stays there; after
    # the heal the sides merge into one view and talk again
    after = rows[rows["sent_at"] >= 7.0]
    assert (after["rc"] != after["sc"]).sum() > 0, f"heal must reconnect; replay: {replay}"
    views = events[(events["kind"] == "view") & (events["node"] == 0) & (events["t"] > 5.0)]
    assert any({0, 6} <= set(m) for m in views["members"]), f"the sides merge after the heal; replay: {replay}"


def test_pause_delays_handling_until_resume(trace: tuple[Any, str]) -> None:
    events, replay = trace
    node2 = events[events["node"] == 2]
    assert node2[(node2["t"] > 6.0) & (node2["t"] < 7.5)].empty, f"a paused node wrote rows; replay: {replay}"
    at_resume = node2[node2["t"] == 7.5]
    assert (at_resume["kind"] == "deliver").sum() > 10, f"the backlog is handled at resume; replay: {replay}"
    backlog = _deliveries_with_send_time(events).loc[at_resume.index[at_resume["kind"] == "deliver"]]
    assert (backlog["sent_at"] <= 7.5).all(), replay
    fifo = backlog.groupby("sender")["sent_at"].apply(lambda times: times.is_monotonic_increasing)
    assert fifo.all(), f"the backlog is delivered in FIFO order per sender; replay: {replay}"


def test_join_fault_nodes_start_at_their_time(trace: tuple[Any, str]) -> None:
    events, replay = trace
    for node in (14, 15):
        rows = events[events["node"] == node]
        assert rows["t"].min() == 5.5, replay
        assert list(rows["kind"][:2]) == ["join", "view"], replay
    learnt = events[(events["kind"] == "view") & (events["node"] == 0)]
    assert any(14 in members for members in learnt["members"]), f"members learn the joiner; replay: {replay}"


def test_leave_produces_leave_rows_and_stops_deliveries(trace: tuple[Any, str]) -> None:
    events, replay = trace
    node3 = events[events["node"] == 3]
    leave = node3[node3["kind"] == "leave"]
    assert list(leave["t"]) == [8.0] and list(leave["group"]) == ["g"], replay
    late = node3[(node3["t"] > 8.0) & (node3["kind"] == "deliver")]
    assert late.empty, replay
    views = events[(events["kind"] == "view") & (events["t"] > 8.0)]
    assert len(views) > 0 and all(3 not in members for members in views["members"]), replay


def test_scenario_time_does_not_leak_past_duration(trace: tuple[Any, str]) -> None:
    events, replay = trace
    assert events["t"].max() <= 10.0, replay


def test_the_shipped_fault_tour_runs(tmp_path: Path) -> None:
    scenario = load_scenario(Path(__file__).parents[1] / "simulations" / "scenarios" / "faults.toml", duration=12.0)
    summary = simulate(scenario, tmp_path / "run", progress=False)
    assert summary.sends > 0 and summary.deliveries > 0, scenario.replay_command(str(tmp_path / "run"))
