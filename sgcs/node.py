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

Today each group runs the foundation stack: unreliable multicast
(``transport.unreliable``), a per-sender FIFO gate (``ordering.fifo``) and a
view grown on contact (``membership.static``).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Callable, Iterable

from .actions import Action, Address, Deliver, Multicast, Send, TraceEvent, ViewInstalled
from .config import Config, Order
from .errors import DecodeError, UsageError
from .membership.static import View
from .ordering.fifo import FifoGate
from .transport.unreliable import UnreliableTransport
from .wire import (
    MAX_GROUP_NAME,
    Flag,
    Header,
    HelloMsg,
    LeaveMsg,
    MsgType,
    decode_data_untrusted,
    decode_datagram_untrusted,
    decode_hello_untrusted,
    decode_leave_untrusted,
    derive_key,
    encode_hello,
    encode_leave,
    group_tag,
    max_payload,
    seal,
)

MAX_PEERS = 65_536
"""Addresses remembered; past the cap new peers are not learned (their
datagrams are still handled, replies fall back to ``resolve``)."""
MAX_GROUPS = 1_024


@dataclass(frozen=True, slots=True)
class NodeStatistics:
    """Counters of one node since it started."""

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
    refused_out_of_order: int = 0
    groups: int = 0


class _Group:
    """One group's stack on this node."""

    __slots__ = ("name", "tag", "order", "view", "transport", "gate", "unicast_gate", "discovering", "next_beacon")

    def __init__(self, name: str, order: Order, view: View, transport: UnreliableTransport) -> None:
        self.name = name
        self.tag = group_tag(name)
        self.order = order
        self.view = view
        self.transport = transport
        self.gate = FifoGate()
        self.unicast_gate = FifoGate()
        self.discovering = False
        self.next_beacon: float | None = None


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
        self._groups: dict[str, _Group] = {}
        self._by_tag: dict[int, _Group] = {}
        self._addresses: dict[int, Address] = {}
        self._counts = {"rx": 0, "rx_bytes": 0, "tx": 0, "tx_bytes": 0, "sent": 0, "delivered": 0, "foreign": 0}
        self._drops: dict[str, int] = {}

    # ------------------------------------------------------------------ commands

    def join(
        self, group: str, now: float, order: Order | str = Order.FIFO, members: Iterable[int] | None = None
    ) -> list[Action]:
        """Join ``group``. ``members``: the known membership (no discovery needed);
        None: start as a singleton view and discover the others by beacons."""
        _check_group_name(group)
        if group in self._groups:
            raise UsageError(f"already a member of group {group!r}; leave it first")
        if len(self._groups) >= MAX_GROUPS:
            raise UsageError(f"a node may join at most {MAX_GROUPS} groups")
        if group_tag(group) in self._by_tag:
            raise UsageError(f"group name {group!r} collides on the wire with a joined group; rename it")
        state = _Group(
            group,
            Order.parse(order),
            View({self.id, *(members or ())}),
            UnreliableTransport(self._key, self.id, group_tag(group)),
        )
        self._groups[group] = state
        self._by_tag[state.tag] = state
        out: list[Action] = []
        self._trace(out, "join", group=group)
        self._install(out, state)
        if members is None:
            state.discovering = True
            state.next_beacon = now + self.config.beacon_interval
            self._multicast_hello(out, state, reply_wanted=True)
        return out

    def leave(self, group: str, now: float) -> list[Action]:
        """Leave ``group`` gracefully: tell the others so nobody waits to suspect us."""
        state = self._group(group)
        out: list[Action] = []
        body = encode_leave(LeaveMsg(state.tag))
        self._emit(out, Multicast(seal(self._key, MsgType.LEAVE, Flag.NONE, self.id, body), MsgType.LEAVE, group))
        self._trace(out, "leave", group=group, view_id=state.view.view_id)
        del self._groups[group]
        del self._by_tag[state.tag]
        return out

    def multicast(self, group: str, payload: bytes, now: float) -> list[Action]:
        """Send ``payload`` to every member of ``group``, this node included."""
        state = self._group(group)
        self._check_payload(payload, unicast=False)
        seq, data = state.transport.frame_multicast(payload)
        out: list[Action] = []
        self._counts["sent"] += 1
        self._trace(out, "send", group=group, sender=self.id, seq=seq, order=state.order.value,
                    view_id=state.view.view_id, optimistic=False, size=len(payload))
        self._emit(out, Multicast(data, MsgType.DATA, group))
        state.gate.admit(self.id, seq)
        self._deliver(out, state, self.id, seq, payload, None)
        return out

    def unicast(self, group: str, member: int, payload: bytes, now: float) -> list[Action]:
        """Send ``payload`` to one member of ``group``."""
        state = self._group(group)
        if member not in state.view:
            raise UsageError(f"{member} is not a member of group {group!r}; see group.view")
        address = self._address_of(member)
        if address is None:
            raise UsageError(f"no address known yet for member {member}; wait until it has been heard from")
        self._check_payload(payload, unicast=True)
        seq, data = state.transport.frame_unicast(member, payload)
        out: list[Action] = []
        self._counts["sent"] += 1
        self._trace(out, "send", group=group, sender=self.id, seq=seq, order=state.order.value,
                    view_id=state.view.view_id, optimistic=False, size=len(payload), dest=member)
        self._emit(out, Send(address, data, MsgType.DATA))
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
            if state.next_beacon is not None and state.next_beacon <= now:
                state.next_beacon = now + self.config.beacon_interval
                self._multicast_hello(out, state, reply_wanted=False)
        return out

    def next_deadline(self) -> float | None:
        """The earliest time at which ``handle_timeout`` has work, or None."""
        beacons = [s.next_beacon for s in self._groups.values() if s.next_beacon is not None]
        return min(beacons) if beacons else None

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
        return NodeStatistics(
            datagrams_received=c["rx"], bytes_received=c["rx_bytes"], datagrams_sent=c["tx"],
            bytes_sent=c["tx_bytes"], messages_sent=c["sent"], messages_delivered=c["delivered"],
            dropped=sum(self._drops.values()), drop_reasons=dict(self._drops), foreign=c["foreign"],
            refused_out_of_order=sum(g.gate.refused + g.unicast_gate.refused for g in self._groups.values()),
            groups=len(self._groups),
        )

    # ------------------------------------------------------------------ message handlers

    def _on_data(self, header: Header, body: bytes, src: Address, now: float) -> list[Action]:
        msg = decode_data_untrusted(body, header.flags)
        state = self._by_tag.get(msg.group_tag)
        if state is None:
            self._counts["foreign"] += 1
            return []
        if msg.dest is not None and msg.dest != self.id:
            return self._drop("misaddressed")
        out: list[Action] = []
        self._admit_member(out, state, header.sender)
        gate = state.gate if msg.dest is None else state.unicast_gate
        if gate.admit(header.sender, msg.seq):
            self._deliver(out, state, header.sender, msg.seq, msg.payload, msg.dest)
        return out

    def _on_hello(self, header: Header, body: bytes, src: Address, now: float) -> list[Action]:
        msg = decode_hello_untrusted(body)
        state = self._by_tag.get(msg.group_tag)
        if state is None:
            self._counts["foreign"] += 1
            return []
        out: list[Action] = []
        self._admit_member(out, state, header.sender)
        if msg.reply_wanted:
            reply = encode_hello(HelloMsg(state.tag, state.order, False))
            self._emit(out, Send(src, seal(self._key, MsgType.HELLO, Flag.NONE, self.id, reply), MsgType.HELLO))
        return out

    def _on_leave(self, header: Header, body: bytes, src: Address, now: float) -> list[Action]:
        msg = decode_leave_untrusted(body)
        state = self._by_tag.get(msg.group_tag)
        if state is None:
            self._counts["foreign"] += 1
            return []
        out: list[Action] = []
        if state.view.remove(header.sender):
            state.gate.forget(header.sender)
            self._install(out, state)
        return out

    # ------------------------------------------------------------------ helpers

    def _group(self, group: str) -> _Group:
        try:
            return self._groups[group]
        except KeyError:
            raise UsageError(f"not a member of group {group!r}; join it first") from None

    def _address_of(self, member: int) -> Address | None:
        address = self._addresses.get(member)
        if address is None and self._resolve is not None:
            address = self._resolve(member)
        return address

    def _check_payload(self, payload: bytes, unicast: bool) -> None:
        if not isinstance(payload, (bytes, bytearray, memoryview)):
            raise UsageError(f"payload must be bytes, got {type(payload).__name__}")
        limit = max_payload(self.config.max_datagram, unicast)
        if len(payload) > limit:
            raise UsageError(
                f"payload of {len(payload)} bytes exceeds {limit} (max_datagram={self.config.max_datagram}); "
                "raise Config.max_datagram or send smaller messages"
            )

    def _admit_member(self, out: list[Action], state: _Group, member: int) -> None:
        if state.view.add(member):
            self._install(out, state)

    def _install(self, out: list[Action], state: _Group) -> None:
        view = state.view
        out.append(ViewInstalled(state.name, view.view_id, view.members))
        self._trace(out, "view", group=state.name, view_id=view.view_id, members=view.members)

    def _deliver(self, out: list[Action], state: _Group, sender: int, seq: int, payload: bytes, dest: int | None) -> None:
        self._counts["delivered"] += 1
        view_id = state.view.view_id
        out.append(Deliver(state.name, sender, seq, payload, view_id, dest))
        self._trace(out, "deliver", group=state.name, sender=sender, seq=seq, order=state.order.value,
                    view_id=view_id, optimistic=False, size=len(payload), dest=dest)

    def _multicast_hello(self, out: list[Action], state: _Group, reply_wanted: bool) -> None:
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


_HANDLERS: dict[MsgType, _Handler] = {
    MsgType.DATA: Node._on_data,
    MsgType.HELLO: Node._on_hello,
    MsgType.LEAVE: Node._on_leave,
}
