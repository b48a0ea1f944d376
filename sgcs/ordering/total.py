"""Causal, total and safe delivery (SGCS paper, section 3.4).

Theory of operation
-------------------
The transport hands over each sender's messages in FIFO order, each with the
ACKs its sender piggybacked ((s, n): "when I sent this, I had received sender
s up to record n") and, in total and safe order, its sender's Lamport clock.

* **Timestamps.** Each member keeps a Lamport clock: the largest timestamp it
  has taken into its order. A message it sends carries ``clock + 1`` (its
  timestamp), so a message's timestamp exceeds that of everything in its
  causal past. The timestamp is the sender's to state, not the receivers' to
  derive: every member that holds a message orders it alike, whatever else
  it holds. (Deriving it from the ACK graph made it depend on the referenced
  records; a member that lacked one, at the end of a view it left alone,
  placed the message elsewhere than a member that had it: randomized
  total-order machine, explore.py seed 4153320111.) A stream's timestamps
  rise by at least ``PROMISE_AHEAD``: one that does not is raised to the
  previous one plus that, alike everywhere.
* **Promises.** A message with timestamp t is its sender's promise that its
  later messages carry t + ``PROMISE_AHEAD`` or more (a sender numbers its
  next message ``max(clock + 1, last + PROMISE_AHEAD)``), so while members
  send at similar rates each one's last message already covers the others'
  next ones; an idle member's null message states its clock and how far its
  own stream went, and is usable once we hold that stream up to there
  (nothing it sent before is in flight).
* **Total order** (symmetric, deterministic by member id): deliver the
  received message with the smallest ``(timestamp, sender)`` once every other
  member has promised a clock at least its timestamp, which is the paper's
  "wait for at least one message from every member". Ties go to the lower
  member id. At the end of a view (``drain``) every held message goes in that
  order without waiting: two members' deliveries of one view are then both
  rising in one global order, so they agree on the messages they share even
  when they held different ones.
* **Causal order**: deliver a message once every message it acknowledges has
  been delivered.
* **Safe order** (like Spread's SAFE): total order, and additionally every
  member of the view has acknowledged the message.
* **Promises by gossip** (large views: ``set_floor``). The transport's
  stability all-reduce computes a *floor*: a timestamp at or below which
  every message that will ever exist is already held by every member. The
  order then delivers by ``(timestamp, sender)`` up to the floor, with no
  per-member promise; what it delivers is stable, so safe order holds too.

Latency: with direct promises a total-order message waits for a promise from
every member, so for about one ACK interval plus a network round; it does not
grow with N except through the slowest member's promise, but every member
multicasts a promise per message (O(N^2) datagrams per message group-wide).
With promises by gossip it waits about two all-reduces, 2 ceil(log2 N) gossip
rounds, and costs no datagram of its own.
"""

from __future__ import annotations

import heapq
from collections import deque
from typing import Any, Callable, NamedTuple

from sortedcontainers import SortedList

from ..config import Order
from ..roster import Roster, roster_of

Ack = tuple[int, int]
PROMISES_MAX = 4_096
"""Null promises of one member waiting to become usable; past it the oldest
is dropped (``promises_dropped``). A later promise of the same member covers
at least as much (clocks only grow), so a drop can only delay delivery, never
reorder it; a member's null messages claiming a stream position that never
comes cannot grow memory."""

PROMISE_AHEAD = 256
"""A message with timestamp t promises that its sender's next one carries at
least ``t + PROMISE_AHEAD`` (its sender numbers it so, and every receiver
raises a stream's timestamps that fall short, alike everywhere). While every
member sends about as often as the others, each one's last message then
covers the others' next ones, and a total-order message goes at once when it
arrives instead of one hop later after a null (at 3 members x 250 msg/s its
latency fell to about one hop). A member that sends seldom promises by nulls,
as before. A protocol constant: members that differed on it could order apart."""

_EMPTY: deque[Any] = deque()
"""The queue, stamps and promises of every stream with none: shared and always
empty (a stream gets its own deque before it holds anything, and gives it
back when emptied). A deque costs 600 bytes even when empty; a member of a
10,000-member ordered group holds a stream for every sender it heard."""


class OrderedMessage(NamedTuple):
    sender: int
    first: int
    """Sequence number of the message's first record: its id in traces."""
    last: int
    """Sequence number of its last record (they differ when it was fragmented)."""
    acks: tuple[Ack, ...]
    payload: Any
    """What the caller attaches and gets back on delivery (the group stack's ``Message``)."""
    clock: int = 0
    """Its timestamp as its sender stated it (total and safe order)."""


