"""Failure-detector round harness for claims 1 to 3 of ``benchmarks/claims.py``.

The harness itself (``FdHarness``, ``run_fd`` and the three timing models:
lockstep, desync and random) is ``tests/_fd_rounds.py``, whose docstring
describes it: the tests check the claims at small N with the same code that
measures them here at large N. This module puts it on the benchmarks' path
under its old name, for ``claims.py`` and ``claims_sim.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent.parent / "tests")]

from _fd_rounds import (  # noqa: E402
    GOSSIP, HEARTBEATS, LATENCY, LEAN_FROM, AlignedRandom, FdHarness, FdResult, dimensions, run_fd)

__all__ = ["GOSSIP", "HEARTBEATS", "LATENCY", "LEAN_FROM", "AlignedRandom", "FdHarness", "FdResult", "dimensions",
           "run_fd"]
