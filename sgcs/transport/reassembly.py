"""Reassembly of fragmented messages with bounded memory and a timeout.

Theory of operation
-------------------
A message longer than one record's payload is cut into records, each flagged
``MORE_FRAGMENTS`` except the last (``sgcs.records``). Both streams (multicast
in ``reliable.py``, unicast in ``unicast.py``) hand records over in sequence
order, so each sender has at most one message under reassembly per stream,
and only senders of a fragmented message need this state at all.

Two caps bound what a sender that never ends its message can make us hold,
so that no peer, faulty or malicious, can grow our memory without limit:

* **Size.** Once the fragments held exceed ``max_message`` bytes (more than any
  correct sender cuts, since sends are refused past it), the partial message
  is dropped, counted as ``reassembly_oversize``.
* **Time.** A partial message whose first fragment arrived more than
  ``reassembly_timeout`` seconds ago is dropped at the stream's next timer,
  counted as ``reassembly_timeout``. A crashed sender is excluded by a view
  change well before that (which forgets its stream), so in a healthy group
  the timeout only catches a member that breaks the protocol.

After a drop the stream skips records up to and including the next one that
ends a message: a message's tail is never delivered as a message of its own.
Sans-I/O: time arrives as ``now``.
"""

from __future__ import annotations

from ..records import MORE_FRAGMENTS, Record


class Reassembly:
    """One sender's partial message (or the skipping of a dropped one's tail)."""

    __slots__ = ("fragments", "size", "deadline", "skipping")

    def __init__(self) -> None:
        self.fragments: list[Record] = []
        self.size = 0
        """Payload bytes held in ``fragments``."""
        self.deadline: float | None = None
        """When the partial message is dropped if still incomplete."""
        self.skipping = False
        """A partial message was dropped: discard records up to its end."""

    def idle(self) -> bool:
        """Nothing held and nothing to skip: the state can be let go."""
        return not self.fragments and not self.skipping

    def push(self, record: Record, now: float | None, max_bytes: int, timeout: float,
             drops: dict[str, int]) -> list[Record] | None:
        """Add the sender's next record in order; returns a whole message's
        records once its last one arrives, else None. ``now`` None: the
        caller's clock is not known here; ``stamp`` sets the deadline at the
        next timer."""
        ends = not record.flags & MORE_FRAGMENTS
        if self.skipping:
            self.skipping = not ends
            return None
        if not self.fragments:
            self.deadline = None if now is None else now + timeout
        self.fragments.append(record)
        self.size += len(record.payload)
        if self.size > max_bytes:
            drops["reassembly_oversize"] = drops.get("reassembly_oversize", 0) + 1
            self._abandon(skip=not ends)
            return None
        if ends:
            done = self.fragments
            self._abandon(skip=False)
            return done
        return None

    def unstamped(self) -> bool:
        return bool(self.fragments) and self.deadline is None

    def stamp(self, now: float, timeout: float) -> None:
        if self.unstamped():
            self.deadline = now + timeout

    def expire(self, now: float, drops: dict[str, int]) -> bool:
        """Drop the partial message if its time is up; True if it was dropped."""
        if not self.fragments or self.deadline is None or now < self.deadline:
            return False
        drops["reassembly_timeout"] = drops.get("reassembly_timeout", 0) + 1
        self._abandon(skip=True)
        return True

    def _abandon(self, skip: bool) -> None:
        self.fragments, self.size, self.deadline, self.skipping = [], 0, None, skip
