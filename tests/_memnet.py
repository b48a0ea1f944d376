"""The in-memory network of every sans-I/O test and of the fuzzer: real
endpoints (``sgcs.node.Node``, or one protocol layer behind a small adapter),
no sockets, no real time.

The test plays the driver. Addresses are whatever the endpoints use (node ids
in most tests); the network routes what an endpoint emits (``fan_out``): a
``Multicast`` reaches every other live node that joined its group (every
other live node when it names none), a ``Send`` its ``dst``. Datagrams wait
in ``in_flight`` until the test delivers them (in any order, maybe keeping a
copy), drops, duplicates or reorders them. A paused node receives nothing and
fires no timer until it resumes (or its pause runs out); its datagrams are
held, not lost. A crashed node is gone with its state: by default with the
datagrams in flight to it, and a ``Send`` to it comes back as a refusal
(``refused``, the "port unreachable" a driver reports); with
``stale_datagrams`` its port stays open, and what was in flight to it reaches
its next incarnation. ``tap`` sees every datagram the network hands over and
may change or lose it (per-link loss, recording, corruption).

Time moves only when the test says: ``advance`` (fixed jumps), ``run`` (the
lossless case in fixed steps), ``run_events`` (the clock goes from event to
event, each datagram arriving ``latency`` after it was sent).

Layer-level tests (one ``ReliableStream``, one ``OrderingLayer``) put an
adapter with ``handle_datagram``/``handle_timeout``/``next_deadline`` on the
network and override ``fan_out`` to address what that layer emits.

The model is memberlist's mock network (a transport the test controls)."""

from __future__ import annotations

import math
import random
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Generic, NamedTuple, Protocol, TypeAlias, TypeVar

from sgcs.actions import Multicast, Send

Address: TypeAlias = Any
"""A node's address on the network: an int node id in most tests, anything
hashable and sortable (the fuzzer's ``("peer", n)``)."""


class Datagram(NamedTuple):
    """One datagram in flight from ``src`` to ``dst``. ``data`` is bytes between
    nodes, a layer's output object between layer adapters."""

    src: Address
    dst: Address
    data: Any


class Endpoint(Protocol):
    """What the network drives: ``sgcs.node.Node``, or a layer's adapter."""

    def handle_datagram(self, src: Address, data: Any, now: float) -> list[Any]: ...

    def handle_timeout(self, now: float) -> list[Any]: ...

    def next_deadline(self) -> float | None: ...


E = TypeVar("E", bound=Endpoint)

Tap = Callable[[Datagram], "Datagram | None"]
"""Sees a datagram as the network hands it over: returns it (maybe altered) or None (lost)."""


def recording(into: list[Datagram]) -> Tap:
    """A tap that keeps a copy of every datagram handed over in ``into``."""

    def tap(datagram: Datagram) -> Datagram:
        into.append(datagram)
        return datagram

    return tap


def losing(lost: Callable[[Datagram], bool]) -> Tap:
    """A tap that loses the datagrams ``lost`` picks (per link, per type, ...)."""
    return lambda datagram: None if lost(datagram) else datagram


