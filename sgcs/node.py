"""The sans-I/O node: routes commands, datagrams and timers to each group's stack.

Theory of operation
-------------------
A ``Node`` is a plain state machine (docs/architecture.md, "The sans-I/O rule").
Its inputs are synchronous methods that take the current time: a datagram
arriving (``handle_datagram``), a timer firing (``handle_timeout``), and the
application's commands (``join``, ``leave``, ``multicast``, ``unicast``). Each
returns the list of actions (``sgcs.actions``) the driver must carry out. The
node never touches a socket or a clock, and all its randomness comes from the
``random.Random`` it is handed, so the trio driver and the simulator run the
very same code and a seed replays a run exactly.

The node owns the wire: it seals, authenticates (or decrypts) and decodes
every datagram, rejects replays (``sgcs.security``), drops and counts garbage
(traced as ``drop`` with a reason), and dispatches by type through a table. Addresses are opaque: the node learns a
member's address from its authenticated datagrams, or asks the ``resolve``
function it was given (the simulator's addresses are the node ids).

Each group runs the reliable transport (``transport.reliable`` for multicast,
``transport.unicast`` for unicast), which delivers exactly once and in FIFO
order per sender, within views agreed by ``membership.agreement``. One
failure detector (``membership.detector``) per node watches every member of
every group; its verdicts (suspect, busy, failed) go to each group that holds
the member. Heartbeats and probes are node-level datagrams; beacons,
proposals, flushes, commits and install acknowledgements carry a group tag.
Multicast records wait in a per-group outbox for ``flush_delay`` so that
several messages share a datagram (batching); the node's transport outputs
are framed here (``group.py``) into datagrams of at most ``max_datagram``.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass, field
from typing import Callable, Iterable, cast

from .actions import (
    Action,
    Address,
    CheckHost,
    Deliver,
    GroupError,
    MemberBusy,
    MemberSuspected,
    MessageId,
    Multicast,
    NotDelivered,
    OptimisticView,
    Rollback,
    Send,
    TraceEvent,
    TransitionalView,
    ViewInstalled,
)
from .config import Config, Order
from .errors import DecodeError, UsageError, WouldBlock
from .group import Delivered, GroupStack, Installed, OptimisticBegan, RolledBack, Transitional, Undelivered
from .membership.agreement import AgreedView
from .roster import roster_of
from .membership.detector import FailureDetector, FdEvent, FdSend, Verdict
from .membership.messages import Ask, AskReply, Beacon, Obituary, Probe, ViewMessage, decode_untrusted, \
    decode_view_message, encode
from .security import ReplayWindow, Sealer
from .transport.params import Params
from .records import Message, Record
from .wire import (
    MAX_GROUP_NAME,
    Flag,
    Header,
    HelloMsg,
    LeaveMsg,
    MsgType,
    decode_control_untrusted,
    VerifiedMemo,
    decode_datagram_untrusted,
    decode_heartbeat_untrusted,
    decode_digest_untrusted,
    decode_entries_untrusted,
    decode_null_untrusted,
    decode_roster_heartbeat_untrusted,
    decode_stable_untrusted,
    decode_hello_untrusted,
    decode_leave_untrusted,
    decode_nack_untrusted,
    decode_records_untrusted,
    decode_unicast_untrusted,
    encode_hello,
    encode_leave,
    group_tag,
)

MAX_PEERS = 65_536
"""Addresses remembered; past the cap new peers are not learned (their
datagrams are still handled, replies fall back to ``resolve``)."""
MAX_GROUPS = 1_024
NAMES_MAX = 65_536
"""Members' names kept at most (``Node.name_of``); the oldest learnt goes first."""
NAMES_ASKED_MAX = 16
"""Members new to a view whose names a member asks for at most (``Node._ask_names``)."""
MAX_LEFT = 1_024
"""Groups left whose last message number a node remembers (``Node._ended_at``);
past it the oldest is forgotten, and a rejoin of that group numbers from
``incarnation << 32`` again (its old stream is long gone from the others)."""
VERDICT_HEARERS = 3
"""Ring form: the lowest live members of a view told each verdict. The lowest
coordinates; the next ones take over if it failed too, and know why."""


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
    fate_unknown: int = 0
    """Own multicasts with no outcome yet at this node: neither delivered
    here, nor rolled back, nor reported ``NotDelivered``. Messages in flight
    or waiting for their order count; once the groups are at rest it is 0
    (every message has an outcome)."""
    not_delivered: int = 0
    """Own multicasts reported ``NotDelivered``."""


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
        incarnation: int = 0,
        salt: int = 0,
        now: float = 0.0,
        verified_memo: VerifiedMemo | None = None,
    ) -> None:
        """``now``: the node's clock at creation. Clocks are local: every
        ``now`` a node is given is on its own clock, and no two nodes' clocks
        need agree (the simulator gives each its own offset and drift).
        ``verified_memo``: shared with other nodes of one process that hand
        each other the same datagram objects (the simulator); None otherwise."""
        if not 0 <= node_id < 2**63:
            raise UsageError(f"node id must be in [0, 2**63), got {node_id}")
        if not 0 <= incarnation < 2**31:
            raise UsageError(f"incarnation must be in [0, 2**31), got {incarnation}")
        self.id = node_id
        self.incarnation = incarnation
        self.last_sent: MessageId | None = None
        """The id of the last multicast or unicast this node sent (what ``send`` returns)."""
        self.config = config
        self.rng = rng
        self.trace = trace
        self._resolve = resolve
        # nonces: (incarnation, salt) differ per start, the counter per datagram
        self._sealer = Sealer(config.secret, node_id, incarnation << 32 | salt & 0xFFFFFFFF, config.encrypt,
                              config.key_derivation)
        self._replay = ReplayWindow()
        self._names: dict[int, str] = {}
        self._hello_name = "" if config.key_derivation == "hmac-v1" else config.name
        """Our name in HELLOs; none under the former keys, whose members expect the former layout."""
        self._verified_memo = verified_memo
        self.params = Params.of(config)
        """The protocol's parameters, built here once and shared by every layer of this node."""
        self._groups: dict[str, GroupStack] = {}
        self._by_tag: dict[int, GroupStack] = {}
        self._ended_at: dict[int, int] = {}
        """Group tag -> the last number of our stream in a group we left: a
        rejoin numbers on after it, so a member that still holds our old
        stream never takes a new message for an old one (bounded: ``MAX_LEFT``)."""
        self._addresses: dict[int, Address] = {}
        self._counts = {"rx": 0, "rx_bytes": 0, "tx": 0, "tx_bytes": 0, "sent": 0, "delivered": 0, "foreign": 0,
                        "not_delivered": 0}
        self._drops: dict[str, int] = {}
        self.detector = FailureDetector(node_id, self.params, rng, now)
        self._watch_started = False
        self._stall_checks: dict[str, float] = {}
        """Ring form: group -> when to look whether our verdict led to a change (``_on_stall``)."""

    # ------------------------------------------------------------------ commands

    def join(
        self, group: str, now: float, order: Order | str = Order.FIFO, members: Iterable[int] | None = None,
        from_start: bool | None = None,
    ) -> list[Action]:
        """Join ``group``.

        ``members``: the known membership, for a group whose members all start
        together (no discovery; every stream starts at 1); None: start as a
        singleton view, discover the others by beacons and merge with them
        (our stream then starts at ``incarnation << 32``, so a restarted node's
        message ids never repeat). ``from_start``
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
        initial = roster_of(() if members is None else members).with_member(self.id)
        fresh = members is not None if from_start is None else from_start
        ended = self._ended_at.pop(group_tag(group), 0)
        first_seq = 1 if fresh else max((self.incarnation << 32), ended) + 1
        state = GroupStack(group, Order.parse(order), self.id, initial, self.params, self.rng, now, fresh,
                           first_seq=first_seq, incarnation=self.incarnation)
        self._groups[group] = state
        self._by_tag[state.tag] = state
        state.stream.follow_rounds(self.detector.next_round, now)
        out: list[Action] = []
        self._trace(out, "join", group=group)
        self._install(out, state, AgreedView(-1, ()), state.view)
        self._watch(now)
        jitter = self.params.beacon_interval * (0.5 + self.rng.random())
        state.changes.next_beacon = now if members is None else now + jitter  # a newcomer looks for the group at once
        if members is None:
            state.changes.joining = True  # until a member with our order answers
            self._multicast_hello(out, state, reply_wanted=True)
        return out

    def leave(self, group: str, now: float) -> list[Action]:
        """Leave ``group`` gracefully: tell the others so nobody waits to suspect us."""
        state = self._group(group)
        out: list[Action] = []
        self._flush(out, state, now)
        body = encode_leave(LeaveMsg(state.tag))
        # no answer is awaited: copies (each its own nonce) make a loss unlikely
        for _ in range(self.params.leave_copies):
            self._emit(out, Multicast(self._sealer.seal(MsgType.LEAVE, Flag.NONE, body), MsgType.LEAVE, group))
        self._trace(out, "leave", group=group, view_id=state.view.view_id)
        del self._groups[group]
        del self._by_tag[state.tag]
        if len(self._ended_at) >= MAX_LEFT:
            self._ended_at.pop(next(iter(self._ended_at)))  # oldest first
        self._ended_at[state.tag] = state.stream.contig_of(self.id)
        self._watch(now)
        return out

    def send_ready_at(self, group: str, now: float) -> float | None:
        """When the next multicast to ``group`` may go (flow control): ``now`` or
        later, or None while the window is full (wait for the node to progress)."""
        return self._group(group).ready_at(now)

    def multicast(self, group: str, payload: object, now: float) -> list[Action]:
        """Send ``payload`` (bytes-like) to every member of ``group``, this node
        included. Raises ``WouldBlock`` while the flow-control window is full."""
        state = self._group(group)
        payload = self._check_payload(payload)
        if state.ready_at(now) is None:
            raise WouldBlock(f"group {group!r}: {state.window()} messages await stability (window_max)")
        seq, outputs, optimistic = state.send(payload, now)
        self.last_sent = MessageId(self.id, self.incarnation, seq)
        out: list[Action] = []
        self._counts["sent"] += 1
        if len(self._groups) == 1:
            self.detector.note_multicast(now)  # every watched member hears from us directly
        if self.trace:  # the test here spares the hot path building the keywords
            out.append(_message_row("send", group, self.id, seq, state.order.value,
                                    (optimistic or state.view).view_id, optimistic is not None, len(payload), None))
        state.queue(outputs, now)  # flushed by handle_timeout, with whatever else is sent meanwhile
        state.accept_own(seq, outputs, payload)
        if state.events:
            self._drain(out, state, now)
        if state.outbox_full():
            self._flush(out, state, now)
        return out

    def unicast(self, group: str, member: int, payload: object, now: float) -> list[Action]:
        """Send ``payload`` (bytes-like) reliably to one member of ``group``."""
        state = self._group(group)
        if member not in state.view or member == self.id:
            raise UsageError(f"{member} is not another member of group {group!r}; see group.view")
        if self._address_of(member) is None:
            raise UsageError(f"no address known yet for member {member}; wait until it has been heard from")
        payload = self._check_payload(payload)
        if state.unicast_blocked(member):
            raise WouldBlock(f"group {group!r}: member {member} has not acknowledged {self.config.window_max} unicasts")
        seq, send = state.send_unicast(member, payload, now)
        self.last_sent = MessageId(self.id, self.incarnation, seq)
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
            header, body = decode_datagram_untrusted(data, self._sealer.key, self._sealer.cipher, self._verified_memo)
            if header.sender == self.id:
                return []  # our own multicast, looped back by the network
            if not self._replay.accept(header.sender, header.boot, header.counter):
                raise DecodeError("replay")
            if header.sender in self._addresses or len(self._addresses) < MAX_PEERS:
                self._addresses[header.sender] = src  # a restarted peer may have moved
            out = self._on_restart(header.sender, now) if self._replay.restarted else []
            out += _HANDLERS[header.msg_type](self, header, body, src, now)
            if self.detector.suspects or self.detector.failed:
                self._on_detector(out, self.detector.heard(header.sender, now), now)
            else:
                self.detector.heard(header.sender, now)
            return out
        except DecodeError as exc:
            return self._drop(exc.reason)

    def _on_restart(self, member: int, now: float) -> list[Action]:
        """A datagram from a new boot of ``member``: the process we knew is
        gone (its state, streams and promises with it), whatever its new self
        says. Every group that holds it excludes it as failed; the new
        incarnation comes back by merging. Without this, a survivor whose
        coordinator restarted kept hearing it (evidence of life) while the
        restarted members, which no longer list the survivor, ignored it:
        the survivor waited in the old view for ever (found by the randomized
        adversarial machine with restarts)."""
        out: list[Action] = []
        for state in list(self._groups.values()):
            if member in state.view:
                self._route(out, state, state.changes.member_restarted(member, now))
                self._drain(out, state, now)
        return out

    def handle_timeout(self, now: float) -> list[Action]:
        """Run every timer that is due at ``now``."""
        out: list[Action] = []
        self._on_detector(out, self.detector.on_timeout(now), now)
        next_round = self.detector.next_round
        if self._stall_checks:
            for name, at in list(self._stall_checks.items()):
                if at <= now:
                    del self._stall_checks[name]
                    if name in self._groups:
                        self._on_stall(out, self._groups[name], now)
        for state in list(self._groups.values()):
            if state.flush_at is not None and state.flush_at <= now:
                self._flush(out, state, now)
            if state.changes.beacon_due(now, self.params.beacon_interval):
                self._beacon(out, state, None)
            self._route(out, state, state.on_timeout(now))
            self._drain(out, state, now)
            state.stream.follow_rounds(next_round, now)
        return out

    def handle_unreachable(self, address: Address, now: float) -> list[Action]:
        """The driver learnt that nobody listens at ``address`` any more (ICMP
        port unreachable): the failure detector's pull stage has its answer."""
        out: list[Action] = []
        for member, known in list(self._addresses.items()):
            if known == address:
                self._on_detector(out, self.detector.on_unreachable(member, now), now)
        return out

    def handle_host_unreachable(self, member: int, address: Address, now: float) -> list[Action]:
        """A host check (``CheckHost``) found nobody at ``address``: the
        handshake was refused, or not answered in time. It answers the pull
        stage only while ``member`` is still a suspect being probed at that
        address; a result that comes after it was heard from (or moved) is
        ignored, since ``on_unreachable`` would make a live member a suspect."""
        if not self.detector.pulling(member) or self._address_of(member) != address:
            return []
        out: list[Action] = []
        self._on_detector(out, self.detector.on_unreachable(member, now), now)
        return out

    def next_deadline(self) -> float | None:
        """The earliest time at which ``handle_timeout`` has work, or None."""
        earliest = self.detector.next_deadline()
        if self._stall_checks:
            stall = min(self._stall_checks.values())
            earliest = stall if earliest is None else min(earliest, stall)
        for state in self._groups.values():  # a plain loop: the driver asks after every call
            deadline = state.next_deadline()
            if deadline is not None and (earliest is None or deadline < earliest):
                earliest = deadline
        return earliest

    # ------------------------------------------------------------------ queries

    def view(self, group: str) -> tuple[str, tuple[int, ...]]:
        state = self._group(group)
        return state.view.view_id, state.view.members

    def answered_change(self, group: str) -> bool:
        """A view change of ``group`` that we answered (or proposed) is under
        way here: its commit may be on its way and list us."""
        state = self._groups.get(group)
        return state is not None and state.changes.answered

    def waiting_messages(self, group: str) -> dict[str, list[tuple[int, int]]]:
        """(sender, seq) of messages received and not yet delivered, by reason:
        held for a view change, or waiting for their order. For diagnosis."""
        held, ordered = self._group(group).waiting()
        return {"view_change": held, "order": ordered}

    def occupancy(self, group: str) -> tuple[int, int]:
        """(messages held here: unstable records plus those waiting for a view
        change or their order; the flow window: unstable records)."""
        state = self._group(group)
        held, ordered = state.waiting()
        window = state.window()
        return window + len(held) + len(ordered), window

    def changing_view(self, group: str) -> bool:
        """A view change of ``group`` is under way here: sends are optimistic."""
        return self._group(group).changes.optimistic

    def order_of(self, group: str) -> Order:
        return self._group(group).order

    @property
    def groups(self) -> tuple[str, ...]:
        return tuple(self._groups)

    def statistics(self) -> NodeStatistics:
        c = self._counts
        streams = [g.stream_statistics() for g in self._groups.values()]

        def total(name: str) -> int:
            return sum(getattr(s, name) for s in streams)

        drops = dict(self._drops)
        for state in self._groups.values():  # records and messages dropped at a group's caps
            for reason, n in state.drop_counts().items():
                drops[reason] = drops.get(reason, 0) + n
        return NodeStatistics(
            datagrams_received=c["rx"], bytes_received=c["rx_bytes"], datagrams_sent=c["tx"],
            bytes_sent=c["tx_bytes"], messages_sent=c["sent"], messages_delivered=c["delivered"],
            dropped=sum(drops.values()), drop_reasons=drops, foreign=c["foreign"],
            duplicates=total("duplicates"), nacks_sent=total("nacks_sent"), retransmissions=total("retransmissions"),
            gossip_pushes=total("gossip_pushes"), repaired_by_nack=total("repaired_by_nack"),
            repaired_by_gossip=total("repaired_by_gossip"), buffered=total("buffered"),
            peak_buffered=total("peak_buffered"),
            unicast_retransmissions=sum(g.unicast_retransmissions() for g in self._groups.values()),
            groups=len(self._groups), fate_unknown=sum(g.fate_unknown for g in self._groups.values()),
            not_delivered=c["not_delivered"],
        )

    # ------------------------------------------------------------------ message handlers

    def _on_records(self, header: Header, body: bytes, src: Address, now: float) -> list[Action]:
        if _UNICAST_BIT[header.flags]:
            return self._on_unicast(header, body, now)
        tag, records = self._records_of(header, body)
        state = self._member_group(tag)
        if state is None:
            return []
        out: list[Action] = []
        state.on_records(header.sender, records, header.msg_type, now)
        if state.changes.completing():
            self._route(out, state, state.changes.progress(now))
        if state.events:
            self._drain(out, state, now)
        return out

    def _records_of(self, header: Header, body: bytes) -> tuple[int, tuple[Record, ...]]:
        """A records body, decoded once per datagram object where a memo is
        shared (the simulator: every receiver of a multicast then holds the
        same records, payloads included, in its buffer)."""
        memo = self._verified_memo
        if memo is None:
            return decode_records_untrusted(body)
        cached = memo.decoded(body, header.msg_type)
        if cached is not None:
            return cast("tuple[int, tuple[Record, ...]]", cached)
        decoded = decode_records_untrusted(body)
        memo.keep(body, header.msg_type, decoded)
        return decoded

    def _view_message_of(self, header: Header, body: bytes) -> ViewMessage:
        """``decode_view_message``, once per datagram object where a memo is
        shared (a 10,000-member proposal is 20 KB, multicast to all of them)."""
        memo = self._verified_memo
        if memo is None:
            return decode_view_message(header.msg_type, body)
        cached = memo.decoded(body, header.msg_type)
        if cached is not None:
            return cast(ViewMessage, cached)
        decoded = decode_view_message(header.msg_type, body)
        if type(decoded) is Beacon and decoded.members:
            decoded = _interned_beacon(decoded)
        memo.keep(body, header.msg_type, decoded)
        return decoded

    def _on_unicast(self, header: Header, body: bytes, now: float) -> list[Action]:
        dest, tag, records = decode_unicast_untrusted(body)
        state = self._member_group(tag)
        if state is None:
            return []
        if dest != self.id or any(r.sender != header.sender for r in records):
            return self._drop("misaddressed")
        if header.sender not in state.view:
            return []  # not (or no longer) a member: its unicasts wait for a shared view
        out: list[Action] = []
        ack = state.on_unicast_records(header.sender, records, now, header.boot >> 32)
        if state.events:
            self._drain(out, state, now)
        self._route(out, state, [ack])
        return out

    def _on_nack(self, header: Header, body: bytes, src: Address, now: float) -> list[Action]:
        tag, sender, ranges, pull = decode_nack_untrusted(body)
        state = self._member_group(tag)
        out: list[Action] = []
        if state is not None:
            self._route(out, state, state.on_nack(header.sender, sender, ranges, pull))
        return out

    def _on_entries(self, header: Header, body: bytes, src: Address, now: float) -> list[Action]:
        aggregate = None
        extra = 0  # a null's clock, or a stability announcement's roster
        if header.msg_type is MsgType.DIGEST:
            tag, entries, aggregate = decode_digest_untrusted(body)
        elif header.msg_type is MsgType.NULL:
            tag, entries, extra = decode_null_untrusted(body)
        elif header.msg_type is MsgType.STABLE:
            tag, extra, entries = decode_stable_untrusted(body)
        else:
            tag, entries = decode_entries_untrusted(body)
        state = self._member_group(tag)
        out: list[Action] = []
        if state is not None:
            self._route(out, state, state.on_entries(header.msg_type, header.sender, entries, now, aggregate, extra))
            if state.events:
                self._drain(out, state, now)
        return out

    def _on_hello(self, header: Header, body: bytes, src: Address, now: float) -> list[Action]:
        msg = decode_hello_untrusted(body)
        if msg.name:
            self._learn_name(header.sender, msg.name)
        state = self._member_group(msg.group_tag)
        if state is None:
            return []
        out: list[Action] = []
        if msg.names_wanted:  # a member of a merged view: it told its name, we tell ours
            reply = encode_hello(HelloMsg(state.tag, state.order, False, self._hello_name))
            self._emit(out, Send(src, self._sealer.seal(MsgType.HELLO, Flag.NONE, reply), MsgType.HELLO))
            return out
        if msg.order is not state.order:
            return self._order_mismatch(state, header.sender, msg, src, now)
        state.changes.joining = False  # a member with our order answered: we are in
        if msg.reply_wanted and header.sender not in state.view:
            if header.sender < self.id and state.changes.coordinating():
                # the lower coordinator merges, and this joiner missed our
                # beacon (it went out before the joiner listened; the next is
                # a beacon interval away): tell it of our component now
                self._beacon(out, state, src)
            else:  # a joiner announces itself: merge it without waiting for its beacon
                self._route(out, state, state.changes.merge_joiner(header.sender, now))
                self._drain(out, state, now)
        if msg.reply_wanted:
            reply = encode_hello(HelloMsg(state.tag, state.order, False, self._hello_name))
            self._emit(out, Send(src, self._sealer.seal(MsgType.HELLO, Flag.NONE, reply), MsgType.HELLO))
        return out

    def _on_leave(self, header: Header, body: bytes, src: Address, now: float) -> list[Action]:
        msg = decode_leave_untrusted(body)
        state = self._member_group(msg.group_tag)
        out: list[Action] = []
        if state is not None:
            self._route(out, state, state.changes.member_leaving(header.sender, now))
            self._drain(out, state, now)
        return out

    def _on_heartbeat(self, header: Header, body: bytes, src: Address, now: float) -> list[Action]:
        members, counters = decode_heartbeat_untrusted(body)
        out: list[Action] = []
        self._on_detector(out, self.detector.on_heartbeat(header.sender, members, counters, now), now)
        return out

    def _on_roster_heartbeat(self, header: Header, body: bytes, src: Address, now: float) -> list[Action]:
        roster, start, counters = decode_roster_heartbeat_untrusted(body)
        out: list[Action] = []
        self._on_detector(out, self.detector.on_roster_heartbeat(header.sender, roster, start, counters, now), now)
        return out

    def _on_probing(self, header: Header, body: bytes, src: Address, now: float) -> list[Action]:
        """PROBE, PROBE_ACK, ASK and ASK_REPLY: the detector's pull and ask
        stages; OBITUARY: a verdict told (ring form)."""
        msg = decode_untrusted(header.msg_type, body)
        detector, sender = self.detector, header.sender
        if type(msg) is Probe:
            outputs = detector.on_probe(sender, msg)
        elif type(msg) is Obituary:
            outputs = detector.on_obituary(sender, msg.member, now)
        elif type(msg) is Ask:
            outputs = detector.on_ask(sender, msg, now)
        elif type(msg) is AskReply:
            outputs = detector.on_ask_reply(sender, msg, now)
        else:
            outputs = []  # a probe's answer: the datagram itself is the evidence
        out: list[Action] = []
        self._on_detector(out, outputs, now)
        return out

    def _on_view_control(self, header: Header, body: bytes, src: Address, now: float) -> list[Action]:
        """BEACON, PROPOSE, FLUSH, COMMIT and INSTALLED: view agreement."""
        head = decode_control_untrusted(body, lists=False)
        state = self._member_group(head.group_tag)
        if state is None:
            return []
        if header.msg_type is MsgType.BEACON and state.changes.confirmed_beacon == (header.sender, head.a, head.epoch) \
                and head.epoch == state.view.epoch:
            return []  # our coordinator's beacon, whose member list we found to be our view
        msg = self._view_message_of(header, body)
        out: list[Action] = []
        self._route(out, state, state.changes.on_control(header.sender, msg, now, header.boot >> 32))
        self._drain(out, state, now)
        return out

    def _order_mismatch(self, state: GroupStack, member: int, msg: HelloMsg, src: Address, now: float) -> list[Action]:
        """A joiner with another order is never admitted, and our answer tells it
        so; a joiner that hears such an answer from a member is refused."""
        out = self._drop("order_mismatch")
        state.changes.reject(member)
        if msg.reply_wanted:
            reply = encode_hello(HelloMsg(state.tag, state.order, False, self._hello_name))
            self._emit(out, Send(src, self._sealer.seal(MsgType.HELLO, Flag.NONE, reply), MsgType.HELLO))
        elif state.changes.joining:
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

    def _check_payload(self, payload: object) -> bytes:
        """The payload as bytes, or a one-line ``UsageError``. Typed ``object``:
        compiled (mypyc), a ``bytes`` parameter would raise ``TypeError`` first."""
        if not isinstance(payload, (bytes, bytearray, memoryview)):
            raise UsageError(f"payload must be bytes, got {type(payload).__name__}")
        if len(payload) > self.config.max_message:
            raise UsageError(
                f"payload of {len(payload)} bytes exceeds Config.max_message={self.config.max_message}; "
                "raise it or send smaller messages"
            )
        return bytes(payload)

    def _watch(self, now: float) -> None:
        """The detector watches every member of every group we are in.

        A verdict must never be lost (a lost one wedged 8 processes: the
        coordinator held a member failed in its detector but no longer in its
        agreement, so it never acted on the member's real crash). After every
        install, each member of a view is either failed in that group's
        agreement, which then excludes it, or watched afresh by the detector:
        a merge that brought it back, or a verdict that arrived while it was
        not in our view, must not leave it unwatched for ever. The
        agreement's ``suspected`` set is re-read from the detector for the
        same reason (a suspicion raised while the member was outside the view)."""
        views = [state.view.members for state in self._groups.values()]
        if len(views) == 1:
            self.detector.set_members(views[0], now)  # the view's own (shared) roster
        else:
            self.detector.set_members({m for members in views for m in members}, now)
        detector = self.detector
        if detector.failed:
            held = {m for state in self._groups.values() for m in state.changes.failed_members()}
            for member in [m for m in detector.failed if m not in held]:
                detector.readmit(member, now)
        for state in self._groups.values():
            state.changes.reread_suspicions(detector.suspects)

    def _on_detector(self, out: list[Action], outputs: list, now: float) -> None:
        for output in outputs:
            if type(output) is FdSend:
                address = self._address_of(output.dst)
                if address is not None:
                    self._emit(out, Send(address, self._sealer.seal(output.msg_type, Flag.NONE, output.body),
                                         output.msg_type))
            else:
                self._on_fd_event(out, output, now)

    def _on_fd_event(self, out: list[Action], event: FdEvent, now: float) -> None:
        kind, member = event.kind, event.member
        busy = kind is Verdict.BUSY
        if kind is not Verdict.FAILED:  # trace schema 1 has no such kind: the view shows the failure
            self._trace(out, "unsuspect" if busy else kind.value, target=member, reason="busy" if busy else None)
        for state in list(self._groups.values()):
            if kind is Verdict.SUSPECT:
                if state.changes.suspect(member):
                    out.append(MemberSuspected(member, state.name))
            elif kind is Verdict.FAILED:
                if member in state.view:
                    self._route(out, state, state.changes.member_failed(member, now))
                    self._drain(out, state, now)
            elif state.changes.member_alive(member) and busy:
                out.append(MemberBusy(member, state.name))
        if kind is Verdict.SUSPECT and self.params.host_check:
            self._check_host(out, member)
        if kind is Verdict.FAILED and not event.told and self.params.ring_heartbeats:
            self._tell_verdict(out, member)
            self._check_for_stall(member, now)

    def _check_host(self, out: list[Action], member: int) -> None:
        """Ask the driver to check ``member``'s host: once per suspicion, not
        per group, and only while the pull stage runs (a suspicion raised by
        an ICMP refusal is past it already). No random draw: recorded
        simulator seeds replay unchanged."""
        if self.detector.pulling(member):
            address = self._address_of(member)
            if address is not None:
                out.append(CheckHost(member, address))

    def _check_for_stall(self, member: int, now: float) -> None:
        """Ring form: look again after a while whether a change excluded
        ``member``; first the member whose watched predecessors all failed
        (the first of its side of a partition), then the others, a
        ``view_timeout`` apart (``_on_stall``)."""
        at = now + self.params.view_timeout * (1 + self.detector.live_predecessors())
        for state in self._groups.values():
            if member in state.view:
                self._stall_checks[state.name] = min(self._stall_checks.get(state.name, at), at)

    def _on_stall(self, out: list[Action], state: GroupStack, now: float) -> None:
        """Our verdict stands and no change came: if our coordinator has been
        silent for two beacon intervals (it beacons every one), take charge."""
        coordinator = state.changes.coordinator()
        if coordinator == self.id:
            return
        try:
            silent = now - self.detector.heard_from(coordinator) >= 2 * self.params.beacon_interval
        except KeyError:
            silent = True
        if silent:
            self._route(out, state, state.changes.take_charge(now))
            self._drain(out, state, now)

    def _tell_verdict(self, out: list[Action], member: int) -> None:
        """Ring form: our verdict on ``member`` to the lowest live members of
        each view holding it (its coordinator, and the next ones in case the
        coordinator failed too), who did not watch it themselves."""
        told: set[int] = set()
        for state in self._groups.values():
            if member in state.view:
                told.update(state.changes.lowest_live(VERDICT_HEARERS, besides=(self.id, member)))
        if not told:
            return
        body = encode(Obituary(member))
        for target in sorted(told):
            address = self._address_of(target)
            if address is not None:
                self._emit(out, Send(address, self._sealer.seal(MsgType.OBITUARY, Flag.NONE, body),
                                     MsgType.OBITUARY))

    def _drain(self, out: list[Action], state: GroupStack, now: float) -> None:
        """Report what the group did, in order: deliveries and, around a view
        change, old-view deliveries, the optimistic view, the new view,
        rollbacks and new-view deliveries."""
        installed = False
        for event in state.take_events():
            if type(event) is Delivered:
                dest, view_id = self.id if event.unicast else None, event.view_id
                for message in event.messages:
                    self._deliver(out, state, message, dest, view_id)
            elif type(event) is OptimisticBegan:
                view = event.view
                out.append(OptimisticView(view.view_id, view.members, state.name))
                self._trace(out, "view", group=state.name, view_id=view.view_id, members=view.members,
                            optimistic=True)
            elif type(event) is Installed:
                self._install(out, state, event.old, event.new, event.leavers, event.rejoined)
                installed = True
            elif type(event) is RolledBack:
                message = event.message
                out.append(Rollback(((message.sender, message.seq),), state.name))
                self._trace(out, "rollback", group=state.name, sender=message.sender, seq=message.seq,
                            order=state.order.value, view_id=state.view.view_id)
            elif type(event) is Undelivered:
                self._counts["not_delivered"] += 1
                out.append(NotDelivered(state.name, MessageId(self.id, self.incarnation, event.seq), event.reason,
                                        event.dest))
                self._trace(out, "not_delivered", group=state.name, sender=self.id, seq=event.seq,
                            order=state.order.value, view_id=state.view.view_id, reason=event.reason,
                            dest=event.dest)
            elif type(event) is Transitional:
                view = event.view
                out.append(TransitionalView(state.name, view.view_id, event.members))
                self._trace(out, "transitional", group=state.name, view_id=view.view_id, members=event.members)
        if installed:
            self._watch(now)

    def _install(self, out: list[Action], state: GroupStack, old: AgreedView, new: AgreedView,
                 leavers: frozenset[int] = frozenset(), rejoined: frozenset[int] = frozenset()) -> None:
        """``rejoined``: members of both views that did not move from ``old``
        with us; they are reported both failed and joined."""
        # set differences in C: views can hold thousands of members
        gone = tuple(sorted(old.member_set - new.member_set | rejoined))
        failed = tuple(m for m in gone if m not in leavers or m in rejoined)
        left = tuple(m for m in gone if m in leavers and m not in rejoined)
        joined = tuple(sorted(new.member_set - old.member_set | rejoined)) if old.members else ()
        out.append(ViewInstalled(state.name, new.view_id, new.members, joined, left, failed))
        self._trace(out, "view", group=state.name, view_id=new.view_id, members=new.members, optimistic=False)
        self._ask_names(out, state, joined)

    def _ask_names(self, out: list[Action], state: GroupStack, joined: tuple[int, ...]) -> None:
        """Joiners tell their names in their HELLO, and the members answering
        tell theirs; members of a group that formed apart and merged in told
        us nothing. Ask them (telling ours), when they are at most
        ``NAMES_ASKED_MAX``: in a merge of two large groups the cost would be
        quadratic, so only the smaller side's members are named there (the
        larger side asks them, and each asking tells its own name)."""
        if not self._hello_name:
            return  # under the former keys HELLOs carry no names
        unknown = [m for m in joined if m not in self._names]
        if not unknown or len(unknown) > NAMES_ASKED_MAX:
            return
        body = encode_hello(HelloMsg(state.tag, state.order, False, self._hello_name, names_wanted=True))
        for member in unknown:
            address = self._address_of(member)
            if address is not None:
                self._emit(out, Send(address, self._sealer.seal(MsgType.HELLO, Flag.NONE, body), MsgType.HELLO))

    def _deliver(self, out: list[Action], state: GroupStack, message: Message, dest: int | None,
                 view_id: str) -> None:
        self._counts["delivered"] += 1
        out.append(tuple.__new__(Deliver, (message.sender, message.seq, message.payload, view_id, state.name, dest)))
        if self.trace:
            out.append(_message_row("deliver", state.name, message.sender, message.seq, state.order.value, view_id,
                                    False, len(message.payload), dest))

    def _flush(self, out: list[Action], state: GroupStack, now: float) -> None:
        self._route(out, state, state.take_outbox(now))
        if state.events:  # own messages of an ordered group, ordered at the flush
            self._drain(out, state, now)

    def _route(self, out: list[Action], state: GroupStack, outputs: list) -> None:
        """Frame transport outputs as datagrams: multicast, or to a member's address."""
        for msg_type, dst, flags, body in state.frame(outputs):
            data = self._sealer.seal(msg_type, flags, body)
            if dst is None:
                self._emit(out, Multicast(data, msg_type, state.name))
                continue
            address = self._address_of(dst)
            if address is None:
                self._drops["no_address"] = self._drops.get("no_address", 0) + 1
                continue
            self._emit(out, Send(address, data, msg_type))

    def _beacon(self, out: list[Action], state: GroupStack, to: Address | None) -> None:
        """Our component's beacon: multicast, or to one joiner's address."""
        beacon = state.changes.beacon(self.incarnation)
        if to is None:
            self._route(out, state, [beacon])
        else:
            self._emit(out, Send(to, self._sealer.seal(beacon.msg_type, Flag.NONE, beacon.body), beacon.msg_type))

    def _learn_name(self, member: int, name: str) -> None:
        names = self._names
        if member not in names and len(names) >= NAMES_MAX:
            del names[next(iter(names))]  # the longest known: names are hints, ids are identity
        names[member] = name

    def name_of(self, member: int) -> str | None:
        """``member``'s ``Config.name`` as its HELLO gave it (None: not heard;
        the members of a group tell theirs to each joiner, and a joiner to them)."""
        return self.config.name if member == self.id else self._names.get(member)

    def _multicast_hello(self, out: list[Action], state: GroupStack, reply_wanted: bool) -> None:
        body = encode_hello(HelloMsg(state.tag, state.order, reply_wanted, self._hello_name))
        data = self._sealer.seal(MsgType.HELLO, Flag.NONE, body)
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


