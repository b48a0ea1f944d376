"""Scenario files: parse and validate the TOML that describes one simulation.

Theory of operation
-------------------
A scenario (docs/scenarios.md) names the seed, the number of
nodes, the simulated duration, the network model, protocol settings, the
groups with their workload, and a list of timed faults. ``load_scenario``
reads the TOML, applies command-line overrides (seed, nodes, duration) to the
raw tables *before* validating, so that an override that makes the file
inconsistent (``--nodes 10`` with a fault on node 50) is reported like any
other mistake, and returns a frozen ``Scenario``.

Validation is exhaustive and fails fast: every unknown field, wrong type or
out-of-range value raises ``sgcs.UsageError`` with a single line that starts
with the field's path (``network.loss``, ``groups[0].size``,
``faults[2].crash``) and says what is allowed. Faults are parsed in
``faultspec`` and an optional ``[mailboxes]`` workload (post offices of the
mailbox service on the first nodes) in ``mailspec``; this module owns the top
level, the network, the protocol and the groups.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sgcs.config import Config, Order
from sgcs.errors import UsageError
from sgcs.wire import MAX_GROUP_NAME

from .faultspec import Fault, check_timeline, parse_faults
from .mailspec import MailboxSpec, parse_mailboxes
from .validate import check_keys, fail, integer, number, show

DEFAULT_SECRET = b"sgcs-simulation-secret"
"""Used when [protocol] names no secret; every simulated node shares it."""
MAX_NODES = 1_000_000
MAX_SEED = 2**63 - 1
MAX_RATE = 1_000_000.0
"""Application messages per second per group; far above anything useful."""
DEFAULT_SCENARIO = "default.toml"
SCENARIOS_DIR = Path(__file__).resolve().parent / "scenarios"
"""Shipped scenarios (package data next to this module)."""

_TOP_KEYS = ("seed", "nodes", "duration", "network", "protocol", "groups", "faults", "mailboxes")
_NETWORK_KEYS = ("latency_ms", "loss", "duplicate", "clock_offset_s", "clock_drift_ppm")
_LATENCY_KEYS = ("median", "sigma", "min")
_GROUP_KEYS = ("name", "order", "members", "rate", "size")


@dataclass(frozen=True, slots=True)
class NetworkSpec:
    """The network model: lognormal one-way delay, loss and duplication."""

    latency_median_ms: float = 1.0
    latency_sigma: float = 0.5
    loss: float = 0.0
    """Probability that one datagram to one receiver is lost."""
    duplicate: float = 0.0
    """Probability that one receiver gets a second copy (its own delay)."""
    clock_offset_s: float = 1_000.0
    """Each node's clock reads simulated time plus an offset drawn uniformly
    from [0, this): real nodes never share a clock (trio even starts each
    process's clock at a random offset), so nothing may assume they do."""
    clock_drift_ppm: float = 100.0
    """Each node's clock runs fast or slow by up to this many parts per
    million (uniform), as quartz clocks do."""
    latency_min_ms: float = 0.0
    """No delay is shorter (a longer draw is kept, a shorter one raised to it):
    what a real network's propagation and stack cost at least. A parallel run
    (``sgcs.sim.parallel``) needs it above zero: it is how far ahead one
    worker may run without news from the others."""


@dataclass(frozen=True, slots=True)
class GroupSpec:
    """One group and its workload."""

    name: str
    order: Order
    members: tuple[int, ...]
    """Expanded, sorted member ids."""
    members_spec: Any
    """As written in the file ("all", a count or a list), for meta.json."""
    rate: float
    """Application multicasts per second, group-wide (Poisson arrivals)."""
    size: int
    """Payload bytes of each application message."""


@dataclass(frozen=True, slots=True)
class Scenario:
    """A validated scenario; ``source`` is the file it came from (for replay)."""

    seed: int
    nodes: int
    duration: float
    network: NetworkSpec
    protocol: dict[str, Any]
    config: Config
    groups: tuple[GroupSpec, ...]
    faults: tuple[Fault, ...]
    source: str
    mailboxes: MailboxSpec | None = None
    """A mailbox workload on post offices (``mailspec``); None: none."""

    def to_json(self) -> dict[str, Any]:
        """The scenario as plain JSON (the secret is left out on purpose)."""
        net = self.network
        return {
            "seed": self.seed,
            "nodes": self.nodes,
            "duration": self.duration,
            "network": {
                "latency_ms": {"median": net.latency_median_ms, "sigma": net.latency_sigma,
                               **({"min": net.latency_min_ms} if net.latency_min_ms else {})},
                "loss": net.loss,
                "duplicate": net.duplicate,
                "clock_offset_s": net.clock_offset_s,
                "clock_drift_ppm": net.clock_drift_ppm,
            },
            "protocol": {k: _jsonable(v) for k, v in self.protocol.items() if k != "secret"},
            "groups": [
                {"name": g.name, "order": g.order.value, "members": g.members_spec, "rate": g.rate, "size": g.size}
                for g in self.groups
            ],
            "faults": [f.to_json() for f in self.faults],
            **({"mailboxes": self.mailboxes.to_json()} if self.mailboxes is not None else {}),
        }

    def replay_command(self, out: str = "RUN") -> str:
        """The shell command that reruns exactly this scenario."""
        source = "" if self.source == "<default>" else f"{self.source} "
        return (
            f"sgcs simulate {source}--out {out} --seed {self.seed} "
            f"--nodes {self.nodes} --duration {self.duration!r}"
        )


def load_scenario(
    path: str | Path | None = None,
    *,
    seed: int | None = None,
    nodes: int | None = None,
    duration: float | None = None,
) -> Scenario:
    """Read and validate a scenario file; None loads the embedded default."""
    if path is None:
        text = (SCENARIOS_DIR / DEFAULT_SCENARIO).read_text()
        source = "<default>"
    else:
        source = str(path)
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise UsageError(f"cannot read scenario {path}: {exc.strerror or exc}") from None
    return parse_scenario(text, source=source, seed=seed, nodes=nodes, duration=duration)


def parse_scenario(
    text: str,
    *,
    source: str = "<string>",
    seed: int | None = None,
    nodes: int | None = None,
    duration: float | None = None,
) -> Scenario:
    """Validate scenario TOML text; overrides replace the file's values."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{source}: invalid TOML: {exc}") from None
    overrides = {"seed": seed, "nodes": nodes, "duration": duration}
    raw.update({k: v for k, v in overrides.items() if v is not None})
    return build_scenario(raw, source)


def build_scenario(raw: dict[str, Any], source: str = "<mapping>") -> Scenario:
    """Validate already-parsed tables (TOML or a test's dict)."""
    check_keys("", raw, _TOP_KEYS, required=("nodes", "duration"))
    nodes = integer("nodes", raw["nodes"], 1, MAX_NODES)
    seed = integer("seed", raw.get("seed", 0), 0, MAX_SEED)
    duration = number("duration", raw["duration"], 0.0, 1e9, low_open=True)
    network = _network(raw.get("network", {}))
    protocol, config = _protocol(raw.get("protocol", {}))
    groups = _groups(raw.get("groups", []), nodes, config)
    faults = parse_faults(raw.get("faults", []), nodes)
    check_timeline(faults, nodes)
    mailboxes = None
    if "mailboxes" in raw:
        mailboxes = parse_mailboxes(raw["mailboxes"], nodes, tuple(g.name for g in groups), faults)
    return Scenario(seed, nodes, duration, network, protocol, config, groups, faults, source, mailboxes)


def _network(table: Any) -> NetworkSpec:
    check_keys("network", table, _NETWORK_KEYS)
    default = NetworkSpec()
    median, sigma, least = default.latency_median_ms, default.latency_sigma, default.latency_min_ms
    if "latency_ms" in table:
        latency = table["latency_ms"]
        check_keys("network.latency_ms", latency, _LATENCY_KEYS, required=("median", "sigma"))
        median = number("network.latency_ms.median", latency["median"], 0.0, 60_000.0, low_open=True)
        sigma = number("network.latency_ms.sigma", latency["sigma"], 0.0, 5.0)
        least = number("network.latency_ms.min", latency.get("min", 0.0), 0.0, median)
    loss = number("network.loss", table.get("loss", 0.0), 0.0, 1.0)
    duplicate = number("network.duplicate", table.get("duplicate", 0.0), 0.0, 1.0)
    offset = number("network.clock_offset_s", table.get("clock_offset_s", default.clock_offset_s), 0.0, 1e9)
    drift = number("network.clock_drift_ppm", table.get("clock_drift_ppm", default.clock_drift_ppm), 0.0, 10_000.0)
    return NetworkSpec(median, sigma, loss, duplicate, offset, drift, least)


def _protocol(table: Any) -> tuple[dict[str, Any], Config]:
    check_keys("protocol", table, None)
    values = dict(table)
    values.setdefault("secret", DEFAULT_SECRET)
    values.setdefault("name", "sim")
    try:
        config = Config.from_mapping(values)
    except UsageError as exc:
        raise UsageError(f"protocol: {exc}") from None
    except TypeError as exc:  # a value of a type no coercion fits (e.g. a table)
        raise UsageError(f"protocol: {exc}") from None
    return dict(table), config


def _groups(entries: Any, nodes: int, config: Config) -> tuple[GroupSpec, ...]:
    if not isinstance(entries, list):
        fail("groups", f"must be an array of tables ([[groups]]), got {show(entries)}")
    groups = tuple(_group(f"groups[{i}]", entry, nodes, config) for i, entry in enumerate(entries))
    seen: set[str] = set()
    for i, group in enumerate(groups):
        if group.name in seen:
            fail(f"groups[{i}].name", f"{group.name!r} is used by an earlier group; names must be unique")
        seen.add(group.name)
    return groups


def _group(path: str, table: Any, nodes: int, config: Config) -> GroupSpec:
    check_keys(path, table, _GROUP_KEYS, required=("name",))
    name = table["name"]
    if not isinstance(name, str) or not name or len(name.encode()) > MAX_GROUP_NAME:
        fail(f"{path}.name", f"must be a non-empty string of at most {MAX_GROUP_NAME} UTF-8 bytes, got {show(name)}")
    order_value = table.get("order", "fifo")
    try:
        order = Order(order_value)
    except ValueError:
        allowed = ", ".join(o.value for o in Order)
        fail(f"{path}.order", f"{show(order_value)} is not one of {allowed}")
    spec = table.get("members", "all")
    members = _members(f"{path}.members", spec, nodes)
    rate = number(f"{path}.rate", table.get("rate", 0.0), 0.0, MAX_RATE)
    size = integer(f"{path}.size", table.get("size", 64), 0, config.max_message,
                   hint=f" (protocol.max_message={config.max_message}; larger messages are fragmented)")
    return GroupSpec(name, order, members, spec, rate, size)


def _members(path: str, spec: Any, nodes: int) -> tuple[int, ...]:
    if spec == "all":
        return tuple(range(nodes))
    if isinstance(spec, int) and not isinstance(spec, bool):
        count = integer(path, spec, 1, nodes)
        return tuple(range(count))
    if isinstance(spec, list):
        if not spec:
            fail(path, "an empty list; give at least one node id, a count, or \"all\"")
        ids = [integer(path, v, 0, nodes - 1, what="node") for v in spec]
        if len(set(ids)) != len(ids):
            fail(path, "lists a node id twice")
        return tuple(sorted(ids))
    fail(path, f"must be \"all\", a count, or a list of node ids, got {show(spec)}")


def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value
