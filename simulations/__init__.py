"""Deterministic discrete-event simulator for sgcs.

Theory of operation
-------------------
The simulator runs the very same sans-I/O ``sgcs.node.Node`` code as the trio
driver, for thousands of nodes in one process, on a simulated network with
delay, loss, duplication, partitions, crashes, recoveries and pauses. A run is
described by a scenario TOML file (``scenario``), executed by an event heap
(``engine``, ``simulator``, ``lifecycle``, ``network``) and recorded as a
trace directory in schema 1 (``trace``): ``meta.json``, ``events/`` and
``net/`` as Parquet datasets. A seed replays a run bit for bit. A scenario
with a ``[mailboxes]`` table runs the mailbox service's post offices on the
nodes (``mailboxes``, ``mailspec``, ``mailreport``) and adds ``mail/``.

    from sgcs.sim import load_scenario, simulate
    summary = simulate(load_scenario("simulations/scenarios/default.toml"), "runs/x")

From the shell: ``sgcs simulate [SCENARIO] --out RUN [--seed N] ...``.
"""

from __future__ import annotations

from .run import RunSummary, simulate
from .scenario import Scenario, load_scenario, parse_scenario
from .simulator import SimulationBug

__all__ = ["RunSummary", "Scenario", "SimulationBug", "load_scenario", "parse_scenario", "simulate"]
