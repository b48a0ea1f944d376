"""The sans-I/O node: routes commands, datagrams and timers to each group's stack.

Theory of operation
-------------------
A ``Node`` is a plain state machine (shared/DESIGN.md, "The sans-I/O rule").
Its inputs are synchronous methods that take the current time: a datagram
arriving (``handle_datagram``), a timer firing (``handle_timeout``), and the
application's commands (``join``, ``leave``, ``multicast``, ``unicast``). Each
returns the list of actions (``sgcs.actions``) the driver must carry out. The
node never touches a socket or a clock, and all its randomness comes from the
``random.Random`` it is handed, so the trio driver and the simulator run the
very same code and a seed replays a run exactly.

The node owns the wire: it authenticates and decodes every datagram, drops and
counts garbage (traced as ``drop`` with a reason), and dispatches valid
messages by type through a table. Addresses are opaque: the node learns a
member's address from its authenticated datagrams, or asks the ``resolve``
function it was given (the simulator's addresses are the node ids).

Each group runs the reliable transport (``transport.reliable`` for multicast,
``transport.unicast`` for unicast), which delivers exactly once and in FIFO
order per sender, over a view grown on contact (``membership.static``).
Multicast records wait in a per-group outbox for ``flush_delay`` so that
several messages share a datagram (batching); the node's transport outputs
are framed here (``group.py``) into datagrams of at most ``max_datagram``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Callable, Iterable

from .actions import Action, Address, Deliver, GroupError, Multicast, Send, TraceEvent, ViewInstalled
from .config import Config, Order
from .errors import DecodeError, UsageError, WouldBlock
from .group import GroupStack, build_params
from .transport.records import Message
from .wire import (
    MAX_GROUP_NAME,
    Flag,
    Header,
    HelloMsg,
    LeaveMsg,
    MsgType,
    decode_datagram_untrusted,
    decode_entries_untrusted,
    decode_hello_untrusted,
    decode_leave_untrusted,
    decode_nack_untrusted,
    decode_records_untrusted,
    decode_unicast_untrusted,
    derive_key,
    encode_hello,
    encode_leave,
    group_tag,
    seal,
)

MAX_PEERS = 65_536
"""Addresses remembered; past the cap new peers are not learned (their
datagrams are still handled, replies fall back to ``resolve``)."""
MAX_GROUPS = 1_024


@dataclass(frozen=True, slots=True)
class NodeStatistics:
    """Counters of one node since it started; transport figures summed over groups."""

    datagrams_received: int
    bytes_received: int
    datagrams_sent: int
    bytes_sent: int
    messages_sent: int
    messages_delivered: int
    dropped: int
    drop_reasons: dict[str, int] = field(default_factory=dict)
    foreign: int = 0
    """Valid datagrams for groups this node has not joined (shared multicast address)."""
    duplicates: int = 0
    nacks_sent: int = 0
    retransmissions: int = 0
    gossip_pushes: int = 0
    repaired_by_nack: int = 0
    repaired_by_gossip: int = 0
    buffered: int = 0
    """Records held for retransmission, not yet stable (the flow window)."""
    peak_buffered: int = 0
    unicast_retransmissions: int = 0
    groups: int = 0


_Handler = Callable[["Node", Header, bytes, Address, float], list[Action]]


class Node:
    """One process's protocol state for all the groups it belongs to."""

    def __init__(
        self,
        node_id: int,
        config: Config,
        rng: random.Random,
        *,
        resolve: Callable[[int], Address | None] | None = None,
        trace: bool = False,
    ) -> None:
        if not 0 <= node_id < 2**63:
            raise UsageError(f"node id must be in [0, 2**63), got {node_id}")
        self.id = node_id
        self.config = config
        self.rng = rng
        self.trace = trace
        self._resolve = resolve
        self._key = derive_key(config.secret)
        self._params = build_params(config)
        self._groups: dict[str, GroupStack] = {}
        self._by_tag: dict[int, GroupStack] = {}
        self._addresses: dict[int, Address] = {}
        self._counts = {"rx": 0, "rx_bytes": 0, "tx": 0, "tx_bytes": 0, "sent": 0, "delivered": 0, "foreign": 0}
        self._drops: dict[str, int] = {}

    # ------------------------------------------------------------------ commands

    def join(
        self, group: str, now: float, order: Order | str = Order.FIFO, members: Iterable[int] | None = None,
        from_start: bool | None = None,
    ) -> list[Action]:
        """Join ``group``.

        ``members``: the known membership (no discovery needed); None: start as
        a singleton view and discover the others by beacons. ``from_start``
        (default: True when ``members`` is given) says the group starts now, so
        every member's stream is expected from its first message; otherwise we
        join running streams at the first record we see, and announce ourselves
        so the others reset any stream of an earlier incarnation of ours."""
        _check_group_name(group)
        if group in self._groups:
            raise UsageError(f"already a member of group {group!r}; leave it first")
        if len(self._groups) >= MAX_GROUPS:
            raise UsageError(f"a node may join at most {MAX_GROUPS} groups")
        if group_tag(group) in self._by_tag:
            raise UsageError(f"group name {group!r} collides on the wire with a joined group; rename it")
        initial = {self.id, *(members or ())}
        fresh = members is not None if from_start is None else from_start
        state = GroupStack(group, Order.parse(order), self.id, initial, self._params, self.rng, now, fresh)
        self._groups[group] = state
        self._by_tag[state.tag] = state
        out: list[Action] = []
        self._trace(out, "join", group=group)
        self._install(out, state)
        if members is None:
            state.next_beacon = now + self.config.beacon_interval
        if not fresh:
            state.joining = True  # until a member with our order answers
            self._multicast_hello(out, state, reply_wanted=True)
        return out

    def leave(self, group: str, now: float) -> list[Action]:
        """Leave ``group`` gracefully: tell the others so nobody waits to suspect us."""
        state = self._group(group)
        out: list[Action] = []
        self._flush(out, state)
        body = encode_leave(LeaveMsg(state.tag))
        self._emit(out, Multicast(seal(self._key, MsgType.LEAVE, Flag.NONE, self.id, body), MsgType.LEAVE, group))
        self._trace(out, "leave", group=group, view_id=state.view.view_id)
        del self._groups[group]
        del self._by_tag[state.tag]
        return out

    def send_ready_at(self, group: str, now: float) -> float | None:
        """When the next multicast to ``group`` may go (flow control): ``now`` or
        later, or None while the window is full (wait for the node to progress)."""
        return self._group(group).ready_at(now)

    def multicast(self, group: str, payload: bytes, now: float) -> list[Action]:
        """Send ``payload`` to every member of ``group``, this node included.
        Raises ``WouldBlock`` while the flow-control window is full."""
        state = self._group(group)
        self._check_payload(payload)
        if state.ready_at(now) is None:
            raise WouldBlock(f"group {group!r}: {state.stream.window()} messages await stability (window_max)")
        seq, outputs = state.stream.send(bytes(payload), now)
        state.last_send = now
        out: list[Action] = []
        self._counts["sent"] += 1
        if self.trace:  # the test here spares the hot path building the keywords
            self._trace(out, "send", group=group, sender=self.id, seq=seq, order=state.order.value,
                        view_id=state.view.view_id, optimistic=False, size=len(payload))
        state.queue(outputs, now)  # flushed by handle_timeout, with whatever else is sent meanwhile
        for message in state.accept_own(seq, outputs, bytes(payload)):
            self._deliver(out, state, message, None)
        if state.outbox_full():
            self._flush(out, state)
        return out

    def unicast(self, group: str, member: int, payload: bytes, now: float) -> list[Action]:
        """Send ``payload`` reliably to one member of ``group``."""
        state = self._group(group)
        if member not in state.view or member == self.id:
            raise UsageError(f"{member} is not another member of group {group!r}; see group.view")
        if self._address_of(member) is None:
            raise UsageError(f"no address known yet for member {member}; wait until it has been heard from")
        self._check_payload(payload)
        if state.unicast.blocked(member):
            raise WouldBlock(f"group {group!r}: member {member} has not acknowledged {self.config.window_max} unicasts")
        seq, send = state.unicast.send(member, bytes(payload), now)
        out: list[Action] = []
        self._counts["sent"] += 1
        self._trace(out, "send", group=group, sender=self.id, seq=seq, order=state.order.value,
                    view_id=state.view.view_id, optimistic=False, size=len(payload), dest=member)
        self._route(out, state, [send])
        return out

    # ------------------------------------------------------------------ inputs

    def handle_datagram(self, src: Address, data: bytes, now: float) -> list[Action]:
        """One datagram arrived from ``src``. Garbage is dropped and counted."""
        self._counts["rx"] += 1
        self._counts["rx_bytes"] += len(data)
        try:
            header, body = decode_datagram_untrusted(data, self._key)
            if header.sender == self.id:
                return []  # our own multicast, looped back by the network
            if header.sender in self._addresses or len(self._addresses) < MAX_PEERS:
                self._addresses[header.sender] = src  # a restarted peer may have moved
            return _HANDLERS[header.msg_type](self, header, body, src, now)
        except DecodeError as exc:
            return self._drop(exc.reason)

    def handle_timeout(self, now: float) -> list[Action]:
        """Run every timer that is due at ``now``."""
        out: list[Action] = []
        for state in self._groups.values():
            if state.flush_at is not None and state.flush_at <= now:
                self._flush(out, state)
            if state.next_beacon is not None and state.next_beacon <= now:
                state.next_beacon = now + self.config.beacon_interval
                self._multicast_hello(out, state, reply_wanted=False)
            self._route(out, state, state.on_timeout(now))
        return out

    def next_deadline(self) -> float | None:
        """The earliest time at which ``handle_timeout`` has work, or None."""
        earliest = None
        for state in self._groups.values():  # a plain loop: the driver asks after every call
            deadline = state.next_deadline()
            if deadline is not None and (earliest is None or deadline < earliest):
                earliest = deadline
        return earliest

    # ------------------------------------------------------------------ queries

    def view(self, group: str) -> tuple[str, tuple[int, ...]]:
        state = self._group(group)
        return state.view.view_id, state.view.members

    def order_of(self, group: str) -> Order:
        return self._group(group).order

    @property
    def groups(self) -> tuple[str, ...]:
        return tuple(self._groups)

    def statistics(self) -> NodeStatistics:
        c = self._counts
        streams = [g.stream.statistics() for g in self._groups.values()]

        def total(name: str) -> int:
            return sum(getattr(s, name) for s in streams)

        return NodeStatistics(
            datagrams_received=c["rx"], bytes_received=c["rx_bytes"], datagrams_sent=c["tx"],
            bytes_sent=c["tx_bytes"], messages_sent=c["sent"], messages_delivered=c["delivered"],
            dropped=sum(self._drops.values()), drop_reasons=dict(self._drops), foreign=c["foreign"],
            duplicates=total("duplicates"), nacks_sent=total("nacks_sent"), retransmissions=total("retransmissions"),
            gossip_pushes=total("gossip_pushes"), repaired_by_nack=total("repaired_by_nack"),
            repaired_by_gossip=total("repaired_by_gossip"), buffered=total("buffered"),
            peak_buffered=total("peak_buffered"),
            unicast_retransmissions=sum(g.unicast.retransmissions for g in self._groups.values()),
            groups=len(self._groups),
        )

    # ------------------------------------------------------------------ message handlers

    def _on_records(self, header: Header, body: bytes, src: Address, now: float) -> list[Action]:
        if _UNICAST_BIT[header.flags]:
            return self._on_unicast(header, body, now)
        tag, records = decode_records_untrusted(body)
        state = self._member_group(tag)
        if state is None:
            return []
        out: list[Action] = []
        self._admit_member(out, state, header.sender)
        kind = _RECORD_KINDS[header.msg_type]
        for message in state.accept(state.stream.on_records(header.sender, records, kind, now), now):
            self._deliver(out, state, message, None)
        return out

    def _on_unicast(self, header: Header, body: bytes, now: float) -> list[Action]:
        dest, tag, records = decode_unicast_untrusted(body)
        state = self._member_group(tag)
        if state is None:
            return []
        if dest != self.id or any(r.sender != header.sender for r in records):
            return self._drop("misaddressed")
        out: list[Action] = []
        self._admit_member(out, state, header.sender)
        messages, ack = state.unicast.on_records(header.sender, records)
        for message in messages:
            self._deliver(out, state, message, self.id)
        self._route(out, state, [ack])
        return out

    def _on_nack(self, header: Header, body: bytes, src: Address, now: float) -> list[Action]:
        tag, sender, ranges, pull = decode_nack_untrusted(body)
        state = self._member_group(tag)
        out: list[Action] = []
        if state is not None:
            self._route(out, state, state.stream.on_nack(header.sender, sender, ranges, pull))
        return out

    def _on_entries(self, header: Header, body: bytes, src: Address, now: float) -> list[Action]:
        tag, entries = decode_entries_untrusted(body)
        state = self._member_group(tag)
        out: list[Action] = []
        if state is not None:
            self._route(out, state, state.on_entries(header.msg_type, header.sender, entries, now))
            for message in state.take_released():
                self._deliver(out, state, message, None)
        return out

    def _on_hello(self, header: Header, body: bytes, src: Address, now: float) -> list[Action]:
        msg = decode_hello_untrusted(body)
        state = self._member_group(msg.group_tag)
        if state is None:
            return []
        out: list[Action] = []
        if msg.order is not state.order:
            return self._order_mismatch(state, header.sender, msg, src, now)
        state.joining = False  # a member with our order answered: we are in
        if msg.reply_wanted and header.sender in state.view:
            state.restart_member(header.sender)  # it joins afresh: its old streams are void
        self._admit_member(out, state, header.sender)
        if msg.reply_wanted:
            reply = encode_hello(HelloMsg(state.tag, state.order, False))
            self._emit(out, Send(src, seal(self._key, MsgType.HELLO, Flag.NONE, self.id, reply), MsgType.HELLO))
        return out

    def _on_leave(self, header: Header, body: bytes, src: Address, now: float) -> list[Action]:
        msg = decode_leave_untrusted(body)
        state = self._member_group(msg.group_tag)
        out: list[Action] = []
        if state is not None and state.remove_member(header.sender):
            self._install(out, state)
            for message in state.take_released():  # no longer held back by the leaver
                self._deliver(out, state, message, None)
        return out

    def _order_mismatch(self, state: GroupStack, member: int, msg: HelloMsg, src: Address, now: float) -> list[Action]:
        """A joiner with another order is never admitted, and our answer tells it
        so; a joiner that hears such an answer from a member is refused."""
        out = self._drop("order_mismatch")
        state.rejected.add(member)
        if msg.reply_wanted:
            reply = encode_hello(HelloMsg(state.tag, state.order, False))
            self._emit(out, Send(src, seal(self._key, MsgType.HELLO, Flag.NONE, self.id, reply), MsgType.HELLO))
        elif state.joining:
            del self._groups[state.name]
            del self._by_tag[state.tag]
            out.append(GroupError(state.name, f"group {state.name!r} delivers in {msg.order.value} order, "
                                              f"not {state.order.value}; join it with order={msg.order.value!r}"))
            self._trace(out, "leave", group=state.name, view_id=state.view.view_id, reason="order_mismatch")
        return out

    # ------------------------------------------------------------------ helpers

    def _group(self, group: str) -> GroupStack:
        try:
            return self._groups[group]
        except KeyError:
            raise UsageError(f"not a member of group {group!r}; join it first") from None

    def _member_group(self, tag: int) -> GroupStack | None:
        state = self._by_tag.get(tag)
        if state is None:
            self._counts["foreign"] += 1
        return state

    def _address_of(self, member: int) -> Address | None:
        address = self._addresses.get(member)
        if address is None and self._resolve is not None:
            address = self._resolve(member)
        return address

    def _check_payload(self, payload: bytes) -> None:
        if not isinstance(payload, (bytes, bytearray, memoryview)):
            raise UsageError(f"payload must be bytes, got {type(payload).__name__}")
        if len(payload) > self.config.max_message:
            raise UsageError(
                f"payload of {len(payload)} bytes exceeds Config.max_message={self.config.max_message}; "
                "raise it or send smaller messages"
            )

    def _admit_member(self, out: list[Action], state: GroupStack, member: int) -> None:
        if member in state.rejected:
            return
        if state.add_member(member):
            self._install(out, state)

    def _install(self, out: list[Action], state: GroupStack) -> None:
        view = state.view
        out.append(ViewInstalled(state.name, view.view_id, view.members))
        self._trace(out, "view", group=state.name, view_id=view.view_id, members=view.members)

    def _deliver(self, out: list[Action], state: GroupStack, message: Message, dest: int | None) -> None:
        self._counts["delivered"] += 1
        view_id = state.view.view_id
        out.append(Deliver(state.name, message.sender, message.seq, message.payload, view_id, dest))
        if self.trace:
            self._trace(out, "deliver", group=state.name, sender=message.sender, seq=message.seq,
                        order=state.order.value, view_id=view_id, optimistic=False, size=len(message.payload),
                        dest=dest)

    def _flush(self, out: list[Action], state: GroupStack) -> None:
        self._route(out, state, state.take_outbox())

    def _route(self, out: list[Action], state: GroupStack, outputs: list) -> None:
        """Frame transport outputs as datagrams: multicast, or to a member's address."""
        for msg_type, dst, flags, body in state.frame(outputs):
            data = seal(self._key, msg_type, flags, self.id, body)
            if dst is None:
                self._emit(out, Multicast(data, msg_type, state.name))
                continue
            address = self._address_of(dst)
            if address is None:
                self._drops["no_address"] = self._drops.get("no_address", 0) + 1
                continue
            self._emit(out, Send(address, data, msg_type))

    def _multicast_hello(self, out: list[Action], state: GroupStack, reply_wanted: bool) -> None:
        body = encode_hello(HelloMsg(state.tag, state.order, reply_wanted))
        data = seal(self._key, MsgType.HELLO, Flag.NONE, self.id, body)
        self._emit(out, Multicast(data, MsgType.HELLO, state.name))

    def _emit(self, out: list[Action], action: Send | Multicast) -> None:
        self._counts["tx"] += 1
        self._counts["tx_bytes"] += len(action.data)
        out.append(action)

    def _drop(self, reason: str) -> list[Action]:
        self._drops[reason] = self._drops.get(reason, 0) + 1
        out: list[Action] = []
        self._trace(out, "drop", reason=reason)
        return out

    def _trace(self, out: list[Action], kind: str, **fields: object) -> None:
        if self.trace:
            out.append(TraceEvent(kind, **fields))  # type: ignore[arg-type]


def _check_group_name(name: str) -> None:
    if not isinstance(name, str) or not name or len(name.encode()) > MAX_GROUP_NAME:
        raise UsageError(f"group name must be a non-empty string of at most {MAX_GROUP_NAME} UTF-8 bytes")


_UNICAST_BIT: tuple[bool, ...] = tuple(bool(Flag(bits) & Flag.UNICAST) for bits in range(256))
"""``flags & Flag.UNICAST`` by table: IntFlag arithmetic costs a microsecond per datagram."""

_RECORD_KINDS = {MsgType.DATA: "data", MsgType.RETRANSMIT: "retransmit", MsgType.GOSSIP: "gossip"}

_HANDLERS: dict[MsgType, _Handler] = {
    MsgType.DATA: Node._on_records,
    MsgType.RETRANSMIT: Node._on_records,
    MsgType.GOSSIP: Node._on_records,
    MsgType.NACK: Node._on_nack,
    MsgType.DIGEST: Node._on_entries,
    MsgType.NULL: Node._on_entries,
    MsgType.STABLE: Node._on_entries,
    MsgType.UNICAST_ACK: Node._on_entries,
    MsgType.HELLO: Node._on_hello,
    MsgType.LEAVE: Node._on_leave,
}
