"""A run split over worker processes (``sgcs.sim.parallel``) writes the run
one process writes: the same rows, every node's rows in the same order."""

from __future__ import annotations

import itertools
import multiprocessing
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from sgcs.errors import UsageError
from sgcs.sim import simulator as simulator_module
from sgcs.sim.run import simulate
from sgcs.sim.scenario import load_scenario
from sgcs.sim.simulator import SimulationBug

from _scenario import group, write_scenario

FAULTS = [
    {"at": 2.0, "crash": [3, 11]},
    {"at": 3.0, "pause": [5], "for": 1.5},
    {"at": 4.0, "join": [20, 21]},
    {"at": 5.0, "partition": [[0, 1, 2, 4, 5, 6, 7], [8, 9, 10, 12, 13]]},
    {"at": 7.0, "heal": True},
    {"at": 8.0, "recover": [3]},
    {"at": 9.0, "leave": [9]},
]
"""Every kind of fault: replicated state (up, joined, paused, partitions) must agree in every worker."""


def _scenario(tmp_path: Path, **fields: Any) -> Path:
    raw: dict[str, Any] = {
        "seed": 11, "nodes": 22, "duration": 11.0,
        "network": {"latency_ms": {"median": 2.0, "sigma": 0.7, "min": 0.3}, "loss": 0.05, "duplicate": 0.02},
        "groups": [group("chat", order="fifo", rate=20.0, size=128),
                   group("ops", order="total", rate=5.0, size=64, members=[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 20, 21])],
        "faults": FAULTS,
    }
    return write_scenario(tmp_path / "scenario.toml", **{**raw, **fields})


def _rows(run: Path, dataset: str) -> list[dict[str, Any]]:
    return pq.read_table(run / dataset).to_pylist()


def _key(row: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    return tuple((k, repr(v)) for k, v in sorted(row.items()))


def _by_instant(rows: list[dict[str, Any]]) -> dict[float, list[tuple[tuple[str, str], ...]]]:
    return {t: sorted(map(_key, same)) for t, same in itertools.groupby(rows, lambda r: r["t"])}


def _by_node(rows: list[dict[str, Any]]) -> dict[int, list[tuple[tuple[str, str], ...]]]:
    nodes: dict[int, list[tuple[tuple[str, str], ...]]] = {}
    for row in rows:
        nodes.setdefault(row["node"], []).append(_key(row))
    return nodes


@pytest.mark.parametrize("workers", [2, 3])
def test_workers_write_the_trace_one_process_writes(tmp_path: Path, workers: int) -> None:
    scenario = load_scenario(str(_scenario(tmp_path)))
    print(f"replay: {scenario.replay_command()} (and --workers {workers})")
    one = simulate(scenario, tmp_path / "one", progress=False)
    split = simulate(scenario, tmp_path / "split", progress=False, workers=workers)
    events_one, events_split = _rows(tmp_path / "one", "events"), _rows(tmp_path / "split", "events")
    assert len(events_one) > 5_000 and {r["kind"] for r in events_one} >= {"deliver", "view", "crash", "recover"}
    assert [r["t"] for r in events_split] == sorted(r["t"] for r in events_split)  # one file set, in time order
    assert _by_instant(events_split) == _by_instant(events_one)
    assert _by_node(events_split) == _by_node(events_one)  # every node's rows in the same order
    assert _rows(tmp_path / "split", "net") == _rows(tmp_path / "one", "net")  # summed, in one process's order
    assert sorted(map(_key, _rows(tmp_path / "split", "stats"))) == sorted(map(_key, _rows(tmp_path / "one", "stats")))
    for field in ("rows", "net_rows", "sends", "deliveries", "expected_deliveries", "datagrams", "lost", "drops",
                  "repaired_by_nack", "repaired_by_gossip", "retransmissions", "nacks", "peak_buffered"):
        assert getattr(split, field) == getattr(one, field), field
    assert split.workers == workers and one.workers == 1
    assert not list((tmp_path / "split").glob(".worker-*")) and not multiprocessing.active_children()


def test_the_shortest_delay_is_kept(tmp_path: Path) -> None:
    scenario = load_scenario(str(_scenario(tmp_path, faults=None, duration=2.0)))
    simulate(scenario, tmp_path / "run", progress=False, workers=2)
    assert scenario.network.latency_min_ms == 0.3
    assert scenario.to_json()["network"]["latency_ms"]["min"] == 0.3
    from sgcs.sim.network import Network
    import numpy as np
    network = Network(scenario.network, seed=1, nodes=10_001)
    _, delays, _ = network.fan_out(0, np.arange(10_001, dtype=np.int64))
    unicasts = [d for _ in range(2_000) for d in network.unicast(1, 2)]
    assert min(delays) == min(unicasts) == pytest.approx(0.0003)
    assert sum(d == 0.0003 for d in delays) > 0  # some draws were shorter: raised, not redrawn


@pytest.mark.parametrize(("fields", "workers", "message"), [
    ({"network": {"latency_ms": {"median": 1.0, "sigma": 0.5}}}, 2, "network.latency_ms.min"),
    ({}, 0, "--workers must be between 1 and 64"),
    ({"nodes": 2, "groups": [group("g", rate=1.0, size=8)], "faults": None}, 3, "more than the scenario's 2 nodes"),
])
def test_workers_that_cannot_run_are_refused_in_one_line(tmp_path: Path, fields: dict[str, Any], workers: int,
                                                         message: str) -> None:
    scenario = load_scenario(str(_scenario(tmp_path, **fields)))
    with pytest.raises(UsageError, match=message) as error:
        simulate(scenario, tmp_path / "run", progress=False, workers=workers)
    assert "\n" not in str(error.value) and not (tmp_path / "run").exists()


def test_mailbox_scenarios_run_on_one_worker(tmp_path: Path) -> None:
    from sgcs.sim.scenario import SCENARIOS_DIR

    with pytest.raises(UsageError, match="does not run mailbox scenarios"):
        simulate(load_scenario(str(SCENARIOS_DIR / "mailboxes.toml")), tmp_path / "run", progress=False, workers=2)
    assert not (tmp_path / "run").exists()


def test_a_shortest_delay_above_the_median_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="network.latency_ms.min"):
        load_scenario(str(_scenario(tmp_path, network={"latency_ms": {"median": 1.0, "sigma": 0.5, "min": 2.0}})))