@dataclass
class MemoryNetwork(Generic[E]):
    nodes: dict[Address, E]
    """The live endpoints by address (the dict may be the caller's: adding or
    deleting one there adds it to or takes it off the network)."""
    now: float = 0.0
    stale_datagrams: bool = False
    """A crashed node's port stays open: datagrams in flight to it (and sent to
    it while it is down) wait, and reach it if it restarts; delivered while it
    is down, they are lost. False: a crash loses them, and a ``Send`` to a
    crashed node is refused (``refused``)."""
    tap: Tap | None = None
    observer: Callable[[Address, Any], None] | None = None
    """Called with (node, action) for every action any node produced, as the
    network takes it (before routing it)."""
    log: list[tuple[Address, Any]] = field(default_factory=list)
    """(node, action) for every action any node produced, in the order the
    network took them."""
    in_flight: list[Datagram] = field(default_factory=list)
    paused_until: dict[Address, float] = field(default_factory=dict)
    crashed: set[Address] = field(default_factory=set)
    refused: list[Datagram] = field(default_factory=list)
    """Sends to a crashed node, each an ICMP refusal the test may report (``refuse``)."""

    @property
    def seen(self) -> list[Any]:
        """Every action any node produced, in the order the network took them."""
        return [action for _, action in self.log]

    def actions_of(self, node_id: Address, since: int = 0) -> list[Any]:
        """The actions of ``node_id`` from ``log[since:]``."""
        return [action for src, action in self.log[since:] if src == node_id]

    # ------------------------------------------------------------ output of the nodes

    def submit(self, src: Address, actions: Iterable[Any]) -> None:
        """Take ``src``'s actions: record them, and put their datagrams in flight."""
        for action in actions:
            self.log.append((src, action))
            if self.observer is not None:
                self.observer(src, action)
            for datagram in self.fan_out(src, action):
                if datagram.dst in self.nodes or self.stale_datagrams and datagram.dst in self.crashed:
                    self.in_flight.append(datagram)
                elif datagram.dst in self.crashed:
                    self.refused.append(datagram)

    def fan_out(self, src: Address, action: Any) -> list[Datagram]:
        """The datagrams ``action`` sends (none for an action that is no send).
        Override it for endpoints that emit something else than ``Multicast`` and ``Send``."""
        if isinstance(action, Multicast):
            return self.to_others(src, action.data, action.group)
        if isinstance(action, Send):
            return [Datagram(src, action.dst, action.data)]
        return []

    def to_others(self, src: Address, data: Any, group: str | None = None) -> list[Datagram]:
        """``data`` to every other live node (that joined ``group``, if given), in address order."""
        return [Datagram(src, dst, data) for dst in sorted(self.nodes)
                if dst != src and (group is None or group in getattr(self.nodes[dst], "groups", ()))]

    def inject(self, datagram: Datagram) -> None:
        """Hand ``datagram`` to its node at once, past ``in_flight`` and the tap
        (a replay, a forgery, a fuzzed datagram); nothing if the node is not live."""
        node = self.nodes.get(datagram.dst)
        if node is not None:
            self.submit(datagram.dst, node.handle_datagram(datagram.src, datagram.data, self.now))

    def _carry(self, datagram: Datagram) -> None:
        """The network hands ``datagram`` over, through the tap."""
        carried = datagram if self.tap is None else self.tap(datagram)
        if carried is not None:
            self.inject(carried)

    # ------------------------------------------------------------ faults, one datagram at a time

    def deliver(self, index: int = 0, keep_copy: bool = False) -> None:
        """Hand in-flight datagram ``index`` to its node (held while that node is
        paused, lost when it is down); ``keep_copy`` leaves a copy in flight
        where it was (a duplicate, to be delivered or lost later)."""
        datagram = self.in_flight[index]
        if self.is_paused(datagram.dst):
            return
        if not keep_copy:
            del self.in_flight[index]
        if datagram.dst in self.nodes:
            self._carry(datagram)

    def deliver_all(self, order: Iterable[int]) -> None:
        """The datagrams now in flight arrive in ``order`` (indices into
        ``in_flight``; one left out is lost); those to paused nodes wait."""
        batch, self.in_flight = self.in_flight, []
        for index in order:
            datagram = batch[index]
            if self.is_paused(datagram.dst):
                self.in_flight.append(datagram)
            elif datagram.dst in self.nodes:
                self._carry(datagram)

    def drop(self, index: int = 0) -> Datagram:
        return self.in_flight.pop(index)

    def duplicate(self, index: int = 0) -> None:
        self.in_flight.append(self.in_flight[index])

    def reorder(self, rng: random.Random) -> None:
        rng.shuffle(self.in_flight)

    def indices(self, where: Callable[[Datagram], bool]) -> list[int]:
        """The positions in ``in_flight`` of the datagrams ``where`` picks, oldest first."""
        return [i for i, datagram in enumerate(self.in_flight) if where(datagram)]

    def pause(self, node_id: Address, duration: float = math.inf) -> None:
        """A stopped process (SIGSTOP): its datagrams wait, its timers stand
        still, until ``resume`` or for ``duration`` seconds."""
        self.paused_until[node_id] = self.now + duration

    def resume(self, node_id: Address) -> None:
        self.paused_until.pop(node_id, None)

    def is_paused(self, node_id: Address) -> bool:
        return self.paused_until.get(node_id, 0.0) > self.now

    def crash(self, node_id: Address) -> None:
        """``node_id`` stops at once: it leaves the network with its state (and,
        unless ``stale_datagrams``, every datagram addressed to it)."""
        del self.nodes[node_id]
        self.crashed.add(node_id)
        self.paused_until.pop(node_id, None)
        if not self.stale_datagrams:
            self.in_flight = [d for d in self.in_flight if d.dst != node_id]

    def restart(self, node_id: Address, node: E) -> None:
        """A crashed (or new) node comes up at ``node_id`` with fresh state ``node``."""
        self.crashed.discard(node_id)
        self.paused_until.pop(node_id, None)
        self.nodes[node_id] = node

    def refuse(self, index: int) -> None:
        """Report refusal ``index`` ("port unreachable") to the node that sent it, if it runs."""
        datagram = self.refused.pop(index)
        node = self.nodes.get(datagram.src)
        if node is not None and not self.is_paused(datagram.src):
            self.submit(datagram.src, node.handle_unreachable(datagram.dst, self.now))  # type: ignore[attr-defined]

    # ------------------------------------------------------------ time

    def runnable(self) -> list[Address]:
        """The live nodes that are not paused, in address order."""
        return [n for n in sorted(self.nodes) if not self.is_paused(n)]

    def deadlines(self) -> list[float]:
        """When something happens next: the runnable nodes' timers, and the ends of pauses."""
        deadlines = [self.nodes[n].next_deadline() for n in self.runnable()]
        resumes = [t for n, t in self.paused_until.items() if n in self.nodes and t > self.now]
        return [d for d in deadlines if d is not None] + resumes

    def fire_timers(self) -> None:
        """Every runnable node whose deadline has come runs its timers, once."""
        for node_id in self.runnable():
            node = self.nodes[node_id]
            deadline = node.next_deadline()
            if deadline is not None and deadline <= self.now:
                self.submit(node_id, node.handle_timeout(self.now))

    def advance(self, step: float) -> None:
        """The clock jumps by ``step``; each overdue node runs its timers once, late."""
        self.now += step
        self.fire_timers()

    def advance_to_deadline(self, limit: float = 1.0) -> None:
        """The clock moves to the earliest deadline (at most ``limit`` on), and due timers fire."""
        self.now = min([self.now + limit, *(d for d in self.deadlines() if d > self.now)])
        self.fire_timers()

    def flush(self, only: Callable[[Datagram], bool] | None = None) -> None:
        """Deliver datagrams oldest first (those ``only`` picks, if given, and
        those they cause) until only those held by paused nodes remain."""
        index = 0
        while index < len(self.in_flight):
            datagram = self.in_flight[index]
            if self.is_paused(datagram.dst) or only is not None and not only(datagram):
                index += 1
            else:
                self.deliver(index)

    def run(self, until: float, step: float = 0.01) -> None:
        """Lossless in fixed steps: deliver everything, then move the clock by
        ``step`` and fire due timers, until ``until``."""
        while True:
            self.flush()
            if self.now >= until:
                return
            self.now = round(self.now + step, 6)
            self.fire_timers()

    def run_events(self, until: float, latency: float = 0.0) -> None:
        """From event to event until ``until``: every datagram arrives ``latency``
        after it was sent, in the order sent (through the tap); timers fire on
        time; a paused node gets its backlog when it resumes. What is still in
        flight at the end stays in flight."""
        arriving: deque[tuple[float, Datagram]] = deque((self.now, d) for d in self.in_flight)
        self.in_flight = []
        backlog: list[tuple[float, Datagram]] = []
        for _ in range(1_000_000):
            resumed = next((i for i, (_, d) in enumerate(backlog) if not self.is_paused(d.dst)), None)
            if resumed is not None:
                arriving.appendleft(backlog.pop(resumed))
            next_arrival = arriving[0][0] if arriving else math.inf
            next_timer = min(self.deadlines(), default=math.inf)
            if min(next_arrival, next_timer) > until:
                break
            self.now = max(self.now, min(next_arrival, next_timer))
            if next_arrival <= next_timer:
                _, datagram = arriving.popleft()
                if datagram.dst in self.nodes and self.is_paused(datagram.dst):
                    backlog.append((self.now, datagram))
                elif datagram.dst in self.nodes:
                    self._carry(datagram)
            else:
                self.fire_timers()
            arriving.extend((self.now + latency, d) for d in self.in_flight)
            self.in_flight = []
        else:
            raise AssertionError(f"no progress at t={self.now}: a timer or datagram loop")
        self.now = until
        self.in_flight = [d for _, d in [*backlog, *arriving]]

