"""How ``sgcs demo`` shows its run: a rich live table, or plain lines.

Theory of operation
-------------------
``open_display`` yields a ``Display`` with two callbacks that ``sgcs.apps.demo``
calls: ``event(line)`` for each log line as it happens, and ``update(run)``
every ``TICK`` seconds with the whole ``DemoRun`` (``sgcs.apps.demo_run``).

* On a terminal (and without ``--plain``) a ``rich.live.Live`` redraws a
  header (elapsed time, group throughput), one table row per member (state,
  view, sent, delivered, delivery rate) and the last events; the final frame
  stays on screen above the summary.
* Otherwise (a pipe, a CI log, ``--plain``) each event is one printed line
  as it happens, and once a second a status line sums up the members, so the
  output reads well top to bottom.

Either way the run ends with ``summary``: one paragraph of figures.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import RenderableType

    from .demo_run import DemoMember, DemoOptions, DemoRun

STATUS_EVERY = 1.0
"""Seconds between two status lines in plain mode."""
STATE_STYLES = {"starting": "dim", "joining": "yellow", "in view": "green", "view change": "yellow",
                "KILLED": "bold red", "exited": "red"}


@dataclass(frozen=True, slots=True)
class Display:
    event: Callable[[str], None]
    update: Callable[["DemoRun"], None]


def member_state(run: "DemoRun", member: "DemoMember") -> str:
    if member.killed:
        return "KILLED"
    if member.exited:
        return "exited"
    if not member.joined:
        return "starting"
    if run.victim is not None and run.victim.node_id in member.view:
        return "view change"
    if run.victim is None and len(member.view) < len(run.members):
        return "joining"
    return "in view"


@contextmanager
def open_display(options: "DemoOptions") -> Iterator[Display]:
    if options.plain or not sys.stdout.isatty():
        yield _plain_display()
        return
    from rich.console import Console
    from rich.live import Live

    with Live(console=Console(), refresh_per_second=4, transient=False) as live:
        yield Display(event=lambda line: None, update=lambda run: live.update(_render(run), refresh=True))


def _plain_display() -> Display:
    last_status = [time.monotonic()]

    def event(line: str) -> None:
        print(line, flush=True)

    def update(run: "DemoRun") -> None:
        if time.monotonic() - last_status[0] >= STATUS_EVERY:
            last_status[0] = time.monotonic()
            print(_status_line(run), flush=True)

    return Display(event, update)


def _status_line(run: "DemoRun") -> str:
    rows = " | ".join(f"{m.name} {member_state(run, m)} {len(m.view)}" for m in run.members)
    return (f"{run.elapsed():6.2f} s  status: {run.throughput():,.0f} msg/s group, {run.delivered():,} delivered"
            f" | {rows}")


def _render(run: "DemoRun") -> "RenderableType":
    from rich.console import Group
    from rich.panel import Panel
    from rich.table import Table
    from rich.text import Text

    o = run.options
    kill = "" if o.kill_time is None else f" · kill at {o.kill_time:g} s"
    header = Text.assemble(
        ("sgcs demo", "bold"),
        f"  group 'demo' · {o.members} members · {o.order} order · {o.rate:g} msg/s each{kill}\n",
        f"elapsed {run.elapsed(run.ended):5.1f} s of {o.duration:g} s · group throughput ",
        (f"{run.throughput():,.0f} msg/s", "bold cyan"), f" · {run.delivered():,} delivered",
    )
    table = Table(expand=False)
    for column in ("member", "pid", "state", "view", "size"):
        table.add_column(column)
    for column in ("sent", "delivered", "msg/s"):
        table.add_column(column, justify="right")
    for m in run.members:
        state = member_state(run, m)
        table.add_row(m.name, str(m.process.pid), Text(state, style=STATE_STYLES[state]), m.view_id or "-",
                      str(len(m.view)), f"{m.sent:,}", f"{m.delivered:,}", f"{0 if m.killed else m.rate:,.0f}")
    log = Panel(Text("\n".join(run.events) or "(no events yet)"), title="events", title_align="left")
    return Group(header, table, log)


def summary(run: "DemoRun") -> str:
    """The closing paragraph: members, deliveries, throughput, kill-to-view times."""
    o, ended = run.options, run.ended or time.monotonic()
    active = ended - (run.first_join or run.started)
    text = (f"sgcs demo: {o.members} members, {o.order} order, {o.rate:g} msg/s each, {run.elapsed(ended):.1f} s: "
            f"{run.delivered():,} messages delivered ({run.delivered() / active:,.0f} msg/s group throughput since "
            f"the first join).")
    if run.victim is None:
        return text + " No member was killed."
    survivors, times = run.survivors, run.kill_to_view()
    text += f" {run.victim.name} was killed (SIGKILL) at {run.elapsed(run.kill_t):.1f} s; "
    if not times:
        return text + f"none of the {len(survivors)} survivors installed a view without it."
    who = f"all {len(survivors)}" if len(times) == len(survivors) else f"{len(times)} of the {len(survivors)}"
    agreed = f", and agree on {survivors[0].view_id}" if run.agree() else ", but do not agree on one view"
    return text + f"{who} survivors installed a view without it {run.kill_to_view_text()} after the kill{agreed}."
