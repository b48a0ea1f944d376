"""The simulator: many sans-I/O nodes on one simulated network.

Theory of operation
-------------------
Each simulated process is a real ``sgcs.node.Node``, the same object the trio
driver runs. The simulator plays the driver's part for all of them: it calls
``join``/``leave``/``multicast`` at the scenario's times, hands each datagram
to ``handle_datagram`` when it arrives, calls ``handle_timeout`` when a
node's ``next_deadline`` comes, and carries out the returned actions:

* ``Send``: one datagram to one node id, through ``Network.unicast``;
* ``Multicast``: one datagram to every node that has currently joined the
  action's group (as if each group had its own multicast address), or to
  every live node when the group is None, through ``Network.fan_out``;
* ``TraceEvent``: one ``events`` row, stamped with the time and node;
* ``Deliver``/``ViewInstalled``: counted for the summary; their rows come
  from the node's own trace events;
* ``CheckHost``: ignored. The simulated network has no TCP and no hosts
  apart from their processes, so a suspect's pull stage runs its full
  course, as it did before host checks existed.

All of this is events on one heap (``engine.Engine``): datagram arrivals,
node timers, application sends (a Poisson process per group, each message's
sender drawn uniformly from the group's live, unpaused members), faults,
pause ends and the ``net`` bucket boundaries. A node's timer is re-armed from
``next_deadline`` after every call into it; moved timers are cancelled lazily.
Each datagram arrival carries the receiver's incarnation from send time, so a
datagram in flight to a node that crashes (and maybe recovers) is lost.

Determinism: every random choice comes from a generator derived from the seed
(network per sending node, per-group workload, and per-node ``(seed, node,
incarnation)``), and ties on the heap are broken by scheduling order, so a
seed replays a run. Node lifecycles and faults live in ``lifecycle``.

**Workers.** A simulator may own only some of the nodes (``worker`` of
``workers``: node ids congruent to ``worker`` modulo ``workers``), for a run
split over processes (``sgcs.sim.parallel``). Everything the scenario
decides (which nodes are up, joined or paused, incarnations, partitions, the
application's send times and senders) is replicated: every worker runs the
same lifecycle, bucket and application events. What a node does happens only
in its owner: its ``Node`` object, its timers, its sends and their network
draws. A datagram to a node of another worker goes to ``outbox`` instead of
the heap, with its arrival time; the parallel driver hands it over before
that time comes. With one worker (the default) nothing of this shows.
"""

from __future__ import annotations

import gc
import math
import random
import resource
from collections import Counter
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from heapq import heappush
from pathlib import Path
from typing import Any, Callable, Iterator, Protocol

import numpy as np

from sgcs.actions import (
    CheckHost,
    Deliver,
    MemberBusy,
    MemberSuspected,
    Multicast,
    NotDelivered,
    OptimisticView,
    Rollback,
    TransitionalView,
    Send,
    TraceEvent,
    ViewInstalled,
)
from sgcs.errors import UsageError
from sgcs.node import Node
from sgcs.wire import VerifiedMemo

from .engine import APP, ARRIVE, RETRY, TIMER, Engine, Handler
from .lifecycle import FAULT_HANDLERS, start_run
from .network import Network
from .scenario import GroupSpec, Scenario
from sgcs.trace import EventsWriter, NetCounters, StatsWriter

MAX_BUCKETS = 10_000_000


class SimulationBug(Exception):
    """A non-usage exception inside the run: a bug in sgcs or the simulator."""

    def __init__(self, message: str, seed: int, t: float, replay: str) -> None:
        super().__init__(message)
        self.seed = seed
        self.t = t
        self.replay = replay
        self.reported_by_peer = False
        """A parallel run's worker stopped without a report of its own (it was killed)."""


@dataclass
class Counters:
    """Totals for the run summary."""

    sends: int = 0
    """Application multicasts sent."""
    expected: int = 0
    """Sum over sends of the group's live members at send time (sender included)."""
    deliveries: int = 0
    """Multicast deliveries, the sender's own included."""
    unicast_deliveries: int = 0
    datagrams: int = 0
    """Datagrams put on the network (a multicast counts once)."""
    lost: int = 0
    """Datagram copies that did not reach an intended receiver."""
    held: int = 0
    """Application sends that waited for the flow-control window or send delay."""
    abandoned: int = 0
    """Held sends whose node crashed or left before it could send them."""


