"""Traces of real runs (``open_node(config, trace=DIR)``) checked like simulated ones.

The first test runs two nodes in this process and checks the trace's shape
(meta.json, datasets, one time axis) and its invariants. The second is the
issue's acceptance run: five member processes in one total-order group each
multicast 500 messages while one of them is killed with SIGKILL partway
through; the members' shared trace must show no violation of invariants 1 to
7 (``sgcs.sim.checks.violations``). A failure prints the timeline of the
members' views and the harness's actions, and the trace directory.
``tests/test_namespaces.py`` runs the second on three hosts (network
namespaces) through ``five_members_with_a_kill``.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import trio

import sgcs
from sgcs.sim import checks

from _net import private_multicast
from membership_peer import Cluster, converge

SECRET = b"real-trace-test-secret"
WAIT = 20.0


async def _exchange(node: sgcs.NodeHandle, others: int, count: int, order: str) -> list[tuple[int, int]]:
    """Join "g", wait for ``others`` more members, multicast ``count``
    messages, and return (sender, seq) of everything delivered until all
    members' messages are in."""
    delivered: list[tuple[int, int]] = []
    async with node.join("g", order=order) as group:
        with trio.fail_after(WAIT):
            async for event in group:
                if isinstance(event, sgcs.ViewChange) and len(event.members) == others + 1:
                    break
            for index in range(count):
                await group.send(b"m%d" % index)
            async for event in group:
                if isinstance(event, sgcs.Delivery):
                    delivered.append((event.sender, event.seq))
                    if len(delivered) == count * (others + 1):
                        break
            await trio.sleep(0.5)  # serve the others' last repairs and promises before leaving
    return delivered


async def test_two_nodes_write_one_checkable_trace(tmp_path: Path) -> None:
    run = tmp_path / "run"
    network = private_multicast()
    results: dict[int, list[tuple[int, int]]] = {}

    async def member(node_id: int) -> None:
        config = sgcs.Config(name=f"n{node_id}", secret=SECRET, node_id=node_id, beacon_interval=0.1, **network)
        async with sgcs.open_node(config, trace=run) as node:
            results[node_id] = await _exchange(node, 1, 50, "total")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(member, 1)
        nursery.start_soon(member, 2)

    assert results[1] == results[2] and len(results[1]) == 100  # total order, every message
    meta = json.loads((run / "meta.json").read_text())
    assert (meta["schema"], meta["nodes"], meta["members"]) == (1, 2, [1, 2])
    assert meta["scenario"]["source"] == "real" and meta["scenario"]["groups"] == [{"name": "g", "order": "total"}]
    events = checks.read_events(run)
    kinds = set(events["kind"])
    assert {"join", "send", "deliver", "view", "leave"} <= kinds, kinds
    assert (events["kind"] == "send").sum() == 100 and (events["kind"] == "deliver").sum() == 200
    assert 0 < meta["duration"] < WAIT and events["t"].between(0, meta["duration"]).all()
    for _, rows in events.groupby("node"):
        assert rows["t"].is_monotonic_increasing  # one node's rows in event order, on one clock
    assert set(checks.violations(events).values()) == {0}, checks.violations(events)
    traffic = pq.read_table(run / "net").to_pandas()
    assert {"data", "heartbeat"} <= set(traffic["msg_type"]) and set(traffic["node"]) == {1, 2}
    assert traffic["sent_count"].sum() > 0 and traffic["recv_count"].sum() > 0


async def test_members_opening_one_fresh_directory_at_once_share_it(tmp_path: Path) -> None:
    """Three nodes of one process open the run together (the first creates
    meta.json, the others must not take its work files for a foreign trace)."""
    network = private_multicast()

    async def member(node_id: int) -> None:
        config = sgcs.Config(secret=SECRET, node_id=node_id, **network)
        async with sgcs.open_node(config, trace=tmp_path / "run"):
            await trio.sleep(0.05)

    for attempt in range(5):
        run = tmp_path / "run"
        async with trio.open_nursery() as nursery:
            for node_id in (1, 2, 3):
                nursery.start_soon(member, node_id)
        assert json.loads((run / "meta.json").read_text())["members"] == [1, 2, 3], attempt
        for path in sorted(run.rglob("*"), reverse=True):
            path.rmdir() if path.is_dir() else path.unlink()
        run.rmdir()


async def test_trace_directory_of_a_simulation_is_refused(tmp_path: Path) -> None:
    (tmp_path / "meta.json").write_text(json.dumps({"schema": 1, "scenario": {"groups": []}}))
    config = sgcs.Config(secret=SECRET, **private_multicast())
    with pytest.raises(sgcs.UsageError, match="simulated trace"):
        async with sgcs.open_node(config, trace=tmp_path):
            pass


MEMBERS = 5
MESSAGES = 500
"""Per member: the four survivors alone multicast 2,000 messages."""
VICTIM = 3
RATE = 80.0
"""Messages per second per member: the run lasts about 6 s, the kill falls in its middle."""


def test_five_members_total_order_with_a_kill_leave_a_clean_trace(tmp_path: Path, record_property: Any) -> None:
    five_members_with_a_kill(tmp_path, record_property)


