"""Exhaustive exploration of the real sans-I/O nodes: a small model checker.

Theory of operation
-------------------
The explorer drives real ``sgcs.node.Node`` objects (the very code the
simulator and the trio driver run) through every interleaving of a small
configuration, breadth first (or depth first) to a depth bound, in the style
of TLC or stateright: a state is expanded once however many paths reach it.

**The configuration.** ``members`` nodes (ids 1..members) join one group
together (``join(members=...)``, every stream from its first message), in the
order under test (total by default; fifo, causal or safe by parameter), and
``joiners`` more nodes may start later and find the group by discovery. Time
is an explicit ``now`` in the node: every node has its own clock in the
explored state, which moves only when that node's timer fires. Nodes are
seeded deterministically (``random.Random(f"{id}:{incarnation}")``, as in
``tests/test_membership_properties.py``), so a path of steps replays exactly.

**The steps.** In every state each of these that is enabled is one
successor (the nondeterminism of the network and of the application):

* ``deliver``: any datagram in flight reaches its destination (choosing any
  one is reordering);
* ``drop`` (loss) and ``dup`` (a second copy stays in flight) of any datagram;
* ``timer``: one node's clock moves to its ``next_deadline()`` and its
  ``handle_timeout`` runs;
* ``send``: a member multicasts (at most ``sends`` messages per member);
* ``join``: a joiner starts and joins by discovery;
* ``crash``: a node stops with its state (datagrams in flight to it are lost);
* ``restart``: a crashed node comes back as a fresh ``Node`` with the same id
  and the next incarnation, and joins by discovery;
* ``leave``: a member leaves gracefully and its process exits;
* ``partition``: the nodes split in two sides (datagrams in flight across
  are lost, and so is every later one across) until ``heal``;
* ``calm`` (only if ``calm`` durations are configured): a macro step, the
  network lossless and in order and every timer on time for that long on
  every clock, to reach later phases of the protocol (a view change under
  way, installed) in few steps. ``single_steps=False`` leaves out the single
  deliveries and timers, so that only calm steps move the network: fewer
  interleavings, deeper paths.

After any input a node runs its timers that are already due at its clock
(a real driver does not wait to run an overdue timer: a multicast's
``flush_delay`` of 0 sends it at once), so a ``timer`` step always moves a
clock forward. The network is the one of ``tests/_memnet.py`` (node ids are
addresses, a group multicast reaches every other live node in the group)
with the faults above. Each fault kind has a budget per path (``Budget``:
one loss, one duplicate, one crash, one restart, one leave, one partition by
default) and the depth bound limits the number of steps: the state space is
finite.

**Hashing.** A node is deterministic: its state is a function of the
sequence of its inputs. Each node carries a *history hash*, chained over its
inputs (which datagram, a timer, a send, its start), each record also naming
the network around it (which nodes were up and in the group, the partition)
since that decides where its outputs go. A datagram's id is the hash of the
history that emitted it, its index among the outputs and its destination.
The datagrams in flight are then a function of the histories and of the
datagrams dropped, duplicated and lost to a partition, so the fingerprint of
a state is the hash of: the live nodes' histories, the finished ones (crashed
or left), the ids dropped, duplicated and purged, the partition, the budgets
used. Two paths that commute independent steps (a delivery to 1 and a timer
of 2, in either order) reach the same fingerprint: a partial-order reduction
for free. The fingerprint of a successor is computed *before* it is executed,
so a state already seen costs a hash, not a node call; every executed state
checks that its fingerprint is the one predicted. The scheme never merges two
different states (it may keep apart two equal ones: a replayed datagram
changes a history but not the node; inputs during a ``calm`` step record
their time). The order of the datagrams in flight is not part of a state:
``calm`` and ``settle`` deliver them in the order sent along the path that
reached the state first, any other order is the single steps' to explore.
``verify_merges`` executes the merged
successors too and compares what they show (views, deliveries, statistics,
timers, datagrams in flight). No symmetry reduction: the lowest id
coordinates, so the members are not interchangeable.

**Branching.** A state stores each node as its pickle (about 9 KB, shared by
all the states where that node did not move); a step unpickles the one node
it drives and pickles it again. ``branching="deepcopy"`` keeps node objects
and deep-copies the one a step drives; ``"replay"`` keeps only the path and
replays it from the initial state. Either copy must keep the module-level
objects of sgcs (``_SHARED``): the protocol tells some apart by identity.
Measured on this 2-core machine, depth 3 (6,284 states, most 3 steps deep),
per state: pure Python, pickle 0.14 ms, deepcopy 0.25 ms, replay 0.44 ms;
compiled (mypyc) nodes neither pickle nor deep-copy, and replay costs 0.25
ms. Pickle is the default (``branching="auto"``); ``explore`` falls back to
deepcopy, then to replay (the compiled build). Settling a state costs more
than reaching it: 3.6 ms pure, 1.6 ms compiled, so the bound is set by the
number of states at the depth bound.

**What is checked, and when.** Every action of every node is observed (the
nodes trace, ``trace=True``). In every reached state, incrementally:

1. no node delivers a message twice;
2. FIFO: per node, per sender, sequence numbers increase;
3. total order (total and safe groups): two node incarnations deliver their
   common messages in the same relative order;
4. causal order (causal, total, safe): no message is delivered before one
   its sender had delivered when it sent it;
5. virtual synchrony: two nodes that install the same two consecutive views
   delivered the same set of messages between them;
7. a rolled-back message is delivered nowhere, and an optimistic one only in
   a view that holds every member of its optimistic view;
8. (the safety half) no own multicast gets more than one outcome;
E. no ``GroupError``; X. no exception escapes a node, and timers due at a
   node's clock stop being due once run.

At quiescent states (``settle="leaves"``: every state at the depth bound;
``"all"``: every state; ``"none"``), the path is extended by ``settle``: the
faults stop, the partition heals, every datagram arrives ``latency`` after it
was sent in the order sent, timers fire on time on every clock, until the
live members agree twice in a row on one view of exactly themselves with no
change under way, no suspicion and nothing held back, and ``grace`` seconds
more; then:

L. the live members did settle within ``settle_limit`` seconds (liveness);
6. every message sent in view V (not rolled back) is delivered by every node
   that installed V and whose next view holds the sender, or that stayed up
   with the sender in V as its last view;
8. one outcome: every multicast sent by a node incarnation that is still up
   and in the group has, at that node, exactly one outcome: its own delivery,
   a ``Rollback`` naming it, or a "not delivered" report (an action whose
   class is named ``NotDelivered``, with ``message``, ``messages`` or
   ``sender``/``seq``, or a trace row of kind ``not_delivered``); and its
   ``statistics().fate_unknown`` is 0. Members that left are not held to it
   (as ``sgcs.sim.checks.without_outcome``), unless
   ``outcome_after_leave``.

The checks copy those of ``tests/test_membership_properties.py`` (``Cluster``)
and of ``tests/test_node.py`` (``AdversarialNetwork``), kept per node
incarnation as in ``simulations/checks.py``.

**The report.** ``explore(config) -> Report``: states executed, distinct
states, transitions, the depth reached and states per depth, wall time, and
the violations: a count per invariant and the first examples of each (the
shortest, breadth first) with the path of steps that reproduces it
(``replay(config, path)`` re-runs it; ``parse_path`` reads the printed form).
"""

from __future__ import annotations

import copy
import hashlib
import io
import math
import pickle
import random
import sys
import time
import types
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from sgcs.actions import Deliver, GroupError, Multicast, OptimisticView, Rollback, Send, TraceEvent, ViewInstalled
from sgcs.config import Config, Order
from sgcs.membership.synchrony import PHASES
from sgcs.node import Node
from sgcs.wire import MsgType

from test_membership_properties import CONFIG, GROUP

