"""A new user's first hour, in CI: a fresh virtual environment, ``pip install
.`` from this checkout (a wheel with the compiled hot path where a C compiler
is present), every python block of the README and docs/ run twice as written
with that install, and every command given one bad input.

Integration test: it builds and installs sgcs (about two minutes), so it
runs once, in the compiled pass of ``scripts/test.sh``, not again in the
pure-Python pass (the install is the same; the pass only switches this
checkout's own modules)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Iterator

import pytest

from sgcs.apps.cli import COMMANDS
from test_docs import PROGRAMS, _run_program

ROOT = Path(__file__).resolve().parent.parent

BAD_INPUT = {
    "simulate": ["simulate", "--out", "run", "--nodes", "-3"],
    "bench": ["bench", "--members", "0"],
    "sweep": ["sweep", "no-such-sweep.toml", "--out", "sweep"],
    "analyze": ["analyze", "no-such-run"],
    "chat": ["chat", "room", "--secret", "short"],
    "demo": ["demo", "--members", "1"],
    "stats": ["stats", "room", "--print", "-1"],
    "queue": ["queue", "--store", "q.db", "put", "jobs", "x", "--priority", "12"],
    "keygen": ["keygen", "--bytes", "3"],
}
"""One bad input per command: each must fail in one line and write nothing."""

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.environ.get("SGCS_PURE_PYTHON", "") not in ("", "0"),
                       reason="installs sgcs once per suite run: in the compiled pass"),
]


def _compiler_present() -> bool:
    return shutil.which("gcc") is not None and Path(sysconfig.get_path("include"), "Python.h").exists()


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    home = tmp_path_factory.mktemp("new-user")
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", str(home / "venv")], check=True, timeout=120)
    python = home / "venv" / "bin" / "python"
    done = subprocess.run([str(python), "-m", "pip", "install", "-q", f"{ROOT}[metrics]"], capture_output=True,
                          text=True, timeout=900, cwd=home)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    yield home / "venv" / "bin"


def test_the_install_is_sgcs_alone_and_compiled_where_it_can_be(venv: Path, tmp_path: Path) -> None:
    version = subprocess.run([str(venv / "sgcs"), "--version"], capture_output=True, text=True, timeout=60)
    assert version.returncode == 0 and version.stdout.startswith("sgcs "), version
    if _compiler_present():
        assert "compiled (mypyc)" in version.stdout, version.stdout
    site = Path(subprocess.run([str(venv / "python"), "-c", "import sgcs, os; print(os.path.dirname(sgcs.__path__[0]))"],
                               capture_output=True, text=True, check=True, cwd=tmp_path).stdout.strip())
    assert site.name == "site-packages", site  # the installed copy, not this checkout
    assert not (site / "simulations").exists() and not (site / "spark_analysis").exists()


@pytest.mark.parametrize("where, index, until, code", PROGRAMS, ids=[f"{p}#{i}" for p, i, _, _ in PROGRAMS])
def test_every_docs_program_runs_twice_with_the_installed_sgcs(venv: Path, where: str, index: int, until: str,
                                                               code: str, tmp_path: Path) -> None:
    for run in (1, 2):
        out = _run_program(code, tmp_path, until or None, python=str(venv / "python"))
        assert "Traceback" not in out and (until in out if until else True), f"{where}#{index}, run {run}:\n{out}"


@pytest.mark.parametrize("command", [name for name, _, _ in COMMANDS])
def test_every_command_refuses_a_bad_input_in_one_line_and_writes_nothing(venv: Path, command: str,
                                                                          tmp_path: Path) -> None:
    assert command in BAD_INPUT, f"give {command!r} a bad input here"
    done = subprocess.run([str(venv / "sgcs"), *BAD_INPUT[command]], capture_output=True, text=True,
                          cwd=tmp_path, timeout=120, stdin=subprocess.DEVNULL,
                          env={k: v for k, v in os.environ.items() if k != "SGCS_SECRET"})
    lines = done.stderr.strip().splitlines()
    assert done.returncode != 0 and len(lines) == 1 and lines[0].startswith(f"sgcs {command}"), done
    assert list(tmp_path.iterdir()) == [], f"{command} wrote {list(tmp_path.iterdir())}"
