"""Scenario parsing: valid files load; every mistake is one line naming its field."""

from __future__ import annotations

import copy
import re
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sgcs import Order, UsageError
from sgcs.sim.scenario import SCENARIOS_DIR, build_scenario, load_scenario, parse_scenario

BASE: dict[str, Any] = {
    "seed": 7,
    "nodes": 10,
    "duration": 5.0,
    "network": {"latency_ms": {"median": 1.0, "sigma": 0.5}, "loss": 0.05, "duplicate": 0.0},
    "protocol": {"beacon_interval": 0.5},
    "groups": [{"name": "g", "order": "total", "members": "all", "rate": 20.0, "size": 256}],
    "faults": [{"at": 1.0, "crash": [3]}, {"at": 2.0, "recover": [3]}],
}


def test_the_design_example_parses() -> None:
    text = """
seed = 7
nodes = 200
duration = 60.0
[network]
latency_ms = { median = 1.0, sigma = 0.5 }
loss = 0.05
duplicate = 0.0
[protocol]
[[groups]]
name = "g"
order = "total"
members = "all"
rate = 20.0
size = 256
[[faults]]
at = 10.0
crash = [3, 17]
[[faults]]
at = 11.0
partition = [[0, 1], [2, 3]]
[[faults]]
at = 12.0
heal = true
[[faults]]
at = 13.0
pause = [5]
for = 2.0
[[faults]]
at = 14.0
join = [150, 151]
[[faults]]
at = 20.0
leave = [150]
[[faults]]
at = 30.0
recover = [3]
"""
    scenario = parse_scenario(text)
    assert (scenario.seed, scenario.nodes, scenario.duration) == (7, 200, 60.0)
    assert scenario.network.loss == 0.05
    assert scenario.groups[0].order is Order.TOTAL
    assert scenario.groups[0].members == tuple(range(200))
    assert [f.action for f in scenario.faults] == ["crash", "partition", "heal", "pause", "join", "leave", "recover"]
    assert scenario.faults[1].components == ((0, 1), (2, 3))
    assert scenario.faults[3].pause_for == 2.0
    assert scenario.config.secret  # a default secret is supplied


@pytest.mark.parametrize("path", sorted(SCENARIOS_DIR.glob("*.toml")), ids=lambda p: p.name)
def test_shipped_scenarios_are_valid(path: Path) -> None:
    scenario = load_scenario(path)
    assert scenario.to_json()["nodes"] == scenario.nodes


def test_default_scenario_is_embedded() -> None:
    scenario = load_scenario(None)
    assert scenario.source == "<default>"
    assert scenario.nodes >= 10 and scenario.groups and scenario.faults


def test_members_forms_and_overrides() -> None:
    raw = copy.deepcopy(BASE)
    raw["groups"] = [
        {"name": "a", "members": 4},
        {"name": "b", "members": [9, 2, 5]},
        {"name": "c"},
    ]
    scenario = build_scenario(raw)
    assert [g.members for g in scenario.groups] == [(0, 1, 2, 3), (2, 5, 9), tuple(range(10))]
    assert scenario.groups[2].order is Order.FIFO
    overridden = parse_scenario("nodes = 3\nduration = 1.0\n", seed=9, nodes=20, duration=2.5)
    assert (overridden.seed, overridden.nodes, overridden.duration) == (9, 20, 2.5)


def test_to_json_leaves_the_secret_out() -> None:
    raw = copy.deepcopy(BASE)
    raw["protocol"]["secret"] = "a-very-secret-key"
    data = build_scenario(raw).to_json()
    assert "secret" not in data["protocol"]
    assert data["faults"][0] == {"at": 1.0, "crash": [3]}


def _patched(path: str, value: Any) -> dict[str, Any]:
    """BASE with the field at ``path`` (``groups[0].order``) set; _DELETE removes it."""
    raw = copy.deepcopy(BASE)
    *parents, last = re.findall(r"[^.\[\]]+", path)
    target: Any = raw
    for part in parents:
        target = target[int(part)] if part.isdigit() else target.setdefault(part, {})
    key: Any = int(last) if last.isdigit() else last
    if value is _DELETE:
        del target[key]
    else:
        target[key] = value
    return raw


_DELETE = object()