def _interned_beacon(beacon: Beacon) -> Beacon:
    """``beacon`` listing its members by their roster's own tuple when it is
    one (sorted, no duplicates): each of the coordinator's 10,000 receivers
    then finds its view in it by identity, not by comparing 10,000 ids."""
    members = roster_of(beacon.members).members
    if members is beacon.members or members != beacon.members:
        return beacon
    return dataclasses.replace(beacon, members=members)


def _message_row(kind: str, group: str, sender: int, seq: int, order: str, view_id: str, optimistic: bool,
                 size: int, dest: int | None) -> TraceEvent:
    """A ``send`` or ``deliver`` row, built as a tuple (C): one per message per member."""
    return tuple.__new__(TraceEvent, (kind, group, sender, seq, order, view_id, None, optimistic, None, size, dest,
                                      None))


def _check_group_name(name: str) -> None:
    if not isinstance(name, str) or not name or len(name.encode()) > MAX_GROUP_NAME:
        raise UsageError(f"group name must be a non-empty string of at most {MAX_GROUP_NAME} UTF-8 bytes")


_UNICAST_BIT: tuple[bool, ...] = tuple(bool(Flag(bits) & Flag.UNICAST) for bits in range(256))
"""``flags & Flag.UNICAST`` by table: IntFlag arithmetic costs a microsecond per datagram."""


_HANDLERS: dict[MsgType, _Handler] = {
    **dict.fromkeys((MsgType.DATA, MsgType.RETRANSMIT, MsgType.GOSSIP), Node._on_records),
    MsgType.NACK: Node._on_nack,
    **dict.fromkeys((MsgType.DIGEST, MsgType.NULL, MsgType.STABLE, MsgType.UNICAST_ACK), Node._on_entries),
    MsgType.HELLO: Node._on_hello,
    MsgType.LEAVE: Node._on_leave,
    MsgType.HEARTBEAT: Node._on_heartbeat,
    MsgType.HEARTBEAT_ROSTER: Node._on_roster_heartbeat,
    **dict.fromkeys((MsgType.PROBE, MsgType.PROBE_ACK, MsgType.ASK, MsgType.ASK_REPLY, MsgType.OBITUARY),
                    Node._on_probing),
    **dict.fromkeys((MsgType.BEACON, MsgType.PROPOSE, MsgType.FLUSH, MsgType.COMMIT, MsgType.INSTALLED),
                    Node._on_view_control),
}
