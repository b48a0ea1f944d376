"""The replicated queue's primary component and state transfer, on real
sans-I/O nodes over the in-memory network (``tests/_memgroups.py``): a
minority side refuses writes, the majority goes on, and after the heal the
minority adopts the majority's state; a replica that joins late catches up
by a snapshot and leases what the others would."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

import pytest
import trio
import trio.testing

import sgcs
from _memgroups import MemNode, partition, route_to_groups, run_network, until
from _memnet import MemoryNetwork
from sgcs.node import Node
from sgcs.services.queues import replicated as rq
from sgcs.services.queues.replicated import NotPrimary, ReplicatedQueue, Standing, open_replicated_queue

CONFIG = sgcs.Config(secret=b"replicated primary test secret", beacon_interval=0.2)


def state(queue: ReplicatedQueue) -> list[tuple[object, ...]]:
    return queue.store._db.execute("SELECT seq, msg_id, priority, state, owner, deliveries FROM messages "
                                   "ORDER BY seq").fetchall()


@asynccontextmanager
async def replicas(ids: list[int], sides: list[set[int]]) -> AsyncIterator[tuple[MemoryNetwork[Node],
                                                                                 dict[int, MemNode]]]:
    net: MemoryNetwork[Node] = MemoryNetwork({i: Node(i, CONFIG, random.Random(i), resolve=lambda n: n)
                                              for i in ids})
    nodes = {i: MemNode(net, net.nodes[i]) for i in ids}
    net.observer = route_to_groups(nodes)
    net.tap = partition(sides)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(run_network, net)
        yield net, nodes
        nursery.cancel_scope.cancel()


def settled(queues: list[ReplicatedQueue], members: tuple[int, ...]) -> bool:
    return all(q.members == members and q.standing is Standing.SETTLED for q in queues)


async def test_a_minority_refuses_writes_and_adopts_the_primary_state_after_the_heal() -> None:
    async with replicas([1, 2, 3], [{1, 2, 3}]) as (net, nodes), AsyncExitStack() as stack:
        a = await stack.enter_async_context(open_replicated_queue(nodes[1], "jobs", replicas=3))
        assert not a.writable  # alone: 1 of 3
        with pytest.raises(NotPrimary):
            await a.put(b"too early")
        b, c = [await stack.enter_async_context(open_replicated_queue(nodes[i], "jobs", replicas=3)) for i in (2, 3)]
        await a.wait_writable()
        await until(net, lambda: settled([a, b, c], (1, 2, 3)), "one settled view of three")
        await a.put(b"before", 1)
        net.tap = partition([{1, 2}, {3}])
        await until(net, lambda: settled([a, b], (1, 2)) and c.standing is Standing.MINORITY, "the split")
        with pytest.raises(NotPrimary, match="1 of 3 replicas"):
            await c.put(b"minority", 9)
        with pytest.raises(NotPrimary):
            await c.get_many(1, timeout=1)
        ids = await a.put_many([(b"p%d" % i, i % 10) for i in range(20)])
        (first,) = await b.get_many(1)
        await b.ack([first])
        assert first.body == b"p9" and c.depth() == 1  # the minority still holds the old state
        net.tap = None
        await until(net, lambda: settled([a, b, c], (1, 2, 3)), "the healed view")
        assert (c.transfers, a.transfers, b.transfers) == (1, 0, 0)
        assert state(c) == state(a) == state(b) and c.applied == a.applied == b.applied
        assert c.generation == a.generation == b.generation
        late = await c.put(b"after", 0)
        await until(net, lambda: all(q.depth() == 21 for q in (a, b, c)), "the write of the former minority")
        assert state(c) == state(a) == state(b)
        assert {m for m, in a.store._db.execute("SELECT msg_id FROM messages")} >= {*ids[:9], *ids[10:], late}
        assert c.refused == 0  # its refused write was never sent


async def test_a_replica_that_joins_late_catches_up_by_a_snapshot() -> None:
    async with replicas([1, 2, 3], [{1, 2, 3}]) as (net, nodes), AsyncExitStack() as stack:
        a, b = [await stack.enter_async_context(open_replicated_queue(nodes[i], "jobs", replicas=3,
                                                                     delivery_limit=3)) for i in (1, 2)]
        async with open_replicated_queue(nodes[3], "jobs", replicas=3, delivery_limit=3) as first:
            # a first start needs the whole replica set: a replica cannot tell it from a lost history
            await until(net, lambda: settled([a, b, first], (1, 2, 3)), "the first primary view")
        await until(net, lambda: settled([a, b], (1, 2)), "a primary view of two")
        await a.put_many([(b"m%d" % i, i % 3) for i in range(30)], ttl=3600)
        leased = await a.get_many(2)
        await a.release(leased[:1])
        c = await stack.enter_async_context(open_replicated_queue(nodes[3], "jobs", replicas=3,
                                                                 delivery_limit=3))
        await until(net, lambda: settled([a, b, c], (1, 2, 3)), "the view of three")
        assert c.transfers == 1 and state(c) == state(a) == state(b)
        assert c.info() == a.info()
        (got,) = await c.get_many(1)
        await until(net, lambda: a.info().leased == 2, "c's lease at a")
        assert got.deliveries == 2 and got.msg_id == leased[0].msg_id  # the released one, first again
        assert state(c) == state(a) == state(b)


def test_ops_of_the_state_transfer_round_trip() -> None:
    for op in (rq.Hello(1 << 63, 7, 12_345, 99), rq.State(5, 2, 3, b"chunk")):
        assert rq.decode_op_untrusted(rq.encode_op(op)) == op
    with pytest.raises(sgcs.errors.DecodeError):
        rq.decode_op_untrusted(rq.encode_op(rq.State(5, 3, 3, b"")))  # index past the total


@pytest.mark.parametrize("seed", range(1, 6))
async def test_random_partitions_never_let_a_minority_acknowledge_and_end_with_equal_replicas(seed: int) -> None:
    """Five replicas, six rounds of a random two-sided partition, writes from
    every replica on both sides, then a heal: a write returns only on the
    majority side (NotPrimary on the other), and after each heal every replica
    holds the same queue, with every acknowledged PUT exactly once.
    Replay: pytest tests/services/test_queues_primary.py -k "seed and <seed>"."""
    rng = random.Random(seed)
    ids = [1, 2, 3, 4, 5]
    async with replicas(ids, [set(ids)]) as (net, nodes), AsyncExitStack() as stack:
        queues = {i: await stack.enter_async_context(open_replicated_queue(nodes[i], "jobs", replicas=5))
                  for i in ids}
        await until(net, lambda: settled(list(queues.values()), tuple(ids)), "one settled view of five")
        acknowledged: list[bytes] = []
        for round_ in range(6):
            side = set(rng.sample(ids, rng.choice([1, 2])))
            net.tap = partition([side, set(ids) - side])
            rest = tuple(sorted(set(ids) - side))
            await until(net, lambda: settled([queues[i] for i in rest], rest), f"round {round_}: the split")
            for member in ids:
                body = b"%d:%d" % (round_, member)
                if member in side:
                    await until(net, lambda: queues[member].standing is Standing.MINORITY, "the minority view")
                    with pytest.raises(NotPrimary):
                        await queues[member].put(body)
                else:
                    acknowledged.append(await queues[member].put(body, rng.randrange(10)))
            before = {i: queues[i].transfers for i in side}
            net.tap = None
            await until(net, lambda: settled(list(queues.values()), tuple(ids)), f"round {round_}: the heal",
                        within=40.0)
            first = state(queues[1])
            assert all(state(q) == first for q in queues.values()), f"seed {seed}, round {round_}"
            held = [row[1] for row in first]
            assert sorted(held) == sorted(acknowledged) and len(set(held)) == len(held)
            assert all(queues[i].transfers == before[i] + 1 for i in side)  # back from the minority: a snapshot


class _Silent:
    """A group whose multicasts are never delivered (a partition starts at once)."""

    node_id = 1

    async def send(self, payload: bytes) -> None:
        return None

    async def send_many(self, payloads: list[bytes]) -> list[None]:
        return [None for _ in payloads]


class _Recording(_Silent):
    """A silent group that keeps what it was asked to send."""

    node_id = 2

    def __init__(self) -> None:
        self.sent: list[bytes] = []

    async def send(self, payload: bytes) -> None:
        self.sent.append(payload)
        return None

    async def send_many(self, payloads: list[bytes]) -> list[None]:
        self.sent += payloads
        return [None for _ in payloads]


async def test_puts_under_way_when_the_view_becomes_a_minority_raise_not_primary() -> None:
    queue = ReplicatedQueue(_Silent(), "jobs", replicas=3, dedup_window=10)  # type: ignore[arg-type]
    async with trio.open_nursery() as nursery:
        queue._nursery = nursery
        queue.standing = Standing.SETTLED
        outcome: list[BaseException] = []

        async def put_many() -> None:
            try:
                await queue.put_many([(b"a", 0), (b"b", 0)])
            except NotPrimary as error:
                outcome.append(error)

        nursery.start_soon(put_many)
        await trio.testing.wait_all_tasks_blocked()
        queue._on_view(sgcs.ViewChange("v9.1-x", (1,), "sgcs.rq.jobs", failed=(2, 3)))
        await trio.testing.wait_all_tasks_blocked()
        assert len(outcome) == 1 and queue.standing is Standing.MINORITY and not queue._pending


def silent_replica(nursery: trio.Nursery, replicas: int, members: tuple[int, ...]) -> ReplicatedQueue:
    """Replica 1, settled in a primary view of ``members``, whose sends go nowhere:
    the test delivers each op and view event itself."""
    queue = ReplicatedQueue(_Silent(), "jobs", replicas=replicas, dedup_window=10)  # type: ignore[arg-type]
    queue._nursery = nursery
    queue._on_view(sgcs.ViewChange("v1.1-x", members, "sgcs.rq.jobs"))
    queue.standing, queue.generation, queue.primary = Standing.SETTLED, 1, members
    return queue


async def put_in_background(nursery: trio.Nursery, queue: ReplicatedQueue,
                            body: bytes) -> tuple[bytes, list[object]]:
    """Start a PUT; returns its op and where its outcome (an id or an error) lands."""
    op, msg_id = queue._put_op(body, 0, None)
    outcome: list[object] = []

    async def put() -> None:
        try:
            await queue._submit(msg_id, op)
            outcome.append(msg_id)
        except NotPrimary as error:
            outcome.append(error)

    nursery.start_soon(put)
    await trio.testing.wait_all_tasks_blocked()
    return op, outcome


async def test_a_write_delivered_in_a_transitional_view_is_applied_and_decided_in_the_next_primary() -> None:
    """Left out of a change, a member delivers its last messages in a
    transitional view; another member may have applied them in the regular
    view (safe order), so they apply here too, but none of ours is
    acknowledged until a primary view settles (nemesis, queue workload, seed
    1581192924: refusing them there let a message one member had acknowledged
    be handed out again)."""
    async with trio.open_nursery() as nursery:
        queue = silent_replica(nursery, 3, (1, 2, 3))
        op, outcome = await put_in_background(nursery, queue, b"late")
        queue._on_transitional(sgcs.TransitionalView("sgcs.rq.jobs", "v1.1-x", (1, 2)))
        queue._on_op(1, rq.decode_op_untrusted(op), op)
        await trio.testing.wait_all_tasks_blocked()
        assert queue.depth() == 1 and outcome == [], "applied, not yet acknowledged"
        view = sgcs.ViewChange("v2.1-x", (1, 2), "sgcs.rq.jobs", failed=(3,))
        queue._on_view(view)
        assert queue.standing is Standing.SYNCING, "every primary view begins with the HELLOs"
        hello = rq.Hello(rq._view_token(view.view_id), queue.generation, queue.applied, queue.digest, queue.primary)
        for member in (1, 2):  # 2 moved with us: the same standing
            queue._on_op(member, hello, b"")
        await trio.testing.wait_all_tasks_blocked()
        assert queue.standing is Standing.SETTLED and outcome == [rq.decode_op_untrusted(op).msg_id]  # type: ignore[union-attr]


async def test_a_kept_write_in_a_minority_view_raises_not_primary_saying_it_may_be_applied() -> None:
    async with trio.open_nursery() as nursery:
        queue = silent_replica(nursery, 5, (1, 2, 3))
        op, outcome = await put_in_background(nursery, queue, b"late")
        queue._on_transitional(sgcs.TransitionalView("sgcs.rq.jobs", "v1.1-x", (1,)))
        queue._on_op(1, rq.decode_op_untrusted(op), op)
        queue._on_view(sgcs.ViewChange("v2.1-x", (1,), "sgcs.rq.jobs", failed=(2, 3)))
        await trio.testing.wait_all_tasks_blocked()
        assert queue.standing is Standing.MINORITY and queue.depth() == 1
        assert len(outcome) == 1 and "may have been applied" in str(outcome[0])


async def test_a_kept_write_the_provider_never_applied_is_sent_again() -> None:
    """Two sides applied different ops after a split: the same (generation,
    applied), different digests. The one behind takes the provider's state
    at the last STATE chunk, and its write that state lacks goes out again."""
    async with trio.open_nursery() as nursery:
        one = silent_replica(nursery, 3, (1, 2, 3))
        two = silent_replica(nursery, 3, (1, 2, 3))
        two.me = two.group.node_id = 2  # type: ignore[misc]
        two.group = _Recording()  # type: ignore[assignment]
        theirs, outcome = await put_in_background(nursery, two, b"two's")
        mine, _ = one._put_op(b"one's", 0, None)
        for queue, member, op in ((one, 1, mine), (two, 2, theirs)):
            queue._on_transitional(sgcs.TransitionalView("sgcs.rq.jobs", "v1.1-x", (member,)))
            queue._on_op(member, rq.decode_op_untrusted(op), op)
        assert (one.generation, one.applied) == (two.generation, two.applied) and one.digest != two.digest
        view = sgcs.ViewChange("v3.1-x", (1, 2), "sgcs.rq.jobs", joined=(1, 2), failed=(3,))
        token = rq._view_token(view.view_id)
        hellos = [(m, rq.Hello(token, q.generation, q.applied, q.digest, q.primary)) for m, q in ((1, one), (2, two))]
        for queue in (one, two):
            queue._on_view(view)
            for member, hello in hellos:
                queue._on_op(member, hello, b"")
            assert queue._provider == 1 and queue._behind == {2} and queue.standing is Standing.FETCHING
        (chunk,) = one._outgoing[1]  # type: ignore[index]
        for queue in (one, two):
            queue._on_op(1, rq.decode_op_untrusted(chunk), chunk)
        await trio.testing.wait_all_tasks_blocked()
        assert one.standing is two.standing is Standing.SETTLED and state(one) == state(two)
        sent = two.group.sent  # type: ignore[attr-defined]
        assert two.digest == one.digest and outcome == [] and sent.count(theirs) == 2, \
            "not decided: sent again"
        two._on_op(2, rq.decode_op_untrusted(theirs), theirs)
        await trio.testing.wait_all_tasks_blocked()
        assert len(outcome) == 1 and two.depth() == 2


async def test_the_provider_applies_nothing_before_its_last_state_chunk() -> None:
    """A provider that applied ops as soon as it sent its snapshot acknowledged
    writes the others, still fetching when the view changed, never held
    (nemesis, queue workload, seed 1581192924: an acknowledged PUT lost)."""
    async with trio.open_nursery() as nursery:
        queue = silent_replica(nursery, 3, (1, 2, 3))
        view = sgcs.ViewChange("v2.1-x", (1, 2, 3), "sgcs.rq.jobs", joined=(3,))
        queue._on_view(view)
        token = rq._view_token(view.view_id)
        for member, (generation, applied) in ((1, (1, 0)), (2, (1, 0)), (3, (0, 0))):
            queue._on_op(member, rq.Hello(token, generation, applied, 0), b"")
        assert queue._provider == 1 and queue._behind == {3} and queue.standing is Standing.FETCHING
        op, outcome = await put_in_background(nursery, queue, b"during the transfer")
        queue._on_op(1, rq.decode_op_untrusted(op), op)
        assert queue.depth() == 0 and outcome == [], "held until the settle point"
        (chunk,) = queue._outgoing[1]  # type: ignore[index]
        queue._on_op(1, rq.decode_op_untrusted(chunk), chunk)
        await trio.testing.wait_all_tasks_blocked()
        assert queue.standing is Standing.SETTLED and queue.depth() == 1 and len(outcome) == 1


async def test_restarted_replicas_do_not_make_a_primary_with_an_older_state() -> None:
    """Three of five replicas, two of them restarted (no state), once formed a
    primary from the third's older state, and an ACK acknowledged in the
    newer primary (1, 3, 4) was undone (nemesis, queue workload, --outage,
    seed 302475798). A view is primary only with a majority of the members
    of the last primary anyone knows that still hold its state, or with
    every replica."""
    async with trio.open_nursery() as nursery:
        queue = silent_replica(nursery, 5, (1, 2, 3))
        queue.me = queue.group.node_id = 2  # type: ignore[misc]
        queue.generation, queue.primary = 5, (1, 2, 3)
        for members, primary in (((2, 3, 4), False), ((1, 2, 3, 4, 5), True), ((1, 2, 4), True)):
            view = sgcs.ViewChange(f"v{len(members)}.2-x", members, "sgcs.rq.jobs", joined=(3, 4), failed=(3, 4))
            queue._on_view(view)
            token = rq._view_token(view.view_id)
            for member in members:
                hello = rq.Hello(token, 5, 0, 0, (1, 2, 3)) if member in (1, 2) else rq.Hello(token, 0, 0, 0)
                queue._on_op(member, hello, b"")
            assert (queue.standing is not Standing.MINORITY) is primary, members
            if primary:
                queue.standing, queue.generation, queue.primary = Standing.SETTLED, 5, (1, 2, 3)


def hellos_for(queue: ReplicatedQueue, view: sgcs.ViewChange, standings: dict[int, rq.Hello],
               start: bool = True) -> None:
    """Start ``view`` at ``queue`` (unless ``start`` is False) and deliver each
    member's HELLO (its ``view`` field is set here)."""
    if start:
        queue._on_view(view)
    token = rq._view_token(view.view_id)
    for member, hello in standings.items():
        queue._on_op(member, rq.Hello(token, *[getattr(hello, f) for f in HELLO_FIELDS[1:]]), b"")


