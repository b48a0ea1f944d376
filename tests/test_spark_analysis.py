"""spark_analysis and `sgcs analyze` on small traces, with one local[1] SparkSession.

Spark's start-up and per-job overhead dominate, so one module fixture runs the
whole analysis once over every trace (hand-made ones and one simulated run) as
a multi-run report, and the tests read its metrics.json: each invariant's
violating trace is caught, the clean trace has none, every trace's counts equal
sgcs.sim.checks.violations(), and hand-made traces give known latency,
reliability, load, detection, view-change and occupancy figures.
"""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")

import spark_traces  # noqa: E402 (after the importorskip)

from sgcs.apps.cli import main  # noqa: E402
from sgcs.sim import checks  # noqa: E402

from _scenario import group, write_scenario  # noqa: E402

SCENARIO = {
    "seed": 3, "nodes": 8, "duration": 6.0,
    "network": {"latency_ms": {"median": 1.0, "sigma": 0.5}, "loss": 0.02},
    "groups": [group(order="total", rate=20.0, size=64)],
    "faults": [{"at": 2.0, "crash": [5]}, {"at": 4.0, "recover": [5]}],
}


@pytest.fixture(scope="session")
def spark() -> Any:
    from sgcs.analysis.session import spark_session, tune_for_rows

    session = spark_session("local[1]", app="sgcs-tests", small_input=True)
    tune_for_rows(session, 0)
    return session


def _simulate(tmp: Path) -> str:
    from sgcs.sim.run import simulate
    from sgcs.sim.scenario import load_scenario

    simulate(load_scenario(write_scenario(tmp / "scenario.toml", **SCENARIO)), str(tmp / "sim"), progress=False)
    return str(tmp / "sim")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    tmp = tmp_path_factory.mktemp("traces")
    made = {"clean": spark_traces.clean().write(tmp / "clean"),
            "measured": spark_traces.measured().write(tmp / "measured")}
    for key, (build, _) in spark_traces.VIOLATIONS.items():
        made[key] = build().write(tmp / key)
    made["simulated"] = _simulate(tmp)
    return made


