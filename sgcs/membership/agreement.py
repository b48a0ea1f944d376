"""Three-phase view agreement with virtual synchrony and optimistic views.

Theory of operation
-------------------
One ``ViewAgreement`` runs per group and node (SGCS paper, section 4.2; the
optimistic part follows Sussman, Keidar and Marzullo, 2000). Views are
numbered by an epoch; a view's id names its epoch and its members.

* **Coordinator.** The lowest member of the current view that is not known to
  have failed or left. It starts a change when its wanted membership (the view,
  minus failed and leaving members, plus the members of other components whose
  beacons it heard) differs from the view. Join and merge are one operation: a
  starting node is a singleton view, coordinators multicast beacons listing
  their view, and of two coordinators that hear each other the lower id
  proposes the union.
* **Initiate.** The coordinator multicasts PROPOSE(epoch, attempt, members).
  A member accepts the proposal with the highest (epoch, attempt, lowest
  coordinator, coordinator incarnation) above its view's epoch, but within one
  epoch it answers proposals of one coordinator incarnation only: to another
  it sends a refusal, and that coordinator proposes again one epoch higher.
  So no two views of one epoch share a member, and the epoch a message
  carries names the one view it may be delivered in. On its first acceptance in a change it
  freezes a *snapshot*: how far it holds each sender's stream, and its own
  last sequence number. From then on it delivers nothing beyond the snapshot
  in the old view (the group layer holds it back), but it keeps sending: its
  new messages are *optimistic*, sent under the proposal as optimistic view.
* **Agree.** Each member answers FLUSH with its frozen snapshot, and with the
  highest of its own sequence numbers sent under an earlier proposal of this
  change that is not a subset of this one (those must be rolled back). Once
  every proposed member answered, the coordinator multicasts COMMIT: the
  members, the *cut* (per sender, the highest snapshot anyone reported: every
  message up to it is held by some survivor, so it can be completed) and the
  rollback bounds. A rollback is a promise that the message is delivered
  nowhere, which only the coordinator of the superseded proposal can make
  (it moved to a later attempt of the same epoch before committing). A
  proposal made by another coordinator, another incarnation or in another
  epoch may have been committed and installed by some of its members, who
  deliver what was sent under it; such messages are *withdrawn* instead:
  this view neither delivers them nor reports them rolled back, and their
  sender counts them as of unknown fate.
* **Install.** A member acts only on the COMMIT of the proposal it accepted
  last; the commit of a proposal it gave up for a higher one is ignored, so
  no member installs two views of one epoch, and a concurrent coordinator's
  view is installed by fewer of its members rather than by members that have
  promised themselves elsewhere. Each member fetches what it lacks up to the
  cut (NACKs to any holder), delivers it in the old view, installs the new view, rolls back
  optimistic messages of the rollback ranges, delivers the rest of the held
  messages in the new view, and answers INSTALLED. Members new to a member's
  view start their streams after the cut. A member left out of the COMMIT
  installs a singleton view and merges back through beacons.
* **Timers** (``Params``, from ``Config``). The coordinator repeats PROPOSE
  and COMMIT to the members that have not answered, ``view_repeats`` times
  per ``view_timeout`` (5); a member that has not answered FLUSH after
  ``view_timeout`` is left out of the next attempt (a follow-up change). A
  member that waits ``takeover_timeout`` (``2 * view_timeout``) for a COMMIT
  takes over if it is the lowest live member of the proposal (one epoch
  higher); after a second such period any member still waiting does (the
  lowest may never have seen the proposal).

**Cap.** A view holds at most ``max_members`` members. Joiners beyond it
(lowest ids first) are refused and counted (``refused_joiners``); they stay
singletons and retry through their beacons, so a group at its cap admits one
as soon as a member leaves.

Two members that install V and then V' deliver in V exactly the messages up
to the same cut (invariant 5). A message delivered after install was sent
under a proposal that is a subset of the installed view, or it was rolled
back everywhere (invariant 7).
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass, field
from typing import Iterable

from ..transport.params import Params
from ..wire import MsgType
from .messages import Beacon, CommitMsg, Flush, InstalledMsg, Propose, encode
from ..roster import roster_of
from .stages import COORDINATING, STAGES, Coordinating, Event, Role, Stage

Entries = tuple[tuple[int, int], ...]
MAX_ATTEMPT = 2**32 - 2
"""The largest attempt a proposal we accept may carry: outbidding it (attempt
+ 1) must still fit the wire's 32-bit field."""


def view_id_of(epoch: int, members: tuple[int, ...], salt: int = 0) -> str:
    """A view's name: its epoch, size and a hash of the epoch, the members
    and ``salt``, the incarnation of the member that made the view (its
    coordinator; 0 for a first start and for a view given at join). A
    member's epochs only grow while it runs, but a restarted process starts
    again from 0: without the salt, two restarted members that merge again
    would name a new view like an old one (randomized total-order machine,
    explore.py seed 1098036961: (1, 5) at epoch 1, twice)."""
    packed = struct.pack(f"!Q{len(members)}Q", epoch, *members) + (struct.pack("!Q", salt) if salt else b"")
    digest = hashlib.blake2b(packed, digest_size=6)
    return f"v{epoch}.{len(members)}-{digest.hexdigest()}"


@dataclass(frozen=True, slots=True)
class AgreedView:
    """A view as the agreement numbers it: its epoch, sorted members and name
    (``view_id``, which the application sees in ``sgcs.ViewChange``)."""

    epoch: int
    members: tuple[int, ...]
    view_id: str = ""
    member_set: frozenset[int] = frozenset()

    @classmethod
    def of(cls, epoch: int, members: Iterable[int], salt: int = 0) -> "AgreedView":
        """``salt``: the incarnation of the member that made the view (see ``view_id_of``)."""
        roster = roster_of(members)  # shared with every other holder of this membership
        return cls(epoch, roster.members, roster.view_id(epoch, view_id_of, salt), roster.member_set)

    def __contains__(self, member: object) -> bool:
        return member in self.member_set


@dataclass(frozen=True, slots=True)
class CtlSend:
    """A control message: to one member, or multicast to the group (dst None)."""

    dst: int | None
    msg_type: MsgType
    body: bytes


@dataclass(frozen=True, slots=True)
class Freeze:
    """Hold back everything past ``limits`` (a snapshot); an optimistic view begins."""

    limits: dict[int, int]
    optimistic: AgreedView


