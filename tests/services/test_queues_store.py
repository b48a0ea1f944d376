"""The SQLite queue store: priorities, FIFO inside a priority, ack and redelivery,
transactional receive, the two unbind rules, the dead-message monitor, and the
idempotent commit that store and forward relies on (a hypothesis machine with
loss, duplication, reordering and crashes of both stores)."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from sgcs.errors import UsageError
from sgcs.services.queues.store import (
    MAX_FORWARD_TTL,
    XMIT_EXPIRED,
    Forwarded,
    QueueFull,
    QueueStore,
    Unbind,
    forwarded_id,
)


@pytest.fixture
def store(tmp_path: Path) -> QueueStore:
    s = QueueStore(tmp_path / "q.db", fsync="off")  # durability has its own test below
    s.bind("q")
    return s


def test_highest_priority_first_and_fifo_within_a_priority(store: QueueStore) -> None:
    rng = random.Random(11)
    items = [(f"{i}".encode(), rng.randrange(10)) for i in range(2_000)]
    store.put_many("q", items)
    got = [m for _ in range(2_000) for m in store.get("q", "c")]
    assert len(got) == 2_000
    expected = sorted(range(2_000), key=lambda i: (-items[i][1], i))
    assert [int(m.body) for m in got] == expected


def test_no_priority_inversion_over_10000_messages_with_a_backlog(store: QueueStore) -> None:
    """A backlog keeps growing while a consumer takes messages; no message may be
    received while a message of higher priority waits (the acceptance's 0 inversions)."""
    rng = random.Random(5)
    waiting: dict[int, int] = {}  # priority -> count
    inversions = received = 0
    sent = 0
    while received < 10_000:
        burst = [(str(sent + i).encode(), rng.randrange(10)) for i in range(rng.randrange(0, 4))]
        if sent < 10_000 and burst:
            store.put_many("q", burst)
            sent += len(burst)
            for _, p in burst:
                waiting[p] = waiting.get(p, 0) + 1
        for m in store.get("q", "c", rng.randrange(1, 3)):
            inversions += any(p > m.priority and n for p, n in waiting.items())
            waiting[m.priority] -= 1
            received += 1
            store.ack([m.tag], "c")
    assert received == 10_000 and inversions == 0


def test_unacked_messages_come_back_when_the_consumer_dies(store: QueueStore) -> None:
    store.put_many("q", [(b"a", 1), (b"b", 1)])
    first = store.get("q", "alice")
    assert store.get("q", "bob")[0].body == b"b"
    assert store.get("q", "bob") == []  # a is leased to alice
    assert store.release_consumer("alice") == 1
    again = store.get("q", "bob")
    assert again[0].msg_id == first[0].msg_id and again[0].deliveries == 2
    assert store.ack([again[0].tag], "alice") == 0  # not alice's lease any more
    assert store.ack([again[0].tag], "bob") == 1


def test_leases_expire_and_a_reopened_store_releases_its_leases(tmp_path: Path) -> None:
    s = QueueStore(tmp_path / "q.db")
    s.bind("q")
    s.put_many("q", [(b"a", 0), (b"b", 0)])
    s.get("q", "c", lease_until=10.0)
    s.get("q", "d")
    assert s.expire(9.0) == 0 and s.expire(10.0) == 1
    s.close()
    reopened = QueueStore(tmp_path / "q.db")
    assert reopened.recovered_leases == 1
    assert sorted(m.body for m in reopened.get("q", "x", 5)) == [b"a", b"b"]


def test_committed_puts_survive_a_reopen_and_memory_stores_do_not_share(tmp_path: Path) -> None:
    s = QueueStore(tmp_path / "q.db", fsync="full")
    s.bind("q")
    ids = s.put_many("q", [(b"x", 3)])
    s.close()
    assert QueueStore(tmp_path / "q.db").get("q", "c")[0].msg_id == ids[0]
    m1, m2 = QueueStore(), QueueStore()
    m1.bind("q")
    assert not m2.is_bound("q") and not m1.durable


def test_transactional_receive_removes_only_on_commit(store: QueueStore) -> None:
    store.bind("out")
    store.put_many("q", [(b"a", 0), (b"b", 0)])
    tx = store.transaction()
    assert [m.body for m in tx.get("q")] == [b"a"]
    tx.put("out", b"A")
    assert store.info("out").ready == 0  # buffered until commit
    tx.rollback()
    assert store.info("q").ready == 2 and store.info("out").ready == 0
    with store.transaction() as tx2:
        assert [m.body for m in tx2.get("q")] == [b"a"]  # a came back first
        tx2.put("out", b"A", 7)
    assert store.info("q").ready == 1 and store.info("out").depth[7] == 1
    with pytest.raises(RuntimeError), store.transaction() as tx3:
        tx3.get("q")
        raise RuntimeError("the consumer failed")
    assert store.info("q").ready == 1
    with pytest.raises(UsageError, match="finished"):
        tx3.get("q")


def test_unbind_highest_leaves_dead_messages_for_the_monitor(store: QueueStore) -> None:
    store.put_many("q", [(b"a", 0), (b"b", 5), (b"c", 9)])
    leased = store.get("q", "c")
    assert store.unbind("q", Unbind.HIGHEST) is True
    info = store.info("q")
    assert (info.bound, info.ready, info.leased, info.dead) == (False, 0, 0, 3)
    with pytest.raises(UsageError, match="not bound"):
        store.put("q", b"d")
    with pytest.raises(UsageError, match="not bound"):
        store.get("q", "c")
    assert store.ack([leased[0].tag], "c") == 0  # dead, not acknowledged away
    assert store.purge_dead() == 3
    assert store.queues() == []


def test_unbind_lowest_drains_first(store: QueueStore) -> None:
    store.put_many("q", [(b"a", 0), (b"b", 5)])
    assert store.unbind("q", Unbind.LOWEST) is False
    assert store.info("q").draining
    with pytest.raises(UsageError, match="draining"):
        store.put("q", b"late")
    first = store.get("q", "c")
    store.ack([first[0].tag])
    assert store.is_bound("q")
    with store.transaction() as tx:
        assert [m.body for m in tx.get("q")] == [b"a"]
    assert not store.is_bound("q") and store.info("q").dead == 0
    store.bind("q")  # bound again: accepts sends
    store.put("q", b"new")
    assert store.unbind("q", Unbind.LOWEST) is False
    store.bind("q")
    assert not store.info("q").draining


@pytest.mark.parametrize("bad, message", [
    ({"priority": 10}, "priority must be an int from 0 to 9"),
    ({"priority": -1}, "priority must be"),
    ({"priority": 1.5}, "priority must be"),
    ({"body": "text"}, "body must be bytes"),
    ({"queue": "nope"}, "not bound"),
])
def test_bad_input_is_one_usage_error(store: QueueStore, bad: dict[str, object], message: str) -> None:
    args = {"queue": "q", "body": b"x", "priority": 0} | bad
    with pytest.raises(UsageError, match=message):
        store.put(args["queue"], args["body"], args["priority"])  # type: ignore[arg-type]


def test_usage_errors_of_names_modes_and_depth(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="fsync must be one of"):
        QueueStore(fsync="sometimes")
    s = QueueStore(max_depth=2)
    with pytest.raises(UsageError, match="without '@'"):
        s.bind("q@node")
    s.bind("q")
    s.put_many("q", [(b"a", 0), (b"b", 0)])
    with pytest.raises(QueueFull):
        s.put("q", b"c")
    with pytest.raises(UsageError, match="Unbind.HIGHEST"):
        s.unbind("q", "highest")  # type: ignore[arg-type]


def test_full_receiver_takes_what_fits_and_leaves_the_rest_unacknowledged() -> None:
    receiver = QueueStore(max_depth=1)
    receiver.bind("q")
    batch = [Forwarded(1, "q", 0, b"a"), Forwarded(2, "q", 0, b"b")]
    result = receiver.accept_forwarded(7, 1, batch)
    assert (result.accepted, result.done, result.full) == (1, (1,), True)
    assert receiver.info("q").ready == 1
    (m,) = receiver.get("q", "c")
    receiver.ack([m.tag], "c")
    again = receiver.accept_forwarded(7, 1, batch)
    assert (again.accepted, again.duplicates, again.done, again.full) == (1, 1, (1, 2), False)


def test_forwarded_to_an_unbound_queue_is_kept_dead() -> None:
    receiver = QueueStore()
    result = receiver.accept_forwarded(3, 1, [Forwarded(1, "missing", 4, b"x")])
    assert (result.accepted, result.dead, result.done) == (0, 1, (1,))
    assert receiver.info("missing").dead == 1


DEPTH = 8
"""The forwarding machine's receiving queue holds at most this many messages."""


class ForwardMachine(RuleBasedStateMachine):
    """A sender store forwards to a receiver store over a channel that loses,
    duplicates and reorders batches and acknowledgements; either store may
    crash (closed and reopened from its file) at any step, and the receiving
    queue is small (``DEPTH``), so batches are often taken only in part. Every message
    committed by the sender is committed exactly once by the receiver, and the
    sender forgets it only after that."""

    def __init__(self) -> None:
        super().__init__()
        import tempfile

        self.dir = Path(tempfile.mkdtemp(prefix="sgcs-fwd-"))
        self.sender = QueueStore(self.dir / "a.db", fsync="off")
        self.receiver = QueueStore(self.dir / "b.db", fsync="off", audit=True, max_depth=DEPTH)
        self.receiver.bind("q")
        self.consumed: set[bytes] = set()
        self.committed: list[int] = []
        self.batches: list[tuple[int, list[Forwarded]]] = []  # in flight: (floor, batch)
        self.acks: list[list[int]] = []

    @rule(count=st.integers(1, 5), priority=st.integers(0, 9))
    def send(self, count: int, priority: int) -> None:
        self.committed += self.sender.enqueue_remote("b", "q", [(b"m", priority)] * count)

    @rule(limit=st.integers(1, 6))
    def forward(self, limit: int) -> None:
        rows = self.sender.xmit_pending("b", limit=limit)
        if rows:
            batch = [Forwarded(r.seq, r.queue, r.priority, r.body) for r in rows]
            self.batches.append((self.sender.xmit_floor("b"), batch))

    @precondition(lambda self: self.batches)
    @rule(pick=st.integers(0, 100), duplicate=st.booleans(), lose=st.booleans())
    def deliver_batch(self, pick: int, duplicate: bool, lose: bool) -> None:
        floor, batch = self.batches[pick % len(self.batches)]
        if not duplicate:
            self.batches.remove((floor, batch))
        if lose:
            return
        result = self.receiver.accept_forwarded(self.sender.origin, floor, batch)
        assert set(result.done) <= {m.seq for m in batch}
        assert result.full or len(result.done) == len(batch)
        self.acks.append(list(result.done))

    @rule(count=st.integers(1, 4))
    def consume(self, count: int) -> None:
        """The receiver's consumers make room (the receiver holds at most DEPTH messages)."""
        for m in self.receiver.get("q", "c", count):
            self.consumed.add(m.msg_id)
            self.receiver.ack([m.tag], "c")

    @precondition(lambda self: self.acks)
    @rule(pick=st.integers(0, 100), lose=st.booleans())
    def deliver_ack(self, pick: int, lose: bool) -> None:
        seqs = self.acks.pop(pick % len(self.acks))
        if not lose:
            self.sender.xmit_done("b", seqs)

    @rule()
    def crash_sender(self) -> None:
        self.sender.close()
        self.sender = QueueStore(self.dir / "a.db", fsync="off")

    @rule()
    def crash_receiver(self) -> None:
        self.receiver.close()
        self.receiver = QueueStore(self.dir / "b.db", fsync="off", audit=True, max_depth=DEPTH)

    @invariant()
    def exactly_once_so_far(self) -> None:
        counts = self.receiver.audit_counts()
        assert all(n == 1 for n in counts.values()), counts
        held = {r.seq for r in self.sender.xmit_pending("b", limit=10**6, max_bytes=10**9)}
        arrived = {int.from_bytes(i[8:], "big") for i in counts}
        # nothing is lost: every committed message is still held by the sender or arrived
        assert set(self.committed) <= held | arrived
        # the sender forgets only what arrived
        assert set(self.committed) - held <= arrived
        assert self.receiver.seen_count() <= len(self.committed)

    def teardown(self) -> None:
        # drain: a reliable channel at the end delivers everything exactly once
        for _ in range(1_000):
            rows = self.sender.xmit_pending("b", limit=50)
            if not rows:
                break
            self.consume(DEPTH)
            batch = [Forwarded(r.seq, r.queue, r.priority, r.body) for r in rows]
            result = self.receiver.accept_forwarded(self.sender.origin, self.sender.xmit_floor("b"), batch)
            self.sender.xmit_done("b", result.done)
        counts = self.receiver.audit_counts()
        assert sorted(counts) == sorted(forwarded_id(self.sender.origin, s) for s in self.committed)
        assert self.receiver.info("q").ready + len(self.consumed) == len(self.committed)
        self.sender.close()
        self.receiver.close()
        shutil.rmtree(self.dir, ignore_errors=True)


TestForwardMachine = ForwardMachine.TestCase
TestForwardMachine.settings = settings(max_examples=40, stateful_step_count=40, deadline=None,
                                       suppress_health_check=[HealthCheck.too_slow])


class ReceiveMachine(RuleBasedStateMachine):
    """Puts, gets by several consumers, acks, consumer deaths, transactions and
    crashes against a plain model: the store hands out exactly the model's next
    message (highest priority, then oldest) and loses nothing."""

    def __init__(self) -> None:
        super().__init__()
        import tempfile

        self.path = Path(tempfile.mkdtemp(prefix="sgcs-rcv-")) / "q.db"
        self.store = QueueStore(self.path, fsync="off")
        self.store.bind("q")
        self.ready: dict[bytes, tuple[int, int]] = {}  # msg_id -> (priority, order)
        self.leased: dict[int, tuple[str, bytes, int, int]] = {}  # tag -> (owner, id, priority, order)
        self.order = 0

    @rule(priority=st.integers(0, 9))
    def put(self, priority: int) -> None:
        (msg_id,) = self.store.put_many("q", [(b"x", priority)])
        self.order += 1
        self.ready[msg_id] = (priority, self.order)

    @rule(consumer=st.sampled_from(["a", "b", "c"]), count=st.integers(1, 3))
    def get(self, consumer: str, count: int) -> None:
        got = self.store.get("q", consumer, count)
        expected = sorted(self.ready, key=lambda i: (-self.ready[i][0], self.ready[i][1]))[:count]
        assert [m.msg_id for m in got] == expected
        for m in got:
            priority, order = self.ready.pop(m.msg_id)
            self.leased[m.tag] = (consumer, m.msg_id, priority, order)

    @precondition(lambda self: self.leased)
    @rule(pick=st.integers(0, 100))
    def ack(self, pick: int) -> None:
        tag = sorted(self.leased)[pick % len(self.leased)]
        owner = self.leased.pop(tag)[0]
        assert self.store.ack([tag], owner) == 1

    @rule(consumer=st.sampled_from(["a", "b", "c"]))
    def consumer_dies(self, consumer: str) -> None:
        back = [tag for tag, v in self.leased.items() if v[0] == consumer]
        assert self.store.release_consumer(consumer) == len(back)
        for tag in back:
            _, msg_id, priority, order = self.leased.pop(tag)
            self.ready[msg_id] = (priority, order)

    @rule(commit=st.booleans())
    def transaction(self, commit: bool) -> None:
        tx = self.store.transaction()
        got = tx.get("q")
        if got and self.ready:
            expected = min(self.ready, key=lambda i: (-self.ready[i][0], self.ready[i][1]))
            assert got[0].msg_id == expected
        if commit:
            tx.commit()
            for m in got:
                self.ready.pop(m.msg_id)
        else:
            tx.rollback()

    @rule()
    def crash(self) -> None:
        self.store.close()
        self.store = QueueStore(self.path, fsync="off")
        for _, msg_id, priority, order in self.leased.values():
            self.ready[msg_id] = (priority, order)
        self.leased.clear()

    @invariant()
    def counts_match(self) -> None:
        info = self.store.info("q")
        assert info.ready == len(self.ready) and info.leased == len(self.leased)
        depth = [0] * 10
        for priority, _ in self.ready.values():
            depth[priority] += 1
        assert list(info.depth) == depth

    def teardown(self) -> None:
        self.store.close()
        shutil.rmtree(self.path.parent, ignore_errors=True)


TestReceiveMachine = ReceiveMachine.TestCase
TestReceiveMachine.settings = settings(max_examples=40, stateful_step_count=40, deadline=None,
                                       suppress_health_check=[HealthCheck.too_slow])


def test_depth_is_kept_by_triggers_and_recounted_at_open(tmp_path: Path) -> None:
    s = QueueStore(tmp_path / "d.db", fsync="off", max_depth=3)
    s.bind("q")
    s.put_many("q", [(b"a", 0), (b"b", 0), (b"c", 0)])
    with pytest.raises(QueueFull):
        s.put("q", b"d")
    (m,) = s.get("q", "c")
    assert s.ack([m.tag], "c") == 1
    s.put("q", b"d")  # room again after the ack
    s._db.execute("DELETE FROM depth")  # as a file from before the triggers
    s.close()
    reopened = QueueStore(tmp_path / "d.db", fsync="off", max_depth=3)
    with pytest.raises(QueueFull):
        reopened.put("q", b"e")


def test_a_message_released_delivery_limit_times_goes_to_the_dead_letter_queue(tmp_path: Path) -> None:
    """RabbitMQ's delivery limit: a poison message is handed out at most
    ``delivery_limit`` times; released again (or its consumer dies, or a
    transaction rolls back), it moves to the dead-letter queue, fresh."""
    store = QueueStore(tmp_path / "q.db", fsync="off")
    store.bind("jobs", delivery_limit=2, dead_letter="jobs.dead")
    store.put_many("jobs", [(b"poison", 5), (b"fine", 0)])
    first = store.get("jobs", "c1")
    assert first[0].body == b"poison" and store.release([first[0].tag]) == 1
    second = store.get("jobs", "c2")
    assert second[0].body == b"poison" and second[0].deliveries == 2
    store.release_consumer("c2")  # its consumer died: the limit is reached
    (fine,) = store.get("jobs", "c3", 5)
    assert fine.body == b"fine" and store.ack([fine.tag]) == 1
    (dead,) = store.get("jobs.dead", "monitor")
    assert (dead.body, dead.priority, dead.deliveries) == (b"poison", 5, 1) and store.dead_lettered == 1
    assert store.info("jobs").ready == 0 and store.info("jobs.dead").leased == 1
    store.close()
    reopened = QueueStore(tmp_path / "q.db", fsync="off")  # the policy is in the file
    reopened.put("jobs", b"again")
    with reopened.transaction() as tx:
        tx.get("jobs")
        tx.rollback()
    (m,) = reopened.get("jobs", "c4")
    reopened.release([m.tag])
    assert reopened.get("jobs", "c5") == []
    assert [m.body for m in reopened.get("jobs.dead", "monitor", 5)] == [b"poison", b"again"]


def test_a_message_past_its_ttl_is_dead_lettered_not_handed_out(tmp_path: Path) -> None:
    store = QueueStore(tmp_path / "q.db", fsync="off")
    store.bind("orders", dead_letter="expired")
    store.bind("plain")
    store.put_many("orders", [(b"late", 0)], ttl=10.0, now=1_000.0)
    store.put_many("orders", [(b"kept", 0)], now=1_000.0)
    store.put_many("plain", [(b"gone", 0)], ttl=1.0, now=1_000.0)
    got = store.get("orders", "c", 5, now=1_005.0)  # within the TTL: handed out
    assert [m.body for m in got] == [b"late", b"kept"] and store.ack([m.tag for m in got]) == 2
    store.put_many("orders", [(b"late2", 0)], ttl=10.0, now=1_000.0)
    assert [m.body for m in store.get("orders", "d", 5, now=1_011.0)] == []  # expired at 1,010
    assert [m.body for m in store.get("expired", "e", 5)] == [b"late2"]
    assert store.expire_ttl(now=1_002.0) == 1  # "plain" has no dead-letter queue: a dead message
    assert store.info("plain").dead == 1 and store.get("plain", "c") == []
    with pytest.raises(UsageError, match="ttl must be positive"):
        store.put_many("orders", [(b"x", 0)], ttl=0)
    with pytest.raises(UsageError, match="its own dead-letter queue"):
        store.bind("orders", dead_letter="orders")
    with pytest.raises(UsageError, match="delivery_limit"):
        store.bind("orders", delivery_limit=0)


def test_a_remote_send_with_a_ttl_forwards_its_remaining_time_or_expires_at_the_sender(tmp_path: Path) -> None:
    """The transmission row keeps the expiry (the sender's clock); a batch carries
    the milliseconds left when it is read; a row expired before it goes is moved to
    the sender's queue xmit.expired, unless an acknowledgement of it is awaited."""
    sender = QueueStore(tmp_path / "a.db", fsync="off")
    seqs = sender.enqueue_remote("b", "q", [(b"t1", 4), (b"t2", 0)], ttl=10.0, now=1_000.0)
    (plain,) = sender.enqueue_remote("b", "q", [(b"plain", 1)], now=1_000.0)
    rows = sender.xmit_pending("b", now=1_002.5)
    assert [(r.body, r.ttl_ms(1_002.5)) for r in rows] == [(b"t1", 7_500), (b"t2", 7_500), (b"plain", 0)]
    assert rows[0].ttl_ms(1_009.9999) == 1  # never 0 (none) for a row still alive
    # at 1,010 both TTL rows expired: not pending any more; t1 is in flight, so only t2 moves
    assert [r.body for r in sender.xmit_pending("b", now=1_010.0)] == [b"plain"]
    assert sender.xmit_expire(1_010.0, in_flight={seqs[0]}) == 1
    assert sender.xmit_count("b") == 2 and sender.dead_lettered == 1
    (moved,) = sender.get(XMIT_EXPIRED, "monitor")
    assert (moved.body, moved.priority, moved.msg_id) == (b"t2", 0, forwarded_id(sender.origin, seqs[1]))
    assert sender.xmit_expire(1_010.0) == 1 and sender.xmit_floor("b") == plain  # no answer came: t1 goes too
    assert sender.info(XMIT_EXPIRED).bound and sender.xmit_expire(2_000.0) == 0
    with pytest.raises(UsageError, match="ttl must be positive seconds up to"):
        sender.enqueue_remote("b", "q", [(b"x", 0)], ttl=MAX_FORWARD_TTL + 1)

    receiver = QueueStore()  # the TTL counts from arrival, on the receiver's clock
    receiver.bind("q", dead_letter="q.dead")
    batch = [Forwarded(1, "q", 0, b"t", 7_500), Forwarded(2, "q", 0, b"p")]
    assert receiver.accept_forwarded(5, 1, batch, now=50.0).accepted == 2
    assert [m.body for m in receiver.get("q", "c", 5, now=57.6)] == [b"p"]
    assert [m.body for m in receiver.get("q.dead", "c", 5)] == [b"t"]


def test_an_old_store_file_gets_the_transmission_expiry_column(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    db.executescript("CREATE TABLE xmit(seq INTEGER PRIMARY KEY AUTOINCREMENT, dest TEXT NOT NULL, "
                     "queue TEXT NOT NULL, priority INTEGER NOT NULL, body BLOB NOT NULL);"
                     "INSERT INTO xmit(dest, queue, priority, body) VALUES('b', 'q', 3, x'6f6c64');")
    db.close()
    store = QueueStore(path, fsync="off")
    assert [(r.body, r.expires_at) for r in store.xmit_pending("b")] == [(b"old", None)]
    assert store.xmit_expire(10**12) == 0 and store.xmit_count("b") == 1


def test_a_changed_delivery_limit_retires_what_already_reached_it() -> None:
    store = QueueStore()
    store.bind("q")
    store.put_many("q", [(b"a", 0)], expires_at=100.0)
    (m,) = store.get("q", "c", now=50.0)
    store.release([m.tag])
    (m,) = store.get("q", "c", now=50.0)
    store.release([m.tag])  # two deliveries, no limit yet: ready
    assert store.set_delivery_limit("q", 3) == 0 and store.info("q").ready == 1
    assert store.set_delivery_limit("q", 2) == 1 and store.dead_messages("q") == [(m.msg_id, 0, b"a")]
    with pytest.raises(UsageError, match="ttl or expires_at"):
        store.put_many("q", [(b"x", 0)], ttl=1, expires_at=5.0)


def test_under_fsync_full_puts_sync_and_receives_and_acks_do_not(tmp_path: Path) -> None:
    """A lease and an acknowledgement may be lost in a power cut (one more
    delivery, as at-least-once allows); a put may not."""
    full = QueueStore(tmp_path / "full.db", fsync="full")
    full.bind("q")
    statements: list[str] = []
    full._db.set_trace_callback(statements.append)
    full.put("q", b"a")
    assert not [s for s in statements if "synchronous" in s]
    (message,) = full.get("q", "c")
    full.ack([message.tag], "c")
    assert [s for s in statements if "synchronous" in s] == ["PRAGMA synchronous=NORMAL", "PRAGMA synchronous=FULL"] * 2
    with pytest.raises(UsageError):
        full.get("q", "")  # refused before any transaction
    full._db.set_trace_callback(None)
    assert full._db.execute("PRAGMA synchronous").fetchone() == (2,)
    full.put("q", b"b")
    with full.batch():
        (leased,) = full.get("q", "c")  # inside a batch: the batch's own setting
    assert full._db.execute("PRAGMA synchronous").fetchone() == (2,) and leased.body == b"b"
