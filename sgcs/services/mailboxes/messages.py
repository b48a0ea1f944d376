"""Mails, migrating-instance state and the post-office wire messages.

Theory of operation (after the Shandong migrating-workflow paper; docs/mailboxes.md):
an MI's name ``system|domain|host|id`` never changes; its *domain* part is the
home post office, which keeps the MI's source mailbox (home record). A mail is
identified end to end by ``(sender, receiver, seq)``, where ``seq`` counts the
mails one sender MI sent to one receiver MI. The sender's counters and the
receiver's next-expected numbers are :class:`MIState`, which travels with the
MI when it moves: that is what makes delivery exactly once and in order
whichever post offices the mail passed through.

Post offices exchange :class:`Envelope` values. They are JSON documents with a
fixed shape per kind, checked field by field by :func:`decode_envelope_untrusted`
(no pickle, nothing deserialised into arbitrary objects, every size capped);
it raises only ``DecodeError``. JSON rather than ``struct`` because these are
service messages whose bulk is the mail content; the sgcs wire below
authenticates every datagram.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from sgcs.errors import DecodeError, UsageError

MAX_NAME = 200
"""Characters in an MI name at most."""
MAX_TITLE = 200
MAX_CONTENT = 64 * 1024
"""Bytes of mail content at most."""
MAX_APP_STATE = 256 * 1024
"""Bytes of application state an MI carries when it moves."""
MAX_ENVELOPE = 8 * 1024 * 1024
"""Bytes of one encoded envelope at most (a forward batch is the largest)."""
MAX_ITEMS = 20_000
"""Mails, acks or friends in one envelope at most."""
MAX_PEERS = 100_000
"""Entries in an MI's per-peer counters at most."""


def make_name(system: str, domain: int, host: str, ident: str) -> str:
    """The MI name ``system|domain|host|id``; the domain is the home post office."""
    for part, what in ((system, "system"), (host, "host"), (ident, "id")):
        if not part or "|" in part:
            raise UsageError(f"MI name {what} must be a non-empty string without '|', got {part!r}")
    if not isinstance(domain, int) or domain < 0:
        raise UsageError(f"MI name domain must be a non-negative int, got {domain!r}")
    name = f"{system}|{domain}|{host}|{ident}"
    if len(name) > MAX_NAME:
        raise UsageError(f"MI name longer than {MAX_NAME} characters")
    return name


def home_of(name: str) -> int:
    """The home domain written in an MI name (its second field)."""
    parts = name.split("|")
    if len(parts) != 4 or not parts[1].isdigit():
        raise UsageError(f"not an MI name (system|domain|host|id): {name!r}")
    return int(parts[1])


@dataclass(frozen=True, slots=True)
class Mail:
    """One mail, as the paper's active mailbox holds it."""

    sender: str
    receiver: str
    seq: int
    title: str
    content: bytes
    sender_po: int
    """The domain whose post office took the mail from its sender."""
    time: float
    """The sender's clock when it sent the mail (informative only)."""

    @property
    def key(self) -> tuple[str, str, int]:
        """The end-to-end mail id."""
        return (self.receiver, self.sender, self.seq)

    def to_json(self) -> list[Any]:
        return [self.sender, self.receiver, self.seq, self.title,
                base64.b64encode(self.content).decode("ascii"), self.sender_po, self.time]

    @staticmethod
    def from_json(value: Any) -> Mail:
        v = _list(value, 7)
        content = _b64(v[4], MAX_CONTENT)
        return Mail(_name(v[0]), _name(v[1]), _nat(v[2]), _str(v[3], MAX_TITLE), content, _nat(v[5]), _float(v[6]))


@dataclass(slots=True)
class MIState:
    """What an MI carries with it: its counters and its application state."""

    name: str
    epoch: int = 0
    """How many times the MI has moved; orders address records."""
    next_seq: dict[str, int] = field(default_factory=dict)
    """Per receiver, the seq of the next mail this MI sends it."""
    next_expected: dict[str, int] = field(default_factory=dict)
    """Per sender, the seq of the next mail this MI will deliver."""
    app_state: bytes = b""
    delivered: int = 0
    """Mails this MI has pulled in its life: the position of each in its delivery order."""

    def to_json(self) -> list[Any]:
        return [self.name, self.epoch, self.next_seq, self.next_expected,
                base64.b64encode(self.app_state).decode("ascii"), self.delivered]

    @staticmethod
    def from_json(value: Any) -> MIState:
        v = _list(value, 6)
        return MIState(_name(v[0]), _nat(v[1]), _counters(v[2]), _counters(v[3]), _b64(v[4], MAX_APP_STATE), _nat(v[5]))


class Kind(str, Enum):
    """Post-office message kinds. The paper's control messages are QUERY,
    ANSWER, DEREG, UPDATE and HOME_UPDATE; MAIL and FORWARD carry mail; the
    *_ACK kinds and NACK are what this implementation adds so that every
    exchange survives loss and crashes (the paper assumes a reliable network)."""

    MAIL = "mail"
    MAIL_ACK = "mail_ack"
    NACK = "nack"
    QUERY = "query"
    ANSWER = "answer"
    MIGRATE = "migrate"
    DEREG = "dereg"
    FORWARD = "forward"
    FORWARD_ACK = "forward_ack"
    UPDATE = "update"
    UPDATE_ACK = "update_ack"
    HOME_UPDATE = "home_update"
    HOME_ACK = "home_ack"


