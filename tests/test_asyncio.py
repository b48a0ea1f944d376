"""The public API under asyncio (the trio driver as a guest of the loop).

Real loopback sockets, each test with a multicast group and port of its own.
The mixed test is the point: a member under asyncio and one under trio in
one group see each other's views and deliveries. Timeouts are failure
guards only, never measured."""

from __future__ import annotations

import asyncio
import queue
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import trio

import sgcs
from test_trio_driver import delivery_of, make_config, view_with

WAIT = 10.0
"""Seconds any single wait may take before the test fails instead of hanging."""
ROOT = Path(__file__).resolve().parent.parent


async def next_event(group: sgcs.GroupHandle, predicate: Callable[[sgcs.Event], bool]) -> sgcs.Event:
    """asyncio's ``wait_for``: the next event of ``group`` that satisfies ``predicate``."""
    async with asyncio.timeout(WAIT):
        async for event in group:
            if predicate(event):
                return event
    raise AssertionError(f"the event stream of {group!r} ended")


def delivered(payload: bytes) -> Callable[[sgcs.Event], bool]:
    return lambda event: isinstance(event, sgcs.Delivery) and event.payload == payload


def view_holding(*ids: int) -> Callable[[sgcs.Event], bool]:
    return lambda event: isinstance(event, sgcs.ViewChange) and set(ids) <= set(event.members)


async def asyncio_member(config: sgcs.Config, ids: queue.Queue[int], trio_id: queue.Queue[int]) -> list[sgcs.Event]:
    """Join, meet the trio member, exchange with it, leave when it says so."""
    seen: list[sgcs.Event] = []
    async with sgcs.open_node(config) as node:
        ids.put(node.id)
        other = await asyncio.to_thread(trio_id.get, timeout=WAIT)
        async with node.join("mixed") as group:
            seen.append(await next_event(group, view_holding(node.id, other)))
            await group.send(b"from asyncio")
            seen.append(await next_event(group, delivered(b"from trio")))
            seen.append(await next_event(group, delivered(b"done")))
            assert group.view.members == tuple(sorted((node.id, other)))
    return seen


async def test_asyncio_and_trio_members_share_a_group(network: dict[str, object]) -> None:
    asyncio_ids: queue.Queue[int] = queue.Queue()
    trio_ids: queue.Queue[int] = queue.Queue()
    result: list[list[sgcs.Event]] = []

    async def run_asyncio_member() -> None:
        config = make_config(network, "asyncio-member")
        result.append(await trio.to_thread.run_sync(asyncio.run, asyncio_member(config, asyncio_ids, trio_ids)))

    async with sgcs.open_node(make_config(network, "trio-member")) as node, trio.open_nursery() as nursery:
        nursery.start_soon(run_asyncio_member)
        trio_ids.put(node.id)
        with trio.fail_after(WAIT):
            other = await trio.to_thread.run_sync(asyncio_ids.get)
        async with node.join("mixed") as group:
            await view_with(group, node.id, other)
            await group.send(b"from trio")
            delivery = await delivery_of(group, b"from asyncio")
            assert delivery.sender == other
            await group.send(b"done")
            with trio.fail_after(WAIT):
                async for event in group:
                    if isinstance(event, sgcs.ViewChange) and other in event.left:
                        break
            assert group.view.members == (node.id,)
    (events,) = result
    view, from_trio, done = events
    assert isinstance(view, sgcs.ViewChange) and set(view.members) == {node.id, other}
    assert isinstance(from_trio, sgcs.Delivery) and from_trio.sender == node.id
    assert isinstance(done, sgcs.Delivery) and done.sender == node.id


def test_two_asyncio_nodes_in_one_loop_exchange_and_errors_match_trio(network: dict[str, object]) -> None:
    async def main() -> None:
        async with sgcs.open_node(make_config(network, "a")) as a, sgcs.open_node(make_config(network, "b")) as b:
            assert isinstance(a, sgcs.NodeHandle) and a.id != b.id
            async with a.join("pair") as ga, b.join("pair") as gb:
                assert isinstance(ga, sgcs.GroupHandle)
                await next_event(ga, view_holding(a.id, b.id))
                await ga.send(b"to b", to=b.id)
                event = await next_event(gb, delivered(b"to b"))
                assert isinstance(event, sgcs.Delivery) and event.dest == b.id
                await gb.send_many([b"one", b"two"])
                events = await ga.receive_many()
                assert events, "receive_many returns at least one event"
                with pytest.raises(sgcs.UsageError, match="bytes"):
                    await ga.send("not bytes")  # type: ignore[arg-type]
                with pytest.raises(sgcs.UsageError, match="max_events"):
                    await ga.receive_many(0)
                with pytest.raises(TimeoutError):  # cancelling a waiting receive leaves the handle usable
                    async with asyncio.timeout(0.05):
                        while True:
                            await ga.receive()
                await ga.send(b"after cancel")
                await next_event(ga, delivered(b"after cancel"))
                await ga.leave()
                with pytest.raises(sgcs.GroupClosed):  # asyncio code needs no trio type
                    await ga.receive()
                with pytest.raises(sgcs.UsageError, match="was left"):
                    await ga.send(b"late")
                assert a.statistics().messages_delivered >= 3  # read from asyncio, as from a trio task

    asyncio.run(main())
    asyncio.run(main())  # a second loop in the same thread starts its own guest run


def test_open_error_under_asyncio_is_the_same_usage_error(network: dict[str, object]) -> None:
    async def main() -> None:
        with pytest.raises(sgcs.UsageError, match="sgcs.Config"):
            async with sgcs.open_node("not a config"):  # type: ignore[arg-type]
                pass
        async with sgcs.open_node(make_config(network, "holder")) as node:
            host, port = node.address
            with pytest.raises(sgcs.UsageError, match="already used"):
                async with sgcs.open_node(make_config(network, "twin", port=port)):
                    pass
            with pytest.raises(sgcs.UsageError, match="order"):
                async with node.join("bad-order", order="bogus"):
                    pass
            async with node.join("still-works") as group:
                await next_event(group, view_holding(node.id))

    asyncio.run(main())


def _quick_start(library: str) -> str:
    readme = (ROOT / "README.md").read_text()
    start = readme.index("## Quick start\n")
    section = readme[start : readme.index("\n## ", start + 1)]
    blocks = [code for code in re.findall(r"```python\n(.*?)```", section, re.S) if f"{library}.run(main" in code]
    assert len(blocks) == 1, f"the quick start has one {library} program"
    return blocks[0]


def test_readme_asyncio_quick_start_runs_and_delivers_its_own_message() -> None:
    code = _quick_start("asyncio")
    assert len([line for line in code.splitlines() if line.strip()]) <= 12, "about ten lines"
    process = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, cwd=ROOT, env={**os.environ, "SGCS_SECRET": "asyncio-quick-start-secret"})
    seen = []
    try:
        assert process.stdout is not None
        # readline blocks: the kill below (from a timer) is the guard against a silent program
        with _kill_after(process, 20.0):
            for line in process.stdout:
                seen.append(line)
                if "hello, group" in line:
                    break
        assert any("Delivery" in line and "hello, group" in line for line in seen), (seen, process.poll())
    finally:
        process.kill()
        _, stderr = process.communicate()
    assert "Traceback" not in stderr, stderr


class _kill_after:
    def __init__(self, process: subprocess.Popen[str], seconds: float) -> None:
        import threading

        self._timer = threading.Timer(seconds, process.kill)

    def __enter__(self) -> None:
        self._timer.start()

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()
