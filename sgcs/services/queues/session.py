"""Client sessions on a queue manager: the paper's Bind and Unbind as connect
and disconnect, one server task group per client, push delivery with bounded
prefetch (docs/queues.md, "Sessions and push").

Theory of operation
-------------------
The message-queue paper (section 2.1) gives the client middleware four
primitives: Send, Receive, Bind (connect) and Unbind (disconnect). On a
client's M_bind (section 2.2) the server forks a child process for that
client; the child first puts "connection OK" on the Send queue, then loops:
it takes *this client's* messages from the Receive queue, high priority
before normal, processes them and queues each result. M_unbind ends the
child, and where M_unbind stands among the client's waiting messages decides
what becomes of them:

* at the highest priority the child ends at once and the client's remaining
  messages are never processed: they are "dead", and a monitor purges them;
* at the lowest priority they are all processed first: no dead messages, but
  the unbind answers later when the network is congested.

Here ``await qm.connect(client)`` is Bind. It starts the session's own task
group inside the manager (the child process), whose first act is to return a
``ConnectionOK``; only then does the caller hold the ``Session``. The
session's *inbox* is its share of the Receive queue: its sends
(``session.send`` / ``session.put``), highest priority first and FIFO within
one, at most ``max_pending`` waiting. The session's worker commits them
(consecutive sends to one target in one commit) and finishes each one's
``SendTicket``: that is the paper's result message. Every session has a
worker of its own, which yields to the others after each commit, so a client
that floods its inbox or never takes its deliveries delays only itself.

Receive comes in the paper's two forms (section 1). Polling:
``session.get``. Callback: ``session.subscribe(queue, callback)``; the same
stream is a trio async iterator, ``session.messages(queue)``. A
subscription's pump leases messages to the session (store owner
``s:<client>:<number>``) only while it holds fewer than ``prefetch``
(leased, neither acked nor released): credit-based flow control, as AMQP's
``basic.qos``. It refills in one lease (one commit) once half the window is
free or its buffer ran dry, so a session holds at most ``prefetch`` messages
per subscription however slow its consumer is. A buffered message whose
lease is half gone is renewed when it is handed out, or skipped if it went
back to the queue meanwhile: nothing is handed to two consumers because it
waited in a buffer. Acks are as everywhere else: ``session.ack``,
``session.release``.

Unbind (``session.unbind(rule)``) applies the paper's rule to the session's
messages:

* ``Unbind.HIGHEST``: at once. Sends still in the inbox are not processed:
  each ticket fails with ``SessionClosed`` (the client learns it was not
  sent) and each is kept as a dead request until the manager's monitor
  purges it. The session's tasks are cancelled, callbacks included. Messages
  leased to the session go back to their queue: those still in a prefetch
  buffer, never handed to the application, *unseen* (their delivery count is
  restored); those handed out and not acked as a release (a redelivery, as
  when a consumer dies).
* ``Unbind.LOWEST``: new sends and receives are refused and the pumps lease
  no more; every send in the inbox is committed, the buffers are handed out,
  and the unbind waits until the application has acked or released every
  message it holds. If ``timeout`` passes first, what is left is handled as
  ``HIGHEST`` would, and counted.

No message is lost or handed to two applications by an unbind: every
message leased to the session is either acked by it or back in its queue,
and after the unbind the session can ack nothing (``SessionClosed``).
"""

from __future__ import annotations

import enum
import heapq
import inspect
import itertools
import math
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import trio

from sgcs.errors import SgcsError, UsageError, WouldBlock

from . import wire
from .store import (
    MAX_FORWARD_TTL,
    Message,
    QueueStore,
    Unbind,
    check_body,
    check_priority,
    check_ttl,
    split_target,
)

MAX_CLIENT_ID = 200
"""Bytes of a client id (UTF-8)."""
MAX_BATCH = 256
"""Sends of one session committed together at most: then its worker yields to the others."""
REMOTE_LEASE_MARGIN = 1.0
"""Seconds: a message of another node's queue is not handed out this close to its lease's end."""
YIELD_EVERY = 16
"""Acks and releases after which a session yields to the other tasks (a yield each costs 15 % of push throughput)."""
RELEASE_WAIT = 5.0
"""Seconds an unbind waits to give leases back to other nodes (else their lease expiry does it)."""

