"""The events a group yields to the application: the action -> event mapping
of ``sgcs.api`` (no network), the driver's routing table, and one view change
between two real nodes on loopback."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

import sgcs
from sgcs import actions
from sgcs.api import _event_of
from sgcs.io import trio_driver
from sgcs.io.timings import Timings

SECRET = b"api-events-test-secret"
WAIT = 10.0
"""Seconds any single wait may take before the test fails instead of hanging."""


# ------------------------------------------------------------ action -> event


def test_deliver_becomes_delivery() -> None:
    event = _event_of(actions.Deliver(7, 3, b"hi", "v1", "g", dest=9))
    assert event == sgcs.Delivery(7, 3, b"hi", "v1", "g", 9)
    assert isinstance(event, sgcs.Delivery) and event.unicast


def test_view_installed_becomes_view_change_with_joined_left_failed() -> None:
    event = _event_of(actions.ViewInstalled("g", "v2", (1, 4, 5), joined=(5,), left=(2,), failed=(3,)))
    assert isinstance(event, sgcs.ViewChange)
    assert (event.view_id, event.members, event.group) == ("v2", (1, 4, 5), "g")
    assert (event.joined, event.left, event.failed) == ((5,), (2,), (3,))
    assert event.view == sgcs.View("v2", (1, 4, 5))
    assert 4 in event.view and len(event.view) == 3


def test_view_change_defaults_and_positional_fields_unchanged() -> None:
    # Code written before joined/left/failed existed keeps working.
    event = sgcs.ViewChange("v1", (1,), "g")
    assert (event.joined, event.left, event.failed) == ((), (), ())
    assert _event_of(actions.ViewInstalled("g", "v1", (1,))) == event


def test_the_node_makes_the_public_events_themselves() -> None:
    # One class per fact: what the node outputs is what the application gets.
    for action in (actions.OptimisticView("v3", (1, 2), "g"), actions.Rollback(((1, 10), (2, 4)), "g"),
                   actions.MemberSuspected(5, "g"), actions.MemberBusy(5, "g")):
        assert _event_of(action) is action


def test_optimistic_view() -> None:
    event = sgcs.OptimisticView("v3", (1, 2), "g")
    assert event.view == sgcs.View("v3", (1, 2)) and event.group == "g"


def test_rollback() -> None:
    event = sgcs.Rollback(((1, 10), (2, 4)), "g")
    assert event.messages == ((1, 10), (2, 4)) and event.group == "g"


def test_member_suspected_and_busy() -> None:
    assert (sgcs.MemberSuspected(5, "g").member, sgcs.MemberBusy(5, "g").member) == (5, 5)


def test_group_error_raises_usage_error() -> None:
    with pytest.raises(sgcs.UsageError, match="other order"):
        _event_of(actions.GroupError("g", "the group uses the other order"))


def test_events_are_frozen_and_slotted() -> None:
    for event in (
        sgcs.ViewChange("v", (1,), "g"),
        sgcs.OptimisticView("v", (1,), "g"),
        sgcs.Rollback(((1, 1),), "g"),
        sgcs.MemberSuspected(1, "g"),
        sgcs.MemberBusy(1, "g"),
    ):
        assert not hasattr(event, "__dict__")
        with pytest.raises(AttributeError):
            event.group = "h"  # type: ignore[misc]
        assert type(event).__doc__


def test_the_lazy_api_names_are_the_ones_typed_and_exported() -> None:
    import ast

    tree = ast.parse(Path(sgcs.__file__).read_text())
    typed = {alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module == "api"
             for alias in node.names}
    assert typed == set(sgcs._API_NAMES) and set(sgcs._API_NAMES) <= set(sgcs.__all__)
    for name in sgcs.__all__:
        assert getattr(sgcs, name) is not None


def test_public_names() -> None:
    for name in ("OptimisticView", "Rollback", "MemberSuspected", "MemberBusy", "ViewChange"):
        assert name in sgcs.__all__
        assert getattr(sgcs, name) is getattr(sgcs.api, name)


async def test_driver_routes_every_app_event_to_the_group_queue() -> None:
    """Each kind reaches ``_to_app`` unchanged (some pass the timings on the way)."""
    samples = [
        actions.Deliver(1, 8, b"x", "v1.1-a", "g"), actions.ViewInstalled("g", "v1.1-a", (1,)),
        actions.GroupError("g", "refused"), actions.OptimisticView("v1.2-b", (1, 2), "g"),
        actions.Rollback(((1, 8),), "g"), actions.MemberSuspected(2, "g"), actions.MemberBusy(2, "g"),
        actions.NotDelivered("g", actions.MessageId(1, 0, 16), "left_out"),
        actions.TransitionalView("g", "v1.1-a", (1,)),
    ]

    class Node:
        @staticmethod
        def name_of(member: int) -> str | None:
            return None

    class Probe:  # the parts of a driver the routes touch
        timings, _me, got, node = Timings(), 1, list[object](), Node()

        def _to_app(self, action: object) -> None:
            self.got.append(action)

    probe = Probe()
    for sample in samples:
        route = trio_driver._ROUTES[type(sample)]
        if route is trio_driver.TrioDriver._to_app:
            probe._to_app(sample)
        else:
            route(probe, sample)  # type: ignore[arg-type]
    assert probe.got == samples


# ------------------------------------------------------------- real sockets


def make_config(name: str, network: dict[str, Any]) -> sgcs.Config:
    return sgcs.Config(name=name, secret=SECRET, beacon_interval=0.1, **network)


@pytest.mark.integration
async def test_members_learn_each_others_names_from_their_hellos(network: dict[str, Any]) -> None:
    """``Config.name`` reaches the others: in each ``ViewChange.names`` and
    from ``name_of``, on both sides of a join (the joiner's HELLO, the
    members' answers); a node knows its own name."""
    async with sgcs.open_node(make_config("ann", network)) as a, a.join("g") as ga, \
            sgcs.open_node(make_config("bob", network)) as b, b.join("g") as gb:
        for group, me in ((ga, a), (gb, b)):
            with trio.fail_after(WAIT):
                while True:
                    event = await group.receive()
                    if isinstance(event, sgcs.ViewChange) and len(event.members) == 2:
                        break
            assert event.names == {a.id: "ann", b.id: "bob"}, (me.name, event)
        assert (a.name_of(b.id), b.name_of(a.id), a.name_of(a.id), a.name_of(12345)) == ("bob", "ann", "ann", None)
        assert "'bob'" in repr(event)


@pytest.mark.integration
async def test_view_change_names_the_member_that_joined(network: dict[str, Any]) -> None:
    public = (sgcs.Delivery, sgcs.ViewChange, sgcs.OptimisticView, sgcs.Rollback, sgcs.MemberSuspected, sgcs.MemberBusy)
    async with sgcs.open_node(make_config("first", network)) as a, a.join("g") as ga:
        with trio.fail_after(WAIT):
            initial = await ga.receive()
        assert isinstance(initial, sgcs.ViewChange) and initial.members == (a.id,)

        async with sgcs.open_node(make_config("second", network)) as b, b.join("g"):
            seen: list[sgcs.Event] = []
            with trio.fail_after(WAIT):
                async for event in ga:
                    assert isinstance(event, public), event  # never a raw node action
                    seen.append(event)
                    if isinstance(event, sgcs.ViewChange) and b.id in event.joined:
                        break
            change = seen[-1]
            assert isinstance(change, sgcs.ViewChange)
            assert change.members == tuple(sorted((a.id, b.id)))
            assert (change.left, change.failed) == ((), ())
            assert ga.view == change.view
