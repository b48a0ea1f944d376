"""Versioned, authenticated (optionally encrypted) binary wire format
(docs/architecture.md).

Theory of operation
-------------------
Every datagram is ``header | body | tag``:

* header, 29 bytes, ``!2sBBBQQQ``: magic ``b"SG"``, protocol version, message
  type (an append-only ``IntEnum``), flags, the sender's member id, the
  sender's *boot* (its incarnation in the high 32 bits, a random salt drawn
  at start in the low 32) and a *counter* that the sender increments for every
  datagram it seals. (boot, counter) never repeats for one sender: it is the
  nonce for encryption and the key of replay protection (``sgcs.security``);
* body: an explicit ``struct`` layout per message type; no pickle, nothing is
  ever turned into arbitrary objects. With ``Flag.ENCRYPTED`` it is AES-GCM
  ciphertext;
* tag, 16 bytes: the first 16 bytes of HMAC-SHA256 over header and body under
  a key derived from the group secret, or, encrypted, the GCM tag (the header
  is the associated data, so it is authenticated as well).

Decoding untrusted bytes checks, in order: size, magic, version, the
encryption policy, the tag, then the type and body. A datagram with a bad tag
is therefore never parsed beyond its header. ``decode_*_untrusted`` functions
raise only ``DecodeError``, whose ``reason`` becomes the drop reason. Every
length and count is capped before anything is allocated.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import struct
from dataclasses import dataclass
from typing import Final, Protocol, Sequence

import numpy as np

from .config import MAX_UDP_PAYLOAD, Order
from .errors import DecodeError

from .msgtype import MsgType
from .records import Record

MAGIC = b"SG"
VERSION = 4
"""4: a total-order timestamp promises its sender's next one PROMISE_AHEAD
higher (``ordering/total.py``); a member of version 3 would order apart, so
it is refused at decode."""
HEADER = struct.Struct("!2sBBBQQQ")
TAG_LEN = 16
OVERHEAD = HEADER.size + TAG_LEN
MAX_GROUP_NAME = 200
"""Bytes of UTF-8 in a group name."""


class Flag(enum.IntFlag):
    NONE = 0
    UNICAST = 1
    """DATA: the body carries a destination member id."""
    ENCRYPTED = 2
    """The body is AES-GCM ciphertext and the tag is GCM's."""


ORDER_CODES: tuple[Order, ...] = (Order.FIFO, Order.CAUSAL, Order.TOTAL, Order.SAFE)

# Lookup tables for the decoder's hot path: calling an enum class costs a
# microsecond or two per datagram. IntFlag keeps unknown bits, so every byte
# value has its Flag, exactly as ``Flag(bits)`` would give.
_MSG_TYPE_OF: dict[int, MsgType] = {t.value: t for t in MsgType}
_FLAG_OF: tuple[Flag, ...] = tuple(Flag(bits) for bits in range(256))
_ENCRYPTED_BIT: Final = 2
"""``Flag.ENCRYPTED`` as a plain int: ``int & Flag`` enters IntFlag's Python
``__rand__`` even from compiled code (1 % of a simulation)."""
assert _ENCRYPTED_BIT == Flag.ENCRYPTED


class Header:
    """A checked datagram's header. A plain class, not a frozen dataclass:
    compiled (mypyc), its constructor is C; a dataclass's generated
    ``__init__`` runs interpreted, a microsecond per datagram (1.2 % of a
    simulation). Read-only by convention (``Final``)."""

    __slots__ = ("msg_type", "flags", "sender", "boot", "counter")

    def __init__(self, msg_type: MsgType, flags: Flag, sender: int, boot: int = 0, counter: int = 0) -> None:
        self.msg_type: Final = msg_type
        self.flags: Final = flags
        self.sender: Final = sender
        self.boot: Final = boot
        self.counter: Final = counter

    def __repr__(self) -> str:
        return (f"Header(msg_type={self.msg_type!r}, flags={self.flags!r}, sender={self.sender}, "
                f"boot={self.boot}, counter={self.counter})")


class BodyCipher(Protocol):
    """Authenticated encryption of bodies (``sgcs.security.Cipher``)."""

    def encrypt(self, sender: int, boot: int, counter: int, body: bytes, header: bytes) -> bytes: ...

    def decrypt(self, sender: int, boot: int, counter: int, sealed: bytes, header: bytes) -> bytes | None: ...


