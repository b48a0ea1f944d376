"""The [[faults]] of a scenario: parsing and a static timeline check.

Theory of operation
-------------------
Each fault has a time ``at`` and exactly one action:

=============  ===============================================================
crash = [n]    stop without notice; in-flight datagrams to it are lost
recover = [n]  restart a crashed node with fresh state; it rejoins its groups
partition      ``[[a...], [b...]]``: disjoint components; unlisted nodes form
               one more; replaces any partition in effect
heal = true    remove the partition
pause = [n]    with ``for = seconds``: the node handles nothing for that long
join = [n]     start a node (nodes in any join fault are not started at t=0),
               or rejoin the groups of a running node that left them
leave = [n]    leave every group gracefully; the node keeps running
=============  ===============================================================

Faults at the same time apply in file order. ``check_timeline`` replays the
faults over each node's life (pending, up, crashed; paused; left) so that a
fault that cannot apply (recovering a node that is up, crashing one that has
not joined yet, leaving while paused) is rejected before the run starts,
naming the fault. Faults later than the run's duration never fire.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from .validate import check_keys, fail, integer, number, show

ACTIONS = ("crash", "recover", "partition", "heal", "pause", "join", "leave")
_FAULT_KEYS = ("at", *ACTIONS, "for")
MAX_TIME = 1e9


@dataclass(frozen=True, slots=True)
class Fault:
    """One validated fault; fields that do not apply to ``action`` stay empty."""

    index: int
    at: float
    action: str
    nodes: tuple[int, ...] = ()
    components: tuple[tuple[int, ...], ...] = ()
    pause_for: float = 0.0

    def to_json(self) -> dict[str, Any]:
        value: Any
        if self.action == "partition":
            value = [list(c) for c in self.components]
        elif self.action == "heal":
            value = True
        else:
            value = list(self.nodes)
        entry: dict[str, Any] = {"at": self.at, self.action: value}
        if self.action == "pause":
            entry["for"] = self.pause_for
        return entry


def parse_faults(entries: Any, nodes: int) -> tuple[Fault, ...]:
    if not isinstance(entries, list):
        fail("faults", f"must be an array of tables ([[faults]]), got {show(entries)}")
    return tuple(_fault(i, entry, nodes) for i, entry in enumerate(entries))


def _fault(index: int, table: Any, nodes: int) -> Fault:
    path = f"faults[{index}]"
    check_keys(path, table, _FAULT_KEYS, required=("at",))
    at = number(f"{path}.at", table["at"], 0.0, MAX_TIME)
    actions = [key for key in ACTIONS if key in table]
    if len(actions) != 1:
        found = ", ".join(actions) or "none"
        fail(path, f"needs exactly one action of {', '.join(ACTIONS)}; found {found}")
    action = actions[0]
    if "for" in table and action != "pause":
        fail(f"{path}.for", "only applies to pause")
    return _PARSERS[action](f"{path}.{action}", index, at, table, nodes)


def _node_list(path: str, value: Any, nodes: int) -> tuple[int, ...]:
    if not isinstance(value, list) or not value:
        fail(path, f"must be a non-empty list of node ids in 0..{nodes - 1}, got {show(value)}")
    ids = tuple(integer(path, v, 0, nodes - 1, what="node") for v in value)
    if len(set(ids)) != len(ids):
        fail(path, "lists a node twice")
    return ids


def _parse_nodes(path: str, index: int, at: float, table: dict[str, Any], nodes: int) -> Fault:
    action = path.rsplit(".", 1)[1]
    return Fault(index, at, action, nodes=_node_list(path, table[action], nodes))


def _parse_pause(path: str, index: int, at: float, table: dict[str, Any], nodes: int) -> Fault:
    ids = _node_list(path, table["pause"], nodes)
    if "for" not in table:
        fail(path.rsplit(".", 1)[0] + ".for", "is required with pause (seconds the nodes stay paused)")
    pause_for = number(path.rsplit(".", 1)[0] + ".for", table["for"], 0.0, MAX_TIME, low_open=True)
    return Fault(index, at, "pause", nodes=ids, pause_for=pause_for)


def _parse_partition(path: str, index: int, at: float, table: dict[str, Any], nodes: int) -> Fault:
    value = table["partition"]
    if not isinstance(value, list) or not value or not all(isinstance(c, list) for c in value):
        fail(path, f"must be a list of node-id lists, e.g. [[0, 1], [2, 3]], got {show(value)}")
    components = tuple(_node_list(path, c, nodes) for c in value)
    flat = [n for c in components for n in c]
    if len(set(flat)) != len(flat):
        fail(path, "components must be disjoint; a node appears twice")
    return Fault(index, at, "partition", components=tuple(tuple(sorted(c)) for c in components))


def _parse_heal(path: str, index: int, at: float, table: dict[str, Any], nodes: int) -> Fault:
    if table["heal"] is not True:
        fail(path, f"must be true, got {show(table['heal'])}")
    return Fault(index, at, "heal")


_Parser = Callable[[str, int, float, dict[str, Any], int], Fault]
_PARSERS: dict[str, _Parser] = {
    "crash": _parse_nodes,
    "recover": _parse_nodes,
    "join": _parse_nodes,
    "leave": _parse_nodes,
    "pause": _parse_pause,
    "partition": _parse_partition,
    "heal": _parse_heal,
}


# ---------------------------------------------------------------- timeline check


class _Life:
    """A node's state as the timeline check replays the faults."""

    __slots__ = ("status", "paused_until", "left")

    def __init__(self, status: str) -> None:
        self.status = status  # "pending" | "up" | "crashed"
        self.paused_until = 0.0
        self.left = False


