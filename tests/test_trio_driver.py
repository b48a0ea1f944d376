"""The trio driver and public API over real loopback sockets.

Few tests on purpose: the simulator covers the protocol's logic; these check
the sockets, task structure, routing and errors of the real driver. Each test
uses its own multicast group and port, so parallel runs do not hear each other.
"""

from __future__ import annotations

import json
import os
import random
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio

import sgcs
from _net import free_udp_ports
from sgcs.records import Record
from sgcs.wire import Flag, MsgType, derive_key, encode_records, group_tag, seal

SECRET = b"trio-driver-test-secret"
WAIT = 10.0
"""Seconds any single wait may take before the test fails instead of hanging."""
HERE = Path(__file__).resolve().parent


def make_config(network: dict[str, object], name: str, **fields: object) -> sgcs.Config:
    settings: dict[str, Any] = {**network, **fields}
    return sgcs.Config(name=name, secret=SECRET, beacon_interval=0.1, **settings)


async def wait_for(group: sgcs.GroupHandle, predicate: Callable[[sgcs.Event], bool]) -> sgcs.Event:
    with trio.fail_after(WAIT):
        async for event in group:
            if predicate(event):
                return event
    raise AssertionError(f"the event stream of {group!r} ended")


async def view_with(group: sgcs.GroupHandle, *ids: int) -> sgcs.ViewChange:
    """The next view change whose members include ``ids``."""
    event = await wait_for(group, lambda e: isinstance(e, sgcs.ViewChange) and set(ids) <= set(e.members))
    assert isinstance(event, sgcs.ViewChange)
    return event


async def delivery_of(group: sgcs.GroupHandle, payload: bytes) -> sgcs.Delivery:
    """The next delivery of ``payload``."""
    event = await wait_for(group, lambda e: isinstance(e, sgcs.Delivery) and e.payload == payload)
    assert isinstance(event, sgcs.Delivery)
    return event


async def test_two_nodes_discover_each_other_and_exchange(network: dict[str, object]) -> None:
    async with (
        sgcs.open_node(make_config(network, "a")) as a,
        sgcs.open_node(make_config(network, "b")) as b,
        a.join("g", order=sgcs.Order.FIFO) as ga,
        b.join("g") as gb,
    ):
        first = await wait_for(ga, lambda e: True)
        assert isinstance(first, sgcs.ViewChange) and first.members == (a.id,)  # the initial view
        seen_by_a = await view_with(ga, a.id, b.id)
        seen_by_b = await view_with(gb, a.id, b.id)
        assert seen_by_a.view_id == seen_by_b.view_id
        assert ga.view.members == tuple(sorted((a.id, b.id)))

        await ga.send(b"hello")
        got = await delivery_of(gb, b"hello")
        # a discovering node's stream starts at its incarnation << 32
        assert (got.sender, got.seq % 2**32, got.group, got.dest) == (a.id, 1, "g", None)
        assert await delivery_of(ga, b"hello")  # the sender delivers its own message

        await gb.send(b"psst", to=a.id)
        psst = await delivery_of(ga, b"psst")
        assert psst.unicast and psst.dest == a.id and psst.sender == b.id


async def test_two_processes_exchange_multicast(network: dict[str, object]) -> None:
    rng = random.SystemRandom()
    parent_id, child_id = rng.randrange(2**63), rng.randrange(2**63)
    command = [
        sys.executable, str(HERE / "trio_peer.py"), "--group", "cross", "--secret", SECRET.decode(),
        "--node-id", str(child_id), "--peer-id", str(parent_id),
        "--multicast-group", str(network["multicast_group"]), "--multicast-port", str(network["multicast_port"]),
        "--count", "3", "--expect", "3", "--timeout", "20",
    ]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent), os.environ.get("PYTHONPATH", "")])}
    finished: list[subprocess.CompletedProcess[bytes]] = []

    async def run_child() -> None:
        child = await trio.run_process(command, capture_stdout=True, capture_stderr=True, check=False, env=env)
        finished.append(child)

    with trio.fail_after(30):
        async with sgcs.open_node(make_config(network, "parent", node_id=parent_id)) as node:
            async with node.join("cross") as group, trio.open_nursery() as nursery:
                nursery.start_soon(run_child)
                await view_with(group, parent_id, child_id)
                got = [(await delivery_of(group, f"child {i}".encode())) for i in range(3)]
                assert {e.sender for e in got} == {child_id}
                await group.send(b"parent 0")
                await group.send(b"parent 1")
                await group.send(b"parent 2", to=child_id)
    (child,) = finished
    assert child.returncode == 0, child.stderr.decode()
    report = json.loads(child.stdout.decode().splitlines()[-1])
    assert report["id"] == child_id and parent_id in report["view"]
    assert sorted(report["received"]) == ["parent 0", "parent 1", "parent 2"]


