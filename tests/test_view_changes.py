"""``membership.change.ViewChanges``, the one owner of a view change, against
a recording data plane: the steps come in the order the protocol needs
(freeze before the cut, the old view drained before the new one is
announced, the streams restarted before the order), a cut that cannot be
completed is given up after ``cut_timeout``, and a member left out delivers
its own messages in a transitional view of itself first."""

from __future__ import annotations

from typing import Iterable

from sgcs.membership.agreement import CtlSend, AgreedView
from sgcs.membership.change import DataPlane, ViewChanges
from sgcs.membership.messages import Beacon, Flush
from sgcs.membership.stages import Stage
from sgcs.transport.params import Params
from sgcs.records import Message
from sgcs.wire import MsgType

PARAMS = Params(view_timeout=0.5)


def message(sender: int, seq: int) -> Message:
    return Message(sender, seq, (), b"x", seq, False, 0, 0)


class Plane:
    """A data plane that records each call by name and holds what the cut needs."""

    def __init__(self, complete: bool = True, own_in_order: Iterable[Message] = ()) -> None:
        self.delivered_high: dict[int, int] = {}
        self.calls: list[str] = []
        self.complete = complete
        self.own_in_order = list(own_in_order)
        self.delivered: list[Message] = []
        self.announced: list[tuple[str, tuple[int, ...]]] = []

    def own_last_record(self) -> int:
        return 0

    def received_vector(self) -> dict[int, int]:
        return {}

    def cap_stability(self, limits: dict[int, int] | None) -> None:
        self.calls.append("cap_stability")

    def began(self, optimistic: AgreedView) -> None:
        self.calls.append("began")

    def fetch_cut(self, limits: dict[int, int], holders: tuple[int, ...], foreign: frozenset[int],
                  now: float) -> None:
        self.calls.append("fetch_cut")

    def holds(self, limits: dict[int, int], senders: Iterable[int]) -> bool:
        self.calls.append("holds")
        return self.complete

    def order_and_deliver(self, messages: list[Message]) -> None:
        self.calls.append("order_and_deliver")
        self.delivered += messages

    def deliver_ordered(self) -> None:
        self.calls.append("deliver_ordered")

    def deliver(self, messages: list[Message]) -> None:
        self.calls.append("deliver")
        self.delivered += messages

    def take_own_ordered(self) -> tuple[list[Message], int]:
        self.calls.append("take_own_ordered")
        own, self.own_in_order = self.own_in_order, []
        return own, 3

    def drain_order(self) -> tuple[list[Message], int]:
        self.calls.append("drain_order")
        return [], 0

    def transitional(self, view: AgreedView, members: tuple[int, ...]) -> None:
        self.calls.append("transitional")
        self.announced.append(("transitional", members))

    def restart_streams(self, members: tuple[int, ...], starts: dict[int, int]) -> None:
        self.calls.append("restart_streams")

    def forget_member(self, member: int) -> None:
        self.calls.append(f"forget_member {member}")

    def forget_unicasts(self, member: int) -> None:
        self.calls.append(f"forget_unicasts {member}")

    def restart_order(self, starts: dict[int, int]) -> None:
        self.calls.append("restart_order")

    def installed(self, old: AgreedView, new: AgreedView, leavers: frozenset[int], rejoined: frozenset[int]) -> None:
        self.calls.append("installed")
        self.announced.append(("installed", new.members))

    def report(self, rolled_back: list[Message]) -> None:
        self.calls.append("report")


def changes(plane: DataPlane, me: int = 1, members: tuple[int, ...] = (1, 2, 3), *, ordered: bool = False,
            safe: bool = False) -> ViewChanges:
    return ViewChanges(plane, me, members, PARAMS, 0.0, tag=7, order_code=0, ordered=ordered, safe=safe)


