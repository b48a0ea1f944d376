"""A history subscription's unread events, conflated when its reader falls behind.

Theory of operation (Gryphon, region 4: subscribers that declare an
*interpretation* "can ignore the order between today's IBM price and today's
HP price", and "under appropriate conditions, messages may be dropped
altogether"; the system may send any shorter sequence that the
interpretation maps to the same state). A subscriber to a *state-like*
stream (each event is its key's whole current value, a quote for instance)
declares the key: its interpretation is "the latest event per key", whose
shortest equivalent sequence is one event per key, the latest.

While the reader keeps up (at most ``behind`` events unread) the queue is a
plain FIFO: every event, in order. When more pile up, the queue conflates:
the unread events become one slot per key, in the order the keys first
appear, each holding the key's latest event, and every later event replaces
its key's slot in place (or adds a slot for a new key). Once the reader has
emptied it, the queue is a FIFO again. So the reader:

* gets, for each key, a subsequence of that key's events, in order, ending
  with the latest one (its interpreted state equals a reader that got all);
* may see keys in another order than they were published (allowed: the
  interpretation is per key);
* never holds more than ``max(behind, keys)`` unread events: its memory is
  bounded by the number of keys, not by how far behind it is.

Without a key the queue keeps every event up to ``limit`` and then drops the
oldest, counting them (the stream has no interpretation that would say which
events are superseded).
"""

from __future__ import annotations

from collections import OrderedDict, deque
from typing import Callable, Hashable, Sequence

from .graph import FlowGraph, History
from .syntax import FlowError, Value

Event = tuple[Value, ...]
KeyOf = Callable[[Event], Hashable]


def key_of(graph: FlowGraph, space: str, fields: str | Sequence[str]) -> KeyOf:
    """The key of ``space``'s events: the values of ``fields`` (``"issue"`` or ``"a, b"``)."""
    history = graph.spaces.get(space)
    if not isinstance(history, History):
        raise FlowError(f"flows: conflate needs an event history; {space!r} is not one (a state's rows are"
                        " already its latest values)")
    names = [f.strip() for f in fields.split(",")] if isinstance(fields, str) else list(fields)
    unknown = [n for n in names if n not in history.schema.names]
    if not names or unknown:
        raise FlowError(f"flows: conflate by field(s) of {space!r} ({history.schema}); unknown: {unknown or names}")
    positions = [history.schema.names.index(n) for n in names]
    if len(positions) == 1:
        (only,) = positions
        return lambda event: event[only]
    return lambda event: tuple(event[p] for p in positions)


class DeliveryQueue:
    """Unread events of one subscription (see the module docstring)."""

    def __init__(self, key: KeyOf | None = None, *, behind: int = 10_000, limit: int = 1_000_000) -> None:
        if behind < 1 or limit < 1:
            raise ValueError("behind and limit are at least 1")
        self.key, self.behind, self.limit = key, behind, limit
        self._fifo: deque[Event] = deque()
        self._latest: OrderedDict[Hashable, Event] = OrderedDict()
        """Non-empty only while conflating: one slot per key, its latest event."""
        self.conflated = 0
        """Events replaced by a later event of their key before they were read."""
        self.dropped = 0
        """Events dropped unread because the queue (without a key) was full."""
        self.high_water = 0
        """The most events ever unread at once."""

    @property
    def conflating(self) -> bool:
        return bool(self._latest)

    def __len__(self) -> int:
        return len(self._fifo) + len(self._latest)

    def push(self, event: Event) -> None:
        if self._latest:
            self._merge(event)
        else:
            self._fifo.append(event)
            if len(self._fifo) > self.behind and self.key is not None:
                self._conflate_all()
            elif len(self._fifo) > self.limit:
                self._fifo.popleft()
                self.dropped += 1
        self.high_water = max(self.high_water, len(self))

    def pop(self) -> Event | None:
        """The next event to read, or None."""
        if self._fifo:
            return self._fifo.popleft()
        if self._latest:
            return self._latest.popitem(last=False)[1]  # the last one out ends conflation: FIFO again
        return None

    def drain(self) -> list[Event]:
        """Every unread event, in reading order."""
        events = list(self._fifo) + list(self._latest.values())
        self._fifo.clear()
        self._latest.clear()
        return events

    def _conflate_all(self) -> None:
        """The reader fell behind: the unread events become one slot per key."""
        pending, self._fifo = self._fifo, deque()
        for event in pending:
            self._merge(event)

    def _merge(self, event: Event) -> None:
        assert self.key is not None
        key = self.key(event)
        if key in self._latest:
            self.conflated += 1
        self._latest[key] = event  # an existing key keeps its slot: a busy key cannot starve the others


__all__ = ["DeliveryQueue", "KeyOf", "key_of"]
