"""The sans-I/O rule (docs/architecture.md): protocol code imports no I/O, no clock
and no global randomness, so the simulator and the trio driver run the same
code and a seed replays a run exactly."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "sgcs"
IO_SHELL = {
    "io",  # the trio driver, sockets, the event queue
    "services",  # built on the public API, with their own I/O
    "apps",  # the command-line apps: sgcs chat, demo, bench, stats and their member processes
    "api.py", "blocking.py", "metrics.py", "state_transfer.py", "__main__.py",
}
"""The I/O edge and the applications. Everything else under sgcs/ is protocol:
a new module is checked without being listed (a list once missed group.py)."""
PROTOCOL_FILES = sorted(p for p in ROOT.rglob("*.py") if p.relative_to(ROOT).parts[0] not in IO_SHELL)
FORBIDDEN_MODULES = {"trio", "socket", "time", "asyncio", "threading", "selectors", "uuid", "secrets", "datetime"}
FORBIDDEN_CALLS = {("os", "urandom"), ("uuid", "uuid4")}
RANDOM_FUNCTIONS = {"random", "randint", "randrange", "choice", "choices", "shuffle", "sample", "uniform", "gauss", "seed", "getrandbits"}


def violations(source: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [f"import {a.name}" for a in node.names if a.name.split(".")[0] in FORBIDDEN_MODULES]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] in FORBIDDEN_MODULES:
                found.append(f"from {node.module} import ...")
            if node.module == "random":
                found += [f"from random import {a.name}" for a in node.names if a.name in RANDOM_FUNCTIONS]
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            pair = (node.value.id, node.attr)
            if pair in FORBIDDEN_CALLS or (node.value.id == "random" and node.attr in RANDOM_FUNCTIONS):
                found.append(".".join(pair))
    return found


@pytest.mark.parametrize("path", PROTOCOL_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_protocol_module_is_sans_io(path: Path) -> None:
    assert violations(path.read_text()) == [], f"{path} breaks the sans-I/O rule"


@pytest.mark.parametrize(
    "source",
    [
        "import trio",
        "import socket as s",
        "from time import monotonic",
        "import os\nos.urandom(4)",
        "import random\nrandom.random()",
        "from random import choice",
        "import uuid\nuuid.uuid4()",
    ],
)
def test_checker_catches(source: str) -> None:
    assert violations(source), source


def test_checker_allows_injected_random() -> None:
    assert violations("import random\ndef f(rng: random.Random):\n    return rng.random()") == []