HELLO_FIELDS = ("view", "generation", "applied", "digest", "primary", "tentative", "attempt_generation", "attempt")


def test_hello_round_trips_with_its_tentative_flag_and_attempt() -> None:
    hello = rq.Hello(7, 3, 99, 1 << 63, (1, 2, 3), True, 4, (1, 2, 3, 4))
    assert rq.decode_op_untrusted(rq.encode_op(hello)) == hello
    assert tuple(f for f in rq.Hello.__dataclass_fields__) == HELLO_FIELDS


async def test_fresh_replicas_begin_only_as_the_whole_replica_set() -> None:
    """Three of five replicas, all restarted, once formed a primary with an
    empty state while the two others held the queue; the writes of that fresh
    start were lost when the five met (nemesis, queue workload, seed 1581192924)."""
    fresh = rq.Hello(0, 0, 0, 0)
    async with trio.open_nursery() as nursery:
        queue = ReplicatedQueue(_Silent(), "jobs", replicas=5, dedup_window=10)  # type: ignore[arg-type]
        queue._nursery = nursery
        hellos_for(queue, sgcs.ViewChange("v2.3-x", (1, 2, 3), "sgcs.rq.jobs"), dict.fromkeys((1, 2, 3), fresh))
        assert queue.standing is Standing.MINORITY
        with pytest.raises(NotPrimary, match="first start needs all 5"):
            await queue.put(b"x")
        hellos_for(queue, sgcs.ViewChange("v3.5-x", (1, 2, 3, 4, 5), "sgcs.rq.jobs"),
                   dict.fromkeys((1, 2, 3, 4, 5), fresh))
        assert queue.standing is Standing.SETTLED and queue.generation == 1 and not queue.tentative


