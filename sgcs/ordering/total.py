"""Causal, total and safe delivery over the ACK graph (SGCS paper, section 3.4).

Theory of operation
-------------------
The transport hands over each sender's messages in FIFO order, each with the
ACKs its sender piggybacked: (s, n) means "when I sent this, I had received
sender s up to record n". These edges are the causal graph; no sequencer and
no extra wire field is needed.

* **Timestamps.** ``ts(m) = 1 + max(ts(previous message of m's sender),
  ts(latest complete message of s ending at or before n) for each ACK (s, n))``.
  Every node computes the same value from the same records, and a message's
  timestamp exceeds that of everything in its causal past.
* **Promises.** A member's ACKs, in a record or an idle member's null message,
  promise that its later messages acknowledge at least that much, hence have a
  larger timestamp. A promise is usable once we hold that member's own stream
  up to the point where it made it (so nothing it sent before is in flight)
  and know the timestamps it refers to.
* **Total order** (symmetric, deterministic by member id): deliver the
  received message with the smallest ``(ts, sender)`` once every other member
  has promised a clock at least its timestamp, which is the paper's "wait for
  at least one message from every member". Ties go to the lower member id.
* **Causal order**: deliver a message once every message it acknowledges has
  been delivered.
* **Safe order** (like Spread's SAFE): total order, and additionally every
  member of the view has acknowledged the message.

Latency: a total-order message waits for a promise from every member, so for
about one ACK interval plus a network round; it does not grow with N except
through the slowest member's promise. A sequencer variant for very large groups
can be added beside this class.
"""

from __future__ import annotations

import bisect
import heapq
from collections import deque
from typing import Any, Callable, NamedTuple

from sortedcontainers import SortedList

from ..config import Order

Ack = tuple[int, int]
PRUNE_AT = 256
"""Known timestamps per stream before the oldest are pruned."""
PROMISES_MAX = 4_096
"""Promises of one member waiting to become usable; past it the oldest is
dropped (``promises_dropped``). A later promise of the same member covers at
least as much (ACKs only grow), so a drop can only delay delivery, never
reorder it; a member's null messages claiming a stream position that never
comes cannot grow memory."""


class OrderedMessage(NamedTuple):
    sender: int
    first: int
    """Sequence number of the message's first record: its id in traces."""
    last: int
    """Sequence number of its last record (they differ when it was fragmented)."""
    acks: tuple[Ack, ...]
    payload: Any
    """What the caller attaches and gets back on delivery (the group stack's ``Message``)."""


class _Stream:
    """What we know of one member's stream."""

    __slots__ = ("queue", "unstamped", "ends", "stamps", "base", "received", "promises", "clock", "delivered")

    def __init__(self) -> None:
        self.queue: deque[OrderedMessage] = deque()  # received, not yet delivered
        self.unstamped: deque[OrderedMessage] = deque()
        """The tail of ``queue`` whose timestamps are not known yet: kept apart so
        that stamping never walks the stamped part (thousands under load)."""
        self.ends: list[int] = []  # last record of each message whose ts is known, ascending
        self.stamps: list[int] = []  # their timestamps
        self.base = 0  # timestamp of the last message pruned from ends/stamps
        self.received = 0  # highest record received (the transport is FIFO)
        self.promises: deque[tuple[int, tuple[Ack, ...]]] = deque()  # (own position, acks)
        self.clock = 0  # usable promise: later messages have ts > clock
        self.delivered = 0  # last record of the last delivered message