__all__ = [
    "Budget", "ExploreConfig", "INVARIANTS", "Report", "Step", "Violation", "World", "explore", "parse_path",
    "replay",
]

Message = tuple[int, int]
"""(sender, seq): a multicast's name, unique across the sender's incarnations."""
LogKey = tuple[int, int]
"""(node, incarnation): one process's history."""
NodeFactory = Callable[..., Any]
"""Builds a node from ``Node``'s arguments: ``Node`` itself, or (to test the
checker) an object with its interface that breaks it on purpose."""

INVARIANTS: dict[str, str] = {
    "1": "no duplicate delivery",
    "2": "FIFO per sender",
    "3": "total order",
    "4": "causal order",
    "5": "virtual synchrony",
    "6": "no loss among survivors",
    "7": "rolled back or optimistic message delivered where it must not be",
    "8": "exactly one outcome per multicast at its sender",
    "E": "GroupError",
    "X": "a node raised, or its timers stay due",
    "L": "the live members settle (liveness)",
    "P": "a view is installed by every member it lists that neither crashed nor left",
    "S": "the agreement's stage and the data plane's phase agree (synchrony.PHASES)",
}

URGENT_LIMIT = 100
"""Rounds of timers already due that a node may run after one input."""
SETTLE_CHECK = 0.25
"""Seconds between two looks at convergence while settling."""
SETTLE_EVENTS = 1_000_000
"""Events (arrivals, timer rounds) a settle may take: more means a timer or datagram loop."""
ORDERED = (Order.TOTAL, Order.SAFE)


def identity(address: int) -> int:
    """The nodes' ``resolve``: addresses are node ids (module level, so a node pickles)."""
    return address


def _chain(previous: bytes, record: bytes) -> bytes:
    return hashlib.blake2b(previous + record, digest_size=16).digest()


# ---------------------------------------------------------------------- copying nodes

_SHARED: dict[int, tuple[object, str, str]] = {}
"""id -> (object, module, name) of every module-level object (and class
attribute) of the sgcs modules loaded. A copy of a node must keep referring
to these very objects: the protocol compares some by identity (the shared
empty deque ``_EMPTY`` of ``ordering.total``, ``IN_ORDER`` and ``_NO_ACKS``
of ``transport.state`` and ``transport.stability``); a plain pickle or deepcopy gives each copy its
own, and a copy then appends to a "shared empty" deque and mixes two streams
(found by this explorer: ``TypeError`` in ``_use_promises`` one step after a
copy)."""
_ATOMS = (types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType, int, float, str, bytes,
          bool, type(None), property, staticmethod, classmethod)


def refresh_shared() -> None:
    """Register the module-level objects of every sgcs module loaded so far."""
    for name, module in list(sys.modules.items()):
        if module is None or not (name == "sgcs" or name.startswith("sgcs.")):
            continue
        for attr, value in list(vars(module).items()):
            if isinstance(value, type):
                if value.__module__ == name:
                    for cattr, cvalue in list(vars(value).items()):
                        if not isinstance(cvalue, _ATOMS + (type,)) and not hasattr(cvalue, "__get__") \
                                and not cattr.startswith("__"):
                            _SHARED.setdefault(id(cvalue), (cvalue, name, f"{attr}.{cattr}"))
            elif not isinstance(value, _ATOMS):
                _SHARED.setdefault(id(value), (value, name, attr))


def _shared_object(module: str, name: str) -> object:
    value: Any = sys.modules[module]
    for part in name.split("."):
        value = vars(value)[part]
    return value


class _NodePickler(pickle.Pickler):
    def persistent_id(self, obj: Any) -> tuple[str, str] | None:
        entry = _SHARED.get(id(obj))
        return None if entry is None or entry[0] is not obj else (entry[1], entry[2])


class _NodeUnpickler(pickle.Unpickler):
    def persistent_load(self, pid: Any) -> object:
        return _shared_object(*pid)


def dump_node(node: Node) -> bytes:
    buffer = io.BytesIO()
    _NodePickler(buffer, pickle.HIGHEST_PROTOCOL).dump(node)
    return buffer.getvalue()


def load_node(blob: bytes) -> Node:
    node: Node = _NodeUnpickler(io.BytesIO(blob)).load()
    return node


def copy_node(node: Node) -> Node:
    return copy.deepcopy(node, {key: entry[0] for key, entry in _SHARED.items()})


# ---------------------------------------------------------------------- configuration and report


@dataclass(frozen=True)
class Budget:
    """How many faults of each kind one path may hold."""

    losses: int = 1
    duplicates: int = 1
    crashes: int = 1
    restarts: int = 1
    leaves: int = 1
    partitions: int = 1

    def allows(self, used: dict[str, int], kind: str) -> bool:
        return used.get(kind, 0) < getattr(self, kind)


@dataclass(frozen=True)
class ExploreConfig:
    """What to explore (the configuration, the steps, the bounds) and how."""

    members: int = 3
    """Nodes 1..members start together in the group."""
    joiners: int = 1
    """Nodes members+1.. that may start later and join by discovery."""
    sends: int = 1
    """Multicasts each sender may send per path."""
    joiner_sends: bool = False
    """Whether joiners send too (members always do)."""
    order: Order = Order.TOTAL
    depth: int = 6
    """Steps per path (``settle`` not counted)."""
    budget: Budget = Budget()
    calm: tuple[float, ...] = ()
    """Durations of the ``calm`` macro step (lossless network, timers on time,
    for that long on every clock): reaches later phases of the protocol in few
    steps. None by default: every step is then one event."""
    single_steps: bool = True
    """Delivering one datagram and firing one node's timer are steps. False:
    only ``calm`` steps move the network and the clocks (drops, duplicates and
    the other faults stay): far fewer successors, so deeper runs, in fewer
    interleavings."""
    search: str = "bfs"
    """``bfs`` (shortest violations first) or ``dfs`` (memory grows with the depth only)."""
    settle: str = "leaves"
    """Where the quiescent checks run: ``leaves`` (states at the depth bound), ``all``, ``none``."""
    settle_limit: float = 30.0
    """Simulated seconds within which the live members must settle (as ``Cluster.converge``)."""
    latency: float = 0.001
    grace: float = 0.5
    """Simulated seconds run on after the members agreed twice, before the quiescent checks."""
    outcome_after_leave: bool = False
    """Hold members that left to invariant 8 too."""
    partial_views: bool = False
    """Check P: every member a view lists that was up when the view was first
    installed, and neither crashed nor left, installs it."""
    max_states: int | None = None
    """Stop after executing this many states (the report says it is incomplete)."""
    max_seconds: float | None = None
    branching: str = "auto"
    """``pickle``, ``deepcopy``, ``replay``, or ``auto`` (the first that works)."""
    protocol: Config = CONFIG
    group: str = GROUP
    node_factory: NodeFactory = Node
    max_examples: int = 3
    """Violations kept per invariant (the first found, so the shortest breadth first)."""
    verify_merges: bool = False
    """Execute merged successors too and check they look the same (slow: for tests)."""

    @property
    def member_ids(self) -> tuple[int, ...]:
        return tuple(range(1, self.members + 1))

    @property
    def joiner_ids(self) -> tuple[int, ...]:
        return tuple(range(self.members + 1, self.members + self.joiners + 1))

    @property
    def senders(self) -> frozenset[int]:
        return frozenset(self.member_ids + (self.joiner_ids if self.joiner_sends else ()))

    def describe(self) -> str:
        b = self.budget
        calm = f", calm steps {'/'.join(f'{c:g}' for c in self.calm)} s" if self.calm else ""
        calm += "" if self.single_steps else " (no single deliveries or timers)"
        return (f"{self.members} members + {self.joiners} joiner(s), {self.sends} send(s) each, order "
                f"{self.order.value}, depth {self.depth}{calm}, {self.search}, settle at {self.settle}; budget: "
                f"{b.losses} loss, {b.duplicates} dup, {b.crashes} crash, {b.restarts} restart, {b.leaves} leave, "
                f"{b.partitions} partition")