@dataclass(frozen=True, slots=True)
class Envelope:
    """One post-office message: its kind, the sending domain, and a body
    whose shape depends on the kind (checked by ``_BODY_CHECKS``)."""

    kind: Kind
    source: int
    body: Any

    def encode(self) -> bytes:
        return json.dumps([self.kind.value, self.source, self.body], separators=(",", ":")).encode()


def pack_envelopes(lines: list[bytes], limit: int) -> list[bytes]:
    """Encoded envelopes to one post office as few payloads of about ``limit``
    bytes as they fit in: ``b"M"`` then the envelopes, one per line (JSON
    has no raw newline). The trio shell and the simulator both send these."""
    payloads, current, size = [], [b"M"], 1
    for line in lines:
        if size + len(line) + 1 > limit and len(current) > 1:
            payloads.append(current[0] + b"\n".join(current[1:]))
            current, size = [b"M"], 1
        current.append(line)
        size += len(line) + 1
    if len(current) > 1:
        payloads.append(current[0] + b"\n".join(current[1:]))
    return payloads


def decode_envelope_untrusted(data: bytes) -> Envelope:
    """Parse and check one envelope; raises only ``DecodeError``."""
    if len(data) > MAX_ENVELOPE:
        raise DecodeError("length", f"{len(data)} bytes")
    try:
        value = json.loads(data)
        v = _list(value, 3)
        kind = Kind(v[0])
        source = _nat(v[1])
        _BODY_CHECKS[kind](v[2])
        return Envelope(kind, source, v[2])
    except DecodeError:
        raise
    except (ValueError, TypeError, KeyError, UnicodeDecodeError, RecursionError) as error:
        raise DecodeError("body", str(error)[:100]) from None


# --- field checks: each raises DecodeError on anything unexpected -------------


def _fail(what: str) -> DecodeError:
    return DecodeError("body", what)


def _list(value: Any, length: int | None = None) -> list[Any]:
    if not isinstance(value, list) or (length is not None and len(value) != length):
        raise _fail(f"expected a list of {length}")
    if len(value) > MAX_ITEMS:
        raise _fail("too many items")
    return value


def _nat(value: Any) -> int:
    if type(value) is not int or value < 0 or value > 2**62:
        raise _fail("expected a natural number")
    return value


def _int(value: Any) -> int:
    if type(value) is not int or abs(value) > 2**62:
        raise _fail("expected an int")
    return value


def _float(value: Any) -> float:
    if type(value) not in (int, float):
        raise _fail("expected a number")
    return float(value)


def _str(value: Any, cap: int) -> str:
    if not isinstance(value, str) or len(value) > cap:
        raise _fail("expected a short string")
    return value


def _name(value: Any) -> str:
    name = _str(value, MAX_NAME)
    parts = name.split("|")
    if len(parts) != 4 or not parts[1].isdigit():
        raise _fail("expected an MI name")
    return name


def _b64(value: Any, cap: int) -> bytes:
    text = _str(value, cap * 4 // 3 + 4)
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (ValueError, UnicodeEncodeError):
        raise _fail("bad base64") from None


def _counters(value: Any) -> dict[str, int]:
    if not isinstance(value, dict) or len(value) > MAX_PEERS:
        raise _fail("expected a counter table")
    return {_name(k): _nat(n) for k, n in value.items()}


def _mails(value: Any) -> list[Mail]:
    return [Mail.from_json(m) for m in _list(value)]


def _key(value: Any) -> tuple[str, str, int, int]:
    """A mail id and the token of the holding it was sent from."""
    v = _list(value, 4)
    return (_name(v[0]), _name(v[1]), _nat(v[2]), _nat(v[3]))


def _mail_items(value: Any) -> None:
    """MAIL bodies: each item is a mail followed by its holding's token."""
    for item in _list(value):
        v = _list(item, 8)
        Mail.from_json(v[:7])
        _nat(v[7])


def _address(value: Any) -> tuple[str, int, int]:
    """(name, post office or -1 for unknown, epoch)."""
    v = _list(value, 3)
    return (_name(v[0]), _int(v[1]), _nat(v[2]))


def _check_mail_ack(body: Any) -> None:
    v = _list(body, 2)
    for key in _list(v[0]):
        _key(key)
    for hint in _list(v[1]):
        _address(hint)


def _check_forward(body: Any) -> None:
    v = _list(body, 4)
    _name(v[0]), _nat(v[1]), _mails(v[2])
    for friend in _list(v[3]):
        _nat(friend)


def _check_name_epoch(body: Any) -> None:
    v = _list(body, 2)
    _name(v[0]), _nat(v[1])


_BODY_CHECKS: dict[Kind, Any] = {
    Kind.MAIL: _mail_items,
    Kind.MAIL_ACK: _check_mail_ack,
    Kind.NACK: lambda body: [_key(k) for k in _list(body)],
    Kind.QUERY: _name,
    Kind.ANSWER: _address,
    Kind.MIGRATE: MIState.from_json,
    Kind.DEREG: _check_name_epoch,
    Kind.FORWARD: _check_forward,
    Kind.FORWARD_ACK: _check_name_epoch,
    Kind.UPDATE: _address,
    Kind.UPDATE_ACK: _check_name_epoch,
    Kind.HOME_UPDATE: _address,
    Kind.HOME_ACK: _check_name_epoch,
}
