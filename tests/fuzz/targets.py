"""Fuzz targets: every ``decode_*_untrusted`` of ``sgcs.wire`` and the node's
datagram handler (issue 8, part 4).

Every target takes one ``bytes`` input, so any engine can drive it: atheris
(coverage-guided, ``run.py``), hypothesis (``tests/test_fuzz.py``) or plain
random mutation. A target returns normally on a clean drop; any exception it
lets out is a finding.

The node target reads its input as a small program: a header byte picks the
node's id, order and whether it joins by discovery; then each op sends one
datagram (built from the ``encode_*`` functions, or raw bytes, then mutated),
replays one, advances the clock and runs the timers, or multicasts. Datagrams
are sealed with the group's real key by ``seal_datagram``, the one place that
knows how, so the fuzz gets past the MAC and into the protocol logic.
"""

from __future__ import annotations

import hashlib
import hmac
import random
import re
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from sgcs import wire
from sgcs.actions import Multicast, Send
from sgcs.config import Config, Order
from sgcs.errors import DecodeError, UsageError, WouldBlock
from sgcs.node import Node
from sgcs.records import Record
from sgcs.membership.messages import (MESSAGES, CommitMsg, ControlMessage, Flush, InstalledMsg, Propose,
                                      decode_untrusted, encode)
from sgcs.wire import Control, Flag, HelloMsg, LeaveMsg, MsgType

from _memnet import Datagram, MemoryNetwork

SECRET = b"fuzz-secret-16-bytes"
KEY = wire.derive_key(SECRET)
GROUP = "g"
TAG = wire.group_tag(GROUP)
ORDERS = (Order.FIFO, Order.CAUSAL, Order.TOTAL, Order.SAFE)

# Small pools make coincidences likely: a fuzzed epoch or sequence number must
# often equal the node's own for the deep paths (commit, repair) to run.
MEMBERS = (1, 2, 3, 4, 5, 0, 6, 2**32, 2**63 - 1)
INTS = (0, 1, 2, 3, 4, 5, 6, 8, 16, 64, 255, 256, 2**16 - 1, 2**31, 2**32, 2**32 + 1, 2**62, 2**63 - 1, 2**63,
        2**64 - 1)
STEPS = (0.0, 0.001, 0.01, 0.05, 0.1, 0.2, 0.5, 1.0, 3.0, 30.0)
MAX_OPS = 64


class Reader:
    """Reads an input as a stream of choices; past its end every read is 0,
    so every byte string is a valid program."""

    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def more(self) -> bool:
        return self.pos < len(self.data)

    def byte(self) -> int:
        if self.pos >= len(self.data):
            return 0
        self.pos += 1
        return self.data[self.pos - 1]

    def u16(self) -> int:
        return self.byte() << 8 | self.byte()

    def take(self, n: int) -> bytes:
        chunk = self.data[self.pos : self.pos + n]
        self.pos += len(chunk)
        return chunk

    def pick(self, pool: tuple) -> object:
        return pool[self.byte() % len(pool)]

    def int(self, bits: int = 64) -> int:
        """Mostly a pool value, sometimes raw bytes; masked to fit ``bits``."""
        choice = self.byte()
        value = INTS[choice % len(INTS)] if choice < 240 else int.from_bytes(self.take(8).ljust(8, b"\0"), "big")
        return value & ((1 << bits) - 1)

    def member(self) -> int:
        choice = self.byte()
        return MEMBERS[choice % len(MEMBERS)] if choice < 250 else self.int(63)

    def tag(self) -> int:
        choice = self.byte()
        return TAG if choice < 224 else 0 if choice < 240 else self.int()

    def entries(self, limit: int = 6) -> tuple[tuple[int, int], ...]:
        return tuple((self.member(), self.int(63)) for _ in range(self.byte() % limit))

    def records(self) -> list[Record]:
        return [Record(self.member(), self.int(), self.entries(4), self.byte(), self.take(self.byte() % 48),
                       self.int(63) if self.byte() & 1 else 0)
                for _ in range(1 + self.byte() % 3)]


