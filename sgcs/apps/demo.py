"""``sgcs demo``: a live local group, and a member killed partway through.

Theory of operation
-------------------
``run_demo`` starts N member processes (``python -m sgcs.apps.demo_member``, see
that module) on 127.0.0.1 with a multicast group and port of the run's own
and a random secret (``sgcs.apps.members``, shared with ``sgcs bench``). Member
ids are 1..N, so the log reads "m4 failed" rather than a 19-digit number;
the coordinator of a view is its lowest id.

Every member joins the group "demo" by discovery and multicasts at ``rate``
messages per second; its JSON lines (joined, views, proposals, suspicions,
counters every 0.25 s) reach ``DemoRun``, which keeps one row per member and
a log of events. The timeline, in seconds since the start:

* at ``kill_at`` (default: half the duration), once every member holds the
  same view of all N, a member chosen at random is SIGKILLed (the coordinator
  or not: either way the others must find out). With ``--trace`` the killer
  records the death as a ``crash`` row, since the victim cannot. A view of
  all N that has not formed by ``FORM_TIMEOUT`` fails the run;
* each survivor's first view without the victim is timed from the kill with
  the members' own CLOCK_MONOTONIC stamps (shared by every process of a Linux
  host), so pipe and display delays do not count;
* at ``duration`` the run ends once it has settled (every survivor holds the
  same view, of exactly the survivors), waiting up to ``SETTLE_TIMEOUT``
  more. Then the parent closes the members' stdin (they leave gracefully, so
  their traces close), and ``stop_all`` kills whatever is left, Ctrl-C
  included.

The verdict: success when the survivors all installed a view without the
victim and agree on it (without a kill: when all members agree on the view
of N). The run's state is ``sgcs.apps.demo_run``; ``sgcs.apps.demo_display``
draws it: a rich live table on a terminal, plain lines otherwise.
"""

from __future__ import annotations

import os
import queue
import time
from dataclasses import dataclass
from typing import Callable

from .demo_member import DemoSpec
from .demo_run import DemoMember, DemoOptions, DemoRun
from .members import Lines, private_network, release, spawn, stop_all

__all__ = ["DemoMember", "DemoOptions", "DemoReport", "DemoRun", "run_demo"]

EXIT_GRACE = 5.0
"""Seconds the members get, once their stdin closes, to leave the group and exit."""
TICK = 0.25
"""Seconds between two redraws (and the members' counter reports)."""


@dataclass(frozen=True, slots=True)
class DemoReport:
    summary: str
    failure: str | None
    """None: the survivors installed and agree on a view without the victim."""


def run_demo(options: DemoOptions) -> DemoReport:
    """Run the demo; no member process outlives it."""
    from .demo_display import open_display, summary

    if options.trace is not None:
        from ..io.recorder import record_crash  # noqa: F401  loaded now, not at the kill
        from ..trace import pyarrow_modules

        pyarrow_modules()  # without pyarrow: a UsageError here, not an error in every member
        os.makedirs(options.trace, exist_ok=True)
    secret = os.urandom(16)
    group, port = private_network()
    lines: Lines = queue.Queue()
    members: list[DemoMember] = []
    try:
        with open_display(options) as display:
            run = DemoRun(options, members, display.event)
            for index in range(options.members):
                spec = DemoSpec(index, index + 1, options.order, options.rate, group, port, options.trace)
                child = spawn("sgcs.apps.demo_member", index, spec.to_json(), secret, lines)
                members.append(DemoMember(index, *child, node_id=index + 1))
            _loop(run, lines, display.update)
            run.ended = time.monotonic()
        release([m for m in members if not m.killed], EXIT_GRACE)  # they leave gracefully; traces close
    finally:
        stop_all(members)
    return DemoReport(summary(run), run.verdict())


def _loop(run: DemoRun, lines: Lines, update: Callable[[DemoRun], None]) -> None:
    next_draw = time.monotonic()
    while not run.finished():
        try:
            index, message = lines.get(timeout=max(0.0, next_draw - time.monotonic()))
        except queue.Empty:
            pass
        else:
            run.handle(run.members[index], message)
        run.step()
        if time.monotonic() >= next_draw:
            update(run)
            next_draw = max(next_draw + TICK, time.monotonic())
    update(run)

