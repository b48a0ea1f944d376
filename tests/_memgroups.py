"""Real sans-I/O nodes (``sgcs.node.Node``) on the in-memory network
(``tests/_memnet.py``) behind the small part of ``sgcs.NodeHandle`` and
``GroupHandle`` that the services use (``join``; ``node_id``, ``send``,
iteration), for service tests that partition and heal a group in simulated
time. ``run_network`` delivers datagrams and fires timers only once every trio
task is blocked, so the services see each event before the clock moves."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import trio
import trio.testing

import sgcs
from _memnet import Datagram, MemoryNetwork, losing
from sgcs.actions import MessageId
from sgcs.api import _event_of
from sgcs.errors import WouldBlock
from sgcs.io.trio_driver import _COUNTED_EVENTS as APP_EVENTS
from sgcs.node import Node

SIMULATED_LIMIT = 60.0
"""Simulated seconds a scenario may take; beyond, the network task fails the test."""


class MemNode:
    """What ``attach`` uses of an ``sgcs.NodeHandle``, over one sans-I/O node of ``net``."""

    def __init__(self, net: MemoryNetwork[Node], node: Node) -> None:
        self.net, self.node = net, node
        self.group: MemGroup | None = None

    @property
    def id(self) -> int:
        return self.node.id

    @asynccontextmanager
    async def join(self, name: str, *, order: sgcs.Order) -> AsyncIterator[MemGroup]:
        group = self.group = MemGroup(self, name)
        self.net.submit(self.id, self.node.join(name, self.net.now, order=order))
        try:
            yield group
        finally:
            self.net.submit(self.id, self.node.leave(name, self.net.now))
            group.events_in.close()
            self.group = None


class MemGroup:
    """What a ``Module`` uses of an ``sgcs.GroupHandle``: ``node_id``, ``send``, iteration, ``receive_many``."""

    def __init__(self, owner: MemNode, name: str) -> None:
        self.owner, self.name = owner, name
        self.events_in, self.events_out = trio.open_memory_channel[Any](math.inf)
        self.hold: Callable[[Any], bool] | None = None
        """Events it picks wait in ``held`` (a late unicast) until ``release``."""
        self.held: list[Any] = []

    def give(self, event: Any) -> None:
        if self.hold is not None and self.hold(event):
            self.held.append(event)
        else:
            self.events_in.send_nowait(event)

    def release(self) -> None:
        self.hold = None
        for event in self.held:
            self.events_in.send_nowait(event)
        self.held = []

    @property
    def node_id(self) -> int:
        return self.owner.id

    async def send(self, payload: bytes, *, to: int | None = None) -> MessageId | None:
        await trio.lowlevel.checkpoint()
        net, node = self.owner.net, self.owner.node
        if to is None:
            while True:
                try:
                    net.submit(node.id, node.multicast(self.name, payload, net.now))
                    return node.last_sent
                except WouldBlock:  # the window is full: let the network run, as block=True waits
                    await trio.sleep(0.001)
        net.submit(node.id, node.unicast(self.name, to, payload, net.now))
        return None

    async def send_many(self, payloads: list[bytes]) -> list[MessageId | None]:
        return [await self.send(payload) for payload in payloads]

    def __aiter__(self) -> AsyncIterator[Any]:
        return self.events_out.__aiter__()

    async def receive_many(self) -> list[Any]:
        """As ``GroupHandle.receive_many``: waits for one event, then takes every one queued."""
        events = [await self.events_out.receive()]
        while True:
            try:
                events.append(self.events_out.receive_nowait())
            except trio.WouldBlock:
                return events


def route_to_groups(nodes: dict[int, MemNode]) -> Callable[[Any, Any], None]:
    """The network's observer: hands each node's application events to its group, as the public API would."""

    def observe(src: Any, action: Any) -> None:
        group = nodes[src].group if src in nodes else None
        if group is not None and isinstance(action, APP_EVENTS):
            group.give(_event_of(action))

    return observe


async def run_network(net: MemoryNetwork[Node], limit: float = SIMULATED_LIMIT) -> None:
    """Deliver and tick only when every other task waits: the modules act on each event at once."""
    while True:
        await trio.testing.wait_all_tasks_blocked()
        if net.in_flight:
            net.flush()
            continue
        if net.now >= limit:
            raise AssertionError(f"the scenario did not settle within {limit} simulated seconds")
        net.advance_to_deadline(0.05)


def partition(sides: list[set[int]]) -> Callable[[Datagram], Datagram | None]:
    side_of = {member: index for index, side in enumerate(sides) for member in side}
    return losing(lambda datagram: side_of[datagram.src] != side_of[datagram.dst])


async def until(net: MemoryNetwork[Node], predicate: Callable[[], bool], what: str, within: float = 20.0) -> None:
    """Wait while the network runs until ``predicate`` holds; fail saying ``what``
    did not happen within ``within`` simulated seconds."""
    deadline = net.now + within
    while not predicate():
        if net.now > deadline:
            raise AssertionError(f"{what}: not within {within} simulated seconds")
        await trio.testing.wait_all_tasks_blocked()