# ---------------------------------------------------------------- sealing

try:  # per-sender (boot, counter) nonces and replay protection (issue 8, part 1)
    from sgcs.security import Sealer
except ImportError:  # an sgcs before sgcs.security: plain wire.seal
    Sealer = None  # type: ignore[assignment,misc]

ENCRYPTION = Sealer is not None and "encrypt" in Config.__dataclass_fields__


def seal_datagram(sealers: dict[int, Any], msg_type: int, flags: int, sender: int, body: bytes,
                  encrypt: bool = False, boot: int = 1 << 32) -> bytes:
    """Frame and authenticate one fuzzed datagram as ``sender``, a member
    holding the group secret, would. The only function that knows the sealing
    API. ``sealers`` keeps one Sealer per sender, so each datagram gets a fresh
    counter and only a deliberate replay is caught as one."""
    if Sealer is None:
        return wire.seal(KEY, msg_type, flags, sender, body)  # type: ignore[arg-type]
    sealer = sealers.get(sender)
    if sealer is None or sealer.boot != boot:
        sealer = sealers[sender] = Sealer(SECRET, sender, boot, encrypt)
    return sealer.seal(msg_type, flags, body)  # type: ignore[no-any-return]


def tag_raw(signed: bytes) -> bytes:
    """Append a valid tag to arbitrary header-and-body bytes (bad magic,
    version or type still reach the checks after the MAC)."""
    return signed + hmac.digest(KEY, signed, "sha256")[: wire.TAG_LEN]


# ---------------------------------------------------------------- decoder targets


_CIPHER = __import__("sgcs.security").security.Cipher(SECRET) if ENCRYPTION else None


def _datagram(data: bytes) -> object:
    """First byte: bit 1 decodes as an encrypting node; else bit 0 tags the
    rest validly, so the checks after the MAC run."""
    mode, datagram = (data[0] if data else 0), data[1:]
    if mode & 2 and _CIPHER is not None:
        return wire.decode_datagram_untrusted(datagram, KEY, _CIPHER)  # type: ignore[call-arg]
    return wire.decode_datagram_untrusted(tag_raw(datagram) if mode & 1 else datagram, KEY)


def _control(data: bytes) -> object:
    return wire.decode_control_untrusted(data[1:], lists=bool(data[:1] and data[0] & 1))


_CONTROL_TYPES = sorted(MESSAGES)


def _typed_control(data: bytes) -> object:
    """The first byte picks a control type of the registry; the rest is its body."""
    return decode_untrusted(_CONTROL_TYPES[(data[0] if data else 0) % len(_CONTROL_TYPES)], data[1:])


def _acks(data: bytes) -> object:
    return wire.decode_acks_untrusted(data[1:], data[0] % 16 if data else 0)


def _one(name: str) -> Callable[[bytes], object]:
    return getattr(wire, name)  # type: ignore[no-any-return]


def _seed_records() -> list[Record]:
    return [Record(2, 1, ((1, 3), (2, 0)), 0, b"x"), Record(3, 2**32 + 1, (), 1, b"")]


@dataclass(frozen=True)
class DecoderTarget:
    call: Callable[[bytes], object]
    seeds: tuple[bytes, ...]
    """Valid inputs: where mutation starts, and proof the target reaches the body."""


