"""Values exchanged between the reliable transport and the node.

A ``Record`` is the unit of reliability: one fragment of one application
message, numbered in its sender's stream. It carries the ACKs its sender
piggybacked when it was sent, so a retransmitted record still tells the
receiver what its sender had received (the ACK graph: SGCS paper, section 3.2).

The transport returns ``Out*`` values; the node turns them into datagrams.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from .msgtype import MsgType

Ack = tuple[int, int]
"""(sender, highest contiguous sequence number received from that sender)."""
Range = tuple[int, int]
"""Inclusive range of sequence numbers."""

MORE_FRAGMENTS = 1
"""Record flag: the next record of this sender continues the same message."""
OPTIMISTIC = 2
"""Record flag: sent during a view change, under an optimistic view; no member
delivers it before that change is installed. Bits 2 to 7 then hold the
proposed epoch modulo 64, which tells a receiver whether the change it belongs
to is already installed there."""
EPOCH_SHIFT = 2
"""Position of an optimistic record's epoch (modulo 64) in its flags."""


class Record(NamedTuple):
    """One record as sent and received. Records and messages are made once per
    message on the hot path, so they are named tuples: immutable like a frozen
    dataclass, and built in a third of the time (0.3 against 0.75 us). The hot
    paths build them with ``tuple.__new__(Record, (...))``: calling the class
    runs the named tuple's ``__new__`` (and ``_make`` a classmethod), Python
    functions that even compiled code (mypyc) must enter; ``tuple.__new__`` is
    C (about 9 % of a compiled member's CPU went to those frames)."""

    sender: int
    seq: int
    acks: tuple[Ack, ...]
    flags: int
    payload: bytes
    clock: int = 0
    """Its sender's Lamport clock (total and safe order; 0: none). The first
    record of a message carries it, as it carries the ACKs."""


class Message(NamedTuple):
    """A whole application message, reassembled, in its sender's FIFO order.

    ``seq`` is the sequence number of its first record, which identifies it
    (with group and sender) in traces; ``acks`` are those of its first record.
    """

    sender: int
    seq: int
    acks: tuple[Ack, ...]
    payload: bytes
    last: int = 0
    """Sequence number of its last record; 0 when it is ``seq`` (one record)."""
    optimistic: bool = False
    epoch_tag: int = 0
    """For an optimistic message: the epoch of its optimistic view, modulo 64."""
    clock: int = 0
    """Its timestamp as its sender stated it (total and safe order; 0: none)."""


@dataclass(frozen=True, slots=True)
class OutRecords:
    """Records to send: ``dst`` None multicasts them to the group.

    ``kind`` is ``MsgType.DATA`` (first transmission), ``MsgType.RETRANSMIT``
    (answer to a NACK) or ``MsgType.GOSSIP`` (pushed or pulled after a digest):
    the datagram type they go out as.
    """

    dst: int | None
    records: tuple[Record, ...]
    kind: MsgType


@dataclass(frozen=True, slots=True)
class OutNack:
    """Ask ``dst`` for the records of ``sender`` in ``ranges``; ``pull`` marks a
    request made because a gossip digest showed ``dst`` has them."""

    dst: int
    sender: int
    ranges: tuple[Range, ...]
    pull: bool


@dataclass(frozen=True, slots=True)
class Aggregate:
    """Stability gossip of hypercube round ``level``: per sender, the lowest
    number held by the 2**level members ending at the gossiping member (by
    position in the roster whose hash is ``roster``)."""

    level: int
    roster: int
    floors: tuple[Ack, ...]
    clock: int = 0
    """Ordered groups whose promises go by gossip: the lowest clock the
    2**level members vouch for (every message at or below it, anywhere, is
    stable); 0: none."""
    seq: int = 0
    """Number of this digest among those to the same level's partner, modulo
    2**16: ``floors`` lists only what changed since the previous one, so a
    receiver that sees a number skipped asks for everything (``RESYNC``)."""
    flags: int = 0
    """``FULL``: every sender we gossip, not only the changed ones; ``RESYNC``:
    a request for a ``FULL`` digest of ``level`` (sent to the predecessor)."""


FULL = 1
"""Aggregate flag: the floors of every sender gossiped, not a delta."""
RESYNC = 2
"""Aggregate flag: the successor of this level missed a delta; send it a full digest."""
SEQ_MODULUS = 1 << 16


@dataclass(frozen=True, slots=True)
class OutDigest:
    """Tell partner ``dst`` how far we have received each listed sender."""

    dst: int
    entries: tuple[Ack, ...]
    aggregate: Aggregate | None = None


@dataclass(frozen=True, slots=True)
class OutNull:
    """An idle member's ACKs for the stream of member ``dst`` (ordered groups
    turn them into one multicast promise)."""

    dst: int
    acks: tuple[Ack, ...]


@dataclass(frozen=True, slots=True)
class OutStable:
    """Every member of the view whose roster tag is ``roster`` holds each
    listed sender up to the given number, so those records may be dropped: a
    reply to a digest whose stability gossip lags."""

    dst: int
    roster: int
    entries: tuple[Ack, ...]


Out = OutRecords | OutNack | OutDigest | OutNull | OutStable
