"""Transaction codes and the frame that carries them (the ADS middleware; docs/handles.md).

Theory of operation
-------------------
In the ADS communication middleware, data is not addressed to receivers but
tagged with a **transaction code** (TCD): codes 1-59,999 belong to
applications, 60,000 and up to the middleware's own coordination. Here the
code rides in a small header in front of the application's bytes, so one sgcs
group (the paper's "data field") carries any number of codes, and every member
filters what it delivers by the codes its receive handles hold.

Frame (big-endian): magic 0xAD, version 1, TCD (u16), priority (u8), target
node (u64; 0: every member), then the data. Codes fit 16 bits: the reserved
range is 60,000-65,535. ``decode_frame_untrusted`` raises only ``DecodeError``;
the module drops and counts such frames.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import NamedTuple

from sgcs.errors import DecodeError, UsageError

APP_MIN, APP_MAX = 1, 59_999
RESERVED_MIN, CODE_MAX = 60_000, 65_535
PRIORITIES = 10
"""Send priorities 0 (lowest) to 9 (highest), as the queues use."""
MAGIC, VERSION = 0xAD, 1
_HEADER = struct.Struct(">BBHBQ")
HEADER_SIZE = _HEADER.size

# Reserved codes the middleware uses for its own coordination.
TCD_CLAIM = 60_001
"""Multicast in total order: "I claim single-TCD receive of code X"."""
TCD_ANSWER = 60_002
"""Unicast to a claimant: "fine by me" or "member M holds it"."""
TCD_RELEASE = 60_003
"""Multicast: the holder gave the code up (detach, or the handle closed)."""
TCD_ABANDON = 60_004
"""Multicast: a refused claimant withdraws its claim."""
TCD_HOLDINGS = 60_005
"""Multicast after every view change: "in view V I hold these codes and claim those"
(the claim tables' exchange that reconciles a merge, claims.py)."""
TCD_SIGNAL = 60_006
"""Unicast every interval T to every other member: a survival signal (stage 1, survival.py)."""
TCD_PROBE = 60_007
"""Unicast to a suspect: "answer at once" (stage 2)."""
TCD_PROBE_ACK = 60_008
"""Unicast: the answer to a probe."""
TCD_ASK = 60_009
"""Unicast to a neighbour: "when did you last hear from node X?" (stage 3)."""
TCD_ASK_REPLY = 60_010
"""Unicast: the neighbour's answer (an age in milliseconds, or never)."""
TCD_MAINTENANCE = 60_011
"""Multicast in total order: the sender enters (1) or leaves (0) maintenance."""
SURVIVAL_CODES = frozenset({TCD_SIGNAL, TCD_PROBE, TCD_PROBE_ACK, TCD_ASK, TCD_ASK_REPLY})


class Frame(NamedTuple):
    tcd: int
    priority: int
    target: int
    """The one node meant to keep it (0: every member)."""
    data: bytes


def check_app_code(code: object) -> int:
    """An application's transaction code, or a one-line UsageError."""
    if type(code) is not int or not APP_MIN <= code <= APP_MAX:
        raise UsageError(f"transaction code must be an int from {APP_MIN:,} to {APP_MAX:,} "
                         f"({RESERVED_MIN:,} and up are reserved for the middleware), got {code!r}")
    return code


def check_priority(priority: object) -> int:
    if type(priority) is not int or not 0 <= priority < PRIORITIES:
        raise UsageError(f"data priority must be an int from 0 to {PRIORITIES - 1}, got {priority!r}")
    return priority


def encode_frame(tcd: int, data: bytes, *, priority: int = 0, target: int = 0) -> bytes:
    return _HEADER.pack(MAGIC, VERSION, tcd, priority, target) + data


def decode_frame_untrusted(payload: bytes) -> Frame:
    if len(payload) < HEADER_SIZE:
        raise DecodeError("length", f"a frame has at least {HEADER_SIZE} bytes, got {len(payload)}")
    magic, version, tcd, priority, target = _HEADER.unpack_from(payload)
    if magic != MAGIC:
        raise DecodeError("magic", f"{magic:#x}")
    if version != VERSION:
        raise DecodeError("version", str(version))
    if tcd == 0 or priority >= PRIORITIES:
        raise DecodeError("field", f"tcd {tcd} priority {priority}")
    return Frame(tcd, priority, target, payload[HEADER_SIZE:])


_CLAIM = struct.Struct(">HQ")          # tcd, nonce
_ANSWER = struct.Struct(">HQQQ")       # tcd, claimant, nonce, holder (0: no objection)


def encode_claim(tcd: int, nonce: int) -> bytes:
    return _CLAIM.pack(tcd, nonce)


def decode_claim_untrusted(data: bytes) -> tuple[int, int]:
    if len(data) != _CLAIM.size:
        raise DecodeError("length", "claim")
    tcd, nonce = _CLAIM.unpack(data)
    if not APP_MIN <= tcd <= APP_MAX:
        raise DecodeError("field", f"claim of code {tcd}")
    return tcd, nonce


def encode_answer(tcd: int, claimant: int, nonce: int, holder: int) -> bytes:
    return _ANSWER.pack(tcd, claimant, nonce, holder)


def decode_answer_untrusted(data: bytes) -> tuple[int, int, int, int]:
    if len(data) != _ANSWER.size:
        raise DecodeError("length", "answer")
    tcd, claimant, nonce, holder = _ANSWER.unpack(data)
    return tcd, claimant, nonce, holder


_HOLDINGS = struct.Struct(">BHH")      # view id length, held count, pending count; then the view id (ASCII)
_HELD = struct.Struct(">HQQ")          # tcd, nonce, granted (microseconds since the Unix epoch, the holder's clock)
_PENDING = _CLAIM                      # tcd, nonce
VIEW_ID_MAX = 255


def encode_holdings(view_id: str, held: Sequence[tuple[int, int, int]], pending: Sequence[tuple[int, int]]) -> bytes:
    """A member's report for the exchange of view ``view_id``: its granted codes
    ``(tcd, nonce, granted_us)`` and its claims under way ``(tcd, nonce)``."""
    name = view_id.encode("ascii")
    if len(name) > VIEW_ID_MAX:
        raise UsageError(f"a view id has at most {VIEW_ID_MAX} ASCII characters, got {len(name)}")
    return b"".join([_HOLDINGS.pack(len(name), len(held), len(pending)), name,
                     *(_HELD.pack(*entry) for entry in held), *(_PENDING.pack(*entry) for entry in pending)])


def decode_holdings_untrusted(data: bytes) -> tuple[str, list[tuple[int, int, int]], list[tuple[int, int]]]:
    if len(data) < _HOLDINGS.size:
        raise DecodeError("length", "holdings")
    name_length, held_count, pending_count = _HOLDINGS.unpack_from(data)
    if len(data) != _HOLDINGS.size + name_length + held_count * _HELD.size + pending_count * _PENDING.size:
        raise DecodeError("length", "holdings")
    offset = _HOLDINGS.size + name_length
    try:
        view_id = data[_HOLDINGS.size:offset].decode("ascii")
    except UnicodeDecodeError:
        raise DecodeError("field", "holdings view id") from None
    held = [_HELD.unpack_from(data, offset + i * _HELD.size) for i in range(held_count)]
    offset += held_count * _HELD.size
    pending = [_PENDING.unpack_from(data, offset + i * _PENDING.size) for i in range(pending_count)]
    if any(not APP_MIN <= entry[0] <= APP_MAX for entry in [*held, *pending]):
        raise DecodeError("field", "holdings of a code outside the application range")
    return view_id, held, pending


_ASK = struct.Struct(">QQ")            # about, nonce
_ASK_REPLY = struct.Struct(">QQI")     # about, nonce, age in ms (AGE_NEVER: never heard)
AGE_NEVER = 0xFFFF_FFFF
"""An ask reply's age meaning "never heard from it" (also any age of 49.7 days or more)."""


def encode_ask(about: int, nonce: int) -> bytes:
    return _ASK.pack(about, nonce)


def decode_ask_untrusted(data: bytes) -> tuple[int, int]:
    if len(data) != _ASK.size:
        raise DecodeError("length", "ask")
    about, nonce = _ASK.unpack(data)
    return about, nonce


def encode_ask_reply(about: int, nonce: int, age: float) -> bytes:
    """``age`` in seconds (``math.inf``: never heard)."""
    age_ms = AGE_NEVER if age == float("inf") else min(AGE_NEVER, int(age * 1000))
    return _ASK_REPLY.pack(about, nonce, age_ms)


def decode_ask_reply_untrusted(data: bytes) -> tuple[int, int, float]:
    """(about, nonce, age in seconds; ``math.inf``: never heard)."""
    if len(data) != _ASK_REPLY.size:
        raise DecodeError("length", "ask reply")
    about, nonce, age_ms = _ASK_REPLY.unpack(data)
    return about, nonce, float("inf") if age_ms == AGE_NEVER else age_ms / 1000


def encode_maintenance(on: bool) -> bytes:
    return b"\x01" if on else b"\x00"


def decode_maintenance_untrusted(data: bytes) -> bool:
    if data not in (b"\x00", b"\x01"):
        raise DecodeError("field", "maintenance flag")
    return data == b"\x01"