def _decoder_targets() -> dict[str, DecoderTarget]:
    entries = wire.encode_acks(((1, 5), (2, 0), (2**40, 7)))
    control = wire.encode_control(Control(TAG, 3, 1, 2, 0, (((1, 0), (2, 0)), ((1, 4),), ())))
    hb = wire.encode_heartbeat(np.array([1, 2, 3]), np.array([5, 0, 70000]))
    return {
        "decode_datagram_untrusted": DecoderTarget(_datagram, (
            b"\x00" + seal_datagram({}, MsgType.DATA, 0, 2, wire.encode_records(TAG, _seed_records())),
            b"\x00" + seal_datagram({}, MsgType.HEARTBEAT, 0x80, 2, b"body"),
            *([b"\x02" + seal_datagram({}, MsgType.NACK, 0, 3, b"n", encrypt=True)] if ENCRYPTION else []))),
        "decode_hello_untrusted": DecoderTarget(_one("decode_hello_untrusted"), (
            wire.encode_hello(HelloMsg(TAG, Order.TOTAL, True)),)),
        "decode_leave_untrusted": DecoderTarget(_one("decode_leave_untrusted"), (wire.encode_leave(LeaveMsg(TAG)),)),
        "decode_acks_untrusted": DecoderTarget(_acks, (b"\x00" + entries,)),
        "decode_records_untrusted": DecoderTarget(_one("decode_records_untrusted"), (
            wire.encode_records(TAG, _seed_records()),)),
        "decode_nack_untrusted": DecoderTarget(_one("decode_nack_untrusted"), (
            wire.encode_nack(TAG, 2, ((1, 3), (7, 7)), True),)),
        "decode_entries_untrusted": DecoderTarget(_one("decode_entries_untrusted"), (
            wire.encode_entries(TAG, ((1, 5), (3, 2))),)),
        "decode_null_untrusted": DecoderTarget(_one("decode_null_untrusted"), (
            wire.encode_null(TAG, ((1, 5), (3, 2)), 9),)),
        "decode_stable_untrusted": DecoderTarget(_one("decode_stable_untrusted"), (
            wire.encode_stable(TAG, 7, ((1, 5), (3, 2))),)),
        "decode_digest_untrusted": DecoderTarget(_one("decode_digest_untrusted"), (
            wire.encode_digest(TAG, ((1, 5),), None), wire.encode_digest(TAG, ((1, 5),), (2, 3, ((2, 1),), 0, 4, 0)),
            wire.encode_digest(TAG, ((1, 5),), (2, 3, ((2, 1),), 17, 65_535, 1)))),
        "decode_unicast_untrusted": DecoderTarget(_one("decode_unicast_untrusted"), (
            wire.encode_unicast(1, TAG, _seed_records()),)),
        "decode_heartbeat_untrusted": DecoderTarget(_one("decode_heartbeat_untrusted"), (hb,)),
        "decode_roster_heartbeat_untrusted": DecoderTarget(_one("decode_roster_heartbeat_untrusted"), (
            wire.encode_roster_heartbeat(7, 0, np.array([1, 2, 65535], dtype=np.int64)),)),
        "decode_control_untrusted": DecoderTarget(_control, (b"\x01" + control, b"\x00" + control)),
        "messages.decode_untrusted": DecoderTarget(_typed_control, tuple(
            bytes([_CONTROL_TYPES.index(example.TYPE)]) + encode(example) for example in _typed_examples())),
    }


def _typed_examples() -> list[ControlMessage]:
    """One well-formed message of every class in the registry (the fuzz corpus seeds)."""
    from sgcs.membership.messages import Ask, AskReply, Beacon, Obituary, Probe, ProbeAck
    examples: list[ControlMessage] = [
        Propose(TAG, 3, 1, 1, (1, 2)), Flush(TAG, 3, 1, 4, 0, ((1, 4),), 7), CommitMsg(TAG, 3, 1, 1, ((1, 0), (2, 0)),
                                                                                         ((1, 4),), ()),
        InstalledMsg(TAG, 3, 1), Beacon(TAG, 3, 1, 0, (1, 2)), Probe(9), ProbeAck(9), Ask(2, 9), AskReply(2, 50),
        Obituary(2)]
    assert {type(e) for e in examples} == set(MESSAGES.values())
    return examples


def wire_decoder_names() -> list[str]:
    """Every untrusted decoder ``sgcs.wire`` defines, found by name, so that a
    new one cannot be left without a target, and the control-message registry's."""
    found = [n for n, f in vars(wire).items() if re.fullmatch(r"decode_\w+_untrusted", n) and callable(f)]
    return sorted([*found, "messages.decode_untrusted"])


DECODERS = _decoder_targets()


