"""Reliable unicast between two members of a group.

Theory of operation
-------------------
Each ordered pair (sender, destination) has its own sequence numbers, so a
unicast never leaves a gap in the multicast stream that other members would
try to repair. The sender keeps every record until the destination's
cumulative ACK covers it and retransmits what is still unacknowledged after a
retransmission timeout that starts at ``rto_min``, doubles on each try, up to
``rto_max``, and starts again at ``rto_min`` after an ACK (``Config``). The
receiver delivers in order, reassembles fragments, and answers every record
with its cumulative ACK (a duplicate means our ACK was lost, so it is answered
too). Unacknowledged records per destination are capped by ``window_max``: at
the cap the application waits, as for multicast. A receiver holds at most
``window_max`` out-of-order records per source (later ones are dropped and
counted as ``beyond_window``; the sender retransmits them), and a partial
message is bounded by ``max_message`` bytes and ``reassembly_timeout``
seconds (``reassembly.py``).

A stream's numbers start after ``incarnation << 32`` of its sender (the
incarnation is in every datagram's header), as multicast streams of a
restarted node do, so a restarted sender's unicasts never reuse an id and a
receiver that still holds the old incarnation's stream starts the new one
afresh. A destination that restarted gets a new stream from us (``forget``,
called when the restart is detected): it holds nothing of the old one, and
would wait for ever for numbers we already dropped as acknowledged.

Every unicast has an outcome: delivered (the destination's ACK covers its
last record), or, when the destination leaves the view or restarts first,
``forget`` returns its id so the sender is told it was not delivered.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from .params import Params
from .reassembly import Reassembly
from ..records import MORE_FRAGMENTS, Message, Record


@dataclass(slots=True)
class _Outgoing:
    next_seq: int
    rto: float
    """The retransmission timeout, seconds: ``rto_min`` to ``rto_max``."""
    unacked: dict[int, Record] = field(default_factory=dict)
    retransmit_at: float | None = None
    messages: deque[tuple[int, int]] = field(default_factory=deque)
    """(first, last) record of each message not yet wholly acknowledged, in order."""


@dataclass(slots=True)
class _Incoming:
    base: int = 0
    """The sender's incarnation << 32: its first record is ``base + 1``."""
    contig: int = 0
    pending: dict[int, Record] = field(default_factory=dict)
    reassembly: Reassembly = field(default_factory=Reassembly)


@dataclass(frozen=True, slots=True)
class UnicastSend:
    """Records to send to ``dst``; ``retransmit`` marks repeats."""

    dst: int
    records: tuple[Record, ...]
    retransmit: bool


@dataclass(frozen=True, slots=True)
class UnicastAck:
    """Cumulative ACK for ``dst``: we hold all its unicasts to us up to ``high``."""

    dst: int
    high: int


