"""Flood one node with 100,000 datagrams from one source and measure its memory.

The requirement: a flood from one source cannot grow a node's memory without
bound. The floods (eight scenarios, from random bytes to join requests from
fresh ids) and the measuring (``tracemalloc`` peak and retained heap, the
node's own time) are the harness in ``tests/_flood.py``, which
``tests/test_limits.py`` runs with short floods; its docstring describes each
scenario. This script runs each at full length and compares the worst peak
with the documented cap (docs/limits.md): ``MEMORY_CAP_MB`` at the default
``Config``; ``cap_bytes`` gives the formula for others.

Run: ``python -m benchmarks.flood [--count N] [--scenario NAME]``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent.parent / "tests")]  # the harness: tests/_flood.py

from _flood import (  # noqa: E402
    PEER_STATE, RECORD_OVERHEAD, SCENARIO_FIELDS, SCENARIOS, default_config, record_payload, run_flood)
from sgcs.config import Config  # noqa: E402
from sgcs.node import MAX_PEERS  # noqa: E402
from sgcs.transport.reliable import SENDER_BUFFER_FACTOR  # noqa: E402

MEMORY_CAP_MB = 64.0
"""Documented cap, at the default Config, on the heap a one-source flood may
grow a node by (peak): see ``cap_bytes``."""


def cap_bytes(config: Config) -> int:
    """The heap a flood from one member may grow a node by: its unstable
    records (``SENDER_BUFFER_FACTOR * window_max``, which also hold any partial
    message, itself capped at ``max_message``), plus the per-stranger state a
    flood of fresh sender ids fills (addresses and replay windows, each capped
    at ``MAX_PEERS``), plus 8 MiB of slack for the interpreter."""
    record = record_payload(config) + RECORD_OVERHEAD
    records = SENDER_BUFFER_FACTOR * config.window_max * record
    return records + MAX_PEERS * PEER_STATE + 8 * 1024 * 1024


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.flood", description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=100_000, help="datagrams per scenario (default 100,000)")
    parser.add_argument("--scenario", choices=sorted(SCENARIOS), action="append", help="default: all")
    args = parser.parse_args(argv)
    if args.count < 1:
        parser.error("--count must be at least 1")
    config = default_config()
    cap = cap_bytes(config)
    print(f"documented cap: {MEMORY_CAP_MB:.0f} MB (formula at this Config: {cap / 2**20:.1f} MB)")
    worst = 0
    for name in args.scenario or list(SCENARIOS):
        fields = SCENARIO_FIELDS.get(name, {})
        result = run_flood(name, args.count, default_config(**fields) if fields else config)
        worst = max(worst, result.peak_bytes)
        print(result.line(), flush=True)
    verdict = "under" if worst < MEMORY_CAP_MB * 2**20 else "OVER"
    print(f"worst peak {worst / 2**20:.2f} MB: {verdict} the {MEMORY_CAP_MB:.0f} MB cap")
    return 0 if verdict == "under" else 1


if __name__ == "__main__":
    sys.exit(main())
