"""The in-memory network for sans-I/O tests: real ``sgcs.node.Node`` objects,
no sockets, no real time.

The test plays the driver: addresses are node ids, a ``Multicast`` reaches
every other node on the network, a ``Send`` its ``dst``. Datagrams wait in
``in_flight`` until the test delivers them (in any order), drops or
duplicates them; a paused node receives nothing and fires no timer until it
resumes; a crashed node is gone, with everything addressed to it.
``run`` is the lossless case: deliver everything at once and step the clock,
firing timers, until a given time.

The model is memberlist's mock network (a transport the test controls). It
is meant to become the one network of every sans-I/O test and of the fuzzer
(issue 21, point 3); ``tests/test_node.py`` uses it so far."""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from sgcs.actions import Multicast, Send
from sgcs.node import Node


@dataclass(frozen=True)
class Datagram:
    """One datagram in flight from ``src`` to ``dst``."""

    src: int
    dst: int
    data: bytes


@dataclass
class MemoryNetwork:
    nodes: dict[int, Node]
    """The live nodes by id (the dict is the caller's: adding or deleting a
    node there adds it to or takes it off the network)."""
    now: float = 0.0
    log: list[tuple[int, Any]] = field(default_factory=list)
    """(node id, action) for every action any node produced, in the order the
    network took them."""
    in_flight: list[Datagram] = field(default_factory=list)
    paused: set[int] = field(default_factory=set)

    @property
    def seen(self) -> list[Any]:
        """Every action any node produced, in the order the network took them."""
        return [action for _, action in self.log]

    def actions_of(self, node_id: int, since: int = 0) -> list[Any]:
        """The actions of ``node_id`` from ``log[since:]``."""
        return [action for src, action in self.log[since:] if src == node_id]

    # ------------------------------------------------------------ output of the nodes

    def submit(self, src: int, actions: Iterable[Any]) -> None:
        """Take ``src``'s actions: record them, and put their datagrams in flight."""
        for action in actions:
            self.log.append((src, action))
            if isinstance(action, Multicast):
                targets = [n for n in sorted(self.nodes) if n != src]
            elif isinstance(action, Send):
                targets = [action.dst] if action.dst in self.nodes else []
            else:
                continue
            self.in_flight += [Datagram(src, dst, action.data) for dst in targets]

    # ------------------------------------------------------------ faults, one datagram at a time

    def deliver(self, index: int = 0) -> None:
        """Hand in-flight datagram ``index`` to its node (held while that node is
        paused, gone when it crashed)."""
        datagram = self.in_flight[index]
        if datagram.dst in self.paused:
            return
        del self.in_flight[index]
        node = self.nodes.get(datagram.dst)
        if node is not None:
            self.submit(datagram.dst, node.handle_datagram(datagram.src, datagram.data, self.now))

    def drop(self, index: int = 0) -> Datagram:
        return self.in_flight.pop(index)

    def duplicate(self, index: int = 0) -> None:
        self.in_flight.append(self.in_flight[index])

    def reorder(self, rng: random.Random) -> None:
        rng.shuffle(self.in_flight)

    def pause(self, node_id: int) -> None:
        self.paused.add(node_id)

    def resume(self, node_id: int) -> None:
        self.paused.discard(node_id)

    def crash(self, node_id: int) -> None:
        """``node_id`` stops at once: it leaves the network with its state and
        every datagram addressed to it."""
        del self.nodes[node_id]
        self.paused.discard(node_id)
        self.in_flight = [d for d in self.in_flight if d.dst != node_id]

    # ------------------------------------------------------------ time

    def fire_timers(self) -> None:
        for node_id, node in sorted(self.nodes.items()):
            if node_id in self.paused:
                continue
            deadline = node.next_deadline()
            if deadline is not None and deadline <= self.now:
                self.submit(node_id, node.handle_timeout(self.now))

    def flush(self) -> None:
        """Deliver datagrams oldest first until only those held by paused nodes remain."""
        index = 0
        while index < len(self.in_flight):
            if self.in_flight[index].dst in self.paused:
                index += 1
            else:
                self.deliver(index)

    def run(self, until: float, step: float = 0.01) -> None:
        """Lossless: deliver everything, then move the clock by ``step`` and fire
        due timers, until ``until``."""
        while True:
            self.flush()
            if self.now >= until:
                return
            self.now = round(self.now + step, 6)
            self.fire_timers()
