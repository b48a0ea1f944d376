"""``sgcs bench``: real member processes on loopback, measured like JGroups' JPerf.

Theory of operation
-------------------
``run_bench`` starts one OS process per member (``python -m
sgcs.apps.bench_member``, see that module for what a member does and how it
measures), on 127.0.0.1 with a multicast group and port of this run's own
(``sgcs.apps.members``, shared with ``sgcs demo``). The secret is random unless
given, and goes to the members in their environment.

Members talk to the parent in JSON lines on stdout, which ``sgcs.apps.members``
reads into one queue, so the parent waits on one queue with the run's
deadline. When every member has reported "done", the parent closes their
stdin (until then they keep serving retransmissions and ACKs to the others),
collects their node statistics and waits for them to exit.

Failure: a member's "error" line, a member exiting early, or the overall
deadline (``default_timeout``) ends the run with ``BenchError``, whose message
is one line. Whatever happens, Ctrl-C included, no member process outlives
``run_bench``: they are terminated, then killed.

Figures: each member's rate is JPerf's (messages received / seconds from its
first send to its last delivery); the headline is the median over members.
Latency p50 and p99 are the medians over members of each member's own
percentiles.
"""

from __future__ import annotations

import dataclasses
import json
import os
import queue
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from .. import __version__, _compiled
from .bench_member import STAMP, MemberSpec
from ..config import MIN_DATAGRAM, MAX_UDP_PAYLOAD, SECRET_MIN, Config, Order
from ..errors import SgcsError, UsageError
from .members import KILL_GRACE, Child, Lines, private_network, spawn, stop_all

MAX_MEMBERS = 64
VIEW_TIMEOUT = 30.0
"""Seconds a member may wait for its view to hold every member."""
EXIT_GRACE = 15.0
"""Seconds the members get, once released, to report their statistics and exit."""
STAT_KEYS = (
    "datagrams_sent", "datagrams_received", "bytes_sent", "bytes_received", "retransmissions", "nacks_sent",
    "duplicates", "gossip_pushes", "repaired_by_nack", "repaired_by_gossip", "peak_buffered", "dropped",
    "drop_reasons", "unicast_retransmissions",
)
"""The ``node.statistics()`` fields a report keeps for each member."""


def config_default(name: str) -> Any:
    """A Config field's default (a slotted dataclass keeps no class attribute for it)."""
    return next(f.default for f in dataclasses.fields(Config) if f.name == name)


DEFAULT_MAX_DATAGRAM: int = config_default("max_datagram")
MAX_MESSAGE: int = config_default("max_message")


BENCH_OWNED = frozenset({"name", "secret", "node_id", "bind_host", "port", "multicast_group", "multicast_port",
                         "max_datagram", "encrypt"})
"""Config fields the bench sets per member or by an option of its own."""


def parse_settings(items: list[str]) -> tuple[tuple[str, Any], ...]:
    """``FIELD=JSON`` strings (``--set``) as (field, value) pairs; a bare word is a string."""
    pairs = []
    for item in items:
        name, sep, text = item.partition("=")
        if not sep or not name:
            raise UsageError(f"--set {item!r}: expected FIELD=VALUE, e.g. ack_interval=0.002")
        try:
            value = json.loads(text)
        except ValueError:
            value = text
        pairs.append((name.strip(), value))
    return tuple(pairs)


class BenchError(SgcsError):
    """The run failed (a member failed, exited or timed out); the message is one line."""