def test_a_failing_worker_stops_the_run_with_its_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A bug in one worker's nodes is reported, with its time and replay
    command; the other workers stop (their peer's pipe closed); none is left."""
    arrive = simulator_module.Simulator._arrive

    def failing(self: simulator_module.Simulator, t: float, dst: int, incarnation: int, packet: Any) -> None:
        if self.worker == 1 and t > 3.0:
            raise RuntimeError("injected fault in worker 1")
        arrive(self, t, dst, incarnation, packet)

    monkeypatch.setattr(simulator_module.Simulator, "_arrive", failing)  # the forked workers inherit it
    scenario = load_scenario(str(_scenario(tmp_path, faults=None)))
    with pytest.raises(SimulationBug, match="injected fault in worker 1") as bug:
        simulate(scenario, tmp_path / "run", progress=False, workers=2)
    assert 3.0 < bug.value.t < 3.1 and "sgcs simulate" in bug.value.replay
    assert not multiprocessing.active_children() and not list((tmp_path / "run").glob(".worker-*"))


def test_a_killed_worker_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker killed from outside (the kernel's out-of-memory killer, say)
    leaves no report: the run stops, naming it and the signal."""
    import os
    import signal

    arrive = simulator_module.Simulator._arrive

    def dying(self: simulator_module.Simulator, t: float, dst: int, incarnation: int, packet: Any) -> None:
        if self.worker == 1 and t > 2.0:
            os.kill(os.getpid(), signal.SIGKILL)
        arrive(self, t, dst, incarnation, packet)

    monkeypatch.setattr(simulator_module.Simulator, "_arrive", dying)
    scenario = load_scenario(str(_scenario(tmp_path, faults=None)))
    with pytest.raises(SimulationBug, match="worker 1 was killed by signal 9"):
        simulate(scenario, tmp_path / "run", progress=False, workers=2)
    assert not multiprocessing.active_children() and not list((tmp_path / "run").glob(".worker-*"))
