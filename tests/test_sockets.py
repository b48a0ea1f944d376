"""The trio driver's sockets: what the kernel hands a node."""

from __future__ import annotations

import random
import socket
import sys

import pytest
import trio

from sgcs.config import Config
from sgcs.io.sockets import open_sockets


def _config(group: str, port: int) -> Config:
    return Config(secret=b"sockets-test-secret", bind_host="127.0.0.1", multicast_group=group, multicast_port=port)


def _drain(sock: socket.socket) -> list[bytes]:
    sock.setblocking(False)
    got = []
    while True:
        try:
            got.append(sock.recvfrom(2048)[0])
        except BlockingIOError:
            return got


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the filter is Linux's SO_ATTACH_FILTER")
async def test_a_nodes_own_multicasts_never_reach_its_receiver_but_the_others_do() -> None:
    group, port = f"239.77.{random.randrange(256)}.{random.randrange(1, 255)}", random.randrange(20_000, 30_000)
    a, b = await open_sockets(_config(group, port)), await open_sockets(_config(group, port))
    try:
        assert a.raw_multicast is not None and b.raw_multicast is not None
        a.raw_unicast.sendto(b"from a", (group, port))
        b.raw_unicast.sendto(b"from b", (group, port))
        await trio.sleep(0.2)
        assert _drain(a.raw_multicast) == [b"from b"]  # its own dropped in the kernel
        assert _drain(b.raw_multicast) == [b"from a"]
    finally:
        for sockets in (a, b):
            sockets.close()
