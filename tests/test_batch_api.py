"""Batch calls of the public API: ``send_many`` and ``receive_many`` in the trio
API and the blocking facade, over real loopback sockets (one member, so the
outcome does not depend on discovery): order, counts and end of stream."""

from __future__ import annotations


import pytest
import trio

import sgcs
import sgcs.blocking
from _net import private_multicast

SECRET = b"batch-api-test-secret"
WAIT = 20.0


PAYLOADS = [b"m%04d" % i for i in range(500)]


async def test_send_many_then_receive_many_deliver_every_payload_in_order() -> None:
    config = sgcs.Config(name="batch", secret=SECRET, **private_multicast())
    with trio.fail_after(WAIT):
        async with sgcs.open_node(config) as node, node.join("g", members=[]) as group:
            first = await group.receive_many()
            assert isinstance(first[0], sgcs.ViewChange)
            await group.send_many(PAYLOADS)
            got: list[bytes] = [e.payload for e in first if isinstance(e, sgcs.Delivery)]
            while len(got) < len(PAYLOADS):
                batch = await group.receive_many(max_events=100)
                assert 1 <= len(batch) <= 100
                got += [e.payload for e in batch if isinstance(e, sgcs.Delivery)]
            assert got == PAYLOADS
            stats = node.statistics()
            assert stats.datagrams_sent < len(PAYLOADS) / 4, "a batch shares datagrams"


async def test_receive_many_rejects_a_limit_below_one_and_ends_with_the_stream() -> None:
    config = sgcs.Config(name="batch", secret=SECRET, **private_multicast())
    with trio.fail_after(WAIT):
        async with sgcs.open_node(config) as node, node.join("g", members=[]) as group:
            with pytest.raises(sgcs.UsageError, match="max_events"):
                await group.receive_many(max_events=0)
            await group.leave()
            with pytest.raises(sgcs.GroupClosed) as ended:
                await group.receive_many()
            assert isinstance(ended.value, trio.EndOfChannel), "trio code may catch trio's own"


def test_blocking_send_many_and_receive_many() -> None:
    config = sgcs.Config(name="batch", secret=SECRET, **private_multicast())
    with sgcs.blocking.open_node(config) as node, node.join("g", members=[]) as group:
        group.send_many(PAYLOADS)
        got: list[bytes] = []
        while len(got) < len(PAYLOADS):
            batch = group.receive_many(max_events=64, timeout=WAIT)
            assert 1 <= len(batch) <= 64
            got += [e.payload for e in batch if isinstance(e, sgcs.Delivery)]
        assert got == PAYLOADS
        with pytest.raises(sgcs.UsageError, match="max_events"):
            group.receive_many(max_events=0)