class Step(NamedTuple):
    """One nondeterministic step. ``datagram`` is the datagram's id (hex);
    ``label`` (src->dst and type) is for reading only."""

    kind: str
    node: int | None = None
    datagram: str | None = None
    side: tuple[int, ...] | None = None
    label: str = ""
    amount: float | None = None
    """A ``calm`` step's duration in seconds."""

    def __str__(self) -> str:
        if self.amount is not None:
            return f"{self.kind} {self.amount:g}"
        if self.datagram is not None:
            return f"{self.kind} {self.label} #{self.datagram[:10]}"
        if self.side is not None:
            return f"partition {'+'.join(map(str, self.side))}"
        return self.kind if self.node is None else f"{self.kind} {self.node}"


def _node_of(step: Step) -> int:
    if step.node is None:
        raise ValueError(f"step {step} names no node")
    return step.node


def format_path(path: Sequence[Step]) -> str:
    return "; ".join(map(str, path))


def parse_path(text: str) -> list[Step]:
    """The steps of ``format_path``'s text (datagrams by id prefix)."""
    steps: list[Step] = []
    for part in (p.strip() for p in text.split(";")):
        if not part:
            continue
        words = part.split()
        kind = words[0]
        if kind in ("deliver", "drop", "dup"):
            steps.append(Step(kind, datagram=words[-1].lstrip("#"), label=" ".join(words[1:-1])))
        elif kind == "partition":
            steps.append(Step(kind, side=tuple(int(n) for n in words[1].split("+"))))
        elif kind == "calm":
            steps.append(Step(kind, amount=float(words[1])))
        elif len(words) > 1:
            steps.append(Step(kind, int(words[1])))
        else:
            steps.append(Step(kind))
    return steps


@dataclass(frozen=True)
class Violation:
    invariant: str
    message: str
    path: tuple[Step, ...]

    @property
    def depth(self) -> int:
        return len([s for s in self.path if s.kind != "settle"])

    def __str__(self) -> str:
        return (f"[{self.invariant}: {INVARIANTS.get(self.invariant, '?')}] {self.message}\n"
                f"    depth {self.depth}, replay: {format_path(self.path)}")


@dataclass
class Report:
    config: ExploreConfig
    branching: str = ""
    states: int = 0
    """States executed (each distinct state once; depth first may execute one again at a lower depth)."""
    distinct: int = 0
    """Distinct fingerprints seen (executed or merged)."""
    transitions: int = 0
    max_depth: int = 0
    per_depth: list[int] = field(default_factory=list)
    settled: int = 0
    settle_seconds: float = 0.0
    wall_seconds: float = 0.0
    complete: bool = True
    """False when ``max_states`` or ``max_seconds`` cut the exploration short."""
    counts: dict[str, int] = field(default_factory=dict)
    """Violations found per invariant (one per state and message)."""
    violations: list[Violation] = field(default_factory=list)
    """The first ``max_examples`` of each invariant."""

    def add(self, found: Iterable[tuple[str, str]], path: tuple[Step, ...]) -> None:
        for invariant, message in found:
            self.counts[invariant] = self.counts.get(invariant, 0) + 1
            if self.counts[invariant] <= self.config.max_examples:
                self.violations.append(Violation(invariant, message, path))

    def shortest(self) -> dict[str, Violation]:
        """Per invariant, the violation with the shortest path."""
        best: dict[str, Violation] = {}
        for v in self.violations:
            if v.invariant not in best or len(v.path) < len(best[v.invariant].path):
                best[v.invariant] = v
        return best

    def summary(self) -> str:
        lines = [
            f"exhaustive: {self.config.describe()}",
            f"  branching {self.branching}; {'complete' if self.complete else 'INCOMPLETE (limit reached)'}",
            f"  states executed {self.states:,}, distinct {self.distinct:,}, transitions {self.transitions:,}, "
            f"max depth {self.max_depth}, per depth {self.per_depth}",
            f"  settled {self.settled:,} leaves in {self.settle_seconds:.1f} s; wall time {self.wall_seconds:.1f} s",
            f"  violations: {sum(self.counts.values())} "
            + (f"({', '.join(f'{k}: {n}' for k, n in sorted(self.counts.items()))})" if self.counts else ""),
        ]
        lines += [f"  {v}" for v in self.violations]
        return "\n".join(lines)


# ---------------------------------------------------------------------- what is observed


class Datagram(NamedTuple):
    id: bytes
    src: int
    dst: int
    dst_incarnation: int
    data: bytes
    msg_type: MsgType

    @property
    def label(self) -> str:
        return f"{self.src}->{self.dst} {self.msg_type.name}"


class Sent(NamedTuple):
    view_id: str
    optimistic: bool
    causes: frozenset[Message]
    """What the sender had delivered when it sent it."""


class NodeLog:
    """What one node incarnation did, for the checks. Cloned when its node moves."""

    __slots__ = ("node", "incarnation", "delivered", "position", "last_seq", "view", "views", "segment",
                 "segments", "sends", "outcomes", "rolled_back", "gone", "transitional")

    def __init__(self, node: int, incarnation: int) -> None:
        self.node = node
        self.incarnation = incarnation
        self.delivered: list[Message] = []
        self.position: dict[Message, int] = {}
        self.last_seq: dict[int, int] = {}
        self.view: str | None = None
        self.views: list[str] = []
        self.segment: set[Message] = set()
        self.segments: dict[tuple[str, str], frozenset[Message]] = {}
        self.sends: dict[Message, Sent] = {}
        self.outcomes: dict[Message, list[int]] = {}
        """Own message -> [deliveries, rollbacks, NotDelivered actions, not_delivered rows]."""
        self.rolled_back: set[Message] = set()
        self.gone: str | None = None
        self.transitional: dict[str, tuple[int, ...]] = {}
        """Old view id -> the members that moved from it together with this node."""

    def clone(self) -> NodeLog:
        other = NodeLog.__new__(NodeLog)
        other.node, other.incarnation, other.view, other.gone = self.node, self.incarnation, self.view, self.gone
        other.delivered = list(self.delivered)
        other.position = dict(self.position)
        other.last_seq = dict(self.last_seq)
        other.views = list(self.views)
        other.segment = set(self.segment)
        other.segments = dict(self.segments)
        other.sends = dict(self.sends)
        other.outcomes = {m: list(c) for m, c in self.outcomes.items()}
        other.rolled_back = set(self.rolled_back)
        other.transitional = dict(self.transitional)
        return other

    @property
    def name(self) -> str:
        return f"{self.node}" if self.incarnation == 0 else f"{self.node}.{self.incarnation}"


def outcome_count(counts: list[int]) -> int:
    """Outcomes of one own message: a NotDelivered action and its trace row are one outcome."""
    return counts[0] + counts[1] + max(counts[2], counts[3])


def named_messages(action: Any) -> list[Message]:
    """(sender, seq) of the messages a not-delivered report names, whatever its shape."""
    if hasattr(action, "messages"):
        items = list(action.messages)
    elif hasattr(action, "message"):
        items = [action.message]
    else:
        items = [(action.sender, action.seq)]
    return [(item.sender, item.seq) if hasattr(item, "seq") else (item[0], item[1]) for item in items]


# ---------------------------------------------------------------------- the world: one state