def decoder_target(name: str) -> Callable[[bytes], None]:
    call = DECODERS[name].call

    def target(data: bytes) -> None:
        try:
            call(data)
        except DecodeError:
            pass  # the contract: the only exception an untrusted decoder may raise

    return target


# ---------------------------------------------------------------- node target


@dataclass
class Harness(MemoryNetwork[Node]):
    """One node joined to GROUP on the shared in-memory network, where the fuzz
    plays every peer (``("peer", n)``), and what it has sent the node so far."""

    last: bytes = b""
    last_src: int = 0
    own_proposal: Propose | None = None
    """The node's latest PROPOSE, so a FLUSH or INSTALLED can answer it."""
    peer_proposal: tuple[int, Propose] | None = None
    """(sender, msg) of the latest fuzzed PROPOSE, so a COMMIT can match it."""
    encrypt: bool = False
    sealers: dict[int, Any] = field(default_factory=dict)
    boots: dict[int, int] = field(default_factory=dict)
    """A sender's current boot; the fuzz restarts senders to move it."""
    address: Any = field(init=False, default=None)
    """The node's own address, ``("peer", its id)``."""

    def __post_init__(self) -> None:
        (self.address,) = self.nodes
        self.observer = self._watch

    @property
    def node(self) -> Node:
        return self.nodes[self.address]

    def send(self, msg_type: int, flags: int, sender: int, body: bytes) -> None:
        boot = self.boots.get(sender, 1 << 32)
        self.feed(seal_datagram(self.sealers, msg_type, flags, sender, body, self.encrypt, boot), sender)

    def feed(self, data: bytes, src: int = 0) -> None:
        self.last, self.last_src = data, src
        self.inject(Datagram(("peer", src), self.address, data))

    def observe(self, actions: list) -> None:
        """Take the actions of a call on the node (its sends go nowhere: no peer runs)."""
        self.submit(self.address, actions)

    def _watch(self, node: Any, action: Any) -> None:
        if type(action) in (Send, Multicast) and action.msg_type is MsgType.PROPOSE:
            cipher = (_CIPHER,) if self.encrypt else ()  # an sgcs before encryption takes no cipher
            _, body = wire.decode_datagram_untrusted(action.data, KEY, *cipher)
            proposal = decode_untrusted(MsgType.PROPOSE, body)
            assert isinstance(proposal, Propose)
            self.own_proposal = proposal


def _control_body(r: Reader, h: Harness, msg_type: MsgType) -> tuple[int, bytes]:
    """A control message: free fields and lists (any shape, for the strict
    decoders of ``sgcs.membership.messages``), or, often, a well-formed
    message of the type's class in the registry that answers the proposal in
    flight."""
    sender = r.member()
    lists = tuple(r.entries() for _ in range(r.byte() % (wire.MAX_ENTRY_LISTS + 1)))
    free = Control(r.tag(), r.int(63), r.int(32), r.int(63), r.int(63), lists)
    answer = r.byte() % 4  # 0: free; else match the proposal in flight, if any
    cls = MESSAGES[msg_type]
    msg: ControlMessage | None = None
    if answer and cls is Flush and h.own_proposal is not None:
        p = h.own_proposal
        sender = (p.members or (sender,))[r.byte() % max(1, len(p.members))]
        msg = Flush(p.group_tag, p.epoch, p.attempt, free.a, free.b, lists[0] if lists else (), r.int(62))
    elif answer and cls is InstalledMsg and h.own_proposal is not None:
        p = h.own_proposal
        sender = (p.members or (sender,))[r.byte() % max(1, len(p.members))]
        msg = InstalledMsg(p.group_tag, p.epoch, p.attempt)
    elif answer and cls is CommitMsg and h.peer_proposal is not None:
        sender, p = h.peer_proposal
        msg = CommitMsg(p.group_tag, p.epoch, p.attempt, sender, tuple((m, 0) for m in p.members), r.entries(),
                        r.entries())
    elif answer and cls is Propose:
        members = tuple(sorted({h.node.id, sender, *(r.member() for _ in range(r.byte() % 4))}))
        msg = Propose(TAG, free.epoch % 8, 1 + free.attempt % 4, sender, members)
    if isinstance(msg, Propose):
        h.peer_proposal = (sender, msg)
    return sender, encode(msg) if msg is not None else wire.encode_control(free)


