"""The post office on real sockets: trio API and blocking API (issue 20)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

import sgcs
from sgcs.services.mailboxes.blocking import open_blocking_post_office
from sgcs.services.mailboxes.postoffice import Settings
from sgcs.services.mailboxes.service import PostOfficeService, open_post_office

WAIT = 20.0


def config(network: dict[str, Any], name: str) -> sgcs.Config:
    return sgcs.Config(name=name, secret=b"mailbox-test-secret", beacon_interval=0.1, **network)


FAST = Settings(retry_initial=0.2, retry_max=0.5)


async def until_peers(*offices: PostOfficeService) -> None:
    with trio.fail_after(WAIT):
        while any(len(po.peers()) < len(offices) - 1 for po in offices):
            await trio.sleep(0.05)


async def pull_count(po: PostOfficeService, name: str, count: int) -> list[bytes]:
    got: list[bytes] = []
    with trio.fail_after(WAIT):
        while len(got) < count:
            got += [m.content for m in await po.pull(name)]
            await trio.sleep(0.02)
    return got


@pytest.mark.trio
async def test_mail_across_domains_and_a_move(network: dict[str, Any], tmp_path: Path) -> None:
    async with open_post_office(0, config(network, "po0"), tmp_path / "po0.db", settings=FAST) as po0, \
            open_post_office(1, config(network, "po1"), tmp_path / "po1.db", settings=FAST) as po1:
        await until_peers(po0, po1)
        a, b = po0.mi_name("h", "a"), po1.mi_name("h", "b")
        await po0.create_mi(a)
        await po1.create_mi(b, app_state=b"step 1")
        for i in range(10):
            await po0.send(a, b, f"m{i}".encode())
        assert await pull_count(po1, b, 10) == [f"m{i}".encode() for i in range(10)]
        await po1.move(b, 0, app_state=b"step 2")
        with trio.fail_after(WAIT):
            while b not in po0.running():
                await po0.wait_arrival()
        state = po0.mi_state(b)
        assert state is not None and state.app_state == b"step 2" and state.next_expected == {a: 10}
        await po0.send_many(a, [(b, f"n{i}".encode()) for i in range(5)])
        assert await pull_count(po0, b, 5) == [f"n{i}".encode() for i in range(5)]
        assert po1.running() == []


def test_blocking_post_offices(network: dict[str, Any], tmp_path: Path) -> None:
    with open_blocking_post_office(0, config(network, "b0"), tmp_path / "b0.db", settings=FAST) as po0, \
            open_blocking_post_office(1, config(network, "b1"), tmp_path / "b1.db", settings=FAST) as po1:
        a, b = po0.mi_name("h", "a"), po1.mi_name("h", "b")
        po0.create_mi(a)
        po1.create_mi(b)
        po0.send_many(a, [(b, f"m{i}".encode()) for i in range(20)])
        got: list[bytes] = []
        import time
        end = time.monotonic() + WAIT
        while len(got) < 20 and time.monotonic() < end:
            got += [m.content for m in po1.pull(b)]
            time.sleep(0.05)
        assert got == [f"m{i}".encode() for i in range(20)]
        with pytest.raises(sgcs.UsageError):
            po0.pull(b)  # b does not run at PO 0