async def test_a_primary_settled_in_a_transitional_view_is_tentative_and_needs_all_its_members() -> None:
    """Replicas 1 and 2 deliver the last HELLO of a view of (1, 2, 3) in
    their transitional view: 3 may never settle it and go on, with others,
    from the state before; so 1 and 2 go on only with 3 again."""
    async with trio.open_nursery() as nursery:
        queue = silent_replica(nursery, 5, (1, 2, 3))
        before = rq.Hello(0, 1, 0, 0, (1, 2, 3))
        view = sgcs.ViewChange("v2.3-x", (1, 2, 3), "sgcs.rq.jobs")
        queue._on_view(view)
        queue._on_transitional(sgcs.TransitionalView("sgcs.rq.jobs", view.view_id, (1, 2)))
        hellos_for(queue, view, dict.fromkeys((1, 2, 3), before), start=False)
        assert queue.standing is Standing.SETTLED and queue.tentative and queue.generation == 2
        mine = rq.Hello(0, 2, 0, 0, (1, 2, 3), True)
        hellos_for(queue, sgcs.ViewChange("v3.3-x", (1, 2, 4), "sgcs.rq.jobs"),
                   {1: mine, 2: mine, 4: rq.Hello(0, 1, 0, 0, (1, 2, 3))})
        assert queue.standing is Standing.MINORITY and "replicas 3 may hold a newer state" in queue._why_not
        hellos_for(queue, sgcs.ViewChange("v4.3-x", (1, 2, 3), "sgcs.rq.jobs"), {1: mine, 2: mine, 3: before})
        assert queue.standing is Standing.FETCHING and queue._provider == 1 and queue._behind == {3}


