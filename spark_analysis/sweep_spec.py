"""Sweep files: read, validate and expand a ``SWEEP.toml`` into points (``sgcs sweep``).

Every point's scenario is validated here, before Spark starts, so a bad value
fails in one line naming the key and the point; points are ordered big N first
(see :mod:`sgcs.analysis.sweep`).

SWEEP.toml
----------
::

    base = "../scenarios/default.toml"   # a scenario file, relative to this file;
                                         # or an inline [base] table holding a scenario
    duration = 20.0                      # optional: replaces the base's duration
    seeds = [1, 2]                       # optional: repetitions (default: the base's seed)
    net_bucket = 1.0                     # optional: seconds per net-table bucket
    [grid]                               # key = [values]; every combination is a point
    nodes = [16, 64, 256]
    "network.loss" = [0.0, 0.05]         # dotted paths into the scenario
    "protocol.suspect_factor" = [1, 2]   # any sgcs.Config field
    "groups[0].rate" = [1.0, 10.0]       # groups and faults by index

Grid keys are scenario paths: ``nodes``, ``duration``, ``network.*``,
``protocol.*``, ``groups[i].*`` and ``faults[i].*`` (``seed`` is given by
``seeds``). Each value list is non-empty, without repeats. A point is named
from its values, e.g. ``n256_loss0.05_seed1``. The *series* of a point is
its grid values other than ``nodes``: fits are made per series, over N.
"""

from __future__ import annotations

import itertools
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sgcs.errors import UsageError
from sgcs.transport.params import Params

MAX_POINTS = 10_000
"""A grid bigger than this is surely a mistake (a typo'd list of values)."""
_TOP_KEYS = ("base", "duration", "seeds", "net_bucket", "grid")
_KEY_RE = re.compile(r"^[A-Za-z_]\w*(\[\d+\])?(\.[A-Za-z_]\w*(\[\d+\])?)*$")
_PART_RE = re.compile(r"^([A-Za-z_]\w*)(?:\[(\d+)\])?$")
_LABELS = {"nodes": "n"}


@dataclass(frozen=True)
class Point:
    """One simulation of the sweep; ``raw`` is its scenario as parsed TOML."""

    name: str
    params: tuple[tuple[str, Any], ...]
    """(grid key, value) in grid order."""
    seed: int
    nodes: int
    raw: dict[str, Any] = field(repr=False)
    source: str = ""
    suspect_timeout: float = 0.0
    """suspect_factor * max(3, ceil(log2 N)) * gossip_interval, the detector's first-suspicion bound (s)."""

    @property
    def series(self) -> str:
        """The grid values other than nodes, e.g. ``loss=0.05``; ``all`` when none."""
        parts = [f"{_short(key)}={_text(value)}" for key, value in self.params if key != "nodes"]
        return ", ".join(parts) or "all"


@dataclass(frozen=True)
class Sweep:
    """A validated sweep file."""

    path: str
    grid: tuple[tuple[str, tuple[Any, ...]], ...]
    seeds: tuple[int, ...]
    net_bucket: float
    points: tuple[Point, ...]

    def to_json(self) -> dict[str, Any]:
        return {"file": self.path, "grid": {k: list(v) for k, v in self.grid},
                "seeds": list(self.seeds), "net_bucket": self.net_bucket, "points": len(self.points)}


# ------------------------------------------------------------------ parsing


def load_sweep(path: str | Path) -> Sweep:
    """Read, validate and expand a sweep file (see the module docstring)."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise UsageError(f"cannot read sweep file {path}: {exc.strerror or exc}") from None
    return parse_sweep(text, path)


def parse_sweep(text: str, path: str | Path = "<sweep>") -> Sweep:
    """Validate sweep TOML; a ``base`` path is resolved against ``path``'s directory."""
    path = Path(path)
    try:
        table = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{path}: invalid TOML: {exc}") from None
    for key in table:
        if key not in _TOP_KEYS:
            raise UsageError(f"{key}: unknown sweep key; allowed: {', '.join(_TOP_KEYS)}")
    base = _base(table.get("base"), path.parent)
    if "duration" in table:
        base["duration"] = table["duration"]  # validated with the scenario, per point
    seeds = _seeds(table.get("seeds"), base)
    net_bucket = _net_bucket(table.get("net_bucket", 1.0))
    grid = _grid(table.get("grid", {}))
    points = expand(base, grid, seeds, str(path))
    return Sweep(str(path), grid, seeds, net_bucket, tuple(order_points(points)))


