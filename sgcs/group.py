"""One group's protocol stack on one node, and its framing into datagrams.

Theory of operation
-------------------
A ``GroupStack`` holds what a node keeps per group: the view agreement
(``membership.agreement``), the reliable multicast stream
(``transport.reliable``), the unicast streams (``transport.unicast``) and the
outbox of multicast records waiting to share a datagram (batching, at most
``flush_delay``). It turns transport outputs into ``(type, destination, flags,
body)`` frames; the node seals and addresses them. Keeping this per-group
plumbing here leaves ``node.py`` with the wire and the dispatch.

Views and streams move together (virtual synchrony). The view agreement
decides the next view and its cut; ``membership.synchrony.ViewChange`` owns
the data-plane side of a change (its phase, what is held for the new view,
what the last change rolled back or withdrew). This stack wires the two to
the streams and the order: at a freeze it stops stability past the
snapshot, at a commit it completes each stream up to the cut and delivers
that in the old view (ordered groups drain their order without waiting for
promises), at the install it starts the new view's streams and order after
the cut, and it reports what happened as typed events, in order. Members
new to our view start their streams after the cut. No record past a
snapshot becomes stable during a change, since a newcomer may still need it.

Caps (docs/limits.md): the view holds at most ``max_members`` members
(``agreement``); members refused for another order are remembered up to
``MAX_REJECTED``, oldest forgotten first; ``incarnations`` and ``joined_at``
only keep members of the view (and a few recent strangers); messages held
for a view change come out of the stream, whose caps bound them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
import random
from typing import Any, Callable, Iterable

from .config import Order
from .errors import UsageError
from .membership.agreement import AgreementOut, Commit, CtlSend, Freeze, View, ViewAgreement
from .membership.messages import Beacon, CommitMsg, Flush, InstalledMsg, Propose, ViewMessage, decode_view_message
from .membership.roster import roster_of
from .membership.synchrony import ViewChange
from .ordering.total import OrderedMessage, OrderingLayer
from .transport.framing import pack
from .transport.records import Aggregate, Message, Out, OutDigest, OutNack, OutNull, OutRecords, OutStable, Record
from .transport.params import Params
from .transport.reliable import ACK_MATRIX_MAX, ReliableStream, StreamStatistics
from .transport.unicast import UnicastAck, UnicastSend, UnicastStreams
from .wire import (
    ORDER_CODES,
    AggregateFields,
    Flag,
    MsgType,
    encode_digest,
    encode_entries,
    encode_null,
    encode_nack,
    encode_records,
    encode_stable,
    encode_unicast,
    group_tag,
)

Frame = tuple[MsgType, "int | None", Flag, bytes]


# The group's one output channel to the node besides its frames (``take_events``):
# deliveries and what view changes did, in the order the application must see them.


@dataclass(frozen=True, slots=True)
class Delivered:
    """Deliver ``messages``, in this order, in the view ``view_id`` (during a
    change, the old one). ``unicast``: addressed to us alone."""

    messages: tuple[Message, ...]
    view_id: str
    unicast: bool = False


@dataclass(frozen=True, slots=True)
class OptimisticBegan:
    """A change began: sends go out under this proposed view."""

    view: View


@dataclass(frozen=True, slots=True)
class Installed:
    old: View
    new: View
    leavers: frozenset[int]
    """Members that left gracefully (the rest of old - new failed)."""
    rejoined: frozenset[int] = frozenset()
    """Members of both views that did not move from ``old`` with us (they
    restarted, or came back from another component): they failed out of
    ``old`` and joined ``new``; a ``Transitional`` names the members that did."""


@dataclass(frozen=True, slots=True)
class RolledBack:
    """An optimistic message no member delivers: its proposal lost."""

    message: Message


@dataclass(frozen=True, slots=True)
class Undelivered:
    """Our own message ``seq`` that will not be delivered (the node reports
    ``NotDelivered``): a multicast we will not deliver (``reason`` is one of
    ``synchrony``'s), or a unicast to ``dest`` that left (or restarted)
    before acknowledging it."""

    seq: int
    reason: str
    dest: int | None = None


DESTINATION_LEFT = "destination_left"


@dataclass(frozen=True, slots=True)
class Transitional:
    """The deliveries that follow, up to the next ``Installed``, are made in
    ``view`` among ``members`` only (extended virtual synchrony's
    transitional configuration)."""

    view: View
    members: tuple[int, ...]


GroupEvent = Delivered | OptimisticBegan | Installed | RolledBack | Undelivered | Transitional
_KIND_TYPES = {"data": MsgType.DATA, "retransmit": MsgType.RETRANSMIT, "gossip": MsgType.GOSSIP}


MAX_EPOCH = 2**62
"""Control messages of epochs from here on are ignored (found by fuzzing: a
beacon at 2**63 - 1 made us propose 2**63, which no decoder accepts)."""

MAX_REJECTED = 1_024
"""Members refused for joining with another order that we remember; past it
the oldest is forgotten (it may be refused again when it next says hello)."""


class BoundedSet:
    """A set of member ids that forgets its oldest entry past ``cap``."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self._items: dict[int, None] = {}  # insertion-ordered: the first key is the oldest
        self.forgotten = 0

    def add(self, item: int) -> None:
        self._items.pop(item, None)
        self._items[item] = None
        if len(self._items) > self.cap:
            del self._items[next(iter(self._items))]
            self.forgotten += 1

    def discard(self, item: int) -> None:
        self._items.pop(item, None)

    def __contains__(self, item: object) -> bool:
        return item in self._items

    def __len__(self) -> int:
        return len(self._items)


class GroupStack:
    """View, reliable streams and outbox of one group on one member."""

    def __init__(self, name: str, order: Order, me: int, members: Iterable[int], params: Params,
                 rng: random.Random, now: float, from_start: bool = True, *, first_seq: int = 1,
                 incarnation: int = 0) -> None:
        self.name = name
        self.tag = group_tag(name)
        self.order = order
        self.me = me
        self.params = params
        initial = roster_of(members).with_member(me)
        if len(initial) > params.max_members:
            raise UsageError(f"group {name!r}: {len(initial)} members given, Config.max_members is "
                             f"{params.max_members}; raise it or join with fewer")
        self.agreement = ViewAgreement(me, initial, params, now, self.tag, epoch=1 if len(initial) > 1 else 0,
                                       ordered=order is not Order.FIFO, incarnation=incarnation)
        self._clock = 0
        self.ordering = self._new_ordering({})
        self.events: list[GroupEvent] = []
        """Deliveries and view events, in the order the node must report them."""
        self.sync = ViewChange(me)
        """The view-change state: its phase, what is held, rolled back, withdrawn."""
        self.own_last = 0
        self.awaiting: set[int] = set()
        """Our own multicasts (first record) with no outcome yet: neither
        delivered here, nor rolled back, nor reported not delivered."""
        self._request_at: float | None = None
        self.rejected = BoundedSet(MAX_REJECTED)
        """Members refused for joining with another order: never admitted."""
        self.confirmed_beacon: tuple[int, int, int] | None = None
        """(coordinator, incarnation, epoch) of a beacon that listed exactly our
        view: its repeats need not be decoded (O(N) member lists at scale)."""
        self.incarnations: dict[int, int] = {}
        """The incarnation each beacon sender last announced (bounded: see ``_on_beacon``)."""
        self.delivered_high: dict[int, int] = {}
        """Per sender, the last multicast record we delivered, in any view.
        A flush reports it so that no commit rolls back what we delivered,
        even in a view long left (randomized total-order machine, seed
        567377617: a coordinator that had delivered a message in a view it
        then left alone committed a later view that rolled it back). Kept
        for members of our view and a few others (``_forget_departed``)."""
        self.joined_at: dict[int, int] = {}
        """Epoch of the view that admitted each member newer than our first view."""
        self.joining = False
        """We announced our join and no member with our order has answered yet."""
        self._promise_requested = False
        self._order_due = False
        """Own messages went into the order since it was last asked what is deliverable."""
        late = () if from_start else tuple(m for m in self.view.members if m != me)
        # an ordered group's messages list every ACK gathered before them (their
        # causal past), and its idle members promise by multicasting their ACKs (nulls)
        self.stream = ReliableStream(me, self.view.members, params, rng, now, first_seq,
                                     ordered=order is not Order.FIFO)
        if late:
            self.stream.set_members(self.view.members, late=late)
        self._choose_promises()
        self.unicast = UnicastStreams(me, params, incarnation)
        self.outbox: list[Record] = []
        self._outbox_bytes = 0
        self.flush_at: float | None = None
        self.next_beacon: float | None = None
        """Coordinators beacon every ``beacon_interval`` (set by the node)."""
        self.last_send = -math.inf

    @property
    def view(self) -> View:
        return self.agreement.view

    def clock(self) -> int:
        """Our Lamport clock (ordered groups): the largest timestamp we sent
        or took into our order, in any view. What we send next carries more."""
        return self._clock if self.ordering is None else max(self._clock, self.ordering.clock)

    def _choose_promises(self) -> None:
        """Total and safe order promise by nulls in small views and by the
        stability all-reduce in large ones (``Config.promises``): chosen per view."""
        gossip = self._promises_by_gossip()
        self.stream.promise_gossip = gossip
        self.stream.promise_nulls = self.order is not Order.FIFO and not gossip
        if gossip and self.ordering is not None:
            self.ordering.set_floor(0)

    def _promises_by_gossip(self) -> bool:
        mode = self.params.promises
        return self.order in (Order.TOTAL, Order.SAFE) and (
            mode == "gossip" or mode == "auto" and len(self.view.members) > ACK_MATRIX_MAX)

    def _advance_floor(self) -> None:
        """Promises by gossip: the order delivers up to the all-reduce's floor."""
        ordering = self.ordering
        if ordering is not None and ordering.floor is not None:
            floor = self.stream.promise_floor()
            if floor > ordering.floor:
                ordering.set_floor(floor)
                self._release(self._deliverable())

    def _new_ordering(self, starts: dict[int, int]) -> OrderingLayer | None:
        if self.order is Order.FIFO:
            return None
        ordering = OrderingLayer(self.me, self.agreement.view.members, self.order, self._promises_by_gossip())
        for member, seq in starts.items():
            ordering.start_at(member, seq)
        return ordering

    # ------------------------------------------------------------------ the node's view of the group

    def coordinating(self) -> bool:
        return self.agreement.coordinator() == self.me

    def failed_members(self) -> frozenset[int]:
        """Members our agreement holds failed (the detector keeps their verdicts)."""
        return frozenset(self.agreement.failed)

    def coordinator(self) -> int:
        return self.agreement.coordinator()

    def take_charge(self, now: float) -> list:
        """Propose ourselves: our coordinator went silent while our verdict stands."""
        return self.on_agreement(self.agreement.take_charge(now), now)

    def lowest_live(self, count: int, besides: tuple[int, ...]) -> list[int]:
        """The ``count`` lowest members of the view not failed, not leaving and
        not in ``besides``: the coordinator and its successors."""
        agreement, found = self.agreement, []
        for member in self.view.members:
            if member not in besides and member not in agreement.failed and member not in agreement.leaving:
                found.append(member)
                if len(found) == count:
                    break
        return found

    def reject(self, member: int) -> None:
        """``member`` joins with another order: never admitted."""
        self.rejected.add(member)

    def merge_joiner(self, member: int, now: float) -> list:
        """A joiner announced itself: merge it without waiting for its beacon."""
        return self.on_agreement(self.agreement.merge_with({member: 0}, member, now), now)

    def beacon_due(self, now: float, interval: float) -> bool:
        """Whether a beacon of ours goes out now (coordinators beacon every ``interval``)."""
        if self.next_beacon is None or self.next_beacon > now:
            return False
        self.next_beacon = now + interval
        return self.coordinating()

    def beacon(self, incarnation: int) -> CtlSend:
        return self.agreement.beacon(incarnation, ORDER_CODES.index(self.order))

    def window(self) -> int:
        """Unstable records held here (the flow-control window)."""
        return self.stream.window()

    def waiting(self) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
        """(sender, seq) of messages received and not yet delivered: held for a
        view change, and waiting for their order."""
        ordered = [] if self.ordering is None else self.ordering.waiting_ids()
        return [(m.sender, m.seq) for m in self.sync.held], ordered

    def take_events(self) -> list[GroupEvent]:
        """What the node must report, in order; the group forgets it."""
        events, self.events = self.events, []
        return events

    def stream_statistics(self) -> StreamStatistics:
        return self.stream.statistics()

    def unicast_retransmissions(self) -> int:
        return self.unicast.retransmissions

    @property
    def fate_unknown(self) -> int:
        """Own multicasts with no outcome yet (in flight, or waiting for their
        order or a view change); 0 whenever the group is at rest."""
        return len(self.awaiting)

    # ------------------------------------------------------------------ membership

    def snapshot(self) -> tuple[int, dict[int, int]]:
        """Our last own record and how far we hold each member's stream."""
        return self.stream.contig_of(self.me), self.sync.snapshot(dict(self.stream.received_vector()))

    def on_agreement(self, outputs: list[AgreementOut], now: float) -> list:
        """Apply what the view agreement decided; returns control frames to send.
        Our own multicast proposals and commits, and replies to ourselves, are
        handled here at once (the network does not loop them back)."""
        frames: list = []
        for output in outputs:
            if isinstance(output, CtlSend):
                frames.append(output)
                if output.dst is None and output.msg_type in (MsgType.PROPOSE, MsgType.COMMIT) \
                        or output.dst == self.me:
                    frames += self.on_control(self.me, decode_view_message(output.msg_type, output.body), now)
            elif isinstance(output, Freeze):
                self.sync.freeze(output.limits)
                self.stream.stability_cap = dict(output.limits)
                self.events.append(OptimisticBegan(output.optimistic))
            elif isinstance(output, Commit):
                frames += self._begin_commit(output, now)
        return [f for f in frames if not (isinstance(f, CtlSend) and f.dst == self.me)]

    def on_control(self, src: int, msg: ViewMessage, now: float, incarnation: int | None = None) -> list:
        """``incarnation``: the sender's, from the datagram header. Noted for
        every control message, so a beacon can be told apart from a restart
        even when it is the first beacon heard from that member."""
        agreement = self.agreement
        if msg.epoch >= MAX_EPOCH and src != self.me:
            return []  # absurd: our next proposal (one above) must still fit the wire's 63 bits
        if incarnation is not None and type(msg) is not Beacon:
            self._note_incarnation(src, incarnation)
        if type(msg) is Propose:
            frames = self.on_agreement(agreement.on_propose(src, msg, self.snapshot(), now, self.delivered_high,
                                                            incarnation), now)
            return frames + self._answer_deferred(now)
        if type(msg) is Flush:
            return self.on_agreement(agreement.on_flush(src, msg, now, incarnation), now)
        if type(msg) is CommitMsg:
            return self.on_agreement(agreement.on_commit(src, msg, incarnation), now)
        if type(msg) is InstalledMsg:
            agreement.on_installed(src, msg)
        elif type(msg) is Beacon:
            return self.on_agreement(self._on_beacon(src, msg, now), now)
        return []

    def _note_incarnation(self, src: int, incarnation: int) -> None:
        self.incarnations[src] = incarnation
        if len(self.incarnations) > 2 * len(self.view.members) + 64:  # forget senders long gone
            self.incarnations = {m: i for m, i in self.incarnations.items() if m in self.view or m == src}
        if len(self.delivered_high) > 2 * len(self.view.members) + 64:
            self.delivered_high = {m: s for m, s in self.delivered_high.items() if m in self.view}

    def _on_beacon(self, src: int, msg: Beacon, now: float) -> list[AgreementOut]:
        if msg.order_code != ORDER_CODES.index(self.order) or src in self.rejected:
            return []
        known = self.incarnations.get(src)
        self._note_incarnation(src, msg.incarnation)
        if msg.epoch == self.view.epoch and (msg.members is self.view.members or msg.members == self.view.members) \
                and src in self.view:
            # the usual beacon: our own view, listed as we list it (a tuple
            # comparison, not a set and a sort of 10,000 ids per member per beacon)
            self.confirmed_beacon = (src, msg.incarnation, msg.epoch)
            return []
        members = set(msg.members) or {src}
        if src in self.view:
            if msg.epoch == self.view.epoch and tuple(sorted(members)) == self.view.members:
                self.confirmed_beacon = (src, msg.incarnation, msg.epoch)
                return []
            if members & set(self.view.members) == {src} and len(self.view.members) > 1:
                if known in (None, msg.incarnation) and msg.epoch < self.joined_at.get(src, -1):
                    # its discovery beacon, overtaken by its join (another socket, another path);
                    # a restart shows a new incarnation to the coordinator, which heard it flush
                    return []
                return self.agreement.member_failed(src, now)  # it restarted, or missed its exclusion
            if self.me not in members and msg.epoch >= self.view.epoch and not self.completing():
                # we missed the commit that excluded us; or, at our own epoch (no
                # incarnation of a coordinator installs two views of one epoch),
                # it restarted before we ever heard its former self
                return self.agreement.left_out(src, max(msg.epoch, self.view.epoch + 1))
            if msg.epoch >= self.view.epoch and tuple(sorted(members)) != self.view.members \
                    and src != self.agreement.coordinator():
                return self.agreement.diverge(dict.fromkeys(members, msg.epoch), now)  # two views overlap
            return []
        mates = members & set(self.view.members)
        if mates and self.me not in members and msg.epoch > self.view.epoch and not self.completing():
            # members of our view are in a later view without us: we missed the
            # commit that excluded us, and its coordinator is not ours, so no
            # beacon of our coordinator would tell us (randomized total-order
            # machine, seed 3149061291: a wedge)
            return self.agreement.left_out(src, msg.epoch)
        return self.agreement.merge_with(dict.fromkeys(members, msg.epoch), src, now)

    def completing(self) -> bool:
        """A commit is being completed here (its cut fetched, then installed)."""
        return self.sync.completing

    def _begin_commit(self, commit: Commit, now: float) -> list:
        """SGCS section 4.2, phase 2: the commit names the cut. Fetch every
        stream up to it and deliver that in the old view."""
        assert commit is self.agreement.committing  # the agreement keeps the one record of it
        if commit.view.members == (self.me,) and not commit.cut:
            self.sync.begin_alone()
            return self._install(now)  # left out: start again alone
        old = self.view.members
        # A FIFO member that lags (it missed the commit of our view) is ours up
        # to the cut: we may have delivered its messages sent under our view's
        # proposal on receipt, so every member of our view delivers them here.
        # An ordered group delivers nothing at once: its laggards are foreign
        # (the cut leaves their messages to the next view; agreement._holds_for).
        fifo, agreement = self.ordering is None, self.agreement
        foreign = frozenset(m for m in old if m in commit.view and not commit.shares(m, self.view)
                            and not (fifo and agreement.lags(m, commit)))
        # FIFO too: a member of our view delivered a foreign sender's records
        # up to ``Commit.foreign`` on receipt (randomized FIFO machine,
        # explore.py seed 1682738745: a restarted sender's last record,
        # delivered by two members of the closing view and not by a third)
        limits = {s: commit.foreign.get(s, 0) if s in foreign else commit.cut.get(s, 0) for s in old}
        passed = self.sync.begin(limits, foreign, self.view.epoch)
        for sender in old:
            self.stream.expect(sender, limits[sender], now, holders=commit.view.members)
        self.stream.stability_cap = dict(limits)
        if self.ordering is not None:
            # A foreign sender never installed our view (or restarted since):
            # what we received of it is not ours to deliver here, beyond what a
            # member of our view delivered before it flushed, which every member
            # delivers here (``Commit.foreign``; members deliver nothing between
            # their flush and the commit). Some members received more, others
            # did not, or hold it back at their snapshot: delivering it would
            # split our view (randomized total-order machine, seeds 7, 33064342
            # and 567377617: invariant 5). It comes afresh after the cut.
            for sender in sorted(foreign):
                limit = limits[sender]
                self.ordering.truncate_at_first(sender, lambda m: m.last > limit)
        self._release(self._order(passed))
        self._release(self._deliverable())  # frozen since the proposal
        return self.progress(now)

    def progress(self, now: float) -> list:
        """Install the committed view once every stream is complete up to the
        cut. If that takes ``cut_timeout`` (the last holder of a record
        is gone, or the group moved on), give up: start again alone and merge
        back, which keeps every view we install consistent."""
        sync, commit = self.sync, self.agreement.committing
        if not sync.completing or commit is None:
            return []
        limits = sync.limits or {}
        if all(self.stream.contig_of(s) >= limits.get(s, 0) for s in self.view.members if s != self.me):
            return self._install(now)
        if sync.overdue(now, self.params.cut_timeout):
            sync.give_up(commit)
            return self.on_agreement(self.agreement.give_up(commit), now)
        return []

    def _install(self, now: float) -> list:
        """SGCS section 4.2, phase 3: the old view's messages are delivered;
        install the new view and sort out what was held for it."""
        sync, commit = self.sync, self.agreement.committing
        assert commit is not None
        sync.install()
        old = self.view
        new = commit.view.members
        foreign = sync.foreign
        moving = tuple(m for m in old.members if m in new and m not in foreign)
        # left out (a commit without us, missed or abandoned): a singleton
        # with no cut, made here rather than by a coordinator's agreement
        announced = self._drain_old_view(left_out=new == (self.me,) and len(old.members) > 1 and not commit.cut
                                         and commit.coordinator != self.me, moving=moving)
        newcomers = tuple(m for m in new if m not in old or m in foreign)
        self.joined_at = {m: e for m, e in self.joined_at.items() if m in commit.view}
        self.joined_at.update(dict.fromkeys(newcomers, commit.view.epoch))
        self.stream.stability_cap = None
        self.stream.set_members(new, starts={m: commit.cut.get(m, 0) for m in newcomers})
        for member in old.members:
            if member not in new:
                self._forget_unicasts(member)
                # its stream ended with this view: a flush that still reported
                # its last delivery would start its next membership's stream
                # there, after the records it numbers afresh on rejoining
                self.delivered_high.pop(member, None)
        leavers = frozenset(self.agreement.leaving)
        frames = self.agreement.installed(commit, now)
        # The new view's order starts after the cut and after what was rolled
        # back or withdrawn: those records never enter it, and a promise that
        # acknowledges one must not wait for it (randomized total-order
        # machine, explore.py seed 3278971755: every member waited for ever
        # on a newcomer's withdrawn first record).
        self._clock = self.clock()  # a Lamport clock never goes back, whatever the view
        self.ordering = self._new_ordering({m: max(commit.cut.get(m, 0), commit.rollback.get(m, 0),
                                                   commit.withdrawn.get(m, 0)) for m in new})
        self._choose_promises()
        rejoined = frozenset(m for m in foreign if m in new)  # foreign: members of old only
        if rejoined and not announced:
            # Extended virtual synchrony: the members that move together from
            # the old view are named before the new one, so a member of both
            # views that did not come from the old one (a new incarnation, or a
            # member back from another component) is not taken to have
            # delivered the old view's messages with us (exhaustive checker,
            # depth 5: "send 2; join 4; crash 2; restart 2; partition 1+3+4;
            # settle" - the restarted 2 looked like the sender of a message
            # nobody delivered)
            self.events.append(Transitional(old, moving))
        self.events.append(Installed(old, commit.view, leavers, rejoined))
        kept, rolled_back = sync.settle(commit, old, new, foreign, left_out=new == (self.me,) and len(old.members) > 1)
        self._report(rolled_back)
        self._release(self._order(sync.gate(kept, self.view.epoch)))  # a later change's messages stay held
        if newcomers and self.next_beacon is not None:
            # A view that grew announces itself at once: a lower coordinator
            # whose merge proposal the members refused as partial (it knew an
            # older, smaller view of ours) proposes the whole union now, not a
            # beacon interval later (8 processes started together: one was
            # left alone for two intervals, 2.9 s instead of 0.9 s).
            self.next_beacon = now
        return self.on_agreement(frames, now)

    def _drain_old_view(self, left_out: bool = False, moving: tuple[int, ...] = ()) -> bool:
        """Deliver everything up to the cut in the old view; ordered groups
        stop waiting for promises (every member holds the same cut).

        A member left out of the commit holds no agreed cut. The others'
        messages its order still waits for are discarded: a sender that went
        on delivers those past the cut in its next view, after messages it
        placed before them. Its own messages are delivered, in a transitional
        view of itself alone (extended virtual synchrony's self-delivery,
        Moser, Amir et al. 1994): the others delivered those within their cut
        in this view, in the same order (senders state their timestamps), and
        nobody delivers the rest (we are in none of their next views). Without
        this, what it sent in a partition that healed before both sides
        installed their views was delivered by nobody, its sender included.

        In safe order, what the drain delivers was not acknowledged by every
        member of the old view (else it would have gone already): as in
        Spread's extended virtual synchrony, it is delivered in a transitional
        view of the members ``moving`` with us, announced first (a replicated
        queue applied a PUT that its sender delivered at its own singleton
        commit and nobody else had: nemesis, queue workload, seed 11).
        Returns whether a transitional view was announced."""
        if left_out:
            own = [] if self.ordering is None else [_message(m) for m in self.ordering.take_stream(self.me)]
            own = sorted(own + self.sync.take_own_held(), key=lambda m: m.seq)
            if self.ordering is not None:
                self.sync.discarded += len(self.ordering.waiting_ids())
            if own:
                self.events.append(Transitional(self.view, (self.me,)))
                self._release(own)
                return True
        elif self.ordering is not None:
            delivered, discarded = self.ordering.drain()
            announce = bool(delivered) and self.order is Order.SAFE
            if announce:
                self.events.append(Transitional(self.view, moving))
            self._release([_message(m) for m in delivered])
            self.sync.discarded += len(discarded)
            return announce
        return False

    def suspect(self, member: int) -> bool:
        """The detector suspects ``member``; returns whether it is in our view."""
        if member not in self.view:
            return False
        self.agreement.suspected.add(member)
        return True

    def member_alive(self, member: int) -> bool:
        """The detector cleared ``member`` (heard it, or a neighbour did): a
        verdict against it no longer stands. Returns whether it is in our view."""
        self.agreement.suspected.discard(member)
        if member not in self.view:
            return False
        self.agreement.member_alive(member)
        return True

    def reread_suspicions(self, suspects: Iterable[int]) -> None:
        """After an install: the members of the new view the detector is confirming."""
        self.agreement.suspected = {m for m in suspects if m in self.view}

    def member_failed(self, member: int, now: float) -> list:
        return self.on_agreement(self.agreement.member_failed(member, now), now)

    def member_restarted(self, member: int, now: float) -> list:
        self._forget_unicasts(member)  # the new incarnation holds nothing of either stream
        return self.on_agreement(self.agreement.member_restarted(member, now), now)

    def member_leaving(self, member: int, now: float) -> list:
        return self.on_agreement(self.agreement.member_leaving(member, now), now)

    # ------------------------------------------------------------------ sending

    def send(self, payload: bytes, now: float) -> tuple[int, list[Out], View | None]:
        """Number and buffer one multicast; returns its seq, the transport's
        outputs and the optimistic view it is sent under (None: our view)."""
        optimistic = self.agreement.optimistic_view() if self.sync.changing else None
        clock = 0
        if self.ordering is not None and self.order is not Order.CAUSAL:
            clock = self._clock = self.clock() + 1
        seq, outputs = self.stream.send(payload, now, None if optimistic is None else optimistic.epoch, clock)
        self.awaiting.add(seq)
        self.last_send = now
        return seq, outputs, optimistic

    def unicast_blocked(self, member: int) -> bool:
        return self.unicast.blocked(member)

    def send_unicast(self, member: int, payload: bytes, now: float) -> tuple[int, UnicastSend]:
        return self.unicast.send(member, payload, now)

    def ready_at(self, now: float) -> float | None:
        if self.sync.changing and not self.params.optimistic:
            return None  # pessimistic mode: sends wait for the new view
        delay = self.stream.send_delay()
        return None if delay is None else max(now, self.last_send + delay)

    def queue(self, outputs: list[Out], now: float) -> None:
        """Multicast records wait in the outbox; nothing else comes from a send."""
        for output in outputs:
            assert isinstance(output, OutRecords) and output.dst is None
            self.outbox.extend(output.records)
            self._outbox_bytes += sum(len(r.payload) for r in output.records)
        if self.flush_at is None:
            self.flush_at = now + self.params.flush_delay

    def outbox_full(self) -> bool:
        return self._outbox_bytes >= self.params.bundle_size

    def take_outbox(self, now: float) -> list[Out]:
        records, self.outbox, self._outbox_bytes, self.flush_at = self.outbox, [], 0, None
        if self._order_due and self.ordering is not None:
            ordered = self._deliverable()
            self._watch_blocker(now)  # our message may wait on a promise that was lost
            self._release(ordered)
        return [OutRecords(None, tuple(records), "data")] if records else []

    # ------------------------------------------------------------------ receiving

    def accept_own(self, seq: int, outputs: list[Out], payload: bytes) -> None:
        """Our own multicast, to deliver here too: at once in FIFO groups,
        otherwise when its order allows."""
        records = outputs[0].records if outputs and isinstance(outputs[0], OutRecords) else ()
        self.own_last = records[-1].seq if records else seq
        acks = records[0].acks if records else ()
        proposal = self.agreement.optimistic_view() if self.sync.changing else None
        tag = proposal.epoch % 64 if proposal is not None else 0
        clock = records[0].clock if records else 0
        message = tuple.__new__(Message, (self.me, seq, acks, payload, self.own_last, proposal is not None, tag, clock))
        if self.ordering is None:
            self.accept([message])
            return
        # Ordered groups: into the order now, but what became deliverable is
        # asked at the flush (``take_outbox``), once per batch of sends: a
        # message of ours waits for the others' promises anyway.
        sync = self.sync
        passed = sync.gate([message], self.view.epoch) if sync.gating([message]) else [message]
        for own in passed:
            self.ordering.add(tuple.__new__(OrderedMessage, (own.sender, own.seq, own.last or own.seq, own.acks, own,
                                                             own.clock)))
        self.stream.lamport = self.clock()
        self._order_due = True

    def on_records(self, sender: int, records: tuple[Record, ...], kind: str, now: float) -> None:
        """A datagram's multicast records of ``sender``: what may be delivered now goes to ``events``."""
        self.accept(self.stream.on_records(sender, records, kind, now), now)

    def on_unicast_records(self, sender: int, records: tuple[Record, ...], now: float,
                           incarnation: int = 0) -> UnicastAck:
        """Unicast records to us from ``incarnation`` of ``sender``: complete
        messages go to ``events``; returns our ACK."""
        messages, ack = self.unicast.on_records(sender, records, now, incarnation)
        if messages:
            self.events.append(Delivered(tuple(messages), self.view.view_id, True))
        return ack

    def on_nack(self, src: int, sender: int, ranges: tuple[tuple[int, int], ...], pull: bool) -> list[Out]:
        return self.stream.on_nack(src, sender, ranges, pull)

    def accept(self, messages: list[Message], now: float = 0.0) -> None:
        """Messages from the transport, in FIFO order per sender: those that
        may be delivered now go to ``events``, in delivery order."""
        sync = self.sync
        if sync.void or sync.withdrawn:
            messages, rolled_back = sync.screen(messages)
            self._report(rolled_back)
        if sync.gating(messages):
            messages = sync.gate(messages, self.view.epoch)
        if self.ordering is None:
            self._release(messages)
            return
        self._release(self._order(messages))
        if messages:
            self._watch_blocker(now)
        self._advance_floor()

    def _order(self, messages: list[Message]) -> list[Message]:
        if self.ordering is None:
            return messages
        if not messages:
            return []
        add = self.ordering.add
        for message in messages:
            add(tuple.__new__(OrderedMessage, (message.sender, message.seq, message.last or message.seq,
                                               message.acks, message, message.clock)))
        self.stream.lamport = self.clock()
        return self._deliverable()

    def _deliverable(self) -> list[Message]:
        """What the order lets go now. Nothing while we are frozen at a
        snapshot (answered a proposal, no commit yet): our flush reported what
        we delivered so far, and the commit's cut must cover all a member
        delivered in the view it closes (``Commit.foreign``)."""
        if self.ordering is None or self.sync.frozen:
            return []
        self._order_due = False
        return [_message(m) for m in self.ordering.deliverable()]

    def _watch_blocker(self, now: float) -> None:
        """A message waiting on one member's promise for ``promise_retry`` (3
        ACK intervals) means that promise was probably lost: ask that member
        for a fresh one."""
        if self.ordering is None or self.ordering.blocker is None:
            self._request_at = None
        elif self._request_at is None:
            self._request_at = now + self.params.promise_retry

    def _request_promise(self, now: float) -> list[Out]:
        if self.ordering is None or self.ordering.blocker is None:
            self._request_at = None
            return []
        self._request_at = now + self.params.promise_retry
        member = self.ordering.blocker
        return [OutDigest(member, ((member, self.stream.contig_of(member)),))]

    def _release(self, messages: list[Message]) -> None:
        """Hand ``messages`` to the node for delivery in our current view. A
        flush reports the last of each sender's we delivered (``delivered_high``)."""
        if messages:
            high, me, awaiting = self.delivered_high, self.me, self.awaiting
            for message in messages:
                sender = message.sender
                high[sender] = message.last or message.seq
                if sender == me:
                    awaiting.discard(message.seq)
            self.events.append(Delivered(tuple(messages), self.view.view_id))

    def _report(self, rolled_back: list[Message]) -> None:
        """Rolled-back messages, then our own that a change dropped: each is an
        outcome at its sender (``awaiting``)."""
        awaiting = self.awaiting
        for message in rolled_back:
            self.events.append(RolledBack(message))
            if message.sender == self.me:
                awaiting.discard(message.seq)
        for message, reason in self.sync.take_undelivered():
            self.events.append(Undelivered(message.seq, reason))
            awaiting.discard(message.seq)

    def _forget_unicasts(self, member: int) -> None:
        """``member`` left or restarted: our unicasts it never acknowledged
        get their outcome (not delivered)."""
        for seq in self.unicast.forget(member):
            self.events.append(Undelivered(seq, DESTINATION_LEFT, member))

    def on_entries(self, msg_type: MsgType, src: int, entries: tuple[tuple[int, int], ...], now: float,
                   aggregate: AggregateFields | None = None, extra: int = 0) -> list:
        """``extra``: a null's clock (its promise, ordered groups; 0: none), or
        the roster tag a stability announcement holds for."""
        if msg_type is MsgType.DIGEST:
            outputs = self.stream.on_digest(src, entries, now, None if aggregate is None else Aggregate(*aggregate))
            self._advance_floor()
            if self.stream.promise_nulls and self.ordering is not None and any(s == self.me for s, _ in entries):
                self._promise_requested = True  # a member waits for our promise
                outputs.append(OutNull(src, ()))
            return outputs
        if msg_type is MsgType.NULL:
            self.stream.on_acks(src, entries, now)
            if self.ordering is not None and src in self.view:
                self.ordering.on_null(src, entries, extra or None)
                self._release(self._deliverable())
                self._watch_blocker(now)
        elif msg_type is MsgType.STABLE:
            outputs = self.stream.on_stable(src, extra, entries)
            self._advance_floor()
            return outputs
        elif msg_type is MsgType.UNICAST_ACK:
            for member, high in entries:
                if member == self.me:
                    self.unicast.on_ack(src, high)
        return []

    def drop_counts(self) -> dict[str, int]:
        """What this group dropped at a cap, by reason (non-zero only): records
        and partial messages of both streams, refused joiners, stale promises
        and forgotten refusals. The node adds them to its ``drop_reasons``."""
        counts = dict(self.stream.drops())
        for reason, n in self.unicast.drops.items():
            counts[f"unicast_{reason}"] = n
        extra = {"members_full": self.agreement.refused_joiners, "rejected_forgotten": self.rejected.forgotten,
                 "promises_dropped": 0 if self.ordering is None else self.ordering.promises_dropped}
        counts.update((reason, n) for reason, n in extra.items() if n)
        return counts

    def on_timeout(self, now: float) -> list:
        outputs = [*self.stream.on_timeout(now), *self.unicast.on_timeout(now, self.params.push_budget)]
        if self._request_at is not None and now >= self._request_at:
            outputs += self._request_promise(now)
        self._advance_floor()
        outputs += self.on_agreement(self.agreement.on_timeout(now), now)
        return outputs + self._answer_deferred(now) + self.progress(now)

    def _answer_deferred(self, now: float) -> list:
        """A proposal that waited while we were bound to another (an abort or
        the take-over timer released us): answer it now."""
        deferred = self.agreement.take_deferred()
        if deferred is None:
            return []
        src, proposal, incarnation = deferred
        return self.on_control(src, proposal, now, incarnation)

    def next_deadline(self) -> float | None:
        earliest = self.stream.next_deadline()
        for deadline in (self.flush_at, self.next_beacon, self.unicast.next_deadline(), self._request_at,
                         self.agreement.next_deadline()):
            if deadline is not None and (earliest is None or deadline < earliest):
                earliest = deadline
        if self.sync.completing:
            deadline = self.sync.deadline
            if deadline is not None and (earliest is None or deadline < earliest):
                earliest = deadline
        return earliest

    # ------------------------------------------------------------------ framing

    def frame(self, outputs: list) -> list[Frame]:
        frames: list[Frame] = []
        nulls: list[OutNull] = []
        for output in outputs:
            if type(output) is CtlSend:
                frames.append((output.msg_type, output.dst, Flag.NONE, output.body))
            elif self.ordering is not None and type(output) is OutNull:
                nulls.append(output)
            else:
                frames.extend(_FRAMERS[type(output)](self, output))
        if nulls:
            frames.extend(self._promise(nulls))
        return frames

    def _promise(self, nulls: list[OutNull]) -> list[Frame]:
        """In ordered groups every member needs every member's ACKs (they are
        its promises), so the nulls of one step become one multicast, which
        also says how far our own stream went when we made the promise."""
        entries = {self.me: self.own_last}
        if self._promise_requested:
            self._promise_requested = False
            entries.update(self.stream.received_vector())
        for null in nulls:
            entries.update(null.acks)
        return [(MsgType.NULL, None, Flag.NONE, encode_null(self.tag, tuple(sorted(entries.items())), self.clock()))]

    def _records(self, out: OutRecords) -> list[Frame]:
        msg_type = _KIND_TYPES[out.kind]
        return [(msg_type, out.dst, Flag.NONE, encode_records(self.tag, batch))
                for batch in pack(out.records, self.params.bundle_size)]

    def _nack(self, out: OutNack) -> list[Frame]:
        return [(MsgType.NACK, out.dst, Flag.NONE, encode_nack(self.tag, out.sender, out.ranges, out.pull))]

    def _digest(self, out: OutDigest) -> list[Frame]:
        aggregate = out.aggregate
        wire = None if aggregate is None else (aggregate.level, aggregate.roster, aggregate.floors, aggregate.clock,
                                               aggregate.seq, aggregate.flags)
        return [(MsgType.DIGEST, out.dst, Flag.NONE, encode_digest(self.tag, out.entries, wire))]

    def _null(self, out: OutNull) -> list[Frame]:
        return [(MsgType.NULL, out.dst, Flag.NONE, encode_entries(self.tag, out.acks))]

    def _stable(self, out: OutStable) -> list[Frame]:
        return [(MsgType.STABLE, out.dst, Flag.NONE, encode_stable(self.tag, out.roster, out.entries))]

    def _unicast(self, out: UnicastSend) -> list[Frame]:
        return [(MsgType.DATA, out.dst, Flag.UNICAST, encode_unicast(out.dst, self.tag, batch))
                for batch in pack(out.records, self.params.bundle_size, unicast=True)]

    def _unicast_ack(self, out: UnicastAck) -> list[Frame]:
        return [(MsgType.UNICAST_ACK, out.dst, Flag.NONE, encode_entries(self.tag, ((out.dst, out.high),)))]


def _message(m: OrderedMessage) -> Message:
    """The group's message that ``m`` carries (``_order`` attached it)."""
    message = m.payload
    assert isinstance(message, Message)
    return message


_FRAMERS: dict[type, Callable[[GroupStack, Any], list[Frame]]] = {
    OutRecords: GroupStack._records,
    OutNack: GroupStack._nack,
    OutDigest: GroupStack._digest,
    OutNull: GroupStack._null,
    OutStable: GroupStack._stable,
    UnicastSend: GroupStack._unicast,
    UnicastAck: GroupStack._unicast_ack,
}
