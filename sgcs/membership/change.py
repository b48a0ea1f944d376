"""The view change of one group on one member: one owner for its state and its steps.

Theory of operation
-------------------
A view change (SGCS paper, section 4.2: initiate, agree, install) has a
control side and a data side on every member, and ``ViewChanges`` owns both:

* the **agreement** (``agreement.ViewAgreement``): what is proposed, flushed
  and committed, the member's stage and, as coordinator, where its change is
  (the tables ``stages.STAGES`` and ``stages.COORDINATING``);
* the **synchrony** (``synchrony.Synchrony``): which messages still belong
  to the old view and which wait for the new one (``synchrony.TRANSITIONS``).

``stage`` is the one answer to "is a change under way here"; ``PHASES``
says which data phase goes with each stage, and the exhaustive checker holds
every member to it in every state it reaches. ``docs/view-change.md`` prints
the tables.

This module carries each change through its steps, in order:

1. **Freeze** (phase 1). Our first answer to a proposal freezes a snapshot:
   nothing past it is delivered or becomes stable in the old view, and sends
   go out optimistically under the proposed view (``on_agreement``).
2. **Complete the cut** (phase 2, ``_begin_commit`` and ``progress``). The
   commit names the cut; each stream is fetched up to it and delivered in
   the old view. A foreign sender (it never installed our view) is delivered
   only up to what a member of our view delivered (``Commit.foreign``). If
   the cut is still incomplete after ``cut_timeout`` the change is given up:
   we start again alone, which keeps every installed view consistent.
3. **Install** (phase 3, ``_install``). The old view is drained (ordered
   groups stop waiting for promises; what safe order drains, and what a
   member left out of the commit sent itself, comes after a transitional
   view, as in extended virtual synchrony); the streams and the order start
   again after the cut; the held messages are delivered in the new view,
   rolled back or reported not delivered; then the view is announced.

Beacons drive joins and merges (``_on_beacon``): a coordinator's beacon of
another component proposes the union; one that shows a later view without
us means we missed our exclusion.

The group's streams, order and events are reached only through
``DataPlane``, which ``GroupStack`` implements: the stack does what this
module decides, and decides nothing about views.
"""

from __future__ import annotations

from typing import Iterable, Protocol

from ..transport.params import Params
from ..records import Message
from .agreement import AgreementOut, Commit, CtlSend, Freeze, AgreedView, ViewAgreement
from .messages import MAX_EPOCH, Beacon, CommitMsg, Flush, InstalledMsg, Propose, ViewMessage, decode_view_message
from .stages import Stage
from .synchrony import Synchrony
from ..wire import MsgType

MAX_REJECTED = 1_024
"""Members refused for joining with another order that we remember; past it
the oldest is forgotten (it may be refused again when it next says hello)."""


