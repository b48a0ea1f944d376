"""Node lifecycles and faults: start, crash, recover, pause, join, leave, partition.

Theory of operation
-------------------
``start_run`` puts the run's fixed events on the heap before anything else
(``net`` bucket boundaries first, then the faults in time and file order), so
that at equal times a boundary comes before a fault and a fault before any
traffic it causes. It then starts every node not named in a join fault, and
has each join its groups at t=0 with the full t=0 membership, so that no
discovery traffic is needed; a node that starts or rejoins later starts as a
singleton view and merges with the group through beacons (join = merge).

The fault handlers, one per action (``FAULT_HANDLERS``):

* crash: the Node object is dropped; its timers and in-flight datagrams die
  with it (the heap entries carry its incarnation); a ``crash`` row is written;
* recover: a new Node with the next incarnation (fresh state, fresh
  ``random.Random``) writes a ``recover`` row and rejoins its groups;
* pause: the node's datagrams queue up until ``at + for``; the simulator's
  ``_resume`` then hands them over in arrival order, and overdue timers fire;
* join: starts a pending node, or rejoins a running node that had left;
* leave: ``Node.leave`` on every group; the node keeps running;
* partition/heal: the network's components.

``faultspec.check_timeline`` has already rejected faults that cannot apply, so
a failed precondition here is a bug and raises.

A simulator may own only some nodes (a worker of a parallel run): every
handler updates the replicated state (``up``, incarnations, ``joined``,
pauses, partitions) for every node, and calls into a ``Node`` and writes its
trace rows only where ``sim.nodes`` holds it.

The seam: these functions act on a ``Host`` (and its groups, ``HostGroup``),
the protocols below, which name exactly the parts of the simulator a
lifecycle change may read or write. ``simulator.Simulator`` satisfies them
and calls ``start_run`` and ``FAULT_HANDLERS``; this module never imports the
simulator, so the two are not an import cycle, and a new lifecycle step that
needs more of the simulator has to say so here.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any, Callable, Protocol

from sgcs.actions import TraceEvent
from sgcs.node import Node
from sgcs.trace import EventsWriter

from .engine import APP, BUCKET, FAULT, RESUME, Engine
from .faultspec import Fault, pending_nodes
from .network import Network
from .scenario import GroupSpec, Scenario


class HostGroup(Protocol):
    """One group as the simulator's network sees it (``simulator.GroupState``)."""

    @property
    def spec(self) -> GroupSpec: ...
    @property
    def rng(self) -> random.Random: ...
    @property
    def joined(self) -> set[int]:
        """Nodes that are up and have joined: the group's listeners."""
    def changed(self) -> None:
        """``joined`` changed: drop what was derived from it."""


class Host(Protocol):
    """What a lifecycle change may touch in the simulator (``simulator.Simulator``).
    Per-node lists are indexed by node id."""

    @property
    def scenario(self) -> Scenario: ...
    @property
    def engine(self) -> Engine: ...
    @property
    def network(self) -> Network: ...
    @property
    def events(self) -> EventsWriter: ...
    @property
    def net_bucket(self) -> float: ...
    @property
    def groups(self) -> Mapping[str, HostGroup]: ...
    @property
    def groups_of(self) -> Sequence[Sequence[HostGroup]]: ...
    @property
    def nodes(self) -> list[Node | None]:
        """The Node of each node this simulator owns and that is up; None otherwise."""
    @property
    def up(self) -> list[bool]:
        """Which nodes are up, owned or not."""
    @property
    def incarnation(self) -> list[int]: ...
    @property
    def in_groups(self) -> list[bool]: ...
    @property
    def timer_at(self) -> list[float | None]: ...
    @property
    def paused_until(self) -> list[float]: ...
    @property
    def backlog(self) -> dict[int, list[tuple[int, bytes, str, int]]]: ...

    def new_node(self, node_id: int) -> Node | None:
        """Start the next incarnation of ``node_id`` (its Node if owned here)."""
    def apply(self, node_id: int, actions: list[Any], now: float) -> None:
        """Carry out a node's actions, then re-arm its timer."""
    def local(self, node_id: int, t: float) -> float:
        """Simulated time ``t`` on the node's own clock."""
    def rearm(self, node_id: int, now: float) -> None: ...
    def membership_changed(self) -> None:
        """Some node went up, down, paused, joined or left."""