@dataclass(frozen=True, slots=True)
class HelloMsg:
    group_tag: int
    order: Order
    reply_wanted: bool
    name: str = ""
    """The sender's ``Config.name``, at most ``NAME_MAX`` bytes of UTF-8 after
    the fixed part ("": none, the layout of sgcs before 0.2)."""
    names_wanted: bool = False
    """A member of the sender's view asks for our name, not to join: after a
    merge of groups that formed apart (reply byte 2)."""


@dataclass(frozen=True, slots=True)
class LeaveMsg:
    group_tag: int


KEY_SALT = b"sgcs/v2 datagram keys"
"""HKDF's salt (RFC 5869): public, fixed, so every member derives the same keys."""


def derive_key(secret: bytes, scheme: str = "hkdf") -> bytes:
    """The datagram authentication key. ``hkdf`` (the default): HKDF-SHA256
    with ``KEY_SALT`` and a label per purpose, so the encryption key
    (``security.Cipher``) is independent of this one. ``hmac-v1``: the keys
    of sgcs before 0.2 (one HMAC of the secret), for members that must talk
    to older ones (``Config.key_derivation``)."""
    if scheme == "hmac-v1":
        return hmac.digest(secret, b"sgcs/v1/datagram-auth", "sha256")
    return hkdf(secret, b"sgcs datagram authentication")


def hkdf(secret: bytes, label: bytes) -> bytes:
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    return bytes(HKDF(algorithm=hashes.SHA256(), length=32, salt=KEY_SALT, info=label).derive(secret))


def group_tag(name: str) -> int:
    """64-bit wire identifier of a group name."""
    return int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "big")


def seal(key: bytes, msg_type: int, flags: int, sender: int, body: bytes, boot: int = 0, counter: int = 0,
         cipher: BodyCipher | None = None) -> bytes:
    """Frame and authenticate one datagram; encrypt its body under ``cipher``.
    Callers keep (boot, counter) unique per sender (``sgcs.security.Sealer``)."""
    if cipher is not None:
        header = HEADER.pack(MAGIC, VERSION, msg_type, flags | Flag.ENCRYPTED, sender, boot, counter)
        return header + cipher.encrypt(sender, boot, counter, body, header)
    signed = HEADER.pack(MAGIC, VERSION, msg_type, flags, sender, boot, counter) + body
    return signed + hmac.digest(key, signed, "sha256")[:TAG_LEN]


def decode_datagram_untrusted(data: bytes | bytearray, key: bytes, cipher: BodyCipher | None = None,
                              memo: VerifiedMemo | None = None) -> tuple[Header, bytes]:
    """Check framing, policy and tag; return the header and the still-untrusted
    (decrypted) body. With ``cipher``, only encrypted datagrams are accepted;
    without, only plain ones: a group does not mix the two. ``memo``: datagram
    objects already checked (the simulator's; see ``VerifiedMemo``)."""
    if len(data) < OVERHEAD:
        raise DecodeError("short", f"{len(data)} bytes")
    if len(data) > MAX_UDP_PAYLOAD:
        raise DecodeError("length", f"{len(data)} bytes")
    magic, version, type_code, flag_bits, sender, boot, counter = HEADER.unpack_from(data)
    if magic != MAGIC:
        raise DecodeError("magic")
    if version != VERSION:
        raise DecodeError("version", str(version))
    encrypted = bool(flag_bits & _ENCRYPTED_BIT)
    if encrypted != (cipher is not None):
        raise DecodeError("policy", "encrypted" if encrypted else "plain")
    if cipher is not None:
        body = _open_encrypted(data, cipher, sender, boot, counter)
    else:
        body = _open_plain(data, key, memo)
    msg_type = _MSG_TYPE_OF.get(type_code)
    if msg_type is None:
        raise DecodeError("type", f"type {type_code} flags {flag_bits}")
    if sender >= 2**63:
        raise DecodeError("sender", str(sender))
    return Header(msg_type, _FLAG_OF[flag_bits & ~_ENCRYPTED_BIT & 0xFF], sender, boot, counter), body


def _open_plain(data: bytes | bytearray, key: bytes, memo: VerifiedMemo | None) -> bytes:
    if memo is not None:
        shared = memo.body(data, key)
        if shared is not None:
            return shared  # every receiver of one datagram object reads one body object
    signed = memoryview(data)[:-TAG_LEN]  # no copy: only the body is copied, once
    if not hmac.compare_digest(hmac.digest(key, signed, "sha256")[:TAG_LEN], data[-TAG_LEN:]):
        raise DecodeError("mac")
    body = bytes(signed[HEADER.size:])
    if memo is not None:
        memo.remember(data, key, body)
    return body


