"""Fingerprints of the simulator's traces, to show that a refactoring changed no behaviour.

    .venv/bin/python scripts/trace_digest.py                 # default, faults, churn scenarios
    .venv/bin/python scripts/trace_digest.py SCENARIO.toml   # others

Runs each scenario with the checkout's code (one worker, its seed) and prints
a SHA-256 per trace table (``events``, ``net``): the rows, in the order the
run wrote them, serialized as Arrow IPC. Run it before and after a change that
should not alter the protocol's behaviour; equal digests mean every event and
every datagram of the run is the same, bit for bit. ``stats`` (wall-clock
timings, memory) is left out: it differs between any two runs.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ("default.toml", "faults.toml", "membership-churn-total.toml")
TABLES = ("events", "net")


def table_digest(directory: Path) -> str:
    """SHA-256 of the table's part files' rows, parts in name order."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    digest = hashlib.sha256()
    for part in sorted(directory.rglob("*.parquet")):
        table = pq.read_table(part).combine_chunks()
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
        digest.update(part.relative_to(directory).as_posix().encode())
        digest.update(sink.getvalue().to_pybytes())
    return digest.hexdigest()


def run(scenario: Path) -> dict[str, str]:
    from sgcs.sim.run import simulate
    from sgcs.sim.scenario import load_scenario

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        simulate(load_scenario(scenario), out, progress=False)
        return {name: table_digest(out / name) for name in TABLES}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("scenarios", nargs="*", type=Path,
                        help="scenario files (default: the default, faults and churn scenarios)")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from sgcs import _compiled
    from sgcs.sim.scenario import SCENARIOS_DIR

    scenarios = args.scenarios or [Path(SCENARIOS_DIR) / name for name in SCENARIOS]
    print(f"code: {_compiled.describe()}")
    for scenario in scenarios:
        digests = run(scenario)
        print(scenario.name, " ".join(f"{name}={value[:16]}" for name, value in digests.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
