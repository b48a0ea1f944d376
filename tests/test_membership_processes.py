"""Group membership with real member processes on loopback.

Eight processes (``tests/membership_peer.py``) join one group by discovery;
the tests then crash one (SIGKILL), freeze one briefly (SIGSTOP for 1 s), and
freeze one for long (SIGSTOP for 10 s), and check the views the others install.
A failing test prints the timeline of every member's views and the harness's
actions. Deadlines are generous so that a loaded machine does not fail them;
the figures themselves come from ``benchmarks/membership_processes.py``.

The last test checks the driver's half of crash detection without processes:
a datagram refused with ICMP "port unreachable" reaches the node and is counted.
"""

from __future__ import annotations

import signal
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

import sgcs
from sgcs.actions import Action, Send
from sgcs.io.sockets import open_sockets
from sgcs.io.trio_driver import TrioDriver
from sgcs.wire import MsgType

from _net import free_udp_ports
from membership_peer import Cluster, converge, kill_one, long_pause, short_pause

SIZE = 8
CONVERGE_TIMEOUT = 15.0
"""Seconds eight members may take to agree on one view of everyone."""
KILL_TIMEOUT = 5.0
"""Seconds the survivors may take to exclude a killed member: a failure guard;
how long it takes is measured by ``benchmarks/membership_processes.py``."""
REJOIN_TIMEOUT = 15.0
VICTIM = 4


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with Cluster(SIZE, tmp_path) as running:
        yield running


def converged(cluster: Cluster) -> None:
    assert converge(cluster, CONVERGE_TIMEOUT) is not None, (
        f"the {SIZE} members did not agree on one view of all within {CONVERGE_TIMEOUT} s\n{cluster.timeline()}"
    )


def test_eight_members_converge_to_one_view(cluster: Cluster) -> None:
    converged(cluster)
    ready = [e for peer in cluster.peers.values() for e in peer.events if e.get("event") == "ready"]
    assert len(ready) == SIZE


def test_killed_member_is_excluded(cluster: Cluster) -> None:
    converged(cluster)
    assert kill_one(cluster, VICTIM, KILL_TIMEOUT) is not None, (
        f"the {SIZE - 1} survivors did not all install the view without killed member {VICTIM} "
        f"within {KILL_TIMEOUT} s\n{cluster.timeline()}"
    )


def test_short_pause_excludes_nobody(cluster: Cluster) -> None:
    converged(cluster)
    outcome = short_pause(cluster, VICTIM, pause=1.0, watch=4.0)
    wrongful = ", ".join(f"member {i}: {view['members']}" for i, view in outcome.wrongful_views)
    assert not outcome.wrongful_views, (
        f"member {VICTIM}, stopped for only 1 s, was excluded ({wrongful})\n{cluster.timeline()}"
    )


def test_long_pause_excludes_then_readmits(cluster: Cluster) -> None:
    converged(cluster)
    outcome = long_pause(cluster, VICTIM, pause=10.0, rejoin_timeout=REJOIN_TIMEOUT)
    assert outcome.excluded_after is not None, (
        f"the survivors did not all install a view without member {VICTIM} while it was stopped "
        f"for 10 s\n{cluster.timeline()}"
    )
    assert outcome.readmitted_after is not None, (
        f"member {VICTIM} was not back in one view with all {SIZE} members {REJOIN_TIMEOUT} s after "
        f"SIGCONT\n{cluster.timeline()}"
    )


# ---------------------------------------------------------------------- ICMP in the driver


class RefusalNode:
    """A stand-in for ``sgcs.node.Node`` with just what the driver calls: it
    records refusals and answers each with a datagram to ``witness``, so the
    test sees that the answer was routed."""

    def __init__(self, config: sgcs.Config, witness: tuple[str, int]) -> None:
        self.config = config
        self.id = 1
        self.groups: tuple[str, ...] = ()
        self.witness = witness
        self.refused: list[Any] = []

    def next_deadline(self) -> float | None:
        return None

    def handle_timeout(self, now: float) -> list[Action]:
        return []

    def handle_datagram(self, src: Any, data: bytes, now: float) -> list[Action]:
        return []

    def handle_unreachable(self, address: Any, now: float) -> list[Action]:
        self.refused.append(address)
        return [Send(self.witness, b"refused %s:%d" % (address[0].encode(), address[1]), MsgType.DATA)]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="IP_RECVERR and MSG_ERRQUEUE are Linux's")
async def test_refused_datagram_reaches_the_node_and_is_counted() -> None:
    (closed_port,) = free_udp_ports(1)
    closed = ("127.0.0.1", closed_port)
    with trio.socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as witness:
        await witness.bind(("127.0.0.1", 0))
        config = sgcs.Config(secret=b"refusal-test-secret", use_multicast=False)
        node = RefusalNode(config, witness.getsockname())
        sockets = await open_sockets(config)
        try:
            driver = TrioDriver(node, sockets)  # type: ignore[arg-type]
            assert sockets.error_queue
            # Tasks not started yet, so nothing reads the refusal before the next
            # send meets it: the kernel fails that send, and the driver retries it.
            await driver._route([Send(closed, b"to nobody", MsgType.DATA)])
            await trio.sleep(0.1)  # the ICMP error arrives
            await driver._route([Send(witness.getsockname(), b"after", MsgType.DATA)])
            with trio.fail_after(5):
                assert (await witness.recvfrom(100))[0] == b"after"
            async with trio.open_nursery() as nursery:
                driver.start(nursery)
                with trio.fail_after(5):
                    answer, _ = await witness.recvfrom(100)
                nursery.cancel_scope.cancel()
        finally:
            sockets.close()
    assert answer == b"refused 127.0.0.1:%d" % closed_port
    assert node.refused == [closed]
    stats = driver.statistics()
    assert stats.unreachable == 1
    assert stats.send_errors == 0 and stats.receive_errors == 0
