"""The queue manager: one per node, serving local and remote clients (docs/queues.md).

Theory of operation
-------------------
The message-queue paper's queue manager owns named queues and serves Send,
Receive, Bind and Unbind for every client on its own. Here a ``QueueManager``
owns two ``QueueStore``s, memory queues in ``":memory:"`` and durable queues
in one SQLite file, and joins an sgcs group (``sgcs.queues`` by default, FIFO)
shared by every queue manager. A manager multicasts HELLO with its name when
it joins and whenever someone joins, so ``queue@name`` resolves to a member id.

**Store and forward, exactly once.** ``put("orders@b", ...)`` commits the
message to the local transmission table and returns: the sender never waits
for ``b``. The forwarder task sends what is pending to ``b`` by sgcs reliable
unicast (FWD, a window of ``forward_window`` messages in flight), ``b``
commits the batch idempotently (``QueueStore.accept_forwarded``) and answers
FWD_ACK, and only then does the sender delete its copy. If no acknowledgement
comes for ``retry`` seconds, or ``b`` restarted (a new member id), the
forwarder sends everything pending again; ``b`` recognises what it already
committed by message id and only acknowledges it again. So a kill -9 of either
side at any point neither loses nor duplicates a message in ``b``'s queue.

**Remote receive, at least once.** ``get("orders@b")`` sends GET; ``b``
leases messages to the asking member (owner ``m:<member id>``, with a lease
deadline) and answers MSGS, waiting up to the request's wait time for a
message to arrive (long poll; at most ``max_parked`` requests wait). The
consumer's ``ack`` deletes them at ``b``. If the consumer fails or leaves (the
view change says so), or the lease expires, or ``b`` restarts, its unacked
messages become ready again and are redelivered (``deliveries`` > 1). A
consumer that must process each message once records the message id in its
own transaction before acking (see docs/queues.md).

**TTL across nodes.** ``put("orders@b", ..., ttl=60)`` keeps the expiry in
the transmission row (this node's wall clock). Each FWD item carries the
milliseconds that remained when it was sent, and ``b`` puts the message with
that TTL on its own clock: clocks of two nodes differ, remaining times do not
(the time in flight is not subtracted; it is short next to a TTL). A row whose
TTL runs out before it goes (``b`` unreachable, or behind a full queue) is
not sent: the forwarder moves it to the local queue ``xmit.expired``
(``QueueStore.xmit_expire``) and counts it in
``statistics.expired_in_transmission``. Rows awaiting an acknowledgement are
left alone: ``b`` may hold them already, and expires them itself.

**Client sessions** (``session.py``): ``connect(client)`` is the paper's
Bind, a client's connection, answered by ``ConnectionOK``; each session has
its own worker in this manager's nursery, and ``session.unbind(rule)`` applies
the paper's two unbind rules to that session's messages. Queues themselves
are made and removed by ``create_queue`` and ``delete_queue`` (formerly
``bind`` and ``unbind``, kept as deprecated names).

Tags on the wire carry which store they came from (``seq * 2 + memory``).
Packets that do not decode are dropped and counted in ``statistics``.
Remote sends and receives use the durable store's tables: a manager opened
without ``path`` keeps them in memory, with no crash safety.
"""

from __future__ import annotations

import itertools
import os
import time
import warnings
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import trio

import sgcs
from sgcs.errors import DecodeError, UsageError

from ..tasks import background
from . import wire
from .session import ConnectionOK, DeadRequest, Session, check_client
from .store import (
    DEFAULT_MAX_DEPTH,
    XMIT_EXPIRED,
    Forwarded,
    Message,
    QueueFull,
    QueueInfo,
    QueueStore,
    Transaction,
    Unbind,
    check_queue_name,
    split_target,
)