class _Stream:
    """What we know of one member's stream."""

    __slots__ = ("queue", "stamps", "last_stamp", "received", "promises", "clock", "delivered")

    def __init__(self) -> None:
        self.queue: deque[OrderedMessage] = _EMPTY  # received, not yet delivered
        self.stamps: deque[int] = _EMPTY  # their timestamps
        self.last_stamp = 0  # timestamp of the last message received
        self.received = 0  # highest record received (the transport is FIFO)
        self.promises: deque[tuple[int, int]] = _EMPTY  # null promises: (own position, clock)
        self.clock = 0  # usable promise: later messages have timestamps above it
        self.delivered = 0  # last record of the last delivered message


class OrderingLayer:
    """Holds messages back until their order allows; one per group and node."""

    def __init__(self, me: int, members: tuple[int, ...], order: Order, gossip: bool = False) -> None:
        """``gossip``: promises by gossip (``set_floor``) from the start, so no
        per-member promise clock and no stream for a member until it sends."""
        self.me = me
        self.order = order
        self.clock = 0
        """Our Lamport clock: the largest timestamp taken into this order."""
        self._streams: dict[int, _Stream] = {}
        self._acked: dict[int, dict[int, int]] = {}  # safe order: member -> sender -> highest record acked
        self._heads: list[tuple[int, int, int]] = []  # (timestamp, sender, first) of queue heads
        self._clocks = SortedList()  # (clock, member) of the other members
        self._final = False
        """Draining at the end of a view: every record up to the cut is here,
        and references past it point into the next view."""
        self.blocker: int | None = None
        """The member whose promise (or, for safe order, ACK) the next message waits for."""
        self.floor: int | None = 0 if gossip else None
        """Promises by gossip: deliver up to this timestamp (None: direct promises)."""
        self._roster: Roster = roster_of((me,))
        self.members: tuple[int, ...] = ()
        self.promises_dropped = 0
        self.set_members(members)

    def set_members(self, members: tuple[int, ...]) -> None:
        # the shared roster: 10,000 members' own copies of a 10,000-entry list were 800 MB
        self._roster = roster_of(members).with_member(self.me)
        self.members = self._roster.members
        if self.floor is not None:
            return  # promises by gossip: streams appear as members send, and no clock is kept per member
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
        sender = message.sender
        stream = self._stream(sender)
        lowest = stream.last_stamp + PROMISE_AHEAD if stream.last_stamp else 1  # what its last message promised
        stamp = message.clock if message.clock >= lowest else lowest
        stream.last_stamp = stamp
        if not stream.queue:
            heapq.heappush(self._heads, (stamp, sender, message.first))
        if stream.queue is _EMPTY:
            stream.queue, stream.stamps = deque(), deque()
        stream.queue.append(message)
        stream.stamps.append(stamp)
        stream.received = message.last
        if stamp > self.clock:
            self.clock = stamp
        self._raise(sender, stream, stamp + PROMISE_AHEAD - 1)  # its later messages carry larger timestamps
        if stream.promises:
            self._use_promises(sender, stream)
        if self.order is Order.SAFE:
            self.on_acks(sender, ((sender, message.last), *message.acks))

    def on_null(self, member: int, acks: tuple[Ack, ...], clock: int | None) -> None:
        """A null message of ``member``: its ACKs (its own entry says how far
        its stream went) and, in total and safe order, its clock: a promise
        usable once we hold its stream up to that point."""
        if self.order is Order.SAFE:
            self.on_acks(member, acks)
        if clock is None or self.floor is not None or member not in self._roster:
            return  # promises by gossip: the floor decides, and a null must not cost a stream
        stream = self._stream(member)
        position = next((high for sender, high in acks if sender == member), 0)
        if position <= stream.received:
            self._raise(member, stream, clock)
            return
        if stream.promises is _EMPTY:
            stream.promises = deque()
        if len(stream.promises) >= PROMISES_MAX:
            stream.promises.popleft()
            self.promises_dropped += 1
        stream.promises.append((position, clock))

    def on_acks(self, member: int, acks: tuple[Ack, ...]) -> None:
        """Safe order: ``member`` holds what it acknowledges. (Promises by
        gossip deliver only what is stable, so safe order needs no ACK table:
        it was O(N) per member of a large view.)"""
        if self.floor is not None:
            return
        acked = self._acked.get(member)
        roster = self._roster
        if acked is None:
            if member not in roster:
                return  # not a member: it carries no order, and must not grow our tables
            acked = self._acked[member] = {}
        for sender, high in acks:
            if high > acked.get(sender, 0) and sender in roster:
                acked[sender] = high

    def _use_promises(self, member: int, stream: _Stream) -> None:
        promises, best = stream.promises, stream.clock
        while promises and promises[0][0] <= stream.received:
            best = max(best, promises.popleft()[1])
        if not promises:
            stream.promises = _EMPTY
        self._raise(member, stream, best)

    def _raise(self, member: int, stream: _Stream, clock: int) -> None:
        if clock <= stream.clock:
            return
        if member != self.me and self.floor is None:
            self._clocks.discard((stream.clock, member))
            self._clocks.add((clock, member))
        stream.clock = clock

    # ------------------------------------------------------------------ delivery

    def deliverable(self) -> list[OrderedMessage]:
        self.blocker = None
        if self.order is Order.CAUSAL:
            return self._deliver_causal()
        out: list[OrderedMessage] = []
        heads, streams = self._heads, self._streams
        while heads:
            stamp, sender, first = heads[0]
            stream = streams.get(sender)
            if stream is None or not stream.queue or stream.queue[0].first != first:
                heapq.heappop(heads)  # stale: delivered, truncated, or a departed sender
                continue
            if not self._may_deliver(stamp, stream.queue[0]):
                break
            heapq.heappop(heads)
            out.append(self._pop(sender, stream))
        return out

    def _deliver_causal(self) -> list[OrderedMessage]:
        out: list[OrderedMessage] = []
        progress = True
        while progress:
            progress = False
            for sender in sorted(s for s, stream in self._streams.items() if stream.queue):
                stream = self._streams[sender]
                while stream.queue and self._causally_ready(stream.queue[0]):
                    out.append(self._pop(sender, stream))
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

    def set_floor(self, floor: int) -> None:
        """Promises by gossip: every message at or below ``floor`` is here (it only rises)."""
        if self.floor is None or floor > self.floor:
            self.floor = floor

    def _may_deliver(self, stamp: int, message: OrderedMessage) -> bool:
        if self.floor is not None:
            return stamp <= self.floor  # stable everywhere: total and safe alike
        for clock, member in self._clocks:  # ascending: usually decided by the first one or two
            if clock >= stamp:
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

    def _pop(self, sender: int, stream: _Stream) -> OrderedMessage:
        message = stream.queue.popleft()
        stream.stamps.popleft()
        stream.delivered = message.last
        if not stream.queue:
            stream.queue, stream.stamps = _EMPTY, _EMPTY
        elif self.order is not Order.CAUSAL:
            heapq.heappush(self._heads, (stream.stamps[0], sender, stream.queue[0].first))
        return message

    # ------------------------------------------------------------------ view changes

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
            stream.stamps.pop()
        if not stream.queue:
            stream.queue, stream.stamps = _EMPTY, _EMPTY
        stream.received = max(high, stream.delivered)

    def start_at(self, member: int, seq: int) -> None:
        """A new view begins ``member``'s stream after record ``seq`` (the cut)."""
        if member not in self._streams and (seq <= 0 or self.floor is not None):
            # nothing to skip, or promises by gossip, where a stream's numbers
            # serve no promise: a member that has not sent here costs no stream
            return
        stream = self._stream(member)
        stream.received = max(stream.received, seq)
        stream.delivered = max(stream.delivered, seq)

    def drain(self) -> tuple[list[OrderedMessage], list[OrderedMessage]]:
        """End of a view: deliver everything held in the order's deterministic
        sequence without waiting for promises (total and safe: by timestamp;
        causal: what its causes allow, references past the cut clamped to it,
        since what lies beyond belongs to the next view or to nobody).
        Whatever still cannot be ordered is returned as discarded."""
        self._final = True
        if self.order is Order.CAUSAL:
            delivered = self._deliver_causal()
        else:
            delivered = []
            heads, streams = self._heads, self._streams
            while heads:
                _, sender, first = heapq.heappop(heads)
                stream = streams.get(sender)
                if stream is not None and stream.queue and stream.queue[0].first == first:
                    delivered.append(self._pop(sender, stream))
        discarded = [m for sender in sorted(self._streams) for m in self._streams[sender].queue]
        return delivered, discarded

    def take_stream(self, member: int) -> list[OrderedMessage]:
        """End of a view we leave alone: ``member``'s undelivered messages, in
        its order, out of ours (stale heads of the heap are skipped by
        ``drain`` and ``deliverable``, which check the stream's head)."""
        stream = self._streams.get(member)
        if stream is None or not stream.queue:
            return []
        taken = list(stream.queue)
        stream.delivered = max(stream.delivered, taken[-1].last)
        stream.queue, stream.stamps = _EMPTY, _EMPTY
        return taken

    def waiting_ids(self) -> list[tuple[int, int]]:
        """(sender, first record) of every message held back, by sender."""
        return [(s, m.first) for s in sorted(self._streams) for m in self._streams[s].queue]