def _open_encrypted(data: bytes | bytearray, cipher: BodyCipher, sender: int, boot: int, counter: int) -> bytes:
    body = cipher.decrypt(sender, boot, counter, bytes(data[HEADER.size:]), bytes(data[:HEADER.size]))
    if body is None:
        raise DecodeError("mac")
    return body


VERIFIED_MEMO = 1_024
"""Datagram objects a ``VerifiedMemo`` remembers."""


class VerifiedMemo:
    """Datagram objects whose tag was checked lately, and what their bodies
    decoded to, shared by the nodes one owner hands it to. The simulator hands
    one bytes object to every receiver of a multicast (10,000 of them at
    scale) and one memo to all its nodes, so a datagram is checked and
    decoded once, and its receivers share one body and one decoded value (a
    buffered record's payload is then held once, not once per receiver: at
    10,000 nodes that was the largest part of every member's buffer). A real
    node has none (a socket returns a new object per datagram: it would never
    hit). An explicit object, not a process-wide cache: two simulations, or
    tests, in one process share nothing. Decoded values must be immutable
    (tuples of records, frozen messages): every receiver holds the same one."""

    def __init__(self, capacity: int = VERIFIED_MEMO) -> None:
        self.capacity = capacity
        self._verified: dict[int, tuple[bytes, bytes, bytes]] = {}
        """id(data) -> (data, key, body); holding data keeps its id unique."""
        self._decoded: dict[int, tuple[bytes, int, object | None]] = {}
        """id(body) -> (body, kind, what it decoded to as ``kind`` or None), for
        the bodies above (a decoded value depends on the body's bytes and the
        kind only; tiny bodies are shared objects, hence the kind)."""

    def seen(self, data: bytes | bytearray, key: bytes) -> bool:
        return self.body(data, key) is not None

    def body(self, data: bytes | bytearray, key: bytes) -> bytes | None:
        """The body of ``data`` if it was checked under ``key`` lately."""
        entry = self._verified.get(id(data))
        if entry is not None and entry[0] is data and entry[1] == key:  # equal keys: each node derives its own
            return entry[2]
        return None

    def remember(self, data: bytes | bytearray, key: bytes, body: bytes) -> None:
        if type(data) is not bytes:
            return  # mutable buffers may change after the check
        verified = self._verified
        replaced = verified.pop(id(data), None)  # checked again under another key
        if replaced is not None:
            self._decoded.pop(id(replaced[2]), None)
        elif len(verified) >= self.capacity:
            _, _, gone = verified.pop(next(iter(verified)))  # oldest first
            self._decoded.pop(id(gone), None)
        verified[id(data)] = (data, key, body)
        self._decoded[id(body)] = (body, -1, None)

    def decoded(self, body: bytes, kind: int) -> object | None:
        """What ``body`` decoded to as ``kind`` (a message type), if a node kept it."""
        entry = self._decoded.get(id(body))
        return entry[2] if entry is not None and entry[0] is body and entry[1] == kind else None

    def keep(self, body: bytes, kind: int, value: object) -> None:
        """Remember what ``body`` decoded to as ``kind``, if it is a body this
        memo handed out (any other would never be asked for again)."""
        entry = self._decoded.get(id(body))
        if entry is not None and entry[0] is body:
            self._decoded[id(body)] = (body, kind, value)


_HELLO = struct.Struct("!QBB")


NAME_MAX = 64
"""Bytes of a member's name a HELLO carries at most (a longer name is cut)."""


def encode_hello(msg: HelloMsg) -> bytes:
    name = msg.name.encode()[:NAME_MAX]
    reply = 1 if msg.reply_wanted else 2 if msg.names_wanted else 0
    return _HELLO.pack(msg.group_tag, ORDER_CODES.index(msg.order), reply) + name