class World:
    """One explored state. A snapshot (in the search's queues and seen by
    several successors) is never changed; ``child`` thaws a private copy,
    applies one step and freezes it."""

    def __init__(self, cfg: ExploreConfig, branching: str) -> None:
        self.cfg = cfg
        self.branching = branching
        self.blobs: dict[int, Any] = {}
        """Node id -> its pickle (or its Node object with deepcopy; nothing with replay)."""
        self.objs: dict[int, Node] = {}
        """Nodes thawed for this step (private)."""
        self.hist: dict[int, bytes] = {}
        self.dead: tuple[bytes, ...] = ()
        self.clock: dict[int, float] = {}
        self.incarnation: dict[int, int] = {}
        self.in_group: dict[int, bool] = {}
        self.deadline: dict[int, float | None] = {}
        self.can_send: dict[int, bool] = {}
        self.started: frozenset[int] = frozenset()
        self.crashed: frozenset[int] = frozenset()
        self.in_flight: list[Datagram] = []
        self.dropped: tuple[bytes, ...] = ()
        self.duplicated: tuple[bytes, ...] = ()
        self.purged: tuple[bytes, ...] = ()
        self.used: dict[str, int] = {}
        self.sends_used: dict[int, int] = {}
        self.partition: tuple[int, ...] | None = None
        self.logs: dict[LogKey, NodeLog] = {}
        self._own_logs: set[LogKey] = set()
        self.installed: dict[str, tuple[int, ...]] = {}
        self.up_at_install: dict[str, frozenset[LogKey]] = {}
        """View id -> the processes up when it was first installed."""
        self.optimistic: dict[str, tuple[int, ...]] = {}
        self.sent: dict[Message, LogKey] = {}
        self.path: tuple[Step, ...] = ()
        self.found: list[tuple[str, str]] = []
        self.broken = False
        self.key = b""
        self.hashing = True
        """Chain histories and name datagrams by them (off while settling: no fingerprint is taken then)."""
        self._counter = 0

    def path_counter(self) -> bytes:
        """While settling, datagrams are named by a counter."""
        self._counter += 1
        return b"settle" + self._counter.to_bytes(8, "big")

    # ------------------------------------------------------------------ copies

    def thaw(self) -> World:
        """A private copy to apply a step to (``replay`` branching rebuilds it from the path)."""
        if self.branching == "replay":
            world, _ = _replay_world(self.cfg, self.path, "replay")
            world.found = []
            return world
        w = World.__new__(World)
        w.cfg, w.branching = self.cfg, self.branching
        w.blobs, w.objs = dict(self.blobs), {}
        w.hist, w.dead, w.clock = dict(self.hist), self.dead, dict(self.clock)
        w.incarnation, w.in_group = dict(self.incarnation), dict(self.in_group)
        w.deadline, w.can_send = dict(self.deadline), dict(self.can_send)
        w.started, w.crashed = self.started, self.crashed
        w.in_flight = list(self.in_flight)
        w.dropped, w.duplicated, w.purged = self.dropped, self.duplicated, self.purged
        w.used, w.sends_used, w.partition = dict(self.used), dict(self.sends_used), self.partition
        w.logs, w._own_logs = dict(self.logs), set()
        w.installed, w.optimistic, w.sent = dict(self.installed), dict(self.optimistic), dict(self.sent)
        w.up_at_install = dict(self.up_at_install)
        w.path, w.found, w.broken, w.key = self.path, [], False, self.key
        w.hashing, w._counter = True, 0
        return w

    def freeze(self) -> World:
        if self.branching == "pickle":
            for n, node in self.objs.items():
                self.blobs[n] = dump_node(node)
        elif self.branching == "deepcopy":
            self.blobs.update(self.objs)
        self.objs = {}
        self._own_logs = set()
        self.key = self.fingerprint()
        return self

    def node(self, n: int) -> Node:
        """Node ``n``, private to this copy."""
        obj = self.objs.get(n)
        if obj is None:
            blob = self.blobs[n]
            obj = load_node(blob) if self.branching == "pickle" else copy_node(blob)
            self.objs[n] = obj
        return obj

    def nodes(self) -> dict[int, Node]:
        """Every live node (thawed into this copy)."""
        return {n: self.node(n) for n in sorted(self.hist)}

    def _log(self, key: LogKey) -> NodeLog:
        if key not in self._own_logs:
            self.logs[key] = self.logs[key].clone()
            self._own_logs.add(key)
        return self.logs[key]

    # ------------------------------------------------------------------ fingerprints

    def context(self) -> bytes:
        """Where a node's outputs go: who is up, in the group, and the partition."""
        up = tuple((n, self.incarnation[n], self.in_group[n]) for n in sorted(self.hist))
        return repr((up, self.partition)).encode()

    def fingerprint(self, hist: dict[int, bytes] | None = None, dead: tuple[bytes, ...] | None = None,
                    dropped: tuple[bytes, ...] | None = None, duplicated: tuple[bytes, ...] | None = None,
                    purged: tuple[bytes, ...] | None = None, partition: Any = "same",
                    used: dict[str, int] | None = None, crashed: frozenset[int] | None = None) -> bytes:
        """The state's hash, or a successor's when given what the step changes."""
        hist = self.hist if hist is None else hist
        parts = [
            b"".join(n.to_bytes(4, "big") + h for n, h in sorted(hist.items())),
            b"".join(sorted(self.dead if dead is None else dead)),
            b"".join(sorted(self.dropped if dropped is None else dropped)),
            b"".join(sorted(self.duplicated if duplicated is None else duplicated)),
            b"".join(sorted(self.purged if purged is None else purged)),
            repr((self.partition if partition == "same" else partition,
                  sorted((self.used if used is None else used).items()),
                  sorted(self.crashed if crashed is None else crashed))).encode(),
        ]
        return hashlib.blake2b(b"|".join(parts), digest_size=16).digest()

    def successors(self) -> list[tuple[Step, bytes | None]]:
        """Every enabled step, with the fingerprint of the state it leads to
        (None for a ``calm`` step: known only once run)."""
        cfg, budget, used = self.cfg, self.cfg.budget, self.used
        ctx = self.context()
        out: list[tuple[Step, bytes | None]] = []

        def bump(kind: str) -> dict[str, int]:
            return {**used, kind: used.get(kind, 0) + 1}

        def moved(n: int, record: bytes) -> dict[int, bytes]:
            return {**self.hist, n: _chain(self.hist[n], record)}

        unique: dict[bytes, Datagram] = {}
        for d in self.in_flight:
            unique.setdefault(d.id, d)
        for d in unique.values() if cfg.single_steps else ():
            out.append((Step("deliver", datagram=d.id.hex(), label=d.label),
                        self.fingerprint(hist=moved(d.dst, b"rx" + d.id + ctx))))
        if budget.allows(used, "losses"):
            for d in unique.values():
                out.append((Step("drop", datagram=d.id.hex(), label=d.label),
                            self.fingerprint(dropped=self.dropped + (d.id,), used=bump("losses"))))
        if budget.allows(used, "duplicates"):
            for d in unique.values():
                out.append((Step("dup", datagram=d.id.hex(), label=d.label),
                            self.fingerprint(duplicated=self.duplicated + (d.id,), used=bump("duplicates"))))
        live = sorted(self.hist)
        members = [n for n in live if self.in_group[n]]
        for n in live if cfg.single_steps else ():
            if self.deadline[n] is not None:
                out.append((Step("timer", n), self.fingerprint(hist=moved(n, b"timer" + ctx))))
        for n in members:
            if n in cfg.senders and self.sends_used.get(n, 0) < cfg.sends and self.can_send[n]:
                out.append((Step("send", n), self.fingerprint(hist=moved(n, b"send" + self._payload(n) + ctx))))
        for n in cfg.joiner_ids:
            if n not in self.started:
                start = self._start_hash(n, 0, 0.0, "join", ctx)
                out.append((Step("join", n), self.fingerprint(hist={**self.hist, n: start})))
        if budget.allows(used, "crashes") and len(live) > 2:
            for n in members:
                rest = {k: h for k, h in self.hist.items() if k != n}
                out.append((Step("crash", n), self.fingerprint(
                    hist=rest, dead=self.dead + (_chain(self.hist[n], b"crash"),), used=bump("crashes"),
                    crashed=self.crashed | {n})))
        if budget.allows(used, "restarts"):
            for n in sorted(self.crashed):
                start = self._start_hash(n, self.incarnation[n] + 1, self.clock[n], "restart", ctx)
                out.append((Step("restart", n), self.fingerprint(
                    hist={**self.hist, n: start}, used=bump("restarts"), crashed=self.crashed - {n})))
        if budget.allows(used, "leaves") and len(members) > 2:
            for n in members:
                rest = {k: h for k, h in self.hist.items() if k != n}
                out.append((Step("leave", n), self.fingerprint(
                    hist=rest, dead=self.dead + (_chain(_chain(self.hist[n], b"leave" + ctx), b"left"),),
                    used=bump("leaves"))))
        if budget.allows(used, "partitions") and self.partition is None:
            for side in self._sides():
                purged = self.purged + tuple(d.id for d in self.in_flight if (d.src in side) != (d.dst in side))
                out.append((Step("partition", side=side), self.fingerprint(
                    purged=purged, partition=side, used=bump("partitions"))))
        if self.partition is not None:
            out.append((Step("heal"), self.fingerprint(partition=None)))
        out += [(Step("calm", amount=amount), None) for amount in cfg.calm]
        return out

    def _sides(self) -> list[tuple[int, ...]]:
        """Every split of all the node ids in two, named by the side that holds node 1."""
        ids = self.cfg.member_ids + self.cfg.joiner_ids
        rest = ids[1:]
        sides = []
        for mask in range(2 ** len(rest) - 1):  # the other side is never empty
            sides.append((ids[0], *(n for i, n in enumerate(rest) if mask >> i & 1)))
        return sorted(sides, key=lambda s: (len(s), s))

    def _payload(self, n: int) -> bytes:
        return f"m{n}.{self.sends_used.get(n, 0) + 1}".encode()

    def _start_hash(self, n: int, incarnation: int, clock: float, how: str, ctx: bytes) -> bytes:
        return _chain(b"", b"start" + repr((n, incarnation, clock, how)).encode() + ctx)

    # ------------------------------------------------------------------ steps

    def apply(self, step: Step) -> None:
        kind = step.kind
        if kind in ("deliver", "drop", "dup"):
            d = self._find(step)
            if kind == "deliver":
                self.in_flight.remove(d)
                n = d.dst
                self._input(n, b"rx" + d.id, lambda node: node.handle_datagram(d.src, d.data, self.clock[n]))
            elif kind == "drop":
                self.in_flight.remove(d)
                self.dropped += (d.id,)
                self._use("losses")
            else:
                self.in_flight.append(d)
                self.duplicated += (d.id,)
                self._use("duplicates")
        elif kind == "timer":
            who = _node_of(step)
            deadline = self.deadline[who]
            assert deadline is not None, step
            self.clock[who] = max(self.clock[who], deadline)
            self._input(who, b"timer", lambda node: node.handle_timeout(self.clock[who]))
        elif kind == "send":
            who = _node_of(step)
            payload = self._payload(who)
            self.sends_used[who] = self.sends_used.get(who, 0) + 1
            self._input(who, b"send" + payload,
                        lambda node: node.multicast(self.cfg.group, payload, self.clock[who]))
        elif kind == "join":
            self._start(_node_of(step), 0, 0.0, "join")
        elif kind == "crash":
            who = _node_of(step)
            self._stop(who, b"crash")
            self.crashed = self.crashed | {who}
            self._use("crashes")
        elif kind == "restart":
            who = _node_of(step)
            self.crashed = self.crashed - {who}
            self._use("restarts")
            self._start(who, self.incarnation[who] + 1, self.clock[who], "restart")
        elif kind == "leave":
            who = _node_of(step)
            self._input(who, b"leave", lambda node: node.leave(self.cfg.group, self.clock[who]))
            self._log((who, self.incarnation[who])).gone = "leave"
            self._stop(who, b"left")
            self._use("leaves")
        elif kind == "partition":
            assert step.side is not None
            side = step.side
            self.purged += tuple(d.id for d in self.in_flight if (d.src in side) != (d.dst in side))
            self.in_flight = [d for d in self.in_flight if (d.src in side) == (d.dst in side)]
            self.partition = side
            self._use("partitions")
        elif kind == "heal":
            self.partition = None
        elif kind == "settle":
            self.settle()
        elif kind == "calm":
            assert step.amount is not None
            self.calm(step.amount)
        else:
            raise ValueError(f"unknown step {step}")
        self.path += (step,)

    def _find(self, step: Step) -> Datagram:
        assert step.datagram is not None
        for d in self.in_flight:
            if d.id.hex().startswith(step.datagram):
                return d
        raise LookupError(f"no datagram #{step.datagram} in flight for step {step}")

    def _use(self, kind: str) -> None:
        self.used[kind] = self.used.get(kind, 0) + 1

    def _start(self, n: int, incarnation: int, clock: float, how: str) -> None:
        cfg = self.cfg
        ctx = self.context()
        self.started = self.started | {n}
        self.incarnation[n] = incarnation
        self.clock[n] = clock
        node = cfg.node_factory(n, cfg.protocol, random.Random(f"{n}:{incarnation}"), resolve=identity,
                                trace=True, incarnation=incarnation, now=clock)
        self.objs[n] = node
        self.hist[n] = self._start_hash(n, incarnation, clock, how, ctx)
        self.in_group[n] = False
        self.logs[(n, incarnation)] = NodeLog(n, incarnation)
        self._own_logs.add((n, incarnation))
        members = cfg.member_ids if how == "member" else None
        self._input(n, b"", lambda node: node.join(cfg.group, clock, order=cfg.order, members=members),
                    ctx=ctx, record_input=False)

    def _stop(self, n: int, how: bytes) -> None:
        """``n``'s process is gone (crash, or exit after leaving): its history is final."""
        self.dead += (_chain(self.hist.pop(n), how),)
        self.blobs.pop(n, None)
        self.objs.pop(n, None)
        self.in_group.pop(n)
        self.deadline.pop(n)
        self.can_send.pop(n)
        log = self._log((n, self.incarnation[n]))
        log.gone = log.gone or "crash"
        self.in_flight = [d for d in self.in_flight if d.dst != n]

    def _input(self, n: int, record: bytes, call: Callable[[Node], list[Any]], ctx: bytes | None = None,
               record_input: bool = True) -> None:
        """One input to node ``n``, then its timers already due; route and observe what it did."""
        if self.hashing and record_input:
            self.hist[n] = _chain(self.hist[n], record + (self.context() if ctx is None else ctx))
        node = self.node(n)
        now = self.clock[n]
        try:
            actions = list(call(node))
            for _ in range(URGENT_LIMIT):
                deadline = node.next_deadline()
                if deadline is None or deadline > now:
                    break
                actions += node.handle_timeout(now)
            else:
                self.found.append(("X", f"node {n}: timers still due at t={now} after {URGENT_LIMIT} rounds"))
        except Exception as exc:  # a node must never raise: the path is a bug report
            self.found.append(("X", f"node {n} raised {type(exc).__name__}: {exc}"))
            self.broken = True
            return
        in_group = self.cfg.group in node.groups
        self.in_group[n] = in_group
        self.deadline[n] = deadline
        if self.hashing:  # (settling sends nothing new: no need to know)
            self.can_send[n] = in_group and node.send_ready_at(self.cfg.group, now) is not None
        self._route(n, actions)
        self._observe(n, actions)

    def _connected(self, a: int, b: int) -> bool:
        side = self.partition
        return side is None or (a in side) == (b in side)

    def _route(self, n: int, actions: list[Any]) -> None:
        h = self.hist[n] if self.hashing else self.path_counter()
        index = 0
        for action in actions:
            kind = type(action)
            if kind is Multicast:
                targets = [m for m in sorted(self.hist) if m != n and self.in_group.get(m)]
            elif kind is Send:
                targets = [action.dst] if action.dst in self.hist else []
            else:
                continue
            for dst in targets:
                index += 1
                if self._connected(n, dst):
                    did = hashlib.blake2b(h + index.to_bytes(4, "big") + dst.to_bytes(4, "big"),
                                          digest_size=12).digest()
                    self.in_flight.append(Datagram(did, n, dst, self.incarnation[dst], action.data, action.msg_type))

    # ------------------------------------------------------------------ observation and safety checks

    def _observe(self, n: int, actions: list[Any]) -> None:
        key = (n, self.incarnation[n])
        log = self._log(key)
        stack = self.objs[n]._groups.get(self.cfg.group)
        if stack is not None and stack.sync.phase not in PHASES[stack.agreement.stage]:
            self.found.append(("S", f"node {log.name}: stage {stack.agreement.stage.value} with phase "
                                    f"{stack.sync.phase.value}"))
        for action in actions:
            kind = type(action)
            if kind is Deliver:
                if action.dest is None:
                    self._on_deliver(log, action)
            elif kind is TraceEvent:
                if action.kind == "send" and action.dest is None:
                    m = (action.sender, action.seq)
                    log.sends[m] = Sent(action.view_id, bool(action.optimistic), frozenset(log.position))
                    log.outcomes[m] = [0, 0, 0, 0]
                    self.sent[m] = key
                elif action.kind == "not_delivered":
                    self._on_outcome(log, (action.sender, action.seq), 3, "a not_delivered row")
            elif kind is ViewInstalled:
                self._on_view(log, action)
            elif kind is OptimisticView:
                self.optimistic[action.view_id] = action.members
            elif kind is Rollback:
                for m in action.messages:
                    self._on_rollback(log, (m[0], m[1]))
            elif kind is GroupError:
                self.found.append(("E", f"node {log.name}: {action.message}"))
            elif kind.__name__ == "NotDelivered":
                for m in named_messages(action):
                    self._on_outcome(log, m, 2, f"NotDelivered({getattr(action, 'reason', '')})")
            elif kind.__name__ == "TransitionalView":
                log.transitional[action.view_id] = action.members

    def _on_deliver(self, log: NodeLog, action: Any) -> None:
        m = (action.sender, action.seq)
        where = f"node {log.name} delivered {m} in {action.view_id}"
        if m in log.position:
            self.found.append(("1", f"{where} twice"))
        last = log.last_seq.get(m[0], 0)
        if m[1] <= last:
            self.found.append(("2", f"{where} after seq {last}"))
        log.last_seq[m[0]] = max(last, m[1])
        if m not in log.position:
            log.position[m] = len(log.delivered)
            log.delivered.append(m)
        log.segment.add(m)
        for other in self.logs.values():
            if m in other.rolled_back:
                self.found.append(("7", f"{where}, which node {other.name} rolled back"))
        sent = self._sent_info(m)
        if sent is not None and sent.optimistic and sent.view_id in self.optimistic \
                and action.view_id in self.installed:
            missing = set(self.optimistic[sent.view_id]) - set(self.installed[action.view_id])
            if missing:
                self.found.append(("7", f"{where}, sent under optimistic view {sent.view_id} whose "
                                        f"{sorted(missing)} are not in the delivery view"))
        order = self.cfg.order
        if order is not Order.FIFO:  # invariant 4, as inversions (tests/test_node.py)
            for earlier in log.delivered[:log.position[m]]:
                info = self._sent_info(earlier)
                if info is not None and m in info.causes:
                    self.found.append(("4", f"{where} after {earlier}, which was sent after it was delivered"))
        if order in ORDERED:  # invariant 3, incrementally: each new delivery against the others' logs
            mine = log.delivered[:log.position[m]]
            for other in self.logs.values():
                if other is log or m not in other.position:
                    continue
                at = other.position[m]
                late = [x for x in mine if other.position.get(x, -1) > at]
                if late:
                    self.found.append(("3", f"{where} after {late}; node {other.name} delivered {m} before them"))
        if m[0] == log.node and m in log.sends:
            self._on_outcome(log, m, 0, "its delivery")

    def _on_rollback(self, log: NodeLog, m: Message) -> None:
        log.rolled_back.add(m)
        where = [other.name for other in self.logs.values() if m in other.position]
        if where:
            self.found.append(("7", f"node {log.name} rolled back {m}, delivered by {where}"))
        if m[0] == log.node and m in log.sends:
            self._on_outcome(log, m, 1, "a Rollback")

    def _on_outcome(self, log: NodeLog, m: Message, which: int, what: str) -> None:
        counts = log.outcomes.get(m)
        if counts is None:
            self.found.append(("8", f"node {log.name} reports {what} for {m}, not one of its own multicasts"))
            return
        before = outcome_count(counts)
        counts[which] += 1
        if outcome_count(counts) > 1 and outcome_count(counts) > before:
            self.found.append(("8", f"node {log.name}: {m} has a second outcome, {what} (counts: deliver, "
                                    f"rollback, NotDelivered, row = {counts})"))

    def _on_view(self, log: NodeLog, action: ViewInstalled) -> None:
        if action.view_id not in self.installed:
            self.up_at_install[action.view_id] = frozenset(k for k, other in self.logs.items() if other.gone is None)
        self.installed[action.view_id] = action.members
        if log.view is not None:  # invariant 5: same two consecutive views, same messages between them
            pair = (log.view, action.view_id)
            got = frozenset(log.segment)
            log.segments[pair] = got
            for other in self.logs.values():
                theirs = other.segments.get(pair)
                if other is not log and theirs is not None and theirs != got:
                    self.found.append(("5", f"between views {pair[0]} and {pair[1]} node {log.name} delivered "
                                            f"{sorted(got)} but node {other.name} {sorted(theirs)}"))
        log.views.append(action.view_id)
        log.view = action.view_id
        log.segment = set()

    def _sent_info(self, m: Message) -> Sent | None:
        key = self.sent.get(m)
        return None if key is None else self.logs[key].sends.get(m)

    # ------------------------------------------------------------------ quiescence

    def settle(self) -> bool:
        """No more faults: heal, deliver everything after ``latency`` in the order
        sent, fire timers on time, until the live members agree (see the module
        docstring); then the quiescent checks. False if they did not settle."""
        self.partition = None
        self.hashing = False
        if not self._run(self.cfg.settle_limit, settling=True):
            return False
        self._quiescent_checks()
        return True

    def calm(self, duration: float) -> None:
        """The ``calm`` step: for ``duration`` seconds of every clock the
        network is lossless and in order (each datagram ``latency`` after it
        was sent) and timers fire on time; the partition, if any, stays."""
        self._run(duration, settling=False)

    def _run(self, limit: float, settling: bool) -> bool:
        """The calm network from now on every clock: ``limit`` seconds (calm),
        or until the members settled (settle; False if not within ``limit``)."""
        cfg = self.cfg
        live = sorted(self.hist)
        for n in live:
            self.node(n)
        base = {n: self.clock[n] for n in live}
        arrivals: deque[tuple[float, Datagram]] = deque((0.0, d) for d in self.in_flight)
        self.in_flight = []
        elapsed, next_check, stable = 0.0, SETTLE_CHECK if settling else math.inf, 0
        done_at: float | None = None
        for _ in range(SETTLE_EVENTS):
            if self.broken:
                return False
            timers = [(self.deadline[n] - base[n], n) for n in sorted(self.hist)  # type: ignore[operator]
                      if self.deadline.get(n) is not None]
            next_timer = min(timers)[0] if timers else math.inf
            next_arrival = arrivals[0][0] if arrivals else math.inf
            at = min(next_timer, next_arrival, next_check)
            if at > limit:
                if settling:
                    views = {n: self.objs[n].view(cfg.group) for n in sorted(self.hist) if self.in_group[n]}
                    self.found.append(("L", f"the live members did not settle within {limit} s: {views}"))
                    return False
                break
            elapsed = max(elapsed, at)
            if at == next_check:
                next_check += SETTLE_CHECK
                if done_at is not None and elapsed >= done_at:
                    break
                stable = stable + 1 if self._converged() else 0
                if stable >= 2 and done_at is None:
                    done_at = elapsed + cfg.grace
                continue
            if next_arrival <= next_timer:
                _, d = arrivals.popleft()
                if d.dst in self.hist and self.incarnation[d.dst] == d.dst_incarnation:
                    self.clock[d.dst] = max(self.clock[d.dst], base[d.dst] + elapsed)
                    self._input(d.dst, b"rx" + d.id + b"@" + repr(self.clock[d.dst]).encode(),
                                lambda node: node.handle_datagram(d.src, d.data, self.clock[d.dst]))
            else:
                for due, n in sorted(timers):
                    deadline = self.deadline.get(n)
                    if due <= elapsed and deadline is not None:  # (rounding: never run a timer before its deadline)
                        self.clock[n] = max(self.clock[n], base[n] + elapsed, deadline)
                        self._input(n, b"timer@" + repr(self.clock[n]).encode(),
                                    lambda node: node.handle_timeout(self.clock[n]))
            arrivals.extend((elapsed + cfg.latency, d) for d in self.in_flight)
            self.in_flight = []
        else:
            self.found.append(("X", f"the calm network took more than {SETTLE_EVENTS} events (at {elapsed:.3f} s)"))
            self.broken = True
            return False
        self.in_flight = [d for _, d in arrivals]
        if not settling:  # every clock moved on by ``limit``; the histories say so
            for n in sorted(self.hist):
                moved = max(self.clock[n], base[n] + limit)
                if moved != self.clock[n]:
                    self.clock[n] = moved
                    self.hist[n] = _chain(self.hist[n], b"clock" + repr(moved).encode())
        return True

    def _converged(self) -> bool:
        group = self.cfg.group
        members = tuple(n for n in sorted(self.hist) if self.in_group[n])
        for n in members:
            node = self.objs[n]
            if node.view(group)[1] != members or node.changing_view(group) or node.detector.suspects \
                    or node.detector.failed or any(node.waiting_messages(group).values()):
                return False
        return len({self.objs[n].view(group) for n in members}) <= 1

    def _quiescent_checks(self) -> None:
        cfg = self.cfg
        up = {(n, self.incarnation[n]) for n in self.hist if self.in_group[n]}
        for key in sorted(up):
            node, log = self.objs[key[0]], self.logs[key]
            unknown = node.statistics().fate_unknown
            if unknown:
                self.found.append(("8", f"node {log.name}: statistics().fate_unknown = {unknown}"))
        for key, log in sorted(self.logs.items()):
            if key not in up and not (cfg.outcome_after_leave and log.gone == "leave"):
                continue
            for m, counts in log.outcomes.items():
                if outcome_count(counts) == 0:
                    sent = log.sends[m]
                    self.found.append(("8", f"node {log.name} sent {m} in {sent.view_id}"
                                            f"{' (optimistic)' if sent.optimistic else ''} and has no outcome "
                                            f"for it: not delivered, rolled back nor reported not delivered"))
        if cfg.partial_views:
            self._partial_views()
        rolled_back = set().union(*(log.rolled_back for log in self.logs.values()))
        for m, sender_key in sorted(self.sent.items()):  # invariant 6
            if m in rolled_back:
                continue
            sent = self.logs[sender_key].sends[m]
            for key, log in sorted(self.logs.items()):
                if sent.view_id not in log.views or m in log.position:
                    continue
                at = log.views.index(sent.view_id)
                if at + 1 < len(log.views):
                    following = log.views[at + 1]
                    moved = log.transitional.get(sent.view_id)
                    if m[0] in self.installed.get(following, ()) and (moved is None or m[0] in moved):
                        self.found.append(("6", f"node {log.name} installed {sent.view_id} and then {following}, "
                                                f"which holds sender {m[0]}, and never delivered {m}"
                                                f"{self._who_is_in(sender_key, following)}"))
                elif key in up and sender_key in up:
                    self.found.append(("6", f"node {log.name} stayed in {sent.view_id} with sender {m[0]} and "
                                            f"never delivered {m}"))

    def _partial_views(self) -> None:
        for view, members in sorted(self.installed.items()):
            missing = [self.logs[k].name for k in sorted(self.up_at_install.get(view, ()))
                       if k[0] in members and self.logs[k].gone is None and view not in self.logs[k].views]
            if missing and len(members) > 1:
                self.found.append(("P", f"view {view} of {members} was never installed by {missing}, "
                                        f"which neither crashed nor left"))

    def _who_is_in(self, sender: LogKey, view: str) -> str:
        """Which incarnation of the sender a view holds, when it is not the one that sent."""
        if view in self.logs[sender].views:
            return ""
        later = [log.name for (n, i), log in sorted(self.logs.items()) if n == sender[0] and view in log.views]
        gone = self.logs[sender].gone
        done = {"crash": " crashed", "leave": " left"}.get(gone or "", "")
        return (f" (the sender {self.logs[sender].name}{done} before it; "
                f"{later[0] if later else 'no incarnation of it'} installed {view})")

    # ------------------------------------------------------------------ merges (verify_merges)

    def looks(self) -> bytes:
        """What a state shows, to compare two states merged by their fingerprint."""
        group = self.cfg.group
        shown: list[Any] = [sorted(d.id for d in self.in_flight), sorted(self.used.items()), self.partition]
        if self.branching == "replay" and any(n not in self.objs for n in self.hist):
            peek = self.thaw().nodes()
        else:
            peek = {n: self.objs.get(n) or (load_node(self.blobs[n]) if self.branching == "pickle"
                                            else copy_node(self.blobs[n])) for n in self.hist}
        for n in sorted(self.hist):
            node = peek[n]
            stats = node.statistics()
            shown.append((n, self.incarnation[n], self.clock[n], node.next_deadline(), node.groups,
                          node.view(group) if self.in_group[n] else None, stats.messages_delivered,
                          stats.messages_sent, stats.datagrams_sent, stats.datagrams_received))
        for key, log in sorted(self.logs.items()):
            shown.append((key, log.delivered, log.views, sorted(log.rolled_back), sorted(log.outcomes.items())))
        return hashlib.blake2b(repr(shown).encode(), digest_size=16).digest()


