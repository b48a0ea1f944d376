"""Drivers that run the sans-I/O node on real I/O.

``trio_driver`` runs it over UDP unicast and IP multicast (``sockets``), under
the public API in ``sgcs.api``; ``asyncio_host`` runs that same driver under an
asyncio loop (trio's guest mode) for asyncio programs. This package, unlike the protocol packages, may
import trio and socket; the protocol never imports it.
"""

from __future__ import annotations

from .trio_driver import DriverStatistics, TrioDriver, open_driver

__all__ = ["DriverStatistics", "TrioDriver", "open_driver"]