def decode_hello_untrusted(body: bytes) -> HelloMsg:
    if not _HELLO.size <= len(body) <= _HELLO.size + NAME_MAX:
        raise DecodeError("length", "hello body")
    tag, order_code, reply = _HELLO.unpack_from(body)
    if order_code >= len(ORDER_CODES) or reply > 2:
        raise DecodeError("body", f"hello order {order_code} reply {reply}")
    # a name cut inside a character keeps what decodes; another member's bad UTF-8 is replaced, never raised
    name = body[_HELLO.size:].decode("utf-8", "replace").rstrip("\ufffd") if len(body) > _HELLO.size else ""
    return HelloMsg(tag, ORDER_CODES[order_code], reply == 1, name, reply == 2)


_LEAVE = struct.Struct("!Q")


def encode_leave(msg: LeaveMsg) -> bytes:
    return _LEAVE.pack(msg.group_tag)


def decode_leave_untrusted(body: bytes) -> LeaveMsg:
    if len(body) != _LEAVE.size:
        raise DecodeError("length", "leave body")
    return LeaveMsg(*_LEAVE.unpack(body))



# ---------------------------------------------------------------- reliable transport
#
# record   := sender Q | seq Q | flags B | payload_len I | ack_bytes H | acks [| clock varint] | payload
#             (clock: the sender's Lamport clock, ordered groups only; absent means 0)
# acks     := count varint, then per entry: sender delta varint (sorted senders), high varint
# records  := group_tag Q | count H | record*           (DATA, RETRANSMIT, GOSSIP)
# ranges   := group_tag Q | sender Q | pull B | count B | (low Q, high Q)*   (NACK)
# entries  := group_tag Q | acks                           (UNICAST_ACK)
# stable   := group_tag Q | roster I | acks                (STABLE: every member of that roster holds these)
# null     := entries [| clock varint]                    (NULL; the clock: a promise, ordered groups)
# digest   := entries [| level+flags B | roster I | seq H | acks [| clock varint]]
#             (DIGEST; the optional part: stability gossip, changed floors only unless flagged FULL,
#             numbered per level; with the promise clock of ordered groups)

MAX_RECORDS = 1_024
MAX_ACKS = 32_768
"""Entries in one list: what a 65,507-byte datagram can hold at two bytes an
entry. A view's member list travels in one PROPOSE and COMMIT, so this also
bounds ``Config.max_members``."""
MAX_RANGES = 64
_RECORD = struct.Struct("!QQBIH")
_RECORDS = struct.Struct("!QH")
_NACK = struct.Struct("!QQBB")
_RANGE = struct.Struct("!QQ")
_TAG = struct.Struct("!Q")
_DEST = struct.Struct("!Q")
RECORDS_HEADER = _RECORDS.size
"""Bytes before the records of a records body: group tag (8) and record count (2)."""
RECORD_HEADER = _RECORD.size
"""Bytes of one record's fixed part: sender, seq, flags, payload and ACK lengths."""
UNICAST_HEADER = _DEST.size
"""Bytes of the destination id before the records of a unicast."""


def _put_varint(out: bytearray, value: int) -> None:
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _get_varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    for i in range(pos, min(pos + 10, len(data))):
        byte = data[i]
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, i + 1
        shift += 7
    raise DecodeError("varint", f"at {pos}")


def encode_acks(acks: "tuple[tuple[int, int], ...]") -> bytes:
    """(sender, high) pairs, sorted here, as count, then sender deltas and highs."""
    out = bytearray()
    _put_varint(out, len(acks))
    previous = 0
    for sender, high in sorted(acks):
        _put_varint(out, sender - previous)
        _put_varint(out, high)
        previous = sender
    return bytes(out)


def decode_acks_untrusted(data: bytes, pos: int = 0) -> "tuple[tuple[tuple[int, int], ...], int]":
    count, pos = _get_varint(data, pos)
    if count > MAX_ACKS:
        raise DecodeError("count", f"{count} acks")
    acks = []
    sender = 0
    for _ in range(count):
        delta, pos = _get_varint(data, pos)
        high, pos = _get_varint(data, pos)
        sender += delta
        if sender >= 2**63 or high >= 2**63:
            raise DecodeError("body", "ack out of range")
        acks.append((sender, high))
    return tuple(acks), pos


def _clock_bytes(clock: int) -> bytes:
    out = bytearray()
    _put_varint(out, clock)
    return bytes(out)


def _order_block(record: "Record") -> bytes:
    """A record's ACKs, then its clock when it has one."""
    acks = encode_acks(record.acks) if record.acks else b"\x00"
    return acks + _clock_bytes(record.clock) if record.clock else acks