def start_run(sim: Host) -> None:
    scenario, engine = sim.scenario, sim.engine
    k = 1
    while k * sim.net_bucket <= scenario.duration:
        engine.schedule(k * sim.net_bucket, BUCKET, -1, (k - 1) * sim.net_bucket)
        k += 1
    for fault in sorted(scenario.faults, key=lambda f: (f.at, f.index)):
        if fault.at <= scenario.duration:
            engine.schedule(fault.at, FAULT, -1, fault)
    pending = pending_nodes(scenario.faults)
    initial = [n for n in range(scenario.nodes) if n not in pending]
    at_start = {
        name: tuple(m for m in group.spec.members if m not in pending) for name, group in sim.groups.items()
    }
    for node_id in initial:
        sim.new_node(node_id)
        sim.in_groups[node_id] = True
    for node_id in initial:
        join_groups(sim, node_id, 0.0, lambda group: at_start[group.spec.name])
    for group in sim.groups.values():
        if group.spec.rate > 0:
            engine.schedule(group.rng.expovariate(group.spec.rate), APP, -1, group)


def join_groups(sim: Host, node_id: int, now: float,
                members_of: Callable[[HostGroup], tuple[int, ...] | None]) -> None:
    if not sim.up[node_id]:
        raise RuntimeError(f"node {node_id} must be up to join its groups")
    node = sim.nodes[node_id]
    for group in sim.groups_of[node_id]:
        members = members_of(group)
        group.joined.add(node_id)
        group.changed()
        spec = group.spec
        if node is not None:
            sim.apply(node_id, node.join(spec.name, sim.local(node_id, now), order=spec.order, members=members), now)
    if node is not None:
        sim.rearm(node_id, now)


def _discover(group: HostGroup) -> None:
    """A node that starts or rejoins later is a singleton view that finds the
    group by beacons and merges with it (join = merge)."""
    return None


def _crash(sim: Host, fault: Fault, now: float) -> None:
    for node_id in fault.nodes:
        if not sim.up[node_id]:
            raise RuntimeError(f"crash of node {node_id}, which is not up")
        owned = sim.nodes[node_id] is not None
        sim.nodes[node_id] = None
        sim.up[node_id] = False
        for group in sim.groups_of[node_id]:
            group.joined.discard(node_id)
        sim.timer_at[node_id] = None
        sim.paused_until[node_id] = 0.0
        sim.backlog.pop(node_id, None)
        sim.membership_changed()
        if owned:
            sim.events.add(now, node_id, TraceEvent("crash"))


def _recover(sim: Host, fault: Fault, now: float) -> None:
    for node_id in fault.nodes:
        if sim.up[node_id] or sim.incarnation[node_id] < 0:
            raise RuntimeError(f"recover of node {node_id}, which is not crashed")
        if sim.new_node(node_id) is not None:
            sim.events.add(now, node_id, TraceEvent("recover"))
        if sim.in_groups[node_id]:
            join_groups(sim, node_id, now, _discover)
        sim.membership_changed()


def _join(sim: Host, fault: Fault, now: float) -> None:
    for node_id in fault.nodes:
        if not sim.up[node_id]:
            if sim.incarnation[node_id] >= 0:
                raise RuntimeError(f"join of node {node_id}, which is crashed")
            sim.new_node(node_id)
        elif sim.in_groups[node_id]:
            raise RuntimeError(f"join of node {node_id}, which is already in its groups")
        sim.in_groups[node_id] = True
        join_groups(sim, node_id, now, _discover)
        sim.membership_changed()


def _leave(sim: Host, fault: Fault, now: float) -> None:
    for node_id in fault.nodes:
        node = sim.nodes[node_id]
        if not sim.up[node_id] or not sim.in_groups[node_id]:
            raise RuntimeError(f"leave of node {node_id}, which is not in its groups")
        sim.in_groups[node_id] = False
        for group in sim.groups_of[node_id]:
            if node_id in group.joined:
                if node is not None:
                    sim.apply(node_id, node.leave(group.spec.name, sim.local(node_id, now)), now)
                group.joined.discard(node_id)  # after the fan-out: the leave reaches the others
        sim.membership_changed()


def _pause(sim: Host, fault: Fault, now: float) -> None:
    for node_id in fault.nodes:
        if not sim.up[node_id]:
            raise RuntimeError(f"pause of node {node_id}, which is not up")
        until = now + fault.pause_for
        sim.paused_until[node_id] = until
        sim.engine.schedule(until, RESUME, node_id, sim.incarnation[node_id])
    sim.membership_changed()  # paused nodes cannot send


def _partition(sim: Host, fault: Fault, now: float) -> None:
    sim.network.partition(fault.components)


def _heal(sim: Host, fault: Fault, now: float) -> None:
    sim.network.heal()


FAULT_HANDLERS: dict[str, Callable[[Host, Fault, float], None]] = {
    "crash": _crash,
    "recover": _recover,
    "join": _join,
    "leave": _leave,
    "pause": _pause,
    "partition": _partition,
    "heal": _heal,
}
