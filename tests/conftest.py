"""Test-wide set-up: the two tiers, one printed seed for every randomized
(hypothesis) test, and the shared fixtures (``network``: a multicast group of
the test's own; ``scenario_file``: a simulator scenario from a few fields).
The in-memory network of the sans-I/O tests is ``_memnet.MemoryNetwork``.

Tiers. A test is in the *integration* tier (marker ``integration``) when it
starts real processes or sockets, Spark, atheris, mypy or network namespaces;
everything else (sans-I/O state machines, the simulator, property tests) is
the *fast* tier. ``scripts/test.sh --fast`` runs ``-m "not integration"``.
Whole modules are marked by the explicit list below; a module that mixes both
marks its integration tests itself with ``@pytest.mark.integration``.

Seed. The property machines explore fresh random examples in every run; a
failure must still replay. Unless ``--hypothesis-seed`` is given, one is drawn
here and printed in the session header with the command that replays it."""

from __future__ import annotations

import random
from pathlib import Path
from collections.abc import Callable
from typing import Any

import pytest
from _net import private_multicast
from _scenario import write_scenario

TESTS = Path(__file__).resolve().parent

INTEGRATION_MODULES = frozenset({
    # real loopback sockets (sgcs.open_node, the blocking and asyncio APIs)
    "test_asyncio.py",
    "test_batch_api.py",
    "test_blocking.py",
    "test_metrics.py",
    "test_trio_driver.py",
    "services/test_flows_service.py",
    "services/test_handles_blocking.py",
    "services/test_mailboxes_service.py",
    "services/test_queues_manager.py",
    "services/test_queues_replicated.py",
    # real member processes
    "test_bench.py",
    "test_bench_cwd.py",
    "test_examples.py",
    "test_membership_processes.py",
    "test_real_traces.py",
    "services/test_handles_group.py",
    "services/test_mailboxes_processes.py",
    "services/test_queues_cli.py",
    "services/test_queues_crash.py",
    # network namespaces
    "test_namespaces.py",
    # Spark
    "test_spark_analysis.py",
    # mypy over sgcs/ in a process of its own
    "test_typing.py",
})
"""Modules (relative to tests/) whose every test is in the integration tier."""


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    if getattr(config.option, "hypothesis_seed", None) is None:
        config.option.hypothesis_seed = random.SystemRandom().getrandbits(32)
    missing = sorted(name for name in INTEGRATION_MODULES if not (TESTS / name).is_file())
    if missing:
        raise pytest.UsageError(f"tests/conftest.py: INTEGRATION_MODULES names missing modules: {missing}")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        try:
            module = item.path.resolve().relative_to(TESTS).as_posix()
        except ValueError:
            continue
        if module in INTEGRATION_MODULES:
            item.add_marker(pytest.mark.integration)


@pytest.fixture
def network() -> dict[str, Any]:
    """A multicast group and port of this test's own (``sgcs.Config`` fields);
    more networks or extra fields: ``_net.private_multicast``."""
    return private_multicast()


@pytest.fixture
def scenario_file(tmp_path: Path) -> Callable[..., Path]:
    """Writes a scenario TOML file under ``tmp_path`` and returns its path:
    ``scenario_file("churn", nodes=14, faults=[...])`` is ``_scenario.DEFAULT``
    with those top-level fields replaced (None leaves one out)."""

    def write(name: str = "scenario", **fields: Any) -> Path:
        return write_scenario(tmp_path / f"{name}.toml", **fields)

    return write


def pytest_report_header(config: pytest.Config) -> str:
    seed = config.option.hypothesis_seed
    return f"hypothesis seed {seed}: replay a failure with `pytest --hypothesis-seed={seed} <test id>`"
