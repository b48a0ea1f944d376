"""Exclusive (single-TCD) receive across a group: the claim table (docs/handles.md).

Theory of operation
-------------------
A single-TCD receive handle is exclusive to the module that created it, in
the whole group, not only in one process. Two processes agree like this, on
sgcs's total order and views only:

1. The claimant multicasts CLAIM(code, nonce) in the group's total order.
2. Every member, delivering a CLAIM, looks at its table. If a live member
   already holds (or claimed earlier) the code, it answers "held by M";
   otherwise it records the claimant as holder and answers "no objection".
   Total order makes every member see concurrent claims in the same order, so
   they all record the same first claimant: the earliest claim wins.
3. The claimant waits for an answer from every member of the view in which
   its claim was delivered (members that fail meanwhile are dropped from the
   wait by the next view). It wins only if nobody objected. A member that
   joined after the code was taken has an empty table, but the holder itself
   objects, so a late claim still loses.
4. A loser multicasts ABANDON so that the members that recorded it forget it;
   a holder multicasts RELEASE when its handle closes; a holder that leaves
   or fails is dropped from every table by the view change.

Merges: the exchange of claim tables
------------------------------------
Steps 1-4 keep a code exclusive inside one view. They cannot see across a
partition: a process that starts alone (a singleton view, before discovery
finds the others) or a side cut off from the rest grants a code in its own
view, and when the views merge two members hold it. So after **every** view
change each member multicasts HOLDINGS(view id, granted codes, claims under
way) in the new view, and every member, once it has delivered the report of
every member of the view (each stamped with this view and delivered in it),
applies one rule to the same reports in the same state, so all reach the same
result at the same point of the total order:

* **The merge rule.** For each code that several members report as granted,
  the holder is the one granted earliest (its ``granted`` time, microseconds
  of the holder's wall clock when it won, carried in its report); equal times
  go to the lowest member id. The others lose the code (``Loss``): their
  handle ends with ``ExclusiveLost``. First come, first served is what the
  programs expect (the module started first keeps its code, the newcomer that
  won it in its lone view gives it back), and the rule needs nothing but the
  reports: clock skew between hosts can only change *which* grant counts as
  first, never how many holders remain.
* **The table after it**: the winner of each reported code; besides, the
  records of claims under way (a claim whose CLAIM was delivered in this view,
  or that its claimant reported as under way). Other records are stale (a
  RELEASE lost on the other side of a partition) and go, so they no longer
  refuse claims. A report of a code released after it was sent (RELEASE or
  ABANDON delivered before the exchange ends) does not count.

A report that was sent for an earlier view (delivered in a later one) is
ignored, and a view change starts a new exchange, so a report lost to a view
change (rolled back, or its sender gone) is made up by the next view's.

**Claims under way across a merge.** A claim waits for the members of the view
in which its CLAIM was delivered. If a new view brings members that were not in
that view, they were never asked, and one of them may hold the code: such a
claim starts again in the new view (ABANDON of the old nonce, CLAIM with a new
one), so that every claim decided after a view change was put to every member
of it. A claim decided just before the change is a granted code in the
claimant's report, and the merge rule settles it.

This module is the pure state: no I/O, fed deliveries, answers, views and reports.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple


class Holding(NamedTuple):
    """A code this member won: its claim's nonce and when it won (µs of its wall clock)."""

    tcd: int
    nonce: int
    granted: int


class Loss(NamedTuple):
    """The merge rule took ``tcd`` (won with ``nonce``) from this member and left it to ``holder``."""

    tcd: int
    nonce: int
    holder: int


@dataclass
class PendingClaim:
    tcd: int
    nonce: int
    waiting: set[int] = field(default_factory=set)
    holders: set[int] = field(default_factory=set)
    """Members that answered "held by": one of them is the holder."""
    answered: set[int] = field(default_factory=set)
    delivered: bool = False
    """Our own CLAIM was delivered here: ``waiting`` is known from then on."""
    asked: frozenset[int] = frozenset()
    """The members of the view in which our CLAIM was delivered."""

    @property
    def decided(self) -> bool:
        return self.delivered and not self.waiting

    @property
    def won(self) -> bool:
        return self.decided and not self.holders


