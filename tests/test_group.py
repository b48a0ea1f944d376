"""``sgcs.group.GroupStack``: one group's protocol stack on one node, built
directly (no ``Node`` around it) and fed control messages as the node would
dispatch them. The view-change tests that need the whole stack live here:
what a member in an old view makes of a beacon of a later one, and how a
beacon of its own view is confirmed. What a node does with many groups and
the wire is in test_node.py; the agreement and the change alone are in
test_agreement.py and test_view_changes.py."""

from __future__ import annotations

import random

import pytest

from sgcs.config import Config, Order
from sgcs.group import GroupStack
from sgcs.membership.messages import Beacon
from sgcs.node import _interned_beacon
from sgcs.roster import roster_of
from sgcs.transport.params import Params
from sgcs.wire import ORDER_CODES


@pytest.mark.parametrize("order", ["fifo", "total"])
def test_a_member_left_out_by_a_commit_it_missed_learns_it_from_a_non_coordinators_beacon(order: str) -> None:
    """5 is in (4, 5, 6), coordinated by 4, and missed the commit of (1, 4, 6),
    coordinated by 1. Its own coordinator 4 is not the new view's coordinator
    and never beacons; 1's beacon shows 4 and 6 in a later view without 5. 5
    must count itself left out and start again alone (randomized total-order
    machine, explore.py seed 3149061291: it waited in (4, 5, 6) for ever).
    A beacon listing us, or an earlier epoch, changes nothing."""

    def member_five() -> GroupStack:
        state = GroupStack("g", Order.parse(order), 5, (4, 5, 6), Params.of(Config(secret=b"unit-test-secret")),
                           random.Random(5), 0.0)
        assert state.view.members == (4, 5, 6) and state.agreement.coordinator() == 4
        return state

    code = ORDER_CODES.index(Order.parse(order))
    state = member_five()
    state.changes.on_control(1, Beacon(state.tag, state.view.epoch, 0, code, (1, 4, 5, 6)), 0.1)
    state.changes.on_control(1, Beacon(state.tag, state.view.epoch - 1, 0, code, (1, 4, 6)), 0.1)
    assert state.view.members == (4, 5, 6), "a beacon listing us, or from before our view, is no news"
    state.changes.on_control(1, Beacon(state.tag, state.view.epoch + 1, 0, code, (1, 4, 6)), 0.2)
    assert state.view.members == (5,), "left out: alone, to merge back by beacons"


def test_a_beacon_of_our_own_view_is_confirmed_by_identity() -> None:
    """The decoder lists a beacon's members by the roster's own tuple when
    they are one (sorted, no duplicates), so each receiver finds its view in
    it by identity; any other list is left as it came, and a beacon of our
    own view, by either path, confirms it."""
    state = GroupStack("g", Order.FIFO, 5, (4, 5, 6), Params.of(Config(secret=b"unit-test-secret")),
                       random.Random(5), 0.0)
    code = ORDER_CODES.index(Order.FIFO)
    listed = Beacon(state.tag, state.view.epoch, 7, code, tuple([4, 5, 6]))  # a decoded list: another tuple
    assert listed.members is not state.view.members
    interned = _interned_beacon(listed)
    assert interned.members is roster_of((4, 5, 6)).members is state.view.members
    assert interned == listed, "only the tuple object changes"
    unsorted = Beacon(state.tag, state.view.epoch, 7, code, (6, 4, 5))
    assert _interned_beacon(unsorted) is unsorted
    for beacon in (interned, listed, unsorted):
        state.changes.confirmed_beacon = None
        assert state.changes.on_control(4, beacon, 0.1) == []
        assert state.changes.confirmed_beacon == (4, 7, state.view.epoch)
        assert state.view.members == (4, 5, 6)

