"""Host checks: when a member becomes suspect, the trio driver tries a TCP
handshake with its address, and a refusal or silence ends the pull stage.

The node's half is sans-I/O (one ``CheckHost`` per suspicion, a late answer
ignored); the check's timing is tested with fake handshakes on trio's mock
clock (pytest-trio's ``autojump_clock``); the handshake itself, the listener
and the driver's routing on real loopback sockets (``integration``). A
"silent" host on loopback is a listening socket whose accept queue is full:
the kernel drops further SYNs unanswered, as a vanished host would. Nothing
leaves 127.0.0.0/8."""

from __future__ import annotations

import logging
import random
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import trio
import trio.testing

import sgcs
from sgcs.actions import Action, CheckHost, Multicast, Send, ViewInstalled
from sgcs.config import Config
from sgcs.io import sockets as sockets_module
from sgcs.io.sockets import (HOST_CHECK_LIMIT, Endpoint, HostAnswer, check_host, open_sockets, tcp_handshake)
from sgcs.io.trio_driver import TrioDriver
from sgcs.node import Node
from sgcs.wire import MsgType

from _memnet import MemoryNetwork

SECRET = b"host-check-test-secret"
CONFIG = Config(secret=SECRET)
WAIT = 10.0
"""Seconds any wait on real sockets may take before the test fails instead of hanging."""


# ---------------------------------------------------------------------- the node


def checks(actions: list[Any]) -> list[CheckHost]:
    return [a for a in actions if isinstance(a, CheckHost)]


def member_2_silent(config: Config, until: float) -> MemoryNetwork[Node]:
    """Nodes 1 and 3 in two groups with member 2, who never says anything;
    the network runs until ``until``."""
    nodes = {n: Node(n, config, random.Random(n), resolve=lambda m: m) for n in (1, 3)}
    net: MemoryNetwork[Node] = MemoryNetwork(nodes)
    for n, node in nodes.items():
        net.submit(n, node.join("g", 0.0, members=[1, 2, 3]) + node.join("h", 0.0, members=[1, 2, 3]))
    net.run(until, step=0.005)
    return net


def test_one_check_per_suspicion_whatever_the_groups() -> None:
    # Suspected after 0.3 s; the pull stage (0.9 s) is still running at 0.8 s.
    net = member_2_silent(CONFIG, until=0.8)
    for n in (1, 3):
        assert list(net.nodes[n].detector.suspects) == [2]
        assert checks(net.actions_of(n)) == [CheckHost(2, 2)]


def test_no_check_when_disabled() -> None:
    net = member_2_silent(Config(secret=SECRET, host_check=False), until=0.8)
    assert list(net.nodes[1].detector.suspects) == [2] and checks(net.seen) == []


def test_an_unanswered_check_ends_the_pull_stage() -> None:
    node = member_2_silent(CONFIG, until=0.8).nodes[1]
    assert node.detector.pulling(2)
    out = node.handle_host_unreachable(2, 2, 0.8)
    asks = [a for a in out if isinstance(a, Send) and a.msg_type is MsgType.ASK]
    assert [a.dst for a in asks] == [3] and not node.detector.pulling(2), "the neighbour is asked at once"
    assert node.handle_host_unreachable(2, 2, 0.81) == [], "a second answer changes nothing"


def test_a_late_or_misaddressed_answer_is_ignored() -> None:
    node = Node(1, CONFIG, random.Random(1), resolve=lambda n: n)
    node.join("g", 0.0, members=[1, 2, 3])
    assert node.handle_host_unreachable(2, 2, 0.05) == [], "not suspected (heard from since): no evidence"
    assert node.detector.suspects == {}, "on_unreachable would have made it a suspect"
    node = member_2_silent(CONFIG, until=0.8).nodes[1]
    assert node.handle_host_unreachable(2, 3, 0.8) == [] and node.detector.pulling(2), "another address"


def test_a_suspicion_raised_by_an_icmp_refusal_is_not_checked() -> None:
    a, b = (Node(n, CONFIG, random.Random(n), resolve=lambda m: m) for n in (1, 2))
    for node in (a, b):
        node.join("g", 0.0, members=[1, 2, 3])
    b.multicast("g", b"hello", 0.0)
    for action in b.handle_timeout(0.0):
        if isinstance(action, Multicast):
            a.handle_datagram(2, action.data, 0.01)  # a learns 2's address (a refusal names addresses)
    out = a.handle_unreachable(2, 0.05)
    assert 2 in a.detector.suspects and checks(out) == [], "past the pull stage already"