Callback = Callable[[Message], "Awaitable[None] | None"]


class _Manager(Protocol):
    """What a session needs of its queue manager (``manager.QueueManager``)."""

    name: str
    store: QueueStore
    memory: QueueStore
    _nursery: trio.Nursery

    def _store_of(self, queue: str) -> QueueStore | None: ...
    async def put_many(self, target: str, items: Sequence[tuple[bytes, int]], *, ttl: float | None = None) -> None: ...
    async def get_many(self, target: str, count: int, *, timeout: float | None = None,
                       lease: float = 30.0) -> list[Message]: ...
    async def ack(self, messages: Sequence[Message]) -> None: ...
    async def release(self, messages: Sequence[Message]) -> None: ...
    async def _wait_changed(self, deadline: float | None) -> None: ...
    def _on_new(self, queue: str) -> None: ...
    def _wake_all(self) -> None: ...
    def _dead_request(self, request: DeadRequest) -> None: ...
    def _session_ended(self, session: Session) -> None: ...


class SessionClosed(SgcsError):
    """The session is unbound or unbinding: the request was not served (a send was not sent)."""


@dataclass(frozen=True, slots=True)
class ConnectionOK:
    """The paper's "connection OK": what a session's server returns first."""

    client: str
    session: int
    """This session's number at the manager (a client bound again gets a new one)."""
    manager: str


@dataclass(frozen=True, slots=True)
class Unbound:
    """What an unbind did with the session's messages."""

    client: str
    rule: Unbind
    processed: int
    """Sends waiting in the inbox when the unbind began that were processed before the session ended."""
    dead: int
    """Sends waiting in the inbox that were not processed; their tickets raised ``SessionClosed``."""
    returned_unseen: int
    """Prefetched messages never handed to the application: back in their queue, delivery count restored."""
    released: int
    """Messages handed to the application and not acked: back in their queue (a redelivery)."""


@dataclass(frozen=True, slots=True)
class DeadRequest:
    """A send an urgent unbind left unprocessed (the paper's dead message), kept for the monitor."""

    client: str
    target: str
    priority: int
    size: int


@dataclass
class SessionStatistics:
    sent: int = 0
    """Sends committed (to the local queue, or to the transmission queue for ``queue@node``)."""
    send_errors: int = 0
    """Sends the worker could not commit (their queue was deleted since): the ticket raised."""
    handed_out: int = 0
    """Messages handed to the application: by ``get``, a callback or the async iterator."""
    acked: int = 0
    released: int = 0
    lost_leases: int = 0
    """Buffered messages not handed out because their lease ran out meanwhile (another consumer has them)."""
    callback_errors: int = 0
    """Callbacks that raised; their message was released (redelivered)."""
    peak_held: int = 0
    """The most messages the session held at once (leased, not yet acked or released)."""


class _State(enum.Enum):
    OPEN = "open"
    DRAINING = "unbinding"
    CLOSED = "unbound"


class _Wake:
    """Wake every task waiting for a change (trio is single-threaded: check, then wait)."""

    def __init__(self) -> None:
        self._event = trio.Event()

    def fire(self) -> None:
        self._event.set()
        self._event = trio.Event()

    async def wait(self) -> None:
        await self._event.wait()


class SendTicket:
    """One send in a session's inbox: ``await ticket.wait()`` returns once it is
    committed and raises what stopped it (``SessionClosed`` if an unbind left it
    unprocessed: it was not sent)."""

    __slots__ = ("target", "body", "priority", "ttl", "_done", "_error")

    def __init__(self, target: str, body: bytes, priority: int, ttl: float | None) -> None:
        self.target = target
        self.body = body
        self.priority = priority
        self.ttl = ttl
        self._done = trio.Event()
        self._error: SgcsError | None = None

    @property
    def done(self) -> bool:
        return self._done.is_set()

    @property
    def error(self) -> SgcsError | None:
        """Why it was not sent, once done; None: committed."""
        return self._error

    async def wait(self) -> None:
        await self._done.wait()
        if self._error is not None:
            raise self._error

    def _finish(self, error: SgcsError | None = None) -> None:
        self._error = error
        self._done.set()