def pending_nodes(faults: tuple[Fault, ...]) -> set[int]:
    """Nodes that start only when a join fault names them."""
    return {n for f in faults if f.action == "join" for n in f.nodes}


def check_timeline(faults: tuple[Fault, ...], nodes: int) -> None:
    """Reject any fault that cannot apply given the faults before it."""
    pending = pending_nodes(faults)
    lives: dict[int, _Life] = {}
    for fault in sorted(faults, key=lambda f: (f.at, f.index)):
        for node in fault.nodes:
            life = lives.setdefault(node, _Life("pending" if node in pending else "up"))
            problem = _TRANSITIONS[fault.action](life, fault)
            if problem:
                fail(f"faults[{fault.index}].{fault.action}", f"node {node} {problem} at t={fault.at:g}")


def _crash(life: _Life, fault: Fault) -> str:
    if life.status != "up":
        return "is not running" if life.status == "pending" else "is already crashed"
    life.status, life.paused_until = "crashed", 0.0
    return ""


def _recover(life: _Life, fault: Fault) -> str:
    if life.status != "crashed":
        return "is not crashed"
    life.status = "up"
    return ""


def _join(life: _Life, fault: Fault) -> str:
    if life.status == "crashed":
        return "is crashed (use recover)"
    if life.status == "up" and not life.left:
        return "is already running and in its groups"
    if life.paused_until > fault.at:
        return f"is paused until t={life.paused_until:g}"
    life.status, life.left = "up", False
    return ""


def _leave(life: _Life, fault: Fault) -> str:
    if life.status != "up" or life.left:
        return "is not in its groups"
    if life.paused_until > fault.at:
        return f"is paused until t={life.paused_until:g}"
    life.left = True
    return ""


def _pause(life: _Life, fault: Fault) -> str:
    if life.status != "up":
        return "is not running"
    if life.paused_until > fault.at:
        return f"is already paused until t={life.paused_until:g}"
    life.paused_until = fault.at + fault.pause_for
    return ""


_TRANSITIONS: dict[str, Callable[[_Life, Fault], str]] = {
    "crash": _crash,
    "recover": _recover,
    "join": _join,
    "leave": _leave,
    "pause": _pause,
}