def exclusion_time(config: Config, answer_after: float | None) -> float:
    """Three nodes; node 3's host vanishes at 1.0 s (no datagram, no ICMP).
    The test plays the driver's host check: ``answer_after`` s after a
    ``CheckHost`` it reports silence. Returns when both survivors hold a
    view without node 3, counted from the crash."""
    nodes = {n: Node(n, config, random.Random(n), resolve=lambda m: m) for n in (1, 2, 3)}
    pending: list[tuple[float, int, CheckHost]] = []
    net: MemoryNetwork[Node] = MemoryNetwork(nodes)

    def observe(src: Any, action: Any) -> None:
        if isinstance(action, CheckHost) and answer_after is not None:
            pending.append((net.now + answer_after, src, action))

    net.observer = observe
    for n, node in nodes.items():
        net.submit(n, node.join("g", 0.0, members=[1, 2, 3]))
    net.run(1.0, step=0.005)
    net.crash(3)
    excluded: dict[int, float] = {}
    while len(excluded) < 2 and net.now < 10.0:
        for due, src, action in [p for p in pending if p[0] <= net.now]:
            pending.remove((due, src, action))
            net.submit(src, nodes[src].handle_host_unreachable(action.member, action.address, net.now))
        since = len(net.log)
        net.run(round(net.now + 0.005, 6), step=0.005)
        for src, action in net.log[since:]:
            if isinstance(action, ViewInstalled) and 3 not in action.members:
                excluded.setdefault(src, net.now - 1.0)
    return max(excluded.values())


def test_a_silent_host_is_excluded_sooner() -> None:
    with_check = exclusion_time(CONFIG, answer_after=HOST_CHECK_LIMIT)
    without = exclusion_time(Config(secret=SECRET, host_check=False), answer_after=None)
    # Suspicion (0.3-0.4 s), the check (0.35 s), the ask stage and the change,
    # against suspicion, the whole pull stage (0.9 s) and the rest.
    assert with_check < 1.0 < without, (with_check, without)
    assert without - with_check > 0.4


# ---------------------------------------------------------------------- the check's timing (fake handshakes)


class FakeHandshakes:
    """Handshakes that answer in turn from ``script``: an answer after a
    delay, or None for one that never completes (it waits until ``until``)."""

    def __init__(self, script: list[tuple[HostAnswer | None, float]]) -> None:
        self.script = script
        self.started: list[float] = []

    async def __call__(self, address: Endpoint, until: float) -> HostAnswer:
        answer, delay = self.script[len(self.started)]
        self.started.append(trio.current_time())
        if answer is None:
            await trio.sleep_until(until)
            return HostAnswer.SILENT
        await trio.sleep(delay)
        return answer


async def timed_check(script: list[tuple[HostAnswer | None, float]]) -> tuple[HostAnswer, float, list[float]]:
    handshakes = FakeHandshakes(script)
    start = trio.current_time()
    answer = await check_host(("127.0.0.1", 9), handshakes, attempts=4, spacing=0.1, limit=0.35)
    return answer, trio.current_time() - start, [round(t - start, 6) for t in handshakes.started]


SILENT: tuple[HostAnswer | None, float] = (None, 0.0)


async def test_a_silent_host_gets_four_handshakes_then_the_limit(autojump_clock: trio.testing.MockClock) -> None:
    answer, took, started = await timed_check([SILENT] * 4)
    assert answer is HostAnswer.SILENT and took == pytest.approx(0.35)
    assert started == pytest.approx([0.0, 0.1, 0.2, 0.3])


async def test_any_completed_handshake_answers(autojump_clock: trio.testing.MockClock) -> None:
    # The first SYN was lost: the second handshake completes 1 ms after it started.
    answer, took, started = await timed_check([SILENT, (HostAnswer.ANSWERED, 0.001), SILENT, SILENT])
    assert answer is HostAnswer.ANSWERED and took == pytest.approx(0.101)
    assert started == pytest.approx([0.0, 0.1]), "decided: no more handshakes"


async def test_a_refusal_answers_at_once(autojump_clock: trio.testing.MockClock) -> None:
    answer, took, _ = await timed_check([(HostAnswer.REFUSED, 0.0005)] + [SILENT] * 3)
    assert answer is HostAnswer.REFUSED and took == pytest.approx(0.0005)


async def test_our_own_errors_are_no_verdict(autojump_clock: trio.testing.MockClock) -> None:
    answer, _, _ = await timed_check([(HostAnswer.FAILED, 0.0)] * 4)
    assert answer is HostAnswer.FAILED
    answer, _, _ = await timed_check([(HostAnswer.FAILED, 0.0), SILENT, (HostAnswer.FAILED, 0.0), SILENT])
    assert answer is HostAnswer.SILENT, "the handshakes that went out got no answer"


# ---------------------------------------------------------------------- real loopback sockets


@contextmanager
def listening(backlog: int = 8) -> Iterator[socket.socket]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind(("127.0.0.1", 0))
        sock.listen(backlog)
        yield sock
    finally:
        sock.close()


@contextmanager
def silent_host() -> Iterator[Endpoint]:
    """A loopback address whose SYNs go unanswered: a listener with a full
    accept queue (backlog 0 holds one connection) that never accepts."""
    with listening(backlog=0) as full:
        fillers = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(2)]
        try:
            for filler in fillers:
                filler.setblocking(False)
                filler.connect_ex(full.getsockname())
            yield full.getsockname()
        finally:
            for filler in fillers:
                filler.close()


def closed_port() -> Endpoint:
    with listening() as sock:
        address: Endpoint = sock.getsockname()
    return address