@dataclass
class ManagerStatistics:
    forwarded: int = 0
    """Messages sent in FWD batches (retransmissions included)."""
    forward_acked: int = 0
    accepted: int = 0
    duplicates: int = 0
    """Forwarded messages this manager had already committed (a retransmission)."""
    dead_on_arrival: int = 0
    refused_full: int = 0
    dropped_undecodable: int = 0
    dropped_unicast: int = 0
    """Packets to a member no longer in the view (the retry logic covers them)."""
    retransmit_rounds: int = 0
    expired_in_transmission: int = 0
    """Remote sends whose TTL ran out before they were sent: moved to the local queue ``xmit.expired``."""
    served: int = 0
    released_for_failed: int = 0
    dead_requests: int = 0
    """Sends that an urgent unbind left unprocessed in their session's inbox."""
    dead_requests_purged: int = 0


@dataclass
class _Link:
    """Forwarding state toward one remote manager."""

    member: int
    after: int = 0
    outstanding: set[int] = field(default_factory=set)
    last_progress: float = 0.0
    hold_until: float = 0.0
    """The receiver was full: send nothing before this time."""


class QueueManager:
    """A node's queue manager; open one with ``open_queue_manager``."""

    def __init__(self, group: sgcs.GroupHandle, name: str, store: QueueStore, *, forward_window: int,
                 retry: float, max_parked: int, dead_purge_interval: float | None, max_sessions: int = 1_024) -> None:
        self.group = group
        self.name = name
        self.store = store
        self.memory = QueueStore(":memory:")
        self.statistics = ManagerStatistics()
        self._forward_window = forward_window
        self._retry = retry
        self._max_parked = max_parked
        self._dead_purge_interval = dead_purge_interval
        self._names: dict[str, int] = {}
        self._member_names: dict[int, str] = {}
        self._links: dict[str, _Link] = {}
        self._requests: dict[int, tuple[trio.Event, list[wire.Messages]]] = {}
        self._request_ids = itertools.count(int.from_bytes(os.urandom(4), "big") << 20)
        self._parked: list[tuple[int, wire.Get, float]] = []
        self._changed = trio.Event()
        self._forward_now = trio.Event()
        self._names_changed = trio.Event()
        self._view_ready = trio.Event()
        self._max_sessions = max_sessions
        self._sessions: dict[str, Session] = {}
        self._session_numbers = itertools.count(1)
        self.dead_requests: list[DeadRequest] = []
        """Sends left unprocessed by urgent unbinds, until the monitor purges them."""

    # ------------------------------------------------------------ bind / unbind / inspect

    def _store_of(self, queue: str) -> QueueStore | None:
        for store in (self.store, self.memory):
            if store.is_bound(queue):
                return store
        return None

    def create_queue(self, queue: str, *, durable: bool = True, delivery_limit: int | None = None,
                     dead_letter: str | None = None) -> None:
        """Create (or bind again) a local queue, durable (SQLite file) or in memory.

        ``delivery_limit``: a message handed out that many times and released
        (or whose consumer left, or whose lease ran out) is not handed out
        again but moved to ``dead_letter`` (a queue of the same store, bound
        if needed), or kept as a dead message when there is none. A message
        put with a ``ttl`` that passes unreceived goes the same way."""
        check_queue_name(queue)
        target = self.store if durable else self.memory
        other = self.memory if durable else self.store
        if other.is_bound(queue):
            raise UsageError(f"queue {queue!r} is already bound as a {'memory' if durable else 'durable'} queue")
        if durable and not self.store.durable:
            raise UsageError("a durable queue needs a store file: open the queue manager with path=...")
        target.bind(queue, delivery_limit=delivery_limit, dead_letter=dead_letter)

    def delete_queue(self, queue: str, rule: Unbind = Unbind.LOWEST) -> bool:
        """Remove a local queue by one of the two rules: ``Unbind.HIGHEST`` now (its
        messages become dead, for the monitor), ``Unbind.LOWEST`` once receivers have
        drained it. True if it is gone now."""
        store = self._store_of(queue)
        if store is None:
            raise UsageError(f"queue {queue!r} is not bound here")
        return store.unbind(queue, rule)

    def bind(self, queue: str, *, durable: bool = True, delivery_limit: int | None = None,
             dead_letter: str | None = None) -> None:
        """Deprecated: ``create_queue``. (The paper's Bind is a client's connection: ``connect``.)"""
        warnings.warn("QueueManager.bind(queue) is deprecated: use create_queue(queue); a client binds "
                      "with connect(client)", DeprecationWarning, stacklevel=2)
        self.create_queue(queue, durable=durable, delivery_limit=delivery_limit, dead_letter=dead_letter)

    def unbind(self, queue: str, rule: Unbind = Unbind.LOWEST) -> bool:
        """Deprecated: ``delete_queue``. (The paper's Unbind ends a client's session: ``session.unbind``.)"""
        warnings.warn("QueueManager.unbind(queue) is deprecated: use delete_queue(queue); a client unbinds "
                      "with session.unbind(rule)", DeprecationWarning, stacklevel=2)
        return self.delete_queue(queue, rule)

    # ------------------------------------------------------------ client sessions

    async def connect(self, client: str, *, max_pending: int = 1_024) -> tuple[ConnectionOK, Session]:
        """The paper's Bind: connect ``client`` and start its session's server here.
        Returns the "connection OK" and the session (``send``/``put``, ``get``,
        ``subscribe``/``messages``, ``ack``/``release``, ``unbind``). A client has one
        session at a time; ``max_pending`` sends may wait in its inbox."""
        check_client(client)
        if type(max_pending) is not int or not 1 <= max_pending <= 1_000_000:
            raise UsageError(f"max_pending must be an int from 1 to 1000000, got {max_pending!r}")
        if client in self._sessions:
            raise UsageError(f"client {client!r} is already bound (session {self._sessions[client].number}); "
                             "unbind that session first")
        if len(self._sessions) >= self._max_sessions:
            raise UsageError(f"this queue manager serves at most {self._max_sessions} sessions; unbind one first")
        session = Session(self, client, next(self._session_numbers), max_pending)
        self._sessions[client] = session
        try:
            ok: ConnectionOK = await self._nursery.start(session._run)
        except BaseException:
            self._sessions.pop(client, None)
            raise
        return ok, session

    @property
    def sessions(self) -> dict[str, Session]:
        """The bound sessions, by client id."""
        return dict(self._sessions)

    def _session_ended(self, session: Session) -> None:
        if self._sessions.get(session.client) is session:
            del self._sessions[session.client]

    def _dead_request(self, request: DeadRequest) -> None:
        self.dead_requests.append(request)
        self.statistics.dead_requests += 1

    def purge_dead_requests(self) -> int:
        """The monitor's step for sessions: forget the dead requests; returns how many."""
        purged = len(self.dead_requests)
        self.dead_requests.clear()
        self.statistics.dead_requests_purged += purged
        return purged

    def purge_dead(self) -> int:
        return self.store.purge_dead() + self.memory.purge_dead()

    def queues(self) -> list[QueueInfo]:
        return sorted(self.store.queues() + self.memory.queues(), key=lambda i: i.name)

    @property
    def known_nodes(self) -> dict[str, int]:
        """Queue managers this one can address, by name."""
        return dict(self._names)

    # ------------------------------------------------------------ send

    async def put(self, target: str, body: bytes, priority: int = 0, *, ttl: float | None = None) -> None:
        """Send one message to ``queue`` here or ``queue@node``; returns once committed locally.
        ``ttl``: seconds after which it is dead-lettered if still unreceived; for
        ``queue@node`` the time it waits here to be forwarded counts too."""
        await self.put_many(target, [(body, priority)], ttl=ttl)

    async def put_many(self, target: str, items: Sequence[tuple[bytes, int]], *, ttl: float | None = None) -> None:
        """Send ``(body, priority)`` pairs in one commit."""
        queue, node = split_target(target)
        if node is not None and node != self.name:
            self.store.enqueue_remote(node, queue, items, ttl=ttl)
            self._forward_now.set()
            return
        store = self._store_of(queue)
        if store is None:
            raise UsageError(f"queue {queue!r} is not bound here; bind it first")
        while True:
            try:
                store.put_many(queue, items, ttl=ttl)
                break
            except QueueFull:
                await self._wait_changed(None)  # block until receivers make room
        self._on_new(queue)

    def transaction(self, queue: str) -> Transaction:
        """A transactional receive (and send) on a local queue's store."""
        store = self._store_of(queue)
        if store is None:
            raise UsageError(f"queue {queue!r} is not bound here; bind it first")
        return store.transaction()

    # ------------------------------------------------------------ receive

    async def consume(self, target: str, *, prefetch: int = 1, lease: float = 30.0) -> AsyncIterator[Message]:
        """Push consumer: every message of ``target`` as it comes, highest
        priority first, for ever (until the manager closes). Each is leased
        for ``lease`` seconds; ``ack`` it, or ``release`` it for redelivery.
        ``prefetch`` messages are fetched at a time.

            async for message in qm.consume("jobs"):
                work(message.body)
                await qm.ack([message])
        """
        while True:
            for message in await self.get_many(target, prefetch, lease=lease):
                yield message

    async def get(self, target: str, *, timeout: float | None = None, lease: float = 30.0) -> Message:
        """Receive one message (highest priority first); raises ``TimeoutError``
        when none came within ``timeout`` seconds (None: wait for ever), as the
        blocking facade's ``receive`` does. ``get_many`` returns [] instead."""
        got = await self.get_many(target, 1, timeout=timeout, lease=lease)
        if not got:
            raise TimeoutError(f"no message from {target!r} within {timeout} s")
        return got[0]

    async def get_many(self, target: str, count: int, *, timeout: float | None = None,
                       lease: float = 30.0) -> list[Message]:
        """Receive up to ``count`` messages; waits up to ``timeout`` for the first (None: forever)."""
        queue, node = split_target(target)
        if type(count) is not int or not 1 <= count <= wire.MAX_ITEMS:
            raise UsageError(f"count must be an int from 1 to {wire.MAX_ITEMS}, got {count!r}")
        if not lease > 0:
            raise UsageError(f"lease must be positive seconds, got {lease!r}")
        deadline = trio.current_time() + (timeout if timeout is not None else float("inf"))
        if node is None or node == self.name:
            return await self._get_local(queue, count, deadline, lease)
        return await self._get_remote(queue, node, count, deadline, lease)

    async def _get_local(self, queue: str, count: int, deadline: float, lease: float) -> list[Message]:
        while True:
            store = self._store_of(queue)
            if store is None:
                raise UsageError(f"queue {queue!r} is not bound here; bind it first")
            got = store.get(queue, "local", count, lease_until=trio.current_time() + lease)
            if got or trio.current_time() >= deadline:
                return got
            await self._wait_changed(deadline)

    async def _get_remote(self, queue: str, node: str, count: int, deadline: float, lease: float) -> list[Message]:
        while True:  # ask at least once, even with timeout 0
            member = self._names.get(node)
            if member is None:
                if trio.current_time() >= deadline:
                    return []
                await self._wait_names(deadline)
                continue
            wait = max(0.0, min(deadline - trio.current_time(), 5.0))
            request = next(self._request_ids)
            done, box = trio.Event(), list[wire.Messages]()
            self._requests[request] = (done, box)
            try:
                await self._unicast(member, wire.Get(request, int(wait * 1000), count, int(lease * 1000), queue))
                with trio.move_on_after(wait + self._retry + 1.0):
                    await done.wait()
            finally:
                self._requests.pop(request, None)
            if box:
                reply = box[0]
                if reply.missing:
                    raise UsageError(f"queue {queue!r} is not bound at node {node!r}")
                if reply.items:
                    return [Message(item.tag, queue, item.msg_id, item.priority, item.body, item.deliveries, node)
                            for item in reply.items]
            # nothing yet, or no answer (the manager restarted?): ask again until the deadline
            if trio.current_time() >= deadline:
                return []

    async def ack(self, messages: Sequence[Message]) -> None:
        """Acknowledge received messages: they are deleted where they are held."""
        await self._settle(messages, release=False)

    async def release(self, messages: Sequence[Message]) -> None:
        """Give received messages back unprocessed: they are ready again at once."""
        await self._settle(messages, release=True)

    async def _settle(self, messages: Sequence[Message], *, release: bool) -> None:
        by_node: dict[str, list[int]] = {}
        for m in messages:
            if m.node in ("", self.name):
                store = self._store_of(m.queue)
                if store is not None:  # else unbound since: its messages are dead or gone
                    (store.release if release else store.ack)([m.tag], "local")
                    if release:
                        self._on_new(m.queue)
            else:
                by_node.setdefault(m.node, []).append(m.tag)
        for node, tags in by_node.items():
            member = self._names.get(node)
            if member is not None:  # else the lease expires or the view change releases them
                for start in range(0, len(tags), wire.MAX_ITEMS):
                    await self._unicast(member, wire.Ack(release, tuple(tags[start:start + wire.MAX_ITEMS])))

    # ------------------------------------------------------------ waiting helpers

    async def _wait_changed(self, deadline: float | None) -> None:
        with trio.move_on_at(deadline if deadline is not None else float("inf")):
            await self._changed.wait()

    async def _wait_names(self, deadline: float) -> None:
        with trio.move_on_at(min(deadline, trio.current_time() + 1.0)):
            await self._names_changed.wait()

    def _on_new(self, queue: str) -> None:
        self._wake_all()
        self._serve_parked(queue)

    def _wake_all(self) -> None:
        """Every local receive waiting for a change looks again."""
        self._changed.set()
        self._changed = trio.Event()

    # ------------------------------------------------------------ network

    async def _unicast(self, member: int, packet: wire.Packet) -> None:
        payload = wire.encode(packet)
        try:
            await self.group.send(payload, to=member)  # waits while the unicast window is full
        except UsageError:
            self.statistics.dropped_unicast += 1  # gone from the view: the retry logic resends

    async def _events(self) -> None:
        async for event in self.group:
            if isinstance(event, sgcs.ViewChange):
                await self._on_view(event)
            elif isinstance(event, sgcs.Delivery) and event.sender != self.group.node_id:
                try:
                    packet = wire.decode_untrusted(event.payload)
                except DecodeError:
                    self.statistics.dropped_undecodable += 1
                    continue
                await self._on_packet(event.sender, packet)

    async def _on_view(self, change: sgcs.ViewChange) -> None:
        first = not self._view_ready.is_set()
        self._view_ready.set()
        live = set(change.members)
        for member in [m for m in self._member_names if m not in live]:
            name = self._member_names.pop(member)
            if self._names.get(name) == member:
                del self._names[name]
        for member in (*change.left, *change.failed):
            self.statistics.released_for_failed += (self.store.release_consumer(f"m:{member}")
                                                    + self.memory.release_consumer(f"m:{member}"))
            self._parked = [p for p in self._parked if p[0] != member]
        self._changed.set()
        self._changed = trio.Event()
        if first or change.joined:
            await self.group.send(wire.encode(wire.Hello(self.name)))

    async def _on_packet(self, sender: int, packet: wire.Packet) -> None:
        if isinstance(packet, wire.Hello):
            old = self._names.get(packet.name)
            self._names[packet.name] = sender
            self._member_names[sender] = packet.name
            if old != sender:
                self._names_changed.set()
                self._names_changed = trio.Event()
                self._forward_now.set()
        elif isinstance(packet, wire.Forward):
            await self._on_forward(sender, packet)
        elif isinstance(packet, wire.ForwardAck):
            self._on_forward_ack(sender, packet)
        elif isinstance(packet, wire.Get):
            self._on_get(sender, packet)
        elif isinstance(packet, wire.Messages):
            entry = self._requests.get(packet.request)
            if entry is not None:
                entry[1].append(packet)
                entry[0].set()
            elif packet.items:  # the asker gave up: hand the lease back at once
                self._send_later(sender, wire.Ack(True, tuple(i.tag for i in packet.items)))
        elif isinstance(packet, wire.Ack):
            for memory, store in ((0, self.store), (1, self.memory)):
                tags = [t >> 1 for t in packet.tags if t & 1 == memory]
                if tags:
                    (store.release if packet.release else store.ack)(tags, f"m:{sender}")
            if packet.release:
                self._changed.set()
                self._changed = trio.Event()
                self._serve_all_parked()

    async def _on_forward(self, sender: int, packet: wire.Forward) -> None:
        result = self.store.accept_forwarded(packet.origin, packet.floor, packet.items)
        self.statistics.accepted += result.accepted
        self.statistics.duplicates += result.duplicates
        self.statistics.dead_on_arrival += result.dead
        self.statistics.refused_full += len(packet.items) - len(result.done)
        await self._unicast(sender, wire.ForwardAck(packet.origin, result.full, result.done))
        for queue in {item.queue for item in packet.items}:
            self._on_new(queue)

    def _on_forward_ack(self, sender: int, packet: wire.ForwardAck) -> None:
        name = self._member_names.get(sender)
        if name is None or packet.origin != self.store.origin:
            return
        self.statistics.forward_acked += self.store.xmit_done(name, packet.seqs)
        link = self._links.get(name)
        if link is not None and link.member == sender:
            link.outstanding.difference_update(packet.seqs)
            link.last_progress = trio.current_time()
            if packet.full:  # back off, then resend what was left out, from the floor
                link.outstanding.clear()
                link.after = 0
                link.hold_until = trio.current_time() + self._retry
        self._forward_now.set()

    def _on_get(self, sender: int, get: wire.Get) -> None:
        store = self._store_of(get.queue)
        if store is None:
            self._send_later(sender, wire.Messages(get.request, True, ()))
            return
        items = self._lease(store, sender, get)
        if items or get.wait_ms == 0 or len(self._parked) >= self._max_parked:
            self._send_later(sender, wire.Messages(get.request, False, items))
        else:
            self._parked.append((sender, get, trio.current_time() + get.wait_ms / 1000))

    def _lease(self, store: QueueStore, member: int, get: wire.Get) -> tuple[wire.Item, ...]:
        memory = int(store is self.memory)
        got = store.get(get.queue, f"m:{member}", get.max, lease_until=trio.current_time() + get.lease_ms / 1000)
        self.statistics.served += len(got)
        return tuple(wire.Item(m.tag * 2 + memory, m.priority, m.deliveries, m.msg_id, m.body) for m in got)

    def _serve_parked(self, queue: str) -> None:
        self._serve_all_parked(only=queue)

    def _serve_all_parked(self, only: str | None = None, *, expired_before: float | None = None) -> None:
        keep = []
        for member, get, deadline in self._parked:
            store = self._store_of(get.queue)
            if store is None:
                self._send_later(member, wire.Messages(get.request, True, ()))
                continue
            items = self._lease(store, member, get) if only in (None, get.queue) else ()
            if items or (expired_before is not None and deadline <= expired_before):
                self._send_later(member, wire.Messages(get.request, False, items))
            else:
                keep.append((member, get, deadline))
        self._parked = keep

    def _send_later(self, member: int, packet: wire.Packet) -> None:
        """Send from a task of its own: the event loop must not wait on a full unicast window."""
        self._nursery.start_soon(self._unicast, member, packet)

    # ------------------------------------------------------------ background tasks

    async def _forwarder(self) -> None:
        while True:
            self._forward_now = trio.Event()
            self._expire_transmissions()  # every round: also for destinations nobody can reach
            for dest in self.store.xmit_dests():
                await self._forward_to(dest)
            with trio.move_on_after(min(self._retry / 4, 0.25)):
                await self._forward_now.wait()

    def _expire_transmissions(self) -> None:
        in_flight = set[int]().union(*(link.outstanding for link in self._links.values()))
        expired = self.store.xmit_expire(time.time(), in_flight=in_flight)
        if expired:
            self.statistics.expired_in_transmission += expired
            self._on_new(XMIT_EXPIRED)

    async def _forward_to(self, dest: str) -> None:
        member = self._names.get(dest)
        if member is None:
            # Unreachable: nothing is in flight any more (a new link resends from the
            # floor), so its rows may expire here instead of waiting for an answer.
            self._links.pop(dest, None)
            return
        now = trio.current_time()
        link = self._links.get(dest)
        if link is None or link.member != member:
            link = self._links[dest] = _Link(member, last_progress=now)
        if now < link.hold_until:
            return
        if link.outstanding and now - link.last_progress > self._retry:
            self.statistics.retransmit_rounds += 1
            link.outstanding.clear()
            link.after = 0
        while len(link.outstanding) < self._forward_window:
            wall = time.time()  # read per batch: the remaining TTLs are taken at sending time
            rows = self.store.xmit_pending(dest, after=link.after, now=wall,
                                           limit=min(512, self._forward_window - len(link.outstanding)))
            if not rows:
                return
            if not link.outstanding:
                link.last_progress = now
            floor = self.store.xmit_floor(dest)
            await self._unicast(member, wire.Forward(self.store.origin, floor, tuple(
                Forwarded(r.seq, r.queue, r.priority, r.body, r.ttl_ms(wall)) for r in rows)))
            self.statistics.forwarded += len(rows)
            link.after = rows[-1].seq
            link.outstanding.update(r.seq for r in rows)

    async def _maintenance(self) -> None:
        last_purge = trio.current_time()
        while True:
            await trio.sleep(0.5)
            now = trio.current_time()
            if self.store.expire(now) + self.memory.expire(now) + self.store.expire_ttl() + self.memory.expire_ttl():
                self._changed.set()
                self._changed = trio.Event()
                self._serve_all_parked()
            self._serve_all_parked(only="", expired_before=now)
            if self._dead_purge_interval is not None and now - last_purge >= self._dead_purge_interval:
                last_purge = now
                self.purge_dead()
                self.purge_dead_requests()

    _nursery: trio.Nursery

    def close(self) -> None:
        self.store.close()
        self.memory.close()


