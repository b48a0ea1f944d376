"""One group's protocol stack on one node, and its framing into datagrams.

Theory of operation
-------------------
A ``GroupStack`` holds what a node keeps per group: its view and the
changes that move it (``membership.change.ViewChanges``), the reliable
multicast stream (``transport.reliable``), the unicast streams
(``transport.unicast``), the order (``ordering.total``) and the outbox of
multicast records waiting to share a datagram (batching, at most
``flush_delay``). It turns transport outputs into ``(type, destination,
flags, body)`` frames; the node seals and addresses them. Keeping this
per-group plumbing here leaves ``node.py`` with the wire and the dispatch.

Views and streams move together (virtual synchrony). ``ViewChanges``
decides every step of a view change and when it happens; this stack is its
data plane (``membership.change.DataPlane``) and carries the steps out on the
streams and the order: at a freeze it stops stability past the snapshot, at
a commit it fetches each stream up to the cut and delivers that in the old
view (ordered groups drain their order without waiting for promises), at the
install it starts the new view's streams and order after the cut, and it
reports what happened as typed events, in order. No record past a snapshot
becomes stable during a change, since a newcomer may still need it.

Caps (docs/limits.md): the view holds at most ``max_members`` members
(``agreement``); members refused for another order are remembered up to
``change.MAX_REJECTED``, oldest forgotten first; ``incarnations``,
``joined_at`` and ``delivered_high`` only keep members of the view (and a few
recent strangers); messages held for a view change come out of the stream,
whose caps bound them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
import random
from typing import Any, Callable, Iterable

from .config import Order
from .errors import UsageError
from .membership.agreement import CtlSend, AgreedView, ViewAgreement
from .membership.change import ViewChanges
from .roster import roster_of
from .membership.synchrony import Synchrony
from .ordering.total import PROMISE_AHEAD, OrderedMessage, OrderingLayer
from .transport.framing import pack
from .records import Aggregate, Message, Out, OutDigest, OutNack, OutNull, OutRecords, OutStable, Record
from .transport.params import Params
from .transport.reliable import ReliableStream, StreamStatistics
from .transport.stability import ACK_MATRIX_MAX
from .transport.unicast import UnicastAck, UnicastSend, UnicastStreams
from .wire import (
    ORDER_CODES,
    AggregateFields,
    Flag,
    MsgType,
    encode_digest,
    encode_entries,
    encode_null,
    encode_nack,
    encode_records,
    encode_stable,
    encode_unicast,
    group_tag,
)

Frame = tuple[MsgType, "int | None", Flag, bytes]


# The group's one output channel to the node besides its frames (``take_events``):
# deliveries and what view changes did, in the order the application must see them.


@dataclass(frozen=True, slots=True)
class Delivered:
    """Deliver ``messages``, in this order, in the view ``view_id`` (during a
    change, the old one). ``unicast``: addressed to us alone."""

    messages: tuple[Message, ...]
    view_id: str
    unicast: bool = False


@dataclass(frozen=True, slots=True)
class OptimisticBegan:
    """A change began: sends go out under this proposed view."""

    view: AgreedView


@dataclass(frozen=True, slots=True)
class Installed:
    old: AgreedView
    new: AgreedView
    leavers: frozenset[int]
    """Members that left gracefully (the rest of old - new failed)."""
    rejoined: frozenset[int] = frozenset()
    """Members of both views that did not move from ``old`` with us (they
    restarted, or came back from another component): they failed out of
    ``old`` and joined ``new``; a ``Transitional`` names the members that did."""


@dataclass(frozen=True, slots=True)
class RolledBack:
    """An optimistic message no member delivers: its proposal lost."""

    message: Message


@dataclass(frozen=True, slots=True)
class Undelivered:
    """Our own message ``seq`` that will not be delivered (the node reports
    ``NotDelivered``): a multicast we will not deliver (``reason`` is one of
    ``synchrony``'s), or a unicast to ``dest`` that left (or restarted)
    before acknowledging it."""

    seq: int
    reason: str
    dest: int | None = None


DESTINATION_LEFT = "destination_left"


@dataclass(frozen=True, slots=True)
class Transitional:
    """The deliveries that follow, up to the next ``Installed``, are made in
    ``view`` among ``members`` only (extended virtual synchrony's
    transitional configuration)."""

    view: AgreedView
    members: tuple[int, ...]


GroupEvent = Delivered | OptimisticBegan | Installed | RolledBack | Undelivered | Transitional



class GroupStack:
    """View, reliable streams and outbox of one group on one member."""

    def __init__(self, name: str, order: Order, me: int, members: Iterable[int], params: Params,
                 rng: random.Random, now: float, from_start: bool = True, *, first_seq: int = 1,
                 incarnation: int = 0) -> None:
        self.name = name
        self.tag = group_tag(name)
        self.order = order
        self.me = me
        self.params = params
        initial = roster_of(members).with_member(me)
        if len(initial) > params.max_members:
            raise UsageError(f"group {name!r}: {len(initial)} members given, Config.max_members is "
                             f"{params.max_members}; raise it or join with fewer")
        self.events: list[GroupEvent] = []
        """Deliveries and view events, in the order the node must report them."""
        self.delivered_high: dict[int, int] = {}
        """Per sender, the last multicast record we delivered, in any view.
        A flush reports it so that no commit rolls back what we delivered,
        even in a view long left (randomized total-order machine, seed
        567377617: a coordinator that had delivered a message in a view it
        then left alone committed a later view that rolled it back). Kept
        for members of our view and a few others (``ViewChanges._note_incarnation``)."""
        self.changes = ViewChanges(self, me, initial.members, params, now, self.tag, ORDER_CODES.index(order),
                                   ordered=order is not Order.FIFO, safe=order is Order.SAFE,
                                   incarnation=incarnation)
        """The view and every change of it: the one owner of their state and steps."""
        self._clock = 0
        self._sent_stamp = 0
        """The timestamp of our last multicast: the next carries ``PROMISE_AHEAD`` more at least."""
        self.ordering = self._new_ordering({})
        self.own_last = 0
        self.awaiting: set[int] = set()
        """Our own multicasts (first record) with no outcome yet: neither
        delivered here, nor rolled back, nor reported not delivered."""
        self._request_at: float | None = None
        self._promise_requested = False
        self._order_due = False
        """Own messages went into the order since it was last asked what is deliverable."""
        late = () if from_start else tuple(m for m in self.view.members if m != me)
        # an ordered group's messages list every ACK gathered before them (their
        # causal past), and its idle members promise by multicasting their ACKs (nulls)
        self.stream = ReliableStream(me, self.view.members, params, rng, now, first_seq,
                                     ordered=order is not Order.FIFO)
        if late:
            self.stream.set_members(self.view.members, late=late)
        self._choose_promises()
        self.unicast = UnicastStreams(me, params, incarnation)
        self.outbox: list[Record] = []
        self._outbox_bytes = 0
        self.flush_at: float | None = None
        self.last_send = -math.inf

    @property
    def view(self) -> AgreedView:
        return self.changes.agreement.view

    @property
    def agreement(self) -> ViewAgreement:
        return self.changes.agreement

    @property
    def sync(self) -> Synchrony:
        return self.changes.sync

    def clock(self) -> int:
        """Our Lamport clock (ordered groups): the largest timestamp we sent
        or took into our order, in any view. What we send next carries more."""
        return self._clock if self.ordering is None else max(self._clock, self.ordering.clock)

    def _choose_promises(self) -> None:
        """Total and safe order promise by nulls in small views and by the
        stability all-reduce in large ones (``Config.promises``): chosen per view."""
        gossip = self._promises_by_gossip()
        self.stream.promise_gossip = gossip
        self.stream.promise_nulls = self.order is not Order.FIFO and not gossip
        # a new view's order starts afresh: nothing we sent before promises anything in it
        self.stream.promise_covers = 0 if self.order is Order.TOTAL else -1
        if gossip and self.ordering is not None:
            self.ordering.set_floor(0)

    def _promises_by_gossip(self) -> bool:
        mode = self.params.promises
        return self.order in (Order.TOTAL, Order.SAFE) and (
            mode == "gossip" or mode == "auto" and len(self.view.members) > ACK_MATRIX_MAX)

    def _advance_floor(self) -> None:
        """Promises by gossip: the order delivers up to the all-reduce's floor."""
        ordering = self.ordering
        if ordering is not None and ordering.floor is not None:
            floor = self.stream.promise_floor()
            if floor > ordering.floor:
                ordering.set_floor(floor)
                self._release(self._deliverable())

    def _new_ordering(self, starts: dict[int, int]) -> OrderingLayer | None:
        if self.order is Order.FIFO:
            return None
        ordering = OrderingLayer(self.me, self.agreement.view.members, self.order, self._promises_by_gossip())
        for member, seq in starts.items():
            ordering.start_at(member, seq)
        return ordering

    # ------------------------------------------------------------------ the node's view of the group

    def window(self) -> int:
        """Unstable records held here (the flow-control window)."""
        return self.stream.window()

    def waiting(self) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
        """(sender, seq) of messages received and not yet delivered: held for a
        view change, and waiting for their order."""
        ordered = [] if self.ordering is None else self.ordering.waiting_ids()
        return [(m.sender, m.seq) for m in self.sync.held], ordered

    def take_events(self) -> list[GroupEvent]:
        """What the node must report, in order; the group forgets it."""
        events, self.events = self.events, []
        return events

    def stream_statistics(self) -> StreamStatistics:
        return self.stream.statistics()

    def unicast_retransmissions(self) -> int:
        return self.unicast.retransmissions

    @property
    def fate_unknown(self) -> int:
        """Own multicasts with no outcome yet (in flight, or waiting for their
        order or a view change); 0 whenever the group is at rest."""
        return len(self.awaiting)

    # ------------------------------------------------------------------ the data plane of a view change

    # ``membership.change.ViewChanges`` decides every step of a view change;
    # these carry its decisions out on the streams, the order and the events.

    def own_last_record(self) -> int:
        return self.stream.contig_of(self.me)

    def received_vector(self) -> dict[int, int]:
        return dict(self.stream.received_vector())

    def cap_stability(self, limits: dict[int, int] | None) -> None:
        self.stream.stability_cap = limits

    def began(self, optimistic: AgreedView) -> None:
        self.events.append(OptimisticBegan(optimistic))

    def fetch_cut(self, limits: dict[int, int], holders: tuple[int, ...], foreign: frozenset[int],
                  now: float) -> None:
        for sender, limit in limits.items():
            self.stream.expect(sender, limit, now, holders=holders)
        self.stream.stability_cap = dict(limits)
        if self.ordering is not None:
            for sender in sorted(foreign):
                limit = limits[sender]
                self.ordering.truncate_at_first(sender, lambda m: m.last > limit)

    def holds(self, limits: dict[int, int], senders: Iterable[int]) -> bool:
        return all(self.stream.contig_of(s) >= limits.get(s, 0) for s in senders)

    def order_and_deliver(self, messages: list[Message]) -> None:
        self._release(self._order(messages))

    def deliver_ordered(self) -> None:
        self._release(self._deliverable())

    def deliver(self, messages: list[Message]) -> None:
        self._release(messages)

    def take_own_ordered(self) -> tuple[list[Message], int]:
        if self.ordering is None:
            return [], 0
        own = [_message(m) for m in self.ordering.take_stream(self.me)]
        return own, len(self.ordering.waiting_ids())

    def drain_order(self) -> tuple[list[Message], int]:
        if self.ordering is None:
            return [], 0
        delivered, discarded = self.ordering.drain()
        return [_message(m) for m in delivered], len(discarded)

    def transitional(self, view: AgreedView, members: tuple[int, ...]) -> None:
        self.events.append(Transitional(view, members))

    def restart_streams(self, members: tuple[int, ...], starts: dict[int, int]) -> None:
        self.stream.stability_cap = None
        self.stream.set_members(members, starts=starts)

    def forget_member(self, member: int) -> None:
        self._forget_unicasts(member)
        # its stream ended with this view: a flush that still reported its
        # last delivery would start its next membership's stream there, after
        # the records it numbers afresh on rejoining
        self.delivered_high.pop(member, None)

    def forget_unicasts(self, member: int) -> None:
        self._forget_unicasts(member)

    def restart_order(self, starts: dict[int, int]) -> None:
        self._clock = self.clock()  # a Lamport clock never goes back, whatever the view
        self.ordering = self._new_ordering(starts)
        self._choose_promises()

    def installed(self, old: AgreedView, new: AgreedView, leavers: frozenset[int], rejoined: frozenset[int]) -> None:
        self.events.append(Installed(old, new, leavers, rejoined))

    def report(self, rolled_back: list[Message]) -> None:
        self._report(rolled_back)

    # ------------------------------------------------------------------ sending

    def send(self, payload: bytes, now: float) -> tuple[int, list[Out], AgreedView | None]:
        """Number and buffer one multicast; returns its seq, the transport's
        outputs and the optimistic view it is sent under (None: our view)."""
        optimistic = self.changes.optimistic_view()
        clock = 0
        if self.ordering is not None and self.order is not Order.CAUSAL:
            clock = self._clock = self._sent_stamp = max(self.clock() + 1, self._sent_stamp + PROMISE_AHEAD)
            if self.stream.promise_covers >= 0 and optimistic is None:  # an optimistic view's message is in its next order
                self.stream.promise_covers = clock + PROMISE_AHEAD - 1
        seq, outputs = self.stream.send(payload, now, None if optimistic is None else optimistic.epoch, clock)
        self.awaiting.add(seq)
        self.last_send = now
        return seq, outputs, optimistic

    def unicast_blocked(self, member: int) -> bool:
        return self.unicast.blocked(member)

    def send_unicast(self, member: int, payload: bytes, now: float) -> tuple[int, UnicastSend]:
        return self.unicast.send(member, payload, now)

    def ready_at(self, now: float) -> float | None:
        if self.sync.changing and not self.params.optimistic:
            return None  # pessimistic mode: sends wait for the new view
        delay = self.stream.send_delay()
        return None if delay is None else max(now, self.last_send + delay)

    def queue(self, outputs: list[Out], now: float) -> None:
        """Multicast records wait in the outbox; nothing else comes from a send."""
        for output in outputs:
            assert isinstance(output, OutRecords) and output.dst is None
            self.outbox.extend(output.records)
            self._outbox_bytes += sum(len(r.payload) for r in output.records)
        if self.flush_at is None:
            self.flush_at = now + self.params.flush_delay

    def outbox_full(self) -> bool:
        return self._outbox_bytes >= self.params.bundle_size

    def take_outbox(self, now: float) -> list[Out]:
        records, self.outbox, self._outbox_bytes, self.flush_at = self.outbox, [], 0, None
        if self._order_due and self.ordering is not None:
            ordered = self._deliverable()
            self._watch_blocker(now)  # our message may wait on a promise that was lost
            self._release(ordered)
        return [OutRecords(None, tuple(records), MsgType.DATA)] if records else []

    # ------------------------------------------------------------------ receiving

    def accept_own(self, seq: int, outputs: list[Out], payload: bytes) -> None:
        """Our own multicast, to deliver here too: at once in FIFO groups,
        otherwise when its order allows."""
        records = outputs[0].records if outputs and isinstance(outputs[0], OutRecords) else ()
        self.own_last = records[-1].seq if records else seq
        acks = records[0].acks if records else ()
        proposal = self.changes.optimistic_view()
        tag = proposal.epoch % 64 if proposal is not None else 0
        clock = records[0].clock if records else 0
        message = tuple.__new__(Message, (self.me, seq, acks, payload, self.own_last, proposal is not None, tag, clock))
        if self.ordering is None:
            self.accept([message])
            return
        # Ordered groups: into the order now, but what became deliverable is
        # asked at the flush (``take_outbox``), once per batch of sends: a
        # message of ours waits for the others' promises anyway.
        sync = self.sync
        passed = sync.gate([message], self.view.epoch) if sync.gating([message]) else [message]
        for own in passed:
            self.ordering.add(tuple.__new__(OrderedMessage, (own.sender, own.seq, own.last or own.seq, own.acks, own,
                                                             own.clock)))
        self.stream.lamport = self.clock()
        self._order_due = True

    def on_records(self, sender: int, records: tuple[Record, ...], kind: MsgType, now: float) -> None:
        """A datagram's multicast records of ``sender``: what may be delivered now goes to ``events``."""
        self.accept(self.stream.on_records(sender, records, kind, now), now)

    def on_unicast_records(self, sender: int, records: tuple[Record, ...], now: float,
                           incarnation: int = 0) -> UnicastAck:
        """Unicast records to us from ``incarnation`` of ``sender``: complete
        messages go to ``events``; returns our ACK."""
        messages, ack = self.unicast.on_records(sender, records, now, incarnation)
        if messages:
            self.events.append(Delivered(tuple(messages), self.view.view_id, True))
        return ack

    def on_nack(self, src: int, sender: int, ranges: tuple[tuple[int, int], ...], pull: bool) -> list[Out]:
        return self.stream.on_nack(src, sender, ranges, pull)

    def accept(self, messages: list[Message], now: float = 0.0) -> None:
        """Messages from the transport, in FIFO order per sender: those that
        may be delivered now go to ``events``, in delivery order."""
        sync = self.sync
        if sync.void or sync.withdrawn:
            messages, rolled_back = sync.screen(messages)
            self._report(rolled_back)
        if sync.gating(messages):
            messages = sync.gate(messages, self.view.epoch)
        if self.ordering is None:
            self._release(messages)
            return
        self._release(self._order(messages))
        if messages:
            self._watch_blocker(now)
        self._advance_floor()

    def _order(self, messages: list[Message]) -> list[Message]:
        if self.ordering is None:
            return messages
        if not messages:
            return []
        add = self.ordering.add
        for message in messages:
            add(tuple.__new__(OrderedMessage, (message.sender, message.seq, message.last or message.seq,
                                               message.acks, message, message.clock)))
        self.stream.lamport = self.clock()
        return self._deliverable()

    def _deliverable(self) -> list[Message]:
        """What the order lets go now. Nothing while we are frozen at a
        snapshot (answered a proposal, no commit yet): our flush reported what
        we delivered so far, and the commit's cut must cover all a member
        delivered in the view it closes (``Commit.foreign``)."""
        if self.ordering is None or self.sync.frozen:
            return []
        self._order_due = False
        return [_message(m) for m in self.ordering.deliverable()]

    def _watch_blocker(self, now: float) -> None:
        """A message waiting on one member's promise for ``promise_retry`` (3
        ACK intervals) means that promise was probably lost: ask that member
        for a fresh one."""
        if self.ordering is None or self.ordering.blocker is None:
            self._request_at = None
        elif self._request_at is None:
            self._request_at = now + self.params.promise_retry

    def _request_promise(self, now: float) -> list[Out]:
        if self.ordering is None or self.ordering.blocker is None:
            self._request_at = None
            return []
        self._request_at = now + self.params.promise_retry
        member = self.ordering.blocker
        return [OutDigest(member, ((member, self.stream.contig_of(member)),))]

    def _release(self, messages: list[Message]) -> None:
        """Hand ``messages`` to the node for delivery in our current view. A
        flush reports the last of each sender's we delivered (``delivered_high``)."""
        if messages:
            high, me, awaiting = self.delivered_high, self.me, self.awaiting
            for message in messages:
                sender = message.sender
                high[sender] = message.last or message.seq
                if sender == me:
                    awaiting.discard(message.seq)
            self.events.append(Delivered(tuple(messages), self.view.view_id))

    def _report(self, rolled_back: list[Message]) -> None:
        """Rolled-back messages, then our own that a change dropped: each is an
        outcome at its sender (``awaiting``)."""
        awaiting = self.awaiting
        for message in rolled_back:
            self.events.append(RolledBack(message))
            if message.sender == self.me:
                awaiting.discard(message.seq)
        for message, reason in self.sync.take_undelivered():
            self.events.append(Undelivered(message.seq, reason))
            awaiting.discard(message.seq)

    def _forget_unicasts(self, member: int) -> None:
        """``member`` left or restarted: our unicasts it never acknowledged
        get their outcome (not delivered)."""
        for seq in self.unicast.forget(member):
            self.events.append(Undelivered(seq, DESTINATION_LEFT, member))

    def on_entries(self, msg_type: MsgType, src: int, entries: tuple[tuple[int, int], ...], now: float,
                   aggregate: AggregateFields | None = None, extra: int = 0) -> list:
        """``extra``: a null's clock (its promise, ordered groups; 0: none), or
        the roster tag a stability announcement holds for."""
        if msg_type is MsgType.DIGEST:
            outputs = self.stream.on_digest(src, entries, now, None if aggregate is None else Aggregate(*aggregate))
            self._advance_floor()
            if self.stream.promise_nulls and self.ordering is not None and any(s == self.me for s, _ in entries):
                self._promise_requested = True  # a member waits for our promise
                outputs.append(OutNull(src, ()))
            return outputs
        if msg_type is MsgType.NULL:
            self.stream.on_acks(src, entries, now)
            if self.ordering is not None and src in self.view:
                self.ordering.on_null(src, entries, extra or None)
                self._release(self._deliverable())
                self._watch_blocker(now)
        elif msg_type is MsgType.STABLE:
            outputs = self.stream.on_stable(src, extra, entries)
            self._advance_floor()
            return outputs
        elif msg_type is MsgType.UNICAST_ACK:
            for member, high in entries:
                if member == self.me:
                    self.unicast.on_ack(src, high)
        return []

    def drop_counts(self) -> dict[str, int]:
        """What this group dropped at a cap, by reason (non-zero only): records
        and partial messages of both streams, refused joiners, stale promises
        and forgotten refusals. The node adds them to its ``drop_reasons``."""
        counts = dict(self.stream.drops())
        for reason, n in self.unicast.drops.items():
            counts[f"unicast_{reason}"] = n
        extra = {"members_full": self.agreement.refused_joiners, "rejected_forgotten": self.changes.rejected.forgotten,
                 "promises_dropped": 0 if self.ordering is None else self.ordering.promises_dropped}
        counts.update((reason, n) for reason, n in extra.items() if n)
        return counts

    def on_timeout(self, now: float) -> list:
        outputs = [*self.stream.on_timeout(now), *self.unicast.on_timeout(now, self.params.push_budget)]
        if self._request_at is not None and now >= self._request_at:
            outputs += self._request_promise(now)
        self._advance_floor()
        return outputs + self.changes.on_timeout(now)

    def next_deadline(self) -> float | None:
        earliest = self.stream.next_deadline()
        for deadline in (self.flush_at, self.unicast.next_deadline(), self._request_at, self.changes.next_deadline()):
            if deadline is not None and (earliest is None or deadline < earliest):
                earliest = deadline
        return earliest

    # ------------------------------------------------------------------ framing

    def frame(self, outputs: list) -> list[Frame]:
        frames: list[Frame] = []
        nulls: list[OutNull] = []
        for output in outputs:
            if type(output) is CtlSend:
                frames.append((output.msg_type, output.dst, Flag.NONE, output.body))
            elif self.ordering is not None and type(output) is OutNull:
                nulls.append(output)
            else:
                frames.extend(_FRAMERS[type(output)](self, output))
        if nulls:
            frames.extend(self._promise(nulls))
        return frames

    def _promise(self, nulls: list[OutNull]) -> list[Frame]:
        """In ordered groups every member needs every member's ACKs (they are
        its promises), so the nulls of one step become one multicast, which
        also says how far our own stream went when we made the promise."""
        entries = {self.me: self.own_last}
        if self._promise_requested:
            self._promise_requested = False
            entries.update(self.stream.received_vector())
        for null in nulls:
            entries.update(null.acks)
        clock = self.clock()
        if 0 <= self.stream.promise_covers < clock:
            self.stream.promise_covers = clock
        return [(MsgType.NULL, None, Flag.NONE, encode_null(self.tag, tuple(sorted(entries.items())), clock))]

    def _records(self, out: OutRecords) -> list[Frame]:
        return [(out.kind, out.dst, Flag.NONE, encode_records(self.tag, batch))
                for batch in pack(out.records, self.params.bundle_size)]

    def _nack(self, out: OutNack) -> list[Frame]:
        return [(MsgType.NACK, out.dst, Flag.NONE, encode_nack(self.tag, out.sender, out.ranges, out.pull))]

    def _digest(self, out: OutDigest) -> list[Frame]:
        aggregate = out.aggregate
        wire = None if aggregate is None else (aggregate.level, aggregate.roster, aggregate.floors, aggregate.clock,
                                               aggregate.seq, aggregate.flags)
        return [(MsgType.DIGEST, out.dst, Flag.NONE, encode_digest(self.tag, out.entries, wire))]

    def _null(self, out: OutNull) -> list[Frame]:
        return [(MsgType.NULL, out.dst, Flag.NONE, encode_entries(self.tag, out.acks))]

    def _stable(self, out: OutStable) -> list[Frame]:
        return [(MsgType.STABLE, out.dst, Flag.NONE, encode_stable(self.tag, out.roster, out.entries))]

    def _unicast(self, out: UnicastSend) -> list[Frame]:
        return [(MsgType.DATA, out.dst, Flag.UNICAST, encode_unicast(out.dst, self.tag, batch))
                for batch in pack(out.records, self.params.bundle_size, unicast=True)]

    def _unicast_ack(self, out: UnicastAck) -> list[Frame]:
        return [(MsgType.UNICAST_ACK, out.dst, Flag.NONE, encode_entries(self.tag, ((out.dst, out.high),)))]


def _message(m: OrderedMessage) -> Message:
    """The group's message that ``m`` carries (``_order`` attached it)."""
    message = m.payload
    assert isinstance(message, Message)
    return message


_FRAMERS: dict[type, Callable[[GroupStack, Any], list[Frame]]] = {
    OutRecords: GroupStack._records,
    OutNack: GroupStack._nack,
    OutDigest: GroupStack._digest,
    OutNull: GroupStack._null,
    OutStable: GroupStack._stable,
    UnicastSend: GroupStack._unicast,
    UnicastAck: GroupStack._unicast_ack,
}
