"""Durable replicas of the replicated queue (``open_replicated_queue(path=...)``):
a replica restarted from its file begins where it stopped, the queue
survives the restart of every replica, and a restarted replica's state is
tentative (ops it held but had not applied died with it). Also the store's
nested transactions and its snapshot loading into a file, which they use."""

from __future__ import annotations

import sqlite3
from contextlib import AsyncExitStack
from pathlib import Path

import pytest
import trio
import trio.testing

import sgcs
from _memgroups import until
from sgcs.errors import UsageError
from sgcs.services.queues import replica_disk
from sgcs.services.queues import replicated as rq
from sgcs.services.queues.replicated import NotPrimary, ReplicatedQueue, Standing, open_replicated_queue
from sgcs.services.queues.store import QueueStore
from test_queues_primary import _Silent, hellos_for, replicas, settled, state


def messages_in(path: Path) -> int:
    db = sqlite3.connect(path)
    try:
        return int(db.execute("SELECT count(*) FROM messages").fetchone()[0])
    finally:
        db.close()


def saved(path: Path, name: str = "jobs") -> tuple[replica_disk.Record | None, list[bytes]]:
    """What another process would read from the replica's file now."""
    db = sqlite3.connect(path)
    try:
        return replica_disk.load(db, name)
    finally:
        db.close()


async def test_every_replica_restarted_keeps_the_queue_and_gives_back_the_dead_consumers_leases(
        tmp_path: Path) -> None:
    paths = {i: tmp_path / f"r{i}.sqlite" for i in (1, 2, 3)}
    async with replicas([1, 2, 3], [{1, 2, 3}]) as (net, nodes):
        async with AsyncExitStack() as stack:
            queues = [await stack.enter_async_context(open_replicated_queue(nodes[i], "jobs", replicas=3,
                                                                            path=paths[i])) for i in (1, 2, 3)]
            await until(net, lambda: settled(queues, (1, 2, 3)), "the first primary view")
            ids = await queues[0].put_many([(b"m%d" % i, i % 10) for i in range(20)])
            leased = await queues[2].get_many(3)
            await queues[2].ack(leased[:1])
            before = state(queues[0])
            standing = (queues[0].applied, queues[0].digest, queues[0].generation)
        assert all(saved(p)[0] is not None for p in paths.values())
        async with AsyncExitStack() as stack:
            queues = [await stack.enter_async_context(open_replicated_queue(nodes[i], "jobs", replicas=3,
                                                                            path=paths[i])) for i in (1, 2, 3)]
            assert all(q.recovered and q.tentative for q in queues)
            assert (queues[0].applied, queues[0].digest, queues[0].generation) == standing
            assert state(queues[0]) == before  # leases included: only the stream gives them back
            await until(net, lambda: settled(queues, (1, 2, 3)) and queues[0].info().leased == 0,
                        "the restarted primary, and replica 3's leases given back")
            assert all(state(q) == state(queues[0]) for q in queues) and not any(q.tentative for q in queues)
            held = {row[1] for row in state(queues[0])}
            assert held == set(ids) - {leased[0].msg_id}
            (again,) = await queues[0].get_many(1)
            assert again.msg_id == leased[1].msg_id and again.deliveries == 2  # back first, counted


async def test_after_every_replica_restarted_a_majority_waits_for_the_whole_last_primary(tmp_path: Path) -> None:
    """Restarted, each replica may lack ops another applied and acknowledged
    before the crash: two of three cannot tell, so they wait for the third."""
    paths = {i: tmp_path / f"r{i}.sqlite" for i in (1, 2, 3)}
    async with replicas([1, 2, 3], [{1, 2, 3}]) as (net, nodes):
        async with AsyncExitStack() as stack:
            queues = [await stack.enter_async_context(open_replicated_queue(nodes[i], "jobs", replicas=3,
                                                                            path=paths[i])) for i in (1, 2, 3)]
            await until(net, lambda: settled(queues, (1, 2, 3)), "the first primary view")
            await queues[0].put(b"acknowledged")
        async with AsyncExitStack() as stack:
            a, b = [await stack.enter_async_context(open_replicated_queue(nodes[i], "jobs", replicas=3,
                                                                         path=paths[i])) for i in (1, 2)]
            await until(net, lambda: a.members == b.members == (1, 2) and a.standing is Standing.MINORITY
                        and b.standing is Standing.MINORITY, "two restarted replicas, refusing")
            with pytest.raises(NotPrimary, match="replicas 3 may hold a newer state.*restarted"):
                await a.put(b"x")
            c = await stack.enter_async_context(open_replicated_queue(nodes[3], "jobs", replicas=3, path=paths[3]))
            await until(net, lambda: settled([a, b, c], (1, 2, 3)), "the whole last primary, back")
            assert a.depth() == b.depth() == c.depth() == 1


async def test_a_replica_restarted_after_more_writes_loads_a_snapshot_into_its_file(tmp_path: Path) -> None:
    paths = {i: tmp_path / f"r{i}.sqlite" for i in (1, 2, 3)}
    async with replicas([1, 2, 3], [{1, 2, 3}]) as (net, nodes), AsyncExitStack() as stack:
        a, b = [await stack.enter_async_context(open_replicated_queue(nodes[i], "jobs", replicas=3,
                                                                     path=paths[i])) for i in (1, 2)]
        async with open_replicated_queue(nodes[3], "jobs", replicas=3, path=paths[3]) as c:
            await until(net, lambda: settled([a, b, c], (1, 2, 3)), "the first primary view")
            await a.put_many([(b"early%d" % i, 0) for i in range(5)])
        await until(net, lambda: settled([a, b], (1, 2)), "a primary view of two")
        await b.put_many([(b"late%d" % i, 1) for i in range(30)])
        c = await stack.enter_async_context(open_replicated_queue(nodes[3], "jobs", replicas=3, path=paths[3]))
        assert c.recovered and c.depth() == 5
        await until(net, lambda: settled([a, b, c], (1, 2, 3)), "the view of three")
        assert c.transfers == 1 and state(c) == state(a)
        record, ids = saved(paths[3])
        assert record is not None and (record.applied, record.digest, record.generation) == \
            (a.applied, a.digest, a.generation) and not record.tentative
        assert ids == list(a._dedup) and len(ids) == 35


