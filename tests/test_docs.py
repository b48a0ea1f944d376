"""The documents stay true: the README's quick-start program runs, the
configuration table (docs/configuration.md) lists every ``sgcs.Config`` field,
every command has ``--help`` and a place in docs/cli.md, and the README stays
short enough to read."""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import sgcs
from sgcs.apps.cli import COMMANDS, main

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def _section(title: str) -> str:
    start = README.index(f"## {title}\n")
    end = README.find("\n## ", start + 1)
    return README[start:] if end < 0 else README[start:end]


_BLOCK = re.compile(r"(?:<!-- runs until stopped; prints: (.*?) -->\n)?```python\n(.*?)```", re.S)
PROGRAMS = [(path.relative_to(ROOT).as_posix(), i, until, code)
            for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
            for i, (until, code) in enumerate(_BLOCK.findall(path.read_text()))]
"""Every python block of the README and docs/: (file, index, text a never-ending
program prints before it is stopped or None, code)."""


def test_the_quick_start_is_about_ten_lines() -> None:
    block = re.search(r"```python\n(.*?)```", _section("Quick start"), re.S)
    assert block is not None, "the quick start has a python block"
    assert len([line for line in block.group(1).splitlines() if line.strip()]) <= 12, "about ten lines"


@pytest.mark.integration
@pytest.mark.parametrize("where, index, until, code", PROGRAMS, ids=[f"{p}#{i}" for p, i, _, _ in PROGRAMS])
def test_every_docs_program_runs_twice_as_written(where: str, index: int, until: str, code: str,
                                                  tmp_path: Path) -> None:
    """Run as a user would: the block alone, in an empty directory, twice in
    a row (the second run finds the first one's files). A program that ends
    must exit 0 within a minute; one that runs until stopped (marked in the
    document) must print its text first. Neither may print a traceback."""
    for run in (1, 2):
        out = _run_program(code, tmp_path, until or None)
        assert "Traceback" not in out and (until in out if until else True), f"{where}#{index}, run {run}:\n{out}"


SECRET = {"SGCS_SECRET": "docs-programs-" + os.urandom(8).hex()}
"""What ``export SGCS_SECRET=$(sgcs keygen)`` gives the documents' programs."""


def _run_program(code: str, cwd: Path, until: str | None, python: str = sys.executable) -> str:
    env = {**os.environ, **SECRET}
    if until is None:
        done = subprocess.run([python, "-c", code], capture_output=True, text=True, cwd=cwd, timeout=60, env=env)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout + done.stderr
    process = subprocess.Popen([python, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, cwd=cwd, env=env)
    seen: list[str] = []
    watchdog = threading.Timer(30.0, process.kill)  # a program that prints nothing would block readline
    watchdog.start()
    try:
        assert process.stdout is not None
        while not any(until in line for line in seen):
            line = process.stdout.readline()
            if not line:
                break
            seen.append(line)
    finally:
        watchdog.cancel()
        process.kill()
        process.wait()
    return "".join(seen)


def _doc(name: str) -> str:
    return (ROOT / "docs" / name).read_text()


def test_the_readme_is_short_with_the_quick_start_near_the_top() -> None:
    lines = README.splitlines()
    assert len(lines) <= 350, f"README has {len(lines)} lines; details belong in docs/"
    assert lines.index("## Quick start") < 80
    assert not re.search(r"\b(issue|session) \d+", README, re.I)


def test_every_document_the_readme_links_exists() -> None:
    links = re.findall(r"\]\(([^)#]+\.md)\)", README)
    assert links and [link for link in links if not (ROOT / link).exists()] == []


def test_configuration_table_lists_every_config_field() -> None:
    table = _doc("configuration.md")
    documented = set(re.findall(r"^\|[^|]*", table, re.M))
    names = {name for row in documented for name in re.findall(r"`([a-z_]+)`", row)}
    missing = [f.name for f in dataclasses.fields(sgcs.Config) if f.name not in names]
    assert missing == [], f"docs/configuration.md's table lacks {missing}"


@pytest.mark.parametrize("command", [name for name, _, _ in COMMANDS])
def test_every_command_has_help_and_a_readme_entry(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([command, "--help"])
    assert exit_info.value.code == 0
    assert f"sgcs {command}" in capsys.readouterr().out
    assert f"sgcs {command}" in _doc("cli.md"), f"docs/cli.md lacks sgcs {command}"


def test_version_and_top_level_help(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["--version"], ["--help"]):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert f"sgcs {sgcs.__version__}" in out
    assert all(name in out for name, _, _ in COMMANDS)


def test_the_product_documents_its_own_contracts() -> None:
    """Scenario format, trace schema, invariants and wire live in docs/: nothing
    in the product or its docs sends a reader outside the repository."""
    root = Path(__file__).resolve().parent.parent
    files = [root / "README.md", *(root / "docs").glob("*.md")]
    for package in ("sgcs", "simulations", "spark_analysis"):
        files += (root / package).rglob("*.py")
    citing = [str(f.relative_to(root)) for f in files if "DESIGN.md" in f.read_text() or "../shared" in f.read_text()]
    assert citing == [], citing
    for contract in ("scenarios.md", "traces.md", "guarantees.md", "architecture.md", "view-change.md"):
        assert (root / "docs" / contract).exists(), contract


def test_the_documents_take_their_secret_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert not re.search(r'secret=b"', README + "".join(p.read_text() for p in (ROOT / "docs").glob("*.md")))
    monkeypatch.delenv("SGCS_SECRET", raising=False)
    with pytest.raises(sgcs.UsageError, match=r"SGCS_SECRET is not set; run: export SGCS_SECRET=\$\(sgcs keygen\)"):
        sgcs.secret_from_env()
    monkeypatch.setenv("SGCS_SECRET", "0123456789abcdef")
    assert sgcs.secret_from_env() == b"0123456789abcdef"


def test_keygen_prints_a_fresh_secret_and_refuses_a_short_one(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["keygen"]) == 0 and main(["keygen", "--bytes", "16"]) == 0
    first, second = capsys.readouterr().out.split()
    assert len(first) == 64 and len(second) == 32 and int(first, 16) and first[:32] != second
    assert main(["keygen", "--bytes", "8"]) == 2 and "at least" not in capsys.readouterr().out


def test_the_api_reference_builds_without_warnings(tmp_path: Path) -> None:
    """scripts/api_docs.py (pdoc): every public name resolves, every page is written."""
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "api_docs.py"), str(tmp_path)],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0 and "api_docs:" not in done.stderr, done.stderr
    pages = {p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.html")}
    assert {"sgcs.html", "sgcs/blocking.html", "sgcs/metrics.html", "sgcs/services/queues.html",
            "sgcs/services/flows.html", "sgcs/services/handles.html", "sgcs/services/mailboxes.html"} <= pages
    assert "open_queue_manager" in (tmp_path / "sgcs" / "services" / "queues.html").read_text()


def test_the_readme_chart_is_drawn_from_the_benchmark_history(tmp_path: Path) -> None:
    assert "](docs/performance-history.png)" in README and (ROOT / "docs" / "performance-history.png").is_file()
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "readme_chart.py"), str(tmp_path / "c.png")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "c.png").read_bytes()[:4] == b"\x89PNG"
