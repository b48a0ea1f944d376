"""`sgcs bench` works from any working directory.

Its members start as ``python -m sgcs.apps.bench_member``; by default ``python -m``
puts the working directory first on ``sys.path``, so a stray ``attrs.py`` or
``trio.py`` there (a user's scratch file) used to replace the real library in
every member and the run failed. This runs the command in a directory holding
such files, each of which raises when imported.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

POISON = 'raise ImportError("poisoned {name}.py in the working directory was imported")\n'


def _sgcs_command() -> list[str]:
    """The venv's console script; else the module with -P (the parent must not import the poison either)."""
    script = Path(sys.executable).parent / "sgcs"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-P", "-m", "sgcs"]


def test_bench_runs_from_a_directory_with_shadowing_modules(tmp_path: Path) -> None:
    for name in ("attrs", "trio", "sgcs_poison_marker"):
        (tmp_path / f"{name}.py").write_text(POISON.format(name=name))
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "PYTHONSAFEPATH")}
    result = subprocess.run(
        [*_sgcs_command(), "bench", "--members", "2", "--messages", "50", "--size", "100",
         "--no-progress", "--timeout", "90"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=150,
    )
    assert result.returncode == 0, f"exit {result.returncode}\nstdout: {result.stdout}\nstderr: {result.stderr}"
    assert "msg/s received per member" in result.stdout + result.stderr
