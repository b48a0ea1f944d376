"""What flow members say to each other inside an sgcs group, and its decoding.

Theory of operation (Gryphon, "subscriptions are propagated towards the
publishers"): five messages, JSON behind a one-byte tag ``F`` and a version:

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
class Request:
    nonce: str
    space: str
    predicate: str
    s0: tuple[tuple[tuple[Any, ...], tuple[Any, ...]], ...] | None


@dataclass(frozen=True, slots=True)
class Snapshot:
    nonce: str
    space: str
    rows: tuple[tuple[tuple[Any, ...], tuple[Any, ...]], ...]


@dataclass(frozen=True, slots=True)
class Expansion:
    nonce: str
    space: str
    events: tuple[tuple[Any, ...], ...]


Message = Union[Sub, Events, Request, Snapshot, Expansion]


def encode(message: Message) -> bytes:
    if isinstance(message, Sub):
        body: dict[str, Any] = {"t": "sub", "name": message.name, "fp": message.fingerprint, "keeper": message.keeper,
                                "subs": [list(s) for s in message.subs]}
    elif isinstance(message, Events):
        body = {"t": "ev", "root": message.root, "events": [list(e) for e in message.events]}
    elif isinstance(message, Request):
        body = {"t": "req", "nonce": message.nonce, "space": message.space, "pred": message.predicate,
                "s0": None if message.s0 is None else [[list(k), list(r)] for k, r in message.s0]}
    elif isinstance(message, Snapshot):
        body = {"t": "snap", "nonce": message.nonce, "space": message.space,
                "rows": [[list(k), list(r)] for k, r in message.rows]}
    else:
        body = {"t": "exp", "nonce": message.nonce, "space": message.space, "events": [list(e) for e in message.events]}
    return TAG + json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()


def encode_events(root: str, events: list[tuple[Any, ...]], payload_max: int) -> list[bytes]:
    """``events`` as ``Events`` messages of at most ``payload_max`` bytes each
    (one event alone may exceed it), in order."""
    payloads: list[bytes] = []
    start, size = 0, len(encode(Events(root, ())))
    for index, event in enumerate(events):
        width = len(json.dumps(list(event), separators=(",", ":"), ensure_ascii=False).encode()) + 1
        if index > start and size + width > payload_max:
            payloads.append(encode(Events(root, tuple(events[start:index]))))
            start, size = index, len(encode(Events(root, ())))
        size += width
    if start < len(events):
        payloads.append(encode(Events(root, tuple(events[start:]))))
    return payloads


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


def _request(body: dict[str, Any]) -> Request:
    s0 = body["s0"]
    return Request(_text(body["nonce"]), _text(body["space"]), _text(body["pred"]), None if s0 is None else _rows(s0))


def _snapshot(body: dict[str, Any]) -> Snapshot:
    return Snapshot(_text(body["nonce"]), _text(body["space"]), _rows(body["rows"]))


def _expansion(body: dict[str, Any]) -> Expansion:
    return Expansion(_text(body["nonce"]), _text(body["space"]), tuple(_tuple(e) for e in _items(body["events"])))


_DECODERS: dict[str, Callable[[dict[str, Any]], Message]] = {
    "sub": _sub, "ev": _events, "req": _request, "snap": _snapshot, "exp": _expansion}
