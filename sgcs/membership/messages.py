"""Typed membership control messages and their codec registry.

Theory of operation
-------------------
Nine message types of the membership layer travel in one wire layout,
``wire.Control``: a group tag, an epoch, an attempt, two integers ``a`` and
``b`` and a few lists of (id, value) pairs. What ``a``, ``b`` and each list
mean depends on the type: the failure detector's pull and ask stages (ADS
middleware paper: probe, then ask the suspect's neighbours), and the three
phases of a view change with its beacons (SGCS paper, section 4.2: initiate,
agree on the next view and the message set, install). This module gives each
type a class that names its fields, so protocol code reads ``flush.own`` and
``commit.cut`` instead of ``msg.a`` and ``msg.lists[1]``, and a registry
(``MESSAGES``: type -> class) that the node, the tests and the fuzzer share.

Lists travel sorted by id (``wire.encode_acks`` delta-codes them), so a
message built with sorted lists decodes to itself. Decoding is strict about
the shape each type relies on: the number of lists, epochs and attempts
within range, member lists without repeats.
Anything else raises ``DecodeError``, which the node counts and drops; a
handler never sees a malformed message. The bytes are those of
``wire.encode_control``: this layer changes no wire format
(``tests/test_wire.py`` holds golden vectors of every type).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Union

from ..errors import DecodeError
from ..wire import Control, MsgType, decode_control_untrusted, encode_control

MAX_EPOCH = 2**62
"""Epochs and attempts above this are absurd (a proposal one above must still fit 63 bits)."""

Pairs = tuple[tuple[int, int], ...]


def _members(pairs: Pairs, what: str) -> tuple[int, ...]:
    members = tuple(m for m, _ in pairs)
    if len(set(members)) != len(members):
        raise DecodeError("body", f"{what}: repeated member")
    return members


def _lists(c: Control, low: int, high: int, what: str) -> None:
    if not low <= len(c.lists) <= high:
        raise DecodeError("body", f"{what}: {len(c.lists)} lists")
    if c.epoch > MAX_EPOCH or c.attempt > MAX_EPOCH:
        raise DecodeError("body", f"{what}: epoch or attempt out of range")


@dataclass(frozen=True, slots=True)
class Propose:
    """Phase 1: the coordinator proposes the next view."""

    TYPE: ClassVar[MsgType] = MsgType.PROPOSE
    group_tag: int
    epoch: int
    attempt: int
    coordinator: int
    members: tuple[int, ...]

    def to_control(self) -> Control:
        return Control(self.group_tag, self.epoch, self.attempt, self.coordinator, 0,
                       (tuple((m, 0) for m in self.members),))

    @classmethod
    def from_control(cls, c: Control) -> Propose:
        _lists(c, 1, 1, "propose")
        return cls(c.group_tag, c.epoch, c.attempt, c.a, _members(c.lists[0], "propose"))


@dataclass(frozen=True, slots=True)
class Flush:
    """Phase 2, a member's answer: its snapshot (own last record, how far it
    holds each stream), the top of what it sent under superseded proposals
    (``rollback``), the lineage of the view it flushes from and, per sender,
    the last record it ever delivered (a third list, sent when not empty:
    deliveries are irrevocable, so the cut covers them)."""

    TYPE: ClassVar[MsgType] = MsgType.FLUSH
    group_tag: int
    epoch: int
    attempt: int
    own: int
    rollback: int
    vector: Pairs
    lineage: int
    delivered: Pairs = ()
    withdraw: bool = False
    """The records up to ``rollback`` went under a proposal another view may
    have installed: withdraw them (neither deliver nor roll back)."""
    refuse: bool = False
    """Not an answer: the member answered another coordinator's proposal of
    this epoch, so this one must be made again at a higher epoch."""
    preempt: bool = False
    """Not an answer: the member, which answered this proposal, is wanted by
    a higher one of another coordinator. It stays bound to this one until
    the coordinator commits it or gives it up (``agreement.ViewAgreement.bound``)."""

    coordinator_incarnation: int | None = None
    """The incarnation of the coordinator whose proposal this answers: a
    restarted coordinator numbers its proposals afresh, and must not take an
    answer to its former self's proposal of the same epoch and attempt for
    one to its own (explore.py, seed 3587391067: a member's multicast ended
    without an outcome). None: not said (an older sender)."""

    def to_control(self) -> Control:
        # the lineage list holds (0, lineage), then (1, flags) when any is set
        # and (2, the coordinator's incarnation) when known
        bits = self.withdraw | self.refuse << 1 | self.preempt << 2
        lineage: Pairs = ((0, self.lineage),) + (((1, bits),) if bits else ()) + \
            (((2, self.coordinator_incarnation),) if self.coordinator_incarnation is not None else ())
        lists = (self.vector, lineage) + ((self.delivered,) if self.delivered else ())
        return Control(self.group_tag, self.epoch, self.attempt, self.own, self.rollback, lists)

    @classmethod
    def from_control(cls, c: Control) -> Flush:
        _lists(c, 1, 3, "flush")
        pairs = dict(c.lists[1]) if len(c.lists) > 1 else {}
        lineage = pairs.get(0, 0)
        bits = pairs.get(1, 0)
        delivered = c.lists[2] if len(c.lists) > 2 else ()
        return cls(c.group_tag, c.epoch, c.attempt, c.a, c.b, c.lists[0], lineage, delivered, bool(bits & 1),
                   bool(bits & 2), bool(bits & 4), pairs.get(2))


@dataclass(frozen=True, slots=True)
class CommitMsg:
    """Phase 2, the coordinator's decision: the members with the lineage each
    flushed from (0 for all when they all came from one view), the cut, the
    rollback ranges, per sender that never installed the view a member
    flushed from, the last of its records such a member delivered in it (a
    fourth list, sent when a later one is not empty: see
    ``agreement.Commit.foreign``), the withdrawn ranges (a fifth list:
    ``agreement.Commit.withdrawn``) and, per member, the incarnation whose
    answer was counted (a sixth list: a restarted member must not install
    a commit made from its former self's answer)."""

    TYPE: ClassVar[MsgType] = MsgType.COMMIT
    group_tag: int
    epoch: int
    attempt: int
    coordinator: int
    origins: Pairs
    cut: Pairs
    rollback: Pairs
    foreign: Pairs = ()
    withdrawn: Pairs = ()
    incarnations: Pairs = ()

    def to_control(self) -> Control:
        lists: tuple[Pairs, ...] = (self.origins, self.cut, self.rollback)
        optional = (self.foreign, self.withdrawn, self.incarnations)
        last = max((i + 1 for i, entries in enumerate(optional) if entries), default=0)
        return Control(self.group_tag, self.epoch, self.attempt, self.coordinator, 0, lists + optional[:last])

    @classmethod
    def from_control(cls, c: Control) -> CommitMsg:
        _lists(c, 3, 6, "commit")
        _members(c.lists[0], "commit")
        optional = c.lists[3:] + ((),) * (6 - len(c.lists))
        return cls(c.group_tag, c.epoch, c.attempt, c.a, c.lists[0], c.lists[1], c.lists[2], *optional)

    @property
    def members(self) -> tuple[int, ...]:
        return tuple(m for m, _ in self.origins)


@dataclass(frozen=True, slots=True)
class InstalledMsg:
    """Phase 3: a member installed the committed view."""

    TYPE: ClassVar[MsgType] = MsgType.INSTALLED
    group_tag: int
    epoch: int
    attempt: int

    def to_control(self) -> Control:
        return Control(self.group_tag, self.epoch, self.attempt)

    @classmethod
    def from_control(cls, c: Control) -> InstalledMsg:
        _lists(c, 0, 0, "installed")
        return cls(c.group_tag, c.epoch, c.attempt)


@dataclass(frozen=True, slots=True)
class Beacon:
    """A coordinator's periodic announcement of its view's live members
    (discovery and merging of components)."""

    TYPE: ClassVar[MsgType] = MsgType.BEACON
    group_tag: int
    epoch: int
    incarnation: int
    order_code: int
    members: tuple[int, ...]
    """Empty on the wire means the sender alone."""

    def to_control(self) -> Control:
        return Control(self.group_tag, self.epoch, 0, self.incarnation, self.order_code,
                       (tuple((m, 0) for m in self.members),))

    @classmethod
    def from_control(cls, c: Control) -> Beacon:
        _lists(c, 0, 1, "beacon")
        return cls(c.group_tag, c.epoch, c.a, c.b, _members(c.lists[0], "beacon") if c.lists else ())


@dataclass(frozen=True, slots=True)
class Probe:
    """The pull stage: are you there? ``nonce`` comes back in the answer, and
    is not checked there (see ``detector``, "Pull")."""

    TYPE: ClassVar[MsgType] = MsgType.PROBE
    nonce: int

    def to_control(self) -> Control:
        return Control(a=self.nonce)

    @classmethod
    def from_control(cls, c: Control) -> Probe:
        _lists(c, 0, 0, "probe")
        return cls(c.a)


@dataclass(frozen=True, slots=True)
class ProbeAck:
    TYPE: ClassVar[MsgType] = MsgType.PROBE_ACK
    nonce: int

    def to_control(self) -> Control:
        return Control(a=self.nonce)

    @classmethod
    def from_control(cls, c: Control) -> ProbeAck:
        _lists(c, 0, 0, "probe ack")
        return cls(c.a)


@dataclass(frozen=True, slots=True)
class Ask:
    """The ask stage: when did you last hear from ``member``? ``nonce`` is the
    suspicion's; the reply does not echo it, and nothing reads it."""

    TYPE: ClassVar[MsgType] = MsgType.ASK
    member: int
    nonce: int

    def to_control(self) -> Control:
        return Control(a=self.member, b=self.nonce)

    @classmethod
    def from_control(cls, c: Control) -> Ask:
        _lists(c, 0, 0, "ask")
        return cls(c.a, c.b)


@dataclass(frozen=True, slots=True)
class AskReply:
    """The answer to ``Ask``: milliseconds since ``member`` was last heard."""

    TYPE: ClassVar[MsgType] = MsgType.ASK_REPLY
    member: int
    age_ms: int

    def to_control(self) -> Control:
        return Control(a=self.member, b=self.age_ms)

    @classmethod
    def from_control(cls, c: Control) -> AskReply:
        _lists(c, 0, 0, "ask reply")
        return cls(c.a, c.b)


@dataclass(frozen=True, slots=True)
class Obituary:
    """A watcher's verdict, told (``heartbeat = "ring"``): all three stages
    agree that ``member`` failed. Sent to the lowest members of each view
    holding it, who coordinate; only a receiver that has not heard from
    ``member`` itself for a suspect timeout takes it."""

    TYPE: ClassVar[MsgType] = MsgType.OBITUARY
    member: int

    def to_control(self) -> Control:
        return Control(a=self.member)

    @classmethod
    def from_control(cls, c: Control) -> Obituary:
        _lists(c, 0, 0, "obituary")
        return cls(c.a)


ControlMessage = Union[Propose, Flush, CommitMsg, InstalledMsg, Beacon, Probe, ProbeAck, Ask, AskReply, Obituary]
ViewMessage = Union[Propose, Flush, CommitMsg, InstalledMsg, Beacon]

MESSAGES: dict[MsgType, type[ControlMessage]] = {
    cls.TYPE: cls for cls in (Propose, Flush, CommitMsg, InstalledMsg, Beacon, Probe, ProbeAck, Ask, AskReply,
                              Obituary)
}


def encode(message: ControlMessage) -> bytes:
    return encode_control(message.to_control())


def decode_untrusted(msg_type: MsgType, body: bytes) -> ControlMessage:
    """The typed message of ``msg_type`` in ``body``; ``DecodeError`` if the
    body is not one (or the type is not a control type)."""
    cls = MESSAGES.get(msg_type)
    if cls is None:
        raise DecodeError("type", f"{msg_type.name} is not a control message")
    return cls.from_control(decode_control_untrusted(body))


def decode_view_message(msg_type: MsgType, body: bytes) -> ViewMessage:
    """``decode_untrusted`` for the view agreement's types only."""
    message = decode_untrusted(msg_type, body)
    if isinstance(message, (Probe, ProbeAck, Ask, AskReply, Obituary)):
        raise DecodeError("type", f"{msg_type.name} is not a view-agreement message")
    return message