def five_members_with_a_kill(tmp_path: Path, record_property: Any, **placement: Any) -> tuple[Cluster, Any]:
    """The run and the assertions of the test above, for it and for
    ``tests/test_namespaces.py`` (which passes ``Cluster``'s ``ports``,
    ``prefix`` and ``member_settings`` to place members on other hosts).
    Returns the (closed) cluster, with what its members reported, and the trace's events."""
    run = tmp_path / "run"
    with Cluster(MEMBERS, tmp_path, order="total", rate=RATE, messages=MESSAGES, trace=run,
                 settings=("suspect_factor=3",), **placement) as cluster:
        report = f"trace: {run}\n{{}}"
        assert converge(cluster, WAIT) is not None, report.format(cluster.timeline())
        assert cluster.wait_until(lambda: all(_seen(p, "sending") for p in cluster.peers.values()), WAIT), \
            report.format(cluster.timeline())
        time.sleep(MESSAGES / RATE / 2)
        killed_at = cluster.signal(VICTIM, signal.SIGKILL)
        survivors = [i for i in cluster.ids if i != VICTIM]
        assert cluster.wait_until(lambda: cluster.agreed(survivors), WAIT), report.format(cluster.timeline())
        excluded = cluster.last_install(survivors, survivors, killed_at)
        assert cluster.wait_until(lambda: all(_seen(cluster.peers[i], "sent_all") for i in survivors), 60.0), \
            report.format(cluster.timeline())
        assert cluster.wait_until(lambda: _settled(cluster, survivors), WAIT), report.format(cluster.timeline())
    # Leaving the cluster ended the survivors gracefully: their traces are closed.
    events = checks.read_events(run)
    found = checks.violations(events)
    sends = events[events["kind"] == "send"]
    delivered = events[events["kind"] == "deliver"].groupby("node").size().to_dict()
    views = events[(events["kind"] == "view") & (events["optimistic"] != True)]  # noqa: E712
    partial, departed = partial_views(events, {VICTIM})
    figures = (f"{len(sends)} messages sent ({(sends['node'] == VICTIM).sum()} by the victim), deliveries per "
               f"member {delivered}, exclusion {excluded - killed_at if excluded else None:.2f} s after the kill, "
               f"{len(events)} rows; views installed by only some of their live members: {partial}; violations {found}; "
               f"views not installed by a member that was leaving: {departed}")
    print(figures)
    record_property("figures", figures)
    assert (sends["node"] != VICTIM).sum() == (MEMBERS - 1) * MESSAGES, figures
    meta = json.loads((run / "meta.json").read_text())
    assert meta["nodes"] == MEMBERS and ((events["kind"] == "crash") & (events["node"] == VICTIM)).sum() == 1
    assert set(found.values()) == {0}, f"{figures}\ntrace: {run}"
    common, shared = _delivered_in_shared_views(events, survivors)
    sizes = {i: len(got) for i, got in shared.items()}
    assert len(set(shared.values())) == 1, f"{figures}\ndelivered in views all survivors installed: {sizes}\n{run}"
    sent_in_common = sends[sends["node"].isin(survivors) & sends["view_id"].isin(common)]
    assert set(zip(sent_in_common["sender"], sent_in_common["seq"])) <= shared[survivors[0]], figures
    assert len(sent_in_common) >= 0.9 * (MEMBERS - 1) * MESSAGES, f"{figures}\n{len(sent_in_common)} in shared views"
    return cluster, events


def partial_views(events: Any, crashed: set[int]) -> tuple[list[str], list[str]]:
    """Views (not optimistic) that a member they list never installed, but for
    members in ``crashed``: those where a live member skipped the view (a
    bug), and those whose only missing members were leaving gracefully (their
    leave crossed the commit: they had answered the change, then left before
    its commit reached them; docs/guarantees.md)."""
    views = events[(events["kind"] == "view") & (events["optimistic"] != True)]  # noqa: E712
    leaves = events[events["kind"] == "leave"].groupby("node")["t"].min().to_dict()
    partial, departed = [], []
    for view_id, rows in views.groupby("view_id"):
        missing = set(rows["members"].iloc[0]) - set(rows["node"]) - crashed
        if not missing:
            continue
        first = rows["t"].min()
        installed_after = views[views["node"].isin(missing) & (views["t"] > first)]
        leaving = all(m in leaves for m in missing) and installed_after.empty
        (departed if leaving else partial).append(view_id)
    return sorted(partial), sorted(departed)


def _delivered_in_shared_views(events: Any, survivors: list[int]
                               ) -> tuple[set[str], dict[int, frozenset[tuple[int, int]]]]:
    """The views every survivor installed, and per survivor the messages it delivered in views that every survivor
    installed. Views raced at start-up (two coordinators at one epoch) may be
    installed by only some of the members they list; what those deliver is
    held to virtual synchrony by the checks, not to this equality."""
    views = events[(events["kind"] == "view") & (events["optimistic"] != True)]  # noqa: E712
    installed = [set(views.loc[views["node"] == i, "view_id"]) for i in survivors]
    common = set.intersection(*installed)
    rows = events[(events["kind"] == "deliver") & events["view_id"].isin(common)]
    return common, {i: frozenset(zip(r["sender"], r["seq"])) for i, r in rows.groupby("node") if i in survivors}


def _seen(peer: Any, event: str) -> bool:
    return any(e.get("event") == event for e in list(peer.events))


def _settled(cluster: Cluster, survivors: list[int]) -> bool:
    """Every survivor reported the same event count twice in a row (the
    count includes suspicions and the like, so the counts may differ between
    members; the trace tells what each delivered)."""
    for node_id in survivors:
        reports = [e["delivered"] for e in list(cluster.peers[node_id].events) if e.get("event") == "delivered"]
        if len(reports) < 2 or reports[-1] != reports[-2]:
            return False
    return True