class BoundedSet:
    """A set of at most ``cap`` members; the oldest is forgotten first (counted)."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self._items: dict[int, None] = {}
        self.forgotten = 0

    def add(self, item: int) -> None:
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


class DataPlane(Protocol):
    """What a view change asks of the group's streams, order and events."""

    delivered_high: dict[int, int]
    """Per sender, the last multicast record we delivered, in any view."""

    def own_last_record(self) -> int: ...

    def received_vector(self) -> dict[int, int]: ...

    def cap_stability(self, limits: dict[int, int] | None) -> None:
        """No record past ``limits`` becomes stable (None: no cap)."""

    def began(self, optimistic: AgreedView) -> None:
        """Announce that sends now go out under ``optimistic``."""

    def fetch_cut(self, limits: dict[int, int], holders: tuple[int, ...], foreign: frozenset[int],
                  now: float) -> None:
        """Fetch each sender's stream up to ``limits`` from ``holders``; a
        foreign sender's messages past its limit leave the order."""

    def holds(self, limits: dict[int, int], senders: Iterable[int]) -> bool:
        """Every stream of ``senders`` is complete up to ``limits``."""

    def order_and_deliver(self, messages: list[Message]) -> None:
        """Into the order (ordered groups), and deliver what it lets go."""

    def deliver_ordered(self) -> None:
        """Deliver what the order lets go now."""

    def deliver(self, messages: list[Message]) -> None:
        """Deliver ``messages`` as they are, in the current view."""

    def take_own_ordered(self) -> tuple[list[Message], int]:
        """Our own messages waiting in the order, taken out; and how many of
        the others' wait there (discarded with the order)."""

    def drain_order(self) -> tuple[list[Message], int]:
        """Everything the order holds in delivery order, without waiting for
        promises; and how many it discards (incomplete)."""

    def transitional(self, view: AgreedView, members: tuple[int, ...]) -> None:
        """Announce that what follows is delivered in ``view`` among ``members`` only."""

    def restart_streams(self, members: tuple[int, ...], starts: dict[int, int]) -> None:
        """The streams of the new view; a newcomer's starts after ``starts``."""

    def forget_member(self, member: int) -> None:
        """``member`` left our view: our unicasts to it get their outcome."""

    def forget_unicasts(self, member: int) -> None:
        """``member`` restarted: our unicasts to it get their outcome."""

    def restart_order(self, starts: dict[int, int]) -> None:
        """The new view's order, each sender's starting after ``starts``."""

    def installed(self, old: AgreedView, new: AgreedView, leavers: frozenset[int], rejoined: frozenset[int]) -> None:
        """Announce the new view."""

    def report(self, rolled_back: list[Message]) -> None:
        """Report rolled-back messages, and our own that the change dropped."""


