"""The queue managers' messages, carried as sgcs payloads (docs/queues.md).

Theory of operation
-------------------
Queue managers talk inside one sgcs group: HELLO is multicast (a manager's
name, so others can address ``queue@name``); everything else is an sgcs
reliable unicast. Explicit ``struct`` layouts, big-endian, no pickle. Every
count and length is capped; ``decode_untrusted`` raises only ``DecodeError``
and the manager drops and counts what does not decode.

Header: magic 0x51 ('Q'), version 2, type. A packet of another version is
dropped and counted like any that does not decode (version 1 had no TTL in
FWD items), so managers of the two versions do not hear each other: remote
sends wait in the transmission queue until both ends run the same one.
Bodies:

* HELLO: name.
* FWD: origin u64, floor u64, n u16, then n x (seq u64, priority u8, ttl ms
  u32, queue, body). The TTL is what remained of the message's TTL when the
  sender sent it (0: none); the receiver counts it from arrival on its own
  clock, so the two clocks need not agree.
* FWD_ACK: origin u64, full u8 (1: some did not fit, retry those later), n u16, n x seq u64 committed.
* GET: request u64, wait ms u32, max u16, lease ms u32, queue.
* MSGS: request u64, status u8 (0 ok, 1 no such queue), n u16, then
  n x (tag u64, priority u8, deliveries u32, id (u8 length), body).
* ACK: kind u8 (0 ack, 1 release), n u16, n x tag u64.

A name (queue or node) is a u8 length and UTF-8; a body a u32 length.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Union

from sgcs.errors import DecodeError

from .store import MAX_BODY, PRIORITIES, Forwarded

MAGIC, VERSION = 0x51, 2
HELLO, FWD, FWD_ACK, GET, MSGS, ACK = 1, 2, 3, 4, 5, 6
MAX_ITEMS = 4_096
_HEAD = struct.Struct(">BBB")
_U8, _U16, _U32, _U64 = struct.Struct(">B"), struct.Struct(">H"), struct.Struct(">I"), struct.Struct(">Q")
_FWD_ITEM = struct.Struct(">QBI")
_GET = struct.Struct(">QIHI")
_MSG_ITEM = struct.Struct(">QBI")


@dataclass(frozen=True, slots=True)
class Hello:
    name: str


@dataclass(frozen=True, slots=True)
class Forward:
    origin: int
    floor: int
    items: tuple[Forwarded, ...]


@dataclass(frozen=True, slots=True)
class ForwardAck:
    origin: int
    full: bool
    seqs: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Get:
    request: int
    wait_ms: int
    max: int
    lease_ms: int
    queue: str


@dataclass(frozen=True, slots=True)
class Item:
    tag: int
    priority: int
    deliveries: int
    msg_id: bytes
    body: bytes


@dataclass(frozen=True, slots=True)
class Messages:
    request: int
    missing: bool
    """The queue is not bound at the manager."""
    items: tuple[Item, ...]


@dataclass(frozen=True, slots=True)
class Ack:
    release: bool
    tags: tuple[int, ...]


Packet = Union[Hello, Forward, ForwardAck, Get, Messages, Ack]


def _name(text: str) -> bytes:
    raw = text.encode()
    return _U8.pack(len(raw)) + raw


def _blob(data: bytes) -> bytes:
    return _U32.pack(len(data)) + data


def encode(packet: Packet) -> bytes:
    if isinstance(packet, Hello):
        return _HEAD.pack(MAGIC, VERSION, HELLO) + _name(packet.name)
    if isinstance(packet, Forward):
        parts = [_HEAD.pack(MAGIC, VERSION, FWD), _U64.pack(packet.origin), _U64.pack(packet.floor),
                 _U16.pack(len(packet.items))]
        for item in packet.items:
            parts += [_FWD_ITEM.pack(item.seq, item.priority, item.ttl_ms), _name(item.queue), _blob(item.body)]
        return b"".join(parts)
    if isinstance(packet, ForwardAck):
        return (_HEAD.pack(MAGIC, VERSION, FWD_ACK) + _U64.pack(packet.origin) + _U8.pack(int(packet.full))
                + _U16.pack(len(packet.seqs)) + b"".join(_U64.pack(s) for s in packet.seqs))
    if isinstance(packet, Get):
        return (_HEAD.pack(MAGIC, VERSION, GET) + _GET.pack(packet.request, packet.wait_ms, packet.max, packet.lease_ms)
                + _name(packet.queue))
    if isinstance(packet, Messages):
        parts = [_HEAD.pack(MAGIC, VERSION, MSGS), _U64.pack(packet.request), _U8.pack(int(packet.missing)),
                 _U16.pack(len(packet.items))]
        for m in packet.items:
            parts += [_MSG_ITEM.pack(m.tag, m.priority, m.deliveries), _U8.pack(len(m.msg_id)), m.msg_id, _blob(m.body)]
        return b"".join(parts)
    return (_HEAD.pack(MAGIC, VERSION, ACK) + _U8.pack(int(packet.release)) + _U16.pack(len(packet.tags))
            + b"".join(_U64.pack(t) for t in packet.tags))


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def take(self, layout: struct.Struct) -> tuple[int, ...]:
        if self.at + layout.size > len(self.data):
            raise DecodeError("length", "truncated")
        values = layout.unpack_from(self.data, self.at)
        self.at += layout.size
        return values

    def raw(self, size: int) -> bytes:
        if self.at + size > len(self.data):
            raise DecodeError("length", "truncated")
        out = self.data[self.at:self.at + size]
        self.at += size
        return out

    def name(self) -> str:
        (size,) = self.take(_U8)
        try:
            text = self.raw(size).decode()
        except UnicodeDecodeError:
            raise DecodeError("name", "not UTF-8") from None
        if not text:
            raise DecodeError("name", "empty")
        return text

    def blob(self) -> bytes:
        (size,) = self.take(_U32)
        if size > MAX_BODY:
            raise DecodeError("length", f"body of {size} bytes")
        return self.raw(size)

    def count(self) -> int:
        (n,) = self.take(_U16)
        if n > MAX_ITEMS:
            raise DecodeError("length", f"{n} items")
        return int(n)

    def end(self) -> None:
        if self.at != len(self.data):
            raise DecodeError("length", "trailing bytes")


def decode_untrusted(data: bytes) -> Packet:
    reader = _Reader(bytes(data))
    magic, version, kind = reader.take(_HEAD)
    if magic != MAGIC:
        raise DecodeError("magic", f"{magic:#x}")
    if version != VERSION:
        raise DecodeError("version", str(version))
    packet = _decode_body(kind, reader)
    reader.end()
    return packet


def _decode_body(kind: int, r: _Reader) -> Packet:
    if kind == HELLO:
        return Hello(r.name())
    if kind == FWD:
        (origin,), (floor,) = r.take(_U64), r.take(_U64)
        forwarded: list[Forwarded] = []
        for _ in range(r.count()):
            seq, priority, ttl_ms = r.take(_FWD_ITEM)
            if priority >= PRIORITIES:
                raise DecodeError("field", f"priority {priority}")
            queue = r.name()
            if "@" in queue:
                raise DecodeError("name", "queue name with '@'")
            forwarded.append(Forwarded(seq, queue, priority, r.blob(), ttl_ms))
        return Forward(origin, floor, tuple(forwarded))
    if kind == FWD_ACK:
        (origin,), (full,) = r.take(_U64), r.take(_U8)
        return ForwardAck(origin, bool(full), tuple(r.take(_U64)[0] for _ in range(r.count())))
    if kind == GET:
        request, wait_ms, most, lease_ms = r.take(_GET)
        if most == 0:
            raise DecodeError("field", "get of 0 messages")
        return Get(request, wait_ms, most, lease_ms, r.name())
    if kind == MSGS:
        (request,), (missing,) = r.take(_U64), r.take(_U8)
        items: list[Item] = []
        for _ in range(r.count()):
            tag, priority, deliveries = r.take(_MSG_ITEM)
            if priority >= PRIORITIES:
                raise DecodeError("field", f"priority {priority}")
            (size,) = r.take(_U8)
            items.append(Item(tag, priority, deliveries, r.raw(size), r.blob()))
        return Messages(request, bool(missing), tuple(items))
    if kind == ACK:
        (release,) = r.take(_U8)
        return Ack(bool(release), tuple(r.take(_U64)[0] for _ in range(r.count())))
    raise DecodeError("type", str(kind))