@dataclass(frozen=True, slots=True)
class BenchOptions:
    members: int
    messages: int
    size: int
    order: str = Order.FIFO.value
    rate: float | None = None
    """Messages per second per member; None: as fast as flow control allows."""
    max_datagram: int = DEFAULT_MAX_DATAGRAM
    secret: bytes | None = field(default=None, repr=False)
    timeout: float | None = None
    """Seconds for the whole run; None: ``default_timeout``."""
    encrypt: bool = False
    """Encrypt datagram bodies (``Config.encrypt``)."""
    settings: tuple[tuple[str, Any], ...] = ()
    """Protocol ``Config`` fields for every member (``--set``), e.g. (("ack_interval", 0.002),)."""
    hosts: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """Per member, where it runs: (its address, the command prefix that runs it
    there, e.g. ``ip netns exec NAME``); empty: every member on 127.0.0.1.
    ``benchmarks/bench_netns.py`` runs members in network namespaces this way."""

    def __post_init__(self) -> None:
        _check_int("members", self.members, 1, MAX_MEMBERS)
        _check_int("messages", self.messages, 1, 100_000_000)
        _check_int("size", self.size, STAMP.size, MAX_MESSAGE)
        _check_int("max-datagram", self.max_datagram, MIN_DATAGRAM, MAX_UDP_PAYLOAD)
        Order.parse(self.order)
        if self.rate is not None and not self.rate > 0:
            raise UsageError(f"--rate must be a positive number of messages per second, got {self.rate}")
        if self.timeout is not None and not self.timeout > 0:
            raise UsageError(f"--timeout must be a positive number of seconds, got {self.timeout}")
        if self.hosts and len(self.hosts) != self.members:
            raise UsageError(f"hosts: {len(self.hosts)} given for {self.members} members")
        if self.secret is not None and len(self.secret) < SECRET_MIN:
            raise UsageError(f"--secret must be at least {SECRET_MIN} bytes (sgcs keygen prints one)")
        known = {f.name for f in dataclasses.fields(Config)}
        unknown = [name for name, _ in self.settings if name not in known]
        if unknown:
            raise UsageError(f"--set {unknown[0]}: Config has no such field")
        reserved = {name for name, _ in self.settings} & BENCH_OWNED
        if reserved:
            raise UsageError(f"--set {sorted(reserved)[0]}: the bench sets that field itself (see its own option)")
        Config(secret=b"check-settings-only", **dict(self.settings))  # a bad field or value: UsageError, one line

    def default_timeout(self) -> float:
        """Generous: 300 s, plus 5 ms per delivery per member, plus a paced run's length."""
        paced = self.messages / self.rate if self.rate else 0.0
        return 300.0 + 0.005 * self.members * self.messages + paced


