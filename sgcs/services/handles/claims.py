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

This module is the pure state: no I/O, fed deliveries, answers and views.
"""

from __future__ import annotations

from dataclasses import dataclass, field


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

    @property
    def decided(self) -> bool:
        return self.delivered and not self.waiting

    @property
    def won(self) -> bool:
        return self.decided and not self.holders


class ClaimTable:
    """Who holds which code, as this member has seen it, plus its own pending claims."""

    def __init__(self, me: int) -> None:
        self.me = me
        self.holders: dict[int, tuple[int, int]] = {}  # tcd -> (member, nonce)
        self.pending: dict[tuple[int, int], PendingClaim] = {}  # (tcd, nonce) -> claim of mine

    def on_claim(self, tcd: int, claimant: int, nonce: int, members: tuple[int, ...]) -> int:
        """A CLAIM was delivered in the view ``members``; returns the answer to
        send the claimant: 0 (no objection) or the holder's id."""
        held = self.holders.get(tcd)
        if held is not None and held[0] in members and held != (claimant, nonce):
            answer = held[0]
        else:
            self.holders[tcd] = (claimant, nonce)
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

    def on_release(self, tcd: int, member: int, nonce: int) -> None:
        """RELEASE or ABANDON delivered: forget that member's hold of the code."""
        if self.holders.get(tcd) == (member, nonce):
            del self.holders[tcd]

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