def _structured(r: Reader, h: Harness) -> tuple[int, int, int, bytes]:
    """(type, flags, sender, body): a well-formed body of a random type."""
    msg_type = MsgType(1 + r.byte() % len(MsgType))
    flags, sender = 0, r.member()
    if msg_type in (MsgType.DATA, MsgType.RETRANSMIT, MsgType.GOSSIP):
        records = r.records()
        if r.byte() & 1:  # a unicast: its records must be the sender's own
            flags = Flag.UNICAST
            records = [Record(sender, x.seq, x.acks, x.flags, x.payload, x.clock) for x in records]
            body = wire.encode_unicast(h.node.id if r.byte() < 224 else r.member(), r.tag(), records)
        else:
            body = wire.encode_records(r.tag(), records)
    elif msg_type is MsgType.NACK:
        ranges = tuple((min(a, b), max(a, b)) for a, b in ((r.int(63), r.int(63)) for _ in range(r.byte() % 4)))
        body = wire.encode_nack(r.tag(), r.member(), ranges, bool(r.byte() & 1))
    elif msg_type is MsgType.DIGEST:
        aggregate = (r.byte() % 64, r.int(32), r.entries(), r.int(63) if r.byte() & 1 else 0, r.int(16), r.byte() % 4) \
            if r.byte() & 1 else None
        body = wire.encode_digest(r.tag(), r.entries(), aggregate)
    elif msg_type is MsgType.NULL:
        body = wire.encode_null(r.tag(), r.entries(), r.int(63) if r.byte() & 1 else 0)
    elif msg_type is MsgType.STABLE:
        roster = h.node.detector._roster_tag if r.byte() < 192 else r.int(32)
        body = wire.encode_stable(r.tag(), roster, r.entries())
    elif msg_type is MsgType.UNICAST_ACK:
        body = wire.encode_entries(r.tag(), r.entries())
    elif msg_type is MsgType.HELLO:
        body = wire.encode_hello(HelloMsg(r.tag(), ORDERS[r.byte() % 4], bool(r.byte() & 1)))
    elif msg_type is MsgType.LEAVE:
        body = wire.encode_leave(LeaveMsg(r.tag()))
    elif msg_type is MsgType.HEARTBEAT:
        n = r.byte() % 6
        body = wire.encode_heartbeat(np.array([r.member() for _ in range(n)], dtype=np.uint64),
                                     np.array([r.u16() for _ in range(n)], dtype=np.int64))
    elif msg_type is MsgType.HEARTBEAT_ROSTER:
        h_roster = h.node.detector._roster_tag if r.byte() < 192 else r.int(32)
        body = wire.encode_roster_heartbeat(h_roster, r.byte() % 8, np.array([r.u16() for _ in range(r.byte() % 6)],
                                                                                dtype=np.int64))
    else:
        sender, body = _control_body(r, h, msg_type)
    return msg_type, flags, sender, body


def _mutate(r: Reader, body: bytes) -> bytes:
    """A few byte-level edits, so near-valid bodies reach every length check."""
    out = bytearray(body)
    for _ in range(r.byte() % 4 if r.byte() < 64 else 0):
        pos, value, kind = r.u16() % (len(out) + 1), r.byte(), r.byte() % 3
        if kind == 0 and pos < len(out):
            out[pos] ^= value or 1
        elif kind == 1:
            del out[pos:]
        else:
            out[pos:pos] = bytes([value])
    return bytes(out)


def _op_structured(r: Reader, h: Harness) -> None:
    msg_type, flags, sender, body = _structured(r, h)
    if r.byte() < 16:  # type confusion: a body under another header
        msg_type, flags = r.byte(), r.byte()
    h.send(msg_type, flags, sender, _mutate(r, body))


def _op_raw(r: Reader, h: Harness) -> None:
    h.send(r.byte(), r.byte(), r.member(), r.take(r.u16() % 512))


