"""Wire codec: golden byte vectors, round trips, and fuzzing of every decoder."""

from __future__ import annotations

import hashlib
import hmac

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sgcs.config import Order
from sgcs.errors import DecodeError
from sgcs.wire import (
    OVERHEAD,
    DataMsg,
    Flag,
    HelloMsg,
    LeaveMsg,
    MsgType,
    decode_data_untrusted,
    decode_datagram_untrusted,
    decode_hello_untrusted,
    decode_leave_untrusted,
    derive_key,
    encode_data,
    encode_hello,
    encode_leave,
    group_tag,
    seal,
)

KEY = derive_key(b"golden-secret")
TAG_G = "6c767cd8aedb30bc"  # blake2b-64("g")


def _independent_tag(hex_signed: str) -> str:
    """The MAC computed without sgcs code: HMAC-SHA256 under the derived key, 16 bytes."""
    key = hmac.new(b"golden-secret", b"sgcs/v1/datagram-auth", hashlib.sha256).digest()
    return hmac.new(key, bytes.fromhex(hex_signed), hashlib.sha256).digest()[:16].hex()


# (datagram built by sgcs, header hex, body hex), laid out by hand from the spec in sgcs/wire.py
GOLDEN = [
    pytest.param(
        lambda: seal(KEY, MsgType.DATA, Flag.NONE, 7, encode_data(DataMsg(group_tag("g"), 1, None, b"hi"))),
        "5347" "01" "01" "00" "0000000000000007",
        TAG_G + "0000000000000001" "00000002" "6869",
        id="data-multicast",
    ),
    pytest.param(
        lambda: seal(KEY, MsgType.DATA, Flag.UNICAST, 7, encode_data(DataMsg(group_tag("g"), 3, 9, b""))),
        "5347" "01" "01" "01" "0000000000000007",
        TAG_G + "0000000000000003" "0000000000000009" "00000000",
        id="data-unicast",
    ),
    pytest.param(
        lambda: seal(KEY, MsgType.HELLO, Flag.NONE, 2**63 - 1, encode_hello(HelloMsg(group_tag("chat"), Order.TOTAL, True))),
        "5347" "01" "02" "00" "7fffffffffffffff",
        "f4b9072f0eaeb42c" "02" "01",
        id="hello",
    ),
    pytest.param(
        lambda: seal(KEY, MsgType.LEAVE, Flag.NONE, 0, encode_leave(LeaveMsg(group_tag("chat")))),
        "5347" "01" "03" "00" "0000000000000000",
        "f4b9072f0eaeb42c",
        id="leave",
    ),
]


@pytest.mark.parametrize("build, header_hex, body_hex", GOLDEN)
def test_golden_vectors(build, header_hex: str, body_hex: str) -> None:
    signed = header_hex + body_hex
    assert build().hex() == signed + _independent_tag(signed)


def test_group_tag_is_blake2b_64() -> None:
    assert f"{group_tag('g'):016x}" == TAG_G


@given(
    sender=st.integers(0, 2**63 - 1),
    tag=st.integers(0, 2**64 - 1),
    seq=st.integers(0, 2**64 - 1),
    dest=st.none() | st.integers(0, 2**63 - 1),
    payload=st.binary(max_size=2_000),
)
def test_data_round_trip(sender: int, tag: int, seq: int, dest: int | None, payload: bytes) -> None:
    msg = DataMsg(tag, seq, dest, payload)
    flags = Flag.NONE if dest is None else Flag.UNICAST
    header, body = decode_datagram_untrusted(seal(KEY, MsgType.DATA, flags, sender, encode_data(msg)), KEY)
    assert (header.msg_type, header.flags, header.sender) == (MsgType.DATA, flags, sender)
    assert decode_data_untrusted(body, header.flags) == msg


@given(tag=st.integers(0, 2**64 - 1), order=st.sampled_from(list(Order)), reply=st.booleans())
def test_hello_and_leave_round_trip(tag: int, order: Order, reply: bool) -> None:
    assert decode_hello_untrusted(encode_hello(HelloMsg(tag, order, reply))) == HelloMsg(tag, order, reply)
    assert decode_leave_untrusted(encode_leave(LeaveMsg(tag))) == LeaveMsg(tag)


DECODERS = [
    lambda b: decode_datagram_untrusted(b, KEY),
    lambda b: decode_data_untrusted(b, Flag.NONE),
    lambda b: decode_data_untrusted(b, Flag.UNICAST),
    decode_hello_untrusted,
    decode_leave_untrusted,
]


@pytest.mark.parametrize("decode", DECODERS)
@settings(max_examples=500)
@given(data=st.binary(max_size=300))
def test_decoders_raise_only_decode_error(decode, data: bytes) -> None:
    try:
        decode(data)
    except DecodeError:
        pass


@settings(max_examples=300)
@given(payload=st.binary(max_size=64), position=st.integers(0, 10_000), bit=st.integers(0, 7))
def test_any_flipped_bit_is_rejected(payload: bytes, position: int, bit: int) -> None:
    good = bytearray(seal(KEY, MsgType.DATA, Flag.NONE, 5, encode_data(DataMsg(1, 1, None, payload))))
    good[position % len(good)] ^= 1 << bit
    with pytest.raises(DecodeError):
        decode_datagram_untrusted(bytes(good), KEY)


@pytest.mark.parametrize(
    "mangle, reason",
    [
        (lambda d: d[:OVERHEAD - 1], "short"),
        (lambda d: b"XX" + d[2:], "magic"),
        (lambda d: d[:2] + b"\x09" + d[3:], "version"),
        (lambda d: d[:-1] + bytes([d[-1] ^ 1]), "mac"),
        (lambda d: d + b"\x00" * 65_600, "length"),
    ],
)
def test_decode_reasons(mangle, reason: str) -> None:
    datagram = seal(KEY, MsgType.DATA, Flag.NONE, 5, encode_data(DataMsg(1, 1, None, b"x")))
    with pytest.raises(DecodeError) as info:
        decode_datagram_untrusted(mangle(datagram), KEY)
    assert info.value.reason == reason


def test_authentic_but_lying_length_is_rejected() -> None:
    body = encode_data(DataMsg(1, 1, None, b"abc"))[:-1]  # says 3 payload bytes, carries 2
    header, checked = decode_datagram_untrusted(seal(KEY, MsgType.DATA, Flag.NONE, 5, body), KEY)
    with pytest.raises(DecodeError) as info:
        decode_data_untrusted(checked, header.flags)
    assert info.value.reason == "length"


def test_unknown_type_with_valid_mac_is_rejected() -> None:
    import struct

    signed = struct.pack("!2sBBBQ", b"SG", 1, 250, 0, 5)
    datagram = signed + hmac.new(KEY, signed, hashlib.sha256).digest()[:16]
    with pytest.raises(DecodeError) as info:
        decode_datagram_untrusted(datagram, KEY)
    assert info.value.reason == "type"


def test_other_secret_is_rejected() -> None:
    datagram = seal(derive_key(b"another-secret"), MsgType.LEAVE, Flag.NONE, 1, encode_leave(LeaveMsg(1)))
    with pytest.raises(DecodeError) as info:
        decode_datagram_untrusted(datagram, KEY)
    assert info.value.reason == "mac"