async def test_a_replica_that_left_a_decided_primary_before_it_settled_waits_for_all_its_members() -> None:
    """Replicas 3, 4 and 5 saw a view of five decided and left it before its
    last STATE chunk, which 1 and 2 delivered in their transitional view;
    3, 4 and 5 then formed a primary from the state before and acknowledged
    writes that the next merge dropped for the higher generation of 1 and 2
    (nemesis, queue workload, seed 1581192924)."""
    async with trio.open_nursery() as nursery:
        queue = silent_replica(nursery, 5, (1, 3, 5))
        behind = rq.Hello(0, 0, 0, 0)
        view = sgcs.ViewChange("v2.5-x", (1, 2, 3, 4, 5), "sgcs.rq.jobs")
        settled_state = rq.Hello(0, 1, 0, 0, (1, 3, 5))
        hellos_for(queue, view, {1: settled_state, 2: behind, 3: settled_state, 4: behind, 5: settled_state})
        assert queue.standing is Standing.FETCHING and queue.attempt == (2, (1, 2, 3, 4, 5))
        mine = rq.Hello(0, 1, 0, 0, (1, 3, 5), False, 2, (1, 2, 3, 4, 5))
        hellos_for(queue, sgcs.ViewChange("v3.3-x", (1, 3, 5), "sgcs.rq.jobs"), {1: mine, 3: mine, 5: mine})
        assert queue.standing is Standing.MINORITY and "replicas 2, 4 may hold a newer state" in queue._why_not