def _op_unsealed(r: Reader, h: Harness) -> None:
    h.feed(r.take(r.u16() % 512))


def _op_replay(r: Reader, h: Harness) -> None:
    if h.last:
        h.feed(h.last, h.last_src)


def _op_unicast(r: Reader, h: Harness) -> None:
    try:
        h.observe(h.node.unicast(GROUP, r.member(), r.take(r.byte() % 64), h.now))
    except (WouldBlock, UsageError):
        pass  # not a member, no address yet, or a full window: local API answers


def _op_rejoin(r: Reader, h: Harness) -> None:
    """Leave and join again: state of the old membership must not leak."""
    if GROUP in h.node.groups:
        h.observe(h.node.leave(GROUP, h.now))
    setup = r.byte()
    h.observe(h.node.join(GROUP, h.now, ORDERS[setup & 3], members=None if setup & 4 else (1, 2, 3)))


def _op_unreachable(r: Reader, h: Harness) -> None:
    h.observe(h.node.handle_unreachable(("peer", r.member()), h.now))


def _op_restart(r: Reader, h: Harness) -> None:
    """A sender restarts: a new boot, its counter from 1 again."""
    h.boots[r.member()] = r.int()


def _op_tick(r: Reader, h: Harness) -> None:
    step = r.pick(STEPS)
    deadline = h.node.next_deadline()
    if r.byte() & 1 and deadline is not None and deadline > h.now:
        h.now = deadline  # exactly at the deadline: the timer's own edge
    else:
        h.now += step  # type: ignore[operator]
    h.observe(h.node.handle_timeout(h.now))


def _op_multicast(r: Reader, h: Harness) -> None:
    try:
        h.observe(h.node.multicast(GROUP, r.take(r.byte()), h.now))
    except (WouldBlock, UsageError):
        pass  # a full window, or the group was left (order mismatch): local API answers


OPS = (_op_structured, _op_structured, _op_structured, _op_raw, _op_unsealed, _op_replay, _op_tick, _op_tick,
       _op_multicast, _op_restart, _op_unicast, _op_rejoin, _op_unreachable)


def make_harness(r: Reader) -> Harness:
    setup = r.byte()
    encrypt = ENCRYPTION and setup & 0x60 == 0x60  # a quarter of the inputs: AES-GCM costs time
    config = Config(secret=SECRET, encrypt=True) if encrypt else Config(secret=SECRET)  # type: ignore[call-arg]
    node = Node(1 + (setup >> 4 & 1), config, random.Random(setup), resolve=lambda n: ("peer", n),
                trace=bool(setup & 8))
    h = Harness({("peer", node.id): node}, encrypt=encrypt)
    h.observe(node.join(GROUP, 0.0, ORDERS[setup & 3], members=None if setup & 4 else (1, 2, 3)))
    return h


def node_target(data: bytes) -> None:
    """Run one fuzzed program against a fresh node; raises on a finding."""
    r = Reader(data)
    h = make_harness(r)
    for _ in range(MAX_OPS):
        if not r.more():
            break
        OPS[r.byte() % len(OPS)](r, h)
    h.now += 10.0  # let every timer run once more on whatever state the fuzz left
    h.observe(h.node.handle_timeout(h.now))
    h.node.statistics()


def node_seeds() -> list[bytes]:
    """One program per message type and node set-up, all choices 0 after that."""
    seeds = []
    for setup in (0x00, 0x02, 0x03, 0x14, 0x1A):
        for kind in range(len(MsgType)):
            seeds.append(bytes([setup, 0, kind]) + bytes(24) + bytes([6, 4, 1]) + bytes([0, kind, 1]) + bytes(24))
    return seeds


TARGETS: dict[str, Callable[[bytes], None]] = {"node": node_target, **{n: decoder_target(n) for n in DECODERS}}
SEEDS: dict[str, list[bytes]] = {"node": node_seeds(), **{n: list(t.seeds) for n, t in DECODERS.items()}}


def input_id(data: bytes) -> str:
    return hashlib.sha1(data).hexdigest()[:16]

