"""benchmarks/membership.py on small synthetic traces: each metric's value, and its null cases.

The script is run as its users run it, in a process of its own: the runs the
metric tests read are written once and measured by one ``--json`` call
(``measured``), which keeps the module to a few interpreter start-ups."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sgcs.trace import events_schema

SCHEMA = events_schema()
SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "membership.py"
MAX_EXAMPLES = 5
"""Live exclusions the script lists as examples per run (its ``MAX_EXAMPLES``)."""


def membership(*argv: str | Path) -> subprocess.CompletedProcess[str]:
    """``python benchmarks/membership.py ARGV...``."""
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, argv)], capture_output=True, text=True,
                          timeout=120)


RUNS: dict[str, Callable[[Path], Path]] = {}
"""Run name -> what writes that run into a directory; each is measured once, by ``measured``."""


def measured_run(name: str) -> Callable[[Callable[[Path], Path]], Callable[[Path], Path]]:
    def register(write: Callable[[Path], Path]) -> Callable[[Path], Path]:
        RUNS[name] = write
        return write
    return register


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Every run of ``RUNS``, measured by one ``--json`` call of the script."""
    root = tmp_path_factory.mktemp("membership")
    paths = {name: write(root / name) for name, write in RUNS.items()}
    done = membership(*paths.values(), "--json")
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout)["runs"]
    assert [r["run"] for r in results] == [str(path) for path in paths.values()]
    return dict(zip(paths, results, strict=True))


