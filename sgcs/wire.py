"""Versioned, authenticated binary wire format (shared/DESIGN.md, "Wire format").

Theory of operation
-------------------
Every datagram is ``header | body | tag``:

* header, 13 bytes, ``!2sBBBQ``: magic ``b"SG"``, protocol version, message
  type (an append-only ``IntEnum``), flags, and the sender's member id;
* body: an explicit ``struct`` layout per message type; no pickle, nothing is
  ever turned into arbitrary objects;
* tag: the first 16 bytes of HMAC-SHA256 over header and body, under a key
  derived from the group secret.

Decoding untrusted bytes checks, in order: size, magic, version, tag, then the
type and body. A datagram with a bad tag is therefore never parsed beyond its
header. ``decode_*_untrusted`` functions raise only ``DecodeError``, whose
``reason`` becomes the drop reason. Every length and count is capped before
anything is allocated.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import struct
from dataclasses import dataclass

from .config import MAX_UDP_PAYLOAD, Order
from .errors import DecodeError

MAGIC = b"SG"
VERSION = 1
HEADER = struct.Struct("!2sBBBQ")
TAG_LEN = 16
OVERHEAD = HEADER.size + TAG_LEN
MAX_GROUP_NAME = 200
"""Bytes of UTF-8 in a group name."""


class MsgType(enum.IntEnum):
    """Message types. Append only: a value, once released, keeps its meaning."""

    DATA = 1
    HELLO = 2
    LEAVE = 3

    @property
    def label(self) -> str:
        """Lower-case name, as in the trace's ``net.msg_type`` column."""
        return self.name.lower()


class Flag(enum.IntFlag):
    NONE = 0
    UNICAST = 1
    """DATA: the body carries a destination member id."""


ORDER_CODES: tuple[Order, ...] = (Order.FIFO, Order.CAUSAL, Order.TOTAL, Order.SAFE)


@dataclass(frozen=True, slots=True)
class Header:
    msg_type: MsgType
    flags: Flag
    sender: int


@dataclass(frozen=True, slots=True)
class DataMsg:
    group_tag: int
    seq: int
    dest: int | None
    payload: bytes


@dataclass(frozen=True, slots=True)
class HelloMsg:
    group_tag: int
    order: Order
    reply_wanted: bool


@dataclass(frozen=True, slots=True)
class LeaveMsg:
    group_tag: int


def derive_key(secret: bytes) -> bytes:
    """The datagram authentication key; a separate label per purpose keeps
    later keys (encryption) independent of this one."""
    return hmac.digest(secret, b"sgcs/v1/datagram-auth", "sha256")


def group_tag(name: str) -> int:
    """64-bit wire identifier of a group name."""
    return int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "big")


def seal(key: bytes, msg_type: MsgType, flags: Flag, sender: int, body: bytes) -> bytes:
    """Frame and authenticate one datagram."""
    signed = HEADER.pack(MAGIC, VERSION, msg_type, flags, sender) + body
    return signed + hmac.digest(key, signed, "sha256")[:TAG_LEN]


def decode_datagram_untrusted(data: bytes, key: bytes) -> tuple[Header, bytes]:
    """Check framing and tag; return the header and the still-untrusted body."""
    if len(data) < OVERHEAD:
        raise DecodeError("short", f"{len(data)} bytes")
    if len(data) > MAX_UDP_PAYLOAD:
        raise DecodeError("length", f"{len(data)} bytes")
    magic, version, type_code, flag_bits, sender = HEADER.unpack_from(data)
    if magic != MAGIC:
        raise DecodeError("magic")
    if version != VERSION:
        raise DecodeError("version", str(version))
    signed, tag = data[:-TAG_LEN], data[-TAG_LEN:]
    if not hmac.compare_digest(hmac.digest(key, signed, "sha256")[:TAG_LEN], tag):
        raise DecodeError("mac")
    try:
        msg_type = MsgType(type_code)
        flags = Flag(flag_bits)
    except ValueError:
        raise DecodeError("type", f"type {type_code} flags {flag_bits}") from None
    if sender >= 2**63:
        raise DecodeError("sender", str(sender))
    return Header(msg_type, flags, sender), signed[HEADER.size :]


_DATA = struct.Struct("!QQI")
_DATA_UNICAST = struct.Struct("!QQQI")


def encode_data(msg: DataMsg) -> bytes:
    if msg.dest is None:
        return _DATA.pack(msg.group_tag, msg.seq, len(msg.payload)) + msg.payload
    return _DATA_UNICAST.pack(msg.group_tag, msg.seq, msg.dest, len(msg.payload)) + msg.payload


def decode_data_untrusted(body: bytes, flags: Flag) -> DataMsg:
    unicast = bool(flags & Flag.UNICAST)
    layout = _DATA_UNICAST if unicast else _DATA
    if len(body) < layout.size:
        raise DecodeError("length", "data body too short")
    fields = layout.unpack_from(body)
    length = fields[-1]
    if length != len(body) - layout.size:
        raise DecodeError("length", f"payload says {length}, has {len(body) - layout.size}")
    dest = fields[2] if unicast else None
    return DataMsg(fields[0], fields[1], dest, bytes(body[layout.size :]))


_HELLO = struct.Struct("!QBB")


def encode_hello(msg: HelloMsg) -> bytes:
    return _HELLO.pack(msg.group_tag, ORDER_CODES.index(msg.order), int(msg.reply_wanted))


def decode_hello_untrusted(body: bytes) -> HelloMsg:
    if len(body) != _HELLO.size:
        raise DecodeError("length", "hello body")
    tag, order_code, reply = _HELLO.unpack(body)
    if order_code >= len(ORDER_CODES) or reply > 1:
        raise DecodeError("body", f"hello order {order_code} reply {reply}")
    return HelloMsg(tag, ORDER_CODES[order_code], bool(reply))


_LEAVE = struct.Struct("!Q")


def encode_leave(msg: LeaveMsg) -> bytes:
    return _LEAVE.pack(msg.group_tag)


def decode_leave_untrusted(body: bytes) -> LeaveMsg:
    if len(body) != _LEAVE.size:
        raise DecodeError("length", "leave body")
    return LeaveMsg(*_LEAVE.unpack(body))


def max_payload(max_datagram: int, unicast: bool = False) -> int:
    """Largest application payload that fits one datagram of this budget."""
    return max_datagram - OVERHEAD - (_DATA_UNICAST if unicast else _DATA).size
