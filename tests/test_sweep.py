"""`sgcs sweep`: sweep files, grid expansion, growth fits, and one small sweep on local[1]."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from sgcs.apps.cli import main
from sgcs.errors import UsageError
from sgcs.analysis.fit import fit_growth, fit_line
from sgcs.analysis.sweep_spec import load_sweep, parse_sweep, set_path

SWEEPS = Path(__file__).resolve().parent.parent / "simulations" / "sweeps"

BASE = """
[base]
nodes = 8
duration = 4.0
[base.network]
loss = 0.0
[[base.groups]]
name = "g"
rate = 1.0
[[base.faults]]
at = 2.0
crash = [1]
"""


def _sweep(grid: str, top: str = "") -> str:
    return f"{top}\n[grid]\n{grid}\n{BASE}"


# ------------------------------------------------------------------ grid expansion


def test_grid_is_the_product_of_values_and_seeds_big_n_first() -> None:
    sweep = parse_sweep(_sweep('nodes = [16, 64]\n"network.loss" = [0.0, 0.05]', "seeds = [1, 2]"))
    assert len(sweep.points) == 2 * 2 * 2
    assert [p.nodes for p in sweep.points] == [64] * 4 + [16] * 4
    names = {p.name for p in sweep.points}
    assert "n64_loss0.05_seed2" in names and "n16_loss0_seed1" in names
    point = next(p for p in sweep.points if p.name == "n64_loss0.05_seed2")
    assert point.raw["network"]["loss"] == 0.05 and point.raw["seed"] == 2 and point.raw["nodes"] == 64
    assert point.series == "loss=0.05"
    assert point.suspect_timeout == pytest.approx(6 * 0.1)  # ceil(log2 64) rounds of 0.1 s


def test_top_level_duration_and_default_seed() -> None:
    sweep = parse_sweep(_sweep("nodes = [8]", "duration = 3.0"))
    (point,) = sweep.points
    assert point.raw["duration"] == 3.0 and point.seed == 0 and point.series == "all"


def test_base_file_is_resolved_next_to_the_sweep_file(tmp_path: Path) -> None:
    (tmp_path / "scenario.toml").write_text("nodes = 10\nduration = 2.0\nseed = 9\n")
    path = tmp_path / "s.toml"
    path.write_text('base = "scenario.toml"\n[grid]\n"protocol.suspect_factor" = [1, 2]\n')
    sweep = load_sweep(path)
    assert [p.name for p in sweep.points] == ["suspect_factor1_seed9", "suspect_factor2_seed9"]
    assert sweep.points[1].raw["protocol"] == {"suspect_factor": 2}


def test_set_path_reaches_into_arrays_of_tables() -> None:
    raw = {"groups": [{"name": "g", "rate": 1.0}], "faults": [{"at": 1.0, "crash": [1]}]}
    set_path(raw, "groups[0].rate", 5.0)
    set_path(raw, "faults[0].at", 2.5)
    set_path(raw, "network.latency_ms.median", 3.0)
    assert raw["groups"][0]["rate"] == 5.0 and raw["faults"][0]["at"] == 2.5
    assert raw["network"] == {"latency_ms": {"median": 3.0}}


def test_labels_that_collide_use_the_full_key() -> None:
    text = _sweep('"groups[0].rate" = [1.0]\n"groups[1].rate" = [2.0]') + '[[base.groups]]\nname = "h"\n'
    assert parse_sweep(text).points[0].name == "groups-0-rate1_groups-1-rate2_seed0"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[grid]\nnodes = [8]\n", "base: required"),
        ('base = "missing.toml"\n[grid]\nnodes = [8]\n', "base: cannot read"),
        (_sweep("nodes = [8]", "colour = 1"), "colour: unknown sweep key"),
        (_sweep("nodes = 8"), "grid.nodes: must be a non-empty array"),
        (_sweep("nodes = []"), "grid.nodes: must be a non-empty array"),
        (_sweep("nodes = [8, 8]"), "grid.nodes: lists a value twice"),
        (_sweep("seed = [1, 2]"), "grid.seed: give repetitions as seeds"),
        (_sweep('"network..loss" = [0.1]'), "grid.network..loss: not a scenario path"),
        (_sweep('"groups[3].rate" = [1.0]'), "grid.groups[3].rate: the base scenario has 1 groups"),
        (_sweep('"network.loss" = [0.1, 1.5]'), "network.loss: 1.5 is not in [0, 1] (sweep point loss1.5_seed0)"),
        (_sweep('"protocol.suspect_factor" = [0.5]'), "protocol: Config.suspect_factor must be in"),
        (_sweep("nodes = [1, 8]"), "faults[0].crash: node 1 is not in 0..0"),
        (_sweep("nodes = [8]", "seeds = []"), "seeds: must be a non-empty array"),
        (_sweep("nodes = [8]", "seeds = [1, 1]"), "seeds: lists a seed twice"),
        (_sweep("nodes = [8]", "net_bucket = 0"), "net_bucket: must be a number of seconds"),
        (_sweep("nodes = [8]", "duration = -1.0"), "duration: -1.0 is not in"),
        ("grid = [", "invalid TOML"),
    ],
)
def test_bad_sweep_files_fail_in_one_line_naming_the_key(text: str, expected: str) -> None:
    with pytest.raises(UsageError) as caught:
        parse_sweep(text, "/nonexistent/sweep.toml")
    message = str(caught.value)
    assert expected in message and "\n" not in message


def test_shipped_sweep_files_are_valid() -> None:
    files = sorted(SWEEPS.glob("*.toml"))
    assert files
    for path in files:
        assert load_sweep(path).points, path


# ------------------------------------------------------------------ fits


@pytest.mark.parametrize(
    ("values", "verdict"),
    [
        (lambda n: 3.0 + 2.0 * math.log2(n), "O(log N)"),
        (lambda n: 1.0 + 0.5 * n, "O(N)"),
        (lambda n: 10.0, "flat"),
        (lambda n: 10.0 + 0.01 * math.log2(n), "flat"),
        (lambda n: 100.0 / n, "decreasing"),
        (lambda n: 1.0 + (3.0 if n in (32, 256) else 0.0) + 0.1 * math.log2(n), "noisy"),
    ],
)
def test_growth_verdicts(values: object, verdict: str) -> None:
    nodes = [16, 32, 64, 128, 256, 512]
    fit = fit_growth(nodes, [values(n) for n in nodes])  # type: ignore[operator]
    assert fit.verdict == verdict and fit.n_points == 6


def test_log_fit_recovers_its_coefficients_and_constant_data_has_no_r2() -> None:
    nodes = [16, 64, 256, 1024]
    fit = fit_growth(nodes, [3.0 + 2.0 * math.log2(n) for n in nodes])
    assert fit.log2.a == pytest.approx(3.0) and fit.log2.b == pytest.approx(2.0)
    assert fit.log2.r2 == pytest.approx(1.0) and fit.linear.r2 < 0.95
    assert fit_line([1, 2, 3], [5.0, 5.0, 5.0]).r2 is None
    assert fit_growth([8, 16], [1.0, 2.0]).verdict == "inconclusive"
    assert fit_growth([8, 16, 32], [0.0, 1.0, 2.0]).exponent is None  # log of 0
    with pytest.raises(ValueError):
        fit_line([4, 4], [1.0, 2.0])


# ------------------------------------------------------------------ end to end


@pytest.mark.integration
def test_small_sweep_on_local_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """tiny.toml's grid plus N=12, whose run directory is blocked: it fails alone, the rest is analysed."""
    sweep = tmp_path / "sweep.toml"
    sweep.write_text((SWEEPS / "tiny.toml").read_text().replace("nodes = [8, 16]", "nodes = [8, 12, 16]"))
    out = tmp_path / "out"
    (out / "runs" / "n12_seed1").mkdir(parents=True)
    (out / "runs" / "n12_seed1" / "notes.txt").write_text("not a trace")  # simulate refuses to overwrite it
    code = main(["sweep", str(sweep), "--out", str(out), "--parallel", "1", "--no-progress"])
    captured = capsys.readouterr()
    assert code == 1, captured.err
    assert "swept 2/3 points" in captured.out and "report.md" in captured.out
    assert "point n12_seed1 failed: UsageError" in captured.err
    for name in ("n8_seed1", "n16_seed1"):
        run = out / "runs" / name
        assert (run / "meta.json").is_file() and (run / "net").is_dir() and (run / "summary.json").is_file()
    for name in ("report.md", "metrics.json", "load_vs_n.png", "load_by_type_vs_n.png", "detection_vs_n.png"):
        assert (out / name).stat().st_size > 0, name
    metrics = json.loads((out / "metrics.json").read_text())
    assert [(r["name"], r["ok"]) for r in metrics["runs"]] == [("n16_seed1", True), ("n12_seed1", False),
                                                               ("n8_seed1", True)]  # big N first
    assert [f["name"] for f in metrics["sweep"]["failed"]] == ["n12_seed1"]
    total = next(f for f in metrics["fits"]["load"]
                 if f["msg_type"] == "total" and f["metric"] == "msgs_per_member_per_s")
    assert total["n_points"] == 2 and total["nodes"] == [8, 16] and total["values"][0] > 0
    detection = {row["run"]: row for row in metrics["detection"]}
    assert set(detection) == {"n8_seed1", "n16_seed1"}
    assert all(row["victim"] == 1 and row["first_suspicion_s"] > 0 for row in detection.values())
    assert {f["metric"] for f in metrics["fits"]["detection"]} >= {"first_suspicion_s"}
    heartbeat = [r for r in metrics["load"] if r["msg_type"] == "heartbeat"]
    assert len(heartbeat) == 2 and all(r["msgs_per_member_per_s"] > 0 for r in heartbeat)
    assert "n12_seed1 | 12 | all | 1 | failed: UsageError" in (out / "report.md").read_text()


def test_sweep_usage_errors_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(_sweep("nodes = [8, 8]"))
    assert main(["sweep", str(path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "grid.nodes: lists a value twice" in err
    code = main(["sweep", str(SWEEPS / "tiny.toml"), "--out", str(tmp_path / "o"), "--parallel", "0"])
    assert code == 2 and "--parallel: must be at least 1" in capsys.readouterr().err