BAD_VALUES = [
    ("bogus", 1, "bogus: unknown field"),
    ("nodes", "ten", "nodes: must be an integer"),
    ("nodes", 0, "nodes: 0 is not in 1..1000000"),
    ("nodes", True, "nodes: must be an integer"),
    ("duration", _DELETE, "duration: is required"),
    ("duration", -1.0, "duration: -1.0 is not in (0,"),
    ("seed", -1, "seed: -1 is not in 0.."),
    ("network", 3, "network: must be a table"),
    ("network.loss", 1.5, "network.loss: 1.5 is not in [0, 1]"),
    ("network.loss", "high", "network.loss: must be a number"),
    ("network.duplicate", -0.1, "network.duplicate"),
    ("network.jitter", 1.0, "network.jitter: unknown field"),
    ("network.latency_ms.median", 0, "network.latency_ms.median"),
    ("network.latency_ms.sigma", _DELETE, "network.latency_ms.sigma: is required"),
    ("network.latency_ms.p99", 3, "network.latency_ms.p99: unknown field"),
    ("protocol.bogus", 1, "protocol: unknown config field 'bogus'"),
    ("protocol.max_datagram", 10, "protocol: Config.max_datagram"),
    ("groups", {"name": "g"}, "groups: must be an array of tables"),
    ("groups[0].order", "random", "groups[0].order: 'random' (string) is not one of fifo"),
    ("groups[0].members", 500, "groups[0].members: 500 is not in 1..10"),
    ("groups[0].members", [1, 900], "groups[0].members: node 900 is not in 0..9"),
    ("groups[0].members", [1, 1], "groups[0].members: lists a node id twice"),
    ("groups[0].members", "some", "groups[0].members: must be \"all\""),
    ("groups[0].size", 20_000_000, "groups[0].size: 20000000 is not in 0.."),
    ("groups[0].rate", -1, "groups[0].rate"),
    ("groups[0].name", "", "groups[0].name"),
    ("groups[0].colour", "red", "groups[0].colour: unknown field"),
    ("faults[0].crash", [900], "faults[0].crash: node 900 is not in 0..9"),
    ("faults[0].crash", 3, "faults[0].crash: must be a non-empty list"),
    ("faults[0].at", -1, "faults[0].at"),
    ("faults[0].at", _DELETE, "faults[0].at: is required"),
    ("faults[0].leave", [1], "faults[0]: needs exactly one action"),
    ("faults[0].for", 2.0, "faults[0].for: only applies to pause"),
    ("faults[0].when", 2.0, "faults[0].when: unknown field"),
    ("faults[1]", {"at": 2.0, "pause": [1]}, "faults[1].for: is required"),
    ("faults[1]", {"at": 2.0, "pause": [1], "for": 0}, "faults[1].for"),
    ("faults[1]", {"at": 2.0, "heal": False}, "faults[1].heal: must be true"),
    ("faults[1]", {"at": 2.0, "partition": [[0, 1], [1, 2]]}, "faults[1].partition: components must be disjoint"),
    ("faults[1]", {"at": 2.0, "partition": [0, 1]}, "faults[1].partition: must be a list of node-id lists"),
    ("faults[1]", {"at": 2.0, "recover": [4]}, "faults[1].recover: node 4 is not crashed at t=2"),
    ("faults[1]", {"at": 0.5, "recover": [3]}, "faults[1].recover: node 3 is not crashed at t=0.5"),
    ("faults[1]", {"at": 2.0, "crash": [3]}, "faults[1].crash: node 3 is already crashed"),
    ("faults[1]", {"at": 2.0, "partition": [[0], []]}, "faults[1].partition: must be a non-empty list"),
]


@pytest.mark.parametrize(("path", "value", "expected"), BAD_VALUES, ids=[f"{p}={v!r}"[:40] for p, v, _ in BAD_VALUES])
def test_bad_values_name_their_field(path: str, value: Any, expected: str) -> None:
    with pytest.raises(UsageError) as caught:
        build_scenario(_patched(path, value))
    message = str(caught.value)
    assert expected in message
    assert "\n" not in message


def test_timeline_rules_for_join_and_leave() -> None:
    raw = copy.deepcopy(BASE)
    raw["faults"] = [{"at": 1.0, "join": [8]}, {"at": 2.0, "leave": [8]}, {"at": 3.0, "join": [8]}]
    assert len(build_scenario(raw).faults) == 3  # rejoin after a leave is fine
    raw["faults"] = [{"at": 1.0, "join": [8]}, {"at": 2.0, "join": [8]}]
    with pytest.raises(UsageError, match=r"faults\[1\].join: node 8 is already running"):
        build_scenario(raw)
    raw["faults"] = [{"at": 1.0, "crash": [8]}, {"at": 2.0, "join": [8]}]
    with pytest.raises(UsageError, match=r"faults\[0\].crash: node 8 is not running at t=1"):
        build_scenario(raw)
    raw["faults"] = [{"at": 1.0, "pause": [2], "for": 3.0}, {"at": 2.0, "leave": [2]}]
    with pytest.raises(UsageError, match=r"faults\[1\].leave: node 2 is paused until t=4"):
        build_scenario(raw)


@pytest.mark.parametrize(
    ("text", "overrides", "expected"),
    [
        ("nodes = [", {}, "invalid TOML"),
        ("nodes = 10\nduration = 1.0\n[[faults]]\nat = 0.5\ncrash = [8]\n", {"nodes": 5},
         "faults[0].crash: node 8 is not in 0..4"),
        ("nodes = 10\nduration = 1.0\n", {"duration": 0.0}, "duration: 0.0 is not in (0,"),
    ],
)
def test_text_errors_and_overrides(text: str, overrides: dict[str, Any], expected: str) -> None:
    with pytest.raises(UsageError) as caught:
        parse_scenario(text, **overrides)
    assert expected in str(caught.value)
    assert "\n" not in str(caught.value)


def test_missing_file_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="cannot read scenario"):
        load_scenario(tmp_path / "nope.toml")


def test_a_written_scenario_reads_back_as_written(scenario_file: Callable[..., Path]) -> None:
    """The ``scenario_file`` fixture (tests/_scenario.py) writes the TOML a test's fields say."""
    fields = copy.deepcopy(BASE)
    fields["faults"] += [{"at": 2.5, "partition": [[0, 1], [2, 3]]}, {"at": 3.0, "heal": True},
                         {"at": 4.0, "pause": [5], "for": 2.0}]
    path = scenario_file("written", **fields)
    assert tomllib.loads(path.read_text()) == fields
    assert load_scenario(path).to_json() == build_scenario(fields, str(path)).to_json()
    assert tomllib.loads(scenario_file(seed=None, groups=None).read_text()) == {"nodes": 8, "duration": 1.0}