@dataclass
class RunTotals:
    """What a finished run (or one worker's share of it) adds up to."""

    counters: Counters
    events: int
    """Events processed (a parallel run's replicated ones once per worker)."""
    rows: int
    """Event rows written."""
    kinds: Counter[str]
    """Event rows per kind."""
    net_rows: int
    repaired_by_nack: int = 0
    """Summed over the nodes up at the end, as are the next three."""
    repaired_by_gossip: int = 0
    retransmissions: int = 0
    nacks: int = 0
    peak_buffered: int = 0
    """The largest peak buffer (unstable records) of any node up at the end."""
    peak_rss_bytes: int = 0
    """Peak resident memory: of the process, or summed over a parallel run's workers."""

    def plus(self, other: RunTotals) -> RunTotals:
        mine, theirs = asdict(self.counters), asdict(other.counters)
        return RunTotals(
            Counters(**{k: mine[k] + theirs[k] for k in mine}), self.events + other.events,
            self.rows + other.rows, self.kinds + other.kinds, self.net_rows + other.net_rows,
            self.repaired_by_nack + other.repaired_by_nack, self.repaired_by_gossip + other.repaired_by_gossip,
            self.retransmissions + other.retransmissions, self.nacks + other.nacks,
            max(self.peak_buffered, other.peak_buffered), self.peak_rss_bytes + other.peak_rss_bytes,
        )


class Advance(Protocol):
    """Runs every event at or before ``until`` (``Simulator.running``)."""

    def __call__(self, until: float, progress: Callable[[float], None] | None = None) -> None: ...


class GroupState:
    """One group's membership as the network sees it, and its workload."""

    __slots__ = ("index", "spec", "payload", "joined", "rng", "_targets", "_senders")

    def __init__(self, index: int, spec: GroupSpec, seed: int) -> None:
        self.index = index
        self.spec = spec
        self.payload = bytes(spec.size)
        self.joined: set[int] = set()
        """Nodes that are up and have joined: the multicast address's listeners."""
        self.rng = random.Random(f"{seed}:workload:{spec.name}")
        self._targets: np.ndarray | None = None
        self._senders: list[int] | None = None

    def targets(self) -> np.ndarray:
        if self._targets is None:
            self._targets = np.array(sorted(self.joined), dtype=np.int64)
        return self._targets

    def senders(self, paused_until: list[float], now: float) -> list[int]:
        if self._senders is None:
            self._senders = [n for n in sorted(self.joined) if paused_until[n] <= now]
        return self._senders

    def changed(self) -> None:
        self._targets = self._senders = None


def _identity(node_id: int) -> int:
    return node_id