def test_a_coordinator_excluding_a_failed_member_takes_every_step_in_order() -> None:
    plane = Plane()
    view = changes(plane, ordered=True)
    assert view.stage is Stage.STABLE and not view.optimistic
    frames = view.member_failed(3, 0.1)
    # the PROPOSE and the COMMIT go out to 2; our own answers were handled at once
    assert [f.msg_type for f in frames if isinstance(f, CtlSend)] == [MsgType.PROPOSE]
    assert view.stage is Stage.ANSWERED and view.optimistic and view.answered
    assert plane.calls == ["cap_stability", "began"], "freeze: no stability past the snapshot, then announce"
    plane.calls.clear()
    accepted = view.agreement.accepted
    assert accepted is not None and accepted.coordinator == 1
    frames = view.on_control(2, Flush(7, accepted.epoch, accepted.attempt, 0, 0, (), 0), 0.2, incarnation=0)
    assert [f.msg_type for f in frames if isinstance(f, CtlSend)] == [MsgType.COMMIT]
    assert plane.calls == ["fetch_cut", "order_and_deliver", "deliver_ordered", "holds", "drain_order", "deliver",
                           "restart_streams", "forget_member 3", "restart_order", "installed", "report",
                           "order_and_deliver"]
    assert view.view.members == (1, 2) and view.stage is Stage.STABLE and not view.optimistic
    assert view.sync.phase.value == "stable"


def test_a_cut_that_stays_incomplete_is_given_up_after_cut_timeout() -> None:
    plane = Plane(complete=False)
    view = changes(plane)
    view.member_failed(3, 0.1)
    accepted = view.agreement.accepted
    assert accepted is not None
    view.on_control(2, Flush(7, accepted.epoch, accepted.attempt, 0, 0, (), 0), 0.2, incarnation=0)
    assert view.completing() and view.stage is Stage.COMMITTED and view.view.members == (1, 2, 3)
    assert view.next_deadline() is not None
    view.on_timeout(0.2 + PARAMS.cut_timeout / 2)
    assert view.completing(), "not yet overdue"
    view.on_timeout(0.3 + PARAMS.cut_timeout)
    view.on_timeout(0.4 + PARAMS.cut_timeout)
    assert view.view.members == (1,), "given up: alone, to merge back by beacons"
    assert not view.completing() and view.stage is Stage.STABLE


def test_a_member_left_out_delivers_its_own_messages_in_a_transitional_view_first() -> None:
    own = [message(5, 1), message(5, 2)]
    plane = Plane(own_in_order=own)
    view = changes(plane, me=5, members=(4, 5, 6), ordered=True, safe=True)
    # the coordinator's beacon shows a later view without us: we missed our exclusion
    view.on_control(4, Beacon(7, view.view.epoch + 1, 0, 0, (4, 6)), 0.1)
    assert view.view.members == (5,)
    assert plane.announced[0] == ("transitional", (5,)), "the members moving with us: ourselves"
    assert plane.announced[1] == ("installed", (5,))
    assert plane.delivered[:2] == own
    assert view.sync.discarded == 3, "the others' messages our order held are discarded"
    assert plane.calls.index("transitional") < plane.calls.index("deliver") < plane.calls.index("installed")


def test_a_restarted_member_gets_its_unicasts_reported_before_the_change() -> None:
    plane = Plane()
    view = changes(plane)
    view.member_restarted(2, 0.1)
    assert plane.calls[0] == "forget_unicasts 2"
    assert 2 in view.agreement.failed and view.stage is Stage.ANSWERED


def test_beacons_of_another_order_or_a_rejected_member_change_nothing() -> None:
    plane = Plane()
    view = changes(plane, me=1, members=(1,))
    assert view.on_control(9, Beacon(7, 3, 0, 2, (9,)), 0.1) == [], "another order"
    view.reject(9)
    assert view.on_control(9, Beacon(7, 3, 0, 0, (9,)), 0.1) == [], "rejected"
    assert view.agreement.joiners == {}
    frames = view.on_control(8, Beacon(7, 3, 0, 0, (8,)), 0.1)
    assert [f.msg_type for f in frames if isinstance(f, CtlSend)] == [MsgType.PROPOSE], "the lower id proposes"
