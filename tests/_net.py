"""The one way tests pick loopback ports and a multicast group of their own.

Imported by ``tests/conftest.py`` (the ``network`` fixture) and directly by
modules and helper scripts (``membership_peer.py``) that need more than one
network or extra fields; ``tests/`` is on ``sys.path`` (``pythonpath`` in
pyproject.toml's pytest section; for a script, its own directory)."""

from __future__ import annotations

import random
import socket
from typing import Any


def free_udp_ports(count: int = 1) -> list[int]:
    """``count`` UDP ports of 127.0.0.1 free right now (bound, then released
    together, so they differ)."""
    sockets = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def free_udp_port() -> int:
    (port,) = free_udp_ports(1)
    return port


def private_group() -> str:
    """A random administratively scoped (239.255/16) multicast group."""
    rng = random.SystemRandom()
    return f"239.255.{rng.randrange(1, 255)}.{rng.randrange(1, 255)}"


def private_multicast(**fields: Any) -> dict[str, Any]:
    """``sgcs.Config`` fields for a multicast group and port of the caller's
    own, plus ``fields`` (e.g. ``beacon_interval=0.1``)."""
    return {"multicast_group": private_group(), "multicast_port": free_udp_port(), **fields}
