"""Single-TCD exclusivity survives a merge of two views that granted one code twice.

Two (or four) real sans-I/O nodes (``sgcs.node.Node``) run on the in-memory
network (``tests/_memnet.py``), partitioned by a tap that loses every datagram
between the sides, so each side forms its own view and grants single-TCD
receive of code 100 in it. Then the tap goes, the membership protocol merges
the views, and the test checks: exactly one holder is left, every member names
the same one, the loser's handle raises the typed ``ExclusiveLost``, and frames
of the code reach the winner only. Each module's wall clock is a constant the
test sets, so which grant is "earliest" (the merge rule) is the test's choice.

The ADS modules are the real ones (``attach``): ``MemNode`` gives them the two
calls of ``sgcs.NodeHandle``/``GroupHandle`` they use (``join``; ``send`` and
iteration), over the node. Time is the network's: ``run_network`` delivers
datagrams and fires timers only once every trio task is blocked, so the
modules see each event before the clock moves, and a scenario that never
settles fails at a bound in simulated seconds, not at a wall-clock sleep."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any
import pytest
import trio

import sgcs
from _memgroups import MemGroup, MemNode, partition, route_to_groups, run_network, until
from _memnet import MemoryNetwork
from sgcs.node import Node
from sgcs.services.handles import Data, ExclusiveLost, ExclusiveRefused, Module, ReceiveHandle, attach
from sgcs.services.handles import tcd as codes

CONFIG = sgcs.Config(secret=b"handles merge test secret", beacon_interval=0.2)
CODE = 100


@asynccontextmanager
async def field(ids: list[int], sides: list[set[int]],
                clocks: dict[int, float] | None = None) -> AsyncIterator[tuple[MemoryNetwork[Node], list[Module]]]:
    """Modules attached to "field" on nodes ``ids``, the network split into
    ``sides``; ``clocks``: each module's wall clock, a constant (default: its id)."""
    net: MemoryNetwork[Node] = MemoryNetwork({i: Node(i, CONFIG, random.Random(i), resolve=lambda n: n) for i in ids})
    nodes = {i: MemNode(net, net.nodes[i]) for i in ids}
    net.observer = route_to_groups(nodes)
    net.tap = partition(sides)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(run_network, net)
        modules: list[Module] = []
        async with _attached(list(nodes.values()), modules, clocks or {i: float(i) for i in ids}):
            yield net, modules
        nursery.cancel_scope.cancel()


@asynccontextmanager
async def _attached(nodes: list[MemNode], modules: list[Module], clocks: dict[int, float]) -> AsyncIterator[None]:
    if not nodes:
        yield
        return
    now = clocks[nodes[0].id]
    async with attach(nodes[0], "field", clock=lambda: now) as module:  # type: ignore[arg-type]
        modules.append(module)
        async with _attached(nodes[1:], modules, clocks):
            yield


async def outcome(handle: ReceiveHandle) -> ExclusiveRefused | Data:
    """The first thing ``handle`` yields: a frame of its code, or the exception that ends it."""
    try:
        event = await handle.receive()
    except ExclusiveRefused as error:
        return error
    assert isinstance(event, Data), event
    return event


@pytest.mark.parametrize(("clock_1", "clock_2", "winner"), [
    (10.0, 20.0, 1),  # member 1 won code 100 first: it keeps it
    (20.0, 10.0, 2),  # member 2 did
    (10.0, 10.0, 1),  # at the same microsecond: the lowest member id
])
async def test_two_singletons_that_both_granted_a_code_keep_one_holder_after_they_merge(
        clock_1: float, clock_2: float, winner: int) -> None:
    async with field([1, 2], [{1}, {2}], {1: clock_1, 2: clock_2}) as (net, (a, b)):
        # apart, each side grants code 100 in its own view: the tester's bug, reproduced
        held = {1: await a.receive_exclusive(CODE), 2: await b.receive_exclusive(CODE)}
        assert a.members == (1,) and b.members == (2,) and a.holder(CODE) == 1 and b.holder(CODE) == 2
        net.tap = None  # the partition heals; the membership protocol merges the views
        await until(net, lambda: a.members == b.members == (1, 2), "the two views merge")
        results: dict[int, ExclusiveRefused | Data] = {}

        async def watch(member: int, handle: ReceiveHandle) -> None:
            results[member] = await outcome(handle)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch, 1, held[1])
            nursery.start_soon(watch, 2, held[2])
            await until(net, lambda: len(results) == 1,
                        f"one of the two holders of code {CODE} loses it after the merge")
            await a.multicast(CODE).send(b"after the merge")  # ...and a frame of it reaches the other
            await until(net, lambda: len(results) == 2, "the frame reaches the holder left")
        lost = [m for m, r in results.items() if isinstance(r, ExclusiveRefused)]
        kept = [m for m, r in results.items() if isinstance(r, Data)]
        assert len(lost) == 1 and len(kept) == 1, results
        loser = lost[0]
        assert kept == [winner], results
        error = results[loser]
        assert isinstance(error, ExclusiveLost), error
        assert (error.tcd, error.holder, error.reason) == (CODE, winner, "merge")
        assert held[loser].lost is error and held[loser].closed and not held[winner].closed
        with pytest.raises(ExclusiveLost):  # it stays ended: every later receive says why
            await held[loser].receive()
        # every member computed the same holder, from the same reports
        for module in (a, b):
            await module.reconciled()
        assert a.holder(CODE) == b.holder(CODE) == winner
        assert [m.statistics.exclusive_lost for m in (a, b)] == [int(loser == 1), int(loser == 2)]
        # the loser may claim again: the holder now objects
        with pytest.raises(ExclusiveRefused, match=f"held by member {winner}"):
            await (a, b)[loser - 1].receive_exclusive(CODE)


