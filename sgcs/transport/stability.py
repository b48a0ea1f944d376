"""The stability all-reduce and promises by gossip (SGCS paper, 3.2 and 3.4).

Theory of operation
-------------------
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

``sgcs.transport.reliable`` owns the stream this serves: it calls
``note_floors`` when how far we hold a stream moves, ``merge_aggregate`` and
``on_stable`` with what partners send, and ``gossip`` once per round.
"""

from __future__ import annotations

import math

from .params import Params
from ..records import FULL, RESYNC, SEQ_MODULUS, Ack, Aggregate, Out, OutDigest, OutStable
from .repair import Repair
from .state import StreamState

AGGREGATE_MAX = 1_024
"""Senders in one round's stability gossip. Every sender with unstable records
must be in every round: a rotating subset would slow each sender's
aggregation, leaving more senders unstable, a feedback loop. Beyond about
150 senders the digest needs IP fragmentation (like a large heartbeat)."""

ACK_MATRIX_MAX = 64
"""Views of at most this many members also compute stability directly from the
ACKs every record and digest carries (an N x N table): under load that makes a
message stable about one message interval after its last holder got it, not
after ceil(log2 N) gossip rounds, so the flow window (the same number of
unstable messages) admits a far higher rate. Larger views rely on the gossiped
all-reduce alone, whose state is O(senders)."""


_NO_ACKS: dict[int, int] = {}
"""The ACK matrix row of a member not heard from yet (read only)."""


class Floors:
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


