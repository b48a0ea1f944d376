"""The discrete-event engine: one heap of timestamped events.

Theory of operation
-------------------
An event is a plain tuple ``(t, tie, kind, node, a, b)``. ``tie`` comes from
one global counter, so no two entries compare equal and the order of events
is total and deterministic: events at the same time run in the order they were
scheduled. ``kind`` indexes the dispatch table the owner passes to ``run``;
``node``, ``a`` and ``b`` are its arguments. Tuples (rather than objects) keep
the cost of the millions of datagram arrivals of a large run to one small
allocation each.

Cancellation is lazy: an event that is no longer wanted (a timer that was
moved, a datagram to a node that has since crashed) stays in the heap and is
recognised as stale by its handler when it pops.

Time never goes backwards: ``schedule`` clamps to the current time.
"""

from __future__ import annotations

import heapq
from typing import Any, Callable, Sequence

ARRIVE, TIMER, APP, FAULT, RESUME, BUCKET, RETRY, SERVICE = range(8)
"""The simulator's event kinds: indexes into its dispatch table. SERVICE is
for a service layered on the nodes (``sgcs.sim.mailboxes``); the plain
simulator never schedules it."""

Handler = Callable[[float, int, Any, Any], None]
PROGRESS_EVERY = 1 << 14
"""Events between two progress callbacks; keeps the callback off the hot path."""


class Engine:
    """The heap, the clock and the run loop."""

    __slots__ = ("heap", "tie", "now", "events")

    def __init__(self) -> None:
        self.heap: list[tuple[float, int, int, int, Any, Any]] = []
        self.tie = 0
        self.now = 0.0
        self.events = 0
        """Events processed so far (stale ones included)."""

    def schedule(self, t: float, kind: int, node: int = -1, a: Any = None, b: Any = None) -> None:
        self.tie += 1
        heapq.heappush(self.heap, (t if t > self.now else self.now, self.tie, kind, node, a, b))

    def run(
        self,
        until: float,
        dispatch: Sequence[Handler],
        progress: Callable[[float], None] | None = None,
    ) -> None:
        """Process every event with ``t <= until``, in (t, tie) order."""
        heap = self.heap
        pop = heapq.heappop
        countdown = PROGRESS_EVERY
        while heap and heap[0][0] <= until:
            t, _, kind, node, a, b = pop(heap)
            self.now = t
            dispatch[kind](t, node, a, b)
            countdown -= 1
            if not countdown:
                self.events += PROGRESS_EVERY
                countdown = PROGRESS_EVERY
                if progress is not None:
                    progress(t)
        self.events += PROGRESS_EVERY - countdown
        self.now = max(self.now, until)