async def test_frames_sent_after_the_reconciliation_reach_the_winner_only() -> None:
    async with field([1, 2], [{1}, {2}]) as (net, (a, b)):
        kept, lost = await a.receive_exclusive(CODE), await b.receive_exclusive(CODE)  # a won earlier (clock 1 < 2)
        listener = b.receive(CODE)  # a multi-TCD handle of the code is not exclusive: it keeps receiving
        net.tap = None
        await until(net, lambda: a.members == b.members == (1, 2), "the two views merge")
        for module in (a, b):
            await module.reconciled()
        for sender in (a, b):
            await sender.multicast(CODE).send(b"from %d" % sender.me)
        with trio.fail_after(10):
            got = {(await kept.receive()).data for _ in range(2)}  # type: ignore[union-attr]
            heard = {(await listener.receive()).data for _ in range(2)}  # type: ignore[union-attr]
        assert got == heard == {b"from 1", b"from 2"}
        with pytest.raises(ExclusiveLost, match=f"code {CODE} lost to member 1"):
            await lost.receive()
        assert lost.lost is not None and lost.lost.holder == a.me


async def test_four_members_merge_two_views_that_granted_one_code_and_keep_the_others() -> None:
    clocks = {1: 30.0, 2: 40.0, 3: 20.0, 4: 50.0}  # member 3 won code 100 earliest
    async with field([1, 2, 3, 4], [{1, 2}, {3, 4}], clocks) as (net, modules):
        by_id = {m.me: m for m in modules}
        side_1 = lambda: all(by_id[i].members == (1, 2) for i in (1, 2))  # noqa: E731
        side_2 = lambda: all(by_id[i].members == (3, 4) for i in (3, 4))  # noqa: E731
        await until(net, lambda: side_1() and side_2(), "each side forms its own view")
        handles = {
            (1, CODE): await by_id[1].receive_exclusive(CODE),
            (3, CODE): await by_id[3].receive_exclusive(CODE),
            (2, 200): await by_id[2].receive_exclusive(200),
            (4, 300): await by_id[4].receive_exclusive(300),
        }
        net.tap = None
        await until(net, lambda: all(m.members == (1, 2, 3, 4) for m in modules), "the two views merge")
        for module in modules:
            await module.reconciled()
        assert {m.me: (m.holder(CODE), m.holder(200), m.holder(300)) for m in modules} == {
            i: (3, 2, 4) for i in (1, 2, 3, 4)}
        assert [key for key, h in handles.items() if h.lost is not None] == [(1, CODE)]
        lost = handles[(1, CODE)].lost
        assert lost is not None and (lost.tcd, lost.holder, lost.reason) == (CODE, 3, "merge")
        assert sum(m.statistics.exclusive_lost for m in modules) == 1
        # the tables now agree across the old sides: member 2's claim of code 300 meets member 4's hold
        with pytest.raises(ExclusiveRefused, match="held by member 4"):
            await by_id[2].receive_exclusive(300)


def answer_from(member: int) -> Callable[[Any], bool]:
    """Picks the unicast ANSWER frames ``member`` sends to a claimant."""

    def pick(event: Any) -> bool:
        return (isinstance(event, sgcs.Delivery) and event.sender == member and event.dest is not None
                and codes.decode_frame_untrusted(event.payload).tcd == codes.TCD_ANSWER)

    return pick


async def test_a_claim_under_way_when_the_views_merge_is_put_again_to_the_members_it_never_asked() -> None:
    # member 3, alone, holds code 100. Members 1 and 2 share a view; 1 claims 100
    # there, and 2's answer reaches 1 only after the merge. Decided on the old
    # view's answers, 1 would win a code that 3 holds; it must ask again instead.
    async with field([1, 2, 3], [{1, 2}, {3}], {1: 10.0, 2: 10.0, 3: 20.0}) as (net, modules):
        a, b, c = modules
        await until(net, lambda: a.members == b.members == (1, 2), "members 1 and 2 form a view")
        held = await c.receive_exclusive(CODE)  # later by the clocks than 1's grant would be: the rule would favour 1
        late = a.group
        assert isinstance(late, MemGroup)
        late.hold = answer_from(2)
        outcome_of_claim: list[BaseException | ReceiveHandle] = []

        async def claim() -> None:
            try:
                outcome_of_claim.append(await a.receive_exclusive(CODE))
            except ExclusiveRefused as error:
                outcome_of_claim.append(error)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(claim)
            await until(net, lambda: bool(late.held), "member 2 answers member 1's claim (held back)")
            net.tap = None
            await until(net, lambda: all(m.members == (1, 2, 3) for m in modules), "the views merge")
            for module in modules:
                await module.reconciled()
            late.release()  # the old view's answer arrives at last: it must not decide anything
            await until(net, lambda: bool(outcome_of_claim), "member 1's claim is decided")
        (result,) = outcome_of_claim
        assert isinstance(result, ExclusiveRefused) and not isinstance(result, ExclusiveLost), result
        assert "held by member 3" in str(result)
        assert a.statistics.claims_restarted == 1
        assert held.lost is None and not held.closed
        assert [m.holder(CODE) for m in modules] == [3, 3, 3]
