"""Three-stage survival signals of the ADS middleware (docs/handles.md, "Survival signals").

Theory of operation
-------------------
The ADS middleware paper (section 2.3, "three-stage survival signal
confirmation", its figure 7) declares a node dead only when three different
ways of looking at it agree. This module is that procedure as a sans-I/O state
machine: the module (``module.py``) feeds it what arrives and a tick every
interval T, and carries out what it returns (``Send``: a frame to one node;
``Verdict``: a survival signal for the applications). It never reads a clock.

* **Stage 1, push.** Every member sends its survival signal to every other
  member of the data field every T (``SurvivalParams.interval``). At each tick
  the monitor checks, per watched node, whether anything arrived from it since
  the previous tick (a signal, or any other unicast from it; not its
  multicasts, which the total order may deliver late, repaired by others or
  flushed at a view change after their sender fell silent).
  ``misses`` (the paper's N, 4) consecutive empty checks make it *suspect*.
* **Stage 2, pull.** A suspect gets ``probes`` (the paper's M, 3) direct
  probes, one per tick; it must answer at once, and anything from it ends the
  suspicion (*alive*). When the last probe has gone one tick unanswered, stage 3.
* **Stage 3, ask.** Up to ``ask_count`` neighbours (the members after the
  suspect in id order, among those this node itself hears: a neighbour that is
  silent too cannot vouch) are asked how long ago they heard from it. A
  neighbour heard it "in stage 1 or 2" if its news is at least half an
  interval fresher than ours (the suspect sends each round's signals to
  everyone at once, so news of a later round is a later signal):

  - any neighbour heard it: **busy** (alive, but not towards us);
  - every neighbour asked answered, and none heard it: **dead**;
  - ``ask_timeout`` passed with answers missing and none heard it:
    **unreachable**. This is where the paper is strict and this module is too:
    a death nobody confirmed is not a death. The silence may be ours (our own
    link is down, so neither the suspect nor the neighbours reach us), and
    declaring the whole field dead from a cut-off node is the error the third
    stage exists to prevent. Unreachable is not final: the node is asked
    about again every ``misses`` ticks (below) and becomes dead once
    neighbours confirm, or alive once it is heard.
  - No neighbour to ask: if the suspect is the only other node not known dead
    (a network of two), stage 3 is skipped as the paper says: **dead**. If
    other nodes remain but all of them are silent as well, nobody can confirm:
    **unreachable**.

* **After a verdict.** Busy and unreachable nodes keep being watched: their
  miss count starts again, and ``misses`` more empty checks run stages 2 and
  3 again (the paper leaves how busy ends open; this is the choice). Any
  frame from a suspect, busy, unreachable or dead node makes it alive again
  (a node that was cut off and came back).
* **Node shutdown.** "If, with no network fault, the middleware finds that no
  node but itself is alive, it sends 'node shutdown' to the interested upper
  modules." Here: once every other watched node is dead (each confirmed, or by
  the two-node rule), the monitor emits ``shutdown`` about itself, once. An
  unreachable node is the sign of a network fault (a confirmation could not be
  obtained), so while any node is unreachable there is no shutdown.

Which nodes are watched: the members of the data field's current view, and
nodes that sgcs excluded from it while they were being watched and that have
no verdict yet (their confirmation runs to its end, so the applications get
dead, busy or unreachable for them and not only the view's "failed"). A
planned leave stops the watch. ``TRANSITIONS`` is the table the code follows;
``tests/services/test_handles_survival.py`` walks every row.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from enum import Enum
from typing import Literal, Union

from sgcs.errors import UsageError

NEVER = math.inf
"""Age of a node never heard from."""


class State(Enum):
    ALIVE = "alive"
    """Signals arrive (fewer than ``misses`` consecutive empty checks)."""
    SUSPECT = "suspect"
    """Stage 2: ``misses`` empty checks in a row; being probed."""
    ASKING = "asking"
    """Stage 3: probes unanswered; neighbours asked."""
    BUSY = "busy"
    """A neighbour heard it during our stages 1-2: alive, not towards us."""
    UNREACHABLE = "unreachable"
    """Stage 3 ended without a confirmation either way (answers missing)."""
    DEAD = "dead"
    """Every neighbour asked confirmed the silence (or a network of two)."""


Trigger = Literal["heard", "misses", "probes_unanswered", "neighbour_heard", "all_confirmed", "ask_timeout",
                  "two_nodes", "nobody_to_ask"]

TRANSITIONS: dict[tuple[State, Trigger], State] = {
    (State.ALIVE, "misses"): State.SUSPECT,
    (State.SUSPECT, "heard"): State.ALIVE,
    (State.SUSPECT, "probes_unanswered"): State.ASKING,
    (State.SUSPECT, "two_nodes"): State.DEAD,
    (State.SUSPECT, "nobody_to_ask"): State.UNREACHABLE,
    (State.ASKING, "heard"): State.ALIVE,
    (State.ASKING, "neighbour_heard"): State.BUSY,
    (State.ASKING, "all_confirmed"): State.DEAD,
    (State.ASKING, "ask_timeout"): State.UNREACHABLE,
    (State.BUSY, "heard"): State.ALIVE,
    (State.BUSY, "misses"): State.SUSPECT,
    (State.UNREACHABLE, "heard"): State.ALIVE,
    (State.UNREACHABLE, "misses"): State.SUSPECT,
    (State.DEAD, "heard"): State.ALIVE,
}
"""(state, what happened) -> next state. Anything not listed leaves the state as it is."""

VerdictKind = Literal["suspected", "alive", "busy", "unreachable", "dead", "shutdown"]

_EVENT_OF: dict[State, VerdictKind] = {State.ALIVE: "alive", State.BUSY: "busy", State.UNREACHABLE: "unreachable",
                                       State.DEAD: "dead"}
"""The event an entry into a state emits (SUSPECT: "suspected", only when it comes from ALIVE)."""


@dataclass(frozen=True, slots=True)
class SurvivalParams:
    """The survival-signal settings: T, N, M and the ask stage's."""

    interval: float = 0.5
    """T, seconds between two survival signals (and two checks). The paper gives no value."""
    misses: int = 4
    """N, consecutive empty checks before a node is suspected (the paper's default, 4)."""
    probes: int = 3
    """M, direct probes, one per interval, before its neighbours are asked (the paper's default, 3)."""
    ask_count: int = 3
    """Neighbours asked in stage 3 (the paper does not say how many)."""
    ask_timeout: float = 1.0
    """Seconds stage 3 waits for the neighbours' answers."""

    def __post_init__(self) -> None:
        for name, low, high in (("interval", 0.01, 60.0), ("ask_timeout", 0.01, 600.0)):
            value = getattr(self, name)
            if type(value) not in (int, float) or not low <= value <= high:
                raise UsageError(f"SurvivalParams.{name} must be a number of seconds from {low} to {high}, got {value!r}")
        for name, low, high in (("misses", 1, 1_000), ("probes", 0, 1_000), ("ask_count", 1, 64)):
            value = getattr(self, name)
            if type(value) is not int or not low <= value <= high:
                raise UsageError(f"SurvivalParams.{name} must be an int from {low} to {high}, got {value!r}")

    @property
    def detection_bound(self) -> float:
        """Seconds from a node's last signal to a verdict, at most (stages 1, 2 and 3, one interval of jitter)."""
        return (self.misses + self.probes + 1) * self.interval + self.ask_timeout


