"""Scenario files for the simulator tests, written from a few fields.

``write_scenario(path, nodes=16, faults=[...])`` writes a scenario TOML file
(the format of docs/scenarios.md) from ``DEFAULT`` with the given top-level
fields replaced (None leaves a field out), so a test states only what matters
to it; the file gives the run a replay command
(``Scenario.replay_command``). The ``scenario_file`` fixture of
tests/conftest.py writes one under the test's ``tmp_path``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

DEFAULT: dict[str, Any] = {
    "seed": 1,
    "nodes": 8,
    "duration": 1.0,
    "groups": [{"name": "g", "members": "all", "rate": 20.0, "size": 10}],
}


def group(name: str = "g", **fields: Any) -> dict[str, Any]:
    """A ``[[groups]]`` entry: ``name``, every node a member, and ``fields``."""
    return {"name": name, "members": "all", **fields}


def scenario_toml(**fields: Any) -> str:
    """``DEFAULT`` with ``fields`` replaced (None: left out), as TOML text."""
    raw = {**DEFAULT, **fields}
    return to_toml({key: value for key, value in raw.items() if value is not None})


def write_scenario(path: Path, **fields: Any) -> Path:
    path.write_text(scenario_toml(**fields))
    return path


def to_toml(raw: dict[str, Any]) -> str:
    """Scenario tables as TOML: top-level values, then tables (``network``,
    ``protocol``), then arrays of tables (``groups``, ``faults``)."""
    tables = {key: value for key, value in raw.items() if isinstance(value, dict)}
    arrays = {key: value for key, value in raw.items()
              if isinstance(value, list) and value and all(isinstance(v, dict) for v in value)}
    lines = [f"{key} = {_value(value)}" for key, value in raw.items() if key not in tables and key not in arrays]
    for key, table in tables.items():
        lines += [f"[{key}]", *(f"{k} = {_value(v)}" for k, v in table.items())]
    for key, entries in arrays.items():
        for entry in entries:
            lines += [f"[[{key}]]", *(f"{k} = {_value(v)}" for k, v in entry.items())]
    return "\n".join(lines) + "\n"


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"no TOML for {value!r}")