def write_run(path: Path, rows: list[dict[str, Any]], *, nodes: int, protocol: dict[str, Any] | None = None,
              faults: list[dict[str, Any]] | None = None, parts: int = 2) -> Path:
    """A run directory: meta.json and events/ split over ``parts`` part files."""
    scenario = {"seed": 1, "nodes": nodes, "duration": 30.0, "protocol": protocol or {},
                "groups": [{"name": "g", "order": "fifo", "members": "all", "rate": 1.0, "size": 8}],
                "faults": faults or []}
    meta = {"schema": 1, "seed": 1, "nodes": nodes, "duration": 30.0, "scenario": scenario, "sgcs_version": "test"}
    path.mkdir()
    (path / "meta.json").write_text(json.dumps(meta))
    (path / "events").mkdir()
    columns = {field.name: [row.get(field.name) for row in rows] for field in SCHEMA}
    table = pa.table(columns, schema=SCHEMA)
    step = max(1, -(-len(rows) // parts))
    for i in range(parts):
        pq.write_table(table.slice(i * step, step), path / "events" / f"part-{i:05d}.parquet")
    return path


def view(t: float, node: int, members: list[int], *, optimistic: bool | None = False,
         view_id: str | None = None) -> dict[str, Any]:
    return {"t": t, "node": node, "kind": "view", "group": "g", "members": members, "optimistic": optimistic,
            "view_id": view_id or "v" + "-".join(map(str, members))}


def row(t: float, node: int, kind: str, **fields: Any) -> dict[str, Any]:
    return {"t": t, "node": node, "kind": kind, **fields}


def traffic(t: float, node: int) -> list[dict[str, Any]]:
    """Rows the metrics must ignore."""
    return [row(t, node, "send", group="g", sender=node, seq=1, order="fifo", size=8, optimistic=False),
            row(t, node, "deliver", group="g", sender=node, seq=1, order="fifo", size=8, optimistic=True)]


# ---------------------------------------------------------------- a crash


def crash_rows() -> list[dict[str, Any]]:
    """Nodes 0..5; 5 leaves at t=5; 4 crashes at t=10 (gossip_interval 0.2).

    Survivors 0..3 install a view without 4 at 11.5, 12.0, 13.0 and never (3).
    """
    rows = [row(0.0, n, "join", group="g") for n in range(6)]
    rows += [view(0.0, n, [0, 1, 2, 3, 4, 5]) for n in range(6)]
    rows += traffic(1.0, 2)
    rows += [row(5.0, 5, "leave", group="g"), *[view(5.5, n, [0, 1, 2, 3, 4]) for n in range(5)]]
    rows += [row(9.0, 1, "suspect", target=4)]  # before the crash: not its detection
    rows += [row(10.0, 4, "crash")]
    rows += [row(10.3, 1, "suspect", target=3), row(10.4, 1, "unsuspect", target=3, reason="busy")]
    rows += [row(10.5, 0, "suspect", target=4), row(10.6, 2, "suspect", target=4)]
    rows += [row(10.7, 2, "unsuspect", target=3)]
    rows += [view(11.0, 0, [0, 1, 2, 3], optimistic=True), view(11.2, 1, [0, 1, 2, 3], optimistic=True)]
    rows += [view(11.5, 0, [0, 1, 2, 3]), *traffic(11.6, 0), view(12.0, 1, [0, 1, 2, 3])]
    rows += [view(12.5, 2, [0, 1, 2, 3], optimistic=True), view(12.8, 2, [0, 1, 2, 3], optimistic=True)]
    rows += [view(13.0, 2, [0, 1, 2, 3], optimistic=None)]  # null optimistic: installed
    rows += [view(14.0, 3, [0, 1, 2, 3], optimistic=True)]  # never installed
    return rows


@measured_run("crash")
def crash_trace(path: Path) -> Path:
    return write_run(path, crash_rows(), nodes=6, protocol={"gossip_interval": 0.2})


@pytest.fixture
def crash_run(measured: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return measured["crash"]


def test_crash_detection(crash_run: dict[str, Any]) -> None:
    assert crash_run["gossip_interval"] == 0.2
    assert crash_run["crashes"] == [{
        "node": 4, "t": 10.0,
        "first_suspicion_s": 0.5, "first_suspicion_rounds": 2.5,
        "survivors": 4,
        "exclusion_median_s": 2.0, "exclusion_median_rounds": 10.0,
        "exclusion_max_s": 3.0, "exclusion_max_rounds": 15.0,
        "never_excluded": 1,
    }]


def test_false_positive_counts(crash_run: dict[str, Any]) -> None:
    fp = crash_run["false_positives"]
    assert (fp["suspects"], fp["unsuspects"], fp["unsuspects_busy"]) == (4, 2, 1)
    # 5 left and 4 crashed before the views that drop them: no live exclusion.
    assert (fp["live_exclusions"], fp["live_excluded_nodes"], fp["live_exclusion_examples"]) == (0, 0, [])


def test_blocked_time(crash_run: dict[str, Any]) -> None:
    # node 0: 11.0 -> 11.5; node 1: 11.2 -> 12.0; node 2: 12.5 (first of two) -> 13.0; node 3: open.
    assert crash_run["blocked"] == {"changes": 3, "total_s": 1.8, "median_s": 0.5, "max_s": 0.8, "unresolved": 1}


def test_view_counts_and_no_heal(crash_run: dict[str, Any]) -> None:
    assert crash_run["views"] == {"installed": 14, "distinct_ids": 3, "optimistic": 5}
    assert crash_run["heals"] == []


@measured_run("nobody_notices")
def nobody_notices_trace(path: Path) -> Path:
    rows = [view(0.0, n, [0, 1, 2]) for n in range(3)] + [row(1.0, 2, "crash")]
    return write_run(path, rows, nodes=3)


def test_crash_nobody_notices(measured: dict[str, dict[str, Any]]) -> None:
    result = measured["nobody_notices"]
    assert result["crashes"] == [{
        "node": 2, "t": 1.0,
        "first_suspicion_s": None, "first_suspicion_rounds": None,
        "survivors": 2,
        "exclusion_median_s": None, "exclusion_median_rounds": None,
        "exclusion_max_s": None, "exclusion_max_rounds": None,
        "never_excluded": 2,
    }]


# ---------------------------------------------------------------- a partition and its heal


def partition_rows(last_installer: bool = True) -> list[dict[str, Any]]:
    """Nodes 0..5; 5 starts by a join fault at t=3; 3 leaves at 4; halves
    {0,1,2} and {4,5} at 5..10; views of {0,1,2,4,5} at 11..12.5 (node 5 last)."""
    everyone, without_3 = [0, 1, 2, 3, 4, 5], [0, 1, 2, 4, 5]
    rows = [row(0.0, n, "join", group="g") for n in range(5)] + [view(0.0, n, [0, 1, 2, 3, 4]) for n in range(5)]
    # node 0 briefly lists 5 before it started, and drops it: not a live member yet.
    rows += [view(1.0, 0, everyone), view(2.0, 0, [0, 1, 2, 3, 4])]
    rows += [row(3.0, 5, "join", group="g"), *[view(3.0, n, everyone) for n in range(6)]]
    rows += [row(4.0, 3, "leave", group="g"), *[view(4.6, n, without_3) for n in without_3]]
    rows += [view(6.0, n, [0, 1, 2]) for n in (0, 1, 2)] + [view(6.0, n, [4, 5]) for n in (4, 5)]
    rows += [view(11.0, 0, without_3), view(11.2, 4, without_3), view(11.5, 1, without_3)]
    rows += [view(12.0, 2, without_3 + [3])]  # a superset of the final members counts
    if last_installer:
        rows += [view(12.5, 5, without_3)]
    return rows


FAULTS = [{"at": 3.0, "join": [5]}, {"at": 4.0, "leave": [3]},
          {"at": 5.0, "partition": [[0, 1, 2], [4, 5]]}, {"at": 10.0, "heal": True}]


@measured_run("partition")
def partition_trace(path: Path) -> Path:
    return write_run(path, partition_rows(), nodes=6, faults=FAULTS)


@measured_run("partition_without_last_installer")
def partition_without_last_installer_trace(path: Path) -> Path:
    return write_run(path, partition_rows(last_installer=False), nodes=6, faults=FAULTS)


def test_live_exclusions(measured: dict[str, dict[str, Any]]) -> None:
    result = measured["partition"]
    fp = result["false_positives"]
    # At t=6: 0, 1, 2 each drop 4 and 5; 4 and 5 each drop 0, 1 and 2.
    assert fp["live_exclusions"] == 12
    assert fp["live_excluded_nodes"] == 5
    examples = fp["live_exclusion_examples"]
    assert len(examples) == MAX_EXAMPLES
    assert examples[0] == {"t": 6.0, "node": 0, "group": "g", "view_id": "v0-1-2", "excluded": [4, 5]}
    assert examples[3] == {"t": 6.0, "node": 4, "group": "g", "view_id": "v4-5", "excluded": [0, 1, 2]}


@pytest.mark.parametrize(("last_installer", "converged", "unconverged"), [(True, 2.5, 0), (False, None, 1)])
def test_heal(measured: dict[str, dict[str, Any]], last_installer: bool, converged: float | None,
              unconverged: int) -> None:
    result = measured["partition" if last_installer else "partition_without_last_installer"]
    rounds = None if converged is None else converged / 0.1
    assert result["heals"] == [{"t": 10.0, "converged_s": converged, "converged_rounds": rounds,
                                "unconverged_nodes": unconverged}]


@measured_run("never_split")
def never_split_trace(path: Path) -> Path:
    rows = [row(0.0, n, "join", group="g") for n in range(2)] + [view(0.0, n, [0, 1]) for n in range(2)]
    return write_run(path, rows, nodes=2, faults=[{"at": 5.0, "heal": True}])


def test_heal_when_views_never_split(measured: dict[str, dict[str, Any]]) -> None:
    result = measured["never_split"]
    assert result["heals"][0]["converged_s"] == 0.0


# ---------------------------------------------------------------- empty traces and the command line


@measured_run("traffic_only")
def traffic_only_trace(path: Path) -> Path:
    return write_run(path, traffic(1.0, 0) + traffic(2.0, 1), nodes=2)


def test_no_membership_rows(measured: dict[str, dict[str, Any]]) -> None:
    result = measured["traffic_only"]
    assert result["crashes"] == [] and result["heals"] == []
    assert result["blocked"] == {"changes": 0, "total_s": 0.0, "median_s": None, "max_s": None, "unresolved": 0}
    assert result["views"] == {"installed": 0, "distinct_ids": 0, "optimistic": 0}
    assert result["false_positives"]["live_exclusions"] == 0


@measured_run("empty")
def empty_trace(path: Path) -> Path:
    return write_run(path, [], nodes=1, parts=1)


def test_empty_events(measured: dict[str, dict[str, Any]]) -> None:
    result = measured["empty"]
    assert result["views"]["installed"] == 0 and result["crashes"] == []


def test_cli_json_and_table(tmp_path: Path) -> None:
    crash = write_run(tmp_path / "crash", crash_rows(), nodes=6)
    split = write_run(tmp_path / "split", partition_rows(), nodes=6, faults=FAULTS)
    done = membership(crash, split, "--json")
    assert done.returncode == 0, done.stderr
    runs = json.loads(done.stdout)["runs"]
    assert [r["run"] for r in runs] == [str(crash), str(split)]
    assert set(runs[0]) == {"run", "nodes", "duration", "gossip_interval", "crashes", "false_positives",
                            "heals", "blocked", "views"}
    done = membership(crash, split)
    assert done.returncode == 0, done.stderr
    table = done.stdout
    assert "crash 4@10 first suspect" in table and "heal@10 converged" in table
    assert "split: t=6 node 0 group g view v0-1-2 dropped live [4, 5]" in table


def test_cli_rejects_a_directory_that_is_no_run(tmp_path: Path) -> None:
    done = membership(tmp_path)
    assert done.returncode == 2
    assert "no meta.json" in done.stderr