async def test_port_already_used(network: dict[str, object]) -> None:
    async with sgcs.open_node(make_config(network, "a")) as a:
        host, port = a.address
        message = f"port {port} on {host} is already used by another sgcs node in this process"
        with pytest.raises(sgcs.UsageError, match=message):
            async with sgcs.open_node(make_config(network, "b", port=port)):
                pass  # pragma: no cover
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as other_program:
        other_program.bind(("127.0.0.1", 0))
        port = other_program.getsockname()[1]
        with pytest.raises(sgcs.UsageError, match=f"port {port} on 127.0.0.1 is in use by another program"):
            async with sgcs.open_node(make_config(network, "c", port=port)):
                pass  # pragma: no cover
    async with sgcs.open_node(make_config(network, "again", port=port)) as again:
        assert again.address == ("127.0.0.1", port)  # both refusals released what they had taken


async def test_garbage_is_dropped_counted_and_harmless(network: dict[str, object]) -> None:
    async with (
        sgcs.open_node(make_config(network, "a")) as a,
        sgcs.open_node(make_config(network, "b")) as b,
        a.join("g") as ga,
        b.join("g") as gb,
    ):
        await view_with(ga, a.id, b.id)
        await view_with(gb, a.id, b.id)
        good_body = encode_records(group_tag("g"), [Record(12345, 1, (), 0, b"forged")])
        garbage = [
            b"\x00garbage" * 8,  # not even the magic
            seal(derive_key(b"some-other-secret"), MsgType.DATA, Flag.NONE, b.id, good_body),  # bad MAC
            seal(derive_key(SECRET), MsgType.DATA, Flag.NONE, 12345, good_body[:-1]),  # body shorter than it says
        ]
        before = a.statistics().dropped
        with trio.socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as attacker:
            for datagram in garbage:
                await attacker.sendto(datagram, a.address)
        with trio.fail_after(WAIT):
            while a.statistics().dropped < before + len(garbage):
                await trio.sleep(0.01)
        stats = a.statistics()
        assert stats.dropped == before + 3
        assert {"magic", "mac", "length"} <= set(stats.drop_reasons)

        await gb.send(b"still fine")
        assert await delivery_of(ga, b"still fine")
        assert 12345 not in ga.view


def task_count(task: trio.lowlevel.Task) -> int:
    return 1 + sum(task_count(child) for nursery in task.child_nurseries for child in nursery.child_tasks)


async def test_clean_shutdown_and_graceful_leave(network: dict[str, object]) -> None:
    root = trio.lowlevel.current_root_task()
    assert root is not None
    baseline = task_count(root)
    async with sgcs.open_node(make_config(network, "watcher")) as watcher, watcher.join("g") as watch:
        tasks_before = task_count(root)
        with trio.move_on_after(WAIT) as timeout:
            async with sgcs.open_node(make_config(network, "a")) as a:
                sockets = a._driver.sockets
                assert task_count(root) > tasks_before
                with trio.CancelScope() as cancelled_block:
                    async with a.join("g") as group:
                        await view_with(group, a.id, watcher.id)
                        cancelled_block.cancel()  # the leave must still go out, shielded
                        await trio.sleep_forever()
                assert a.groups == ()
        assert not timeout.cancelled_caught
        assert task_count(root) == tasks_before
        assert sockets.unicast.fileno() == -1 and sockets.multicast is not None and sockets.multicast.fileno() == -1
        gone = await wait_for(watch, lambda e: isinstance(e, sgcs.ViewChange) and a.id not in e.members)
        assert isinstance(gone, sgcs.ViewChange) and gone.members == (watcher.id,)

    with pytest.raises(sgcs.UsageError, match="payload must be bytes"):  # not an ExceptionGroup
        async with sgcs.open_node(make_config(network, "b")) as b, b.join("g") as g:
            await g.send("text")  # type: ignore[arg-type]
    assert task_count(root) == baseline


