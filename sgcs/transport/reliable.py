"""Reliable multicast stream of one group on one member (SGCS paper, 3.1 to 3.3).

Theory of operation
-------------------
Every application message is cut into records numbered 1, 2, 3... in its
sender's stream and multicast once, unreliably (PSRM's first step). Three
mechanisms then make delivery exactly-once and FIFO per sender:

* **Loss detection.** A receiver learns that record (s, n) exists from a gap
  (a higher number from s arrived), from a piggybacked ACK (a record that ACKs
  (s, n) reveals its loss: section 3.2) or from a gossip digest.
* **NACK recovery.** A missing range is requested from a holder: first the
  sender, then any member known to hold it (its ACKs said so). One NACK timer
  per sender, with a jittered first delay and exponential backoff, keeps
  request storms down; any holder answers from its buffer.
* **PSRM gossip.** Every ``gossip_interval`` a member sends a digest (per
  sender: highest contiguous number) to one partner drawn from a partial view
  of about log2(N) members, re-sampled every ``shuffle_rounds`` rounds. The
  partner pushes what the digest lacks and pulls what it lacks itself. We use
  a periodically re-sampled random subset rather than SCAMP: every member holds
  the full view anyway (virtual synchrony needs it), so a decentralised
  subscription protocol would add traffic and buy nothing.

**ACKs and stability.** Each record carries the ACKs its sender gathered since
its previous send (a delta: only streams that advanced); these edges are the
causal graph. An idle member sends its ACK for a stream to that stream's
sender alone (a unicast null message, ``ack_interval`` after the stream
advanced), so an ACK costs one reception instead of N. A member keeps only
what it needs, O(N) and not O(N²): the ACK column of its *own* stream (the
highest contiguous number each member is known to have), whose minimum is its
stable prefix; it announces that prefix in one small multicast (at most once
per ``ack_interval``), and every buffer then drops those records. Of other
streams it keeps the announced stable prefix, a few holder hints per stream
(members whose ACKs showed they hold it: NACK targets), and, for members new
to the view, their own ACKs, because an announcer still counting an older
view does not vouch for them. A lost ACK
would hold stability back, so every ``10 * ack_interval`` a sender whose
older records are still unstable polls exactly the members whose ACKs it
lacks (its digest, sent to each alone); they answer with their ACK and pull
what they miss. Digests carry ACKs too, and a partner answers a digest whose
streams it knows to be stable with a stability reply.

**Flow control.** The window is the number of records, from all senders, held
here and not yet stable. The send delay is ``send_delay_min`` at an empty
window and grows as ``send_delay_scale * W / (window_max - W)``; at
``window_max`` the application must wait, while control traffic (NACKs,
retransmissions, digests, nulls) goes on so the window can drain. Removing a
member from the view removes its ACK, so its missing ACKs stop holding the
window.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import numpy as np

from ..membership.roster import Roster, roster_of
from .records import EPOCH_SHIFT, MORE_FRAGMENTS, OPTIMISTIC, Ack, Message, Out, OutDigest, OutNack, OutNull, OutRecords, OutStable, Range, Record


HOLDER_HINTS = 8
"""Members remembered per stream as known holders (NACK targets besides the sender)."""

MISSING_SCAN = 65_536
"""Sequence numbers examined past the contiguous prefix when listing gaps, so a
member that ACKs an absurd number cannot make us loop."""


@dataclass(frozen=True, slots=True)
class TransportParams:
    """Timing and size knobs, all in seconds, records or bytes."""

    gossip_interval: float = 0.1
    nack_delay: float = 0.01
    """First NACK after a loss is detected: long enough for reordering to fill the gap."""
    nack_backoff_max: float = 1.0
    ack_interval: float = 0.1
    """An idle member multicasts its new ACKs after this long without a send."""
    window_max: int = 4_096
    send_delay_min: float = 0.0
    send_delay_scale: float = 0.001
    fragment_size: int = 1_200
    """Payload bytes per record."""
    max_message: int = 16 * 1024 * 1024
    shuffle_rounds: int = 10
    """Gossip rounds between re-samplings of the partial view."""
    push_budget: int = 64
    """Records answered per NACK or pushed per digest entry set."""
    digest_max_entries: int = 64
    nack_max_ranges: int = 16
    max_acks: int = 16
    """ACK entries piggybacked on one record; the rest wait for the next send."""
    nack_enabled: bool = True
    gossip_enabled: bool = True
    flush_delay: float = 0.0
    max_datagram: int = 1_400


@dataclass(frozen=True, slots=True)
class StreamStatistics:
    records_sent: int
    records_received: int
    duplicates: int
    nacks_sent: int
    retransmissions: int
    gossip_pushes: int
    repaired_by_nack: int
    repaired_by_gossip: int
    buffered: int
    peak_buffered: int
    window: int


class _Inbound:
    """Receive state of one sender's stream."""

    __slots__ = ("contig", "pending", "known_high", "nack_at", "nack_tries", "fragments", "synced")

    def __init__(self, synced: bool = True) -> None:
        self.synced = synced
        """False: we joined after this stream began; it starts at the first record seen."""
        self.contig = 0
        self.pending: dict[int, Record] = {}
        self.known_high = 0
        self.nack_at: float | None = None
        self.nack_tries = 0
        self.fragments: list[Record] = []

    def missing(self, limit: int) -> tuple[Range, ...]:
        """Gaps between ``contig`` and ``known_high``, at most ``limit`` ranges."""
        ranges: list[Range] = []
        start = None
        high = min(self.known_high, self.contig + MISSING_SCAN)
        for seq in range(self.contig + 1, high + 1):
            if seq not in self.pending:
                start = seq if start is None else start
            elif start is not None:
                ranges.append((start, seq - 1))
                start = None
                if len(ranges) == limit:
                    return tuple(ranges)
        if start is not None:
            ranges.append((start, high))
        return tuple(ranges[:limit])