@pytest.mark.integration
async def test_handshakes_with_a_listener_a_closed_port_and_a_silent_host() -> None:
    with listening() as sock:  # never accepted, as in a stopped process
        assert await check_host(sock.getsockname()) is HostAnswer.ANSWERED
    assert await check_host(closed_port()) is HostAnswer.REFUSED
    with silent_host() as address:
        start = trio.current_time()
        assert await check_host(address) is HostAnswer.SILENT
        assert HOST_CHECK_LIMIT <= trio.current_time() - start < HOST_CHECK_LIMIT + 1.0


@pytest.mark.integration
async def test_a_handshake_completed_before_the_deadline_counts_when_looked_at_late() -> None:
    with listening() as sock:
        # The deadline has passed when the task looks: the handshake, which the
        # loopback kernel completed within connect(), must still count.
        assert await tcp_handshake(sock.getsockname(), trio.current_time()) is HostAnswer.ANSWERED


class CheckingNode:
    """A stand-in for ``sgcs.node.Node`` with what the driver calls; it records
    the host checks' negative answers."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.id = 1
        self.groups: tuple[str, ...] = ()
        self.unreachable: list[tuple[int, Any]] = []

    def next_deadline(self) -> float | None:
        return None

    def handle_timeout(self, now: float) -> list[Action]:
        return []

    def handle_datagram(self, src: Any, data: bytes, now: float) -> list[Action]:
        return []

    def handle_host_unreachable(self, member: int, address: Any, now: float) -> list[Action]:
        self.unreachable.append((member, address))
        return []


async def wait_until_idle(driver: TrioDriver) -> None:
    with trio.fail_after(WAIT):
        while driver._checking:
            await trio.sleep(0.01)


@pytest.mark.integration
async def test_the_driver_reports_refused_and_silent_hosts_only() -> None:
    config = Config(secret=SECRET, use_multicast=False)
    node = CheckingNode(config)
    sockets = await open_sockets(config)
    try:
        driver = TrioDriver(node, sockets)  # type: ignore[arg-type]
        async with trio.open_nursery() as nursery:
            driver.start(nursery)
            refused = closed_port()
            with listening() as alive, silent_host() as silent:
                await driver._route([CheckHost(5, alive.getsockname()), CheckHost(6, refused),
                                     CheckHost(7, silent), CheckHost(7, silent)])
                await wait_until_idle(driver)
            nursery.cancel_scope.cancel()
    finally:
        sockets.close()
    assert sorted(node.unreachable) == [(6, refused), (7, silent)]
    stats = driver.statistics()
    assert (stats.host_checks, stats.host_checks_answered, stats.host_checks_refused, stats.host_checks_silent,
            stats.host_checks_failed) == (3, 1, 1, 1, 0), "one check of member 7 at a time"


@pytest.mark.integration
async def test_a_node_accepts_host_checks_and_closes_them_unread() -> None:
    async with sgcs.open_node(sgcs.Config(secret=SECRET, use_multicast=False)) as node:
        listener = node._driver.sockets.listener
        assert listener is not None and listener.getsockname() == node.address
        with trio.socket.socket(socket.AF_INET, socket.SOCK_STREAM) as checker:
            await checker.connect(node.address)
            await checker.send(b"never read")
            with trio.fail_after(WAIT):
                while True:  # closed by the node: EOF, or a reset for the unread bytes
                    try:
                        if await checker.recv(100) == b"":
                            break
                    except ConnectionResetError:
                        break
        assert await check_host(node.address) is HostAnswer.ANSWERED
        with trio.fail_after(WAIT):
            while node.io_statistics().host_check_accepts < 2:
                await trio.sleep(0.01)
    assert listener.fileno() == -1, "closed with the node"


@pytest.mark.integration
async def test_a_taken_tcp_port_costs_the_listener_only(caplog: pytest.LogCaptureFixture) -> None:
    with listening() as taken:
        port = taken.getsockname()[1]
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                pytest.skip("the UDP twin of a free TCP port is taken")
        with caplog.at_level(logging.WARNING, logger="sgcs"):
            async with sgcs.open_node(sgcs.Config(secret=SECRET, use_multicast=False, port=port)) as node:
                assert node._driver.sockets.listener is None
                assert node.address == ("127.0.0.1", port)
        warnings = [r for r in caplog.records if f"TCP port {port} on 127.0.0.1 is taken" in r.getMessage()]
        assert len(warnings) == 1


@pytest.mark.integration
async def test_a_free_port_is_chosen_with_its_tcp_twin_free(monkeypatch: pytest.MonkeyPatch) -> None:
    refused_once: list[int] = []
    real = sockets_module._open_listener

    def first_taken(host: str, port: int) -> socket.socket | None:
        if not refused_once:
            refused_once.append(port)
            return None
        return real(host, port)

    monkeypatch.setattr(sockets_module, "_open_listener", first_taken)
    async with sgcs.open_node(sgcs.Config(secret=SECRET, use_multicast=False)) as node:
        listener = node._driver.sockets.listener
        assert len(refused_once) == 1 and listener is not None and listener.getsockname() == node.address