class OrderingLayer:
    """Holds messages back until their order allows; one per group and node."""

    def __init__(self, me: int, members: tuple[int, ...], order: Order) -> None:
        self.me = me
        self.order = order
        self._streams: dict[int, _Stream] = {}
        self._acked: dict[int, dict[int, int]] = {}  # member -> sender -> highest record acked
        self._work: set[int] = set()  # streams with unstamped messages or unused promises
        self._heads: list[tuple[int, int, int]] = []  # (ts, sender, first) of stamped queue heads
        self._clocks = SortedList()  # (clock, member) of the other members
        self._final = False
        """Draining at the end of a view: every record up to the cut is here,
        and references past it point into the next view."""
        self.blocker: int | None = None
        """The member whose promise (or, for safe order, ACK) the next message waits for."""
        self.members: tuple[int, ...] = ()
        self.promises_dropped = 0
        self.set_members(members)

    def set_members(self, members: tuple[int, ...]) -> None:
        self.members = tuple(sorted(set(members) | {self.me}))
        for member in self.members:
            if member not in self._streams:
                self._streams[member] = _Stream()
                if member != self.me:
                    self._clocks.add((0, member))

    def _stream(self, member: int) -> _Stream:
        stream = self._streams.get(member)  # not setdefault: it would build a _Stream per call
        if stream is None:
            stream = self._streams[member] = _Stream()
        return stream

    # ------------------------------------------------------------------ inputs

    def on_message(self, message: OrderedMessage) -> list[OrderedMessage]:
        """A message from the transport (FIFO per sender). Returns what is now deliverable."""
        self.add(message)
        return self.deliverable()

    def add(self, message: OrderedMessage) -> None:
        """A message from the transport (FIFO per sender); ``deliverable`` then
        tells what may go. Adding a datagram's messages first and asking once
        costs one ordering pass per datagram instead of one per message."""
        stream = self._stream(message.sender)
        stream.queue.append(message)
        stream.unstamped.append(message)
        stream.received = message.last
        self._work.add(message.sender)
        self.on_acks(message.sender, ((message.sender, message.last), *message.acks))

    def on_acks(self, member: int, acks: tuple[Ack, ...]) -> None:
        """ACKs from ``member`` (piggybacked or in a null): a promise, and for
        safe order the proof that it holds what it acknowledges."""
        stream = self._stream(member)
        acked = self._acked.get(member)
        if acked is None:
            acked = self._acked[member] = {}
        own = stream.received
        streams = self._streams
        # entries of ids that are not members carry no order (their clock is 0):
        # keeping them would let one member grow our tables with invented ids
        acks = tuple(entry for entry in acks if entry[0] in streams)
        for sender, high in acks:
            if high > acked.get(sender, 0):
                acked[sender] = high
            if sender == member:
                own = max(own, high)
        if len(stream.promises) >= PROMISES_MAX:
            stream.promises.popleft()
            self.promises_dropped += 1
        stream.promises.append((own, acks))
        self._work.add(member)

    # ------------------------------------------------------------------ delivery

    def deliverable(self) -> list[OrderedMessage]:
        self._stamp_all()
        self.blocker = None
        if self.order is Order.CAUSAL:
            return self._deliver_causal()
        out: list[OrderedMessage] = []
        while True:
            candidate = self._smallest()
            if candidate is None or not self._may_deliver(candidate):
                return out
            out.append(self._pop(candidate.sender))

    def _deliver_causal(self) -> list[OrderedMessage]:
        out: list[OrderedMessage] = []
        progress = True
        while progress:
            progress = False
            for sender in sorted(s for s, stream in self._streams.items() if stream.queue):
                queue = self._streams[sender].queue
                while queue and self._causally_ready(queue[0]):
                    out.append(self._pop(sender))
                    progress = True
        return out

    def _causally_ready(self, message: OrderedMessage) -> bool:
        for sender, high in message.acks:
            stream = self._streams.get(sender)
            if stream is not None and not self._covers(stream, high):
                return False
        return True

    def _covers(self, stream: _Stream, high: int) -> bool:
        """Every complete message of the stream ending at or before ``high`` is delivered."""
        if self._final:
            high = min(high, stream.received)
        if stream.delivered >= high:
            return True
        head = stream.queue[0] if stream.queue else None
        return head is not None and stream.delivered == head.first - 1 and head.last > high

    def _smallest(self) -> OrderedMessage | None:
        """The stamped queue head with the smallest (ts, sender); stale heap
        entries (delivered, or a departed sender) are dropped on the way."""
        while self._heads:
            ts, sender, first = self._heads[0]
            stream = self._streams.get(sender)
            if stream is not None and stream.queue and stream.queue[0].first == first:
                return stream.queue[0]
            heapq.heappop(self._heads)
        return None

    def _may_deliver(self, message: OrderedMessage) -> bool:
        ts = self._ts_of(self._streams[message.sender], message.last)
        assert ts is not None
        own = self._streams[self.me]
        if own.unstamped and message.sender != self.me:
            return False  # one of our own messages awaits its timestamp: it may come first
        for clock, member in self._clocks:  # ascending: usually decided by the first one or two
            if clock >= ts:
                break
            if member != message.sender:
                self.blocker = member
                return False
        if self.order is Order.SAFE:
            for member in self.members:
                if member not in (self.me, message.sender) and self._acked.get(member, {}).get(
                        message.sender, 0) < message.last:
                    self.blocker = member
                    return False
        return True

    def _pop(self, sender: int) -> OrderedMessage:
        stream = self._streams[sender]
        message = stream.queue.popleft()
        stream.delivered = message.last
        self._push_head(sender, stream)
        if len(stream.ends) > PRUNE_AT:
            self._prune(sender, stream)
        return message

    def _prune(self, sender: int, stream: _Stream) -> None:
        """Forget timestamps nobody can refer to any more: every member has
        acknowledged past them, and ACKs only grow."""
        floor = min(self._acked.get(m, {}).get(sender, 0) for m in self.members if m != sender) if len(
            self.members) > 1 else stream.delivered
        keep = max(0, bisect.bisect_right(stream.ends, min(floor, stream.delivered)) - 1)
        if keep:
            stream.base = stream.stamps[keep - 1]
            del stream.ends[:keep], stream.stamps[:keep]

    # ------------------------------------------------------------------ timestamps and promises

    def _stamp_all(self) -> None:
        """Compute timestamps and promises until nothing more can be learned;
        only streams with pending work are looked at."""
        progress = True
        while progress and self._work:
            progress = False
            for member in sorted(self._work):
                stream = self._streams.get(member)
                if stream is None:
                    self._work.discard(member)
                    continue
                stamped = self._stamp(stream)
                if stamped:
                    self._push_head(member, stream)
                promised = self._advance_promises(member, stream)
                progress |= stamped or promised
                if not stream.promises and not stream.unstamped:
                    self._work.discard(member)

    def _push_head(self, sender: int, stream: _Stream) -> None:
        if stream.queue:
            head = stream.queue[0]
            ts = self._ts_of(stream, head.last)
            if ts is not None:
                heapq.heappush(self._heads, (ts, sender, head.first))

    def _stamp(self, stream: _Stream) -> bool:
        progress = False
        unstamped = stream.unstamped
        while unstamped:
            message = unstamped[0]
            if stream.ends and stream.ends[-1] >= message.last:
                unstamped.popleft()
                continue
            ts = self._stamp_of(message, stream)
            if ts is None:
                break
            unstamped.popleft()
            stream.ends.append(message.last)
            stream.stamps.append(ts)
            progress = True
        return progress

    def _ts_of(self, stream: _Stream, last: int) -> int | None:
        """Timestamp of the message of ``stream`` ending at record ``last``, if known."""
        i = bisect.bisect_left(stream.ends, last)
        return stream.stamps[i] if i < len(stream.ends) and stream.ends[i] == last else None

    def _stamp_of(self, message: OrderedMessage, stream: _Stream) -> int | None:
        latest = stream.stamps[-1] if stream.stamps else 0
        for sender, high in message.acks:
            ts = self._clock_of(sender, high)
            if ts is None:
                return None
            latest = max(latest, ts)
        return latest + 1

    def _clock_of(self, sender: int, high: int) -> int | None:
        """Timestamp of the latest complete message of ``sender`` ending at or
        before record ``high`` (0 if none); None while we cannot know it yet."""
        stream = self._streams.get(sender)
        if stream is None or high <= 0:
            return 0
        if stream.received < high:
            if not self._final:
                return None  # records up to high are still in flight to us
            high = stream.received  # past the cut: those records belong to the next view
        if stream.unstamped and stream.unstamped[0].last <= high:
            return None  # the first unstamped message ends by high: its timestamp is not known yet
        i = bisect.bisect_right(stream.ends, high)
        return stream.stamps[i - 1] if i else stream.base

    def _advance_promises(self, member: int, stream: _Stream) -> bool:
        """Use the member's promises that became usable, in order; the sorted
        clocks are updated once at the end, not once per promise."""
        promises, clock_of = stream.promises, self._clock_of
        best = stream.clock
        while promises:
            position, acks = promises[0]
            if stream.received < position:
                break
            clock = 0
            for sender, high in acks:
                known = clock_of(sender, high)
                if known is None:
                    clock = -1
                    break
                if known > clock:
                    clock = known
            if clock < 0:
                break  # a timestamp it refers to is not known yet
            promises.popleft()
            if clock > best:
                best = clock
        if best == stream.clock:
            return False
        if member != self.me:
            self._clocks.discard((stream.clock, member))
            self._clocks.add((best, member))
        stream.clock = best
        return True

    def truncate_at_first(self, member: int, cut_here: Callable[[OrderedMessage], bool]) -> None:
        """Drop ``member``'s undelivered messages from the first one for which
        ``cut_here`` holds: they leave this view's order, alike everywhere
        (a message straddling the point stays)."""
        stream = self._streams.get(member)
        if stream is None:
            return
        first = next((m.first for m in stream.queue if cut_here(m)), None)
        if first is None:
            return
        high = first - 1
        while stream.queue and stream.queue[-1].first > high:
            stream.queue.pop()
        while stream.unstamped and stream.unstamped[-1].first > high:
            stream.unstamped.pop()
        i = bisect.bisect_right(stream.ends, high)
        del stream.ends[i:], stream.stamps[i:]
        stream.received = max(high, stream.delivered)
        self._work.add(member)

    def start_at(self, member: int, seq: int) -> None:
        """A new view begins ``member``'s stream after record ``seq`` (the cut)."""
        stream = self._stream(member)
        stream.received = max(stream.received, seq)
        stream.delivered = max(stream.delivered, seq)

    def drain(self) -> tuple[list[OrderedMessage], list[OrderedMessage]]:
        """End of a view: every member holds the same messages up to the cut,
        so deliver them all in the order's deterministic sequence without
        waiting for promises. References past the cut are clamped to it: what
        lies beyond belongs to the next view, or to nobody (an excluded
        member's records that no survivor holds). Whatever still cannot be
        ordered is returned as discarded, alike everywhere."""
        self._final = True
        self._work.update(self._streams)
        self._stamp_all()
        if self.order is Order.CAUSAL:
            delivered = self._deliver_causal()
        else:
            delivered = []
            while (candidate := self._smallest()) is not None:
                delivered.append(self._pop(candidate.sender))
        discarded = [m for sender in sorted(self._streams) for m in self._streams[sender].queue]
        return delivered, discarded

    def waiting_ids(self) -> list[tuple[int, int]]:
        """(sender, first record) of every message held back, by sender."""
        return [(s, m.first) for s in sorted(self._streams) for m in self._streams[s].queue]

    def waiting(self) -> bool:
        """Messages are held back: idle members should send their promises."""
        return any(s.queue for s in self._streams.values())

    def forget(self, member: int) -> list[OrderedMessage]:
        """A member left the view: its undelivered messages are dropped and it no
        longer holds others back. Returns messages that became deliverable."""
        stream = self._streams.pop(member, None)
        if stream is not None and member != self.me:
            self._clocks.discard((stream.clock, member))
        self._work.discard(member)
        self._acked.pop(member, None)
        self.members = tuple(m for m in self.members if m != member)
        return self.deliverable()
