"""Flows on real sockets: the trio shell around :class:`FlowEngine`.

Theory of operation (content-based delivery, state transfer for joiners and
durable subscriptions; docs/flows.md): one ``FlowService`` per
node joins the sgcs group of each root group of the graph, with the order the
graph asks for (``FlowGraph.order_for``: FIFO with per-key owners where every
state downstream keys the events alike, TOTAL where a state needs more, FIFO
where no state is downstream). In a per-key group a publication waits for the
engine's ``Settled`` (its events may travel through their owners), and a
keyed multicast that sgcs rolls back or does not deliver is handed back to
the engine (``on_lost``) to be routed again. A receive task per group hands each batch of deliveries and
views to the engine, stores the durable rows the batch changed (SQLite,
``store.py``), then hands the engine's outputs on: events to the
subscriptions' queues, messages to a transmit task. Sending goes through that
task, never from the receive task itself: a receive task waiting on the flow
window would stop draining the group's queue, which is what the window waits
for. A tick task asks again for overdue state transfers.

Usage::

    async with sgcs.open_node(config) as node, open_flows(node, graph, store="me.db") as flows:
        prices = await flows.subscribe("prices", 'issue = "IBM"', durable=True)
        await prices.ready()                 # the state at the cut, or the catch-up
        await flows.publish("NYSE", [("IBM", 120.0, 5000.0)])   # returns once delivered here
        prices.rows()                        # {("IBM",): (120.0, 120.0)}

A history subscription queues its events until they are read. With
``conflate="issue"`` a reader that falls more than ``behind`` events behind
gets the latest event per issue instead of all of them (``conflate.py``), so
a slow reader's queue stays as small as the number of issues.
"""

from __future__ import annotations

import os
from contextlib import AsyncExitStack, asynccontextmanager
from typing import AsyncIterator, Iterable, Sequence

import trio

import sgcs
from sgcs.errors import SgcsError, UsageError

from ..tasks import background
from .collapse import Key, Row
from .conflate import DeliveryQueue, key_of
from .engine import Deliver, FlowEngine, FlowStatistics, LocalSubscription, Multicast, Output, Persist, Phase, Ready, \
    Settled, Unicast
from .graph import FlowGraph
from .store import FlowStore
from .syntax import Value

OUTGOING_MAX = 10_000
"""Messages waiting for the transmit task; publishers wait beyond (backpressure)."""
QUEUE_MAX = 1_000_000
"""Events a history subscription without ``conflate`` holds unread; beyond, the oldest are dropped and counted."""
BEHIND = 10_000
"""Unread events beyond which a subscription with ``conflate`` conflates."""
TICK = 0.2
"""Seconds between checks for overdue state transfers."""


class FlowSubscription:
    """One subscription; get it from :meth:`FlowService.subscribe`."""

    def __init__(self, service: "FlowService", sub: LocalSubscription, queue: DeliveryQueue | None = None) -> None:
        self._service, self._sub = service, sub
        self._events = queue if queue is not None else DeliveryQueue(limit=QUEUE_MAX)
        self._arrived = trio.Event()
        self._ready = trio.Event()
        if sub.phase is Phase.LIVE:
            self._ready.set()

    @property
    def space(self) -> str:
        return self._sub.compiled.space

    @property
    def phase(self) -> Phase:
        return self._sub.phase

    @property
    def counters(self) -> dict[str, int]:
        sub = self._sub
        queue = self._events
        return {"delivered": sub.delivered, "catchup_events": sub.catchup_events, "catchup_bytes": sub.catchup_bytes,
                "transfer_bytes": sub.transfer_bytes, "dropped": queue.dropped, "conflated": queue.conflated,
                "unread": len(queue), "unread_high_water": queue.high_water}

    @property
    def dropped(self) -> int:
        """Events dropped unread because the queue was full (no ``conflate``)."""
        return self._events.dropped

    async def ready(self) -> None:
        """Return once a state subscription is LIVE (at once for a history)."""
        await self._ready.wait()

    def rows(self) -> dict[Key, Row]:
        """A state subscription's rows now."""
        return self._service.engine.rows(self._sub.sub_id)

    async def receive(self) -> tuple[Value, ...]:
        """The next event of a history subscription."""
        while True:
            event = self._events.pop()
            if event is not None:
                return event
            self._arrived = trio.Event()
            await self._arrived.wait()

    def receive_nowait(self) -> list[tuple[Value, ...]]:
        return self._events.drain()

    def _push(self, event: tuple[Value, ...]) -> None:
        self._events.push(event)
        self._arrived.set()


class NotPublished(SgcsError):
    """Published events that sgcs will not deliver at this member (the reason
    is in the message); other members may or may not have delivered them."""


class _OwnMessage:
    """A message ``publish`` waits for: delivered here, or its failure."""

    def __init__(self) -> None:
        self.done = trio.Event()
        self.failure: str | None = None

    def end(self, failure: str | None = None) -> None:
        if not self.done.is_set():
            self.failure = failure
            self.done.set()