@dataclass
class _Held:
    """A message leased to the session and not yet settled."""

    message: Message
    subscription: Subscription | None
    lease_until: float
    """trio time when its lease ends (for another node's queue, an estimate)."""
    handed: bool = False


def _key(message: Message) -> tuple[str, str, int]:
    return (message.node, message.queue, message.tag)


def check_client(client: object) -> str:
    if not isinstance(client, str) or not client or len(client.encode()) > MAX_CLIENT_ID:
        raise UsageError(f"a client id is a non-empty str of at most {MAX_CLIENT_ID} bytes, got {client!r}")
    return client


class Subscription:
    """A session's push subscription to one queue: an async iterator of its
    messages (``session.messages``), or the driver of a callback
    (``session.subscribe``). At most ``prefetch`` of its messages are leased to
    the session at once."""

    def __init__(self, session: Session, target: str, prefetch: int, lease: float) -> None:
        self.session = session
        self.target = target
        self.prefetch = prefetch
        self.lease = lease
        self.held = 0
        """Messages leased to this subscription and not yet acked or released (its buffer included)."""
        self.error: SgcsError | None = None
        """Why it ended early (its queue was deleted), or None."""
        self._refill = max(1, prefetch // 2)
        self._buffer: deque[Message] = deque()
        self._stopped = False
        self._changed = _Wake()
        self._scope = trio.CancelScope()

    @property
    def buffered(self) -> int:
        """Messages leased and waiting here to be handed out."""
        return len(self._buffer)

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> Message:
        while True:
            while not self._buffer:
                if self._stopped:
                    if self.error is not None:
                        raise self.error
                    raise StopAsyncIteration
                await self._changed.wait()
            message = self._buffer.popleft()
            self._poke()
            if self.session._hand_out(message):
                return message

    async def aclose(self) -> None:
        """Stop: lease no more; buffered messages go back to the queue unseen."""
        self._stop()
        entries = [self.session._held.get(_key(m)) for m in self._buffer]
        self._buffer.clear()
        await self.session._return([e for e in entries if e is not None])

    async def __aenter__(self) -> Subscription:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def _stop(self) -> None:
        self._stopped = True
        self._scope.cancel()
        self._changed.fire()

    def _poke(self) -> None:
        """Wake the pump if it has something to lease now (not after every message: a
        task switch per message would cost more than the lease saves)."""
        if self._wants():
            self._changed.fire()

    def _wants(self) -> int:
        """How many to lease now: 0 while the window is nearly full and the buffer not dry."""
        credit = self.prefetch - self.held
        if credit <= 0 or (self._buffer and credit < self._refill):
            return 0
        return credit

    async def _pump(self) -> None:
        with self._scope:
            while not self._stopped:
                want = self._wants()
                if not want:
                    await self._changed.wait()
                    continue
                try:
                    got = await self.session._lease(self.target, want, self.lease, math.inf, self)
                except SessionClosed:
                    break
                except UsageError as exc:  # the queue was deleted meanwhile: the stream ends, saying why
                    self.error = exc
                    break
                self._buffer.extend(got)
                self._changed.fire()
        self._stopped = True
        self._changed.fire()

    async def _drive(self, callback: Callback) -> None:
        async for message in self:
            try:
                outcome = callback(message)
                if inspect.isawaitable(outcome):
                    await outcome
            except Exception as exc:  # the client's fault, not the session's: redeliver, go on
                self.session.statistics.callback_errors += 1
                self.session.last_callback_error = exc
                if self.session._holds(message) and self.session._state is not _State.CLOSED:
                    await self.session.release([message])


class Session:
    """A client's session with a queue manager (the paper's Bind): open one with
    ``await qm.connect(client)``, end it with ``await session.unbind(rule)``."""

    def __init__(self, manager: _Manager, client: str, number: int, max_pending: int) -> None:
        self.manager = manager
        self.client = client
        self.number = number
        self.owner = f"s:{client}:{number}"
        """The consumer name of the session's leases in the store."""
        self.statistics = SessionStatistics()
        self.last_callback_error: Exception | None = None
        self._max_pending = max_pending
        self._state = _State.OPEN
        self._inbox: list[tuple[int, int, SendTicket]] = []
        """Heap of (-priority, arrival, ticket): highest priority first, FIFO within one."""
        self._in_service: list[SendTicket] = []
        self._arrivals = itertools.count()
        self._served = 0
        self._unyielded = 0
        self._inbox_changed = _Wake()
        self._held: dict[tuple[str, str, int], _Held] = {}
        self._settled = _Wake()
        self._subscriptions: list[Subscription] = []
        self._nursery: trio.Nursery | None = None
        self._finished = trio.Event()

    # ------------------------------------------------------------ life cycle

    @property
    def state(self) -> str:
        """"open", "unbinding" or "unbound"."""
        return self._state.value

    @property
    def pending(self) -> int:
        """Sends accepted and not yet processed."""
        return len(self._inbox) + len(self._in_service)

    @property
    def held(self) -> int:
        """Messages leased to the session and not yet acked or released."""
        return len(self._held)

    async def _run(self, *, task_status: trio.TaskStatus[ConnectionOK] = trio.TASK_STATUS_IGNORED) -> None:
        """The session's server (the paper's child process): connection OK first, then serve."""
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(self._serve)
                task_status.started(ConnectionOK(self.client, self.number, self.manager.name))
        finally:
            if self._state is not _State.CLOSED:  # the manager is closing: nothing is served any more
                self._state = _State.CLOSED
                self._fail_pending(record=False)
            self._finished.set()
            self.manager._session_ended(self)

    async def __aenter__(self) -> Session:
        return self

    async def __aexit__(self, kind: type[BaseException] | None, *rest: object) -> None:
        """Leaving the block unbinds: gently after a normal exit, urgently after an exception."""
        if self._state is _State.OPEN:
            await self.unbind(Unbind.LOWEST if kind is None else Unbind.HIGHEST)

    def _check_open(self, what: str) -> None:
        if self._state is not _State.OPEN:
            raise SessionClosed(f"session of client {self.client!r} is {self._state.value}: cannot {what}")

    # ------------------------------------------------------------ Send

    def send(self, target: str, body: bytes, priority: int = 0, *, ttl: float | None = None) -> SendTicket:
        """The paper's asynchronous Send: queue ``body`` for ``queue`` or ``queue@node``
        in this session's inbox and return at once; ``await ticket.wait()`` for the
        result. Raises ``WouldBlock`` when ``max_pending`` sends wait (``put`` waits)."""
        self._check_open("send")
        queue, node = split_target(target)
        remote = node is not None and node != self.manager.name
        if not remote and self.manager._store_of(queue) is None:
            raise UsageError(f"queue {queue!r} is not bound here; create it first")
        ticket = SendTicket(target, check_body(body), check_priority(priority),
                            check_ttl(ttl, MAX_FORWARD_TTL if remote else None))
        if self.pending >= self._max_pending:
            raise WouldBlock(f"session of client {self.client!r} has {self._max_pending} sends pending; "
                             "await session.put(...) waits for room")
        heapq.heappush(self._inbox, (-ticket.priority, next(self._arrivals), ticket))
        self._inbox_changed.fire()
        return ticket

    async def put(self, target: str, body: bytes, priority: int = 0, *, ttl: float | None = None) -> None:
        """Send and wait until committed (waits for room in the inbox first)."""
        while self.pending >= self._max_pending:
            self._check_open("send")
            await self._inbox_changed.wait()
        await self.send(target, body, priority, ttl=ttl).wait()

    async def _serve(self) -> None:
        while True:
            while not self._inbox:
                await self._inbox_changed.wait()
            batch = self._in_service = self._take_batch()
            error: SgcsError | None = None
            try:
                await self.manager.put_many(batch[0].target, [(t.body, t.priority) for t in batch], ttl=batch[0].ttl)
            except UsageError as exc:  # the queue was deleted since the send was accepted
                error = exc
            self._in_service = []
            for ticket in batch:
                ticket._finish(error)
            self._served += len(batch)
            if error is None:
                self.statistics.sent += len(batch)
            else:
                self.statistics.send_errors += len(batch)
            self._inbox_changed.fire()
            await trio.sleep(0)  # one batch, then the other sessions' workers: per-client fairness

    def _take_batch(self) -> list[SendTicket]:
        first = heapq.heappop(self._inbox)[2]
        batch = [first]
        while self._inbox and len(batch) < MAX_BATCH:
            following = self._inbox[0][2]
            if following.target != first.target or following.ttl != first.ttl:
                break
            batch.append(heapq.heappop(self._inbox)[2])
        return batch

    # ------------------------------------------------------------ Receive: polling

    async def get(self, target: str, *, timeout: float | None = None, lease: float = 30.0) -> Message:
        """Receive one message leased to this session (polling); ``TimeoutError`` if none came."""
        got = await self.get_many(target, 1, timeout=timeout, lease=lease)
        if not got:
            raise TimeoutError(f"no message from {target!r} within {timeout} s")
        return got[0]

    async def get_many(self, target: str, count: int, *, timeout: float | None = None,
                       lease: float = 30.0) -> list[Message]:
        """Receive up to ``count`` messages; waits up to ``timeout`` for the first (None: for ever)."""
        self._check_open("receive")
        _check_count_and_lease(count, lease)
        deadline = trio.current_time() + (timeout if timeout is not None else math.inf)
        got = await self._lease(target, count, lease, deadline, None)
        return [m for m in got if self._hand_out(m)]

    # ------------------------------------------------------------ Receive: push

    def messages(self, target: str, *, prefetch: int = 16, lease: float = 30.0) -> Subscription:
        """Push delivery as a trio async iterator; at most ``prefetch`` messages leased at once.

            async for message in session.messages("jobs", prefetch=16):
                work(message.body)
                await session.ack([message])
        """
        return self._subscribe(target, prefetch, lease)

    def subscribe(self, target: str, callback: Callback, *, prefetch: int = 16,
                  lease: float = 30.0) -> Subscription:
        """Push delivery by callback (the paper's call-back mechanism): ``callback(message)``
        (a function or a coroutine function) runs in the session for each message, one at
        a time; it acks or releases. One that raises has its message released."""
        if not callable(callback):
            raise UsageError(f"callback must be callable, got {callback!r}")
        subscription = self._subscribe(target, prefetch, lease)
        assert self._nursery is not None
        self._nursery.start_soon(subscription._drive, callback)
        return subscription

    def _subscribe(self, target: str, prefetch: int, lease: float) -> Subscription:
        self._check_open("subscribe")
        queue, node = split_target(target)
        if (node is None or node == self.manager.name) and self.manager._store_of(queue) is None:
            raise UsageError(f"queue {queue!r} is not bound here; create it first")
        if type(prefetch) is not int or not 1 <= prefetch <= wire.MAX_ITEMS:
            raise UsageError(f"prefetch must be an int from 1 to {wire.MAX_ITEMS}, got {prefetch!r}")
        _check_count_and_lease(1, lease)
        subscription = Subscription(self, target, prefetch, lease)
        self._subscriptions.append(subscription)
        assert self._nursery is not None
        self._nursery.start_soon(subscription._pump)
        return subscription

    async def _lease(self, target: str, count: int, lease: float, deadline: float,
                     subscription: Subscription | None) -> list[Message]:
        """Lease up to ``count`` messages to the session, waiting until ``deadline`` for
        one; each is recorded as held the moment it is leased."""
        queue, node = split_target(target)
        remote = node is not None and node != self.manager.name
        while True:
            if self._state is not _State.OPEN:
                raise SessionClosed(f"session of client {self.client!r} is {self._state.value}: cannot receive")
            if remote:
                wait = max(0.0, min(deadline - trio.current_time(), 1.0))  # see an unbind within a second
                got = await self.manager.get_many(target, count, timeout=wait, lease=lease)
                until = trio.current_time() + lease - REMOTE_LEASE_MARGIN
                if got and self._state is _State.CLOSED:  # the answer came as an urgent unbind ended us
                    self.manager._nursery.start_soon(self.manager.release, got)
                    raise SessionClosed(f"session of client {self.client!r} is unbound: cannot receive")
            else:
                store = self.manager._store_of(queue)
                if store is None:
                    raise UsageError(f"queue {queue!r} is not bound here")
                until = trio.current_time() + lease
                got = store.get(queue, self.owner, count, lease_until=until)
            if got:
                for message in got:
                    self._held[_key(message)] = _Held(message, subscription, until)
                if subscription is not None:
                    subscription.held += len(got)
                self.statistics.peak_held = max(self.statistics.peak_held, len(self._held))
                return got
            if trio.current_time() >= deadline:
                return []
            if not remote:
                await self.manager._wait_changed(min(deadline, trio.current_time() + 1.0))

    def _hand_out(self, message: Message) -> bool:
        """Mark a leased message handed to the application; False if its lease ran out
        while it waited in a buffer (it is back in its queue, maybe with another
        consumer: not ours to give)."""
        entry = self._held.get(_key(message))
        if entry is None:
            return False
        if entry.subscription is not None and not self._still_leased(entry, entry.subscription.lease):
            self._forget(entry)
            self.statistics.lost_leases += 1
            return False
        entry.handed = True
        self.statistics.handed_out += 1
        return True

    def _still_leased(self, entry: _Held, lease: float) -> bool:
        """Is a buffered message still leased to the session? Once half its lease is gone,
        a local one is renewed for a whole lease from now (the consumer's time starts at
        hand-out); another node's cannot be renewed from here."""
        now = trio.current_time()
        if now < entry.lease_until - lease / 2:
            return True
        if entry.message.node not in ("", self.manager.name):
            return now < entry.lease_until
        store = self.manager._store_of(entry.message.queue)
        if store is None or not store.renew(entry.message.tag, self.owner, now + lease):
            return False
        entry.lease_until = now + lease
        return True

    # ------------------------------------------------------------ acknowledgement

    async def ack(self, messages: Sequence[Message]) -> None:
        """Acknowledge messages this session received: they are deleted where they are held."""
        await self._settle(messages, release=False)

    async def release(self, messages: Sequence[Message]) -> None:
        """Give messages back unprocessed: ready again at once (a redelivery)."""
        await self._settle(messages, release=True)

    def _holds(self, message: Message) -> bool:
        return _key(message) in self._held

    async def _settle(self, messages: Sequence[Message], *, release: bool) -> None:
        if self._state is _State.CLOSED:
            raise SessionClosed(f"session of client {self.client!r} is unbound: its messages went back to "
                                "their queues and cannot be acked or released here")
        entries: dict[tuple[str, str, int], _Held] = {}
        for message in messages:
            entry = self._held.get(_key(message))
            if entry is None or not entry.handed:
                raise UsageError(f"message {message.tag} of {message.queue!r} is not held by the session of "
                                 f"client {self.client!r} (settled already, or received elsewhere)")
            entries[_key(message)] = entry
        for entry in entries.values():
            self._forget(entry)
        if release:
            self.statistics.released += len(entries)
            await self._give_back([e.message for e in entries.values()], unseen=False)
        else:
            self.statistics.acked += len(entries)
            await self._ack_where_held([e.message for e in entries.values()])
        self._unyielded += 1
        if self._unyielded >= YIELD_EVERY:  # a consumer acking in a loop lets the others run
            self._unyielded = 0
            await trio.lowlevel.checkpoint()

    def _forget(self, entry: _Held) -> None:
        del self._held[_key(entry.message)]
        if entry.subscription is not None:
            entry.subscription.held -= 1
            entry.subscription._poke()
        if not self._held:
            self._settled.fire()  # a gentle unbind waits for this

    async def _ack_where_held(self, messages: list[Message]) -> None:
        local, remote = self._split(messages)
        for store, queue, tags in local:
            store.ack(tags, self.owner)
        if remote:
            await self.manager.ack(remote)

    async def _give_back(self, messages: list[Message], *, unseen: bool) -> int:
        """Put messages back in their queues (unseen: with their delivery count restored);
        returns how many local ones were still leased to the session."""
        local, remote = self._split(messages)
        done = 0
        for store, queue, tags in local:
            done += store.return_unseen(tags, self.owner) if unseen else store.release(tags, self.owner)
            self.manager._on_new(queue)
        if remote:
            with trio.move_on_after(RELEASE_WAIT):  # else the remote lease expires: not lost either
                await self.manager.release(remote)
        return done + len(remote)

    def _split(self, messages: list[Message]) -> tuple[list[tuple[QueueStore, str, list[int]]], list[Message]]:
        """Local messages grouped by (store, queue), and the other nodes' messages."""
        groups: dict[tuple[int, str], tuple[QueueStore, str, list[int]]] = {}
        remote: list[Message] = []
        for message in messages:
            if message.node not in ("", self.manager.name):
                remote.append(message)
                continue
            store = self.manager._store_of(message.queue)
            if store is not None:  # else the queue was deleted: its messages are dead or gone
                groups.setdefault((id(store), message.queue), (store, message.queue, []))[2].append(message.tag)
        return list(groups.values()), remote

    async def _return(self, entries: list[_Held]) -> None:
        """Give back buffered (unseen) messages of one subscription."""
        for entry in entries:
            self._forget(entry)
        await self._give_back([e.message for e in entries], unseen=True)

    # ------------------------------------------------------------ Unbind

    async def unbind(self, rule: Unbind = Unbind.LOWEST, *, timeout: float | None = 30.0) -> Unbound:
        """The paper's Unbind: end the session by one of the two rules (see the module's
        docstring). ``timeout``: seconds ``LOWEST`` waits for the inbox to be processed
        and every held message to be acked or released; then the rest is handled as
        ``HIGHEST`` would (None: wait for ever)."""
        if not isinstance(rule, Unbind):
            raise UsageError(f"rule must be Unbind.HIGHEST or Unbind.LOWEST, got {rule!r}")
        if timeout is not None and (not isinstance(timeout, (int, float)) or not timeout >= 0):
            raise UsageError(f"timeout must be seconds >= 0 or None, got {timeout!r}")
        self._check_open("unbind")
        if rule is Unbind.HIGHEST:
            return await self._end(rule, processed=0)
        self._state = _State.DRAINING
        served_before = self._served
        for subscription in self._subscriptions:
            subscription._scope.cancel()  # lease no more; the buffer is still handed out
        self.manager._wake_all()  # receives waiting in other tasks see the unbind
        with trio.move_on_after(math.inf if timeout is None else timeout):
            while self.pending:
                await self._inbox_changed.wait()
            while self._held:
                await self._settled.wait()
        return await self._end(rule, processed=self._served - served_before)

    async def _end(self, rule: Unbind, *, processed: int) -> Unbound:
        self._state = _State.CLOSED
        dead = self._fail_pending(record=True)
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()  # the worker, the pumps and the callbacks stop now
        entries = list(self._held.values())
        self._held.clear()
        for subscription in self._subscriptions:
            subscription._buffer.clear()
            subscription.held = 0
            subscription._stop()
        self._settled.fire()
        self._inbox_changed.fire()
        # the session's own task (a callback unbinding) cannot wait for its own end
        inside = trio.lowlevel.current_task().parent_nursery is self._nursery
        with trio.CancelScope(shield=True):  # an unbind on the way out of a cancelled block still gives back
            if not inside:
                await self._finished.wait()
            unseen = await self._give_back([e.message for e in entries if not e.handed], unseen=True)
            released = await self._give_back([e.message for e in entries if e.handed], unseen=False)
            for store in (self.manager.store, self.manager.memory):
                released += store.release_consumer(self.owner)  # none, unless the bookkeeping missed one
        self.statistics.released += released
        self.manager._wake_all()
        return Unbound(self.client, rule, processed, dead, unseen, released)

    def _fail_pending(self, *, record: bool) -> int:
        """Every send not processed is finished with ``SessionClosed``; ``record`` (an
        unbind, not the manager closing): and kept as a dead request for the monitor.
        Returns how many."""
        why = "unbound" if record else "its queue manager closed"
        left = self._in_service + [ticket for _, _, ticket in sorted(self._inbox)]
        self._inbox.clear()
        self._in_service = []
        for ticket in left:
            ticket._finish(SessionClosed(f"session of client {self.client!r} ended ({why}) before this send to "
                                         f"{ticket.target!r} was processed: it was not sent"))
            if record:
                self.manager._dead_request(DeadRequest(self.client, ticket.target, ticket.priority, len(ticket.body)))
        return len(left)


def _check_count_and_lease(count: object, lease: object) -> None:
    if type(count) is not int or not 1 <= count <= wire.MAX_ITEMS:
        raise UsageError(f"count must be an int from 1 to {wire.MAX_ITEMS}, got {count!r}")
    if not isinstance(lease, (int, float)) or isinstance(lease, bool) or not lease > 0:
        raise UsageError(f"lease must be positive seconds, got {lease!r}")
