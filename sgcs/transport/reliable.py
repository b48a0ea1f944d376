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
message is stable when every member holds it, and at large N the ACKs of
every member cannot all reach anyone: 10,000 receivers would each unicast an
ACK per message. Instead the digests aggregate them (a dissemination
all-reduce over the hypercube schedule, as in Hensgen, Finkel and Manber's
dissemination barrier): the digest of level k carries, per sender, the
lowest number held by the 2**k members ending at its sender; the receiver
keeps the latest such value per level. The minimum of our own numbers and
the values of levels 0..k-1 covers 2**k members; all ceil(log2 N) levels
cover the view, and that minimum is the stable prefix: every buffer drops it.
Numbers only grow and stored values are older, so the result is a lower
bound: never too early, only late. Values are merged only between members
with the same roster (hash of the member list), so a view change restarts
the aggregation. A newcomer's copy of a stream starts at the view change's
cut, with no record of it: the first floor of it that it hears draws it into
that stream's all-reduce, where it stays, with what it holds, until the
stream is stable that far.

**Deltas.** A digest to the partner of level k lists only the senders whose
floor at level k changed since the previous digest there, with how far we
hold each (the repair entries): a value is sent about once per level, not
once per round for as long as it is unstable (a member of a 10,000-member
group holds hundreds of streams unstable, and listing them all twice a
round was half of a simulation's time). Digests are numbered per level; a
partner that sees a number skipped (a lost digest) asks (``RESYNC``) and
gets a full digest, every sender with its floor, as after a view change.
A sender's stability state retires once its last changes went out; the
round's own level keeps going out, even empty, while anything is unstable
or lately stable, so a partner notices a lost last change. A
stable prefix is told directly (``OutStable``) only within one roster: to
a predecessor whose floors lag what we know stable, or to a member that
asks because its own messages stayed unstable for two cycles; computed over
another view it would vouch for members that never had those records.
Ordered groups (``ordered``) also send an idle member's ACKs as nulls,
which become its multicast promise.

**Promises by gossip** (``promise_gossip``: total and safe order in large
views). Instead of every member multicasting a null for every message (O(N)
datagrams, each received by N), the all-reduce carries one more value per
level: the lowest *promise clock* of the 2**k members. A member vouches for
``min(its Lamport clock, timestamp of its oldest own message not yet stable
- 1)``: its later messages carry larger timestamps, and its earlier ones at
or below that value are held by every member. The minimum over the view,
``promise_floor``, is then a timestamp at or below which every message that
will ever exist is already held here: the order delivers up to it. It costs
two all-reduces (the message becomes stable, then its sender's clock
climbs), about 2 ceil(log2 N) gossip rounds, and no datagram per message.
While the values move, every changed level goes out each round; every
fourth round the round's level goes out anyway, so a lost update is
repeated.

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
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from ..membership.roster import Roster, roster_of
from .params import Params
from .reassembly import Reassembly
from .records import (EPOCH_SHIFT, FULL, MORE_FRAGMENTS, OPTIMISTIC, RESYNC, SEQ_MODULUS, Ack, Aggregate, Message, Out,
                      OutDigest, OutNack, OutNull, OutRecords, OutStable, Range, Record)


AGGREGATE_MAX = 1_024
"""Senders in one round's stability gossip. Every sender with unstable records
must be in every round: a rotating subset would slow each sender's
aggregation, leaving more senders unstable, a feedback loop. Beyond about
150 senders the digest needs IP fragmentation (like a large heartbeat)."""

SENDER_BUFFER_FACTOR = 4
"""Records of one sender held here, unstable, at most this many times
``window_max``; past it that sender's records are dropped (``sender_buffer_full``)
until stability frees room, and NACKs fetch them again later. A correct sender
stops at ``window_max`` unstable records of all senders, and our stable prefix
lags its own by a little, so only a member that ignores flow control (or a
flood under its id) reaches the cap. Out-of-order records stay below
``window_max`` of it, so the rest can always become stable: no deadlock."""

ACK_MATRIX_MAX = 64
"""Views of at most this many members also compute stability directly from the
ACKs every record and digest carries (an N x N table): under load that makes a
message stable about one message interval after its last holder got it, not
after ceil(log2 N) gossip rounds, so the flow window (the same number of
unstable messages) admits a far higher rate. Larger views rely on the gossiped
all-reduce alone, whose state is O(senders)."""


_NO_ACKS: dict[int, int] = {}
"""The ACK matrix row of a member not heard from yet (read only)."""

MISSING_SCAN = 65_536
"""Sequence numbers examined past the contiguous prefix when listing gaps, so a
member that ACKs an absurd number cannot make us loop."""

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


_IN_ORDER: dict[int, Record] = {}
"""The pending table of every stream with nothing out of order: shared and
always empty (``_accept`` gives a stream its own table before it stores one),
so the hundreds of streams a member of a large group hears cost no table each."""


class _Inbound:
    """Receive state of one sender's stream."""

    __slots__ = ("contig", "pending", "known_high", "nack_at", "nack_tries", "reassembly", "synced", "from_cut")

    def __init__(self, synced: bool = True) -> None:
        self.synced = synced
        """False: we joined after this stream began; it starts at the first record seen."""
        self.from_cut = False
        """Our copy starts at a view change's cut (``starts``): we hold its
        prefix without ever having had it, so we know none of it stable until
        an all-reduce of ours says so (``_rejoined``)."""
        self.contig = 0
        self.pending: dict[int, Record] = _IN_ORDER
        self.known_high = 0
        self.nack_at: float | None = None
        self.nack_tries = 0
        self.reassembly: Reassembly | None = None
        """A fragmented message in progress; None for the usual one-record messages."""

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


class _Floors:
    """Stability all-reduce state of one sender's stream: the values heard per
    level, their minimum, and the levels whose floor changed since we sent them.
    One record, so merging a floor looks its sender up once, not three times:
    at 10,000 nodes nearly every lookup misses the cache (a worker holds
    gigabytes), and merging floors was a sixth of a simulation's time. It lives
    while any part is set: a row, a known minimum or an unsent level."""

    __slots__ = ("row", "others", "unsent")

    def __init__(self) -> None:
        self.row: list[int] | None = None
        """Per level k, the lowest number held by the 2**k members that end 2**k
        positions before us (the latest value heard); None: no level heard since
        the stream's state (re)started."""
        self.others = 0
        """The minimum over all levels: what the others are known to hold."""
        self.unsent = 0
        """Bit mask of the levels whose floor changed since we last sent that
        level: a digest carries only those (a delta). Kept as changes happen
        (``_mark_floors``), never by keeping the rows we sent: rows of every
        unstable sender at every level were 2 GB at 10,000 nodes."""


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
        self._next_seq = first_seq
        self._inbound: dict[int, _Inbound] = {}
        self._nacking: dict[int, _Inbound] = {}  # senders with a NACK timer running
        self._store: dict[int, dict[int, Record]] = {}  # sender -> seq -> record, unstable only
        self._stable: dict[int, int] = {}
        self._buffered = 0
        self._dirty: dict[int, int] = {}  # ACK delta since our last send (piggybacked)
        self._ack_due: dict[int, int] = {}  # streams whose sender has not yet heard our ACK
        self._ack_at: float | None = None
        self._acks_fired_at = -math.inf
        """When the promise timer last fired (``_null_delay``: the next fires no sooner after it)."""
        self._next_gossip = now + params.gossip_interval * (0.5 + rng.random())
        self._round = 0
        self._counts = dict.fromkeys(
            ("sent", "received", "duplicates", "beyond_window", "nacks", "retransmissions", "pushes", "by_nack",
             "by_gossip", "nulls", "sender_buffer_full"), 0
        )
        self._peak = 0
        """The most records held at once (``peak_buffered``)."""
        self._drops: dict[str, int] = {}  # reassembly drops, by reason
        self._reassembling: dict[int, _Inbound] = {}  # senders with a partial message (a timer each)
        self._gc_due = False
        """Every stream's stable prefix may have risen (``_gc_senders``: these streams')."""
        self._gc_senders: set[int] = set()
        self.members: tuple[int, ...] = ()
        self._index: dict[int, int] = {}
        self._roster: Roster | None = None
        self._null_delay = params.ack_interval
        """How long after receiving an idle member of an ordered group promises."""
        self._position = 0
        self._depth = 0
        """Levels of the stability gossip: ceil(log2 N)."""
        self._floors: dict[int, _Floors] = {}
        """Stability gossip, per sender (``_Floors``). A row per sender, not a
        table per level: a member of a large group keeps them for the hundreds
        of streams it holds unstable (14 dict entries a stream at N = 10,000
        were the largest part of its memory)."""
        self._unsent_count = 0
        """Records with a level left to send (nonzero ``unsent``)."""
        self._unsent_at: list[set[int]] = []
        """Per level, the senders whose ``unsent`` has that level: what its next
        digest lists (no scan of every unstable stream per digest)."""
        self._full_due = 0
        """Levels whose next digest must list every sender (a new view, or the
        partner asked: ``RESYNC``)."""
        self._sent_seq: list[int] = []
        """Per level, the number of the last digest sent there."""
        self._heard_seq: list[int] = []
        """Per level, the number of the last digest heard from that level's
        predecessor in sequence; -1: out of step, the next one asks for a full."""
        self._emptied: set[int] = set()
        """Senders all stable here whose stability state may retire once their
        last changed floors went out (``_retire_quiet_senders``)."""
        self._rejoined: set[int] = set()
        """Senders whose copy here starts at a view change's cut (``from_cut``),
        with no record buffered, whose all-reduce a floor from a predecessor
        drew us into: we take part as for a buffered stream until every member
        holds what we hold (``_settle_rejoined``), then retire."""
        self._inherited: set[int] = set()
        """Senders we knew stable when this view was installed: the first
        floor of one that reaches us draws us into its all-reduce once, with
        what we know (``_merge_aggregate``)."""
        self._acked: dict[int, dict[int, int]] | None = None
        """Small views (``ACK_MATRIX_MAX``): per member, per sender, the highest
        number that member ACKed (or, for its own stream, sent). The paper's
        direct stability: stable once every member ACKed. None in larger views."""
        self._holders: dict[int, tuple[int, int]] = {}
        """Per sender, the member last known to hold most of its stream, and how
        far: a NACK target besides the sender (one per stream keeps this O(senders))."""
        self._cut_holders: dict[int, tuple[int, ...]] = {}
        """During a view change, per sender we lack records of up to the cut:
        the members that may hold them (one of them reported them in its
        flush), tried in turn when no ACK named a holder."""
        self._left_behind: dict[int, dict[int, Record]] = {}
        """The records of the streams the last view change ended or restarted,
        kept until the next one to answer NACKs: a member still completing
        that change's cut may lack them (see ``expect``)."""
        self.stability_cap: dict[int, int] | None = None
        """During a view change: nothing past the snapshot (then the cut) becomes
        stable, since members new to the next view start there and may need it."""
        self.promise_nulls = ordered
        """Send promises as nulls (ordered groups in small views; the group sets it per view)."""
        self.promise_gossip = False
        """Carry promise clocks in the stability all-reduce instead (the group sets it per view)."""
        self.lamport = 0
        """Our Lamport clock, as the group's order last told us."""
        self.promise_covers = -1
        """With promises by nulls: a record whose timestamp is at or below this
        needs no null from us, since our last message or null in this view
        already promised as much (total order: the group sets it). -1: every
        record does (safe and causal order need the ACKs themselves)."""
        self._own_clocks: deque[tuple[int, int]] = deque()
        """(last record, timestamp) of our own messages not yet stable, oldest first."""
        self._clock_levels: list[int] = []
        """Per level, the promise clock of the 2**k members before us (latest heard)."""
        self._known_stable: dict[int, int] = {}
        """Per sender, the prefix every member of the current roster holds, as
        learnt in this roster (kept after the sender's state retires): what we
        tell a member whose gossip lags."""
        self._stuck = (0, 0)
        """(our oldest unstable own record, the round since which it is): see ``_ask_if_stuck``."""
        self._retired: dict[int, int] = {}
        """Senders whose stability state retired, oldest first, with the round it did."""
        self._sent_clocks: list[int] = []
        self.set_members(members)

    # ------------------------------------------------------------------ view

    def set_members(self, members: tuple[int, ...], late: tuple[int, ...] = (),
                    starts: dict[int, int] | None = None) -> None:
        """Install a new membership; rows and columns of departed members go.
        Streams of ``late`` members start at the first record we see of them
        (the join point), not at 1: their earlier records may be gone. Streams
        of ``starts`` members begin just after the given number (a view
        change's cut), and every member is known to hold them that far."""
        self._roster = roster_of(members).with_member(self.me)
        self.members, self._index = self._roster.members, self._roster.index
        self._cut_holders = {}
        # a new view aggregates afresh: positions may move, and a member that
        # restarted under its old id no longer holds what it reported
        n = len(self.members)
        self._null_delay = min(self.params.ack_interval, self.params.promise_spacing * n)
        self._depth = math.ceil(math.log2(n)) if n > 1 else 0
        self._floors = {}
        self._rejoined = set()
        self._inherited = {s for s in self._stable if s in self._index and s != self.me}
        self._unsent_count = 0
        self._unsent_at = [set() for _ in range(self._depth)]
        self._full_due = (1 << self._depth) - 1  # the partners start afresh too
        self._sent_seq = [0] * self._depth
        self._heard_seq = [-1] * self._depth
        self._clock_levels = [0] * self._depth
        self._sent_clocks = [0] * self._depth
        self._known_stable = {}
        self._acked = {} if n <= ACK_MATRIX_MAX else None
        self._position = self._index[self.me]
        self._gc_due = True
        ended = [s for s in {*self._store, *self._inbound} if s not in self._index]
        restarted = [m for m in (starts or {}) if m in self._index and m != self.me]
        self._left_behind = {s: self._store[s] for s in (*ended, *restarted) if self._store.get(s)}
        for sender in ended:
            self._forget_sender(sender)
        for member in late:
            if member != self.me and member in self._index:
                self._forget_sender(member)
                self._inbound[member] = _Inbound(synced=False)
        for member, start in (starts or {}).items():
            if member in self._index:
                self._start_at(member, start)
        self._collect_garbage()

    def _start_at(self, sender: int, start: int) -> None:
        if sender != self.me:
            self._forget_sender(sender)
            inbound = self._inbound[sender] = _Inbound()
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
            self._cut_holders[sender] = tuple(m for m in holders if m != self.me and m != sender)
        if sender == self.me or sender not in self._index or high <= 0:
            return
        inbound = self._inbound_of(sender)  # nothing of it reached us yet: the cut says what exists
        if high > inbound.known_high:
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

    def send(self, payload: bytes, now: float, optimistic_epoch: int | None = None,
             clock: int = 0) -> tuple[int, list[Out]]:
        """Number, buffer and multicast one message; returns its id and
        outputs. ``clock``: its timestamp, for ordered groups (0: none)."""
        size = self.params.fragment_size
        pieces = [payload[i : i + size] for i in range(0, len(payload), size)] or [b""]
        first = self._next_seq
        contig_before = self._next_seq - 1
        records = []
        for i, piece in enumerate(pieces):
            acks = self._take_acks(self.max_acks) if i == 0 else ()
            for sender, high in acks:  # the multicast reaches that sender too
                if self._ack_due.get(sender, high + 1) <= high:
                    del self._ack_due[sender]
            flags = MORE_FRAGMENTS if i < len(pieces) - 1 else 0
            if optimistic_epoch is not None:
                flags |= OPTIMISTIC | (optimistic_epoch % 64) << EPOCH_SHIFT
            records.append(tuple.__new__(Record, (self.me, self._next_seq, acks, flags, bytes(piece),
                                                  clock if i == 0 else 0)))
            self._next_seq += 1
        for record in records:
            self._buffer(record)
        self._note_floors(self.me, contig_before, self._stable.get(self.me, 0))
        if clock:
            self._own_clocks.append((self._next_seq - 1, clock))
        self._gc_due = self._gc_due or not self._depth  # alone: stable at once
        self._counts["sent"] += len(records)
        return first, [OutRecords(None, tuple(records), "data")]

    def _take_acks(self, limit: int) -> tuple[Ack, ...]:
        """Up to ``limit`` pending ACK entries, lowest senders first; the rest
        ride on the next record. The ordered deliveries (``sgcs.ordering``)
        need a message to list every ACK gathered before it (its causal past),
        so ordered groups raise the limit out of reach (``ORDERED_ACKS``); only
        FIFO groups leave entries behind."""
        acks = tuple(sorted(self._dirty.items())[:limit])
        cap = self.stability_cap
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
        cap = self.stability_cap
        if cap is None:
            return tuple(acks)
        capped = ((sender, min(high, cap.get(sender, 0))) for sender, high in acks)
        return tuple((sender, high) for sender, high in capped if high > 0)

    # ------------------------------------------------------------------ receiving

    def on_records(self, src: int, records: tuple[Record, ...], kind: str, now: float) -> list[Message]:
        """Accept records from ``src``; return messages now deliverable in FIFO order.
        The bookkeeping per sender (ACKs to piggyback, NACK timer, stability)
        runs once per datagram, not once per record: a bundle holds dozens."""
        delivered: list[Message] = []
        touched: dict[int, _Inbound] = {}
        before: dict[int, int] = {}  # sender -> how far we held it
        index, me, covers = self._index, self.me, self.promise_covers
        promise = False  # a record our standing promise does not cover
        for record in records:
            sender = record.sender
            if sender == me or sender not in index:
                continue
            if sender not in before:
                before[sender] = self._contig_of(sender)
            inbound = self._accept(record, kind, delivered, now)
            if inbound is not None:
                touched[sender] = inbound
                promise = promise or record.clock > covers
        for sender, inbound in touched.items():
            self._note_floors(sender, before[sender], self._stable.get(sender, 0))
            self._settle(sender, inbound, now, promise)
        return delivered

    def _accept(self, record: Record, kind: str, delivered: list[Message], now: float) -> _Inbound | None:
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
        stored = self._store.get(sender)
        if stored is not None and len(stored) >= SENDER_BUFFER_FACTOR * self.params.window_max:
            self._counts["sender_buffer_full"] += 1  # as if lost: NACKs fetch it once stability frees room
            return None
        self._counts["received"] += 1
        if kind != "data":
            self._counts["by_gossip" if kind == "gossip" else "by_nack"] += 1
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
        if inbound.pending is _IN_ORDER:
            inbound.pending = {}
        inbound.pending[seq] = record
        self._buffer(record)
        self._advance(sender, inbound, delivered, now)
        return inbound

    def _advance(self, sender: int, inbound: _Inbound, delivered: list[Message], now: float) -> None:
        while inbound.contig + 1 in inbound.pending:
            inbound.contig += 1
            record = inbound.pending.pop(inbound.contig)
            if not inbound.pending:
                inbound.pending = _IN_ORDER  # in order again: give the table back
            if record.flags & MORE_FRAGMENTS or inbound.reassembly is not None:
                self._fragment(sender, inbound, record, delivered, now)
            else:
                delivered.append(_reassemble((record,)))

    def _settle(self, sender: int, inbound: _Inbound, now: float, promise: bool) -> None:
        """After a datagram's records of ``sender``: our ACK for it, its NACK
        timer, and its stable prefix (our own prefix bounds it: it may rise).
        ``promise``: a record needs a promise from us (``promise_covers``)."""
        self._gc_senders.add(sender)
        if self._acked is not None:
            self._note_ack(sender, sender, inbound.known_high)  # a sender holds its own stream
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
        self._reschedule_nack(sender, inbound, now)

    def _fragment(self, sender: int, inbound: _Inbound, record: Record, delivered: list[Message],
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
        if src in self._index:
            for sender, high in acks:
                self._learn_ack(src, sender, high, now)

    def _learn_ack(self, member: int, sender: int, high: int, now: float) -> None:
        if sender not in self._index or member not in self._index:
            return
        if self._acked is not None:
            self._note_ack(member, sender, high)
        if sender == self.me:
            return
        inbound = self._inbound_of(sender)
        if high <= inbound.contig:
            # the usual case (a digest lists every unstable stream, most of
            # them as far as we hold): nothing to fetch, and a member holding
            # no more than we do is no NACK target for what we will lack next
            return
        if member != sender and member != self.me:
            self._hint_holder(sender, member, high)
        if inbound.synced and high > inbound.known_high:
            inbound.known_high = high  # the ACK reveals records we lack
            self._reschedule_nack(sender, inbound, now)

    def _hint_holder(self, sender: int, member: int, high: int) -> None:
        """Remember the member known to hold most of ``sender``'s stream (the
        latest of equals: it is the likeliest to still be up)."""
        hint = self._holders.get(sender)
        if hint is None or high >= hint[1]:
            self._holders[sender] = (member, high)

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
        """The sender first; then any member whose ACKs show it holds ``seq``,
        else (during a view change) the members that may hold it, in turn."""
        if sender == self.me:
            return None
        if tries % 2 == 0:
            return sender  # retries alternate between the sender and a holder
        hint = self._holders.get(sender)
        if hint is not None and hint[1] >= seq and hint[0] != self.me:
            return hint[0]
        others = self._cut_holders.get(sender)
        return others[tries // 2 % len(others)] if others else sender

    def on_nack(self, src: int, sender: int, ranges: tuple[Range, ...], pull: bool) -> list[Out]:
        """Answer a NACK from our buffer, up to ``push_budget`` records."""
        records = self._stored_in(sender, ranges, self.params.push_budget) \
            or self._stored_in(sender, ranges, self.params.push_budget, self._left_behind)
        if not records:
            return []
        kind = "gossip" if pull else "retransmit"
        self._counts["pushes" if pull else "retransmissions"] += len(records)
        return [OutRecords(src, tuple(records), kind)]

    def _stored_in(self, sender: int, ranges: tuple[Range, ...], budget: int,
                   store: dict[int, dict[int, Record]] | None = None) -> list[Record]:
        stored = (self._store if store is None else store).get(sender, {})
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

    def _digest_senders(self) -> list[int]:
        """What a full digest lists: streams with records not yet stable here
        (or a newcomer's copy from the cut, in the all-reduce: ``_rejoined``),
        with floors not yet sent, or stable lately (what we know of those
        answers a partner that missed their last change)."""
        index = self._index
        listed = {s for s in self._store if s in index}
        listed.update(s for s in self._rejoined if s in index)
        listed.update(s for s, floors in self._floors.items() if floors.unsent and s in index)
        listed.update(s for s in self._known_stable if s in index)
        return sorted(listed)[:AGGREGATE_MAX]

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

    def on_digest(self, src: int, entries: tuple[Ack, ...], now: float,
                  aggregate: Aggregate | None = None) -> list[Out]:
        """Push what ``src`` lacks; pull what we lack from it; merge its stability gossip."""
        if src not in self._index:
            return []
        out: list[Out] = []
        if aggregate is not None:
            lagging, reply = self._merge_aggregate(src, aggregate)
            if lagging and self._roster is not None:
                out.append(OutStable(src, self._roster.tag, lagging))
            if reply is not None:
                out.append(reply)
        budget = self.params.push_budget
        pushed: list[Record] = []
        self._collect_garbage()
        index, inbounds, me = self._index, self._inbound, self.me
        quick = self._acked is None and not self.promise_nulls
        for sender, high in entries:
            if sender not in index:
                continue
            if quick and sender != me:
                inbound = inbounds.get(sender)
                if inbound is not None and inbound.contig == high:
                    continue  # the usual entry: we hold as much as src, so nothing to learn, push or pull
            self._learn_ack(src, sender, high, now)
            mine = self._contig_of(sender)
            if high < mine and len(pushed) < budget and self.params.gossip_enabled:
                pushed += self._stored_in(sender, ((high + 1, mine),), budget - len(pushed))
            elif high > mine and sender != self.me and self._inbound_of(sender).synced and self.params.gossip_enabled:
                ranges = self._inbound_of(sender).missing(self.params.nack_max_ranges)
                out.append(OutNack(src, sender, ranges, pull=True))
            if sender == src and mine and self.promise_nulls:
                out.append(OutNull(src, ((src, mine),)))  # ordered groups: a fresh promise for src
        if pushed:
            self._counts["pushes"] += len(pushed)
            out.append(OutRecords(src, tuple(pushed), "gossip"))
        return out

    def _merge_aggregate(self, src: int, aggregate: Aggregate) -> tuple[tuple[Ack, ...], OutDigest | None]:
        """Keep the floors of our level-k predecessor (same roster only).
        Returns the floors it sent below what we know stable: it lags (an
        update of its own predecessor was lost, and that member has since
        retired the sender), and ``on_digest`` tells it. Also returns our
        answer: a request for a full digest when a delta went missing, or the
        full digest our level-k successor asked for."""
        k, n = aggregate.level, len(self.members)
        if self._roster is None or aggregate.roster != self._roster.tag or k >= self._depth:
            return (), None
        if aggregate.flags & RESYNC:
            if self.members[(self._position + (1 << k)) % n] != src:
                return (), None
            self._full_due |= 1 << k
            return (), self._level_digest(k, self._clock_floors()[k] if self.promise_gossip else 0)
        if self.members[(self._position - (1 << k)) % n] != src:
            return (), None  # not the member whose window ends just before ours
        reply = None
        if not self._in_sequence(k, aggregate):
            reply = OutDigest(src, (), Aggregate(k, self._roster.tag, (), 0, 0, RESYNC))
        if aggregate.clock > self._clock_levels[k]:
            self._clock_levels[k] = aggregate.clock
        all_floors, store, stable, depth = self._floors, self._store, self._stable, self._depth
        known, lagging, rejoined = self._known_stable, [], self._rejoined
        for sender, floor in aggregate.floors:
            if known.get(sender, 0) > floor:
                lagging.append((sender, known[sender]))
            floors = all_floors.get(sender)
            row = floors.row if floors is not None else None
            before = row[k] if row is not None else 0
            # a floor is news for a stream we hold unstable (or have not
            # received yet: the delta will not come again), whose changes we
            # still have to pass on, or that we hold with no stability state
            # and do not know stable that far: a newcomer whose copy starts
            # at a view change's cut, or a member that retired the stream and
            # forgot its stable prefix. Those take part again, with what they
            # hold: without them the successors they feed never learn the
            # floor (100 nodes with churn, membership-churn-total.toml: a
            # message of the old view stayed unstable at its sender, and the
            # total order waited on its promise for the last 15 s).
            if floor <= before:
                continue
            contig, low = self._contig_of(sender), stable.get(sender, 0)  # each looked up once
            joined = False
            if contig >= floor and not store.get(sender) and (floors is None or not floors.unsent) \
                    and sender not in rejoined:
                if low >= floor:
                    if sender not in self._inherited:
                        continue
                    # Known stable from the view before (its records gone
                    # here), not yet told in this one: our successors depend
                    # on our floors. Passing nothing on left every level
                    # after us at 0; the all-reduce of that stream never
                    # completed, and with promises by gossip no member
                    # delivered again (randomized total-order machine,
                    # explore.py seed 1675452131). Once per view: a stream
                    # stable in this view stays out, or members would
                    # rejoin and retire it for ever.
                    self._inherited.discard(sender)
                    rejoined.add(sender)
                    joined = True
                elif self._from_cut(sender):
                    rejoined.add(sender)
                    joined = True
                elif row is not None:
                    continue
                else:
                    self._emptied.add(sender)  # forgot it: retires again once its changes went out
            if floors is None:
                floors = all_floors[sender] = _Floors()
            if row is None:
                row = floors.row = [0] * depth
            row[k] = floor
            # A newcomer's copy from the cut stays in (``_rejoined``) until the
            # stream is stable here, and its first digests carry every floor
            # of its own, level 0 (what it holds) too: none of them went out
            # before. Taking one floor, passing on what changed and retiring,
            # a run of newcomers never told the sender's predecessors
            # anything: its old view's messages stayed unstable at it, its
            # promise clock with them, and with promises by gossip no member
            # delivered again (randomized membership machine, seed 3978430701:
            # every member's total order waited 30 s on a floor stuck at 0).
            self._mark_floors(sender, floors, 0 if joined else contig, contig, 0 if joined else low, low, k, before)
            known_floor = floors.others
            if before > known_floor:
                continue  # another level holds the minimum: it did not move
            others = floor
            for value in row:
                if value < others:
                    others = value
            if others > known_floor:
                floors.others = others
                self._gc_senders.add(sender)
        return tuple(lagging), reply

    def _in_sequence(self, level: int, aggregate: Aggregate) -> bool:
        """Whether the deltas of ``level`` arrived without a gap. A full digest
        puts us back in step; out of step, each delta asks for one."""
        heard, seq = self._heard_seq[level], aggregate.seq
        if aggregate.flags & FULL or heard >= 0 and seq == (heard + 1) % SEQ_MODULUS:
            self._heard_seq[level] = seq
            return True
        if heard >= 0 and seq == heard:
            return True  # a duplicate: its floors are old news, merged harmlessly
        self._heard_seq[level] = -1
        return False

    def on_stable(self, src: int, roster: int, entries: tuple[Ack, ...]) -> list[Out]:
        """``src`` knows every member of roster ``roster`` holds these prefixes.
        Within our own roster its word is as good as our own all-reduce. Where
        we know more, we answer with what we know: ``src`` asked (its own
        messages stayed unstable for two cycles, ``_ask_if_stuck``), or lags."""
        if self._roster is None or roster != self._roster.tag or src not in self._index:
            return []
        store, all_floors = self._store, self._floors
        better: list[Ack] = []
        for sender, high in entries:
            if sender not in self._index:
                continue
            known = self._held_by_all(sender)
            if known > high:
                better.append((sender, known))
                continue
            floors = all_floors.get(sender)
            if floors is None:
                if high > 0 and store.get(sender):
                    floors = all_floors[sender] = _Floors()
                    floors.others = high
                    self._gc_senders.add(sender)
            elif high > floors.others and (store.get(sender) or floors.unsent or sender in self._rejoined):
                floors.others = high
                self._gc_senders.add(sender)
        return [OutStable(src, roster, tuple(better))] if better else []

    def _held_by_all(self, sender: int) -> int:
        """How far every member holds ``sender``'s stream, as far as we know:
        what this view's all-reduce found, or our stable prefix, which a view
        change keeps (the members that stay held it, and a newcomer's copy of
        the stream starts after the cut)."""
        return max(self._known_stable.get(sender, 0), self._stable.get(sender, 0))

    def _ask_if_stuck(self, depth: int) -> list[Out]:
        """Promises by gossip: our oldest own message unstable for two cycles
        of levels, though every member holds it, means a predecessor's last
        update of our stream was lost and it has since retired that stream
        (and a full digest no longer lists it). Our promise clock, hence every member's
        delivery, waits on it: ask our predecessors what they know."""
        own = self._own_clocks
        if not own or self._roster is None:
            self._stuck = (0, 0)
            return []
        head, since = self._stuck
        if head != own[0][0]:
            self._stuck = (own[0][0], self._round)
            return []
        waited = self._round - since
        if waited < 2 * depth or waited % (2 * depth):
            return []
        n, query = len(self.members), ((self.me, self._stable.get(self.me, 0)),)
        predecessors = {self.members[(self._position - (1 << k)) % n] for k in range(depth)} - {self.me}
        return [OutStable(p, self._roster.tag, query) for p in sorted(predecessors)]

    # ------------------------------------------------------------------ timers

    def on_timeout(self, now: float) -> list[Out]:
        out: list[Out] = []
        for sender, inbound in list(self._nacking.items()):
            if inbound.nack_at is not None and inbound.nack_at <= now:
                nack = self._nack_due(sender, inbound, now)
                if nack is not None:
                    out.append(nack)
        if now >= self._next_gossip:
            self._next_gossip = now + self.params.gossip_interval
            self._round += 1
            out += self._gossip(now)
        if self._ack_at is not None and now >= self._ack_at:
            due = sorted(self._ack_due.items())
            out += self._nulls(list(self._within_cap(due)) if self.stability_cap is not None else due, now)
            self._ack_due.clear()
            self._ack_at = None
            self._acks_fired_at = now
        if self._reassembling:
            self._expire_reassembly(now)
        self._collect_garbage()
        return out

    def follow_rounds(self, at: float, now: float) -> None:
        """Hold our next gossip round at ``at``, the node's failure-detector
        round, when that is due within one interval: one timer for both, not
        two (a timer event per node per round was a tenth of a large
        simulation's events). A stream on its own keeps its own phase."""
        if now < at <= now + self.params.gossip_interval:
            self._next_gossip = at

    def _gossip(self, now: float) -> list[Out]:
        """This round's digest, to the hypercube target of level k = round mod
        depth; and every other level whose floors changed since we last sent
        it (its inputs, our own numbers or the level below, rose). The round
        is our own count: members share no clock (``now`` is local to each
        node), so their cycles through the levels are out of phase, and a
        value that waited for our cycle to reach its next level waited up to a
        whole cycle at every level: 27 rounds instead of 7 at N = 128, members
        started together (``benchmarks/stability_rounds.py``). Sent as soon as
        it changes, a value climbs one level per round: ceil(log2 N) rounds in
        all (5.5 at N = 128), for up to ceil(log2 N) digests per member per
        round under load. ``stability_extra_levels`` caps the changed levels
        sent besides the round's own, lowest first: with 1, about 1.5
        ceil(log2 N) rounds (11.5 at N = 128, 14.5 at 1,024) for about 2
        digests per member per round. Views small enough for the ACK matrix
        (``ACK_MATRIX_MAX``) keep one digest per round: the ACKs make their
        messages stable sooner than any gossip.

        A digest lists only the senders whose floor at its level changed
        (``_unsent``), so its size follows the news, not the hundreds of
        streams a member of a large group holds unstable. The round's own
        level goes out while anything is unstable or lately stable even when
        nothing changed: its number tells the partner whether it missed one."""
        self._collect_garbage()
        self._retire_quiet_senders()
        if not self._depth:
            return []
        depth = self._depth
        k = (self._round - 1) % depth
        asks = self._ask_if_stuck(depth) if self.promise_gossip else []
        clocks = self._clock_floors() if self.promise_gossip else [0] * depth
        refresh = self.promise_gossip and self._round % 4 == 0  # a lost clock update is sent again
        active = bool(self._store or self._unsent_count or self._retired or self._rejoined)
        if not active and not refresh and clocks == self._sent_clocks:
            return asks
        # small views learn stability from the ACKs: one level per round (promise clocks climb by gossip only)
        direct = self._acked is not None and not self.promise_gossip
        extras = self.params.stability_extra_levels  # the lowest changed levels first: a value climbs from level 0
        pending = self._full_due if active else 0
        for level, senders in enumerate(self._unsent_at):
            if senders:
                pending |= 1 << level
        out: list[Out] = asks
        for level in range(depth):
            changed = pending >> level & 1 or clocks[level] != self._sent_clocks[level]
            if level == k:
                if not (active or refresh or changed):
                    continue
            elif direct or extras == 0 or not changed:
                continue
            else:
                extras -= 1
            out.append(self._level_digest(level, clocks[level]))
        return out

    def _level_digest(self, level: int, clock: int) -> OutDigest:
        """The next digest to our partner of ``level``: the senders whose floor
        there changed (all of them when a full one is due), each with its
        floor and, for repair, how far we hold it."""
        bit = 1 << level
        listed, all_floors, index = self._unsent_at[level], self._floors, self._index
        full = bool(self._full_due & bit)
        if full:
            self._full_due &= ~bit
            senders = self._digest_senders()
            listed.difference_update(senders)
        else:
            senders = sorted(listed)
            listed.clear()
        sent: list[Ack] = []
        repair: list[Ack] = []
        for sender in senders:
            floors = all_floors.get(sender)
            if floors is not None and floors.unsent:
                floors.unsent &= ~bit
                if not floors.unsent:
                    self._unsent_count -= 1
                    if floors.row is None and not floors.others:
                        del all_floors[sender]  # nothing else kept
            if not full and sender not in index:
                continue
            contig = self._contig_of(sender)
            sent.append((sender, self._floor_of(sender, floors, level, contig)))
            repair.append((sender, contig))
        floors_sent = tuple(sent)
        entries = tuple(repair) if self.params.gossip_enabled else ()
        seq = self._sent_seq[level] = (self._sent_seq[level] + 1) % SEQ_MODULUS
        self._sent_clocks[level] = clock
        assert self._roster is not None
        target = self.members[(self._position + bit) % len(self.members)]
        return OutDigest(target, entries,
                         Aggregate(level, self._roster.tag, floors_sent, clock, seq, FULL if full else 0))

    def _promise_clock(self) -> int:
        """What we vouch for: our later messages carry larger timestamps, and
        our earlier ones at or below it are stable (held by every member)."""
        own = self._own_clocks
        return min(self.lamport, own[0][1] - 1) if own else self.lamport

    def _clock_floors(self) -> list[int]:
        """Per level, the promise clock of the 2**level members ending at us."""
        running, out = self._promise_clock(), []
        for level, value in enumerate(self._clock_levels):
            if level:
                running = min(running, self._clock_levels[level - 1])
            out.append(running)
        return out

    def promise_floor(self) -> int:
        """A timestamp at or below which every message that will ever be sent
        in this view is held here (promises by gossip; 0 until every level
        has been heard)."""
        return min(self._promise_clock(), *self._clock_levels) if self._clock_levels else self._promise_clock()

    def _floor_at(self, sender: int, level: int, contig: int) -> int:
        """The floor of ``sender`` at ``level``: the lowest number held by the
        2**level members ending at us. Our stable prefix bounds it from below:
        every member of the view holds that much. (A member that learnt
        stability from the ACK matrix, before the all-reduce completed, must
        still pass it on: the others may depend on the gossip alone.)
        ``contig``: how far we hold it (``_contig_of``, which the caller has)."""
        return self._floor_of(sender, self._floors.get(sender), level, contig)

    def _floor_of(self, sender: int, floors: _Floors | None, level: int, contig: int) -> int:
        """``_floor_at`` with the sender's record at hand."""
        low, running = self._stable.get(sender, 0), contig
        if level:
            row = floors.row if floors is not None else None
            if row is None:
                running = 0
            else:
                for k in range(level):
                    value = row[k]
                    if value < running:
                        running = value
        return running if running > low else low

    def _note_floors(self, sender: int, contig_before: int, low_before: int, level: int = -1,
                     value_before: int = 0) -> None:
        """Some input of ``sender``'s floors moved: how far we hold it (from
        ``contig_before``), its stable prefix (from ``low_before``) or, at
        ``level``, the value our predecessor there gave (from
        ``value_before``). Mark each level whose floor changed, for its next
        digest. One pass computes the floors before and after side by side."""
        if self._depth:  # else alone: no partner to tell
            self._mark_floors(sender, self._floors.get(sender), contig_before, self._contig_of(sender), low_before,
                              self._stable.get(sender, 0), level, value_before)

    def _mark_floors(self, sender: int, floors: _Floors | None, contig_before: int, contig: int, low_before: int,
                     low: int, level: int, value_before: int) -> None:
        """``_note_floors`` with the sender's state at hand (its record, how far
        we hold it, its stable prefix): each dict is looked up once per floor
        merged, and at 10,000 nodes every lookup is a cache miss."""
        depth = self._depth
        if not depth:
            return
        row = floors.row if floors is not None else None
        old_running, new_running = contig_before, contig
        mask = 0
        for k in range(depth):
            if k:
                if row is None:
                    old_running = new_running = 0
                else:
                    value = row[k - 1]
                    old_value = value_before if k - 1 == level else value
                    old_running = old_running if old_running < old_value else old_value
                    new_running = new_running if new_running < value else value
                if old_running == new_running and low == low_before and k > level:
                    break  # the inputs left are the same: so are the floors
            old = old_running if old_running > low_before else low_before
            new = new_running if new_running > low else low
            if old != new:
                mask |= 1 << k
        if not mask:
            return
        if floors is None:
            floors = self._floors[sender] = _Floors()
        new = mask & ~floors.unsent
        if new:  # the levels already unsent are listed already
            if not floors.unsent:
                self._unsent_count += 1
            floors.unsent |= new
            for level, senders in enumerate(self._unsent_at):
                if new >> level & 1:
                    senders.add(sender)

    def _retire_quiet_senders(self) -> None:
        """A sender all stable here, whose changed floors all went out since,
        needs no stability state: 10,000 members each keeping it for every
        sender they ever heard would grow without bound. Its next record
        aggregates afresh. (Retiring waits for the changes to go out, not for
        a count of rounds: a member depending on the gossip was once left
        without the last level.)"""
        done = [s for s in self._emptied if not self._unsent_of(s) and not self._store.get(s)]
        for sender in done:
            self._emptied.discard(sender)
            self._floors.pop(sender, None)
            self._holders.pop(sender, None)
            self._retired.pop(sender, None)  # to the end: the table is kept oldest first
            self._retired[sender] = self._round
        # What we know stable of a retired stream answers a member that lags
        # on it (it asks after two cycles): kept four cycles, then forgotten,
        # with its stable prefix. Kept for every sender ever heard, the two
        # tables held 10,000 x 10,000 numbers at N = 10,000 (over 8 GB).
        horizon = self._round - 4 * max(1, self._depth)
        while self._retired:
            sender, since = next(iter(self._retired.items()))
            if since > horizon:
                break
            del self._retired[sender]
            if not self._store.get(sender) and not self._unsent_of(sender):
                self._known_stable.pop(sender, None)
                self._stable.pop(sender, None)

    def _nulls(self, acks: list[Ack], now: float) -> list[Out]:
        self._counts["nulls"] += len(acks)
        return [OutNull(sender, ((sender, high),)) for sender, high in acks]

    def next_deadline(self) -> float | None:
        if not self._nacking and not self._reassembling:  # the usual case: the driver asks after every event
            busy = self._buffered or self._unsent_count or self._retired or self._rejoined or self.promise_gossip
            gossip = self._next_gossip if busy else None
            ack = self._ack_at
            if gossip is None or ack is None:
                return ack if gossip is None else gossip
            return ack if ack < gossip else gossip
        deadlines = [i.nack_at for i in self._nacking.values() if i.nack_at is not None]
        if self._buffered or self._unsent_count or self._retired or self._rejoined or self.promise_gossip:
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
        return self._stable.get(sender, 0)

    def _collect_garbage(self) -> None:
        store, rejoined = self._store, self._rejoined
        if self._gc_due:
            senders = [*store, *(s for s in rejoined if s not in store)]
        elif self._gc_senders:
            senders = [s for s in self._gc_senders if s in store or s in rejoined]
        else:
            return
        self._gc_due = False
        self._gc_senders.clear()
        cap = self.stability_cap
        for sender in senders:
            stored = store.get(sender)
            if stored is None:
                self._settle_rejoined(sender, cap)
                continue
            stable = self._floor(sender)
            if cap is not None:
                stable = min(stable, cap.get(sender, 0))
            if stable > self._known_stable.get(sender, 0):
                self._known_stable[sender] = stable
            previous = self._stable.get(sender, 0)
            if stable > previous:
                span = range(previous + 1, stable + 1) if stable - previous <= len(stored) else sorted(stored)
                for seq in span:
                    if seq <= stable and stored.pop(seq, None) is not None:
                        self._buffered -= 1
                self._stable[sender] = stable
                self._note_floors(sender, self._contig_of(sender), previous)
                if sender == self.me:
                    own = self._own_clocks
                    while own and own[0][0] <= stable:
                        own.popleft()
                if not stored:
                    self._holders.pop(sender, None)  # nothing left to NACK for
                    del self._store[sender]  # an emptied dict keeps its table: 400 B for every sender ever heard
                    self._emptied.add(sender)
                    self._end_cut_copy(sender)

    def _from_cut(self, sender: int) -> bool:
        """Our copy of ``sender``'s stream starts at a view change's cut, and we know none of it stable."""
        inbound = self._inbound.get(sender)
        return inbound is not None and inbound.from_cut

    def _settle_rejoined(self, sender: int, cap: dict[int, int] | None) -> None:
        """A stream in the all-reduce with no record buffered here
        (``_rejoined``): its stable prefix rises as the others are known to
        hold it, as a buffered stream's does, and once they hold all we hold
        it leaves, to retire once its changes went out (``_emptied``)."""
        stable = self._floor(sender)
        if cap is not None:
            stable = min(stable, cap.get(sender, 0))
        if stable > self._known_stable.get(sender, 0):
            self._known_stable[sender] = stable
        previous, contig = self._stable.get(sender, 0), self._contig_of(sender)
        if stable > previous:
            self._stable[sender] = stable
            self._note_floors(sender, contig, previous)
        if stable >= contig:
            self._end_cut_copy(sender)
            self._emptied.add(sender)

    def _end_cut_copy(self, sender: int) -> None:
        """``sender``'s stream is stable here as far as we hold it: it takes
        part in the all-reduce only as any other stream does."""
        self._rejoined.discard(sender)
        inbound = self._inbound.get(sender)
        if inbound is not None:
            inbound.from_cut = False

    def _floor(self, sender: int) -> int:
        """The highest number every member of the view is known to hold."""
        own = self._contig_of(sender)
        if not self._depth:
            return own
        floors = self._floors.get(sender)
        others = floors.others if floors is not None else 0
        if self._acked is not None:
            acked, empty = self._acked, _NO_ACKS
            direct = min(acked.get(m, empty).get(sender, 0) for m in self.members if m != self.me)
            others = max(others, direct)  # both are lower bounds of what the others hold
        return min(own, others)

    def _note_ack(self, member: int, sender: int, high: int) -> None:
        """``member`` holds ``sender``'s stream up to ``high`` (ACK matrix)."""
        assert self._acked is not None
        if member == self.me:
            return
        row = self._acked.get(member)
        if row is None:
            row = self._acked[member] = {}
        if high > row.get(sender, 0):
            row[sender] = high
            self._gc_senders.add(sender)

    def _buffer(self, record: Record) -> None:
        sender = record.sender
        if record.seq > self._stable.get(sender, 0):
            stored = self._store.get(sender)
            if stored is None:
                stored = self._store[sender] = {}
                self._gc_senders.add(sender)  # a new stream: collect it once its floor rises
            stored[record.seq] = record
            self._buffered += 1
            if self._buffered > self._peak:
                self._peak = self._buffered

    def _forget_sender(self, sender: int) -> None:
        self._buffered -= len(self._store.pop(sender, {}))
        self._inbound.pop(sender, None)
        self._nacking.pop(sender, None)
        self._reassembling.pop(sender, None)
        self._stable.pop(sender, None)
        self._dirty.pop(sender, None)
        floors = self._floors.pop(sender, None)
        if floors is not None and floors.unsent:
            self._unsent_count -= 1
            for senders in self._unsent_at:
                senders.discard(sender)
        self._emptied.discard(sender)
        self._rejoined.discard(sender)
        self._holders.pop(sender, None)

    def _unsent_of(self, sender: int) -> int:
        """The levels whose floor of ``sender`` changed since we last sent them (a mask)."""
        floors = self._floors.get(sender)
        return floors.unsent if floors is not None else 0

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
            peak_buffered=self._peak, window=self._buffered, drops=self.drops(),
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