@dataclass
class _Exchange:
    """The reports of one view's exchange, as delivered so far."""

    view_id: str
    members: frozenset[int]
    held: dict[int, list[tuple[int, int, int]]] = field(default_factory=dict)
    """Member -> its granted codes (tcd, nonce, granted)."""
    pending: set[tuple[int, int, int]] = field(default_factory=set)
    """(member, tcd, nonce) of the claims under way that members reported."""
    released: set[tuple[int, int, int]] = field(default_factory=set)
    """(member, tcd, nonce) released or abandoned in this view: not counted again from a report."""
    done: bool = False


class ClaimTable:
    """Who holds which code, as this member has seen it, plus its own pending claims."""

    def __init__(self, me: int) -> None:
        self.me = me
        self.holders: dict[int, tuple[int, int]] = {}  # tcd -> (member, nonce)
        self.pending: dict[tuple[int, int], PendingClaim] = {}  # (tcd, nonce) -> claim of mine
        self.mine: dict[int, Holding] = {}  # tcd -> a code this member won and holds
        self._fresh: set[int] = set()
        """Codes whose record was made by a CLAIM delivered in the exchange's view."""
        self._exchange: _Exchange | None = None

    # ------------------------------------------------------------ claims in one view

    def on_claim(self, tcd: int, claimant: int, nonce: int, members: tuple[int, ...]) -> int:
        """A CLAIM was delivered in the view ``members``; returns the answer to
        send the claimant: 0 (no objection) or the holder's id."""
        held = self.holders.get(tcd)
        if held is not None and held[0] in members and held != (claimant, nonce):
            answer = held[0]
        else:
            self.holders[tcd] = (claimant, nonce)
            self._fresh.add(tcd)
            answer = 0
        return answer

    def own_claim_delivered(self, tcd: int, nonce: int, members: tuple[int, ...]) -> PendingClaim | None:
        """Our CLAIM was delivered in view ``members``: wait for everyone who
        delivered it (answers may have come first: unicasts are not ordered
        with the multicast). Returns the claim if already decided."""
        claim = self.pending.get((tcd, nonce))
        if claim is None or claim.delivered:
            return None
        claim.delivered = True
        claim.asked = frozenset(members)
        claim.waiting = set(members) - claim.answered
        return self._settle(claim)

    def start_claim(self, tcd: int, nonce: int) -> PendingClaim:
        claim = PendingClaim(tcd, nonce)
        self.pending[(tcd, nonce)] = claim
        return claim

    def on_answer(self, tcd: int, nonce: int, member: int, holder: int) -> PendingClaim | None:
        """An answer from ``member`` to our claim; returns the claim once decided."""
        claim = self.pending.get((tcd, nonce))
        if claim is None or member in claim.answered:
            return None
        claim.answered.add(member)
        claim.waiting.discard(member)
        if holder:
            claim.holders.add(holder)
        return self._settle(claim)

    def _settle(self, claim: PendingClaim) -> PendingClaim | None:
        if not claim.decided:
            return None
        del self.pending[(claim.tcd, claim.nonce)]
        return claim

    def granted(self, claim: PendingClaim, granted: int) -> None:
        """Our ``claim`` won, at ``granted`` (µs of our wall clock): we hold the code from now on."""
        self.mine[claim.tcd] = Holding(claim.tcd, claim.nonce, granted)

    def give_up(self, tcd: int, nonce: int) -> None:
        """We release (or abandon) our hold of ``tcd`` with ``nonce``."""
        if tcd in self.mine and self.mine[tcd].nonce == nonce:
            del self.mine[tcd]

    def on_release(self, tcd: int, member: int, nonce: int) -> None:
        """RELEASE or ABANDON delivered: forget that member's hold of the code."""
        if self.holders.get(tcd) == (member, nonce):
            del self.holders[tcd]
        if self._exchange is not None and not self._exchange.done:
            self._exchange.released.add((member, tcd, nonce))

    def holder(self, tcd: int) -> int | None:
        """The member that holds ``tcd`` (or has a claim of it under way), as this table has it."""
        held = self.holders.get(tcd)
        return None if held is None else held[0]

    # ------------------------------------------------------------ view changes

    def stale_claims(self, members: tuple[int, ...]) -> list[PendingClaim]:
        """Our delivered, undecided claims whose view lacked some member of the new
        view ``members``: those members were never asked. Returns them, taken out
        of ``pending``; the caller restarts each in the new view (``restart``)."""
        live = set(members)
        stale = [c for c in self.pending.values() if c.delivered and not live <= c.asked]
        for claim in stale:
            del self.pending[(claim.tcd, claim.nonce)]
        return stale

    def restart(self, claim: PendingClaim, nonce: int) -> PendingClaim:
        """``claim`` starts again under a new ``nonce`` (answers to the old one are ignored from now on)."""
        return self.start_claim(claim.tcd, nonce)

    def on_view(self, members: tuple[int, ...]) -> list[PendingClaim]:
        """A new view: forget holders that are gone, stop waiting for them; returns claims now decided."""
        live = set(members)
        for tcd in [t for t, (m, _) in self.holders.items() if m not in live]:
            del self.holders[tcd]
        decided = []
        for claim in list(self.pending.values()):
            if claim.delivered:
                claim.waiting &= live
                settled = self._settle(claim)
                if settled is not None:
                    decided.append(settled)
        return decided

    def begin_exchange(self, view_id: str, members: tuple[int, ...]) -> tuple[list[Holding], list[tuple[int, int]]]:
        """The exchange of view ``view_id`` starts; returns our report: the codes
        we hold and our claims under way (``(tcd, nonce)``)."""
        self._exchange = _Exchange(view_id, frozenset(members))
        self._fresh = set()
        return sorted(self.mine.values()), sorted(self.pending)

    def on_report(self, view_id: str, delivered_in: str, member: int, held: list[tuple[int, int, int]],
                  pending: list[tuple[int, int]]) -> list[Loss] | None:
        """``member``'s report for view ``view_id`` was delivered in view
        ``delivered_in``. Returns None while reports are missing (or the report
        does not count: another view's, a second one, not a member's); once the
        last one is in, applies the merge rule and returns what we lost (maybe nothing)."""
        exchange = self._exchange
        if (exchange is None or exchange.done or view_id != exchange.view_id or delivered_in != exchange.view_id
                or member not in exchange.members or member in exchange.held):
            return None
        exchange.held[member] = list(held)
        exchange.pending.update((member, tcd, nonce) for tcd, nonce in pending)
        if len(exchange.held) < len(exchange.members):
            return None
        exchange.done = True
        return self._reconcile(exchange)

    @property
    def reconciled_view(self) -> str | None:
        """The view whose exchange is complete (its merge rule applied), if the last one begun is."""
        exchange = self._exchange
        return exchange.view_id if exchange is not None and exchange.done else None

    def _reconcile(self, exchange: _Exchange) -> list[Loss]:
        candidates: dict[int, list[tuple[int, int, int]]] = {}  # tcd -> [(granted, member, nonce)]
        for member, held in exchange.held.items():
            for tcd, nonce, granted in held:
                if (member, tcd, nonce) not in exchange.released:
                    candidates.setdefault(tcd, []).append((granted, member, nonce))
        table: dict[int, tuple[int, int]] = {}
        losses: list[Loss] = []
        for tcd, grants in candidates.items():
            _, holder, holder_nonce = min(grants)  # earliest grant; equal times: lowest member id
            table[tcd] = (holder, holder_nonce)
            for _, member, nonce in grants:
                if member == self.me and (member, nonce) != (holder, holder_nonce):
                    losses.append(Loss(tcd, nonce, holder))
                    self.give_up(tcd, nonce)
        for tcd, (member, nonce) in self.holders.items():
            if tcd not in table and (tcd in self._fresh or (member, tcd, nonce) in exchange.pending):
                table[tcd] = (member, nonce)  # a claim under way: its own answers decide it
        self.holders = table
        return losses