@asynccontextmanager
async def open_queue_manager(node: sgcs.NodeHandle, name: str, *, path: str | os.PathLike[str] | None = None,
                             fsync: str = "normal", group: str = "sgcs.queues", forward_window: int = 2_048,
                             retry: float = 1.0, max_parked: int = 1_024, dead_purge_interval: float | None = 10.0,
                             audit: bool = False, max_depth: int = DEFAULT_MAX_DEPTH,
                             max_sessions: int = 1_024) -> AsyncIterator[QueueManager]:
    """Run the queue manager ``name`` on ``node`` for the duration of the block.

    ``path``: the SQLite file of durable queues and of the transmission
    queue (None: both in memory, not crash-safe). ``fsync``: see
    ``QueueStore``. ``dead_purge_interval``: seconds between runs of the
    dead-message monitor (None: purge only on ``purge_dead()``). ``max_depth``:
    messages a durable queue may hold; a full queue refuses forwarded batches
    (the sender backs off for ``retry`` seconds) and blocks local puts.
    ``max_sessions``: client sessions (``connect``) served at once."""
    if not isinstance(name, str) or not name or "@" in name or len(name.encode()) > 200:
        raise UsageError(f"a queue manager's name is a non-empty str without '@', got {name!r}")
    if type(forward_window) is not int or forward_window < 1 or not retry > 0:
        raise UsageError("forward_window must be a positive int and retry positive seconds")
    if type(max_sessions) is not int or max_sessions < 1:
        raise UsageError(f"max_sessions must be a positive int, got {max_sessions!r}")
    store = QueueStore(path if path is not None else ":memory:", fsync=fsync, audit=audit, max_depth=max_depth)
    manager: QueueManager | None = None
    try:
        async with node.join(group, order=sgcs.Order.FIFO) as handle, background() as nursery:
            manager = QueueManager(handle, name, store, forward_window=forward_window, retry=retry,
                                   max_parked=max_parked, dead_purge_interval=dead_purge_interval,
                                   max_sessions=max_sessions)
            manager._nursery = nursery
            nursery.start_soon(manager._events)
            nursery.start_soon(manager._forwarder)
            nursery.start_soon(manager._maintenance)
            await manager._view_ready.wait()
            try:
                yield manager
            finally:
                nursery.cancel_scope.cancel()
    finally:
        store.close()
        if manager is not None:
            manager.memory.close()