def encode_records(tag: int, records: "Sequence[Record]") -> bytes:
    parts = [_RECORDS.pack(tag, len(records))]
    for r in records:
        block = _order_block(r) if r.acks or r.clock else b"\x00"
        parts.append(_RECORD.pack(r.sender, r.seq, r.flags, len(r.payload), len(block)))
        parts.append(block)
        parts.append(r.payload)
    return b"".join(parts)


def encoded_record_size(record: "Record") -> int:
    return _RECORD.size + len(record.payload) + (len(_order_block(record)) if record.acks or record.clock else 1)


def _decode_clock(data: bytes, pos: int, what: str) -> int:
    """The optional clock that ends ``data`` at ``pos``: 0 when absent."""
    if pos == len(data):
        return 0
    clock, end = _get_varint(data, pos)
    if end != len(data):
        raise DecodeError("length", f"{what} trailing bytes")
    if not 0 < clock < 2**63:
        raise DecodeError("body", f"{what} clock out of range")
    return clock


def decode_records_untrusted(body: bytes) -> "tuple[int, tuple[Record, ...]]":
    if len(body) < _RECORDS.size:
        raise DecodeError("length", "records header")
    tag, count = _RECORDS.unpack_from(body)
    if count > MAX_RECORDS:
        raise DecodeError("count", f"{count} records")
    pos, records, size, record_size, unpack_from = _RECORDS.size, [], len(body), _RECORD.size, _RECORD.unpack_from
    for _ in range(count):
        if size - pos < record_size:
            raise DecodeError("length", "record header")
        sender, seq, flags, length, ack_len = unpack_from(body, pos)
        pos += record_size
        if pos + ack_len + length > size:
            raise DecodeError("length", "record longer than the datagram")
        if sender >= 2**63:
            raise DecodeError("body", "record fields")
        clock = 0
        if ack_len == 1 and body[pos] == 0:
            acks: tuple[tuple[int, int], ...] = ()  # no ACKs, no clock: the common case, without a call
        else:
            block = body[pos : pos + ack_len]
            acks, end = decode_acks_untrusted(block)
            clock = _decode_clock(block, end, "record")
        pos += ack_len
        records.append(tuple.__new__(Record, (sender, seq, acks, flags, bytes(body[pos : pos + length]), clock)))
        pos += length
    if pos != size:
        raise DecodeError("length", "trailing bytes")
    return tag, tuple(records)


def encode_nack(tag: int, sender: int, ranges: "tuple[tuple[int, int], ...]", pull: bool) -> bytes:
    head = _NACK.pack(tag, sender, int(pull), len(ranges))
    return head + b"".join(_RANGE.pack(low, high) for low, high in ranges)


def decode_nack_untrusted(body: bytes) -> "tuple[int, int, tuple[tuple[int, int], ...], bool]":
    if len(body) < _NACK.size:
        raise DecodeError("length", "nack")
    tag, sender, pull, count = _NACK.unpack_from(body)
    if count > MAX_RANGES or pull > 1 or len(body) != _NACK.size + count * _RANGE.size:
        raise DecodeError("length", "nack ranges")
    ranges = tuple(_RANGE.iter_unpack(body[_NACK.size :]))
    if any(low > high or high - low > 2**32 for low, high in ranges):
        raise DecodeError("body", "nack range")
    return tag, sender, ranges, bool(pull)


def encode_entries(tag: int, entries: "tuple[tuple[int, int], ...]") -> bytes:
    return _TAG.pack(tag) + encode_acks(entries)


_ROSTER = struct.Struct("!QI")


def encode_stable(tag: int, roster: int, entries: "tuple[tuple[int, int], ...]") -> bytes:
    """A stability announcement: every member of roster ``roster`` holds each sender up to its number."""
    return _ROSTER.pack(tag, roster) + encode_acks(entries)


def decode_stable_untrusted(body: bytes) -> "tuple[int, int, tuple[tuple[int, int], ...]]":
    """(group tag, roster tag, entries)."""
    if len(body) < _ROSTER.size + 1:
        raise DecodeError("length", "stable")
    tag, roster = _ROSTER.unpack_from(body)
    entries, end = decode_acks_untrusted(body, _ROSTER.size)
    if end != len(body):
        raise DecodeError("length", "trailing bytes")
    return tag, roster, entries