# ---------------------------------------------------------------------- building and replaying


def initial(cfg: ExploreConfig, branching: str) -> World:
    """The members have joined, together; nothing is in flight."""
    world = World(cfg, branching)
    for n in cfg.member_ids:
        world._start(n, 0, 0.0, "member")
    return world.freeze()


def child(parent: World, step: Step) -> World:
    world = parent.thaw()
    world.apply(step)
    return world.freeze()


def _replay_world(cfg: ExploreConfig, path: Sequence[Step], branching: str) -> tuple[World, list[tuple[str, str]]]:
    if branching == "replay":
        world = _fresh_replay(cfg)
        found = list(world.found)
    else:
        root = initial(cfg, branching)
        found = list(root.found)
        world = root.thaw()
    for step in path:
        world.found = []
        world.apply(step)
        found += world.found
        if world.broken:
            break
    world.found = found
    return world, found


def _fresh_replay(cfg: ExploreConfig) -> World:
    world = World(cfg, "replay")
    for n in cfg.member_ids:
        world._start(n, 0, 0.0, "member")
    world.key = world.fingerprint()
    return world


def replay(cfg: ExploreConfig, path: Sequence[Step] | str) -> tuple[World, list[Violation]]:
    """Re-run ``path`` (steps, or ``format_path``'s text) from the initial state:
    the state reached and every violation found on the way."""
    steps = parse_path(path) if isinstance(path, str) else list(path)
    world, found = _replay_world(cfg, steps, choose_branching(cfg))
    return world, [Violation(i, msg, tuple(steps)) for i, msg in found]


