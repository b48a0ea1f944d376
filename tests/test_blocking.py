"""The blocking facade (``sgcs.blocking``): real nodes on loopback, used from
plain threads. Every wait is bounded, so a bug fails a test instead of
hanging it."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

import sgcs
import sgcs.blocking
from sgcs.blocking import BlockingGroup, BlockingNode, GroupClosed

SECRET = b"blocking-test-secret"
WAIT = 20.0
"""Seconds any single wait may take before the test fails instead of hanging."""
QUIET = 0.4
"""Seconds without a view event after which a group's membership counts as settled."""


def make_config(network: dict[str, Any], name: str, **fields: Any) -> sgcs.Config:
    return sgcs.Config(name=name, secret=SECRET, beacon_interval=0.1, **network, **fields)


def remaining(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("the test waited too long")
    return left


def wait_for(group: BlockingGroup, predicate: Callable[[sgcs.Event], bool]) -> sgcs.Event:
    deadline = time.monotonic() + WAIT
    while True:
        event = group.receive(timeout=remaining(deadline))
        if predicate(event):
            return event


def settle(groups: list[BlockingGroup], size: int) -> None:
    """Wait until every group's view holds ``size`` members and no group has
    had a view event for QUIET seconds, discarding the events (advisory
    MemberSuspected events come and go in a two-member group).

    Seeing the first view of ``size`` is not enough: two nodes that discover
    each other at the same moment sometimes install a joint view, split into
    singletons a millisecond later and merge again about a beacon interval
    after (a race of the membership protocol, not of the facade). Messages
    sent meanwhile reach their sender only."""
    deadline = time.monotonic() + WAIT
    changed = time.monotonic()
    while time.monotonic() - changed < QUIET or any(len(group.view) != size for group in groups):
        remaining(deadline)
        for group in groups:
            with contextlib.suppress(TimeoutError):
                if isinstance(group.receive(timeout=0.02), (sgcs.ViewChange, sgcs.OptimisticView, sgcs.Rollback)):
                    changed = time.monotonic()


def has_members(count: int) -> Callable[[sgcs.Event], bool]:
    return lambda event: isinstance(event, sgcs.ViewChange) and len(event.members) == count


def payloads(group: BlockingGroup, count: int) -> list[bytes]:
    received: list[bytes] = []
    deadline = time.monotonic() + WAIT
    while len(received) < count:
        event = group.receive(timeout=remaining(deadline))
        if isinstance(event, sgcs.Delivery):
            received.append(event.payload)
    return received


def no_delivery_within(group: BlockingGroup, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    try:
        while True:
            if isinstance(group.receive(timeout=max(0.0, deadline - time.monotonic())), sgcs.Delivery):
                return False
    except TimeoutError:
        return True


def run_in_thread(target: Callable[[], Any]) -> threading.Thread:
    thread = threading.Thread(target=target, daemon=True)  # daemon: a failing test must not hang the run
    thread.start()
    return thread


@pytest.fixture
def pair(network: dict[str, Any]) -> Iterator[tuple[BlockingGroup, BlockingGroup]]:
    """Two nodes in group "g", both past the view that holds them both."""
    with ExitStack() as stack:
        a = stack.enter_context(sgcs.blocking.open_node(make_config(network, "a")))
        b = stack.enter_context(sgcs.blocking.open_node(make_config(network, "b")))
        ga, gb = stack.enter_context(a.join("g")), stack.enter_context(b.join("g"))
        settle([ga, gb], 2)
        yield ga, gb


def test_discovery_multicast_and_unicast(pair: tuple[BlockingGroup, BlockingGroup]) -> None:
    ga, gb = pair
    assert ga.view == gb.view and set(ga.view.members) == {ga.node_id, gb.node_id}
    assert ga.name == gb.name == "g"
    ga.send(b"from a")
    assert payloads(ga, 1) == payloads(gb, 1) == [b"from a"]  # multicast reaches the sender too
    gb.send(b"to a only", to=ga.node_id)
    event = wait_for(ga, lambda e: isinstance(e, sgcs.Delivery))
    assert isinstance(event, sgcs.Delivery) and event.unicast
    assert (event.payload, event.sender, event.dest) == (b"to a only", gb.node_id, ga.node_id)


def test_node_properties_and_statistics(network: dict[str, Any]) -> None:
    with sgcs.blocking.open_node(make_config(network, "solo")) as node:
        assert node.name == "solo" and node.address[0] == "127.0.0.1" and node.address[1] > 0
        assert not node.groups
        with node.join("g", members=[node.id]) as group:
            assert list(node.groups) == ["g"] and group.node_id == node.id
            assert group.view.members == (node.id,)
            group.send(b"x")
            assert payloads(group, 1) == [b"x"]
            assert node.statistics().messages_delivered == 1
            assert node.io_statistics().send_errors == 0
        assert node.groups == ()
    assert node.statistics().messages_delivered == 1  # readable after close
    assert "closed" in repr(node)


def test_receive_timeout(network: dict[str, Any]) -> None:
    with sgcs.blocking.open_node(make_config(network, "a")) as node, node.join("g", members=[node.id]) as group:
        assert isinstance(group.receive(timeout=WAIT), sgcs.ViewChange)  # the initial view
        with pytest.raises(TimeoutError):
            group.receive(timeout=0.2)
        with pytest.raises(TimeoutError):
            group.receive(timeout=0)
        group.send(b"after the timeout")
        assert payloads(group, 1) == [b"after the timeout"]


def test_leave_ends_iteration(pair: tuple[BlockingGroup, BlockingGroup]) -> None:
    ga, gb = pair
    seen: list[sgcs.Event] = []
    reader = run_in_thread(lambda: seen.extend(ga))  # blocks in the iterator until the leave
    ga.send(b"before leave")
    wait_for(gb, lambda e: isinstance(e, sgcs.Delivery))
    deadline = time.monotonic() + WAIT
    while not any(isinstance(e, sgcs.Delivery) for e in seen):  # events not yet taken are discarded by leave
        reader.join(min(0.05, remaining(deadline)))
    last_view = ga.view
    ga.leave()
    reader.join(WAIT)
    assert not reader.is_alive()
    assert [e.payload for e in seen if isinstance(e, sgcs.Delivery)] == [b"before leave"]
    with pytest.raises(GroupClosed):
        ga.receive(timeout=WAIT)
    assert list(ga) == []
    ga.leave()  # idempotent
    assert ga.view == last_view  # the last view stays readable
    with pytest.raises(sgcs.UsageError, match="was left"):
        ga.send(b"too late")
    change = wait_for(gb, has_members(1))  # the other side sees a graceful leave
    assert isinstance(change, sgcs.ViewChange) and change.left == (ga.node_id,)


def test_view_change_when_a_node_closes(network: dict[str, Any]) -> None:
    with ExitStack() as stack:
        nodes = [stack.enter_context(sgcs.blocking.open_node(make_config(network, n))) for n in "abc"]
        groups = [stack.enter_context(node.join("g", order=sgcs.Order.TOTAL)) for node in nodes]
        settle(groups, 3)
        reader_events: list[sgcs.Event] = []
        reader = run_in_thread(lambda: reader_events.extend(groups[2]))
        nodes[2].close()  # leaves "g" on the way out, ends the iteration
        reader.join(WAIT)
        assert not reader.is_alive()
        with pytest.raises(GroupClosed):
            groups[2].receive(timeout=WAIT)
        with pytest.raises(sgcs.UsageError, match="closed"):
            groups[2].send(b"closed")
        with pytest.raises(sgcs.UsageError, match="closed"):
            nodes[2].join("h")
        for group in groups[:2]:
            change = wait_for(group, has_members(2))
            assert isinstance(change, sgcs.ViewChange) and nodes[2].id in change.left + change.failed
        groups[0].send(b"after")
        assert payloads(groups[1], 1) == [b"after"]


def test_usage_errors_reach_the_caller(network: dict[str, Any]) -> None:
    with sgcs.blocking.open_node(make_config(network, "a")) as node, node.join("g", members=[node.id]) as group:
        with pytest.raises(sgcs.UsageError, match="not another member"):
            group.send(b"x", to=12345)
        with pytest.raises(sgcs.UsageError, match="must be bytes"):
            group.send("text")  # type: ignore[arg-type]
        with pytest.raises(sgcs.UsageError, match="already a member"):
            node.join("g")
        with pytest.raises(sgcs.UsageError, match="order"):
            node.join("h", order="random")
        with pytest.raises(sgcs.UsageError, match="Config"):
            sgcs.blocking.open_node("not a config")  # type: ignore[arg-type]
        group.send(b"still works")
        assert payloads(group, 1) == [b"still works"]
    with pytest.raises(sgcs.UsageError, match="closed"):
        node.join("g")
    node.close()  # idempotent


def test_concurrent_senders_fifo_per_sender(pair: tuple[BlockingGroup, BlockingGroup]) -> None:
    ga, gb = pair
    count = 200
    errors: list[BaseException] = []

    def sender(tag: str) -> Callable[[], None]:
        def send_all() -> None:
            try:
                for index in range(count):
                    ga.send(f"{tag}:{index}".encode())
            except BaseException as exc:  # reported below
                errors.append(exc)

        return send_all

    senders = [run_in_thread(sender(tag)) for tag in ("x", "y")]
    for group in (ga, gb):
        received = [payload.decode().split(":") for payload in payloads(group, 2 * count)]
        for tag in ("x", "y"):
            assert [int(index) for t, index in received if t == tag] == list(range(count))
    for thread in senders:
        thread.join(WAIT)
    assert not errors and not any(thread.is_alive() for thread in senders)
    assert no_delivery_within(gb, 0.5)  # nothing twice


def test_concurrent_receivers_share_the_stream(pair: tuple[BlockingGroup, BlockingGroup]) -> None:
    ga, gb = pair
    count = 100
    taken: list[list[bytes]] = [[], []]

    def reader(mine: list[bytes]) -> Callable[[], None]:
        return lambda: mine.extend(event.payload for event in gb if isinstance(event, sgcs.Delivery))

    readers = [run_in_thread(reader(mine)) for mine in taken]
    for index in range(count):
        ga.send(b"%d" % index)
    assert len(payloads(ga, count)) == count
    deadline = time.monotonic() + WAIT
    while sum(map(len, taken)) < count:
        readers[0].join(min(0.05, remaining(deadline)))
        assert readers[0].is_alive()
    gb.leave()
    for thread in readers:
        thread.join(WAIT)
    assert sorted(taken[0] + taken[1], key=int) == [b"%d" % i for i in range(count)]


def test_would_block_when_the_window_is_full(network: dict[str, Any]) -> None:
    # Once settled, b reads nothing and its queues hold one event each: it
    # stops reading the network, stops acknowledging, and a's window fills.
    with (
        sgcs.blocking.open_node(make_config(network, "a", window_max=16)) as a,
        sgcs.blocking.open_node(make_config(network, "b", app_queue=1)) as b,
        a.join("g") as ga,
        b.join("g") as gb,
    ):
        settle([ga, gb], 2)
        with pytest.raises(sgcs.WouldBlock):
            for index in range(10_000):
                ga.send(b"%d" % index, block=False)


def test_small_queue_waits_and_loses_nothing(network: dict[str, Any]) -> None:
    # b's bridge and driver channel hold 2 events each: the rest wait in the
    # network (backpressure) until b reads, and arrive all the same, in order.
    count = 60
    with (
        sgcs.blocking.open_node(make_config(network, "a")) as a,
        sgcs.blocking.open_node(make_config(network, "b", app_queue=2)) as b,
        a.join("g") as ga,
        b.join("g") as gb,
    ):
        settle([ga, gb], 2)

        def send_all() -> None:
            for index in range(count):
                ga.send(b"%d" % index)

        sender = run_in_thread(send_all)
        sender.join(1.0)  # b reads nothing meanwhile: its queues fill
        assert payloads(gb, count) == [b"%d" % index for index in range(count)]
        sender.join(WAIT)
        assert not sender.is_alive()


def test_a_unicast_waits_for_its_window_like_a_multicast(network: dict[str, Any]) -> None:
    # b reads nothing at first: it stops acknowledging a's unicasts once its
    # queues are full, a's unicast window (window_max 16) fills, and a's sends
    # wait instead of raising WouldBlock; all arrive, in order, once b reads.
    count = 60
    with (
        sgcs.blocking.open_node(make_config(network, "a", window_max=16)) as a,
        sgcs.blocking.open_node(make_config(network, "b", app_queue=2)) as b,
        a.join("g") as ga,
        b.join("g") as gb,
    ):
        settle([ga, gb], 2)
        with pytest.raises(sgcs.WouldBlock):
            for index in range(count):
                ga.send(b"probe", to=b.id, block=False)
        probes = payloads(gb, index)
        assert probes == [b"probe"] * index

        def send_all() -> None:
            for index in range(count):
                ga.send(b"%d" % index, to=b.id)

        sender = run_in_thread(send_all)
        sender.join(1.0)  # b reads nothing meanwhile: the window fills and the sender waits
        assert payloads(gb, count) == [b"%d" % index for index in range(count)]
        sender.join(WAIT)
        assert not sender.is_alive()


def test_trace_directory(network: dict[str, Any], tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    run = tmp_path / "run"
    with sgcs.blocking.open_node(make_config(network, "a"), trace=run) as node:
        with node.join("g", members=[node.id]) as group:
            group.send(b"traced")
            assert payloads(group, 1) == [b"traced"]
    assert (run / "meta.json").exists() and list((run / "events").glob("*.parquet"))


def thread_and_fd_counts() -> tuple[set[threading.Thread], int]:
    return set(threading.enumerate()), len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not Path("/proc/self/fd").exists(), reason="counts file descriptors in /proc")
def test_close_leaves_no_thread_and_no_socket(network: dict[str, Any]) -> None:
    threads, fds = thread_and_fd_counts()
    node = sgcs.blocking.open_node(make_config(network, "a"))
    group = node.join("g")
    assert len(threading.enumerate()) == len(threads) + 1
    reader = run_in_thread(lambda: list(group))
    node.close()
    reader.join(WAIT)
    assert not reader.is_alive()
    assert thread_and_fd_counts() == (threads, fds)


def test_open_error_is_raised_unchanged(network: dict[str, Any]) -> None:
    threads = set(threading.enumerate())
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as other_program:
        other_program.bind(("127.0.0.1", 0))
        port = other_program.getsockname()[1]
        with pytest.raises(sgcs.UsageError, match=f"port {port} on 127.0.0.1 is in use by another program"):
            sgcs.blocking.open_node(make_config(network, "a", port=port))
    assert set(threading.enumerate()) == threads


def test_failure_inside_trio_surfaces(network: dict[str, Any]) -> None:
    threads = set(threading.enumerate())
    node = sgcs.blocking.open_node(make_config(network, "a"))
    group = node.join("g", members=[node.id])
    group.receive(timeout=WAIT)
    driver = node._handle._driver

    class BrokenTimer:  # a wrapper: the compiled Node's methods cannot be replaced
        def __init__(self, inner: Any) -> None:
            self.inner = inner

        def __getattr__(self, name: str) -> Any:
            return getattr(self.inner, name)

        def handle_timeout(self, now: float) -> list[Any]:
            raise RuntimeError("driver bug")

    driver.node = BrokenTimer(driver.node)  # the timer loop calls it within a gossip interval
    with pytest.raises(RuntimeError, match="driver bug"):
        group.receive(timeout=WAIT)  # pending receives end with the failure
    with pytest.raises(RuntimeError, match="driver bug"):
        group.send(b"x")
    with pytest.raises(RuntimeError, match="driver bug"):
        node.close()
    assert set(threading.enumerate()) == threads


def test_interpreter_exit_closes_open_nodes(network: dict[str, Any]) -> None:
    script = textwrap.dedent(
        f"""
        import sgcs  # sgcs.blocking loads on first use
        config = sgcs.Config(name="forgotten", secret={SECRET!r}, multicast_group={network["multicast_group"]!r},
                             multicast_port={network["multicast_port"]})
        node = sgcs.blocking.open_node(config)
        group = node.join("g", members=[node.id])
        group.send(b"x")
        print("open", flush=True)
        """
    )
    root = Path(__file__).parents[1]
    child = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=60, cwd=root)
    assert child.returncode == 0, child.stderr.decode()
    assert child.stdout.decode().strip() == "open"


def test_public_names() -> None:
    assert set(sgcs.blocking.__all__) == {"BlockingGroup", "BlockingNode", "GroupClosed", "open_node"}
    assert issubclass(GroupClosed, sgcs.SgcsError) and not issubclass(GroupClosed, sgcs.UsageError)
    assert BlockingNode.__doc__ and BlockingGroup.__doc__ and sgcs.blocking.__doc__
