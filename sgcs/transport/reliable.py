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
* **PSRM gossip.** Every ``gossip_interval`` a member that holds unstable
  records sends a digest (per sender: highest contiguous number) to one
  partner: in round r, the member ``2**k`` positions after it in the view
  (k = r mod ceil(log2 N)), so its partners are the log2 N hypercube
  targets, a partial view of O(log N) members. The partner pushes what the
  digest lacks and pulls what it lacks itself.

**ACKs and stability.** Each record carries the ACKs its sender gathered since
its previous send (a delta: only streams that advanced); these edges are the
causal graph, and they tell which members hold what (NACK targets). A
message is stable when every member holds it; ``sgcs.transport.stability``
computes that (the ACKs in small views, a dissemination all-reduce over the
digests at large N, and the promise clocks of large ordered views) and drops
stable records from the buffer. Ordered groups (``ordered``) also send an idle
member's ACKs as nulls, which become its multicast promise.

**Parts.** ``ReliableStream`` keeps the stream itself: numbering, the
buffer, FIFO advance and reassembly, piggybacked ACKs and nulls, gossip push
and pull, and the flow window. ``Repair`` (``repair.py``) times the NACKs and
answers them; ``Stability`` (``stability.py``) runs the all-reduce. What they
share (the view, the receive state per sender, the buffer and its stable
prefixes) is one ``StreamState`` (``state.py``); each part changes the fields
it owns through its own methods.

**Flow control.** The window is the number of records, from all senders, held
here and not yet stable. The send delay is ``send_delay_min`` at an empty
window and grows as ``send_delay_scale * W / (window_max - W)``; at
``window_max`` the application must wait, while control traffic (NACKs,
retransmissions, digests, nulls) goes on so the window can drain. A new view
restarts the aggregation over its own members, so a departed member's
missing records stop holding the window.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable
from dataclasses import dataclass

from ..msgtype import MsgType
from ..roster import roster_of
from .params import Params
from .reassembly import Reassembly
from ..records import (EPOCH_SHIFT, MORE_FRAGMENTS, OPTIMISTIC, Ack, Aggregate, Message, Out, OutNack, OutNull, OutRecords,
                      OutStable, Range, Record)
from .repair import Repair, stored_in
from .stability import Stability
from .state import IN_ORDER, Inbound, StreamState


SENDER_BUFFER_FACTOR = 4
"""Records of one sender held here, unstable, at most this many times
``window_max``; past it that sender's records are dropped (``sender_buffer_full``)
until stability frees room, and NACKs fetch them again later. A correct sender
stops at ``window_max`` unstable records of all senders, and our stable prefix
lags its own by a little, so only a member that ignores flow control (or a
flood under its id) reaches the cap. Out-of-order records stay below
``window_max`` of it, so the rest can always become stable: no deadlock."""

ORDERED_ACKS = 1 << 20
"""ACK entries a record of an ordered group may carry: out of reach, since a
message must list every ACK gathered before it (its causal past)."""


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
    drops: dict[str, int] | None = None
    """Records and partial messages dropped at a cap, by reason."""