def _check_int(name: str, value: int, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise UsageError(f"--{name} must be an integer in [{low}, {high}], got {value!r}")


@dataclass(slots=True)
class _MemberState(Child):
    id: int | None = None
    view: int = 0
    delivered: int = 0
    result: dict[str, Any] | None = None
    stats: dict[str, Any] | None = None
    exited: bool = False


@dataclass(slots=True)
class BenchReport:
    options: BenchOptions
    members: list[dict[str, Any]] = field(default_factory=list)
    wall_seconds: float = 0.0

    @property
    def rates(self) -> list[float]:
        return [m["rate"] for m in self.members]

    def to_json(self) -> dict[str, Any]:
        o = self.options
        totals = {key: sum(m["statistics"].get(key, 0) for m in self.members)
                  for key in ("retransmissions", "nacks_sent", "duplicates", "gossip_pushes", "dropped")}
        return {
            "sgcs_version": __version__,
            "hot_path": _compiled.describe(),
            "members": o.members, "messages": o.messages, "size": o.size, "order": o.order,
            "rate_offered": o.rate, "max_datagram": o.max_datagram, "encrypt": o.encrypt,
            "settings": dict(o.settings), "hosts": [address for address, _ in o.hosts] or None,
            "delivered": [m["delivered"] for m in self.members],
            "rates": [round(r, 1) for r in self.rates],
            "rate_median": round(statistics.median(self.rates), 1),
            "rate_min": round(min(self.rates), 1), "rate_max": round(max(self.rates), 1),
            "latency_p50_ms": round(statistics.median(m["latency_p50_ms"] for m in self.members), 3),
            "latency_p99_ms": round(statistics.median(m["latency_p99_ms"] for m in self.members), 3),
            "wall_seconds": round(self.wall_seconds, 3),
            "totals": totals,
            "per_member": self.members,
        }

    def summary(self) -> str:
        data = self.to_json()
        o = self.options
        paced = (f" at {o.rate:g} msg/s per member" if o.rate else "") + (", encrypted" if o.encrypt else "")
        return (
            f"sgcs bench: {o.members} members x {o.messages} msgs x {o.size} B, {o.order}{paced}: "
            f"{data['rate_median']:,.0f} msg/s received per member (median; min {data['rate_min']:,.0f}, "
            f"max {data['rate_max']:,.0f}); latency p50 {data['latency_p50_ms']:.2f} ms, "
            f"p99 {data['latency_p99_ms']:.2f} ms; {data['totals']['retransmissions']} retransmissions; "
            f"wall {data['wall_seconds']:.1f} s"
        )


def run_bench(options: BenchOptions, progress: bool | None = None) -> BenchReport:
    """Run the benchmark; raises ``BenchError`` with one line when it fails."""
    show = sys.stderr.isatty() if progress is None else progress
    secret = options.secret or os.urandom(16)
    group, port = private_network()
    timeout = options.timeout or options.default_timeout()
    started = time.monotonic()
    deadline = started + timeout
    events: Lines = queue.Queue()
    states: list[_MemberState] = []
    try:
        for index in range(options.members):
            address, prefix = options.hosts[index] if options.hosts else ("127.0.0.1", ())
            spec = MemberSpec(
                index=index, members=options.members, messages=options.messages, size=options.size,
                order=options.order, rate=options.rate, max_datagram=options.max_datagram,
                multicast_group=group, multicast_port=port, view_timeout=min(VIEW_TIMEOUT, timeout),
                encrypt=options.encrypt, settings=dict(options.settings), bind_host=address,
            )
            states.append(_MemberState(index, *spawn("sgcs.apps.bench_member", index, spec.to_json(), secret, events,
                                                     prefix)))
        with _progress_bar(options, show) as update:
            _wait(states, events, deadline, timeout, "done", update)
            wall = time.monotonic() - started
            for state in states:
                state.close_stdin()
            _wait(states, events, min(deadline, time.monotonic() + EXIT_GRACE), EXIT_GRACE, "stats", update)
        for state in states:
            state.process.wait(timeout=EXIT_GRACE)
    finally:
        stop_all(states)
    report = BenchReport(options, wall_seconds=wall)
    for state in states:
        assert state.result is not None and state.stats is not None
        statistics_ = {key: state.stats["statistics"].get(key) for key in STAT_KEYS}
        statistics_["send_errors"] = state.stats["io"].get("send_errors", 0)
        report.members.append({"index": state.index, **state.result, "statistics": statistics_})
    return report


def _wait(states: list[_MemberState], events: Lines, deadline: float,
          timeout: float, until: str, update: Callable[[list[_MemberState]], None]) -> None:
    """Handle the members' messages until each has sent ``until`` ("done" or "stats")."""
    def complete() -> bool:
        return all((s.result if until == "done" else s.stats) is not None for s in states)

    while not complete():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise BenchError(_timeout_message(states, timeout, until))
        try:
            index, message = events.get(timeout=min(remaining, 0.25))
        except queue.Empty:
            update(states)
            continue
        _handle(states[index], message)
        update(states)


def _handle(state: _MemberState, message: dict[str, Any] | None) -> None:
    if message is None:  # its stdout closed: it exited
        state.exited = True
        if state.stats is None:
            try:
                state.process.wait(timeout=KILL_GRACE)  # so its exit code and stderr are complete
            except subprocess.TimeoutExpired:
                pass
            raise BenchError(f"member {state.index} exited early: {state.last_error_line()}")
        return
    kind = message.get("event")
    if kind == "error":
        raise BenchError(f"member {state.index}: {message.get('message')}")
    if kind == "joined":
        state.id = message["id"]
    elif kind == "view":
        state.view = message["members"]
    elif kind == "progress":
        state.delivered = message["delivered"]
    elif kind == "done":
        state.result = message["result"]
        state.delivered = state.result["delivered"]
    elif kind == "stats":
        state.stats = message


def _timeout_message(states: list[_MemberState], timeout: float, until: str) -> str:
    if until == "stats":
        late = [s.index for s in states if s.stats is None]
        return f"members {late} did not report their statistics within {timeout:g} s of the end"
    waiting = [s for s in states if s.result is None]
    detail = ", ".join(f"member {s.index}: view {s.view}, delivered {s.delivered}" for s in waiting)
    return f"timed out after {timeout:g} s ({detail}); raise --timeout for long runs"


@contextmanager
def _progress_bar(options: BenchOptions, show: bool) -> Iterator[Callable[[list[_MemberState]], None]]:
    if not show:
        yield lambda states: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    total = options.members * options.members * options.messages
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True), refresh_per_second=4, transient=True) as bar:
        task = bar.add_task("starting members", total=total)

        def update(states: list[_MemberState]) -> None:
            views = min(s.view for s in states)
            if views < options.members:
                description = f"discovery: smallest view {views}/{options.members}"
            elif all(s.result is not None for s in states):
                description = "collecting statistics"
            else:
                description = "delivered (all members)"
            bar.update(task, completed=sum(s.delivered for s in states), description=description)

        yield update