class Simulator:
    """Owns the nodes, the network, the heap and the trace of one run."""

    def __init__(self, scenario: Scenario, out: Path, net_bucket: float = 1.0, worker: int = 0,
                 workers: int = 1) -> None:
        if not (net_bucket > 0 and scenario.duration / net_bucket <= MAX_BUCKETS):
            raise UsageError(f"--net-bucket must be > 0 and at most {MAX_BUCKETS} buckets per run, got {net_bucket}")
        count = scenario.nodes
        self.scenario = scenario
        self.worker, self.workers = worker, workers
        self.engine = Engine()
        self.network = Network(scenario.network, scenario.seed, count)
        prefix = f"w{worker}-" if workers > 1 else ""
        self.events = EventsWriter(out / "events", prefix)
        self.net = NetCounters(out / "net", count, prefix=prefix)
        self.stats = StatsWriter(out / "stats", prefix)
        self.net_bucket = net_bucket
        self.bucket_start = 0.0
        self.counters = Counters()
        self.verified = VerifiedMemo()
        """One multicast's datagram object reaches every receiver: its tag is checked once."""
        self.nodes: list[Node | None] = [None] * count
        """The Node of each node this worker owns that is up; None otherwise."""
        self.up = [False] * count
        """Which nodes are up (every node, owned or not: the scenario decides)."""
        self.outbox: list[list[tuple[float, int, int, tuple[int, bytes, str, int]]]] = [[] for _ in range(workers)]
        """Per worker, datagrams in flight to its nodes: (arrival time, node,
        its incarnation at send time, packet). Empty with one worker."""
        self.incarnation = [-1] * count
        """Starts of each node minus one; -1: never started."""
        self.timer_at: list[float | None] = [None] * count
        self.clocks = [_node_clock(scenario, node_id) for node_id in range(count)]
        """Per node (offset, rate): its clock reads offset + rate * t at simulated
        time t. Every value handed to or taken from a node is on its own clock."""
        self.paused_until = [0.0] * count
        self.backlog: dict[int, list[tuple[int, bytes, str, int]]] = {}
        self.in_groups = [False] * count
        """Whether the node means to be in its groups (False after a leave)."""
        self.groups = {spec.name: GroupState(i, spec, scenario.seed) for i, spec in enumerate(scenario.groups)}
        self.groups_of: list[list[GroupState]] = [[] for _ in range(count)]
        for group in self.groups.values():
            for member in group.spec.members:
                self.groups_of[member].append(group)
        self._live: np.ndarray | None = None
        self._on_action: dict[type, Callable[[int, Any, float], None]] = {
            Send: self._send, Multicast: self._multicast, Deliver: self._deliver, ViewInstalled: _ignore,
            OptimisticView: _ignore, Rollback: _ignore, NotDelivered: _ignore, TransitionalView: _ignore,
            MemberSuspected: _ignore, MemberBusy: _ignore, CheckHost: _ignore,
        }
        self._dispatch: tuple[Handler, ...] = (self._arrive, self._timer, self._app, self._fault, self._resume,
                                               self._bucket, self._retry)
        self.waiting: dict[tuple[int, str], int] = {}
        """Application sends held back by flow control, per (node, group)."""
        self.retry_at: dict[tuple[int, str], float] = {}

    # ------------------------------------------------------------ running

    def run(self, progress: Callable[[float], None] | None = None) -> None:
        """Start the nodes, run to the scenario's duration, close the trace."""
        self.start()
        self.advance(self.scenario.duration, progress)
        self.finish()

    def start(self) -> None:
        """Start the nodes and put the scenario's fixed events on the heap."""
        with self._bugs_reported(), no_collections():
            start_run(self)

    def advance(self, until: float, progress: Callable[[float], None] | None = None) -> None:
        """Run every event at or before ``until``."""
        with self.running() as advance:
            advance(until, progress)

    @contextmanager
    def running(self) -> Iterator[Advance]:
        """``advance`` without its set-up (bug reports, the collector off) at
        each call: for the thousands of short windows of a parallel run."""
        with self._bugs_reported(), no_collections():
            engine, dispatch = self.engine, self._dispatch

            def advance(until: float, progress: Callable[[float], None] | None = None) -> None:
                engine.run(until, dispatch, progress)

            yield advance

    def finish(self) -> None:
        """Close the trace. The handler tables (bound methods: a reference
        cycle through the simulator) go, so that reference counting frees a
        finished run at once: left to the cyclic collector, the gigabytes of
        a 10,000-node run were walked once more at exit, a minute."""
        self.events.close()
        self.net.close(self.bucket_start)
        self.stats.close()
        self._dispatch = ()
        self._on_action = {}

    def totals(self) -> RunTotals:
        """This simulator's figures, once ``finish``ed."""
        stats = [node.statistics() for node in self.nodes if node is not None]
        return RunTotals(
            self.counters, self.engine.events, self.events.rows, Counter(self.events.kinds), self.net.rows,
            repaired_by_nack=sum(s.repaired_by_nack for s in stats),
            repaired_by_gossip=sum(s.repaired_by_gossip for s in stats),
            retransmissions=sum(s.retransmissions for s in stats),
            nacks=sum(s.nacks_sent for s in stats),
            peak_buffered=max((s.peak_buffered for s in stats), default=0),
            peak_rss_bytes=peak_rss_bytes(),
        )

    @contextmanager
    def _bugs_reported(self) -> Iterator[None]:
        try:
            yield
        except UsageError:
            raise
        except Exception as exc:
            scenario, t = self.scenario, self.engine.now
            raise SimulationBug(
                f"simulation bug at t={t:.6f} (seed {scenario.seed}): {type(exc).__name__}: {exc}",
                scenario.seed, t, scenario.replay_command(),
            ) from exc

    def owns(self, node_id: int) -> bool:
        return node_id % self.workers == self.worker

    def new_node(self, node_id: int) -> Node | None:
        """The next incarnation of ``node_id``: a fresh Node if this worker
        owns it (None if another does)."""
        incarnation = self.incarnation[node_id] + 1
        self.incarnation[node_id] = incarnation
        self.up[node_id] = True
        self.timer_at[node_id] = None
        self._live = None
        if not self.owns(node_id):
            return None
        rng = random.Random(f"{self.scenario.seed}:{node_id}:{incarnation}")
        node = Node(node_id, self.scenario.config, rng, resolve=_identity, trace=True, incarnation=incarnation,
                    now=self.local(node_id, self.engine.now), verified_memo=self.verified)
        self.nodes[node_id] = node
        return node

    def apply(self, node_id: int, actions: list[Any], now: float) -> None:
        """Carry out what a node asked for, then re-arm its timer."""
        add = self.events.add
        on_action = self._on_action
        for action in actions:
            if type(action) is TraceEvent:
                add(now, node_id, action)
            else:
                on_action[type(action)](node_id, action, now)
        self.rearm(node_id, now)

    def local(self, node_id: int, t: float) -> float:
        """Simulated time ``t`` on ``node_id``'s clock."""
        offset, rate = self.clocks[node_id]
        return offset + rate * t

    def simulated(self, node_id: int, local: float) -> float:
        """The first simulated time at which ``node_id``'s clock reads ``local``
        or later (rounding must never fire a timer before it is due: the
        node would do nothing and ask for the same instant again)."""
        offset, rate = self.clocks[node_id]
        t = (local - offset) / rate
        while offset + rate * t < local:
            t = math.nextafter(t, math.inf)
        return t

    def rearm(self, node_id: int, now: float) -> None:
        node = self.nodes[node_id]
        local_deadline = node.next_deadline() if node is not None else None
        if local_deadline is None:
            self.timer_at[node_id] = None
            return
        deadline = self.simulated(node_id, local_deadline)
        if deadline < now:
            deadline = now
        if deadline != self.timer_at[node_id]:
            self.timer_at[node_id] = deadline
            self.engine.schedule(deadline, TIMER, node_id, self.incarnation[node_id])

    def live_nodes(self) -> np.ndarray:
        """Every node that is up: the listeners of a group-less multicast."""
        if self._live is None:
            self._live = np.array([i for i, up in enumerate(self.up) if up], dtype=np.int64)
        return self._live

    def membership_changed(self) -> None:
        self._live = None
        for group in self.groups.values():
            group.changed()

    # ------------------------------------------------------------ events

    def _arrive(self, t: float, dst: int, incarnation: int, packet: tuple[int, bytes, str, int]) -> None:
        node = self.nodes[dst]
        if node is None or self.incarnation[dst] != incarnation:
            self.net.lost([dst], packet[2])  # in flight to a node that crashed
            self.counters.lost += 1
            return
        self.net.received(dst, packet[2], packet[3])
        if self.paused_until[dst] > t:
            self.backlog.setdefault(dst, []).append(packet)
            return
        self.apply(dst, node.handle_datagram(packet[0], packet[1], self.local(dst, t)), t)

    def _timer(self, t: float, node_id: int, incarnation: int, _: Any) -> None:
        node = self.nodes[node_id]
        if node is None or incarnation != self.incarnation[node_id] or self.timer_at[node_id] != t:
            return  # stale: moved, or the node crashed
        self.timer_at[node_id] = None
        if self.paused_until[node_id] > t:
            return  # fires late: _resume re-arms it
        self.apply(node_id, node.handle_timeout(self.local(node_id, t)), t)

    def _app(self, t: float, _: int, group: GroupState, __: Any) -> None:
        self.engine.schedule(t + group.rng.expovariate(group.spec.rate), APP, -1, group)
        senders = group.senders(self.paused_until, t)
        if not senders:
            return
        src = senders[group.rng.randrange(len(senders))]
        assert self.up[src], "a sender must be up"
        if self.owns(src):
            self._send_or_hold(src, group, t, 1)

    def _send_or_hold(self, node_id: int, group: GroupState, t: float, new: int) -> None:
        """Send what flow control allows now; hold the rest and retry when the
        node says it may send (or, with a full window, after a gossip interval)."""
        key = (node_id, group.spec.name)
        waiting = self.waiting.pop(key, 0) + new
        node = self.nodes[node_id]
        ready: float | None = t
        while waiting and node is not None and group.spec.name in node.groups:
            local_now = self.local(node_id, t)
            local_ready = node.send_ready_at(group.spec.name, local_now)
            ready = None if local_ready is None else t if local_ready <= local_now else \
                self.simulated(node_id, local_ready)
            if ready is None or ready > t:
                break
            self.counters.sends += 1
            self.counters.expected += len(group.joined)
            self.apply(node_id, node.multicast(group.spec.name, group.payload, local_now), t)
            waiting -= 1
        if not waiting:
            return
        if node is None or group.spec.name not in node.groups:
            self.counters.abandoned += waiting
            return
        self.counters.held += new
        self.waiting[key] = waiting
        retry = ready if ready is not None else t + self.scenario.config.gossip_interval
        if key not in self.retry_at or retry < self.retry_at[key]:
            self.retry_at[key] = retry
            self.engine.schedule(retry, RETRY, node_id, group)

    def _retry(self, t: float, node_id: int, group: GroupState, _: Any) -> None:
        key = (node_id, group.spec.name)
        if self.retry_at.get(key) != t:
            return  # stale: an earlier retry was scheduled since
        del self.retry_at[key]
        self._send_or_hold(node_id, group, t, 0)

    def _fault(self, t: float, _: int, fault: Any, __: Any) -> None:
        FAULT_HANDLERS[fault.action](self, fault, t)

    def _resume(self, t: float, node_id: int, incarnation: int, _: Any) -> None:
        if incarnation != self.incarnation[node_id] or self.paused_until[node_id] != t:
            return
        self.paused_until[node_id] = 0.0
        self.membership_changed()  # the node may send again (every worker: it may be drawn as a sender)
        node = self.nodes[node_id]
        if node is None:
            return  # another worker's node
        self.timer_at[node_id] = None  # an overdue timer is re-armed at t, after the backlog
        for src, data, _label, _size in self.backlog.pop(node_id, ()):
            self.apply(node_id, node.handle_datagram(src, data, self.local(node_id, t)), t)
        self.rearm(node_id, t)

    def _bucket(self, t: float, _: int, start: float, __: Any) -> None:
        self.net.roll(start)
        self.bucket_start = t
        for node_id, node in enumerate(self.nodes):
            if node is not None:
                for name in node.groups:
                    self.stats.add(t, node_id, name, *node.occupancy(name))

    # ------------------------------------------------------------ actions

    def _send(self, src: int, action: Send, now: float) -> None:
        dst, data, label = action.dst, action.data, action.msg_type.label
        size = len(data)
        self.net.sent(src, label, size)
        self.counters.datagrams += 1
        if not (type(dst) is int and 0 <= dst < len(self.nodes)):
            raise RuntimeError(f"node {src} sent to {dst!r}, which is not a node id")
        delays = self.network.unicast(src, dst) if self.up[dst] else []
        if not delays:
            self.net.lost([dst], label)
            self.counters.lost += 1
            return
        packet = (src, data, label, size)
        for delay in delays:
            if self.owns(dst):
                self.engine.schedule(now + delay, ARRIVE, dst, self.incarnation[dst], packet)
            else:
                self.outbox[dst % self.workers].append((now + delay, dst, self.incarnation[dst], packet))

    def _multicast(self, src: int, action: Multicast, now: float) -> None:
        data, label = action.data, action.msg_type.label
        size = len(data)
        self.net.sent(src, label, size)
        self.counters.datagrams += 1
        targets = self.live_nodes() if action.group is None else self.groups[action.group].targets()
        receivers, delays, lost = self.network.fan_out(src, targets)
        if lost:
            self.net.lost(lost, label)
            self.counters.lost += len(lost)
        packet = (src, data, label, size)
        engine = self.engine
        heap, tie, incarnation = engine.heap, engine.tie, self.incarnation
        if self.workers == 1:
            for dst, delay in zip(receivers, delays):
                tie += 1
                heappush(heap, (now + delay, tie, ARRIVE, dst, incarnation[dst], packet))
        else:
            workers, worker, outbox = self.workers, self.worker, self.outbox
            for dst, delay in zip(receivers, delays):
                if dst % workers == worker:
                    tie += 1
                    heappush(heap, (now + delay, tie, ARRIVE, dst, incarnation[dst], packet))
                else:
                    outbox[dst % workers].append((now + delay, dst, incarnation[dst], packet))
        engine.tie = tie

    def _deliver(self, node_id: int, action: Deliver, now: float) -> None:
        if action.dest is None:
            self.counters.deliveries += 1
        else:
            self.counters.unicast_deliveries += 1


@contextmanager
def no_collections() -> Iterator[None]:
    """A run allocates millions of short-lived tuples and messages and makes
    no reference cycles: the protocol objects hold none (a node dropped from
    a 3-node group leaves 0 objects for the collector), and after a
    2,000-node, 10-second run with the collector off, ``gc.collect()`` found
    33 unreachable objects. Its passes over the young objects still took a
    twentieth of a 2,000-node run and a thirteenth of a 10,000-node one
    (py-spy): it is off while the simulation runs; reference counting frees
    everything."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def peak_rss_bytes() -> int:
    """This process's peak resident memory (Linux reports kilobytes)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _ignore(node_id: int, action: Any, now: float) -> None:
    """Views are traced by the node itself."""


def _node_clock(scenario: Scenario, node_id: int) -> tuple[float, float]:
    """A node's clock (offset, rate), drawn from the scenario seed: the host's
    clock, kept across the node's restarts."""
    rng = random.Random(f"{scenario.seed}:clock:{node_id}")
    net = scenario.network
    return rng.uniform(0.0, net.clock_offset_s), 1.0 + rng.uniform(-1.0, 1.0) * net.clock_drift_ppm * 1e-6