def encode_null(tag: int, entries: "tuple[tuple[int, int], ...]", clock: int = 0) -> bytes:
    """A null message: ACKs, and in ordered groups the sender's clock (a promise)."""
    return encode_entries(tag, entries) + (_clock_bytes(clock) if clock else b"")


def decode_null_untrusted(body: bytes) -> "tuple[int, tuple[tuple[int, int], ...], int]":
    """(group tag, entries, clock; 0 when absent)."""
    if len(body) < _TAG.size + 1:
        raise DecodeError("length", "null")
    (tag,) = _TAG.unpack_from(body)
    entries, end = decode_acks_untrusted(body, _TAG.size)
    return tag, entries, _decode_clock(body, end, "null")


def decode_entries_untrusted(body: bytes) -> "tuple[int, tuple[tuple[int, int], ...]]":
    if len(body) < _TAG.size + 1:
        raise DecodeError("length", "entries")
    (tag,) = _TAG.unpack_from(body)
    entries, end = decode_acks_untrusted(body, _TAG.size)
    if end != len(body):
        raise DecodeError("length", "trailing bytes")
    return tag, entries


_AGGREGATE = struct.Struct("!BIH")
MAX_LEVEL = 63
_LEVEL_BITS = 6
"""The aggregate's first byte: the level in its low 6 bits, its flags above."""


AggregateFields = tuple[int, int, "tuple[tuple[int, int], ...]", int, int, int]
"""(level, roster, floors, clock, seq, flags) of a digest's stability gossip."""


def encode_digest(tag: int, entries: "tuple[tuple[int, int], ...]", aggregate: AggregateFields | None) -> bytes:
    body = encode_entries(tag, entries)
    if aggregate is None:
        return body
    level, roster, floors, clock, seq, flags = aggregate
    head = _AGGREGATE.pack(level | flags << _LEVEL_BITS, roster, seq)
    return body + head + encode_acks(floors) + (_clock_bytes(clock) if clock else b"")


def decode_digest_untrusted(body: bytes) -> "tuple[int, tuple[tuple[int, int], ...], AggregateFields | None]":
    """(group tag, entries, (level, roster, floors, clock (0 when absent), seq, flags) or None)."""
    if len(body) < _TAG.size + 1:
        raise DecodeError("length", "digest")
    (tag,) = _TAG.unpack_from(body)
    entries, end = decode_acks_untrusted(body, _TAG.size)
    if end == len(body):
        return tag, entries, None
    if len(body) < end + _AGGREGATE.size + 1:
        raise DecodeError("length", "digest aggregate")
    first, roster, seq = _AGGREGATE.unpack_from(body, end)
    level, flags = first & MAX_LEVEL, first >> _LEVEL_BITS
    floors, end = decode_acks_untrusted(body, end + _AGGREGATE.size)
    return tag, entries, (level, roster, floors, _decode_clock(body, end, "digest"), seq, flags)



def encode_unicast(dest: int, tag: int, records: "Sequence[Record]") -> bytes:
    """A unicast's body: the destination member, then records of the pair's stream."""
    return _DEST.pack(dest) + encode_records(tag, records)


def decode_unicast_untrusted(body: bytes) -> "tuple[int, int, tuple[Record, ...]]":
    if len(body) < _DEST.size:
        raise DecodeError("length", "unicast destination")
    (dest,) = _DEST.unpack_from(body)
    tag, records = decode_records_untrusted(body[_DEST.size :])
    return dest, tag, records


# ---------------------------------------------------------------- membership
#
# heartbeat := count I | (member Q, counter H)*       (HEARTBEAT; counters mod 2**16)
# roster heartbeat := roster I | start I | count I | counter H*
#              (HEARTBEAT_ROSTER: the counters of the members at positions
#              start.. of the sorted member list whose 32-bit tag is ``roster``)
# hello     := group_tag Q | order B | reply B | name (UTF-8, at most NAME_MAX bytes)
#              (reply: 0 none wanted, 1 a joiner wants an answer, 2 a member of
#              a merged view asks for our name)
# control   := group_tag Q | epoch Q | attempt I | a Q | b Q | lists B | entries*
#              (PROBE, PROBE_ACK, ASK, ASK_REPLY, OBITUARY, BEACON, PROPOSE, FLUSH,
#              COMMIT, INSTALLED; what a, b and each entry list mean is per type, see
#              ``membership.agreement`` and ``membership.detector``)

