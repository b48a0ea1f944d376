"""The view-change state machine (sgcs/membership/synchrony.py): its
transition table, the gate, and what a settled change does with each held
message. The randomized membership machines drive it through whole groups;
these pin down each rule on its own."""

from __future__ import annotations

import pytest

from sgcs.membership.agreement import Commit, AgreedView, lineage
from sgcs.membership.synchrony import TRANSITIONS, Phase, Step, Synchrony
from sgcs.records import Message

OLD = AgreedView.of(3, (1, 2, 3))


def msg(sender: int, seq: int, optimistic: bool = False, epoch: int = 0) -> Message:
    return Message(sender, seq, (), b"x", 0, optimistic, epoch % 64)


def commit(members: tuple[int, ...], cut: dict[int, int], rollback: dict[int, int] | None = None,
           withdrawn: dict[int, int] | None = None, epoch: int = 4) -> Commit:
    return Commit(AgreedView.of(epoch, members), cut, rollback or {}, 1, 1, withdrawn=withdrawn or {})


def test_every_phase_is_reachable_and_every_step_used() -> None:
    assert {after for after in TRANSITIONS.values()} | {Phase.STABLE} == set(Phase)
    assert {step for _, step in TRANSITIONS} == set(Step)


@pytest.mark.parametrize("phase", list(Phase))
@pytest.mark.parametrize("step", list(Step))
def test_a_step_outside_the_table_is_refused(phase: Phase, step: Step) -> None:
    change = Synchrony(1)
    change.phase = phase
    if (phase, step) in TRANSITIONS:
        change._step(step)
        assert change.phase is TRANSITIONS[phase, step]
    else:
        with pytest.raises(AssertionError, match=step.value):
            change._step(step)
        assert change.phase is phase


def test_a_full_change_walks_the_phases() -> None:
    change = Synchrony(1)
    change.freeze({1: 5, 2: 7})
    assert change.phase is Phase.FROZEN and change.frozen and change.changing
    c = commit((1, 2), {1: 6, 2: 7})
    assert change.begin({1: 6, 2: 7}, frozenset(), 3) == []
    assert change.phase is Phase.COMPLETING and not change.frozen
    change.install()
    assert change.phase is Phase.INSTALLING and change.completing
    assert change.settle(c, OLD, (1, 2), frozenset(), left_out=False) == ([], [])
    assert change.phase is Phase.STABLE and not change.changing and not change.completing


def test_the_gate_holds_past_the_snapshot_and_keeps_fifo() -> None:
    change = Synchrony(1)
    change.freeze({2: 5})
    passed = change.gate([msg(2, 5), msg(2, 6), msg(3, 1)], epoch=3)
    assert passed == [msg(2, 5)]  # 2's 6 past its snapshot; 3 not in the snapshot at all
    assert change.gate([msg(2, 4)], epoch=3) == []  # behind a held message of the same sender
    assert [m.seq for m in change.held] == [6, 1, 4]


def test_optimistic_messages_of_a_change_not_seen_here_are_held_even_when_stable() -> None:
    change = Synchrony(1)
    early = msg(2, 9, optimistic=True, epoch=4)
    assert change.gating([early])
    assert change.gate([early, msg(2, 10)], epoch=3) == []
    assert change.snapshot({2: 12, 3: 4}) == {2: 8, 3: 4}  # our flush stops short of it
    superseded = msg(3, 2, optimistic=True, epoch=3)  # a proposal of an epoch we reached
    assert change.gate([superseded], epoch=3) == [superseded]


def test_settle_sorts_held_messages() -> None:
    change = Synchrony(1)
    change.freeze({1: 0, 2: 0, 3: 0})
    for m in (msg(1, 1, True, 4), msg(2, 1, True, 4), msg(2, 2, True, 4), msg(3, 1, True, 4)):
        change.gate([m], epoch=3)
    c = commit((1, 2), cut={}, rollback={1: 1}, withdrawn={2: 1})
    change.begin({1: 0, 2: 0, 3: 0}, frozenset(), 3)
    change.install()
    kept, rolled_back = change.settle(c, OLD, (1, 2), frozenset(), left_out=False)
    assert kept == [msg(2, 2, True, 4)]  # past the withdrawn range: delivered in the new view
    assert rolled_back == [msg(1, 1, True, 4)]  # our own, rolled back by the commit
    assert change.discarded == 1  # 2's first, withdrawn; 3 left the view, its message goes too
    assert change.void == {1: (0, 1)} and change.withdrawn == {2: (0, 1)}
    later, back = change.screen([msg(1, 1), msg(1, 2), msg(2, 1)])
    assert later == [msg(1, 2)] and back == [msg(1, 1)] and change.discarded == 2