def _base(value: Any, directory: Path) -> dict[str, Any]:
    if value is None:
        raise UsageError('base: required; a scenario file (base = "x.toml") or an inline [base] table')
    if isinstance(value, dict):
        return dict(value)
    if not isinstance(value, str):
        raise UsageError(f"base: must be a scenario file path or a table, got {value!r}")
    file = directory / value
    try:
        return tomllib.loads(file.read_text())
    except OSError as exc:
        raise UsageError(f"base: cannot read {file}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"base: {file}: invalid TOML: {exc}") from None


def _seeds(value: Any, base: dict[str, Any]) -> tuple[int, ...]:
    if value is None:
        seed = base.get("seed", 0)
        return (seed,) if isinstance(seed, int) and not isinstance(seed, bool) else (0,)
    ok = isinstance(value, list) and value and all(isinstance(s, int) and not isinstance(s, bool) for s in value)
    if not ok or any(s < 0 for s in value):
        raise UsageError(f"seeds: must be a non-empty array of integers >= 0, got {value!r}")
    if len(set(value)) != len(value):
        raise UsageError("seeds: lists a seed twice")
    return tuple(value)


def _net_bucket(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 3600:
        raise UsageError(f"net_bucket: must be a number of seconds in (0, 3600], got {value!r}")
    return float(value)


def _grid(table: Any) -> tuple[tuple[str, tuple[Any, ...]], ...]:
    if not isinstance(table, dict):
        raise UsageError(f"grid: must be a table ([grid]), got {table!r}")
    grid = []
    for key, values in table.items():
        path = f"grid.{key}"
        if not _KEY_RE.match(key):
            raise UsageError(f"{path}: not a scenario path like nodes, network.loss or groups[0].rate")
        if key == "seed":
            raise UsageError(f"{path}: give repetitions as seeds = [...] at the top level")
        if not isinstance(values, list) or not values:
            raise UsageError(f"{path}: must be a non-empty array of values, got {values!r}")
        if any(isinstance(v, dict) for v in values):
            raise UsageError(f"{path}: values must be numbers, strings, booleans or arrays, not tables")
        if len({repr(v) for v in values}) != len(values):
            raise UsageError(f"{path}: lists a value twice")
        grid.append((key, tuple(values)))
    return tuple(grid)


# ------------------------------------------------------------------ expansion


def expand(base: dict[str, Any], grid: tuple[tuple[str, tuple[Any, ...]], ...],
           seeds: tuple[int, ...], source: str = "<sweep>") -> list[Point]:
    """Every combination of grid values and seeds, as validated points (grid order)."""
    keys = [key for key, _ in grid]
    labels = _labels(keys)
    combos = list(itertools.product(*(values for _, values in grid)))
    if len(combos) * len(seeds) > MAX_POINTS:
        raise UsageError(f"grid: {len(combos) * len(seeds)} points; at most {MAX_POINTS}")
    points: list[Point] = []
    for combo, seed in itertools.product(combos, seeds):
        params = tuple(zip(keys, combo))
        name = "_".join([*(f"{labels[k]}{_text(v)}" for k, v in params), f"seed{seed}"])
        points.append(_point(base, params, seed, name, source))
    names = [p.name for p in points]
    if len(set(names)) != len(names):
        raise UsageError("grid: two points get the same run name; use values that differ in letters or digits")
    return points


def _point(base: dict[str, Any], params: tuple[tuple[str, Any], ...], seed: int, name: str, source: str) -> Point:
    from sgcs.sim.scenario import build_scenario

    raw = _deep_copy(base)
    raw["seed"] = seed
    for key, value in params:
        set_path(raw, key, value)
    try:
        scenario = build_scenario(raw, f"{source}:{name}")
    except UsageError as exc:
        raise UsageError(f"{exc} (sweep point {name})") from None
    timeout = Params.of(scenario.config).suspect_timeout(scenario.nodes)
    return Point(name, params, seed, scenario.nodes, raw, f"{source}:{name}", timeout)


def set_path(raw: dict[str, Any], key: str, value: Any) -> None:
    """Set a dotted scenario path (``network.loss``, ``groups[0].rate``) in ``raw``."""
    parts = key.split(".")
    node: Any = raw
    for depth, part in enumerate(parts):
        name, index = _PART_RE.match(part).groups()  # type: ignore[union-attr]
        last = depth == len(parts) - 1
        where = ".".join(parts[: depth + 1])
        if index is None:
            if last:
                node[name] = value
                return
            node = node.setdefault(name, {})
        else:
            entries = node.get(name)
            if not isinstance(entries, list) or int(index) >= len(entries):
                count = len(entries) if isinstance(entries, list) else 0
                raise UsageError(f"grid.{key}: the base scenario has {count} {name}, no {name}[{index}]")
            if last:
                entries[int(index)] = value
                return
            node = entries[int(index)]
        if not isinstance(node, dict):
            raise UsageError(f"grid.{key}: {where} in the base scenario is not a table")


def order_points(points: list[Point]) -> list[Point]:
    """Biggest N first (stable), so the long simulations start at once."""
    return sorted(points, key=lambda p: -p.nodes)


def _labels(keys: list[str]) -> dict[str, str]:
    """Short labels for run names: the last path part, unless two keys share it."""
    short = {key: _LABELS.get(key, _short(key)) for key in keys}
    counts = {label: list(short.values()).count(label) for label in short.values()}
    return {key: (label if counts[label] == 1 else re.sub(r"[^\w]+", "-", key)) for key, label in short.items()}


def _short(key: str) -> str:
    return re.sub(r"\[\d+\]", "", key.rsplit(".", 1)[-1])


def _text(value: Any) -> str:
    """A value as it appears in a run name: no spaces, slashes or quotes."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, list):
        return "+".join(_text(v) for v in value)
    return re.sub(r"[^\w.+-]+", "-", str(value))


def _deep_copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _deep_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_deep_copy(v) for v in value]
    return value