class ViewChanges:
    """The view of one group on one member, and every change that moves it."""

    def __init__(self, plane: DataPlane, me: int, members: tuple[int, ...], params: Params, now: float,
                 tag: int, order_code: int, *, ordered: bool, safe: bool, incarnation: int = 0) -> None:
        """``ordered``: causal, total or safe order; ``safe``: safe order
        (what the old view drains is delivered in a transitional view)."""
        self.plane = plane
        self.me = me
        self.params = params
        self.order_code = order_code
        self.ordered = ordered
        self.safe = safe
        self.agreement = ViewAgreement(me, members, params, now, tag, epoch=1 if len(members) > 1 else 0,
                                       ordered=ordered, incarnation=incarnation)
        self.sync = Synchrony(me)
        """The data side: its phase, what is held, rolled back, withdrawn."""
        self.rejected = BoundedSet(MAX_REJECTED)
        """Members refused for joining with another order: never admitted."""
        self.confirmed_beacon: tuple[int, int, int] | None = None
        """(coordinator, incarnation, epoch) of a beacon that listed exactly our
        view: its repeats need not be decoded (O(N) member lists at scale)."""
        self.incarnations: dict[int, int] = {}
        """The incarnation each beacon sender last announced (bounded: see ``_note_incarnation``)."""
        self.joined_at: dict[int, int] = {}
        """Epoch of the view that admitted each member newer than our first view."""
        self.joining = False
        """We announced our join and no member with our order has answered yet."""
        self.next_beacon: float | None = None
        """Coordinators beacon every ``beacon_interval`` (set by the node)."""

    # ------------------------------------------------------------------ queries

    @property
    def view(self) -> AgreedView:
        return self.agreement.view

    @property
    def stage(self) -> Stage:
        """Where this member is in a view change (``stages.STAGES``)."""
        return self.agreement.stage

    @property
    def answered(self) -> bool:
        """We answered (or made) a proposal of the change under way: its
        commit may be on its way and list us."""
        return self.agreement.changing

    @property
    def optimistic(self) -> bool:
        """A change is under way here: sends go out under the proposed view."""
        return self.sync.changing

    def optimistic_view(self) -> AgreedView | None:
        """The view our sends go out under while a change is under way."""
        return self.agreement.optimistic_view() if self.sync.changing else None

    def completing(self) -> bool:
        """A commit is being completed here (its cut fetched, then installed)."""
        return self.sync.completing

    def coordinating(self) -> bool:
        return self.agreement.coordinator() == self.me

    def coordinator(self) -> int:
        return self.agreement.coordinator()

    def failed_members(self) -> frozenset[int]:
        """Members our agreement holds failed (the detector keeps their verdicts)."""
        return frozenset(self.agreement.failed)

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

    def snapshot(self) -> tuple[int, dict[int, int]]:
        """Our last own record and how far we hold each member's stream."""
        return self.plane.own_last_record(), self.sync.snapshot(self.plane.received_vector())

    # ------------------------------------------------------------------ beacons

    def beacon_due(self, now: float, interval: float) -> bool:
        """Whether a beacon of ours goes out now (coordinators beacon every ``interval``)."""
        if self.next_beacon is None or self.next_beacon > now:
            return False
        self.next_beacon = now + interval
        return self.coordinating()

    def beacon(self, incarnation: int) -> CtlSend:
        return self.agreement.beacon(incarnation, self.order_code)

    def reject(self, member: int) -> None:
        """``member`` joins with another order: never admitted."""
        self.rejected.add(member)

    # ------------------------------------------------------------------ triggers

    def on_control(self, src: int, msg: ViewMessage, now: float, incarnation: int | None = None) -> list:
        """A view-change message; returns control frames to send.
        ``incarnation``: the sender's, from the datagram header. Noted for
        every control message, so a beacon can be told apart from a restart
        even when it is the first beacon heard from that member."""
        agreement = self.agreement
        if msg.epoch >= MAX_EPOCH and src != self.me:
            return []  # absurd: our next proposal (one above) must still fit the wire's 63 bits
        if incarnation is not None and type(msg) is not Beacon:
            self._note_incarnation(src, incarnation)
        if type(msg) is Propose:
            frames = self.on_agreement(agreement.on_propose(src, msg, self.snapshot(), now,
                                                            self.plane.delivered_high, incarnation), now)
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

    def take_charge(self, now: float) -> list:
        """Propose ourselves: our coordinator went silent while our verdict stands."""
        return self.on_agreement(self.agreement.take_charge(now), now)

    def merge_joiner(self, member: int, now: float) -> list:
        """A joiner announced itself: merge it without waiting for its beacon."""
        return self.on_agreement(self.agreement.merge_with({member: 0}, member, now), now)

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
        self.plane.forget_unicasts(member)  # the new incarnation holds nothing of either stream
        return self.on_agreement(self.agreement.member_restarted(member, now), now)

    def member_leaving(self, member: int, now: float) -> list:
        return self.on_agreement(self.agreement.member_leaving(member, now), now)

    def on_timeout(self, now: float) -> list:
        frames = self.on_agreement(self.agreement.on_timeout(now), now)
        return frames + self._answer_deferred(now) + self.progress(now)

    def next_deadline(self) -> float | None:
        earliest = self.next_beacon
        for deadline in (self.agreement.next_deadline(), self.sync.deadline if self.sync.completing else None):
            if deadline is not None and (earliest is None or deadline < earliest):
                earliest = deadline
        return earliest

    # ------------------------------------------------------------------ the agreement's decisions

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
                self.plane.cap_stability(dict(output.limits))
                self.plane.began(output.optimistic)
            elif isinstance(output, Commit):
                frames += self._begin_commit(output, now)
        return [f for f in frames if not (isinstance(f, CtlSend) and f.dst == self.me)]

    def _answer_deferred(self, now: float) -> list:
        """A proposal that waited while we were bound to another (an abort or
        the take-over timer released us): answer it now."""
        deferred = self.agreement.take_deferred()
        if deferred is None:
            return []
        src, proposal, incarnation = deferred
        return self.on_control(src, proposal, now, incarnation)

    def _note_incarnation(self, src: int, incarnation: int) -> None:
        self.incarnations[src] = incarnation
        if len(self.incarnations) > 2 * len(self.view.members) + 64:  # forget senders long gone
            self.incarnations = {m: i for m, i in self.incarnations.items() if m in self.view or m == src}
        high = self.plane.delivered_high
        if len(high) > 2 * len(self.view.members) + 64:
            self.plane.delivered_high = {m: s for m, s in high.items() if m in self.view}

    def _on_beacon(self, src: int, msg: Beacon, now: float) -> list[AgreementOut]:
        if msg.order_code != self.order_code or src in self.rejected:
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

    # ------------------------------------------------------------------ phase 2: the cut

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
        fifo, agreement = not self.ordered, self.agreement
        foreign = frozenset(m for m in old if m in commit.view and not commit.shares(m, self.view)
                            and not (fifo and agreement.lags(m, commit)))
        # FIFO too: a member of our view delivered a foreign sender's records
        # up to ``Commit.foreign`` on receipt (randomized FIFO machine,
        # explore.py seed 1682738745: a restarted sender's last record,
        # delivered by two members of the closing view and not by a third)
        limits = {s: commit.foreign.get(s, 0) if s in foreign else commit.cut.get(s, 0) for s in old}
        passed = self.sync.begin(limits, foreign, self.view.epoch)
        # An ordered group's foreign sender never installed our view (or
        # restarted since): what we received of it is not ours to deliver
        # here, beyond what a member of our view delivered before it flushed,
        # which every member delivers here (``Commit.foreign``; members
        # deliver nothing between their flush and the commit). Some members
        # received more, others did not, or hold it back at their snapshot:
        # delivering it would split our view (randomized total-order machine,
        # seeds 7, 33064342 and 567377617: invariant 5). It comes afresh after
        # the cut, so ``fetch_cut`` takes it out of the order.
        self.plane.fetch_cut(limits, commit.view.members, foreign if self.ordered else frozenset(), now)
        self.plane.order_and_deliver(passed)
        self.plane.deliver_ordered()  # frozen since the proposal
        return self.progress(now)

    def progress(self, now: float) -> list:
        """Install the committed view once every stream is complete up to the
        cut. If that takes ``cut_timeout`` (the last holder of a record
        is gone, or the group moved on), give up: start again alone and merge
        back, which keeps every view we install consistent."""
        sync, commit = self.sync, self.agreement.committing
        if not sync.completing or commit is None:
            return []
        if self.plane.holds(sync.limits or {}, (s for s in self.view.members if s != self.me)):
            return self._install(now)
        if sync.overdue(now, self.params.cut_timeout):
            sync.give_up(commit)
            return self.on_agreement(self.agreement.give_up(commit), now)
        return []

    # ------------------------------------------------------------------ phase 3: the install

    def _install(self, now: float) -> list:
        """SGCS section 4.2, phase 3: the old view's messages are delivered;
        install the new view and sort out what was held for it."""
        sync, commit, plane = self.sync, self.agreement.committing, self.plane
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
        plane.restart_streams(new, {m: commit.cut.get(m, 0) for m in newcomers})
        for member in old.members:
            if member not in new:
                plane.forget_member(member)
        leavers = frozenset(self.agreement.leaving)
        frames = self.agreement.installed(commit, now)
        # The new view's order starts after the cut and after what was rolled
        # back or withdrawn: those records never enter it, and a promise that
        # acknowledges one must not wait for it (randomized total-order
        # machine, explore.py seed 3278971755: every member waited for ever
        # on a newcomer's withdrawn first record).
        plane.restart_order({m: max(commit.cut.get(m, 0), commit.rollback.get(m, 0), commit.withdrawn.get(m, 0))
                             for m in new})
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
            plane.transitional(old, moving)
        plane.installed(old, commit.view, leavers, rejoined)
        kept, rolled_back = sync.settle(commit, old, new, foreign, left_out=new == (self.me,) and len(old.members) > 1)
        plane.report(rolled_back)
        plane.order_and_deliver(sync.gate(kept, self.view.epoch))  # a later change's messages stay held
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
        plane, sync = self.plane, self.sync
        if left_out:
            ordered, waiting = plane.take_own_ordered()
            own = sorted(ordered + sync.take_own_held(), key=lambda m: m.seq)
            sync.discarded += waiting
            if own:
                plane.transitional(self.view, (self.me,))
                plane.deliver(own)
                return True
        elif self.ordered:
            delivered, discarded = plane.drain_order()
            announce = bool(delivered) and self.safe
            if announce:
                plane.transitional(self.view, moving)
            plane.deliver(delivered)
            sync.discarded += discarded
            return announce
        return False