def _pickles(cfg: ExploreConfig) -> bool:
    try:
        probe = _fresh_replay(cfg).objs[cfg.member_ids[0]]
        refresh_shared()
        load_node(dump_node(probe))
        return True
    except Exception:
        return False


def choose_branching(cfg: ExploreConfig) -> str:
    if cfg.branching != "auto":
        return cfg.branching
    if _pickles(cfg):
        return "pickle"
    try:
        copy_node(_fresh_replay(cfg).objs[cfg.member_ids[0]])
        return "deepcopy"
    except Exception:
        return "replay"


# ---------------------------------------------------------------------- the search


def explore(cfg: ExploreConfig, prefixes: Sequence[Sequence[Step]] | None = None,
            progress: Callable[[Report], None] | None = None, every: float = 60.0) -> Report:
    """Every interleaving of ``cfg`` to its depth bound; see the module docstring.
    ``prefixes``: explore only below the states these paths reach (a share of
    a parallel run, ``frontier``). ``progress`` is called with the report so
    far every ``every`` seconds."""
    started = time.perf_counter()
    next_progress = started + every
    branching = choose_branching(cfg)
    refresh_shared()
    report = Report(cfg, branching)
    if prefixes is None:
        starts = [initial(cfg, branching)]
    else:
        starts = []
        for prefix in prefixes:
            start, found = _replay_world(cfg, prefix, branching)
            report.add(found, start.path)
            if not start.broken:
                starts.append(start.freeze())
    seen: dict[bytes, int] = {}
    looks: dict[bytes, bytes] = {}
    per_depth: list[int] = []
    pending: deque[tuple[World, Step, bytes | None]] = deque()

    def expand(world: World) -> None:
        depth = len(world.path)
        if cfg.settle == "all":
            settle(world.thaw())
        for step, key in world.successors():
            report.transitions += 1
            if key is None:  # a calm step: run it to know where it leads
                pending.append((world, step, None))
                continue
            known = seen.get(key)
            if known is not None and (cfg.search == "bfs" or known <= depth + 1):
                if cfg.verify_merges:
                    _verify_merge(world, step, key, looks)
                continue
            if known is None:
                while len(per_depth) <= depth + 1:
                    per_depth.append(0)
                per_depth[depth + 1] += 1
            seen[key] = depth + 1
            pending.append((world, step, key))

    def settle(world: World) -> None:
        """The quiescent checks, on ``world`` (a private copy, spent by it)."""
        t0 = time.perf_counter()
        world.found = []
        world.apply(Step("settle"))
        report.add(world.found, world.path)
        report.settled += 1
        report.settle_seconds += time.perf_counter() - t0

    for start in starts:
        depth = len(start.path)
        if start.key in seen:
            continue
        seen[start.key] = depth
        per_depth.extend([0] * (depth + 1 - len(per_depth)))
        per_depth[depth] += 1
        report.states += 1
        if prefixes is None:
            report.add(start.found, start.path)
        if cfg.verify_merges:
            looks[start.key] = start.looks()
        if depth >= cfg.depth:
            if cfg.settle != "none":
                settle(start.thaw())
        else:
            expand(start)
    while pending:
        now = time.perf_counter()
        if cfg.max_states is not None and report.states >= cfg.max_states or \
                cfg.max_seconds is not None and now - started > cfg.max_seconds:
            report.complete = False
            break
        if progress is not None and now > next_progress:
            next_progress = now + every
            report.distinct, report.per_depth, report.wall_seconds = len(seen), list(per_depth), now - started
            progress(report)
        parent, step, key = pending.popleft() if cfg.search == "bfs" else pending.pop()
        world = parent.thaw()
        world.apply(step)
        leaf = len(world.path) >= cfg.depth
        if leaf:  # never a parent: no need to freeze it, settle it as it is
            world.key = world.fingerprint()
        else:
            world.freeze()
        report.states += 1
        if key is None:
            known = seen.get(world.key)
            depth = len(world.path)
            if known is not None and (cfg.search == "bfs" or known <= depth):
                continue
            if known is None:
                while len(per_depth) <= depth:
                    per_depth.append(0)
                per_depth[depth] += 1
            seen[world.key] = depth
            key = world.key
        elif world.key != key:
            raise AssertionError(f"fingerprint predicted for {format_path(world.path)} differs from the state's")
        if cfg.verify_merges:
            shown = world.looks()
            if looks.setdefault(key, shown) != shown:
                raise AssertionError(f"two different states share a fingerprint; one is {format_path(world.path)}")
        report.max_depth = max(report.max_depth, len(world.path))
        report.add(world.found, world.path)
        if world.broken:
            continue
        if not leaf:
            expand(world)
        elif cfg.settle != "none":
            settle(world)
    report.distinct = len(seen)
    report.per_depth = per_depth
    report.wall_seconds = time.perf_counter() - started
    return report


