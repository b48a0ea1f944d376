"""The state of one ``sgcs demo`` run: its options, one row per member, the
timeline (kill, settle, verdict) and the event log.

``sgcs.apps.demo`` drives it (member processes, the message loop) and
``sgcs.apps.demo_display`` draws it; both import this module, and it imports
neither. The timeline is described in ``sgcs.apps.demo``.
"""

from __future__ import annotations

import random
import subprocess
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..config import Order
from ..errors import UsageError
from .members import KILL_GRACE, Child

MIN_MEMBERS, MAX_MEMBERS = 2, 16
MAX_RATE = 1_000.0
MAX_DURATION = 3_600.0
FORM_TIMEOUT = 20.0
"""Seconds from the start by which every member must hold the view of all N."""
SETTLE_TIMEOUT = 10.0
"""Seconds past ``duration`` the survivors get to agree on a view without the victim."""
LOG_LINES = 10
"""Events the live display keeps on screen."""


@dataclass(frozen=True, slots=True)
class DemoOptions:
    members: int = 4
    duration: float = 12.0
    kill_at: float | None = None
    """Seconds into the run of the kill; None: half the duration; 0: never."""
    rate: float = 20.0
    """Messages per second each member multicasts."""
    order: str = Order.TOTAL.value
    trace: str | None = None
    """A new or empty directory for every member's trace; None: no trace."""
    plain: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.members, bool) or not isinstance(self.members, int) or not (
            MIN_MEMBERS <= self.members <= MAX_MEMBERS
        ):
            raise UsageError(f"--members must be an integer in [{MIN_MEMBERS}, {MAX_MEMBERS}], got {self.members!r}")
        if not 0 < self.duration <= MAX_DURATION:
            raise UsageError(f"--duration must be in (0, {MAX_DURATION:g}] seconds, got {self.duration:g}")
        if self.kill_at is not None and not (self.kill_at == 0 or 0 < self.kill_at < self.duration):
            raise UsageError(f"--kill-at must be 0 (never) or inside the run, (0, {self.duration:g}) s, "
                             f"got {self.kill_at:g}")
        if not 0 < self.rate <= MAX_RATE:
            raise UsageError(f"--rate must be in (0, {MAX_RATE:g}] messages per second, got {self.rate:g}")
        Order.parse(self.order)
        if self.trace is not None and Path(self.trace).exists() and (
            not Path(self.trace).is_dir() or any(Path(self.trace).iterdir())
        ):
            raise UsageError(f"--trace {self.trace}: must be a new or empty directory")

    @property
    def kill_time(self) -> float | None:
        """Seconds into the run of the kill; None: no kill."""
        return self.duration / 2 if self.kill_at is None else (self.kill_at or None)


@dataclass(slots=True)
class DemoMember(Child):
    node_id: int = 0
    joined: bool = False
    view_id: str = ""
    view: tuple[int, ...] = ()
    sent: int = 0
    delivered: int = 0
    rate: float = 0.0
    """Messages delivered per second, over the member's last report interval."""
    killed: bool = False
    exited: bool = False
    new_view_after: float | None = None
    """Seconds from the kill to this member's first view without the victim."""

    @property
    def name(self) -> str:
        return f"m{self.node_id}"


def names(ids: list[int] | tuple[int, ...]) -> str:
    return "[" + ", ".join(f"m{i}" for i in ids) + "]"


