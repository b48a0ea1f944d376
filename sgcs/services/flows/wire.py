"""What flow members say to each other inside an sgcs group, and its decoding.

Theory of operation (Gryphon, "subscriptions are propagated towards the
publishers"): five messages (eight with per-key order, below), JSON behind
a one-byte tag ``F`` and a version:

* ``sub``  (multicast) a member's name, whether it keeps states, the graph's
  fingerprint, and its subscriptions as ``(space, predicate text)``: every
  member, publishers included, can then compile them (same graph, same
  compiler) and filter at the source;
* ``ev``   (multicast) a batch of events of one root space;
* ``req``  (multicast, so it takes a place in the group's total order: the
  cut) a state transfer request: the space, the subscriber's predicate, and
  for a returning durable subscriber its last rows ``s0``;
* ``snap`` / ``exp`` (unicast to the requester) the rows at the cut, or the
  expansion from ``s0`` to them. A row's window column (``float[W]``) is a
  list of numbers.

In a group with per-key order (``perkey.py``) events travel as:

* ``kev``  (multicast by the events' owner) a batch of events of one root,
  with its origin: the publishing member, its publication ``ticket`` and the
  batch's ``part``, so the publisher recognises it when it is delivered;
* ``fwd``  (unicast from a publisher to an owner) the same, for the owner to
  multicast;
* ``bnc``  (unicast from an owner to the publisher) a forwarded batch the
  owner's multicast did not deliver (rolled back): route it again.

There a request carries the numbers of the messages its sender had
delivered (``vector``: member -> sgcs sequence number) and an answer the cut
it was taken at, in the same form.

Everything from the network is untrusted: ``decode_untrusted`` checks the
shape and the caps and raises only ``DecodeError``; the events themselves are
checked against the space's schema by the engine.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, Union

from sgcs.errors import DecodeError

TAG = b"F1"
MAX_ITEMS = 200_000
"""Events or rows in one message at most."""
MAX_TEXT = 4_096
"""Characters of a name or predicate at most."""
MAX_WINDOW = 10_000
"""Numbers in a window column of a row at most (``window.MAX_CAPACITY``)."""

Row = list[Any]


@dataclass(frozen=True, slots=True)
class Sub:
    name: str
    fingerprint: str
    keeper: bool
    subs: tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class Events:
    root: str
    events: tuple[tuple[Any, ...], ...]


@dataclass(frozen=True, slots=True)
class KeyedEvents:
    """Events of ``root`` from the publisher ``origin`` (its ``ticket``, batch ``part``)."""

    root: str
    origin: int
    ticket: int
    part: int
    events: tuple[tuple[Any, ...], ...]
    forward: bool = False
    """True: a publisher's unicast to the owner (``fwd``); False: the owner's multicast (``kev``)."""


@dataclass(frozen=True, slots=True)
class Bounce:
    ticket: int
    part: int


Pairs = tuple[tuple[int, int], ...]
"""A vector of sgcs sequence numbers, as sorted (member, seq) pairs."""


@dataclass(frozen=True, slots=True)
class Request:
    nonce: str
    space: str
    predicate: str
    s0: tuple[tuple[tuple[Any, ...], tuple[Any, ...]], ...] | None
    vector: Pairs | None = None


@dataclass(frozen=True, slots=True)
class Snapshot:
    nonce: str
    space: str
    rows: tuple[tuple[tuple[Any, ...], tuple[Any, ...]], ...]
    cut: Pairs | None = None


@dataclass(frozen=True, slots=True)
class Expansion:
    nonce: str
    space: str
    events: tuple[tuple[Any, ...], ...]
    cut: Pairs | None = None


Message = Union[Sub, Events, KeyedEvents, Bounce, Request, Snapshot, Expansion]


def encode(message: Message) -> bytes:
    if isinstance(message, Sub):
        body: dict[str, Any] = {"t": "sub", "name": message.name, "fp": message.fingerprint, "keeper": message.keeper,
                                "subs": [list(s) for s in message.subs]}
    elif isinstance(message, Events):
        body = {"t": "ev", "root": message.root, "events": [list(e) for e in message.events]}
    elif isinstance(message, KeyedEvents):
        body = {"t": "fwd" if message.forward else "kev", "root": message.root, "o": message.origin,
                "tk": message.ticket, "pt": message.part, "events": [list(e) for e in message.events]}
    elif isinstance(message, Bounce):
        body = {"t": "bnc", "tk": message.ticket, "pt": message.part}
    elif isinstance(message, Request):
        body = {"t": "req", "nonce": message.nonce, "space": message.space, "pred": message.predicate,
                "s0": None if message.s0 is None else [[list(k), list(r)] for k, r in message.s0]}
        if message.vector is not None:
            body["vec"] = [list(p) for p in message.vector]
    elif isinstance(message, Snapshot):
        body = {"t": "snap", "nonce": message.nonce, "space": message.space,
                "rows": [[list(k), list(r)] for k, r in message.rows]}
        if message.cut is not None:
            body["cut"] = [list(p) for p in message.cut]
    else:
        body = {"t": "exp", "nonce": message.nonce, "space": message.space, "events": [list(e) for e in message.events]}
        if message.cut is not None:
            body["cut"] = [list(p) for p in message.cut]
    return TAG + json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()


def encode_events(root: str, events: list[tuple[Any, ...]], payload_max: int) -> list[bytes]:
    """``events`` as ``Events`` messages of at most ``payload_max`` bytes each
    (one event alone may exceed it), in order."""
    return [encode(Events(root, tuple(batch))) for batch in split_events(root, events, payload_max)]


def split_events(root: str, events: list[tuple[Any, ...]], payload_max: int) -> list[list[tuple[Any, ...]]]:
    """``events`` in batches whose messages stay within ``payload_max`` bytes
    (one event alone may exceed it), in order. A keyed batch's header is
    counted with room for its origin numbers."""
    batches: list[list[tuple[Any, ...]]] = []
    header = len(encode(KeyedEvents(root, 2**63 - 1, 2**40, 2**40, ())))
    start, size = 0, header
    for index, event in enumerate(events):
        width = len(json.dumps(list(event), separators=(",", ":"), ensure_ascii=False).encode()) + 1
        if index > start and size + width > payload_max:
            batches.append(events[start:index])
            start, size = index, header
        size += width
    if start < len(events):
        batches.append(events[start:])
    return batches


def encoded_events_size(root: str, events: list[tuple[Any, ...]]) -> int:
    return len(encode(Events(root, tuple(events))))


def decode_untrusted(payload: bytes) -> Message:
    if not payload.startswith(TAG):
        raise DecodeError("tag", "not a flows message")
    try:
        body = json.loads(payload[len(TAG):])
    except (ValueError, UnicodeDecodeError):
        raise DecodeError("json") from None
    if not isinstance(body, dict):
        raise DecodeError("shape", "not an object")
    decoder = _DECODERS.get(str(body.get("t")))
    if decoder is None:
        raise DecodeError("type", repr(body.get("t"))[:40])
    try:
        return decoder(body)
    except (KeyError, TypeError, ValueError):
        raise DecodeError("shape", str(body.get("t"))) from None


def _text(value: Any) -> str:
    if not isinstance(value, str) or len(value) > MAX_TEXT:
        raise ValueError("text")
    return value


def _items(value: Any) -> list[Any]:
    if not isinstance(value, list) or len(value) > MAX_ITEMS:
        raise ValueError("items")
    return value


def _tuple(value: Any) -> tuple[Any, ...]:
    if not isinstance(value, list) or len(value) > 64:
        raise ValueError("tuple")
    if not all(isinstance(v, (int, float, str, bool)) for v in value):
        raise ValueError("scalar")
    return tuple(value)


def _row(value: Any) -> tuple[Any, ...]:
    """A state row: scalars, and windows (lists of numbers; the schema checks their size)."""
    if not isinstance(value, list) or len(value) > 64:
        raise ValueError("row")
    return tuple(_window(v) if isinstance(v, list) else _tuple([v])[0] for v in value)


def _window(value: list[Any]) -> list[Any]:
    if len(value) > MAX_WINDOW or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
        raise ValueError("window")
    return value


def _rows(value: Any) -> tuple[tuple[tuple[Any, ...], tuple[Any, ...]], ...]:
    return tuple((_tuple(pair[0]), _row(pair[1])) for pair in _items(value) if len(pair) == 2)


def _sub(body: dict[str, Any]) -> Sub:
    subs = tuple((_text(s[0]), _text(s[1])) for s in _items(body["subs"]))
    return Sub(_text(body["name"]), _text(body["fp"]), bool(body["keeper"]), subs)


def _events(body: dict[str, Any]) -> Events:
    return Events(_text(body["root"]), tuple(_tuple(e) for e in _items(body["events"])))


def _number(value: Any) -> int:
    if type(value) is not int or not 0 <= value < 2**64:
        raise ValueError("number")
    return value


def _pairs(value: Any) -> Pairs | None:
    if value is None:
        return None
    return tuple((_number(p[0]), _number(p[1])) for p in _items(value) if isinstance(p, list) and len(p) == 2)


def _keyed(body: dict[str, Any]) -> KeyedEvents:
    return KeyedEvents(_text(body["root"]), _number(body["o"]), _number(body["tk"]), _number(body["pt"]),
                       tuple(_tuple(e) for e in _items(body["events"])), body["t"] == "fwd")


def _bounce(body: dict[str, Any]) -> Bounce:
    return Bounce(_number(body["tk"]), _number(body["pt"]))


def _request(body: dict[str, Any]) -> Request:
    s0 = body["s0"]
    return Request(_text(body["nonce"]), _text(body["space"]), _text(body["pred"]), None if s0 is None else _rows(s0),
                   _pairs(body.get("vec")))


def _snapshot(body: dict[str, Any]) -> Snapshot:
    return Snapshot(_text(body["nonce"]), _text(body["space"]), _rows(body["rows"]), _pairs(body.get("cut")))


def _expansion(body: dict[str, Any]) -> Expansion:
    return Expansion(_text(body["nonce"]), _text(body["space"]), tuple(_tuple(e) for e in _items(body["events"])),
                     _pairs(body.get("cut")))


_DECODERS: dict[str, Callable[[dict[str, Any]], Message]] = {
    "sub": _sub, "ev": _events, "kev": _keyed, "fwd": _keyed, "bnc": _bounce, "req": _request, "snap": _snapshot,
    "exp": _expansion}
