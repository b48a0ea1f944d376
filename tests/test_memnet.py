"""The shared in-memory network (tests/_memnet.py) does what each fault says,
on real nodes: a dropped datagram is repaired, a duplicate delivered once,
a reordered burst delivered in order, a paused node hears and fires nothing
until it resumes, a crashed node is excluded by the others."""

from __future__ import annotations

import random

from sgcs.actions import Deliver, ViewInstalled
from sgcs.config import Config
from sgcs.node import Node

from _memnet import MemoryNetwork

CONFIG = Config(secret=b"memnet-test-secret")


def two_members() -> tuple[MemoryNetwork, Node, Node]:
    a, b = (Node(i, CONFIG, random.Random(i), resolve=lambda n: n, trace=True) for i in (1, 2))
    net = MemoryNetwork({1: a, 2: b})
    net.submit(1, a.join("g", 0.0, members=[1, 2]))
    net.submit(2, b.join("g", 0.0, members=[1, 2]))
    net.run(0.1)
    return net, a, b


def delivered_at(net: MemoryNetwork, node: Node, payloads: list[bytes], start: int) -> list[bytes]:
    """Which of ``payloads`` ``node`` delivered since ``log[start]``, in order."""
    return [d.payload for d in net.actions_of(node.id, start) if isinstance(d, Deliver) and d.payload in payloads]


def send(net: MemoryNetwork, node: Node, payloads: list[bytes]) -> None:
    for payload in payloads:
        net.submit(node.id, node.multicast("g", payload, net.now))
        net.submit(node.id, node.handle_timeout(net.now))  # flush the outbox: one datagram each


def test_a_dropped_datagram_is_repaired_and_a_duplicate_delivered_once() -> None:
    net, a, b = two_members()
    start = len(net.log)
    send(net, a, [b"lost", b"2"])
    assert len(net.in_flight) == 2
    net.drop(0)
    net.duplicate(0)
    net.run(1.0)
    assert delivered_at(net, b, [b"lost", b"2"], start) == [b"lost", b"2"]
    assert b.statistics().repaired_by_nack == 1


def test_a_reordered_burst_is_delivered_in_order() -> None:
    net, a, b = two_members()
    start = len(net.log)
    payloads = [b"m%d" % i for i in range(6)]
    send(net, a, payloads)
    net.reorder(random.Random(7))
    net.run(1.0)
    assert delivered_at(net, b, payloads, start) == payloads


def test_a_paused_node_gets_nothing_until_it_resumes() -> None:
    net, a, b = two_members()
    start = len(net.log)
    net.pause(2)
    send(net, a, [b"held"])
    net.run(0.3)
    assert delivered_at(net, b, [b"held"], start) == [] and net.in_flight
    net.resume(2)
    net.run(0.6)
    assert delivered_at(net, b, [b"held"], start) == [b"held"] and not net.in_flight


def test_a_crashed_node_is_excluded_by_the_others() -> None:
    nodes = {i: Node(i, CONFIG, random.Random(i), resolve=lambda n: n, trace=True) for i in (1, 2, 3)}
    net = MemoryNetwork(nodes)
    for i, node in nodes.items():
        net.submit(i, node.join("g", 0.0, members=[1, 2, 3]))
    net.run(0.5)
    net.crash(3)
    assert 3 not in net.nodes
    net.run(8.0)
    assert nodes[1].view("g")[1] == nodes[2].view("g")[1] == (1, 2)
    assert any(isinstance(v, ViewInstalled) and v.members == (1, 2) for v in net.seen)