def frontier(cfg: ExploreConfig, split: int) -> list[tuple[Step, ...]]:
    """The paths to the distinct states ``split`` steps deep (and to any
    shallower state with no successor): the shares of a parallel run."""
    branching = choose_branching(cfg)
    refresh_shared()
    level = [initial(cfg, branching)]
    seen = {level[0].key}
    done: list[tuple[Step, ...]] = []
    for _ in range(split):
        following: list[World] = []
        for world in level:
            successors = world.successors() if not world.broken else []
            if not successors:
                done.append(world.path)
            for step, key in successors:
                if key is not None and key in seen:
                    continue
                after = child(world, step)
                if after.key in seen:
                    continue
                seen.add(after.key)
                following.append(after)
        level = following
    return done + [world.path for world in level]


def merge_reports(cfg: ExploreConfig, reports: Sequence[Report]) -> Report:
    """One report of the shares of a parallel run (distinct states: the sum, an upper bound)."""
    merged = Report(cfg, reports[0].branching if reports else "")
    kept: set[tuple[str, str, tuple[Step, ...]]] = set()
    for report in reports:
        merged.states += report.states
        merged.distinct += report.distinct
        merged.transitions += report.transitions
        merged.max_depth = max(merged.max_depth, report.max_depth)
        merged.settled += report.settled
        merged.settle_seconds += report.settle_seconds
        merged.complete = merged.complete and report.complete
        merged.per_depth.extend([0] * (len(report.per_depth) - len(merged.per_depth)))
        for depth, count in enumerate(report.per_depth):
            merged.per_depth[depth] += count
        for invariant, count in report.counts.items():
            merged.counts[invariant] = merged.counts.get(invariant, 0) + count
        for v in report.violations:
            if (v.invariant, v.message, v.path) not in kept:
                kept.add((v.invariant, v.message, v.path))
                merged.violations.append(v)
    merged.violations.sort(key=lambda v: (v.invariant, len(v.path)))
    per: dict[str, int] = {}
    shortest = []
    for v in merged.violations:
        per[v.invariant] = per.get(v.invariant, 0) + 1
        if per[v.invariant] <= cfg.max_examples:
            shortest.append(v)
    merged.violations = shortest
    return merged


def _verify_merge(parent: World, step: Step, key: bytes, looks: dict[bytes, bytes]) -> None:
    """A successor merged with a state already seen must show what that state shows."""
    world = child(parent, step)
    if world.key != key:
        raise AssertionError(f"fingerprint predicted for {format_path(world.path)} differs from the state's")
    shown = world.looks()
    if looks.setdefault(key, shown) != shown:
        raise AssertionError(f"two different states share a fingerprint; one is {format_path(world.path)}")
