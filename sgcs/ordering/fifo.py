"""Per-sender FIFO gate over an unreliable stream.

Theory of operation
-------------------
A message from sender s with sequence number n is delivered only if n is above
the highest number already delivered from s. Duplicates and late arrivals are
refused, so invariants 1 and 2 (no duplicate, increasing per sender) hold even
over a network that duplicates and reorders. Gaps are skipped: with the
foundation's unreliable transport a lost message is never recovered. The
transport issue's NACK layer fills gaps before they reach this gate.
"""

from __future__ import annotations


class FifoGate:
    """Tracks the highest delivered sequence number per sender."""

    __slots__ = ("_delivered", "refused")

    def __init__(self) -> None:
        self._delivered: dict[int, int] = {}
        self.refused = 0

    def admit(self, sender: int, seq: int) -> bool:
        """True when (sender, seq) may be delivered now; records it if so."""
        if seq <= self._delivered.get(sender, 0):
            self.refused += 1
            return False
        self._delivered[sender] = seq
        return True

    def forget(self, sender: int) -> None:
        self._delivered.pop(sender, None)
