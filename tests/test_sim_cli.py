"""`sgcs simulate`: exit codes, one-line errors, the summary, and the bug path."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sgcs import __version__
from sgcs.apps.cli import main
from sgcs.node import Node
from sgcs.sim.simulator import SimulationBug

from _scenario import group, scenario_toml

GOOD = scenario_toml(seed=3)
"""8 nodes for 1 s, one group of all of them (tests/_scenario.py)."""


def _write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "scenario.toml"
    path.write_text(text)
    return str(path)


def test_good_scenario_exits_0_with_a_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    code = main(["simulate", _write(tmp_path, GOOD), "--out", str(out), "--seed", "4", "--no-progress"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "mean reliability" in captured.out and str(out) in captured.out
    assert (out / "meta.json").is_file() and (out / "events").is_dir() and (out / "net").is_dir()


def test_default_scenario_with_overrides(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["simulate", "--out", str(tmp_path / "run"), "--nodes", "12", "--duration", "1", "--no-progress"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "simulated 12 nodes for 1 s" in captured.out


@pytest.mark.parametrize(
    ("text", "extra", "expected"),
    [
        (scenario_toml(seed=3, groups=[group(rate="fast", size=10)]), [], "groups[0].rate: must be a number"),
        (scenario_toml(seed=3, faults=[{"at": 0.5, "crash": [900]}]), [], "faults[0].crash: node 900 is not in 0..7"),
        (GOOD, ["--nodes", "0"], "nodes: 0 is not in"),
        (GOOD, ["--seed", "-2"], "seed: -2 is not in"),
        ("nodes = [", [], "invalid TOML"),
    ],
)
def test_bad_scenario_exits_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, extra: list[str], expected: str
) -> None:
    code = main(["simulate", _write(tmp_path, text), "--out", str(tmp_path / "run"), *extra])
    err = capsys.readouterr().err
    assert code == 2
    assert expected in err and err.count("\n") == 1, err


def test_missing_scenario_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", str(tmp_path / "missing.toml"), "--out", str(tmp_path / "run")]) == 2
    assert "cannot read scenario" in capsys.readouterr().err


def test_bad_arguments_exit_2_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["simulate", "--seed", "x", "--out", "r"])
    assert caught.value.code == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["--version"])
    assert caught.value.code == 0 and __version__ in capsys.readouterr().out


@pytest.mark.integration
def test_console_entry_point_in_a_subprocess(tmp_path: Path) -> None:
    bad = _write(tmp_path, scenario_toml(seed=3, network={"loss": 2.0}))
    run = subprocess.run(
        [sys.executable, "-m", "sgcs", "simulate", bad, "--out", str(tmp_path / "run")],
        capture_output=True, text=True, cwd=Path(__file__).parents[1], timeout=120,
    )
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert run.stderr.strip() == "sgcs simulate: error: network.loss: 2.0 is not in [0, 1]"


def test_a_bug_prints_seed_and_replay_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(self: Node, src: object, data: bytes, now: float) -> list[object]:
        raise ZeroDivisionError("deliberate")

    monkeypatch.setattr(Node, "handle_datagram", broken)
    scenario = _write(tmp_path, GOOD)
    with pytest.raises(SimulationBug) as caught:
        main(["simulate", scenario, "--out", str(tmp_path / "run"), "--no-progress"])
    err = capsys.readouterr().err
    assert caught.value.seed == 3 and isinstance(caught.value.__cause__, ZeroDivisionError)
    assert "seed 3" in err and "ZeroDivisionError: deliberate" in err
    assert f"replay with: sgcs simulate {scenario} --out {tmp_path / 'run'} --seed 3 --nodes 8 --duration 1.0" in err


@pytest.mark.integration
def test_simulate_from_a_directory_with_its_own_simulations_package(tmp_path: Path) -> None:
    """The simulator installs as sgcs.sim: a user's own ``simulations``
    package in the working directory (first on ``python -m``'s path) is
    never imported in its place."""
    (tmp_path / "simulations").mkdir()
    (tmp_path / "simulations" / "__init__.py").write_text("raise SystemExit('the user package was imported')\n")
    (tmp_path / "spark_analysis.py").write_text("raise SystemExit('the user module was imported')\n")
    done = subprocess.run([sys.executable, "-m", "sgcs", "simulate", "--out", "run", "--duration", "1"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "run" / "meta.json").is_file() and "imported" not in done.stdout + done.stderr


def test_a_missing_extra_is_one_line_naming_it(monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    import sgcs.analysis.command as command

    def no_spark(*args: object) -> int:
        raise ModuleNotFoundError("No module named 'pyspark'", name="pyspark")

    monkeypatch.setattr(command, "run_analyze", no_spark)
    assert main(["analyze", "somewhere"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["sgcs analyze: error: this command needs pyspark, which is not installed; run: pip install "
                   "'sgcs[analysis]'"]