def test_a_held_message_within_the_cut_is_never_delivered_twice() -> None:
    change = Synchrony(1)
    change.freeze({1: 0, 2: 0})
    own = msg(1, 3, True, 4)
    change.gate([own, msg(2, 1, True, 4)], epoch=3)
    c = commit((1, 2), cut={1: 3, 2: 1})
    change.begin({1: 3, 2: 1}, frozenset(), 3)
    change.install()
    assert change.settle(c, OLD, (1, 2), frozenset(), left_out=False) == ([], [])
    # ours: the members of the view we missed hold or delivered it; we say so
    assert change.take_undelivered() == [(own, "view_missed")] and change.take_undelivered() == []


def test_giving_up_keeps_own_messages_of_the_abandoned_view_of_unknown_fate() -> None:
    change = Synchrony(1)
    change.freeze({1: 0, 2: 0})
    change.gate([msg(1, 1, True, 4), msg(1, 2, True, 4)], epoch=3)
    c = commit((1, 2), cut={}, rollback={1: 1})
    change.begin({1: 0, 2: 0}, frozenset(), 3)
    assert not change.overdue(10.0, cut_timeout=2.0) and change.deadline == 12.0
    assert not change.overdue(11.9, cut_timeout=2.0) and change.overdue(12.0, cut_timeout=2.0)
    change.give_up(c)
    assert change.phase is Phase.FROZEN and change.abandoned is c
    alone = Commit(AgreedView.of(4, (1,)), {}, {}, 1, 0)
    change.begin_alone()
    change.install()
    kept, rolled_back = change.settle(alone, OLD, (1,), frozenset(), left_out=True)
    # seq 1 the abandoned commit rolled back: we may say so; seq 2 its members may deliver
    assert kept == [] and rolled_back == [msg(1, 1, True, 4)]
    assert change.take_undelivered() == [(msg(1, 2, True, 4), "left_out")]
    assert change.abandoned is None


def test_a_message_sent_in_a_view_we_missed_is_not_delivered_again_in_the_next() -> None:
    """Sender 2 installed the view we missed (we flushed from OLD, it from the
    view after it), and sent 2#5 there after its optimistic 2#4: both are
    within the next commit's cut, so that view's members delivered them
    there. We held 2#5 behind 2#4; delivering it in the new view would put
    it in two views (the 14-node storm of benchmarks/evidence.py, seed 2:
    invariants 3 and 5 broke)."""
    change = Synchrony(1)
    change.freeze({1: 0, 2: 3})
    missed = AgreedView.of(4, (1, 2, 3))
    change.gate([msg(2, 4, True, 4), msg(2, 5)], epoch=3)
    assert [(m.seq, m.optimistic) for m in change.held] == [(4, True), (5, False)]
    c = commit((1, 2), cut={2: 5})
    c = Commit(c.view, c.cut, c.rollback, c.coordinator, c.attempt,
               origins={2: lineage(missed, OLD), 1: lineage(OLD, None)})
    assert c.moved_on(2, OLD)
    change.begin({1: 0, 2: 5}, frozenset(), 3)
    change.install()
    assert change.settle(c, OLD, (1, 2), frozenset(), left_out=False) == ([], [])


def test_a_message_sent_under_an_earlier_epoch_of_the_committed_proposal_goes_on() -> None:
    """Sender 2 left our view for one of its own (we missed it), answered
    coordinator 2's proposal at epoch 4 and sent 2#2 under it; the
    coordinator proposed the same members again at epochs 5, 6 and 7 and
    committed the last, with 2#2 above the cut and not withdrawn. The other
    members deliver 2#2 in the new view; so must we, though its tag (4) is
    not the commit's epoch (7) and its sender moved on from our view
    (membership machine with the ring detector, explore.py seed 607398007:
    invariant 5)."""
    change = Synchrony(1)
    change.freeze({1: 0, 2: 0})
    alone = AgreedView.of(2, (2,))
    change.gate([msg(2, 1, True, 2), msg(2, 2, True, 4)], epoch=3)
    c = commit((1, 2), cut={2: 1}, epoch=7)
    c = Commit(c.view, c.cut, c.rollback, c.coordinator, c.attempt,
               origins={2: lineage(alone, OLD), 1: lineage(OLD, None)})
    assert c.moved_on(2, OLD)
    change.begin({1: 0, 2: 1}, frozenset(), 3)
    change.install()
    kept, rolled_back = change.settle(c, OLD, (1, 2), frozenset(), left_out=False)
    assert kept == [msg(2, 2, True, 4)] and rolled_back == []  # 2#1, within the cut, belongs to the view we missed