async def test_the_file_holds_the_standing_after_every_op(tmp_path: Path) -> None:
    """Each op commits with the replica's standing and dedup ids (what a
    ``kill -9`` right after it would leave), and the window stays bounded."""
    async with trio.open_nursery() as nursery:
        path = tmp_path / "r1.sqlite"
        queue = ReplicatedQueue(_Silent(), "jobs", replicas=1, dedup_window=4,  # type: ignore[arg-type]
                                path=path)
        queue._nursery = nursery
        hellos_for(queue, sgcs.ViewChange("v1.1-x", (1,), "sgcs.rq.jobs"), {1: rq.Hello(0, 0, 0, 0)})
        assert queue.standing is Standing.SETTLED
        for i in range(7):
            op = rq.encode_op(rq.Put(bytes([i]) * 16, i % 10, 0, b"body"))
            queue._on_op(2, rq.decode_op_untrusted(op), op)
            record, ids = saved(path)
            assert record == queue._record() and ids == list(queue._dedup)[-4:]
            assert messages_in(path) == i + 1  # the PUT itself committed with the standing
        # events queued together: one transaction, the PUTs inserted in it
        ops = [rq.encode_op(rq.Put(bytes([100 + i]) * 16, 0, 0, b"b")) for i in range(5)]
        queue._on_events([sgcs.Delivery(3, 9 + i, op, "v1.1-x", "sgcs.rq.jobs") for i, op in enumerate(ops)])
        record, _ = saved(path)
        assert record == queue._record() and record.applied == 12 and messages_in(path) == 12
        before = saved(path)

        def failing(*args: object) -> None:
            raise sqlite3.OperationalError("disk I/O error")

        queue.store.put_rows = failing  # type: ignore[method-assign]
        op = rq.encode_op(rq.Put(b"\xf0" * 16, 0, 0, b"lost"))
        with pytest.raises(sqlite3.OperationalError):
            queue._on_op(2, rq.decode_op_untrusted(op), op)
        assert saved(path) == before and messages_in(path) == 12  # all of the op, or none of it
        del queue.store.put_rows
        queue.applied, queue.digest = before[0].applied, before[0].digest  # as a restart would find it
        queue._dedup.pop(b"\xf0" * 16)
        queue._unsaved_ids, queue._ids_remembered = [], queue._ids_remembered - 1
        op = rq.encode_op(rq.Get(9, 2, 0, 3))
        queue._on_op(2, rq.decode_op_untrusted(op), op)
        await trio.testing.wait_all_tasks_blocked()
        record, _ = saved(path)
        assert record == queue._record() and record.limit == 3 and record.applied == 13
        queue.store.close()


def test_a_file_of_another_queue_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite"
    queue = ReplicatedQueue(_Silent(), "jobs", replicas=1, dedup_window=4, path=path)  # type: ignore[arg-type]
    queue.store.close()
    with pytest.raises(UsageError, match="holds a replica of queue 'jobs', not 'other'"):
        ReplicatedQueue(_Silent(), "other", replicas=1, dedup_window=4, path=path)  # type: ignore[arg-type]


def test_a_record_round_trips() -> None:
    record = replica_disk.Record(9, 1 << 63, 4, 3, True, (1, 2, 3), 5, (1, 2, 3, 4))
    assert replica_disk.Record.decode(record.encode()) == record


def test_a_snapshot_loads_into_a_file_with_other_writes_all_or_nothing(tmp_path: Path) -> None:
    source = QueueStore()
    source.bind("q")
    source.put_many("q", [(b"s%d" % i, i % 10) for i in range(50)])
    source.get("q", "c", 2)
    store = QueueStore(tmp_path / "d.sqlite", release_leases=False)
    store.bind("q")
    store.put("q", b"mine")
    mine = store.info("q")
    with pytest.raises(KeyError):
        with store.loading(source.snapshot()) as load, store.batch():
            load()
            assert store.info("q") == source.info("q")
            raise KeyError("a crash before the commit")
    assert store.info("q") == mine  # nothing of it stayed
    with store.loading(source.snapshot()) as load, store.batch():
        load()
        store.put("q", b"after")
    sequence = "SELECT * FROM sqlite_sequence ORDER BY name"
    assert store._db.execute(sequence).fetchall() == [("messages", 51)]  # the image's, then one put
    store.close()
    again = QueueStore(tmp_path / "d.sqlite", release_leases=False)
    assert again.info("q").leased == 2 and again.info("q").ready == 49
    assert again.origin == store.origin  # the store keeps its own, not the image's
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.sqlite", "d.sqlite-shm", "d.sqlite-wal"]
    with pytest.raises(sqlite3.DatabaseError):
        with again.loading(b"not a database" * 100) as load:
            load()
    assert again.info("q").ready == 49


def test_a_failed_call_inside_a_batch_undoes_only_itself() -> None:
    store = QueueStore()
    store.bind("q")
    with store.batch():
        store.put("q", b"kept")
        with pytest.raises(UsageError):
            store.put_many("q", [(b"x", 0), (b"y", 99)])  # a bad priority, after a good one
        store.put("q", b"kept too")
    assert store.info("q").ready == 2
