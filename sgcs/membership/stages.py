"""The named states of a view change on one member, and the moves between them.

Theory of operation
-------------------
A view change (SGCS paper, section 4.2: initiate, agree, install) is seen by
each member from two sides, and each side is one small state machine:

* **As a member** (``Stage``): every member of a proposal, its coordinator
  included, answers it with a FLUSH, waits for the COMMIT, and installs the
  view. ``ViewAgreement.stage`` reads the stage from the one record of our
  answer (``_Answer``) and the commit being completed; every method that
  changes them checks its move against ``STAGES``.
* **As coordinator** (``Coordinating``): the member that proposes collects
  the answers, commits, and waits for every INSTALLED
  (``ViewAgreement.coordinating``, checked against ``COORDINATING``).

The data plane's side of the same change (which messages belong to the old
view, which wait for the new one) is ``synchrony.Phase``; ``PHASES`` says
which phases go with which stage, and the exhaustive checker holds every
member to it in every state it reaches. ``describe.markdown`` prints the
three tables into ``docs/view-change.md``; a test keeps the two alike.

Each move names the rule it implements: a step of the paper, a property of
extended virtual synchrony (Moser, Amir, Melliar-Smith and Agarwal, 1994), or
the finding that introduced it.
"""

from __future__ import annotations

from enum import Enum


class Stage(Enum):
    """Where a member is in a view change (``MEANING`` says what each is)."""

    STABLE = "stable"
    ANSWERED = "answered"
    BOUND = "bound"
    COMMITTED = "committed"


class Coordinating(Enum):
    """Where the change a member coordinates is."""

    IDLE = "idle"
    PROPOSING = "proposing"
    CONFIRMING = "confirming"


class Role(Enum):
    """The part a member plays in the change under way."""

    MEMBER = "member"
    COORDINATOR = "coordinator"
    PARTICIPANT = "participant"
    JOINER = "joiner"


MEANING: dict[Enum, str] = {
    Stage.STABLE: "no change here: messages are delivered as they come",
    Stage.ANSWERED: "we answered a proposal (our own, or one we were released from): frozen at our snapshot, "
                    "sending optimistically under the proposed view",
    Stage.BOUND: "we answered another coordinator's proposal, which it may commit at any moment: no other "
                 "coordinator's proposal is answered until it commits it, gives it up, or stays silent for "
                 "takeover_timeout",
    Stage.COMMITTED: "a commit is being completed here (its cut fetched, then the view installed)",
    Coordinating.IDLE: "we coordinate no change",
    Coordinating.PROPOSING: "our proposal is out; answers are being collected",
    Coordinating.CONFIRMING: "our commit is out; INSTALLED answers are being collected",
    Role.MEMBER: "no change here",
    Role.COORDINATOR: "it proposed the change (the lowest live member, or a take-over)",
    Role.PARTICIPANT: "it answered a proposal of a member of its view",
    Role.JOINER: "it answered a proposal from outside its view: a merge or a join",
}


class Event(Enum):
    ANSWER_OWN = "answer own proposal"
    ANSWER_OTHER = "answer another's proposal"
    RELEASE = "released"
    COMMIT = "commit"
    LEFT_OUT = "left out"
    GIVE_UP = "give up the cut"
    INSTALL = "install"
    PROPOSE = "propose"
    SEND_COMMIT = "send commit"
    ABANDON = "abandon"
    CONFIRMED = "confirmed"


Table = dict[tuple[Enum, Event], tuple[Enum, str]]

STAGES: dict[tuple[Stage, Event], tuple[Stage, str]] = {
    (Stage.STABLE, Event.ANSWER_OWN): (Stage.ANSWERED, "SGCS 4.2 phase 1: freeze a snapshot and flush it"),
    (Stage.STABLE, Event.ANSWER_OTHER): (Stage.BOUND, "SGCS 4.2 phase 1; bound until the coordinator "
                                                      "commits or gives up (exhaustive check P)"),
    (Stage.ANSWERED, Event.ANSWER_OWN): (Stage.ANSWERED, "a higher attempt: the snapshot stays frozen, what we "
                                                         "sent under the last one is offered for rollback"),
    (Stage.ANSWERED, Event.ANSWER_OTHER): (Stage.BOUND, "a higher proposal wins (SGCS 4.2); ours is abandoned"),
    (Stage.BOUND, Event.ANSWER_OTHER): (Stage.BOUND, "the same coordinator's higher attempt or epoch: it "
                                                     "gave the one we answered up"),
    (Stage.BOUND, Event.RELEASE): (Stage.ANSWERED, "the coordinator aborted its proposal, or was silent "
                                                   "for takeover_timeout"),
    (Stage.ANSWERED, Event.COMMIT): (Stage.COMMITTED, "SGCS 4.2 phase 2: the commit of the proposal we "
                                                      "answered last names the cut"),
    (Stage.BOUND, Event.COMMIT): (Stage.COMMITTED, "SGCS 4.2 phase 2: the commit of the proposal we are "
                                                   "bound to names the cut"),
    (Stage.STABLE, Event.LEFT_OUT): (Stage.COMMITTED, "a commit or beacon shows a later view without us: "
                                                      "a singleton, then a merge (EVS: self-delivery)"),
    (Stage.ANSWERED, Event.LEFT_OUT): (Stage.COMMITTED, "left out of the change we answered: a singleton, "
                                                        "then a merge"),
    (Stage.BOUND, Event.LEFT_OUT): (Stage.COMMITTED, "left out of the change we answered: a singleton, then "
                                                     "a merge"),
    (Stage.COMMITTED, Event.GIVE_UP): (Stage.COMMITTED, "the cut is incomplete after cut_timeout: start again "
                                                        "alone, every installed view stays consistent"),
    (Stage.COMMITTED, Event.INSTALL): (Stage.STABLE, "SGCS 4.2 phase 3: the old view's messages are "
                                                     "delivered, the new view is installed"),
}
"""The member's moves: (stage, event) -> (next stage, the rule)."""

COORDINATING: dict[tuple[Coordinating, Event], tuple[Coordinating, str]] = {
    (Coordinating.IDLE, Event.PROPOSE): (Coordinating.PROPOSING, "SGCS 4.2 phase 1: the lowest live member "
                                                                 "wants another membership"),
    (Coordinating.PROPOSING, Event.PROPOSE): (Coordinating.PROPOSING, "again: refused (one view per epoch per "
                                                                      "member), silent members dropped, or "
                                                                      "the wanted membership changed"),
    (Coordinating.CONFIRMING, Event.PROPOSE): (Coordinating.PROPOSING, "the next change, once every live "
                                                                       "member answered INSTALLED (a failed, "
                                                                       "restarted or leaving one is not "
                                                                       "waited for)"),
    (Coordinating.PROPOSING, Event.SEND_COMMIT): (Coordinating.CONFIRMING, "SGCS 4.2 phase 2: every proposed "
                                                                           "member answered"),
    (Coordinating.PROPOSING, Event.ABANDON): (Coordinating.IDLE, "a higher proposal, a preempting FLUSH or "
                                                                 "a view installed since: an abort releases "
                                                                 "the members bound to it"),
    (Coordinating.CONFIRMING, Event.ABANDON): (Coordinating.IDLE, "another coordinator's view installed "
                                                                  "over ours"),
    (Coordinating.CONFIRMING, Event.CONFIRMED): (Coordinating.IDLE, "every member answered INSTALLED, or "
                                                                    "view_timeout passed: the silent ones "
                                                                    "are excluded next"),
}
"""The coordinator's moves: (state, event) -> (next state, the rule)."""