class ReliableStream:
    """One member's reliable multicast in one group; a pure state machine."""

    def __init__(self, me: int, members: tuple[int, ...], params: Params, rng: random.Random, now: float,
                 first_seq: int = 1, *, ordered: bool = False) -> None:
        """``ordered``: the group delivers in causal, total or safe order. Its
        records then carry every ACK gathered before them (their causal past),
        and idle members promise by multicasting their ACKs (nulls); a FIFO
        group's carry at most ``fifo_acks``."""
        self.me = me
        self.params = params
        self.max_acks = ORDERED_ACKS if ordered else params.fifo_acks
        """ACK entries one record carries at most; the rest ride on the next."""
        self.rng = rng
        self.state = StreamState(me, first_seq)
        """What this stream's parts share (``sgcs.transport.state``)."""
        self._dirty: dict[int, int] = {}  # ACK delta since our last send (piggybacked)
        self._ack_due: dict[int, int] = {}  # streams whose sender has not yet heard our ACK
        self._ack_at: float | None = None
        self._acks_fired_at = -math.inf
        """When the promise timer last fired (``_null_delay``: the next fires no sooner after it)."""
        self._next_gossip = now + params.gossip_interval * (0.5 + rng.random())
        self._counts = dict.fromkeys(
            ("sent", "received", "duplicates", "beyond_window", "nacks", "retransmissions", "pushes", "by_nack",
             "by_gossip", "nulls", "sender_buffer_full"), 0
        )
        self.repair = Repair(me, params, rng, self._counts)
        """NACK timers, holder hints and answers (``sgcs.transport.repair``)."""
        self._drops: dict[str, int] = {}  # reassembly drops, by reason
        self._reassembling: dict[int, Inbound] = {}  # senders with a partial message (a timer each)
        self.stability = Stability(me, params, self.state, self.repair)
        """The all-reduce, stable prefixes and promises by gossip (``sgcs.transport.stability``)."""
        self._null_delay = params.ack_interval
        """How long after receiving an idle member of an ordered group promises."""
        self.promise_nulls = ordered
        """Send promises as nulls (ordered groups in small views; the group sets it per view)."""
        self.promise_covers = -1
        """With promises by nulls: a record whose timestamp is at or below this
        needs no null from us, since our last message or null in this view
        already promised as much (total order: the group sets it). -1: every
        record does (safe and causal order need the ACKs themselves)."""
        self.set_members(members)

    # ------------------------------------------------------------------ view

    def set_members(self, members: tuple[int, ...], late: tuple[int, ...] = (),
                    starts: dict[int, int] | None = None) -> None:
        """Install a new membership; rows and columns of departed members go.
        Streams of ``late`` members start at the first record we see of them
        (the join point), not at 1: their earlier records may be gone. Streams
        of ``starts`` members begin just after the given number (a view
        change's cut), and every member is known to hold them that far."""
        self.state.roster = roster_of(members).with_member(self.me)
        self.state.members, self.state.index = self.state.roster.members, self.state.roster.index
        self.repair.cut_holders = {}
        # a new view aggregates afresh: positions may move, and a member that
        # restarted under its old id no longer holds what it reported
        n = len(self.state.members)
        self._null_delay = min(self.params.ack_interval, self.params.promise_spacing * n)
        self.stability.reset_view()
        ended = [s for s in {*self.state.store, *self.state.inbound} if s not in self.state.index]
        restarted = [m for m in (starts or {}) if m in self.state.index and m != self.me]
        self.repair.left_behind = {s: self.state.store[s] for s in (*ended, *restarted) if self.state.store.get(s)}
        for sender in ended:
            self._forget_sender(sender)
        for member in late:
            if member != self.me and member in self.state.index:
                self._forget_sender(member)
                self.state.inbound[member] = Inbound(synced=False)
        for member, start in (starts or {}).items():
            if member in self.state.index:
                self._start_at(member, start)
        self.stability.collect_garbage()

    @property
    def members(self) -> tuple[int, ...]:
        return self.state.members

    @property
    def lamport(self) -> int:
        """Our Lamport clock, as the group's order last told us."""
        return self.state.lamport

    @lamport.setter
    def lamport(self, value: int) -> None:
        self.state.lamport = value

    @property
    def promise_gossip(self) -> bool:
        """Carry promise clocks in the stability all-reduce instead of nulls (the group sets it per view)."""
        return self.state.promise_gossip

    @promise_gossip.setter
    def promise_gossip(self, value: bool) -> None:
        self.state.promise_gossip = value

    @property
    def stability_cap(self) -> dict[int, int] | None:
        """During a view change: nothing past the snapshot (then the cut) becomes
        stable, since members new to the next view start there and may need it."""
        return self.state.stability_cap

    @stability_cap.setter
    def stability_cap(self, value: dict[int, int] | None) -> None:
        self.state.stability_cap = value

    def promise_floor(self) -> int:
        """See ``Stability.promise_floor``."""
        return self.stability.promise_floor()

    def on_stable(self, src: int, roster: int, entries: tuple[Ack, ...]) -> list[Out]:
        """See ``Stability.on_stable``."""
        return self.stability.on_stable(src, roster, entries)

    def _start_at(self, sender: int, start: int) -> None:
        if sender != self.me:
            self._forget_sender(sender)
            inbound = self.state.inbound[sender] = Inbound()
            inbound.contig = inbound.known_high = start
            inbound.from_cut = start > 0

    def expect(self, sender: int, high: int, now: float, holders: tuple[int, ...] = ()) -> None:
        """Records of ``sender`` up to ``high`` exist (a view change's cut):
        fetch them, from the sender or from ``holders`` in turn. The holders
        matter when the sender is gone and no ACK showed who else holds its
        records (exhaustive checker: "timer 1; send 1; drop 1->2 DATA; leave
        1; settle" - 2 asked only the departed 1, gave the cut up and installed
        a view alone, so 3 alone installed their view)."""
        if holders:
            self.repair.cut_holders[sender] = tuple(m for m in holders if m != self.me and m != sender)
        if sender == self.me or sender not in self.state.index or high <= 0:
            return
        inbound = self._inbound_of(sender)  # nothing of it reached us yet: the cut says what exists
        if high > inbound.known_high:
            inbound.synced = True
            inbound.known_high = high
            self.repair.reschedule(sender, inbound, now)

    # ------------------------------------------------------------------ sending

    def window(self) -> int:
        self.stability.collect_garbage()
        return self.state.buffered

    def send_delay(self) -> float | None:
        """Seconds to wait after the previous send; None: the window is full."""
        self.stability.collect_garbage()
        w, cap = self.state.buffered, self.params.window_max
        if w >= cap:
            return None
        return self.params.send_delay_min + self.params.send_delay_scale * w / (cap - w)

    def send(self, payload: bytes, now: float, optimistic_epoch: int | None = None,
             clock: int = 0) -> tuple[int, list[Out]]:
        """Number, buffer and multicast one message; returns its id and
        outputs. ``clock``: its timestamp, for ordered groups (0: none)."""
        size = self.params.fragment_size
        pieces = [payload[i : i + size] for i in range(0, len(payload), size)] or [b""]
        first = self.state.next_seq
        contig_before = self.state.next_seq - 1
        records = []
        for i, piece in enumerate(pieces):
            acks = self._take_acks(self.max_acks) if i == 0 else ()
            for sender, high in acks:  # the multicast reaches that sender too
                if self._ack_due.get(sender, high + 1) <= high:
                    del self._ack_due[sender]
            flags = MORE_FRAGMENTS if i < len(pieces) - 1 else 0
            if optimistic_epoch is not None:
                flags |= OPTIMISTIC | (optimistic_epoch % 64) << EPOCH_SHIFT
            records.append(tuple.__new__(Record, (self.me, self.state.next_seq, acks, flags, bytes(piece),
                                                  clock if i == 0 else 0)))
            self.state.next_seq += 1
        for record in records:
            self._buffer(record)
        self.stability.note_floors(self.me, contig_before, self.state.stable.get(self.me, 0))
        if clock:
            self.state.own_clocks.append((self.state.next_seq - 1, clock))
        self.state.gc_due = self.state.gc_due or not self.state.depth  # alone: stable at once
        self._counts["sent"] += len(records)
        return first, [OutRecords(None, tuple(records), MsgType.DATA)]

    def _take_acks(self, limit: int) -> tuple[Ack, ...]:
        """Up to ``limit`` pending ACK entries, lowest senders first; the rest
        ride on the next record. The ordered deliveries (``sgcs.ordering``)
        need a message to list every ACK gathered before it (its causal past),
        so ordered groups raise the limit out of reach (``ORDERED_ACKS``); only
        FIFO groups leave entries behind."""
        acks = tuple(sorted(self._dirty.items())[:limit])
        cap = self.state.stability_cap
        if cap is not None:  # an ACK held back stays due: it goes out in full once the change ends
            for sender, high in acks:
                if high <= cap.get(sender, 0):
                    del self._dirty[sender]
            return self._within_cap(acks)
        if len(acks) == len(self._dirty):
            self._dirty.clear()
        else:
            for sender, _ in acks:
                del self._dirty[sender]
        return acks

    def _within_cap(self, acks: Iterable[Ack]) -> tuple[Ack, ...]:
        """During a view change, acknowledge nothing past the snapshot (then the
        cut). Safe order delivers a message once every member acknowledged it;
        a member that received it only after answering a proposal does not
        deliver it in the old view (the cut was drawn from the snapshots), so
        its acknowledgement must not count: a member left out of the change
        delivered, safely in the regular view, a PUT of a replicated queue that
        nobody else ever delivered (nemesis, queue workload, seed 1581192924).
        The full ACK stays due (``_take_acks``): a later message must still
        list every record received before it, for causal order."""
        cap = self.state.stability_cap
        if cap is None:
            return tuple(acks)
        capped = ((sender, min(high, cap.get(sender, 0))) for sender, high in acks)
        return tuple((sender, high) for sender, high in capped if high > 0)

    # ------------------------------------------------------------------ receiving

    def on_records(self, src: int, records: tuple[Record, ...], kind: MsgType, now: float) -> list[Message]:
        """Accept records from ``src``; return messages now deliverable in FIFO order.
        The bookkeeping per sender (ACKs to piggyback, NACK timer, stability)
        runs once per datagram, not once per record: a bundle holds dozens."""
        delivered: list[Message] = []
        touched: dict[int, Inbound] = {}
        before: dict[int, int] = {}  # sender -> how far we held it
        index, me, covers = self.state.index, self.me, self.promise_covers
        promise = False  # a record our standing promise does not cover
        for record in records:
            sender = record.sender
            if sender == me or sender not in index:
                continue
            if sender not in before:
                before[sender] = self.state.contig_of(sender)
            inbound = self._accept(record, kind, delivered, now)
            if inbound is not None:
                touched[sender] = inbound
                promise = promise or record.clock > covers
        for sender, inbound in touched.items():
            self.stability.note_floors(sender, before[sender], self.state.stable.get(sender, 0))
            self._settle(sender, inbound, now, promise)
        return delivered

    def _accept(self, record: Record, kind: MsgType, delivered: list[Message], now: float) -> Inbound | None:
        """Take one record; returns its stream's state if it was new."""
        sender, seq = record.sender, record.seq
        inbound = self._inbound_of(sender)
        if not inbound.synced:
            inbound.synced = True
            inbound.contig = inbound.known_high = seq - 1
        contig = inbound.contig
        if seq <= contig or seq in inbound.pending:
            self._counts["duplicates"] += 1
            return None
        if seq > contig + self.params.window_max:
            self._counts["beyond_window"] += 1  # bounded memory: the sender must wait for stability
            return None
        stored = self.state.store.get(sender)
        if stored is not None and len(stored) >= SENDER_BUFFER_FACTOR * self.params.window_max:
            self._counts["sender_buffer_full"] += 1  # as if lost: NACKs fetch it once stability frees room
            return None
        self._counts["received"] += 1
        if kind is not MsgType.DATA:
            self._counts["by_gossip" if kind is MsgType.GOSSIP else "by_nack"] += 1
        if seq > inbound.known_high:
            inbound.known_high = seq
        if record.acks:
            # the record is buffered as it came, ACKs included: a FIFO record
            # carries at most ``fifo_acks`` of them, and in the simulator every
            # receiver holds the one decoded record (a copy without them cost
            # a tuple per receiver: 10,000 of them at scale)
            for acked, high in record.acks:
                self._learn_ack(sender, acked, high, now)
        flags = record.flags
        if seq == contig + 1 and not inbound.pending and inbound.reassembly is None and not flags & MORE_FRAGMENTS:
            # the common case, in order and whole: deliver without the pending table
            inbound.contig = seq
            self._buffer(record)
            delivered.append(tuple.__new__(Message, (sender, seq, record.acks, record.payload, 0,
                                                     bool(flags & OPTIMISTIC), flags >> EPOCH_SHIFT, record.clock)))
            return inbound
        if inbound.pending is IN_ORDER:
            inbound.pending = {}
        inbound.pending[seq] = record
        self._buffer(record)
        self._advance(sender, inbound, delivered, now)
        return inbound

    def _advance(self, sender: int, inbound: Inbound, delivered: list[Message], now: float) -> None:
        while inbound.contig + 1 in inbound.pending:
            inbound.contig += 1
            record = inbound.pending.pop(inbound.contig)
            if not inbound.pending:
                inbound.pending = IN_ORDER  # in order again: give the table back
            if record.flags & MORE_FRAGMENTS or inbound.reassembly is not None:
                self._fragment(sender, inbound, record, delivered, now)
            else:
                delivered.append(_reassemble((record,)))

    def _settle(self, sender: int, inbound: Inbound, now: float, promise: bool) -> None:
        """After a datagram's records of ``sender``: our ACK for it, its NACK
        timer, and its stable prefix (our own prefix bounds it: it may rise).
        ``promise``: a record needs a promise from us (``promise_covers``)."""
        self.state.gc_senders.add(sender)
        if self.state.acked is not None:
            self.stability.note_ack(sender, sender, inbound.known_high)  # a sender holds its own stream
        self._dirty.pop(sender, None)  # re-insert: the dict's order is freshness
        self._dirty[sender] = inbound.contig
        if len(self._dirty) > 4 * self.max_acks:
            # a FIFO member that seldom sends keeps only its freshest ACKs
            # (ordered groups carry them all: their limit is never reached)
            self._dirty.pop(next(iter(self._dirty)))
        if self.promise_nulls and promise:
            self._ack_due[sender] = inbound.contig
            if self._ack_at is None:
                # Leading edge: after a quiet spell promise at once (a total-order
                # message waits for it, one hop later); within ``_null_delay`` of
                # the last firing wait for its end, so a member promises at most
                # once per ``_null_delay``, and under load its own records carry
                # the ACKs first (the firing then finds nothing due).
                self._ack_at = max(now, self._acks_fired_at + self._null_delay)
        self.repair.reschedule(sender, inbound, now)

    def _fragment(self, sender: int, inbound: Inbound, record: Record, delivered: list[Message],
                  now: float) -> None:
        """A record of a fragmented message (or of the tail of a dropped one)."""
        reassembly = inbound.reassembly
        if reassembly is None:
            reassembly = inbound.reassembly = Reassembly()
        done = reassembly.push(record, now, self.params.max_message, self.params.reassembly_timeout, self._drops)
        if done is not None:
            delivered.append(_reassemble(done))
        if reassembly.fragments:
            self._reassembling[sender] = inbound
        else:
            self._reassembling.pop(sender, None)
            if reassembly.idle():
                inbound.reassembly = None

    def _expire_reassembly(self, now: float) -> None:
        for sender, inbound in list(self._reassembling.items()):
            reassembly = inbound.reassembly
            if reassembly is None or reassembly.expire(now, self._drops) or not reassembly.fragments:
                del self._reassembling[sender]

    def on_acks(self, src: int, acks: tuple[Ack, ...], now: float) -> None:
        """ACKs from a null message or a digest of member ``src``."""
        if src in self.state.index:
            for sender, high in acks:
                self._learn_ack(src, sender, high, now)

    def _learn_ack(self, member: int, sender: int, high: int, now: float) -> None:
        if sender not in self.state.index or member not in self.state.index:
            return
        if self.state.acked is not None:
            self.stability.note_ack(member, sender, high)
        if sender == self.me:
            return
        inbound = self._inbound_of(sender)
        if high <= inbound.contig:
            # the usual case (a digest lists every unstable stream, most of
            # them as far as we hold): nothing to fetch, and a member holding
            # no more than we do is no NACK target for what we will lack next
            return
        if member != sender and member != self.me:
            self.repair.hint_holder(sender, member, high)
        if inbound.synced and high > inbound.known_high:
            inbound.known_high = high  # the ACK reveals records we lack
            self.repair.reschedule(sender, inbound, now)

    # ------------------------------------------------------------------ NACK recovery

    def on_nack(self, src: int, sender: int, ranges: tuple[Range, ...], pull: bool) -> list[Out]:
        """Answer a NACK from our buffer, up to ``push_budget`` records (``Repair.answer``)."""
        return self.repair.answer(src, sender, ranges, pull, self.state.store)

    # ------------------------------------------------------------------ PSRM gossip

    def received_vector(self) -> tuple[Ack, ...]:
        """How far we hold each member's stream (our own included): a full ACK."""
        return tuple((m, self.state.contig_of(m)) for m in self.state.members if self.state.contig_of(m))

    def contig_of(self, sender: int) -> int:
        return self.state.contig_of(sender)

    def _contig_of(self, sender: int) -> int:
        if sender == self.me:
            return self.state.next_seq - 1
        inbound = self.state.inbound.get(sender)
        return inbound.contig if inbound else 0

    def on_digest(self, src: int, entries: tuple[Ack, ...], now: float,
                  aggregate: Aggregate | None = None) -> list[Out]:
        """Push what ``src`` lacks; pull what we lack from it; merge its stability gossip."""
        if src not in self.state.index:
            return []
        out: list[Out] = []
        if aggregate is not None:
            lagging, reply = self.stability.merge_aggregate(src, aggregate)
            if lagging and self.state.roster is not None:
                out.append(OutStable(src, self.state.roster.tag, lagging))
            if reply is not None:
                out.append(reply)
        budget = self.params.push_budget
        pushed: list[Record] = []
        self.stability.collect_garbage()
        index, inbounds, me = self.state.index, self.state.inbound, self.me
        quick = self.state.acked is None and not self.promise_nulls
        for sender, high in entries:
            if sender not in index:
                continue
            if quick and sender != me:
                inbound = inbounds.get(sender)
                if inbound is not None and inbound.contig == high:
                    continue  # the usual entry: we hold as much as src, so nothing to learn, push or pull
            self._learn_ack(src, sender, high, now)
            mine = self.state.contig_of(sender)
            if high < mine and len(pushed) < budget and self.params.gossip_enabled:
                pushed += stored_in(self.state.store, sender, ((high + 1, mine),), budget - len(pushed))
            elif high > mine and sender != self.me and self._inbound_of(sender).synced and self.params.gossip_enabled:
                ranges = self._inbound_of(sender).missing(self.params.nack_max_ranges)
                out.append(OutNack(src, sender, ranges, pull=True))
            if sender == src and mine and self.promise_nulls:
                out.append(OutNull(src, ((src, mine),)))  # ordered groups: a fresh promise for src
        if pushed:
            self._counts["pushes"] += len(pushed)
            out.append(OutRecords(src, tuple(pushed), MsgType.GOSSIP))
        return out

    # ------------------------------------------------------------------ timers

    def on_timeout(self, now: float) -> list[Out]:
        out = self.repair.on_timeout(now)
        if now >= self._next_gossip:
            self._next_gossip = now + self.params.gossip_interval
            self.state.round += 1
            out += self.stability.gossip(now)
        if self._ack_at is not None and now >= self._ack_at:
            due = sorted(self._ack_due.items())
            out += self._nulls(list(self._within_cap(due)) if self.state.stability_cap is not None else due, now)
            self._ack_due.clear()
            self._ack_at = None
            self._acks_fired_at = now
        if self._reassembling:
            self._expire_reassembly(now)
        self.stability.collect_garbage()
        return out

    def follow_rounds(self, at: float, now: float) -> None:
        """Hold our next gossip round at ``at``, the node's failure-detector
        round, when that is due within one interval: one timer for both, not
        two (a timer event per node per round was a tenth of a large
        simulation's events). A stream on its own keeps its own phase."""
        if now < at <= now + self.params.gossip_interval:
            self._next_gossip = at

    def _nulls(self, acks: list[Ack], now: float) -> list[Out]:
        self._counts["nulls"] += len(acks)
        return [OutNull(sender, ((sender, high),)) for sender, high in acks]

    def next_deadline(self) -> float | None:
        if not self.repair.nacking and not self._reassembling:  # the usual case: the driver asks after every event
            busy = self.state.buffered or self.stability.gossiping() or self.state.promise_gossip
            gossip = self._next_gossip if busy else None
            ack = self._ack_at
            if gossip is None or ack is None:
                return ack if gossip is None else gossip
            return ack if ack < gossip else gossip
        deadlines = self.repair.deadlines()
        if self.state.buffered or self.stability.gossiping() or self.state.promise_gossip:
            deadlines.append(self._next_gossip)  # lately retired: the partners see every digest number
        if self._ack_at is not None:
            deadlines.append(self._ack_at)
        deadlines += [i.reassembly.deadline for i in self._reassembling.values()
                      if i.reassembly is not None and i.reassembly.deadline is not None]
        return min(deadlines) if deadlines else None

    # ------------------------------------------------------------------ stability

    def stable(self, sender: int) -> int:
        """The highest record of ``sender`` collected here as stable (0: none);
        for inspection (``benchmarks/stability_rounds.py``), not the protocol."""
        return self.state.stable.get(sender, 0)

    def _buffer(self, record: Record) -> None:
        sender = record.sender
        if record.seq > self.state.stable.get(sender, 0):
            stored = self.state.store.get(sender)
            if stored is None:
                stored = self.state.store[sender] = {}
                self.state.gc_senders.add(sender)  # a new stream: collect it once its floor rises
            stored[record.seq] = record
            self.state.buffered += 1
            if self.state.buffered > self.state.peak:
                self.state.peak = self.state.buffered

    def _forget_sender(self, sender: int) -> None:
        self.state.buffered -= len(self.state.store.pop(sender, {}))
        self.state.inbound.pop(sender, None)
        self._reassembling.pop(sender, None)
        self.state.stable.pop(sender, None)
        self._dirty.pop(sender, None)
        self.stability.forget(sender)
        self.repair.forget(sender)

    def _inbound_of(self, sender: int) -> Inbound:
        inbound = self.state.inbound.get(sender)
        if inbound is None:
            inbound = self.state.inbound[sender] = Inbound()
        return inbound

    def statistics(self) -> StreamStatistics:
        c = self._counts
        return StreamStatistics(
            records_sent=c["sent"], records_received=c["received"], duplicates=c["duplicates"],
            nacks_sent=c["nacks"], retransmissions=c["retransmissions"], gossip_pushes=c["pushes"],
            repaired_by_nack=c["by_nack"], repaired_by_gossip=c["by_gossip"], buffered=self.state.buffered,
            peak_buffered=self.state.peak, window=self.state.buffered, drops=self.drops(),
        )

    def drops(self) -> dict[str, int]:
        """Records and partial messages dropped at a cap, by reason (non-zero only)."""
        counts = {"beyond_window": self._counts["beyond_window"],
                  "sender_buffer_full": self._counts["sender_buffer_full"], **self._drops}
        return {reason: n for reason, n in counts.items() if n}


def _reassemble(fragments: list[Record] | tuple[Record, ...]) -> Message:
    first = fragments[0]
    optimistic, tag = bool(first.flags & OPTIMISTIC), first.flags >> EPOCH_SHIFT
    if len(fragments) == 1:
        return tuple.__new__(Message, (first.sender, first.seq, first.acks, first.payload, 0, optimistic, tag,
                                       first.clock))
    payload = b"".join(r.payload for r in fragments)
    return Message(first.sender, first.seq, first.acks, payload, fragments[-1].seq, optimistic, tag, first.clock)