class FlowService:
    """A member's flows; get one from :func:`open_flows`."""

    def __init__(self, node: sgcs.NodeHandle, engine: FlowEngine, store: FlowStore | None) -> None:
        self.node, self.engine, self._store = node, engine, store
        self._groups: dict[str, sgcs.GroupHandle] = {}
        self._subs: dict[int, FlowSubscription] = {}
        self._outgoing_send, self._outgoing = trio.open_memory_channel[Multicast | Unicast](OUTGOING_MAX)
        self._own: dict[tuple[str, int], _OwnMessage] = {}
        """Published messages awaiting their outcome here, by (group, seq)."""
        self._tickets: dict[int, tuple[str, _OwnMessage]] = {}
        """Per-key publications awaiting ``Settled``, by ticket: (group, waiter)."""
        self._keyed: dict[tuple[str, int], tuple[int, int, int]] = {}
        """Our keyed multicasts awaiting their outcome, by (group, seq): their (origin, ticket, part)."""
        self.unroutable = 0

    # --- the API ------------------------------------------------------------------------------

    async def publish(self, root: str, events: Iterable[Sequence[object]], *, wait: bool = True) -> None:
        """Publish events into root space ``root``.

        With ``wait`` (the default) it returns once this member has delivered
        them, so its own subscriptions already show them, and raises
        :class:`NotPublished` if sgcs reports they will not be delivered here
        (a view change left them out; see ``sgcs.NotDelivered``). Without, it
        returns once they are queued for sending."""
        ticket, outputs = self.engine.publish_ticket(root, list(events))
        if ticket is not None:
            await self._publish_keyed(root, ticket, outputs, wait)
            return
        if not wait:
            await self._run(outputs)
            return
        waits: list[_OwnMessage] = []
        for output in outputs:
            assert isinstance(output, Multicast)
            sent = await self._groups[output.group].send(output.payload)
            waits.append(self._own.setdefault((output.group, sent.seq), _OwnMessage()))  # no checkpoint since send
        for own in waits:
            await own.done.wait()
            if own.failure is not None:
                raise NotPublished(f"flows: events published into {root!r} were not delivered ({own.failure}); "
                                   "publish them again if they still matter")

    async def _publish_keyed(self, root: str, ticket: int, outputs: list[Output], wait: bool) -> None:
        """A per-key publication: its multicasts and forwards go through the
        transmit task, in order with the owner's other multicasts; it is done
        when the engine says every event was applied here."""
        own = _OwnMessage()
        group = self.engine.groups[self.engine.group_of_root(root)].name
        if wait:
            self._tickets[ticket] = (group, own)
        await self._run(outputs)
        if not wait:
            return
        await own.done.wait()
        if own.failure is not None:
            raise NotPublished(f"flows: events published into {root!r} were not all delivered ({own.failure}); "
                               "publish them again if they still matter")

    async def subscribe(self, space: str, predicate: str = "true", *, durable: bool = False,
                        conflate: str | Sequence[str] | None = None, behind: int = BEHIND) -> FlowSubscription:
        """Subscribe to any space. A state subscription starts its transfer (or,
        durable and known to this member's store, its catch-up); await
        ``ready()`` before reading its rows.

        ``conflate``: the key field(s) of a history whose events are each their
        key's latest value; once more than ``behind`` events are unread, the
        reader gets the latest event per key instead of every one."""
        s0 = self._store.load(space, predicate) if durable and self._store is not None else None
        if durable and self._store is None:
            raise UsageError("flows: a durable subscription needs open_flows(..., store=PATH)")
        queue = None if conflate is None else DeliveryQueue(key_of(self.engine.graph, space, conflate), behind=behind)
        sub_id, out = self.engine.subscribe(space, predicate, durable=durable, s0=s0, now=trio.current_time())
        handle = FlowSubscription(self, self.engine.subs[sub_id], queue)
        self._subs[sub_id] = handle
        await self._run(out)
        return handle

    def kept(self, space: str) -> FlowSubscription:
        """A keeper's own full subscription to state ``space``."""
        for sub_id, sub in self.engine.subs.items():
            if sub.keeper and sub.compiled.space == space:
                return self._subs[sub_id]
        raise UsageError(f"flows: this member keeps no state {space!r} (open_flows(..., keeper=True))")

    def view(self, group: str) -> tuple[int, ...]:
        return self._groups[group].view.members

    def statistics(self) -> FlowStatistics:
        return self.engine.statistics()

    # --- the engine's outputs -------------------------------------------------------------------

    async def _run(self, outputs: list[Output]) -> None:
        persist: set[int] = set()
        for output in outputs:
            if isinstance(output, (Multicast, Unicast)):
                await self._outgoing_send.send(output)
            elif isinstance(output, Deliver):
                self._subs[output.sub_id]._push(output.event)
            elif isinstance(output, Ready):
                handle = self._subs.get(output.sub_id)
                if handle is not None:
                    handle._ready.set()
            elif isinstance(output, Persist):
                persist.add(output.sub_id)
            elif isinstance(output, Settled):
                waiting = self._tickets.pop(output.ticket, None)
                if waiting is not None:
                    waiting[1].end()
        for sub_id in sorted(persist):
            self._persist(sub_id)

    def _persist(self, sub_id: int) -> None:
        if self._store is None:
            return
        sub = self.engine.subs[sub_id]
        self._store.save(sub.compiled.space, sub.compiled.text, self.engine.take_dirty(sub_id))

    async def _receive_loop(self, name: str, group: sgcs.GroupHandle) -> None:
        while True:
            try:
                events = await group.receive_many()
            except trio.EndOfChannel:
                for (group_name, _), waiting in list(self._own.items()):
                    if group_name == name:
                        waiting.end("the group was closed")
                for ticket, (group_name, waiting) in list(self._tickets.items()):
                    if group_name == name:
                        waiting.end("the group was closed")
                return
            out: list[Output] = []
            ended: list[tuple[tuple[str, int], str | None]] = []
            now = trio.current_time()
            for event in events:
                if isinstance(event, sgcs.Delivery):
                    out += self.engine.on_delivery(name, event.sender, event.payload, now, event.seq)
                    if event.sender == self.node.id and event.dest is None:
                        ended.append(((name, event.seq), None))
                        self._keyed.pop((name, event.seq), None)
                elif isinstance(event, sgcs.ViewChange):
                    out += self.engine.on_view(name, event.members)
                elif isinstance(event, sgcs.NotDelivered) and event.to is None:
                    ended.append(((name, event.message.seq), event.reason))
                    out += self._lost(name, event.message.seq)
                elif isinstance(event, sgcs.Rollback):
                    mine = [seq for sender, seq in event.messages if sender == self.node.id]
                    ended += [((name, seq), "rolled back") for seq in mine]
                    for seq in mine:
                        out += self._lost(name, seq)
            await self._run(out)
            for key, failure in ended:  # after the engine applied them: the caller's reads see its events
                own = self._own.pop(key, None)
                if own is not None:
                    own.end(failure)

    def _lost(self, group: str, seq: int) -> list[Output]:
        """A keyed multicast of ours that sgcs will not deliver: back to the engine."""
        tag = self._keyed.pop((group, seq), None)
        return self.engine.on_lost(group, tag) if tag is not None else []

    async def _transmit_loop(self) -> None:
        async for message in self._outgoing:
            group = self._groups[message.group]
            try:
                if isinstance(message, Multicast):
                    sent = await group.send(message.payload)
                    if message.tag is not None:  # no checkpoint since send: its outcome comes after this
                        self._keyed[(message.group, sent.seq)] = message.tag
                else:
                    await group.send(message.payload, to=message.member)
            except UsageError:
                self.unroutable += 1  # the member left meanwhile; its request will be asked again

    async def _tick_loop(self) -> None:
        while True:
            await trio.sleep(TICK)
            await self._run(self.engine.tick(trio.current_time()))