class ReliableStream:
    """One member's reliable multicast in one group; a pure state machine."""

    def __init__(self, me: int, members: tuple[int, ...], params: TransportParams, rng: random.Random, now: float,
                 first_seq: int = 1) -> None:
        self.me = me
        self.params = params
        self.rng = rng
        self._next_seq = first_seq
        self._inbound: dict[int, _Inbound] = {}
        self._nacking: dict[int, _Inbound] = {}  # senders with a NACK timer running
        self._store: dict[int, dict[int, Record]] = {}  # sender -> seq -> record, unstable only
        self._stable: dict[int, int] = {}
        self._buffered = 0
        self._dirty: dict[int, int] = {}  # ACK delta since our last send (piggybacked)
        self._ack_due: dict[int, int] = {}  # streams whose sender has not yet heard our ACK
        self._ack_at: float | None = None
        self._poll_target = 0  # our last record when we last polled laggards
        self._refresh_at = now + 10 * params.ack_interval
        self._announced = 0
        self._announce_at: float | None = None
        self._next_gossip = now + params.gossip_interval * (0.5 + rng.random())
        self._round = 0
        self._partial_view: list[int] = []
        self._counts = dict.fromkeys(
            ("sent", "received", "duplicates", "beyond_window", "nacks", "retransmissions", "pushes", "by_nack",
             "by_gossip", "peak", "nulls", "polls"), 0
        )
        self._gc_due = False
        self._last_announce = -1.0
        self.members: tuple[int, ...] = ()
        self._index: dict[int, int] = {}
        self._roster: Roster | None = None
        self._own_acks: np.ndarray | None = None
        """ACK of each member (by ``_index``) for our own stream; None until we send."""
        self._announced_by: dict[int, int] = {}  # sender -> stable prefix it announced (clamped)
        self._holders: dict[int, dict[int, int]] = {}  # sender -> member -> highest it holds
        self._newcomer_acks: dict[int, dict[int, int]] = {}  # member new to the view -> sender -> high
        self.stability_cap: dict[int, int] | None = None
        """During a view change: nothing past the snapshot (then the cut) becomes
        stable, since members new to the next view start there and may need it."""
        self.set_members(members)

    # ------------------------------------------------------------------ view

    def set_members(self, members: tuple[int, ...], late: tuple[int, ...] = (),
                    starts: dict[int, int] | None = None) -> None:
        """Install a new membership; rows and columns of departed members go.
        Streams of ``late`` members start at the first record we see of them
        (the join point), not at 1: their earlier records may be gone. Streams
        of ``starts`` members begin just after the given number (a view
        change's cut), and every member is known to hold them that far."""
        old_roster = self._roster
        self._roster = roster_of(members).with_member(self.me)
        self.members, self._index = self._roster.members, self._roster.index
        self._own_acks = self._remap_own_acks(old_roster)
        self._partial_view = []
        self._gc_due = True
        for sender in [s for s in {*self._store, *self._inbound} if s not in self._index]:
            self._forget_sender(sender)
        for member in late:
            if member != self.me and member in self._index:
                self._forget_sender(member)
                self._inbound[member] = _Inbound(synced=False)
        for member, start in (starts or {}).items():
            if member in self._index:
                self._start_at(member, start)
        newcomers = {m for m in (*(starts or ()), *late) if m in self._index and m != self.me}
        self._newcomer_acks = {m: {} for m in newcomers}
        self._collect_garbage()

    def _remap_own_acks(self, old: Roster | None) -> np.ndarray | None:
        """Our stream's ACK column in the new view's positions; None until we
        first send, so that a member that never sends holds no O(N) column."""
        if self._own_acks is None or old is self._roster:
            return self._own_acks
        own = np.zeros(len(self.members), dtype=np.int64)
        assert old is not None
        pos = np.minimum(np.searchsorted(old.ids, self._roster.ids), len(old.ids) - 1)
        kept = old.ids[pos] == self._roster.ids
        own[kept] = self._own_acks[pos[kept]]
        own[self._index[self.me]] = self._next_seq - 1
        return own

    def _start_at(self, sender: int, start: int) -> None:
        if sender != self.me:
            self._forget_sender(sender)
            inbound = self._inbound[sender] = _Inbound()
            inbound.contig = inbound.known_high = start

    def raise_floors(self, cut: dict[int, int], newcomers: tuple[int, ...]) -> None:
        """Members new to the view start every stream after the view's cut:
        they will never ask for what precedes it."""
        rows = [self._index[m] for m in newcomers if m in self._index]
        if rows and cut.get(self.me) and self._own_acks is not None:
            self._own_acks[rows] = np.maximum(self._own_acks[rows], cut[self.me])
        for member in newcomers:
            acks = self._newcomer_acks.get(member)
            if acks is not None:
                for sender, high in cut.items():
                    if high > acks.get(sender, 0):
                        acks[sender] = high
        self._gc_due = True

    def expect(self, sender: int, high: int, now: float) -> None:
        """Records of ``sender`` up to ``high`` exist (a view change's cut): fetch them."""
        inbound = self._inbound.get(sender)
        if sender != self.me and sender in self._index and inbound is not None and high > inbound.known_high:
            inbound.synced = True
            inbound.known_high = high
            self._reschedule_nack(sender, inbound, now)

    # ------------------------------------------------------------------ sending

    def window(self) -> int:
        self._collect_garbage()
        return self._buffered

    def send_delay(self) -> float | None:
        """Seconds to wait after the previous send; None: the window is full."""
        self._collect_garbage()
        w, cap = self._buffered, self.params.window_max
        if w >= cap:
            return None
        return self.params.send_delay_min + self.params.send_delay_scale * w / (cap - w)

    def send(self, payload: bytes, now: float, optimistic_epoch: int | None = None) -> tuple[int, list[Out]]:
        """Number, buffer and multicast one message; returns its id and outputs."""
        size = self.params.fragment_size
        pieces = [payload[i : i + size] for i in range(0, len(payload), size)] or [b""]
        first = self._next_seq
        records = []
        for i, piece in enumerate(pieces):
            acks = self._take_acks(self.params.max_acks) if i == 0 else ()
            for sender, high in acks:  # the multicast reaches that sender too
                if self._ack_due.get(sender, high + 1) <= high:
                    del self._ack_due[sender]
            flags = MORE_FRAGMENTS if i < len(pieces) - 1 else 0
            if optimistic_epoch is not None:
                flags |= OPTIMISTIC | (optimistic_epoch % 64) << EPOCH_SHIFT
            records.append(Record(self.me, self._next_seq, acks, flags, bytes(piece)))
            self._next_seq += 1
        for record in records:
            self._buffer(record)
        if self._own_acks is None:
            self._own_acks = np.zeros(len(self.members), dtype=np.int64)
        self._own_acks[self._index[self.me]] = self._next_seq - 1
        self._gc_due = self._gc_due or len(self.members) == 1
        self._counts["sent"] += len(records)
        return first, [OutRecords(None, tuple(records), "data")]

    def _take_acks(self, limit: int) -> tuple[Ack, ...]:
        """Up to ``limit`` pending ACK entries, lowest senders first; the rest
        ride on the next record. Causal and total order (ordering issue) need a
        message to list every ACK gathered before it: they must not leave
        entries behind (e.g. send an ACK-only record first when over the cap)."""
        acks = tuple(sorted(self._dirty.items())[:limit])
        if len(acks) == len(self._dirty):
            self._dirty.clear()
        else:
            for sender, _ in acks:
                del self._dirty[sender]
        return acks

    # ------------------------------------------------------------------ receiving

    def on_records(self, src: int, records: tuple[Record, ...], kind: str, now: float) -> list[Message]:
        """Accept records from ``src``; return messages now deliverable in FIFO order."""
        delivered: list[Message] = []
        for record in records:
            if record.sender == self.me or record.sender not in self._index:
                continue
            if record.sender in self._newcomer_acks:
                self._set_ack(record.sender, record.sender, record.seq)  # a sender holds its own records
            self._accept(record, kind, delivered, now)
        return delivered

    def _accept(self, record: Record, kind: str, delivered: list[Message], now: float) -> None:
        inbound = self._inbound_of(record.sender)
        if not inbound.synced:
            inbound.synced = True
            inbound.contig = inbound.known_high = record.seq - 1
        if record.seq <= inbound.contig or record.seq in inbound.pending:
            self._counts["duplicates"] += 1
            return
        if record.seq > inbound.contig + self.params.window_max:
            self._counts["beyond_window"] += 1  # bounded memory: the sender must wait for stability
            return
        self._counts["received"] += 1
        if kind != "data":
            self._counts["by_gossip" if kind == "gossip" else "by_nack"] += 1
        inbound.known_high = max(inbound.known_high, record.seq)
        inbound.pending[record.seq] = record
        self._buffer(record)
        for sender, high in record.acks:
            self._learn_ack(record.sender, sender, high, now)
        self._advance(record.sender, inbound, delivered, now)

    def _advance(self, sender: int, inbound: _Inbound, delivered: list[Message], now: float) -> None:
        while inbound.contig + 1 in inbound.pending:
            inbound.contig += 1
            record = inbound.pending.pop(inbound.contig)
            inbound.fragments.append(record)
            if not record.flags & MORE_FRAGMENTS:
                delivered.append(_reassemble(inbound.fragments))
                inbound.fragments = []
        self._dirty[sender] = inbound.contig
        self._ack_due[sender] = inbound.contig
        if self._ack_at is None:
            self._ack_at = now + self.params.ack_interval
        self._reschedule_nack(sender, inbound, now)

    def on_acks(self, src: int, acks: tuple[Ack, ...], now: float) -> None:
        """ACKs from a null message or a digest of member ``src``."""
        if src in self._index:
            for sender, high in acks:
                self._learn_ack(src, sender, high, now)

    def _learn_ack(self, member: int, sender: int, high: int, now: float) -> None:
        if sender not in self._index or member not in self._index:
            return
        self._set_ack(member, sender, high)
        if sender != self.me:
            inbound = self._inbound_of(sender)
            if inbound.synced and high > inbound.known_high:
                inbound.known_high = high  # the ACK reveals records we lack
                self._reschedule_nack(sender, inbound, now)

    def _set_ack(self, member: int, sender: int, high: int) -> None:
        """``member`` holds ``sender``'s stream up to ``high``."""
        if sender == self.me:
            if self._own_acks is None:
                return  # we have sent nothing in this incarnation
            i = self._index[member]
            old = self._own_acks.item(i)  # a Python int: numpy scalars compare slowly
            if high > old:
                self._own_acks[i] = high
                # Only an ACK at or below the stable floor can raise the floor:
                # skip the collection (a column minimum) otherwise.
                self._gc_due = self._gc_due or old <= self._stable.get(sender, 0)
            return
        newcomer = self._newcomer_acks.get(member)
        if newcomer is not None and high > newcomer.get(sender, 0):
            newcomer[sender] = high
            self._gc_due = True
        if member != sender:
            self._hint_holder(sender, member, high)

    def _hint_holder(self, sender: int, member: int, high: int) -> None:
        """Remember a few members known to hold ``sender``'s stream: the
        highest holders, since they can answer the most NACKs."""
        hints = self._holders.setdefault(sender, {})
        if high > hints.get(member, 0):
            hints[member] = high
            if len(hints) > HOLDER_HINTS:
                del hints[min(hints, key=hints.__getitem__)]

    # ------------------------------------------------------------------ NACK recovery

    def _reschedule_nack(self, sender: int, inbound: _Inbound, now: float) -> None:
        if inbound.known_high <= inbound.contig:
            inbound.nack_at, inbound.nack_tries = None, 0
            self._nacking.pop(sender, None)
        elif inbound.nack_at is None and self.params.nack_enabled:
            inbound.nack_at = now + self.params.nack_delay * (0.5 + self.rng.random())
            self._nacking[sender] = inbound

    def _nack_due(self, sender: int, inbound: _Inbound, now: float) -> Out | None:
        ranges = inbound.missing(self.params.nack_max_ranges)
        if not ranges:
            inbound.nack_at = None
            self._nacking.pop(sender, None)
            return None
        target = self._holder_for(sender, ranges[0][0], inbound.nack_tries)
        backoff = min(self.params.nack_backoff_max, self.params.nack_delay * 2 ** (inbound.nack_tries + 1))
        inbound.nack_tries += 1
        inbound.nack_at = now + backoff * (0.5 + self.rng.random())
        if target is None:
            return None
        self._counts["nacks"] += 1
        return OutNack(target, sender, ranges, pull=False)

    def _holder_for(self, sender: int, seq: int, tries: int) -> int | None:
        """The sender first; then any member whose ACKs show it holds ``seq``."""
        if sender == self.me:
            return None
        holders = [m for m, high in self._holders.get(sender, {}).items() if high >= seq and m != self.me]
        if tries == 0 or not holders:
            return sender
        return self.rng.choice(holders)

    def on_nack(self, src: int, sender: int, ranges: tuple[Range, ...], pull: bool) -> list[Out]:
        """Answer a NACK from our buffer, up to ``push_budget`` records."""
        records = self._stored_in(sender, ranges, self.params.push_budget)
        if not records:
            return []
        kind = "gossip" if pull else "retransmit"
        self._counts["pushes" if pull else "retransmissions"] += len(records)
        return [OutRecords(src, tuple(records), kind)]

    def _stored_in(self, sender: int, ranges: tuple[Range, ...], budget: int) -> list[Record]:
        stored = self._store.get(sender, {})
        found: list[Record] = []
        for low, high in ranges:
            for seq in range(low, min(high, low + budget) + 1):
                record = stored.get(seq)
                if record is not None:
                    found.append(record)
                    if len(found) == budget:
                        return found
        return found

    # ------------------------------------------------------------------ PSRM gossip

    def _digest(self) -> tuple[Ack, ...]:
        """Streams with records not yet stable, rotating under a size cap."""
        # streams with records held here and not yet stable: only they need repair
        senders = sorted(s for s, stored in self._store.items() if stored and s in self._index)
        cap = self.params.digest_max_entries
        if len(senders) > cap:
            start = (self._round * cap) % len(senders)
            senders = (senders[start:] + senders[:start])[:cap]
        return tuple((s, self._contig_of(s)) for s in senders)

    def received_vector(self) -> tuple[Ack, ...]:
        """How far we hold each member's stream (our own included): a full ACK."""
        return tuple((m, self._contig_of(m)) for m in self.members if self._contig_of(m))

    def contig_of(self, sender: int) -> int:
        return self._contig_of(sender)

    def _contig_of(self, sender: int) -> int:
        if sender == self.me:
            return self._next_seq - 1
        inbound = self._inbound.get(sender)
        return inbound.contig if inbound else 0

    def _partner(self) -> int | None:
        n = len(self.members)
        if n < 2:
            return None
        if not self._partial_view or self._round % self.params.shuffle_rounds == 0:
            # rejection sampling: O(log N) per shuffle, not a copy of the view
            size = min(n - 1, math.ceil(math.log2(n)) + 1)
            view: dict[int, None] = {}
            while len(view) < size:
                member = self.members[self.rng.randrange(n)]
                if member != self.me:
                    view[member] = None
            self._partial_view = list(view)
        return self.rng.choice(self._partial_view)

    def on_digest(self, src: int, entries: tuple[Ack, ...], now: float) -> list[Out]:
        """Push what ``src`` lacks; pull what we lack from it."""
        if src not in self._index:
            return []
        out: list[Out] = []
        budget = self.params.push_budget
        pushed: list[Record] = []
        stable: list[Ack] = []
        self._collect_garbage()
        for sender, high in entries:
            if sender not in self._index:
                continue
            self._learn_ack(src, sender, high, now)
            if self._stable.get(sender, 0) >= high > 0:
                stable.append((sender, self._stable[sender]))  # src lags on stability: tell it
            mine = self._contig_of(sender)
            if high < mine and len(pushed) < budget:
                pushed += self._stored_in(sender, ((high + 1, mine),), budget - len(pushed))
            elif high > mine and sender != self.me and self._inbound_of(sender).synced and self.params.gossip_enabled:
                ranges = self._inbound_of(sender).missing(self.params.nack_max_ranges)
                out.append(OutNack(src, sender, ranges, pull=True))
            if sender == src and mine:
                out.append(OutNull(src, ((src, mine),)))  # a poll: the sender wants our ACK
        if pushed:
            self._counts["pushes"] += len(pushed)
            out.append(OutRecords(src, tuple(pushed), "gossip"))
        if stable:
            out.append(OutStable(src, tuple(stable)))
        return out

    def on_stable(self, entries: tuple[Ack, ...]) -> None:
        """Every member has received ``sender`` up to ``high``: raise its column.
        Never above our own prefix, which a correct announcer cannot exceed."""
        for sender, high in entries:
            if sender in self._index and sender != self.me:
                high = min(high, self._contig_of(sender))
                if self.stability_cap is not None:
                    high = min(high, self.stability_cap.get(sender, 0))
                if high > self._announced_by.get(sender, 0):
                    self._announced_by[sender] = high
                    self._gc_due = True

    # ------------------------------------------------------------------ timers

    def on_timeout(self, now: float) -> list[Out]:
        out: list[Out] = []
        for sender, inbound in list(self._nacking.items()):
            if inbound.nack_at is not None and inbound.nack_at <= now:
                nack = self._nack_due(sender, inbound, now)
                if nack is not None:
                    out.append(nack)
        if self.params.gossip_enabled and now >= self._next_gossip:
            self._next_gossip = now + self.params.gossip_interval
            self._round += 1
            entries = self._digest() if self._buffered else ()
            partner = self._partner() if entries else None
            if partner is not None:
                out.append(OutDigest(partner, entries))
        if self._ack_at is not None and now >= self._ack_at:
            out += self._nulls(sorted(self._ack_due.items()), now)
            self._ack_due.clear()
            self._ack_at = None
        if now >= self._refresh_at:
            self._refresh_at = now + 10 * self.params.ack_interval
            out += self._poll_laggards()
        self._collect_garbage()
        if self._announce_at is not None and now >= self._announce_at:
            out.append(self._announce(now))
        return out

    def _nulls(self, acks: list[Ack], now: float) -> list[Out]:
        self._counts["nulls"] += len(acks)
        return [OutNull(sender, ((sender, high),)) for sender, high in acks]

    def _poll_laggards(self) -> list[Out]:
        """Our records sent a refresh interval ago are still unstable: send our
        digest to each member whose ACK for them we lack (its ACK, or our
        record, was lost). It answers with its ACK and pulls what it misses."""
        target, self._poll_target = self._poll_target, self._next_seq - 1
        if target <= self._stable.get(self.me, 0):
            return []
        assert self._own_acks is not None  # we have sent: target > 0
        lagging = np.flatnonzero(self._own_acks < target)
        laggards = [self.members[i] for i in lagging.tolist() if self.members[i] != self.me]
        self._counts["polls"] += len(laggards)
        entry = ((self.me, self._next_seq - 1),)
        return [OutDigest(m, entry) for m in laggards]

    def _announce(self, now: float) -> OutStable:
        """Multicast our own stream's stable prefix, at most once per ack_interval."""
        self._announced = self._stable.get(self.me, 0)
        self._announce_at = None
        self._last_announce = now
        return OutStable(None, ((self.me, self._announced),))

    def next_deadline(self) -> float | None:
        deadlines = [i.nack_at for i in self._nacking.values() if i.nack_at is not None]
        if self.params.gossip_enabled and self._buffered:
            deadlines.append(self._next_gossip)
        for due in (self._ack_at, self._announce_at):
            if due is not None:
                deadlines.append(due)
        if self._stable.get(self.me, 0) < self._next_seq - 1 and len(self.members) > 1:
            deadlines.append(self._refresh_at)
        return min(deadlines) if deadlines else None

    # ------------------------------------------------------------------ stability

    def stable(self, sender: int) -> int:
        return self._stable.get(sender, 0)

    def _collect_garbage(self) -> None:
        if not self._gc_due:
            return
        self._gc_due = False
        cap = self.stability_cap
        for sender, stored in self._store.items():
            stable = self._floor(sender)
            if cap is not None:
                stable = min(stable, cap.get(sender, 0))
            previous = self._stable.get(sender, 0)
            if stable > previous:
                span = range(previous + 1, stable + 1) if stable - previous <= len(stored) else sorted(stored)
                for seq in span:
                    if seq <= stable and stored.pop(seq, None) is not None:
                        self._buffered -= 1
                self._stable[sender] = stable
        if self._stable.get(self.me, 0) > self._announced and self._announce_at is None:
            self._announce_at = self._last_announce + self.params.ack_interval

    def _floor(self, sender: int) -> int:
        """The highest number every member of the view is known to hold."""
        if sender == self.me:
            return 0 if self._own_acks is None else int(self._own_acks.min())
        floor = self._announced_by.get(sender, 0)
        for acks in self._newcomer_acks.values():  # the announcer may not have counted them
            floor = min(floor, acks.get(sender, 0))
        return floor

    def _buffer(self, record: Record) -> None:
        if record.seq > self._stable.get(record.sender, 0):
            if record.sender not in self._store:
                self._gc_due = True  # a new stream: its floor was not followed by _set_ack
            self._store.setdefault(record.sender, {})[record.seq] = record
            self._buffered += 1
            self._counts["peak"] = max(self._counts["peak"], self._buffered)

    def _forget_sender(self, sender: int) -> None:
        self._buffered -= len(self._store.pop(sender, {}))
        self._inbound.pop(sender, None)
        self._nacking.pop(sender, None)
        self._stable.pop(sender, None)
        self._dirty.pop(sender, None)
        self._announced_by.pop(sender, None)
        self._holders.pop(sender, None)

    def _inbound_of(self, sender: int) -> _Inbound:
        inbound = self._inbound.get(sender)
        if inbound is None:
            inbound = self._inbound[sender] = _Inbound()
        return inbound

    def statistics(self) -> StreamStatistics:
        c = self._counts
        return StreamStatistics(
            records_sent=c["sent"], records_received=c["received"], duplicates=c["duplicates"],
            nacks_sent=c["nacks"], retransmissions=c["retransmissions"], gossip_pushes=c["pushes"],
            repaired_by_nack=c["by_nack"], repaired_by_gossip=c["by_gossip"], buffered=self._buffered,
            peak_buffered=c["peak"], window=self._buffered,
        )


def _reassemble(fragments: list[Record]) -> Message:
    first = fragments[0]
    optimistic, tag = bool(first.flags & OPTIMISTIC), first.flags >> EPOCH_SHIFT
    if len(fragments) == 1:
        return Message(first.sender, first.seq, first.acks, first.payload, 0, optimistic, tag)
    payload = b"".join(r.payload for r in fragments)
    return Message(first.sender, first.seq, first.acks, payload, fragments[-1].seq, optimistic, tag)