MAX_HEARTBEAT_ENTRIES = 6_000
"""Members per heartbeat datagram (10 bytes each, within one UDP payload);
longer lists are sent in several datagrams."""
MAX_ENTRY_LISTS = 6
_HEARTBEAT_DTYPE = np.dtype([("member", ">u8"), ("counter", ">u2")])
MAX_ROSTER_HEARTBEAT_ENTRIES = 30_000
"""Counters per roster heartbeat datagram (2 bytes each)."""
_ROSTER_HEARTBEAT = struct.Struct("!III")
_COUNT = struct.Struct("!I")
_CONTROL = struct.Struct("!QQIQQB")


@dataclass(frozen=True, slots=True)
class Control:
    """A membership control message; field meanings depend on the type."""

    group_tag: int = 0
    epoch: int = 0
    attempt: int = 0
    a: int = 0
    b: int = 0
    lists: tuple[tuple[tuple[int, int], ...], ...] = ()


def encode_heartbeat(members: np.ndarray, counters: np.ndarray) -> bytes:
    """Heartbeat counters of ``members`` (both arrays of one length)."""
    table = np.empty(len(members), dtype=_HEARTBEAT_DTYPE)
    table["member"] = members
    table["counter"] = counters & 0xFFFF
    return _COUNT.pack(len(members)) + table.tobytes()


def decode_heartbeat_untrusted(body: bytes) -> tuple[np.ndarray, np.ndarray]:
    """Returns (members int64, counters int64), as numpy arrays."""
    if len(body) < _COUNT.size:
        raise DecodeError("length", "heartbeat")
    (count,) = _COUNT.unpack_from(body)
    if count > MAX_HEARTBEAT_ENTRIES or len(body) != _COUNT.size + count * _HEARTBEAT_DTYPE.itemsize:
        raise DecodeError("length", "heartbeat entries")
    table = np.frombuffer(body, dtype=_HEARTBEAT_DTYPE, offset=_COUNT.size)
    members = table["member"].astype(np.int64)
    if count and (members < 0).any():
        raise DecodeError("body", "heartbeat member out of range")
    return members, table["counter"].astype(np.int64)


def encode_roster_heartbeat(roster: int, start: int, counters: np.ndarray) -> bytes:
    """Heartbeat counters of the members at positions ``start``.. of roster ``roster``."""
    return _ROSTER_HEARTBEAT.pack(roster, start, len(counters)) + (counters & 0xFFFF).astype(">u2").tobytes()


def decode_roster_heartbeat_untrusted(body: bytes) -> tuple[int, int, np.ndarray]:
    """Returns (roster tag, start position, counters as native uint16)."""
    if len(body) < _ROSTER_HEARTBEAT.size:
        raise DecodeError("length", "roster heartbeat")
    roster, start, count = _ROSTER_HEARTBEAT.unpack_from(body)
    if count > MAX_ROSTER_HEARTBEAT_ENTRIES or len(body) != _ROSTER_HEARTBEAT.size + 2 * count:
        raise DecodeError("length", "roster heartbeat entries")
    if start > 2**31:
        raise DecodeError("body", "roster heartbeat start out of range")
    return roster, start, np.frombuffer(body, dtype=">u2", offset=_ROSTER_HEARTBEAT.size).astype(np.uint16)


def encode_control(msg: Control) -> bytes:
    parts = [_CONTROL.pack(msg.group_tag, msg.epoch, msg.attempt, msg.a, msg.b, len(msg.lists))]
    parts += [encode_acks(entries) for entries in msg.lists]
    return b"".join(parts)


def decode_control_untrusted(body: bytes, lists: bool = True) -> Control:
    """``lists=False`` checks and returns the fixed fields only (a cheap look
    at a beacon before deciding whether its member list is needed)."""
    if len(body) < _CONTROL.size:
        raise DecodeError("length", "control")
    tag, epoch, attempt, a, b, count = _CONTROL.unpack_from(body)
    if count > MAX_ENTRY_LISTS or max(epoch, a, b) >= 2**63:
        raise DecodeError("body", "control fields")
    if not lists:
        return Control(tag, epoch, attempt, a, b)
    pos, entry_lists = _CONTROL.size, []
    for _ in range(count):
        entries, pos = decode_acks_untrusted(body, pos)
        entry_lists.append(entries)
    if pos != len(body):
        raise DecodeError("length", "trailing bytes")
    return Control(tag, epoch, attempt, a, b, tuple(entry_lists))
