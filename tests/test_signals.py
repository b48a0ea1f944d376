"""SIGTERM stops a member gracefully: its peers see it leave, within a second,
and the process ends with status 143 (``sgcs.io.signals``)."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import textwrap
import time
from typing import Any

import pytest

import sgcs
import sgcs.blocking
from sgcs.io.signals import EXIT_STATUS

SECRET = b"signals-test-secret"
CHILD_ID = 77
WAIT = 20.0

TRIO_CHILD = """
import sys, trio, sgcs
async def main():
    config = sgcs.Config(name="child", secret={secret!r}, node_id={child}, beacon_interval=0.1, **{network!r})
    async with sgcs.open_node(config) as node:
        async with node.join("g") as group:
            async for event in group:
                if isinstance(event, sgcs.ViewChange) and len(event.members) == 2:
                    print("ready", flush=True)
trio.run(main)
"""

BLOCKING_CHILD = """
import sgcs, sgcs.blocking
config = sgcs.Config(name="child", secret={secret!r}, node_id={child}, beacon_interval=0.1, **{network!r})
with sgcs.blocking.open_node(config) as node, node.join("g") as group:
    while True:
        event = group.receive()
        if isinstance(event, sgcs.ViewChange) and len(event.members) == 2:
            print("ready", flush=True)
"""


@pytest.mark.parametrize("child", [TRIO_CHILD, BLOCKING_CHILD], ids=["trio", "blocking"])
def test_a_member_stopped_by_sigterm_is_seen_leaving_within_a_second(network: dict[str, Any], child: str) -> None:
    code = textwrap.dedent(child).format(secret=SECRET, child=CHILD_ID, network=network)
    config = sgcs.Config(name="parent", secret=SECRET, beacon_interval=0.1, **network)
    with sgcs.blocking.open_node(config) as node, node.join("g") as group:
        process = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True)
        try:
            assert process.stdout is not None
            deadline = time.monotonic() + WAIT
            while CHILD_ID not in group.view:
                assert time.monotonic() < deadline and process.poll() is None, "the child never joined"
                with contextlib.suppress(TimeoutError):
                    group.receive(timeout=0.1)
            assert process.stdout.readline().strip() == "ready"  # it saw the view of two: it joined for good
            stopped = time.monotonic()
            process.send_signal(signal.SIGTERM)
            seen = None
            while seen is None and time.monotonic() < stopped + WAIT:
                event = group.receive(timeout=WAIT)
                if isinstance(event, sgcs.ViewChange) and CHILD_ID not in event.members:
                    seen = event
            assert seen is not None
            took = time.monotonic() - stopped
            assert CHILD_ID in seen.left and CHILD_ID not in seen.failed, seen
            assert took < 1.0, f"seen leaving after {took:.2f} s"
            assert process.wait(WAIT) == EXIT_STATUS
            assert "Traceback" not in process.stderr.read() if process.stderr else True
        finally:
            process.kill()
            process.communicate()