@dataclass(frozen=True, slots=True)
class Commit:
    """Complete every stream up to ``cut``, then install ``view``."""

    view: AgreedView
    cut: dict[int, int]
    rollback: dict[int, int]
    coordinator: int
    attempt: int
    origins: dict[int, int] = field(default_factory=dict)
    """Per member, the views it flushed from (``lineage``: its view and the
    one before); absent when all members flushed from one view."""
    foreign: dict[int, int] = field(default_factory=dict)
    """Per sender that never installed the view some member
    flushed from, the last of its records such a member delivered (before it
    flushed, in that view or one before). The members of that view deliver
    the sender's records up to here in it, fetching what they lack, and drop
    the rest: one of them delivered these in the view's ordinary order, so
    all must (randomized total-order machine, seed 567377617, and FIFO machine,
    seed 1682738745: invariant 5)."""
    withdrawn: dict[int, int] = field(default_factory=dict)
    """Per member, the top of its records (above the cut) sent under a
    superseded proposal whose fate it cannot know: another coordinator (or
    another of its incarnations or epochs) may have committed that proposal,
    and the members that installed it may have delivered them there. Members
    of this view neither deliver them nor report them rolled back."""

    def shares(self, member: int, view: AgreedView) -> bool:
        """``member`` comes to this commit from ``view`` (or moved on from it,
        a commit we missed), not from another view that overlaps ours."""
        origin = self.origins.get(member)
        digest = view_digest(view) & _HALF
        return origin is None or digest in (origin >> 31, origin & _HALF)

    def came_from(self, member: int, alike: AgreedView | None) -> int | None:
        """31 bits of the digest of the view ``member`` flushed from; when
        every member flushed from one view (no origins sent), that is ``alike``."""
        origin = self.origins.get(member)
        if origin:
            return origin >> 31
        return None if alike is None else view_digest(alike) & _HALF

    def moved_on(self, member: int, view: AgreedView) -> bool:
        """``member`` comes from the view after ``view``: one we missed."""
        origin = self.origins.get(member)
        digest = view_digest(view) & _HALF
        return origin is not None and origin >> 31 != digest and origin & _HALF == digest


_HALF = (1 << 31) - 1


def _holds_for(holder: int, sender: int | None) -> bool:
    """Whether a member flushing from view lineage ``holder`` speaks for the
    cut of a sender flushing from lineage ``sender``: it does unless the
    sender never installed the holder's view (the sender lags: it missed the
    commit of a view the holder is in). The records such a holder took for
    its view's are, to the sender and its view-mates, optimistic messages of
    a proposal they never saw committed; they deliver them in the next view,
    so the cut (what is delivered in the closing view) must not include them,
    and the holder's view delivers them in the next view too (randomized
    total-order machine, seed 7: invariant 5). A sender not in the proposal
    (``None``: failed) is spoken for by everyone."""
    if sender is None:
        return True
    return holder >> 31 in (sender >> 31, sender & _HALF)


def view_digest(view: AgreedView | None) -> int:
    """The 48-bit hash in ``view.view_id`` (epoch and members); 0 for none."""
    return 0 if view is None else int(view.view_id.rsplit("-", 1)[1], 16)


def lineage(view: AgreedView, previous: AgreedView | None) -> int:
    """A member's view and the one before it, 31 bits of each digest (a control field holds 63)."""
    return (view_digest(view) & _HALF) << 31 | view_digest(previous) & _HALF


AgreementOut = CtlSend | Freeze | Commit


@dataclass
class _Proposal:
    epoch: int
    attempt: int
    coordinator: int
    members: tuple[int, ...]
    incarnation: int = 0
    """The coordinator's: it salts the view's name (``view_id_of``)."""

    def view(self) -> AgreedView:
        return AgreedView.of(self.epoch, self.members, self.incarnation)

    @property
    def key(self) -> tuple[int, int, int, int]:
        # The incarnation tells a restarted coordinator's proposal from its
        # former self's of the same epoch and attempt (randomized FIFO
        # machine, seed 3796585111: a member flushed both as one proposal
        # and delivered what it sent under the dead one's in the new one's view).
        return self.epoch, self.attempt, -self.coordinator, self.incarnation

    @property
    def origin(self) -> tuple[int, int, int]:
        """Who made it: only its own coordinator incarnation, in its epoch,
        knows it will never commit it (it moved on to a later attempt)."""
        return self.coordinator, self.incarnation, self.epoch


@dataclass
class _Coordination:
    proposal: _Proposal
    replies: dict[int, tuple[int, Entries, int, int, Entries, bool]] = field(default_factory=dict)
    """member -> (frozen own seq, frozen vector, rollback bound, its ``lineage``,
    what it delivered, whether the bound withdraws rather than rolls back)."""
    answered_as: dict[int, int] = field(default_factory=dict)
    """member -> the incarnation whose answer ``replies`` holds (named in the commit)."""
    deadline: float = 0.0
    repeat_at: float = 0.0
    commit: bytes | None = None
    installed: set[int] = field(default_factory=set)
    proposed_in: AgreedView | None = None
    """The view we proposed from: if we install another before committing, we
    no longer stand by our own flush (``on_flush``)."""


SentUnder = tuple[tuple[int, ...], int, frozenset[tuple[int, int, int]]]


@dataclass
class _Answer:
    """Our side of one change as a participant, from the first proposal we
    answer until we install a view: its presence is what "a change is under
    way here" means (``ViewAgreement.stage``)."""

    proposal: _Proposal
    """The proposal we answered last: only its commit is installed."""
    snapshot: tuple[int, dict[int, int]]
    """Frozen at the first answer: our last own record and how far we hold each stream."""
    takeover_at: float
    """When we stop waiting for the commit (``takeover_timeout`` after our last answer)."""
    sent_under: list[SentUnder] = field(default_factory=list)
    """(optimistic view members, our last seq sent under it, the ``origin``
    of the proposals it stands for) of proposals we answered before this one."""
    offered: tuple[int, bool] = (0, False)
    """The rollback bound our flushes of this change offered, and whether withdrawn."""
    lapses: int = 0
    """Take-over periods that passed since we last answered a proposal (``_take_over``)."""
    bound: bool = False
    """We flushed to another coordinator's proposal, which it may commit at
    any moment: until it commits, abandons it (a new proposal of its own, or
    an abort) or ``takeover_timeout`` passes, we answer no other coordinator.
    Taking another's higher proposal in that window left the first
    coordinator's view installed without us (exhaustive check P, 'crash 1;
    restart 1; join 4; settle'). A higher proposal of another coordinator
    waits (``deferred``) while we ask ours to give its proposal up (a
    preempting FLUSH)."""
    deferred: tuple[int, Propose, int | None] | None = None
    """The highest proposal that came while we were bound: (its coordinator,
    the proposal, the coordinator's incarnation), answered once released
    (``ViewAgreement.take_deferred``)."""


