"""Two latency histograms a running node keeps for its metrics.

* **Delivery latency**: from this node's ``send`` of a multicast to its own
  delivery of it (its order's wait included), sampled: one message in
  ``SAMPLE_EVERY`` by sequence number, so the cost per message is one bit test.
* **View change duration**: from the first ``OptimisticView`` of a change (a
  proposal reached this member) to the ``ViewChange`` that ends it, per group.

Both are bucketed as Prometheus histograms (``sgcs.metrics`` exports them as
``sgcs_delivery_latency_seconds`` and ``sgcs_view_change_seconds``). The clock
is the driver's (trio's monotonic clock): durations only, never instants.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

DELIVERY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)
"""Upper bounds in seconds (a last bucket, +Inf, holds the rest)."""
VIEW_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
SAMPLE_EVERY = 8
"""One own multicast in 8 is timed (by its sequence number's low bits)."""
PENDING_MAX = 4_096
"""Timed messages awaiting their outcome at most: a bound, never reached while
every message gets one (the flow window holds far fewer)."""


@dataclass(frozen=True, slots=True)
class HistogramSnapshot:
    """Counts per bucket (not cumulative; the last is above every bound), sum and count."""

    bounds: tuple[float, ...]
    counts: tuple[int, ...]
    total: float
    count: int


class Histogram:
    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.total = 0.0
        self.count = 0

    def observe(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, seconds)] += 1
        self.total += seconds
        self.count += 1

    def snapshot(self) -> HistogramSnapshot:
        return HistogramSnapshot(self.bounds, tuple(self.counts), self.total, self.count)


class Timings:
    """The node's two histograms and what they wait for."""

    def __init__(self) -> None:
        self.delivery = Histogram(DELIVERY_BUCKETS)
        self.view_change = Histogram(VIEW_BUCKETS)
        self._sent: dict[tuple[str, int], float] = {}
        self._changing: dict[str, float] = {}

    def sent(self, group: str, seq: int, now: float) -> None:
        if seq % SAMPLE_EVERY == 0 and len(self._sent) < PENDING_MAX:
            self._sent[(group, seq)] = now

    def delivered(self, group: str, seq: int, now: float) -> None:
        if seq % SAMPLE_EVERY == 0:
            started = self._sent.pop((group, seq), None)
            if started is not None:
                self.delivery.observe(now - started)

    def ended(self, group: str, seq: int) -> None:
        """Another outcome (rolled back, not delivered): not a delivery to time."""
        self._sent.pop((group, seq), None)

    def change_began(self, group: str, now: float) -> None:
        self._changing.setdefault(group, now)

    def change_ended(self, group: str, now: float) -> None:
        started = self._changing.pop(group, None)
        if started is not None:
            self.view_change.observe(now - started)

    def left(self, group: str) -> None:
        self._changing.pop(group, None)
        for key in [key for key in self._sent if key[0] == group]:
            del self._sent[key]