class DemoRun:
    """The run's state: the members' rows, the timeline and the event log."""

    def __init__(self, options: DemoOptions, members: list[DemoMember], on_event: Callable[[str], None]) -> None:
        self.options = options
        self.members = members
        self.started = time.monotonic()
        self.first_join: float | None = None
        """CLOCK_MONOTONIC of the first member's join: group throughput counts from there."""
        self.ended: float | None = None
        self.events: deque[str] = deque(maxlen=LOG_LINES)
        self._on_event = on_event
        self.kill_t: float | None = None
        """CLOCK_MONOTONIC of the kill; None before it."""
        self.victim: DemoMember | None = None
        self.failure: str | None = None
        self._seen: set[tuple[str, Any]] = set()
        self._handlers: dict[str, Callable[[DemoMember, dict[str, Any]], None]] = {
            "joined": self._on_joined, "view": self._on_view, "proposal": self._on_proposal,
            "transitional": self._on_transitional,
            "suspect": self._on_suspect, "busy": self._on_busy, "counters": self._on_counters,
            "error": self._on_error,
        }

    # -- timeline

    def elapsed(self, t: float | None = None) -> float:
        return (time.monotonic() if t is None else t) - self.started

    @property
    def survivors(self) -> list[DemoMember]:
        return [m for m in self.members if not m.killed]

    def agree(self) -> bool:
        """Every survivor holds the same view, of exactly the survivors."""
        survivors = self.survivors
        ids = tuple(sorted(m.node_id for m in survivors))
        return all(m.view == ids for m in survivors) and len({m.view_id for m in survivors}) == 1

    def settled(self) -> bool:
        kill_pending = self.options.kill_time is not None and self.kill_t is None
        return not kill_pending and self.agree()

    def step(self) -> None:
        """Kill when due and the group has formed; fail when it does not form."""
        due, elapsed = self.options.kill_time, self.elapsed()
        if self.failure or due is None or self.kill_t is not None or elapsed < due:
            return
        if self.agree():
            self._kill(random.SystemRandom().choice(self.members))
        elif elapsed > max(due, FORM_TIMEOUT):
            self.failure = f"the group did not form within {elapsed:.0f} s ({self.views_text()})"
        else:
            self._once(("wait", 0), "waiting for every member to hold the full view before the kill")

    def finished(self) -> bool:
        elapsed = self.elapsed()
        if self.failure or elapsed < self.options.duration:
            return bool(self.failure)
        return self.settled() or elapsed > max(self.options.duration, FORM_TIMEOUT) + SETTLE_TIMEOUT

    def _kill(self, victim: DemoMember) -> None:
        victim.process.kill()  # SIGKILL: no goodbye, the others must detect it
        self.kill_t, self.victim, victim.killed = time.monotonic(), victim, True
        self.log(f"{victim.name} killed (SIGKILL) at {self.elapsed(self.kill_t):.1f} s")
        if self.options.trace is not None:
            from ..io.recorder import record_crash

            record_crash(self.options.trace, victim.node_id)

    # -- member messages

    def handle(self, member: DemoMember, message: dict[str, Any] | None) -> None:
        if message is None:
            self._on_exit(member)
        elif not member.killed and (handler := self._handlers.get(message.get("event", ""))) is not None:
            handler(member, message)  # anything else (noise on stdout) is ignored

    def _on_joined(self, member: DemoMember, message: dict[str, Any]) -> None:
        member.joined = True
        self.first_join = self.first_join or message["t"]
        self.log(f"{member.name} joined group 'demo' (pid {member.process.pid})", message["t"])

    def _on_view(self, member: DemoMember, message: dict[str, Any]) -> None:
        member.view_id, member.view = message["view_id"], tuple(message["members"])
        after = ""
        if self.victim is not None and self.victim.node_id not in member.view and member.new_view_after is None:
            member.new_view_after = message["t"] - (self.kill_t or 0.0)
            after = f", {member.new_view_after:.2f} s after the kill"
        size = f"{len(member.view)} member{'s' if len(member.view) > 1 else ''}"
        changes = "".join(f", {key} {names(message[key])}" for key in ("joined", "left", "failed") if message[key])
        self._once(("view", member.view_id),
                   f"view {member.view_id}: {size}{changes} (first at {member.name}{after})",
                   message["t"])
        if self.victim is not None and self.agree():
            self._once(("settled", 0), f"all {len(self.survivors)} survivors agree on {member.view_id} without "
                       f"{self.victim.name}: {self.kill_to_view_text()} after the kill", message["t"])

    def _on_proposal(self, member: DemoMember, message: dict[str, Any]) -> None:
        self._once(("proposal", message["view_id"]),
                   f"view change began: {member.name} sees proposal {message['view_id']} of "
                   f"{names(message['members'])}", message["t"])

    def _on_transitional(self, member: DemoMember, message: dict[str, Any]) -> None:
        self._once(("transitional", member.name, message["view_id"]),
                   f"{member.name} delivers its last messages of {message['view_id']} among "
                   f"{names(message['members'])} only", message["t"])

    def _on_suspect(self, member: DemoMember, message: dict[str, Any]) -> None:
        suspect = message["member"]
        after = f" ({message['t'] - self.kill_t:.2f} s after the kill)" if self.kill_t else ""
        self._once(("suspect", suspect, self.kill_t), f"{member.name} suspects m{suspect}{after}", message["t"])

    def _on_busy(self, member: DemoMember, message: dict[str, Any]) -> None:
        busy = message["member"]
        self._once(("busy", busy), f"{member.name} finds m{busy} busy (others heard from it lately): not excluded yet",
                   message["t"])

    def _on_counters(self, member: DemoMember, message: dict[str, Any]) -> None:
        member.sent, member.delivered, member.rate = message["sent"], message["delivered"], message["rate"]

    def _on_error(self, member: DemoMember, message: dict[str, Any]) -> None:
        self.failure = self.failure or f"{member.name}: {message.get('message')}"

    def _on_exit(self, member: DemoMember) -> None:
        member.exited = True
        if member.killed or self.ended is not None or self.failure:
            return
        try:
            member.process.wait(timeout=KILL_GRACE)  # so its stderr is complete
        except subprocess.TimeoutExpired:
            pass
        self.failure = f"{member.name} exited unexpectedly: {member.last_error_line()}"
        self.log(self.failure)

    # -- log and figures

    def log(self, text: str, t: float | None = None) -> None:
        line = f"{self.elapsed(t):6.2f} s  {text}"
        self.events.append(line)
        self._on_event(line)

    def _once(self, key: tuple[Any, ...], text: str, t: float | None = None) -> None:
        if key not in self._seen:
            self._seen.add(key)
            self.log(text, t)

    def kill_to_view(self) -> list[float]:
        """Seconds from the kill to each survivor's view without the victim, if it has one."""
        return [m.new_view_after for m in self.survivors if m.new_view_after is not None]

    def kill_to_view_text(self) -> str:
        """'0.12 s', or '0.10 s to 0.31 s' (min to max) when the survivors differ."""
        low, high = min(self.kill_to_view()), max(self.kill_to_view())
        return f"{low:.2f} s" if f"{low:.2f}" == f"{high:.2f}" else f"{low:.2f} s to {high:.2f} s (min to max)"

    def throughput(self) -> float:
        """Group throughput now: messages delivered per second, all live members."""
        return sum(m.rate for m in self.survivors)

    def delivered(self) -> int:
        return sum(m.delivered for m in self.members)

    def views_text(self) -> str:
        return "; ".join(f"{m.name} {m.view_id or 'no view'} of {len(m.view)}" for m in self.survivors)

    def verdict(self) -> str | None:
        """None on success, else the one-line reason for the failure."""
        if self.failure:
            return self.failure
        if self.victim is None and self.options.kill_time is not None:
            return f"no member was killed: the group never formed ({self.views_text()})"
        if self.victim is not None:
            late = [m.name for m in self.survivors if m.new_view_after is None]
            if late:
                return f"{', '.join(late)} never installed a view without {self.victim.name}"
        if not self.agree():
            return f"the members do not agree on one view of the {len(self.survivors)} survivors ({self.views_text()})"
        return None