@dataclass(frozen=True, slots=True)
class Send:
    """A frame for one node: a ``probe``, or an ``ask`` about ``about`` tagged ``nonce``."""

    kind: Literal["probe", "ask"]
    to: int
    about: int = 0
    nonce: int = 0


@dataclass(frozen=True, slots=True)
class Verdict:
    """A survival signal for the applications about ``node``."""

    kind: VerdictKind
    node: int


Output = Union[Send, Verdict]


@dataclass
class Watch:
    """What the monitor knows of one watched node."""

    state: State = State.ALIVE
    last_heard: float = NEVER
    """When anything last arrived from it (our clock), NEVER before the first."""
    heard_since_check: bool = True
    """Something arrived since the previous tick (True at first: a new member gets one interval of grace)."""
    misses: int = 0
    probes_sent: int = 0
    nonce: int = 0
    asked: frozenset[int] = frozenset()
    said_no: set[int] = field(default_factory=set)
    ask_deadline: float = 0.0
    in_view: bool = True
    reported: State = State.ALIVE
    """The last state the applications were told of (SUSPECT: "suspected")."""


class SurvivalMonitor:
    """The three stages for every node one member watches; see the module docstring."""

    def __init__(self, me: int, params: SurvivalParams, rng: random.Random | None = None) -> None:
        self.me, self.params = me, params
        self.watched: dict[int, Watch] = {}
        self.shutdown_sent = False
        self.stale_answers = 0
        """Answers to an ask that is over, or from a node not asked: ignored."""
        self._rng = rng or random.Random()

    # ------------------------------------------------------------------ inputs

    def state(self, node: int) -> State | None:
        watch = self.watched.get(node)
        return watch.state if watch else None

    def on_view(self, members: tuple[int, ...], joined: tuple[int, ...], left: tuple[int, ...],
                now: float) -> list[Output]:
        """A view was installed: watch its new members, stop watching those that
        left (planned), and keep those excluded until their verdict."""
        out: list[Output] = []
        for node in left:
            self.watched.pop(node, None)
        for node in members:
            if node == self.me:
                continue
            watch = self.watched.get(node)
            if watch is None or node in joined:  # new, or back from a partition or a restart
                self.watched[node] = Watch(last_heard=now)
                if watch is not None and watch.reported is not State.ALIVE:
                    out.append(Verdict("alive", node))
        for node, watch in self.watched.items():
            watch.in_view = node in members  # an excluded node stays watched until its verdict
        if out:
            self.shutdown_sent = False
        return out

    def heard(self, node: int, now: float) -> list[Output]:
        """Anything arrived from ``node``: evidence that it lives."""
        watch = self.watched.get(node)
        if watch is None:
            return []
        watch.last_heard = now
        watch.heard_since_check = True
        self._move(watch, "heard")
        watch.misses, watch.probes_sent, watch.asked = 0, 0, frozenset()
        if watch.reported is State.ALIVE:
            return []
        watch.reported = State.ALIVE
        self.shutdown_sent = False
        return [Verdict("alive", node)]

    def age(self, node: int, now: float) -> float:
        """Seconds since anything arrived from ``node`` (NEVER: not heard, or not watched):
        this node's answer when a neighbour asks about ``node``."""
        watch = self.watched.get(node)
        return NEVER if watch is None or watch.last_heard == NEVER else max(0.0, now - watch.last_heard)

    def on_answer(self, sender: int, about: int, nonce: int, age: float, now: float) -> list[Output]:
        """Neighbour ``sender`` last heard ``about`` ``age`` seconds ago (NEVER: not at all)."""
        watch = self.watched.get(about)
        if watch is None or watch.state is not State.ASKING or nonce != watch.nonce or sender not in watch.asked:
            self.stale_answers += 1
            return []
        ours = now - watch.last_heard  # inf when we never heard it
        if age < ours - self.params.interval / 2:
            return self._verdict(about, watch, "neighbour_heard")
        watch.said_no.add(sender)
        if watch.said_no >= watch.asked:
            return self._verdict(about, watch, "all_confirmed")
        return []

    def tick(self, now: float) -> list[Output]:
        """One check, every interval T: count misses, probe, ask, time asks out."""
        out: list[Output] = []
        for node, watch in list(self.watched.items()):
            heard, watch.heard_since_check = watch.heard_since_check, False
            if watch.state in (State.ALIVE, State.BUSY, State.UNREACHABLE):
                watch.misses = 0 if heard else watch.misses + 1
                if watch.misses >= self.params.misses:
                    self._move(watch, "misses")
                    watch.probes_sent = 0
                    if watch.reported is State.ALIVE:  # a busy or unreachable node is asked about again, silently
                        watch.reported = State.SUSPECT
                        out.append(Verdict("suspected", node))
                    out += self._pull(node, watch, now)
            elif watch.state is State.SUSPECT:
                out += self._pull(node, watch, now)
            elif watch.state is State.ASKING and now >= watch.ask_deadline:
                out += self._verdict(node, watch, "ask_timeout")
        return out

    # ------------------------------------------------------------------ stages

    def _pull(self, node: int, watch: Watch, now: float) -> list[Output]:
        if watch.probes_sent < self.params.probes:
            watch.probes_sent += 1
            return [Send("probe", node)]
        return self._ask(node, watch, now)

    def _ask(self, node: int, watch: Watch, now: float) -> list[Output]:
        others = [n for n, w in self.watched.items() if n != node and w.state is not State.DEAD]
        if not others:
            return self._verdict(node, watch, "two_nodes")
        hearing = sorted(n for n in others if self.watched[n].in_view
                         and self.watched[n].state in (State.ALIVE, State.BUSY))
        if not hearing:
            return self._verdict(node, watch, "nobody_to_ask")
        after = [n for n in hearing if n > node] + [n for n in hearing if n < node]  # the suspect's successors
        asked = after[:self.params.ask_count]
        self._move(watch, "probes_unanswered")
        watch.nonce = self._rng.getrandbits(63) or 1
        watch.asked, watch.said_no = frozenset(asked), set()
        watch.ask_deadline = now + self.params.ask_timeout
        return [Send("ask", to, about=node, nonce=watch.nonce) for to in asked]

    def _verdict(self, node: int, watch: Watch, trigger: Trigger) -> list[Output]:
        self._move(watch, trigger)
        watch.misses, watch.probes_sent, watch.asked = 0, 0, frozenset()
        out: list[Output] = []
        if watch.state is not watch.reported:  # a second confirmation with the same outcome says nothing new
            watch.reported = watch.state
            out.append(Verdict(_EVENT_OF[watch.state], node))
        if watch.state is State.DEAD:
            out += self._lone_survivor()
        return out

    def _lone_survivor(self) -> list[Output]:
        if self.shutdown_sent or not self.watched:
            return []
        if all(w.state is State.DEAD for w in self.watched.values()):
            self.shutdown_sent = True
            return [Verdict("shutdown", self.me)]
        return []

    @staticmethod
    def _move(watch: Watch, trigger: Trigger) -> None:
        watch.state = TRANSITIONS.get((watch.state, trigger), watch.state)