async def test_a_leave_waits_for_the_view_change_it_answered(network: dict[str, object],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A member that answered a proposal may be in its commit: it leaves once
    the change is over (here: held open by hand), or after a bound."""
    async with sgcs.open_node(make_config(network, "watcher")) as watcher, watcher.join("g") as watch:
        async with sgcs.open_node(make_config(network, "a")) as a, a.join("g") as group:
            await view_with(group, a.id, watcher.id)
            await view_with(watch, a.id, watcher.id)
            changing = True
            monkeypatch.setattr(a._driver, "_answered_change", lambda name: changing)
            done = trio.Event()

            async def leave() -> None:
                await group.leave()
                done.set()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(leave)
                with trio.move_on_after(0.5):
                    await done.wait()
                assert not done.is_set(), "left while the change it answered was under way"
                assert a.id in watch.view.members
                changing = False
                with trio.fail_after(WAIT):
                    await done.wait()
            gone = await wait_for(watch, lambda e: isinstance(e, sgcs.ViewChange) and a.id not in e.members)
            assert isinstance(gone, sgcs.ViewChange)
            changing = True
            started = trio.current_time()
            async with a.join("h"):
                pass  # a change that never ends here: the leave goes after the bound (1 s)
            assert 0.9 < trio.current_time() - started < 3.0


async def test_peers_without_multicast(network: dict[str, object]) -> None:
    port_a, port_b = free_udp_ports(2)
    unicast_only = {"use_multicast": False}
    config_a = make_config(network, "a", port=port_a, peers=(f"localhost:{port_b}",), **unicast_only)
    both = (f"127.0.0.1:{port_a}", f"127.0.0.1:{port_b}")  # a shared list naming b itself is fine
    config_b = make_config(network, "b", port=port_b, peers=both, **unicast_only)
    async with sgcs.open_node(config_a) as a, sgcs.open_node(config_b) as b:
        assert a._driver.sockets.multicast is None
        members = [a.id, b.id]
        async with a.join("g", members=members) as ga, b.join("g", members=members) as gb:
            assert set(ga.view.members) == set(gb.view.members) == set(members)
            await ga.send(b"over unicast")
            got = await delivery_of(gb, b"over unicast")
            assert got.sender == a.id
            await gb.send(b"reply", to=a.id)  # b learnt a's address from that datagram
            assert await delivery_of(ga, b"reply")
    assert a.io_statistics().send_errors == 0


async def test_full_queue_waits_instead_of_dropping(network: dict[str, object]) -> None:
    count = 40  # few enough for the kernel's socket buffer to hold while the reader waits
    async with (
        sgcs.open_node(make_config(network, "slow", app_queue=2)) as slow,
        sgcs.open_node(make_config(network, "fast")) as fast,
        slow.join("g") as slow_group,
        fast.join("g") as fast_group,
    ):
        await view_with(fast_group, slow.id, fast.id)
        await view_with(slow_group, slow.id, fast.id)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_read_forever, fast_group)
            for i in range(count):
                await fast_group.send(b"%d" % i)
            payloads = []
            with trio.fail_after(WAIT):
                async for event in slow_group:
                    if isinstance(event, sgcs.Delivery):
                        payloads.append(event.payload)
                    if len(payloads) == count:
                        break
            assert payloads == [b"%d" % i for i in range(count)]  # all of them, in order
            for _ in range(5):
                await fast_group.send(b"never read")
            with trio.fail_after(WAIT):
                while slow.statistics().messages_delivered < count + 1:
                    await trio.sleep(0.01)
            nursery.cancel_scope.cancel()
    assert slow.io_statistics().events_discarded >= 1  # left with a full queue: counted, not hung


async def _read_forever(group: sgcs.GroupHandle) -> None:
    async for _ in group:
        pass


async def test_a_loopback_node_with_peers_on_other_machines_warns_once(caplog: pytest.LogCaptureFixture) -> None:
    """The multi-host set-up that never meets: bound to 127.0.0.1 (the
    default) with peers elsewhere. One line says what to change; peers on
    this machine alone say nothing."""
    port = free_udp_ports(1)[0]
    remote = sgcs.Config(secret=SECRET, use_multicast=False, peers=("10.255.0.7:47000", f"127.0.0.1:{port}"))
    with caplog.at_level("WARNING", logger="sgcs"):
        async with sgcs.open_node(remote):
            pass
    lines = [r.getMessage() for r in caplog.records if r.name == "sgcs"]
    assert len(lines) == 1 and "10.255.0.7:47000" in lines[0] and "bind" in lines[0], lines
    caplog.clear()
    with caplog.at_level("WARNING", logger="sgcs"):
        async with sgcs.open_node(sgcs.Config(secret=SECRET, use_multicast=False, peers=(f"127.0.0.1:{port}",))):
            pass
    assert not [r for r in caplog.records if r.name == "sgcs"]


def test_the_network_options_of_the_commands_reach_the_config() -> None:
    from sgcs.apps.cli import _network, build_parser

    args = build_parser().parse_args(["chat", "g", "--bind", "10.0.0.5", "--ttl", "4", "--port", "47100"])
    assert _network(args) == {"bind_host": "10.0.0.5", "multicast_ttl": 4, "port": 47100}