@asynccontextmanager
async def open_flows(node: sgcs.NodeHandle, graph: FlowGraph, *, name: str | None = None,
                     store: str | os.PathLike[str] | None = None, keeper: bool = False,
                     retry_after: float = 2.0, payload_max: int = 1_200) -> AsyncIterator[FlowService]:
    """Run this node's flows over ``graph`` for the block.

    ``name``: the member's durable name (default: the node's name).
    ``store``: the SQLite file of durable subscriptions (and of a keeper's states).
    ``keeper``: keep every state of the graph in full and answer state
    transfers and catch-ups (at least one member should).
    ``payload_max``: bytes of events per multicast at most (docs/flows.md, Limits)."""
    db = FlowStore(store) if store is not None else None
    engine = FlowEngine(graph, name or node.name, node.id, keeper=keeper, retry_after=retry_after,
                        payload_max=payload_max)
    service = FlowService(node, engine, db)
    try:
        async with AsyncExitStack() as stack:
            for group_name in sorted(engine.groups):
                handle = await stack.enter_async_context(node.join(group_name, order=engine.order_of(group_name)))
                service._groups[group_name] = handle
            nursery = await stack.enter_async_context(background())
            for group_name, handle in service._groups.items():
                nursery.start_soon(service._receive_loop, group_name, handle)
            nursery.start_soon(service._transmit_loop)
            nursery.start_soon(service._tick_loop)
            if keeper:
                stored = {n: db.load(n, "true") or {} for n in graph.spaces} if db is not None else {}
                out = engine.subscribe_keeper(trio.current_time(), {n: r for n, r in stored.items() if r})
                for sub_id in [s for s in engine.subs if engine.subs[s].keeper]:
                    service._subs[sub_id] = FlowSubscription(service, engine.subs[sub_id])
                await service._run(out)
            yield service
            nursery.cancel_scope.cancel()
    finally:
        if db is not None:
            db.close()