class ViewAgreement:
    """The view of one group on one member, and the changes that move it."""

    def __init__(self, me: int, members: Iterable[int], params: Params, now: float, tag: int = 0,
                 epoch: int = 1, ordered: bool = False, incarnation: int = 0) -> None:
        """``params``: the view's cap ``max_members`` and the timers
        (``view_timeout`` and the values derived from it)."""
        self.me = me
        self.incarnation = incarnation
        """Ours: it salts the names of the views we make (``view_id_of``)."""
        self.ordered = ordered
        """Total, safe or causal order: the cut leaves a lagging member's
        messages to the next view (``_holds_for``)."""
        self.params = params
        self.refused_joiners = 0
        self.tag = tag
        initial = roster_of(members).with_member(me)
        # a view given at join is named alike by all its members; a singleton is ours
        self.view = AgreedView.of(epoch, initial, incarnation if len(initial) == 1 else 0)
        self.previous: AgreedView | None = None
        """The view installed before ``view``."""
        self.came_from: dict[int, int | None] = {}
        """Per member of ``view``, the view it flushed from for the commit of
        ``view`` (``Commit.came_from``). A member that flushes from that same
        view again, for the next commit, never installed ``view``: it lags."""
        self.leaving: set[int] = set()
        self.failed: set[int] = set()
        self.restarted: set[int] = set()
        """Members of our view whose process restarted (a datagram of a new
        incarnation arrived). The incarnation the view holds is gone for good,
        so hearing from the member (its new self) does not clear the verdict,
        and the new self is not merged in until a view without the old one is
        installed. Without this, a member whose coordinator restarted heard the
        new coordinator, took that as evidence that the old one lived, and
        waited in the old view for ever (randomized total-order machine, seed
        12345)."""
        self.joiners: dict[int, int] = {}
        """Members of other components to merge in, with the epoch of their view."""
        self.answer: _Answer | None = None
        """Our answer to the change under way (None: no change here)."""
        self._hold_off_until: float | None = None
        """We gave our proposal up for a higher one (preempted): until then we
        make no new one, so that the higher one can complete instead of being
        outbid in turn."""
        self._sent_commit: tuple[int, int, tuple[int, int, int, int], bytes] | None = None
        """(epoch, attempt, key, body) of the last commit we sent: repeated to a
        member that is still bound to it after we moved on (``on_flush``)."""
        self._aborted: dict[tuple[int, int], tuple[int, int, int, int]] = {}
        """Per coordinator incarnation, the highest of its proposals it aborted
        (``_on_abort``): that one and those before it are never answered."""
        self._last_proposed: tuple[int, int] = (0, 0)
        """(epoch, attempt) of the last proposal we made: each one goes above it
        (``_propose``)."""
        self.coordination: _Coordination | None = None
        self.committing: Commit | None = None
        """The commit this member decided or accepted, until the group installs
        it: the one record of it (``synchrony.Synchrony`` completes it)."""
        self.suspected: set[int] = set()
        """Members the failure detector is confirming (kept by the node)."""
        self._deferred_since: float | None = None
        self._reconsider_at: float | None = None
        self.diverged = False
        """A member of our view coordinates another view of this epoch or
        later: propose afresh even though the wanted membership is the view."""

    # ------------------------------------------------------------------ queries

    @property
    def changing(self) -> bool:
        return self.answer is not None

    @property
    def accepted(self) -> _Proposal | None:
        """The proposal we answered last in the change under way."""
        return None if self.answer is None else self.answer.proposal

    @property
    def stage(self) -> Stage:
        """Where this member is in a view change (``STAGES``)."""
        if self.committing is not None:
            return Stage.COMMITTED
        answer = self.answer
        if answer is None:
            return Stage.STABLE
        return Stage.BOUND if answer.bound else Stage.ANSWERED

    @property
    def coordinating(self) -> Coordinating:
        """Where the change this member coordinates is (``COORDINATING``)."""
        coordination = self.coordination
        if coordination is None:
            return Coordinating.IDLE
        return Coordinating.PROPOSING if coordination.commit is None else Coordinating.CONFIRMING

    @property
    def role(self) -> Role:
        """The part this member plays in the change under way."""
        if self.coordination is not None:
            return Role.COORDINATOR
        accepted = self.accepted
        if accepted is None:
            return Role.MEMBER
        return Role.PARTICIPANT if accepted.coordinator in self.view else Role.JOINER

    def _moved(self, before: Stage, event: Event) -> None:
        # The stage is read from the fields; a move the table does not allow is
        # a bug in this class, never input.
        after = self.stage
        if STAGES.get((before, event), (None, ""))[0] is not after:
            raise AssertionError(f"view agreement: {event.value} from {before.value} gave {after.value}")

    def _coordinated(self, before: Coordinating, event: Event) -> None:
        after = self.coordinating
        if COORDINATING.get((before, event), (None, ""))[0] is not after:
            raise AssertionError(f"view agreement: {event.value} from {before.value} gave {after.value}")

    def coordinator(self) -> int:
        # members are sorted: the first live one is the lowest (no O(N) copy per call)
        return next((m for m in self.view.members if m not in self.failed and m not in self.leaving), self.me)

    def wanted(self) -> set[int]:
        keep = {m for m in self.view.members if m not in self.failed and m not in self.leaving}
        return keep | set(self.joiners) | {self.me}

    def optimistic_view(self) -> AgreedView | None:
        return None if self.accepted is None else self.accepted.view()

    # ------------------------------------------------------------------ triggers

    def member_failed(self, member: int, now: float) -> list[AgreementOut]:
        if member in self.view and member != self.me:
            self.failed.add(member)
        self.joiners.pop(member, None)
        return self.reconsider(now)

    def member_restarted(self, member: int, now: float) -> list[AgreementOut]:
        """``member``'s process restarted: the incarnation in our view failed."""
        if member in self.view and member != self.me:
            self.restarted.add(member)
        return self.member_failed(member, now)

    def member_alive(self, member: int) -> None:
        """A member declared failed was heard from again: a later change may
        keep it, unless what we heard is a new incarnation of it."""
        if member not in self.restarted:
            self.failed.discard(member)

    def member_leaving(self, member: int, now: float) -> list[AgreementOut]:
        if member in self.view:
            self.leaving.add(member)
        return self.reconsider(now)

    def merge_with(self, members: dict[int, int], coordinator: int, now: float) -> list[AgreementOut]:
        """Beacon of another component: the lower coordinator proposes the union."""
        if self.coordinator() != self.me or coordinator < self.me:
            return []
        fresh = {m: e for m, e in members.items() if m not in self.view or m in self.failed}
        if not fresh or not self._admit(fresh):
            return []  # all refused: no O(N) reconsideration per stranger's hello
        return self.reconsider(now)

    def _admit(self, members: dict[int, int]) -> bool:
        """Add joiners up to the view's cap; the rest are refused (and counted).
        Returns whether any member was taken."""
        room = self.params.max_members - self._wanted_count()
        taken = False
        for member in sorted(members):  # sorted: which ones get in must not depend on set order
            if member in self.restarted:
                continue  # its new self merges once a view without the old one is installed
            if member in self.joiners or member in self.view and member not in self.failed:
                # the highest epoch heard: a view-mate's stale beacon may list
                # it at an older one (randomized total-order machine, explore.py
                # seed 827980483: proposals at an epoch the joiner had passed,
                # which it never answers, 291 attempts long)
                self.joiners[member] = max(members[member], self.joiners.get(member, 0))
            elif room > 0:
                self.joiners[member] = members[member]
                room -= 1
            else:
                self.refused_joiners += 1
                continue
            # another component holds it live: our failure verdict is stale; the
            # node watches it afresh once it is back in our view
            self.failed.discard(member)
            taken = True
        return taken

    def diverge(self, members: dict[int, int], now: float) -> list[AgreementOut]:
        """Beacon of a coordinator that is in our view, of a view that is not
        ours, at our epoch or later: two overlapping views exist (each thinks
        the other's members installed it). As our coordinator, propose the
        union at a higher epoch; both components accept it, since each is
        wholly inside it."""
        if self.coordinator() != self.me:
            return []
        self._admit(members)
        self.diverged = True
        return self.reconsider(now)

    def _wanted_count(self) -> int:
        """``len(self.wanted())`` without building it: O(changes), not O(N)."""
        view, gone = self.view, self.failed | self.leaving
        alive = len(view.members) - sum(1 for m in gone if m in view)
        return alive + sum(1 for j in self.joiners if j not in view or j in gone)

    def reconsider(self, now: float) -> list[AgreementOut]:
        """As coordinator, propose when the wanted membership is not the view.
        While other members are still being confirmed (suspected, not yet
        failed), wait up to ``verdict_wait`` (a quarter of ``view_timeout``)
        for their verdicts: one change then excludes them all, instead of one
        attempt each, and fewer optimistic messages are rolled back."""
        if self.coordinator() != self.me:
            return []
        if self._hold_off_until is not None and now < self._hold_off_until and self.coordination is None:
            self._reconsider_at = self._hold_off_until  # we gave a proposal up for a higher one: let it complete
            return []
        if self.accepted is not None and self.accepted.coordinator < self.me and self.coordination is None:
            # We answered a lower coordinator, whose proposal outranks ours
            # anyway. Outbidding it with a higher attempt would let it commit
            # on our stale answer a view we never install; its commit or our
            # take-over timer ends the wait.
            return []
        if self.committing is not None:
            # We are installing a committed view (ours, or one we answered):
            # its epoch is taken. A proposal now would reuse it (our view is
            # still the old one), and members that had not yet seen the commit
            # would answer it and send under a view that never comes, while
            # the others deliver those messages in the committed one
            # (randomized FIFO machine, explore.py seed 1083830753: invariant 7).
            # The change waits until we installed it.
            self._reconsider_at = now + self.params.reconsider_interval
            return []
        if self._awaiting_installed():
            # Our commit is out and a live member has not answered INSTALLED
            # (it is repeated to it). A proposal now would reach a member that
            # missed the commit; bound to us, it would take our next proposal
            # and never install the view the others installed: a view
            # installed by only some of its members (the simulator's 5-node
            # start-up at 1% loss: 88 of 798 start-ups). The change waits for
            # the answers, at most ``view_timeout`` (then the silent members
            # are excluded); a member that failed, restarted or is leaving is
            # not waited for.
            self._reconsider_at = now + self.params.reconsider_interval
            return []
        wanted = tuple(sorted(self.wanted()))
        current = self.coordination.proposal.members if self.coordination else self.view.members
        if wanted == current and not (self.diverged and self.coordination is None) and not self._outgrown():
            self._deferred_since = None
            return []
        if self.suspected & set(wanted) - {self.me}:
            if self._deferred_since is None:
                self._deferred_since = now
            if now - self._deferred_since < self.params.verdict_wait:
                self._reconsider_at = now + self.params.reconsider_interval
                return []
        self._deferred_since = self._reconsider_at = None
        return self._propose(wanted, now)

    def _awaiting_installed(self) -> bool:
        coordination = self.coordination
        if coordination is None or coordination.commit is None:
            return False
        gone = self.failed | self.leaving
        return any(m not in coordination.installed and m != self.me and m not in gone
                   for m in coordination.proposal.members)

    def _outgrown(self) -> bool:
        """A joiner of our open proposal is in a view of its epoch or later:
        it will never answer it (only higher epochs are answered)."""
        coordination = self.coordination
        return coordination is not None and coordination.commit is None and \
            any(self.joiners.get(m, -1) >= coordination.proposal.epoch for m in coordination.proposal.members)

    def _propose(self, members: tuple[int, ...], now: float, min_epoch: int = 0) -> list[AgreementOut]:
        """Each epoch has proposals of one origin per member (``on_propose``
        refuses others): we try again in the epoch of a proposal we made,
        and go one above one that another coordinator (or a former self) made."""
        epoch = max([self.view.epoch + 1, *(e + 1 for e in self.joiners.values()), min_epoch])
        attempt = 1
        accepted = self.accepted
        if accepted is not None and accepted.epoch >= epoch:
            if accepted.origin[:2] == (self.me, self.incarnation):
                epoch, attempt = accepted.epoch, accepted.attempt + 1
            else:
                epoch = accepted.epoch + 1
        if (epoch, attempt) <= self._last_proposed:
            # A proposal we gave up (abandoned for another coordinator's, or
            # dropped with its silent members) is aborted at every member that
            # heard the abort, ourselves included, and never answered again:
            # the next one must have a higher key. Reusing it kept a restarted
            # coordinator proposing an aborted key for ever, alone in its view
            # (randomized ring-detector machine, explore.py seed 2706109835).
            epoch, attempt = self._last_proposed[0], self._last_proposed[1] + 1
        self._last_proposed = (epoch, attempt)
        proposal = _Proposal(epoch, attempt, self.me, members, self.incarnation)
        before = self.coordinating
        self.coordination = _Coordination(proposal, deadline=now + self.params.view_timeout, proposed_in=self.view)
        self._coordinated(before, Event.PROPOSE)
        return self._send_proposal(now)

    def _send_proposal(self, now: float) -> list[AgreementOut]:
        coordination = self.coordination
        assert coordination is not None
        p = coordination.proposal
        coordination.repeat_at = now + self.params.view_repeat_interval
        return [CtlSend(None, MsgType.PROPOSE, self._proposal_body(p))]

    def _proposal_body(self, p: _Proposal) -> bytes:
        return encode(Propose(self.tag, p.epoch, p.attempt, p.coordinator, p.members))

    # ------------------------------------------------------------------ participant

    def on_propose(self, src: int, msg: Propose, snapshot: tuple[int, dict[int, int]], now: float,
                   delivered: dict[int, int] | None = None, incarnation: int | None = None) -> list[AgreementOut]:
        """``delivered``: per sender, the last record we delivered in any
        view, reported in the flush so that the cut covers it: a delivered
        record is never rolled back. ``incarnation``: the proposer's (None: ours)."""
        members = msg.members
        proposal = _Proposal(msg.epoch, msg.attempt, src, members, self._incarnation_of(src, incarnation))
        if not members:
            self._on_abort(proposal)
            return []
        if self.me not in members or proposal.epoch <= self.view.epoch or proposal.attempt > MAX_ATTEMPT:
            return []
        if self.committing is not None:
            # We complete a committed view V. Its messages are V's, whatever
            # comes next: a flush now would report the snapshot taken before
            # V and offer our messages sent under V for rollback, which the
            # members that installed V may have delivered. Once V is
            # installed, the coordinator's repeated proposal finds us.
            return []
        if src not in self.view and not self._bound_to(proposal) \
                and not set(self.view.members) - self.failed - self.leaving <= set(members):
            return []  # a merge takes whole components: this one is stale or partial
        if self.accepted is not None and proposal.key < self.accepted.key:
            return []
        if self.accepted is not None and proposal.epoch == self.accepted.epoch \
                and proposal.origin != self.accepted.origin:
            # We answered another coordinator's proposal of this epoch, which
            # it may commit: answering this one too could put us in two views
            # of one epoch, and a message we send under this one would carry
            # the same epoch tag as that view's, so its members would deliver
            # it there (randomized FIFO machine, seed 3796585111). Its
            # coordinator proposes again one epoch higher, which we may take.
            return [self._refusal(src, proposal)]
        if self._aborted_already(proposal):
            return []  # its coordinator gave it up: its abort overtook it
        if self._bound_elsewhere(proposal):
            return self._preempt(src, msg, incarnation)
        out: list[AgreementOut] = []
        before = self.stage
        answer = self.answer
        if answer is None:
            answer = self.answer = _Answer(proposal, snapshot, 0.0)
            out.append(Freeze(dict(snapshot[1]), proposal.view()))
        elif proposal.key != answer.proposal.key:
            self._note_sent_under(answer, snapshot[0])
            answer.proposal = proposal
        if self.coordination is not None and proposal.coordinator != self.me:
            out += self._abandon()  # a higher proposal wins: follow it
        answer.takeover_at = now + self.params.takeover_timeout
        answer.lapses = 0
        answer.bound = proposal.coordinator != self.me
        self._moved(before, Event.ANSWER_OTHER if answer.bound else Event.ANSWER_OWN)
        out.append(self._flush_reply(src, answer, delivered or {}))
        return out

    def _bound_to(self, proposal: _Proposal) -> bool:
        """We flushed to this coordinator incarnation's open proposal: the
        merge took our whole component then, and a member it now leaves out is
        one its detector excluded since, as in any view change. Ignoring it
        would keep us bound to a proposal it has given up, for ever (ring
        detector: we may not watch the member it excluded)."""
        answer = self.answer
        return answer is not None and answer.bound and (proposal.coordinator, proposal.incarnation) == \
            (answer.proposal.coordinator, answer.proposal.incarnation)

    def _bound_elsewhere(self, proposal: _Proposal) -> bool:
        """We flushed to another coordinator incarnation's proposal that is
        still open: only that coordinator may move us on (``bound``)."""
        answer = self.answer
        return answer is not None and answer.bound and (proposal.coordinator, proposal.incarnation) != \
            (answer.proposal.coordinator, answer.proposal.incarnation)

    def _preempt(self, src: int, msg: Propose, incarnation: int | None) -> list[AgreementOut]:
        """A higher proposal than the one we are bound to: keep it for when we
        are released, and ask our coordinator to give its proposal up."""
        answer = self.answer
        assert answer is not None
        answer.deferred = (src, msg, incarnation)
        accepted = answer.proposal
        body = encode(Flush(self.tag, accepted.epoch, accepted.attempt, 0, 0, (), 0, preempt=True,
                            coordinator_incarnation=accepted.incarnation))
        return [CtlSend(accepted.coordinator, MsgType.FLUSH, body)]

    def take_deferred(self) -> tuple[int, Propose, int | None] | None:
        """The proposal that waited while we were bound, once we are released."""
        answer = self.answer
        if answer is None or answer.bound or answer.deferred is None:
            return None
        deferred, answer.deferred = answer.deferred, None
        return deferred

    def _on_abort(self, proposal: _Proposal) -> None:
        """``proposal``'s coordinator will never commit it, nor any earlier
        proposal of its own: it moved on from those before. The abort may
        overtake the proposal it names (the heal sweep, safe order, seed 3,
        2.0 s: a member bound itself to an aborted proposal that came after
        the abort, and waited ``takeover_timeout`` for it), so it is kept
        until a view above its epoch is installed."""
        maker = (proposal.coordinator, proposal.incarnation)
        if proposal.key > self._aborted.get(maker, (0, 0, 0, 0)):
            self._aborted[maker] = proposal.key
        answer = self.answer
        if answer is not None and answer.bound and self.committing is None and \
                (answer.proposal.coordinator, answer.proposal.incarnation) == maker and \
                answer.proposal.key <= proposal.key:
            answer.bound = False
            self._moved(Stage.BOUND, Event.RELEASE)

    def _aborted_already(self, proposal: _Proposal) -> bool:
        return proposal.key <= self._aborted.get((proposal.coordinator, proposal.incarnation), (0, 0, 0, 0))

    def _abandon(self) -> list[AgreementOut]:
        """Give up our open proposal without committing it, and release the
        members bound to it (an abort: the proposal with no members)."""
        before = self.coordinating
        coordination, self.coordination = self.coordination, None
        if coordination is None:
            return []
        self._coordinated(before, Event.ABANDON)
        if coordination.commit is not None:
            return []
        p = coordination.proposal
        self._on_abort(p)  # answered again if a member bound to it asks (``on_flush``)
        return [CtlSend(None, MsgType.PROPOSE, encode(Propose(self.tag, p.epoch, p.attempt, p.coordinator, ())))]

    def _note_sent_under(self, answer: _Answer, upto: int) -> None:
        """Remember what we sent under the proposal we answered last, now superseded. An earlier entry
        whose members are a subset of these is dominated (``upto`` only grows,
        and whenever it is not within the next proposal neither is this one),
        so it goes, leaving its origins to the new entry: proposals that only
        add joiners keep the list at one entry instead of one per proposal (a
        flood of join requests made it grow).

        A proposal nothing was sent under (``upto`` is no higher than the
        last entry's, or than our frozen own) adds no entry: its origin must
        not make the messages of the entries before it look withdrawn (heal
        window seed 10: a coordinator refused at epochs 5, 6 and 7 proposed
        again at 8; a member sent under 8 only, yet its flush withdrew those
        messages for the origins 5 to 7, and nobody delivered them)."""
        sent_under, proposal = answer.sent_under, answer.proposal
        if upto <= (sent_under[-1][1] if sent_under else answer.snapshot[0]):
            return
        grown = set(proposal.members)
        origins = {proposal.origin}
        kept = []
        for under, seq, made_by in sent_under:
            if set(under) <= grown:
                origins |= made_by
            else:
                kept.append((under, seq, made_by))
        answer.sent_under = kept + [(proposal.members, upto, frozenset(origins))]

    def _flush_reply(self, coordinator: int, answer: _Answer, delivered: dict[int, int]) -> CtlSend:
        own, vector = answer.snapshot
        proposal = answer.proposal
        members = set(proposal.members)
        outside = [(upto, made_by) for under, upto, made_by in answer.sent_under if not set(under) <= members]
        rollback = max([upto for upto, _ in outside], default=0)
        # Rolled back only if we know no view holds them: every proposal they
        # went under was this coordinator's, in this epoch (it moved on from
        # them before committing). Else their fate is not ours to tell.
        withdraw = any(made_by != {proposal.origin} for _, made_by in outside)
        # What a flush offered stays offered: the proposal it answered may be
        # committed, and its members then roll those messages back, so no
        # later view of this change may deliver them (randomized total-order
        # machine, seed 3796585111: a member offered its message to the
        # second attempt of one coordinator, then delivered it in another's
        # view whose members included the first attempt's).
        offered, offered_withdraw = answer.offered
        if offered:
            rollback, withdraw = max(rollback, offered), withdraw or offered_withdraw
        answer.offered = (rollback, withdraw)
        body = encode(Flush(self.tag, proposal.epoch, proposal.attempt, own, rollback, tuple(sorted(vector.items())),
                            lineage(self.view, self.previous), tuple(sorted(delivered.items())), withdraw,
                            coordinator_incarnation=proposal.incarnation))
        return CtlSend(coordinator, MsgType.FLUSH, body)

    def _refusal(self, coordinator: int, proposal: _Proposal) -> CtlSend:
        body = encode(Flush(self.tag, proposal.epoch, proposal.attempt, 0, 0, (), 0, refuse=True,
                            coordinator_incarnation=proposal.incarnation))
        return CtlSend(coordinator, MsgType.FLUSH, body)

    def _incarnation_of(self, src: int, incarnation: int | None) -> int:
        return self.incarnation if incarnation is None or src == self.me else incarnation

    def on_commit(self, src: int, msg: CommitMsg, incarnation: int | None = None) -> list[AgreementOut]:
        """``incarnation``: the coordinator's (None: ours)."""
        if msg.epoch <= self.view.epoch or self.committing is not None:
            if msg.epoch == self.view.epoch and self.me in self.view and self._is_our_view(msg):
                return [self._installed_reply(src, msg.epoch, msg.attempt)]  # a repeat of our commit
            return []
        members = msg.members
        key = _Proposal(msg.epoch, msg.attempt, src, members, self._incarnation_of(src, incarnation)).key
        if self.me not in members:
            if self.me in self.view.members and src in self.view.members \
                    and (self.accepted is None or self.accepted.key <= key):
                return self._commit_to(Commit(self._alone(msg.epoch), {}, {}, src, msg.attempt),
                                       Event.LEFT_OUT)  # we were left out
            return []
        if self.accepted is None or self.accepted.key != key:
            # Not the proposal we answered last: we moved on to a higher one
            # (whose coordinator counts on us), or never answered this one.
            # Installing it would list us in two views of one epoch.
            return []
        if dict(msg.incarnations).get(self.me, self.incarnation) != self.incarnation:
            # The coordinator counted the answer of our former incarnation
            # (we restarted, then answered the same proposal again, too late).
            # The cut holds that self's snapshot, not ours: our optimistic
            # messages would be delivered by no one (randomized total-order
            # machine, explore.py seeds 3574225630 and 343591023). We are left
            # out; its members learn of the restart and exclude the old self.
            return self._commit_to(Commit(self._alone(msg.epoch), {}, {}, src, msg.attempt), Event.LEFT_OUT)
        return self._commit_to(Commit(AgreedView.of(msg.epoch, members, self._incarnation_of(src, incarnation)),
                                      dict(msg.cut), dict(msg.rollback), src,
                                      msg.attempt, {m: d for m, d in msg.origins if d}, dict(msg.foreign),
                                      dict(msg.withdrawn)), Event.COMMIT)

    def _commit_to(self, commit: Commit, event: Event) -> list[AgreementOut]:
        """Hand ``commit`` to the group, which completes its cut and installs it."""
        before = self.stage
        self.committing = commit
        self._moved(before, event)
        return [commit]

    def _alone(self, epoch: int) -> AgreedView:
        return AgreedView.of(epoch, (self.me,), self.incarnation)

    def _is_our_view(self, commit: CommitMsg) -> bool:
        return tuple(sorted(commit.members)) == self.view.members

    def left_out(self, coordinator: int, epoch: int) -> list[AgreementOut]:
        """Our coordinator's beacon shows a later view without us: we missed
        the commit that excluded us. Install a singleton; beacons merge us back."""
        return self._commit_to(Commit(self._alone(epoch), {}, {}, coordinator, 0), Event.LEFT_OUT)

    def lags(self, member: int, commit: Commit) -> bool:
        """``member`` flushes for ``commit`` from the view it flushed from for
        the commit of ours: it missed that commit and never installed our view."""
        before = self.came_from.get(member)
        return before is not None and commit.came_from(member, None) == before

    def give_up(self, commit: Commit) -> list[AgreementOut]:
        """The committed cut cannot be completed here: leave the change alone."""
        return self._commit_to(Commit(self._alone(commit.view.epoch), {}, {}, commit.coordinator, 0), Event.GIVE_UP)

    def installed(self, commit: Commit, now: float) -> list[AgreementOut]:
        """The group layer completed the cut and installed ``commit.view``.
        A member that failed or is leaving while the change was under way is
        still in the view: as coordinator, start the change that drops it now,
        since no later trigger may come (its verdict was the trigger, and it
        was spent on the change just installed)."""
        # A singleton we made alone (left out, or a cut given up) has no
        # predecessor the others share: its lineage must not claim our old
        # view, or a member still in that view would take our records since
        # then (ones we rolled back, ones only we delivered) for its own view's
        alone = commit.view.members == (self.me,) and not commit.cut
        self.came_from = {} if alone else {m: commit.came_from(m, self.view) for m in commit.view.members}
        self.previous, self.view = None if alone else self.view, commit.view
        # Only the coordinator acts on verdicts: one it kept in the view
        # overrules ours (its own detector watches it). A verdict we keep
        # would exclude a live member the day we coordinate; the node's
        # detector watches it afresh instead, and finds it again if it is dead.
        self.failed &= set(self.view.members) if commit.coordinator == self.me else set()
        self.leaving &= set(self.view.members)
        self.restarted = set()  # a member in the new view flushed to its coordinator: a live process
        self.suspected &= set(self.view.members)
        self.joiners = {m: e for m, e in self.joiners.items() if m not in self.view}
        before = self.stage
        self.answer = self.committing = self._hold_off_until = None
        self._moved(before, Event.INSTALL)
        if self._aborted:
            self._aborted = {m: key for m, key in self._aborted.items() if key[0] > self.view.epoch}
        self.diverged = False
        out: list[AgreementOut] = []
        if self.coordination is not None and self.coordination.proposal.epoch <= self.view.epoch \
                and commit.coordinator != self.me:
            out += self._abandon()
        if commit.coordinator != self.me and self.view.members != (self.me,):
            out.append(self._installed_reply(commit.coordinator, commit.view.epoch, commit.attempt))
        if self.failed or self.leaving:
            out += self.reconsider(now)
        return out

    def _installed_reply(self, coordinator: int, epoch: int, attempt: int) -> CtlSend:
        return CtlSend(coordinator, MsgType.INSTALLED, encode(InstalledMsg(self.tag, epoch, attempt)))

    # ------------------------------------------------------------------ coordinator

    def on_flush(self, src: int, msg: Flush, now: float, incarnation: int | None = None) -> list[AgreementOut]:
        """``incarnation``: the answering member's, from the datagram (None: ours, or not known)."""
        if msg.coordinator_incarnation not in (None, self.incarnation):
            return []  # it answers a proposal of a former incarnation of ours
        coordination = self.coordination
        if msg.preempt and self._aborted_already(_Proposal(msg.epoch, msg.attempt, self.me, (), self.incarnation)):
            # a member still bound to a proposal we gave up: our abort was lost
            return [CtlSend(src, MsgType.PROPOSE, encode(Propose(self.tag, msg.epoch, msg.attempt, self.me, ())))]
        sent = self._sent_commit
        if msg.preempt and sent is not None and sent[:2] == (msg.epoch, msg.attempt) and \
                (coordination is None or coordination.proposal.key != sent[2]):
            # a member still bound to a proposal we committed, then moved on
            # from (heal sweep, causal order, seed 3, 2.2 s: it waited
            # takeover_timeout for a commit nobody repeated any more)
            return [CtlSend(src, MsgType.COMMIT, sent[3])]
        if coordination is None or coordination.commit is not None:
            return []
        p = coordination.proposal
        if (msg.epoch, msg.attempt) != (p.epoch, p.attempt) or src not in p.members:
            return []
        if msg.refuse:
            return self._propose(p.members, now, min_epoch=p.epoch + 1)
        if msg.preempt:
            # A member bound to us is wanted by a higher proposal, and we
            # cannot commit yet (we lack some answer): give ours up, and make
            # no new one for ``view_timeout`` so that the higher one completes.
            self._hold_off_until = now + self.params.view_timeout
            return self._abandon()
        coordination.replies[src] = (msg.own, msg.vector, msg.rollback, msg.lineage, msg.delivered, msg.withdraw)
        if incarnation is not None or src == self.me:  # None from another: not known, not named
            coordination.answered_as[src] = self._incarnation_of(src, incarnation)
        if set(coordination.replies) >= set(p.members):
            if coordination.proposed_in is not None and coordination.proposed_in != self.view:
                # We no longer stand by our own flush: since we proposed we
                # installed another view (left out of a change, we started
                # again alone). Committing it would list us in a
                # view we never install while its other members take us for
                # their coordinator (randomized total-order machine, explore.py
                # seed 2066259233: a wedge). Its members take over; beacons
                # merge us back; the abort releases them at once.
                return self._abandon()
            return self._commit(now)
        return []

    def _commit(self, now: float) -> list[AgreementOut]:
        coordination = self.coordination
        assert coordination is not None
        p = coordination.proposal
        cut: dict[int, int] = {}
        rollback: dict[int, int] = {}
        withdrawn: dict[int, int] = {}
        foreign: dict[int, int] = {}
        origins = {m: coordination.replies[m][3] for m in p.members}
        for member, (own, vector, bound, origin, delivered, withdraw) in coordination.replies.items():
            for sender, high in vector:
                if not self.ordered or _holds_for(origin, origins.get(sender)):
                    cut[sender] = max(cut.get(sender, 0), high)
            for sender, high in delivered:  # delivered somewhere: never rolled back, always in the cut
                cut[sender] = max(cut.get(sender, 0), high)
                if not _holds_for(origin, origins.get(sender)):
                    foreign[sender] = max(foreign.get(sender, 0), high)
            cut[member] = max(cut.get(member, 0), own)
            if bound > own:
                (withdrawn if withdraw else rollback)[member] = bound
        if len({origin >> 31 for origin in origins.values()}) == 1:  # all from one view: nothing to tell apart
            origins = dict.fromkeys(p.members, 0)
        coordination.commit = encode(CommitMsg(self.tag, p.epoch, p.attempt, self.me, tuple(origins.items()),
                                               tuple(sorted(cut.items())), tuple(sorted(rollback.items())),
                                               tuple(sorted(foreign.items())), tuple(sorted(withdrawn.items())),
                                               tuple(sorted(coordination.answered_as.items()))))
        self._sent_commit = (p.epoch, p.attempt, p.key, coordination.commit)
        coordination.installed = set()
        coordination.deadline = now + self.params.view_timeout
        coordination.repeat_at = now + self.params.view_repeat_interval
        self._coordinated(Coordinating.PROPOSING, Event.SEND_COMMIT)
        return [CtlSend(None, MsgType.COMMIT, coordination.commit)]

    def on_installed(self, src: int, msg: InstalledMsg) -> None:
        coordination = self.coordination
        if coordination is not None and coordination.commit is not None and msg.epoch == coordination.proposal.epoch:
            coordination.installed.add(src)
            if coordination.installed >= set(coordination.proposal.members) - {self.me}:
                self.coordination = None
                self._coordinated(Coordinating.CONFIRMING, Event.CONFIRMED)

    # ------------------------------------------------------------------ timers

    def on_timeout(self, now: float) -> list[AgreementOut]:
        out: list[AgreementOut] = []
        coordination = self.coordination
        if coordination is not None:
            if coordination.commit is None and now >= coordination.deadline:
                out += self._drop_silent(now)
            elif coordination.commit is not None and now >= coordination.deadline:
                out += self._drop_uninstalled(coordination, now)
            elif now >= coordination.repeat_at:
                out += self._repeat(coordination, now)
        if self.answer is not None and now >= self.answer.takeover_at and self.committing is None:
            out += self._take_over(now)
        if self._reconsider_at is not None and now >= self._reconsider_at:
            self._reconsider_at = None
            out += self.reconsider(now)
        return out

    def _repeat(self, coordination: _Coordination, now: float) -> list[AgreementOut]:
        """Repeat the proposal (or the commit) to the members that have not
        answered yet, ``view_repeats`` times per ``view_timeout``: by unicast
        to each while they are at most ``repeat_unicast_max``, else by one
        multicast."""
        coordination.repeat_at = now + self.params.view_repeat_interval
        p = coordination.proposal
        if coordination.commit is None:
            missing = [m for m in p.members if m not in coordination.replies and m != self.me]
            body = self._proposal_body(p)
            msg_type = MsgType.PROPOSE
        else:
            missing = [m for m in p.members if m not in coordination.installed and m != self.me]
            body, msg_type = coordination.commit, MsgType.COMMIT
        if len(missing) > self.params.repeat_unicast_max:
            return [CtlSend(None, msg_type, body)]
        return [CtlSend(m, msg_type, body) for m in missing]

    def _drop_silent(self, now: float) -> list[AgreementOut]:
        """Members that did not answer the flush are left out of the next attempt."""
        coordination = self.coordination
        assert coordination is not None
        silent = set(coordination.proposal.members) - set(coordination.replies) - {self.me}
        for member in silent:
            if member in self.view:
                self.failed.add(member)
            self.joiners.pop(member, None)
        members = tuple(m for m in coordination.proposal.members if m not in silent)
        return self._propose(members, now)

    def _drop_uninstalled(self, coordination: _Coordination, now: float) -> list[AgreementOut]:
        """The commit went out ``view_timeout`` ago, repeated to whoever did not
        answer INSTALLED: a member still silent did not install the view (it
        gave the change up for another one, or its INSTALLED replies were all
        lost). Its detector may hear it alive for ever, so it is excluded now
        and merges back by beacons: a view installed by only some of its
        members lasts at most ``view_timeout`` past its commit."""
        missing = set(coordination.proposal.members) - coordination.installed - {self.me}
        self.coordination = None
        self._coordinated(Coordinating.CONFIRMING, Event.CONFIRMED)
        completing = self.committing is not None and self.committing.view.epoch == coordination.proposal.epoch
        if coordination.proposal.epoch != self.view.epoch and not completing:
            return []  # we moved on ourselves
        # Still completing our own commit (a slow cut: total order with
        # promises by gossip) is no reason to spare them: the verdict waits in
        # ``failed`` and the install reconsiders. Sparing them left a member
        # that missed the commit in everyone's view but its own, for ever
        # (randomized total-order machine, explore.py seed 2092878708).
        listed = coordination.proposal.members if completing else self.view
        self.failed |= {m for m in missing if m in listed}
        return self.reconsider(now) if missing else []

    def take_charge(self, now: float) -> list[AgreementOut]:
        """Our own verdict on a member stands, no change excluding it came, and
        our coordinator has been silent to us: a partition may have cut us off
        from it and from everyone below us, whom no member on our side watches
        (the ring form of the detector). Propose what we want ourselves: members
        answer a proposal of a higher epoch from any member of their view, and
        those that do not answer are left out of the next attempt."""
        if self.accepted is not None or self.committing is not None or self.coordination is not None:
            return []
        if self._hold_off_until is not None and now < self._hold_off_until:
            return []
        if not any(m in self.failed for m in self.view.members):
            return []
        return self._propose(tuple(sorted(self.wanted())), now)

    def _take_over(self, now: float) -> list[AgreementOut]:
        """No commit came: the coordinator may be gone. The lowest other live
        member of the proposal that we know takes over and proposes what it
        wants now; a change with unchanged members still ends the freeze.

        That member may never have seen the proposal (its PROPOSE lost, the
        coordinator dead before repeating it): it has no timer to fire, and we
        would stay frozen for ever, holding back what it sends (randomized
        FIFO machine, explore.py seed 231598424: a restarted coordinator's
        merge proposal reached 4 and not 3, then it crashed again; 4 never
        delivered 3's next message). So after a second take-over period with
        no commit and no newer proposal, any live member proposes."""
        answer = self.answer
        assert answer is not None
        proposal = answer.proposal
        answer.takeover_at = now + self.params.takeover_timeout
        answer.lapses += 1
        if answer.bound:
            answer.bound = False  # its coordinator is silent: we may answer others now
            self._moved(Stage.BOUND, Event.RELEASE)
        if self.coordination is not None:
            return []
        if proposal.coordinator in self.view and proposal.coordinator != self.me:
            self.failed.add(proposal.coordinator)
        live = [m for m in proposal.members if m != proposal.coordinator and m not in self.failed
                and (m in self.view or m == self.me)]
        if live and (min(live) == self.me or answer.lapses > 1):
            return self._propose(tuple(sorted(self.wanted())), now)
        return []

    def next_deadline(self) -> float | None:
        takeover_at = None if self.answer is None or self.committing is not None else self.answer.takeover_at
        if self.coordination is None and self._reconsider_at is None and takeover_at is None:
            return None  # the usual case, between view changes: the driver asks after every event
        deadlines = [d for d in (takeover_at, self._reconsider_at) if d is not None]
        if self.coordination is not None:
            deadlines += [self.coordination.deadline, self.coordination.repeat_at]
        return min(deadlines) if deadlines else None

    def beacon(self, incarnation: int, order_code: int) -> CtlSend:
        """Our view's live members: a member we know failed or leaving is not
        offered to a merging coordinator (which would wait for its flush,
        drop it, hear it in our next beacon, and propose it again)."""
        gone = self.failed | self.leaving
        live = self.view.members if not gone else tuple(m for m in self.view.members if m not in gone)
        return CtlSend(None, MsgType.BEACON, encode(Beacon(self.tag, self.view.epoch, incarnation, order_code, live)))