async def test_at_one_generation_a_settled_state_outranks_a_tentative_one() -> None:
    async with trio.open_nursery() as nursery:
        queue = silent_replica(nursery, 5, (1, 2, 3, 4, 5))
        tentative = rq.Hello(0, 2, 50, 1, (1, 2, 3, 4, 5), True)
        settled_state = rq.Hello(0, 2, 10, 2, (3, 4, 5))
        hellos_for(queue, sgcs.ViewChange("v5.5-x", (1, 2, 3, 4, 5), "sgcs.rq.jobs"),
                   {1: tentative, 2: tentative, 3: settled_state, 4: settled_state, 5: settled_state})
        assert queue._provider == 3 and queue._behind == {1, 2}


async def test_a_replica_left_out_alone_holds_a_tentative_state() -> None:
    """A member left out of a view change alone delivers only its own last
    messages: ops the others applied in the regular view may be missing here."""
    async with trio.open_nursery() as nursery:
        queue = silent_replica(nursery, 5, (1, 2, 3))
        queue._on_transitional(sgcs.TransitionalView("sgcs.rq.jobs", "v1.1-x", (1, 2)))
        assert not queue.tentative, "moving on with others: the same ops as they"
        queue._on_transitional(sgcs.TransitionalView("sgcs.rq.jobs", "v1.1-x", (1,)))
        assert queue.tentative
        again = silent_replica(nursery, 5, (1, 2, 3))  # a change given up: alone, with no transitional view
        again._on_view(sgcs.ViewChange("v2.1-x", (1,), "sgcs.rq.jobs", failed=(2, 3)))
        assert again.tentative and again.standing is Standing.MINORITY
