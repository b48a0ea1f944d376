"""The shared in-memory network (tests/_memnet.py) does what each fault says,
on real nodes: a dropped datagram is repaired, a duplicate delivered once,
a reordered burst delivered in order, a paused node hears and fires nothing
until it resumes, a crashed node is excluded by the others; a tap can record,
alter and lose datagrams; a timed pause ends by itself; a send to a crashed
node is refused, or, with stale datagrams, reaches its next incarnation."""

from __future__ import annotations

import random

import pytest

from sgcs.actions import Deliver, Send, TraceEvent, ViewInstalled
from sgcs.config import Config
from sgcs.node import Node
from sgcs.wire import MsgType

from _memnet import Datagram, MemoryNetwork, losing, recording

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


def test_a_tap_records_alters_and_loses_datagrams() -> None:
    net, a, b = two_members()
    start, carried = len(net.log), list[Datagram]()
    record = recording(carried)
    net.tap = lambda d: record(d._replace(data=d.data[:-1] + bytes([d.data[-1] ^ 1])))  # a flipped tag bit
    send(net, a, [b"forged"])
    net.flush()
    assert len(carried) == 1 and b.statistics().drop_reasons == {"mac": 1}
    net.tap = losing(lambda d: (d.src, d.dst) == (1, 2))  # the link 1 -> 2 loses everything
    send(net, a, [b"lost"])
    net.flush()
    assert delivered_at(net, b, [b"forged", b"lost"], start) == [] and not net.in_flight
    net.tap = None
    net.run(1.0)
    assert delivered_at(net, b, [b"forged", b"lost"], start) == [b"forged", b"lost"]  # NACK repair


def test_a_timed_pause_ends_by_itself_and_the_backlog_arrives_after_latency() -> None:
    net, a, b = two_members()
    start = len(net.log)
    net.pause(2, 0.5)
    send(net, a, [b"held"])
    net.run_events(net.now + 0.4, latency=0.001)
    assert delivered_at(net, b, [b"held"], start) == [] and net.in_flight and net.is_paused(2)
    net.run_events(net.now + 0.2, latency=0.001)
    assert delivered_at(net, b, [b"held"], start) == [b"held"] and not net.is_paused(2)


@pytest.mark.parametrize("stale", [False, True], ids=["refused", "stale"])
def test_a_send_to_a_crashed_node_is_refused_or_waits_for_its_restart(stale: bool) -> None:
    net, a, b = two_members()
    net.stale_datagrams = stale
    net.crash(2)
    net.submit(1, [Send(2, b"x", MsgType.DATA)])
    if not stale:
        assert net.refused == [Datagram(1, 2, b"x")] and not net.in_flight
        start = len(net.log)
        net.refuse(0)
        suspicions = [e for e in net.actions_of(1, start) if isinstance(e, TraceEvent) and e.kind == "suspect"]
        assert not net.refused and [e.target for e in suspicions] == [2], "the refusal reached 1's detector"
        return
    assert net.in_flight == [Datagram(1, 2, b"x")] and not net.refused
    net.restart(2, Node(2, CONFIG, random.Random(9), resolve=lambda n: n, trace=True, incarnation=1))
    net.deliver(0)
    assert net.nodes[2].statistics().dropped == 1, "the new incarnation heard its former self's datagram"