class Stability:
    """The all-reduce of one member's stream in one group; a part of ``ReliableStream``."""

    def __init__(self, me: int, params: Params, state: StreamState, repair: Repair) -> None:
        self.me = me
        self.params = params
        self.state = state
        self.repair = repair
        self._floors: dict[int, Floors] = {}
        """Stability gossip, per sender (``Floors``). A row per sender, not a
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

    def reset_view(self) -> None:
        """A new view (``ReliableStream.set_members``): aggregate afresh over its members."""
        n = len(self.state.members)
        self.state.depth = math.ceil(math.log2(n)) if n > 1 else 0
        self._floors = {}
        self._rejoined = set()
        self._inherited = {s for s in self.state.stable if s in self.state.index and s != self.me}
        self._unsent_count = 0
        self._unsent_at = [set() for _ in range(self.state.depth)]
        self._full_due = (1 << self.state.depth) - 1  # the partners start afresh too
        self._sent_seq = [0] * self.state.depth
        self._heard_seq = [-1] * self.state.depth
        self._clock_levels = [0] * self.state.depth
        self._sent_clocks = [0] * self.state.depth
        self._known_stable = {}
        self.state.acked = {} if len(self.state.members) <= ACK_MATRIX_MAX else None
        self.state.position = self.state.index[self.me]
        self.state.gc_due = True

    def forget(self, sender: int) -> None:
        """``sender``'s stream ended or restarted here."""
        floors = self._floors.pop(sender, None)
        if floors is not None and floors.unsent:
            self._unsent_count -= 1
            for senders in self._unsent_at:
                senders.discard(sender)
        self._emptied.discard(sender)
        self._rejoined.discard(sender)

    def gossiping(self) -> bool:
        """Changed floors to send, or streams lately retired or drawn in: the gossip must go on."""
        return bool(self._unsent_count or self._retired or self._rejoined)

    def _digest_senders(self) -> list[int]:
        """What a full digest lists: streams with records not yet stable here
        (or a newcomer's copy from the cut, in the all-reduce: ``_rejoined``),
        with floors not yet sent, or stable lately (what we know of those
        answers a partner that missed their last change)."""
        index = self.state.index
        listed = {s for s in self.state.store if s in index}
        listed.update(s for s in self._rejoined if s in index)
        listed.update(s for s, floors in self._floors.items() if floors.unsent and s in index)
        listed.update(s for s in self._known_stable if s in index)
        return sorted(listed)[:AGGREGATE_MAX]

    def merge_aggregate(self, src: int, aggregate: Aggregate) -> tuple[tuple[Ack, ...], OutDigest | None]:
        """Keep the floors of our level-k predecessor (same roster only).
        Returns the floors it sent below what we know stable: it lags (an
        update of its own predecessor was lost, and that member has since
        retired the sender), and ``on_digest`` tells it. Also returns our
        answer: a request for a full digest when a delta went missing, or the
        full digest our level-k successor asked for."""
        k, n = aggregate.level, len(self.state.members)
        if self.state.roster is None or aggregate.roster != self.state.roster.tag or k >= self.state.depth:
            return (), None
        if aggregate.flags & RESYNC:
            if self.state.members[(self.state.position + (1 << k)) % n] != src:
                return (), None
            self._full_due |= 1 << k
            return (), self._level_digest(k, self._clock_floors()[k] if self.state.promise_gossip else 0)
        if self.state.members[(self.state.position - (1 << k)) % n] != src:
            return (), None  # not the member whose window ends just before ours
        reply = None
        if not self._in_sequence(k, aggregate):
            reply = OutDigest(src, (), Aggregate(k, self.state.roster.tag, (), 0, 0, RESYNC))
        if aggregate.clock > self._clock_levels[k]:
            self._clock_levels[k] = aggregate.clock
        all_floors, store, stable, depth = self._floors, self.state.store, self.state.stable, self.state.depth
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
            contig, low = self.state.contig_of(sender), stable.get(sender, 0)  # each looked up once
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
                floors = all_floors[sender] = Floors()
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
                self.state.gc_senders.add(sender)
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
        if self.state.roster is None or roster != self.state.roster.tag or src not in self.state.index:
            return []
        store, all_floors = self.state.store, self._floors
        better: list[Ack] = []
        for sender, high in entries:
            if sender not in self.state.index:
                continue
            known = self._held_by_all(sender)
            if known > high:
                better.append((sender, known))
                continue
            floors = all_floors.get(sender)
            if floors is None:
                if high > 0 and store.get(sender):
                    floors = all_floors[sender] = Floors()
                    floors.others = high
                    self.state.gc_senders.add(sender)
            elif high > floors.others and (store.get(sender) or floors.unsent or sender in self._rejoined):
                floors.others = high
                self.state.gc_senders.add(sender)
        return [OutStable(src, roster, tuple(better))] if better else []

    def _held_by_all(self, sender: int) -> int:
        """How far every member holds ``sender``'s stream, as far as we know:
        what this view's all-reduce found, or our stable prefix, which a view
        change keeps (the members that stay held it, and a newcomer's copy of
        the stream starts after the cut)."""
        return max(self._known_stable.get(sender, 0), self.state.stable.get(sender, 0))

    def _ask_if_stuck(self, depth: int) -> list[Out]:
        """Promises by gossip: our oldest own message unstable for two cycles
        of levels, though every member holds it, means a predecessor's last
        update of our stream was lost and it has since retired that stream
        (and a full digest no longer lists it). Our promise clock, hence every member's
        delivery, waits on it: ask our predecessors what they know."""
        own = self.state.own_clocks
        if not own or self.state.roster is None:
            self._stuck = (0, 0)
            return []
        head, since = self._stuck
        if head != own[0][0]:
            self._stuck = (own[0][0], self.state.round)
            return []
        waited = self.state.round - since
        if waited < 2 * depth or waited % (2 * depth):
            return []
        n, query = len(self.state.members), ((self.me, self.state.stable.get(self.me, 0)),)
        predecessors = {self.state.members[(self.state.position - (1 << k)) % n] for k in range(depth)} - {self.me}
        return [OutStable(p, self.state.roster.tag, query) for p in sorted(predecessors)]

    def gossip(self, now: float) -> list[Out]:
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
        self.collect_garbage()
        self._retire_quiet_senders()
        if not self.state.depth:
            return []
        depth = self.state.depth
        k = (self.state.round - 1) % depth
        asks = self._ask_if_stuck(depth) if self.state.promise_gossip else []
        clocks = self._clock_floors() if self.state.promise_gossip else [0] * depth
        refresh = self.state.promise_gossip and self.state.round % 4 == 0  # a lost clock update is sent again
        active = bool(self.state.store or self._unsent_count or self._retired or self._rejoined)
        if not active and not refresh and clocks == self._sent_clocks:
            return asks
        # small views learn stability from the ACKs: one level per round (promise clocks climb by gossip only)
        direct = self.state.acked is not None and not self.state.promise_gossip
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
        listed, all_floors, index = self._unsent_at[level], self._floors, self.state.index
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
            contig = self.state.contig_of(sender)
            sent.append((sender, self._floor_of(sender, floors, level, contig)))
            repair.append((sender, contig))
        floors_sent = tuple(sent)
        entries = tuple(repair) if self.params.gossip_enabled else ()
        seq = self._sent_seq[level] = (self._sent_seq[level] + 1) % SEQ_MODULUS
        self._sent_clocks[level] = clock
        assert self.state.roster is not None
        target = self.state.members[(self.state.position + bit) % len(self.state.members)]
        return OutDigest(target, entries,
                         Aggregate(level, self.state.roster.tag, floors_sent, clock, seq, FULL if full else 0))

    def _promise_clock(self) -> int:
        """What we vouch for: our later messages carry larger timestamps, and
        our earlier ones at or below it are stable (held by every member)."""
        own = self.state.own_clocks
        return min(self.state.lamport, own[0][1] - 1) if own else self.state.lamport

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

    def _floor_of(self, sender: int, floors: Floors | None, level: int, contig: int) -> int:
        """``_floor_at`` with the sender's record at hand."""
        low, running = self.state.stable.get(sender, 0), contig
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

    def note_floors(self, sender: int, contig_before: int, low_before: int, level: int = -1,
                     value_before: int = 0) -> None:
        """Some input of ``sender``'s floors moved: how far we hold it (from
        ``contig_before``), its stable prefix (from ``low_before``) or, at
        ``level``, the value our predecessor there gave (from
        ``value_before``). Mark each level whose floor changed, for its next
        digest. One pass computes the floors before and after side by side."""
        if self.state.depth:  # else alone: no partner to tell
            self._mark_floors(sender, self._floors.get(sender), contig_before, self.state.contig_of(sender), low_before,
                              self.state.stable.get(sender, 0), level, value_before)

    def _mark_floors(self, sender: int, floors: Floors | None, contig_before: int, contig: int, low_before: int,
                     low: int, level: int, value_before: int) -> None:
        """``note_floors`` with the sender's state at hand (its record, how far
        we hold it, its stable prefix): each dict is looked up once per floor
        merged, and at 10,000 nodes every lookup is a cache miss."""
        depth = self.state.depth
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
            floors = self._floors[sender] = Floors()
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
        done = [s for s in self._emptied if not self._unsent_of(s) and not self.state.store.get(s)]
        for sender in done:
            self._emptied.discard(sender)
            self._floors.pop(sender, None)
            self.repair.holders.pop(sender, None)
            self._retired.pop(sender, None)  # to the end: the table is kept oldest first
            self._retired[sender] = self.state.round
        # What we know stable of a retired stream answers a member that lags
        # on it (it asks after two cycles): kept four cycles, then forgotten,
        # with its stable prefix. Kept for every sender ever heard, the two
        # tables held 10,000 x 10,000 numbers at N = 10,000 (over 8 GB).
        horizon = self.state.round - 4 * max(1, self.state.depth)
        while self._retired:
            sender, since = next(iter(self._retired.items()))
            if since > horizon:
                break
            del self._retired[sender]
            if not self.state.store.get(sender) and not self._unsent_of(sender):
                self._known_stable.pop(sender, None)
                self.state.stable.pop(sender, None)

    def collect_garbage(self) -> None:
        store, rejoined = self.state.store, self._rejoined
        if self.state.gc_due:
            senders = [*store, *(s for s in rejoined if s not in store)]
        elif self.state.gc_senders:
            senders = [s for s in self.state.gc_senders if s in store or s in rejoined]
        else:
            return
        self.state.gc_due = False
        self.state.gc_senders.clear()
        cap = self.state.stability_cap
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
            previous = self.state.stable.get(sender, 0)
            if stable > previous:
                span = range(previous + 1, stable + 1) if stable - previous <= len(stored) else sorted(stored)
                for seq in span:
                    if seq <= stable and stored.pop(seq, None) is not None:
                        self.state.buffered -= 1
                self.state.stable[sender] = stable
                self.note_floors(sender, self.state.contig_of(sender), previous)
                if sender == self.me:
                    own = self.state.own_clocks
                    while own and own[0][0] <= stable:
                        own.popleft()
                if not stored:
                    self.repair.holders.pop(sender, None)  # nothing left to NACK for
                    del self.state.store[sender]  # an emptied dict keeps its table: 400 B for every sender ever heard
                    self._emptied.add(sender)
                    self._end_cut_copy(sender)

    def _from_cut(self, sender: int) -> bool:
        """Our copy of ``sender``'s stream starts at a view change's cut, and we know none of it stable."""
        inbound = self.state.inbound.get(sender)
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
        previous, contig = self.state.stable.get(sender, 0), self.state.contig_of(sender)
        if stable > previous:
            self.state.stable[sender] = stable
            self.note_floors(sender, contig, previous)
        if stable >= contig:
            self._end_cut_copy(sender)
            self._emptied.add(sender)

    def _end_cut_copy(self, sender: int) -> None:
        """``sender``'s stream is stable here as far as we hold it: it takes
        part in the all-reduce only as any other stream does."""
        self._rejoined.discard(sender)
        inbound = self.state.inbound.get(sender)
        if inbound is not None:
            inbound.from_cut = False

    def _floor(self, sender: int) -> int:
        """The highest number every member of the view is known to hold."""
        own = self.state.contig_of(sender)
        if not self.state.depth:
            return own
        floors = self._floors.get(sender)
        others = floors.others if floors is not None else 0
        if self.state.acked is not None:
            acked, empty = self.state.acked, _NO_ACKS
            direct = min(acked.get(m, empty).get(sender, 0) for m in self.state.members if m != self.me)
            others = max(others, direct)  # both are lower bounds of what the others hold
        return min(own, others)

    def note_ack(self, member: int, sender: int, high: int) -> None:
        """``member`` holds ``sender``'s stream up to ``high`` (ACK matrix)."""
        assert self.state.acked is not None
        if member == self.me:
            return
        row = self.state.acked.get(member)
        if row is None:
            row = self.state.acked[member] = {}
        if high > row.get(sender, 0):
            row[sender] = high
            self.state.gc_senders.add(sender)

    def _unsent_of(self, sender: int) -> int:
        """The levels whose floor of ``sender`` changed since we last sent them (a mask)."""
        floors = self._floors.get(sender)
        return floors.unsent if floors is not None else 0