class UnicastStreams:
    """All of one member's unicast streams in one group."""

    def __init__(self, me: int, params: Params, incarnation: int = 0) -> None:
        """``params``: ``fragment_size`` cuts messages into records;
        ``window_max`` caps the unacknowledged records per destination and
        the out-of-order ones per source; ``max_message`` and
        ``reassembly_timeout`` bound a partial message; ``rto_min`` and
        ``rto_max`` time retransmissions."""
        self.me = me
        self.base = incarnation << 32
        """Our streams' numbers start after this (see the module's docstring)."""
        self.params = params
        self._out: dict[int, _Outgoing] = {}
        self._in: dict[int, _Incoming] = {}
        self.retransmissions = 0
        self._clock = 0.0
        """The latest time a timer or send told us (for partial messages received without one)."""
        self.drops: dict[str, int] = {}
        """Records and partial messages dropped at a cap, by reason."""

    def blocked(self, dst: int) -> bool:
        out = self._out.get(dst)
        return out is not None and len(out.unacked) >= self.params.window_max

    def send(self, dst: int, payload: bytes, now: float) -> tuple[int, UnicastSend]:
        self._clock = now
        out = self._out.get(dst)
        if out is None:
            out = self._out[dst] = _Outgoing(self.base + 1, self.params.rto_min)
        size = self.params.fragment_size
        pieces = [payload[i : i + size] for i in range(0, len(payload), size)] or [b""]
        first = out.next_seq
        records = []
        for i, piece in enumerate(pieces):
            flags = MORE_FRAGMENTS if i < len(pieces) - 1 else 0
            records.append(Record(self.me, out.next_seq, (), flags, bytes(piece), 0))
            out.unacked[out.next_seq] = records[-1]
            out.next_seq += 1
        out.messages.append((first, out.next_seq - 1))
        if out.retransmit_at is None:
            out.retransmit_at = now + out.rto
        return first, UnicastSend(dst, tuple(records), retransmit=False)

    def on_records(self, src: int, records: tuple[Record, ...], now: float | None = None,
                   incarnation: int = 0) -> tuple[list[Message], UnicastAck]:
        """Accept records from ``src`` (of its ``incarnation``, from the
        datagram's header). Without ``now`` a partial message's timeout starts
        at the next timer (``next_deadline`` asks for one)."""
        base = incarnation << 32
        incoming = self._in.get(src)
        if incoming is None or incoming.base != base:
            incoming = self._in[src] = _Incoming(base, base)  # a new sender, or a new incarnation of it
        delivered: list[Message] = []
        for record in records:
            if incoming.contig < record.seq <= incoming.contig + self.params.window_max:
                incoming.pending.setdefault(record.seq, record)
            elif record.seq > incoming.contig:
                self.drops["beyond_window"] = self.drops.get("beyond_window", 0) + 1
        while incoming.contig + 1 in incoming.pending:
            incoming.contig += 1
            record = incoming.pending.pop(incoming.contig)
            done = incoming.reassembly.push(record, now, self.params.max_message, self.params.reassembly_timeout,
                                            self.drops)
            if done is not None:
                delivered.append(Message(src, done[0].seq, (), b"".join(r.payload for r in done)))
        return delivered, UnicastAck(src, incoming.contig)

    def on_ack(self, src: int, high: int) -> None:
        out = self._out.get(src)
        if out is None:
            return
        for seq in [s for s in out.unacked if s <= high]:
            del out.unacked[seq]
        messages = out.messages
        while messages and messages[0][1] <= high:
            messages.popleft()
        out.rto = self.params.rto_min
        out.retransmit_at = None if not out.unacked else out.retransmit_at

    def on_timeout(self, now: float, budget: int) -> list[UnicastSend]:
        self._clock = now
        for incoming in self._in.values():  # one entry per member of the view: a short loop
            incoming.reassembly.stamp(now, self.params.reassembly_timeout)
            incoming.reassembly.expire(now, self.drops)
        sends = []
        for dst, out in self._out.items():
            if out.retransmit_at is not None and out.retransmit_at <= now and out.unacked:
                records = tuple(out.unacked[s] for s in sorted(out.unacked)[:budget])
                self.retransmissions += len(records)
                sends.append(UnicastSend(dst, records, retransmit=True))
                out.rto = min(self.params.rto_max, out.rto * 2)
                out.retransmit_at = now + out.rto
        return sends

    def next_deadline(self) -> float | None:
        times = [o.retransmit_at for o in self._out.values() if o.retransmit_at is not None and o.unacked]
        for incoming in self._in.values():
            reassembly = incoming.reassembly
            if reassembly.unstamped():
                times.append(self._clock)  # at once: the timer stamps its deadline
            elif reassembly.fragments and reassembly.deadline is not None:
                times.append(reassembly.deadline)
        return min(times) if times else None

    def forget(self, member: int) -> list[int]:
        """A member left or restarted: its streams, both ways, are gone.
        Returns the ids (first record) of our unicasts to it that it never
        acknowledged: they were not delivered, as far as we can know."""
        out = self._out.pop(member, None)
        self._in.pop(member, None)
        return [] if out is None else [first for first, _ in out.messages]

    def buffered(self) -> int:
        return sum(len(o.unacked) for o in self._out.values()) + sum(len(i.pending) for i in self._in.values())
