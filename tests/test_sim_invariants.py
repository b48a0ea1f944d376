"""Invariants 1 and 2 on a lossy, duplicating, reordering simulated network."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from simulations.checks import duplicate_deliveries, out_of_order_deliveries, read_events
from simulations.run import simulate
from simulations.scenario import load_scenario

ROUGH = """
seed = {seed}
nodes = 25
duration = 6.0
[network]
latency_ms = {{ median = 2.0, sigma = 1.5 }}   # wide spread: plenty of reordering
loss = 0.1
duplicate = 0.3
[[groups]]
name = "a"
members = "all"
rate = 60.0
size = 64
[[groups]]
name = "b"
order = "total"
members = [0, 3, 5, 7, 11, 13, 17, 19, 23]
rate = 30.0
size = 16
[[faults]]
at = 2.0
crash = [5]
[[faults]]
at = 3.0
recover = [5]
"""


@pytest.mark.parametrize("seed", [1, 2])
def test_no_duplicate_and_increasing_seq(tmp_path: Path, seed: int) -> None:
    source = tmp_path / "rough.toml"
    source.write_text(ROUGH.format(seed=seed))
    scenario = load_scenario(source)
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
