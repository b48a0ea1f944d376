"""The event engine, the network model and node timers in the simulator."""

from __future__ import annotations

import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest

from sgcs.node import Node
from sgcs.sim import simulator as simulator_module
from sgcs.sim.engine import Engine
from sgcs.sim.network import Network, derive_seed
from sgcs.sim.run import simulate
from sgcs.sim.scenario import NetworkSpec, load_scenario

from _scenario import group, write_scenario


def test_engine_orders_by_time_then_scheduling_order() -> None:
    engine = Engine()
    seen: list[tuple[float, Any]] = []
    handler = lambda t, node, a, b: seen.append((t, a))  # noqa: E731
    for t, label in [(2.0, "c"), (1.0, "a"), (2.0, "d"), (1.0, "b"), (9.0, "late")]:
        engine.schedule(t, 0, -1, label)
    engine.run(5.0, [handler])
    assert seen == [(1.0, "a"), (1.0, "b"), (2.0, "c"), (2.0, "d")]
    assert engine.now == 5.0 and engine.events == 4
    engine.schedule(1.0, 0, -1, "past")  # clamped: time never goes backwards
    engine.run(9.0, [handler])
    assert seen[-2:] == [(5.0, "past"), (9.0, "late")]


def test_seeds_are_stable_and_distinct() -> None:
    assert derive_seed(7, "network/fan-out") == derive_seed(7, "network/fan-out")
    assert derive_seed(7, "network/fan-out") != derive_seed(8, "network/fan-out")


@pytest.mark.parametrize(("loss", "duplicate", "median_ms"), [(0.0, 0.0, 1.0), (0.2, 0.0, 5.0), (0.1, 0.3, 0.5)])
def test_fan_out_matches_the_model(loss: float, duplicate: float, median_ms: float) -> None:
    network = Network(NetworkSpec(median_ms, 0.5, loss, duplicate), seed=1, nodes=50_001)
    receivers, delays, lost = network.fan_out(0, np.arange(50_001, dtype=np.int64))
    assert 0 not in receivers and 0 not in lost
    unique = len(set(receivers))
    assert unique + len(lost) == 50_000
    assert abs(len(lost) / 50_000 - loss) < 0.01
    assert abs((len(receivers) - unique) / max(unique, 1) - duplicate) < 0.01
    assert abs(statistics.median(delays) * 1000 / median_ms - 1) < 0.03
    assert min(delays) > 0


def test_partition_cuts_both_multicast_and_unicast() -> None:
    network = Network(NetworkSpec(1.0, 0.0, 0.0, 0.0), seed=1, nodes=6)
    network.partition(((0, 1), (2, 3)))  # 4 and 5 form a third component
    receivers, _, lost = network.fan_out(0, np.arange(6, dtype=np.int64))
    assert receivers == [1] and sorted(lost) == [2, 3, 4, 5]
    assert network.unicast(4, 5) == [pytest.approx(0.001)] and network.unicast(4, 0) == []
    network.heal()
    assert sorted(network.fan_out(0, np.arange(6, dtype=np.int64))[0]) == [1, 2, 3, 4, 5]


class DiscoveringNode:
    """A node that joins without the member list, so discovery beacons run on
    timers. A wrapper, not a subclass: the compiled ``Node`` (mypyc) admits no
    interpreted subclasses."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._node = Node(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._node, name)

    def join(self, group: str, now: float, order: Any = "fifo", members: Any = None) -> list[Any]:
        return self._node.join(group, now, order=order, members=None)


BEACONS = {
    "seed": 4, "nodes": 6, "duration": 5.0,
    "network": {"latency_ms": {"median": 1.0, "sigma": 0.0}},
    "protocol": {"beacon_interval": 1.0},
    "groups": [group(rate=0.0)],
    "faults": [{"at": 1.5, "pause": [2], "for": 2.0}],
}


def test_timers_fire_and_a_paused_node_fires_late(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(simulator_module, "Node", DiscoveringNode)
    scenario = load_scenario(write_scenario(tmp_path / "beacons.toml", **BEACONS))
    simulate(scenario, tmp_path / "run", progress=False)
    replay = scenario.replay_command(str(tmp_path / "run")) + "  (with DiscoveringNode)"
    net = pq.read_table(tmp_path / "run" / "net").to_pandas()
    heartbeat = net[net["msg_type"] == "heartbeat"]
    sent = {(row.t, row.node): row.sent_count for row in heartbeat.itertuples()}
    # Heartbeats go out every gossip round (0.1 s) once the nodes have merged.
    assert [sent.get((t, 0), 0) > 0 for t in (1.0, 2.0, 3.0, 4.0)] == [True] * 4, replay
    # Node 2 is paused over [1.5, 3.5): nothing in the t=2 bucket; its overdue
    # round fires late, at 3.5, and then every 0.1 s again.
    assert sent.get((2.0, 2), 0) == 0, replay
    assert 0 < sent.get((3.0, 2), 0) <= 6 and sent.get((4.0, 2), 0) >= 8, replay
    events = pq.read_table(tmp_path / "run" / "events").to_pandas()
    views = events[events["kind"] == "view"].groupby("node")["members"].last()
    assert all(len(members) == 6 for members in views), f"discovery completes; replay: {replay}"


def test_event_costs_times_every_kind_of_event() -> None:
    """``benchmarks/event_costs.py`` wraps the simulator's handlers: its table
    has a row per event type, and their counts are the run's events. The
    script is run as its users run it, in a process of its own."""
    root = Path(__file__).resolve().parent.parent
    scenario = root / "simulations" / "scenarios" / "large-10k.toml"
    done = subprocess.run([sys.executable, str(root / "benchmarks" / "event_costs.py"), str(scenario),
                           "--nodes", "20", "--duration", "2"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    rows = [line.split("|") for line in done.stdout.splitlines() if line.startswith("| arrive:")
            or line.startswith("| timer")]
    counts = {cells[1].strip(): int(cells[2].replace(",", "")) for cells in rows}
    assert counts["timer"] > 0 and counts["arrive:data"] > 0 and counts["arrive:heartbeat"] > 0