@pytest.fixture(scope="module")
def report(spark: Any, runs: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from sgcs.analysis.command import run_analyze

    out = tmp_path_factory.mktemp("report")
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        code = run_analyze(list(runs.values()), str(out), None, progress=False)
    metrics = json.loads((out / "metrics.json").read_text())
    return {"code": code, "stdout": stdout.getvalue(), "out": out, "metrics": metrics["runs"], "all": metrics}


def _metrics(report: dict[str, Any], runs: dict[str, str], name: str) -> dict[str, Any]:
    return report["metrics"][runs[name]]


# ------------------------------------------------------------------ invariants


def test_clean_trace_has_no_violations(report: dict[str, Any], runs: dict[str, str]) -> None:
    counts = {k: v["count"] for k, v in _metrics(report, runs, "clean")["invariants"].items()}
    assert counts == dict.fromkeys(spark_traces.VIOLATIONS, 0)


@pytest.mark.parametrize("key", list(spark_traces.VIOLATIONS))
def test_each_invariant_violation_is_caught(report: dict[str, Any], runs: dict[str, str], key: str) -> None:
    found = _metrics(report, runs, key)["invariants"][key]
    assert found["count"] == spark_traces.VIOLATIONS[key][1]
    assert found["examples"], "a violation comes with an example"


def _checks_counts(run: str) -> dict[str, int]:
    """checks.violations(), with 3 and 4 limited to groups of those orders as sgcs analyze does
    (checks.py applies them to every group and leaves the choice to its caller)."""
    import pandas as pd

    from sgcs.analysis.invariants import CAUSAL_ORDERS, TOTAL_ORDERS

    events = checks.read_events(run)
    counts = checks.violations(events)
    messages = events["kind"].isin(["send", "deliver"])
    for key, orders, check in (("3_total", TOTAL_ORDERS, checks.total_order_violations),
                               ("4_causal", CAUSAL_ORDERS, checks.causal_violations)):
        kept = events[~messages | events["order"].isin(orders)]
        counts[key] = check(pd.DataFrame(kept))
    return counts


@pytest.mark.parametrize("name", ["clean", "measured", "simulated", *spark_traces.VIOLATIONS])
def test_invariant_counts_equal_checks_py(report: dict[str, Any], runs: dict[str, str], name: str) -> None:
    ours = {k: v["count"] for k, v in _metrics(report, runs, name)["invariants"].items()}
    assert ours == _checks_counts(runs[name])


def test_all_groups_mode_is_checks_py_literally(spark: Any, runs: dict[str, str]) -> None:
    from sgcs.analysis.invariants import prepare, total_order
    from sgcs.analysis.readers import read_events

    run = runs["4_causal"]  # a causal group: checks.py also counts its total-order inversions
    events = prepare(read_events(spark, [run]))
    assert total_order(events, orders=None).count() == checks.violations(checks.read_events(run))["3_total"] == 1
    assert total_order(events).count() == 0


def test_checks_of_orders_absent_from_the_trace_cost_no_job(spark: Any, runs: dict[str, str]) -> None:
    from sgcs.analysis.invariants import check_invariants
    from sgcs.analysis.readers import read_events

    run = runs["3_total"]
    events = read_events(spark, [run])
    asked: list[str] = []
    told = check_invariants(events, [run], progress=asked.append, orders={"fifo"})
    assert told[run]["3_total"]["count"] == 0 and "3_total" not in asked and "4_causal" not in asked
    found = check_invariants(events, [run], progress=asked.append, orders={"fifo", "total"})
    assert found[run]["3_total"]["count"] == spark_traces.VIOLATIONS["3_total"][1] and "3_total" in asked


def test_checks_lacking_a_kind_they_join_cost_no_job(spark: Any, runs: dict[str, str]) -> None:
    from sgcs.analysis.invariants import check_invariants
    from sgcs.analysis.readers import read_events

    run, key = runs["7_rolled_back_delivered"], "7_rolled_back_delivered"
    events = read_events(spark, [run])
    asked: list[str] = []
    told = check_invariants(events, [run], progress=asked.append, kinds={"send", "deliver", "view"},
                            optimistic_sends=False)
    assert told[run][key]["count"] == 0 and key not in asked and "7_outside_optimistic_view" not in asked
    assert "1_duplicate" in asked
    found = check_invariants(events, [run], progress=asked.append, kinds={"send", "deliver", "view", "rollback"})
    assert found[run][key]["count"] == spark_traces.VIOLATIONS[key][1] and key in asked


def test_examples_name_the_culprit(report: dict[str, Any], runs: dict[str, str]) -> None:
    causal = _metrics(report, runs, "4_causal")["invariants"]["4_causal"]["examples"][0]
    assert (causal["node"], causal["sender"], causal["seq"], causal["late_sender"], causal["late_seq"]) == (2, 1, 1, 0, 1)
    vs = _metrics(report, runs, "5_virtual_synchrony")["invariants"]["5_virtual_synchrony"]["examples"][0]
    assert (vs["node"], vs["difference"], vs["example_sender"], vs["example_seq"]) == (2, 1, 2, 1)
    missing = _metrics(report, runs, "7_outside_optimistic_view")["invariants"]["7_outside_optimistic_view"]
    assert missing["examples"][0]["missing"] == [3]


# ------------------------------------------------------------------ measurements with known answers


def test_latency_per_order(report: dict[str, Any], runs: dict[str, str]) -> None:
    latency = _metrics(report, runs, "measured")["latency"]
    assert set(latency) == {"fifo", "total"}
    fifo, total = latency["fifo"], latency["total"]
    assert fifo["count"] == 6  # the sender's own deliveries are left out
    assert fifo["p50"] == pytest.approx(0.01) and fifo["max"] == pytest.approx(0.04)
    assert fifo["p99"] == pytest.approx(0.04)
    assert total["count"] == 2 and total["p50"] == pytest.approx(0.1) and total["max"] == pytest.approx(0.2)


def test_reliability_counts_live_members_only(report: dict[str, Any], runs: dict[str, str]) -> None:
    rel = _metrics(report, runs, "measured")["reliability"]
    # 4/4, then 2/4, then 3/3 (member 3 crashed before the third send)
    assert rel["messages"] == 3
    assert rel["mean"] == pytest.approx((1 + 0.5 + 1) / 3, abs=1e-6)
    assert rel["full_fraction"] == pytest.approx(2 / 3, abs=1e-6) and rel["min"] == 0.5
    assert {(b["low"], b["messages"]) for b in rel["histogram"]} == {(0.5, 1), (1.0, 2)}


def test_load_per_live_member(report: dict[str, Any], runs: dict[str, str]) -> None:
    load = _metrics(report, runs, "measured")["load"]
    # node 0 sends in buckets 0 and 1, node 1 only in bucket 0: 3 live node-seconds
    data, heartbeat = load["by_msg_type"]["data"], load["by_msg_type"]["heartbeat"]
    assert data["msgs_per_member_per_s"] == pytest.approx(20 / 3, abs=1e-5)
    assert data["bytes_per_member_per_s"] == pytest.approx(2000 / 3, abs=1e-5)
    assert data["recv_msgs_per_member_per_s"] == pytest.approx(10 / 3, abs=1e-5)
    assert heartbeat["bytes_per_member_per_s"] == pytest.approx(100 / 3, abs=1e-5)
    assert load["total"]["msgs_per_member_per_s"] == pytest.approx(22 / 3, abs=1e-5)


def test_detection_and_false_suspicions(report: dict[str, Any], runs: dict[str, str]) -> None:
    detection = _metrics(report, runs, "measured")["detection"]
    (crash,) = detection["crashes"]
    assert (crash["node"], crash["t"], crash["survivors"], crash["never_excluded"]) == (3, 5.0, 3, 0)
    assert crash["first_suspicion_s"] == pytest.approx(0.5) and crash["first_suspicion_rounds"] == pytest.approx(5.0)
    assert crash["exclusion_median_s"] == pytest.approx(1.5) and crash["exclusion_max_s"] == pytest.approx(1.5)
    # suspects of a live node (false), of the crashed node, and of a paused node
    false = detection["false_suspicions"]
    assert (false["suspects"], false["false_suspects"]) == (3, 1)
    assert false["false_per_node_per_s"] == pytest.approx(1 / 40)


def test_view_change_duration(report: dict[str, Any], runs: dict[str, str]) -> None:
    views = _metrics(report, runs, "measured")["views"]
    (change,) = views["change_list"]
    assert (change["view_id"], change["members_dropped"]) == ("v2", 1)
    assert change["start"] == pytest.approx(5.5)  # the first suspicion of the dropped member
    assert change["to_first_s"] == pytest.approx(0.5) and change["to_all_s"] == pytest.approx(1.0)
    assert views["blocked"]["changes"] == 0


def test_occupancy_from_stats_or_not_recorded(report: dict[str, Any], runs: dict[str, str]) -> None:
    occupancy = _metrics(report, runs, "measured")["occupancy"]["g"]
    assert (occupancy["buffered_p50"], occupancy["buffered_p99"], occupancy["buffered_max"]) == (20, 41, 41)
    assert (occupancy["window_p50"], occupancy["window_max"]) == (2, 4)
    assert _metrics(report, runs, "clean")["occupancy"] == "not recorded"


def test_membership_metrics_agree_with_the_benchmark(report: dict[str, Any], runs: dict[str, str]) -> None:
    names = ("measured", "simulated")
    script = Path(__file__).resolve().parent.parent / "benchmarks" / "membership.py"
    done = subprocess.run([sys.executable, str(script), *(runs[name] for name in names), "--json"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    benchmark = json.loads(done.stdout)["runs"]
    for name, bench in zip(names, benchmark, strict=True):
        ours = _metrics(report, runs, name)
        for b, o in zip(bench["crashes"], ours["detection"]["crashes"], strict=True):
            for key in ("node", "survivors", "never_excluded"):
                assert b[key] == o[key]
            for key in ("first_suspicion_s", "exclusion_median_s", "exclusion_max_s"):
                assert b[key] == pytest.approx(o[key], abs=1e-5)
        for key in ("changes", "unresolved"):
            assert bench["blocked"][key] == ours["views"]["blocked"][key]
        assert bench["blocked"]["total_s"] == pytest.approx(ours["views"]["blocked"]["total_s"] or 0.0, abs=1e-5)
        assert bench["views"] == {k: ours["views"]["counts"][k] for k in ("installed", "distinct_ids", "optimistic")}


# ------------------------------------------------------------------ the report and the command


def test_report_files_and_headline(report: dict[str, Any], runs: dict[str, str]) -> None:
    assert report["code"] == 0
    out = report["out"]
    text = (out / "report.md").read_text()
    for section in ("## Delivery latency", "## Reliability", "## Invariants", "## Failure detection",
                    "## Load per member", "## View changes", "## Buffer and window occupancy"):
        assert section in text
    for name in ("latency_cdf.png", "reliability.png", "load_by_type.png", "occupancy.png", "view_changes.png"):
        assert (out / name).read_bytes()[:4] == b"\x89PNG"
    assert report["all"]["plots"]["latency_cdf"] == "latency_cdf.png"
    assert f"report: {out}/report.md" in report["stdout"]
    assert "invariant violations: 0" in report["stdout"] and "latency: total p50" in report["stdout"]
    assert _metrics(report, runs, "simulated")["rows"]["events"] > 0


@pytest.mark.parametrize("argv, message", [
    (["analyze", "/nonexistent/run"], "no such directory"),
    (["analyze", "{tmp}"], "not a trace directory (no meta.json"),
    (["analyze", "{clean}", "{clean}"], "several runs need --out"),
])
def test_bad_input_is_one_line_and_exit_2(argv: list[str], message: str, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    clean = spark_traces.clean().write(tmp_path / "run")
    argv = [a.format(tmp=tmp_path / "empty", clean=clean) for a in argv]
    (tmp_path / "empty").mkdir()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("sgcs analyze: error:") and message in err[0]


def test_a_corrupt_part_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = Path(spark_traces.clean().write(tmp_path / "run"))
    (run / "net" / "part-00000.parquet").write_bytes(b"not parquet at all")
    assert main(["analyze", str(run)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "net/part-00000.parquet is not readable Parquet" in err[0]


def test_a_run_without_events_is_not_a_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = Path(spark_traces.clean().write(tmp_path / "run"))
    for part in (run / "events").iterdir():
        part.unlink()
    assert main(["analyze", str(run)]) == 2
    assert "no events/*.parquet" in capsys.readouterr().err


def test_a_reliability_histogram_is_drawn_only_when_some_message_missed_someone(tmp_path: Path) -> None:
    import pandas as pd

    from sgcs.analysis import plots

    everyone = pd.DataFrame({"run": ["r", "r"], "low": [0.9, 1.0], "share": [0.0, 1.0]})
    assert plots.reliability_histogram(everyone, 10, tmp_path) is None
    some = pd.DataFrame({"run": ["r", "r"], "low": [0.9, 1.0], "share": [0.01, 0.99]})
    assert plots.reliability_histogram(some, 10, tmp_path) == "reliability.png"
    equal = pd.DataFrame({"run": ["r"] * 2, "group": ["g"] * 2, "t": [0.0, 1.0], "buffered_max": [3, 4],
                          "buffered_mean": [1.0, 2.0], "window_max": [3, 4], "window_mean": [1.0, 2.0]})
    assert plots.occupancy(equal, tmp_path) == "occupancy.png"
    assert plots.occupancy(equal.assign(window_max=[1, 1]), tmp_path) == "occupancy.png"
