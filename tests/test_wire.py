"""Wire codec: golden byte vectors, round trips, and fuzzing of every decoder."""

from __future__ import annotations

import hashlib
import hmac
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sgcs.config import Order
from sgcs.errors import DecodeError
from sgcs.records import Record
from sgcs.wire import (
    OVERHEAD,
    VERSION,
    Flag,
    HelloMsg,
    LeaveMsg,
    MsgType,
    VerifiedMemo,
    decode_datagram_untrusted,
    decode_entries_untrusted,
    decode_hello_untrusted,
    decode_leave_untrusted,
    decode_nack_untrusted,
    decode_null_untrusted,
    decode_records_untrusted,
    decode_stable_untrusted,
    decode_unicast_untrusted,
    derive_key,
    encode_entries,
    NAME_MAX,
    encode_hello,
    encode_leave,
    encode_nack,
    encode_null,
    encode_records,
    encode_roster_heartbeat,
    encode_stable,
    encode_unicast,
    group_tag,
    seal,
)

KEY = derive_key(b"golden-secret")
TAG_G = "6c767cd8aedb30bc"  # blake2b-64("g")


def _independent_tag(hex_signed: str) -> str:
    """The MAC computed without sgcs code: HMAC-SHA256 under the derived key
    (HKDF-SHA256, RFC 5869: extract with the salt, expand with the label), 16 bytes."""
    prk = hmac.new(b"sgcs/v2 datagram keys", b"golden-secret", hashlib.sha256).digest()
    key = hmac.new(prk, b"sgcs datagram authentication\x01", hashlib.sha256).digest()
    return hmac.new(key, bytes.fromhex(hex_signed), hashlib.sha256).digest()[:16].hex()


# (datagram built by sgcs, header hex, body hex), laid out by hand from the spec in sgcs/wire.py
GOLDEN = [
    pytest.param(
        lambda: seal(KEY, MsgType.DATA, Flag.NONE, 7,
                     encode_records(group_tag("g"), [Record(7, 1, ((2, 5), (300, 1)), 0, b"hi")])),
        "5347" "04" "01" "00" "0000000000000007" "0000000000000000" "0000000000000000",
        # tag, 1 record: sender 7, seq 1, flags 0, 2 payload bytes, 6 ack bytes
        # (count 2; sender 2, high 5; sender delta 298 = 2*128+42 = varint aa02, high 1), payload
        TAG_G + "0001" "0000000000000007" "0000000000000001" "00" "00000002" "0006" "02" "0205" "aa0201" "6869",
        id="data-multicast",
    ),
    pytest.param(
        lambda: seal(KEY, MsgType.DATA, Flag.NONE, 7,
                     encode_records(group_tag("g"), [Record(7, 2, (), 0, b"", 300), Record(7, 3, ((2, 5),), 0, b"", 1)])),
        "5347" "04" "01" "00" "0000000000000007" "0000000000000000" "0000000000000000",
        # an ordered group's records carry their sender's clock after the ACKs:
        # no ACKs (count 0), clock 300 = varint ac02; then one ACK (2, 5), clock 1
        TAG_G + "0002" "0000000000000007" "0000000000000002" "00" "00000000" "0003" "00" "ac02"
        "0000000000000007" "0000000000000003" "00" "00000000" "0004" "01" "0205" "01",
        id="data-ordered",
    ),
    pytest.param(
        lambda: seal(KEY, MsgType.DATA, Flag.UNICAST, 7,
                     encode_unicast(9, group_tag("g"), [Record(7, 3, (), 1, b"")])),
        "5347" "04" "01" "01" "0000000000000007" "0000000000000000" "0000000000000000",
        "0000000000000009" + TAG_G + "0001" "0000000000000007" "0000000000000003" "01" "00000000" "0001" "00",
        id="data-unicast",
    ),
    pytest.param(
        lambda: seal(KEY, MsgType.NACK, Flag.NONE, 1, encode_nack(group_tag("g"), 7, ((3, 4), (9, 9)), True),
                     boot=(3 << 32) | 0xABCDEF01, counter=258),
        "5347" "04" "06" "00" "0000000000000001" "00000003abcdef01" "0000000000000102",
        TAG_G + "0000000000000007" "01" "02" "0000000000000003" "0000000000000004" "0000000000000009" "0000000000000009",
        id="nack",
    ),
    pytest.param(
        lambda: seal(KEY, MsgType.DIGEST, Flag.NONE, 1, encode_entries(group_tag("g"), ((4, 130),))),
        "5347" "04" "07" "00" "0000000000000001" "0000000000000000" "0000000000000000",
        TAG_G + "01" "04" "8201",
        id="digest",
    ),
    pytest.param(
        lambda: seal(KEY, MsgType.NULL, Flag.NONE, 1, encode_null(group_tag("g"), ((1, 9), (4, 130)), 77)),
        "5347" "04" "08" "00" "0000000000000001" "0000000000000000" "0000000000000000",
        # entries (1, 9) and (4, 130), then the promised clock 77
        TAG_G + "02" "0109" "038201" "4d",
        id="null-promise",
    ),
    pytest.param(
        lambda: seal(KEY, MsgType.STABLE, Flag.NONE, 1, encode_stable(group_tag("g"), 0x01020304, ((4, 130),))),
        "5347" "04" "09" "00" "0000000000000001" "0000000000000000" "0000000000000000",
        # the roster every member of which holds sender 4 up to 130
        TAG_G + "01020304" "01" "04" "8201",
        id="stable",
    ),
    pytest.param(
        lambda: seal(KEY, MsgType.HEARTBEAT_ROSTER, Flag.NONE, 3,
                     encode_roster_heartbeat(0xDEADBEEF, 2, np.array([1, 65535, 65536 + 7], dtype=np.int64))),
        "5347" "04" "15" "00" "0000000000000003" "0000000000000000" "0000000000000000",
        # roster tag, start 2, 3 counters of 2 bytes each, modulo 2**16
        "deadbeef" "00000002" "00000003" "0001" "ffff" "0007",
        id="heartbeat-roster",
    ),
    pytest.param(
        lambda: seal(KEY, MsgType.HELLO, Flag.NONE, 2**63 - 1, encode_hello(HelloMsg(group_tag("chat"), Order.TOTAL, True))),
        "5347" "04" "02" "00" "7fffffffffffffff" "0000000000000000" "0000000000000000",
        "f4b9072f0eaeb42c" "02" "01",
        id="hello",
    ),
    pytest.param(
        lambda: seal(KEY, MsgType.HELLO, Flag.NONE, 2**63 - 1,
                     encode_hello(HelloMsg(group_tag("chat"), Order.TOTAL, False, "ann"))),
        "5347" "04" "02" "00" "7fffffffffffffff" "0000000000000000" "0000000000000000",
        # the fixed part, then the sender's name in UTF-8 to the end of the body
        "f4b9072f0eaeb42c" "02" "00" "616e6e",
        id="hello-named",
    ),
    pytest.param(
        lambda: seal(KEY, MsgType.LEAVE, Flag.NONE, 0, encode_leave(LeaveMsg(group_tag("chat")))),
        "5347" "04" "03" "00" "0000000000000000" "0000000000000000" "0000000000000000",
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


IDS = st.integers(0, 2**63 - 1)
ACKS = st.lists(st.tuples(IDS, IDS), max_size=20, unique_by=lambda a: a[0]).map(lambda a: tuple(sorted(a)))
RECORDS = st.lists(
    st.builds(Record, IDS, st.integers(0, 2**64 - 1), ACKS, st.integers(0, 1), st.binary(max_size=300),
              st.just(0) | st.integers(1, 2**63 - 1)), max_size=8
)


@given(sender=IDS, tag=st.integers(0, 2**64 - 1), dest=st.none() | IDS, records=RECORDS)
def test_records_round_trip(sender: int, tag: int, dest: int | None, records: list[Record]) -> None:
    flags = Flag.NONE if dest is None else Flag.UNICAST
    body = encode_records(tag, records) if dest is None else encode_unicast(dest, tag, records)
    header, checked = decode_datagram_untrusted(seal(KEY, MsgType.DATA, flags, sender, body), KEY)
    assert (header.msg_type, header.flags, header.sender) == (MsgType.DATA, flags, sender)
    if dest is None:
        assert decode_records_untrusted(checked) == (tag, tuple(records))
    else:
        assert decode_unicast_untrusted(checked) == (dest, tag, tuple(records))


@given(tag=st.integers(0, 2**64 - 1), sender=IDS, pull=st.booleans(),
       ranges=st.lists(st.tuples(st.integers(0, 2**40), st.integers(0, 2**31)).map(lambda r: (r[0], r[0] + r[1])),
                       max_size=64),
       entries=ACKS)
def test_control_round_trip(tag: int, sender: int, pull: bool, ranges: list, entries: tuple) -> None:
    assert decode_nack_untrusted(encode_nack(tag, sender, tuple(ranges), pull)) == (tag, sender, tuple(ranges), pull)
    assert decode_entries_untrusted(encode_entries(tag, entries)) == (tag, entries)


@given(tag=st.integers(0, 2**64 - 1), entries=ACKS, clock=st.just(0) | st.integers(1, 2**63 - 1),
       roster=st.integers(0, 2**32 - 1))
def test_null_and_stable_round_trip(tag: int, entries: tuple, clock: int, roster: int) -> None:
    assert decode_null_untrusted(encode_null(tag, entries, clock)) == (tag, entries, clock)
    assert decode_stable_untrusted(encode_stable(tag, roster, entries)) == (tag, roster, entries)


@pytest.mark.parametrize("tail, what", [(b"\x00", "clock out of range"), (b"\x05\x00", "trailing bytes"),
                                        (b"\xff" * 9 + b"\x01", "clock out of range"), (b"\x80", "varint")])
def test_a_bad_clock_is_rejected(tail: bytes, what: str) -> None:
    null = encode_entries(1, ((2, 3),)) + tail
    record = encode_records(1, [Record(5, 1, ((2, 3),), 0, b"")])
    block = 3  # the ACK block ends the record (no payload): count 1, sender 2, high 3
    record = record[:-(block + 2)] + (block + len(tail)).to_bytes(2, "big") + record[-block:] + tail
    for decode, body in ((decode_null_untrusted, null), (decode_records_untrusted, record)):
        with pytest.raises(DecodeError, match=what):
            decode(body)


@given(tag=st.integers(0, 2**64 - 1), order=st.sampled_from(list(Order)), reply=st.booleans(),
       name=st.text(max_size=20))
def test_hello_and_leave_round_trip(tag: int, order: Order, reply: bool, name: str) -> None:
    assert decode_hello_untrusted(encode_hello(HelloMsg(tag, order, reply))) == HelloMsg(tag, order, reply)
    named = decode_hello_untrusted(encode_hello(HelloMsg(tag, order, reply, name)))
    assert named == HelloMsg(tag, order, reply, name) or len(name.encode()) > NAME_MAX
    assert decode_leave_untrusted(encode_leave(LeaveMsg(tag))) == LeaveMsg(tag)
    asking = HelloMsg(tag, order, False, name[:8], names_wanted=True)
    assert decode_hello_untrusted(encode_hello(asking)) == asking


def test_a_long_name_is_cut_on_a_character_and_garbage_names_never_raise() -> None:
    long = "é" * 40  # 80 bytes: cut to 64, inside no character
    assert decode_hello_untrusted(encode_hello(HelloMsg(1, Order.FIFO, False, long))).name == "é" * 32
    cut = encode_hello(HelloMsg(1, Order.FIFO, False, "ab€"))[:-1]  # half a euro sign
    assert decode_hello_untrusted(cut).name == "ab"
    assert decode_hello_untrusted(cut[:-2] + b"\xff\xfe").name.startswith("a")
    with pytest.raises(DecodeError, match="length"):
        decode_hello_untrusted(encode_hello(HelloMsg(1, Order.FIFO, False)) + b"x" * (NAME_MAX + 1))


DECODERS = [
    lambda b: decode_datagram_untrusted(b, KEY),
    decode_records_untrusted,
    decode_unicast_untrusted,
    decode_nack_untrusted,
    decode_entries_untrusted,
    decode_null_untrusted,
    decode_stable_untrusted,
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
    good = bytearray(seal(KEY, MsgType.DATA, Flag.NONE, 5, encode_records(1, [Record(5, 1, (), 0, payload)])))
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
    datagram = seal(KEY, MsgType.DATA, Flag.NONE, 5, encode_records(1, [Record(5, 1, (), 0, b"x")]))
    with pytest.raises(DecodeError) as info:
        decode_datagram_untrusted(mangle(datagram), KEY)
    assert info.value.reason == reason


@pytest.mark.parametrize("cut", [1, 3, 30])
def test_authentic_but_lying_length_is_rejected(cut: int) -> None:
    body = encode_records(1, [Record(5, 1, ((2, 2),), 0, b"abc")])[:-cut]  # claims more than it carries
    header, checked = decode_datagram_untrusted(seal(KEY, MsgType.DATA, Flag.NONE, 5, body), KEY)
    with pytest.raises(DecodeError):
        decode_records_untrusted(checked)


@given(entries=st.lists(st.tuples(IDS, IDS), max_size=20, unique_by=lambda a: a[0]))
def test_entries_in_any_order_round_trip_sorted(entries: list) -> None:
    assert decode_entries_untrusted(encode_entries(1, tuple(entries))) == (1, tuple(sorted(entries)))


def test_counts_are_capped_before_allocation() -> None:
    with pytest.raises(DecodeError) as info:
        decode_records_untrusted(bytes(8) + b"\xff\xff")  # 65,535 records claimed
    assert info.value.reason == "count"
    with pytest.raises(DecodeError) as info:
        decode_entries_untrusted(bytes(8) + b"\xff\xff\xff\x7f")  # a huge ack count
    assert info.value.reason == "count"


def test_unknown_type_with_valid_mac_is_rejected() -> None:
    import struct

    signed = struct.pack("!2sBBBQQQ", b"SG", VERSION, 250, 0, 5, 0, 1)
    datagram = signed + hmac.new(KEY, signed, hashlib.sha256).digest()[:16]
    with pytest.raises(DecodeError) as info:
        decode_datagram_untrusted(datagram, KEY)
    assert info.value.reason == "type"


def test_other_secret_is_rejected() -> None:
    datagram = seal(derive_key(b"another-secret"), MsgType.LEAVE, Flag.NONE, 1, encode_leave(LeaveMsg(1)))
    with pytest.raises(DecodeError) as info:
        decode_datagram_untrusted(datagram, KEY)
    assert info.value.reason == "mac"


def test_a_proposal_of_the_largest_view_fits_one_datagram_and_decodes() -> None:
    """A view's member list travels in one PROPOSE: at Config.max_members'
    default, with random ids, it must fit a datagram and decode; at the upper
    bound it does with the simulator's dense ids."""
    from sgcs.config import MAX_UDP_PAYLOAD
    from sgcs.wire import Control, decode_control_untrusted, encode_control

    rng = random.Random(5)
    members = tuple(sorted({rng.getrandbits(63) for _ in range(4_096)}))  # Config.max_members' default, random ids
    body = encode_control(Control(7, 2, 1, 0, 0, (tuple((m, 0) for m in members),)))
    datagram = seal(KEY, MsgType.PROPOSE, Flag.NONE, 1, body)
    assert len(datagram) <= MAX_UDP_PAYLOAD, len(datagram)
    _, checked = decode_datagram_untrusted(datagram, KEY)
    assert tuple(m for m, _ in decode_control_untrusted(checked).lists[0]) == members
    dense = tuple(range(32_000))
    datagram = seal(KEY, MsgType.PROPOSE, Flag.NONE, 1, encode_control(Control(7, 2, 1, 0, 0, (tuple((m, 0) for m in dense),))))
    assert len(datagram) <= MAX_UDP_PAYLOAD and len(decode_control_untrusted(decode_datagram_untrusted(datagram, KEY)[1]).lists[0]) == 32_000


def test_a_verified_memo_checks_one_datagram_object_once_and_nothing_else(monkeypatch: pytest.MonkeyPatch) -> None:
    """The simulator's memo: one tag check per datagram object, per key object;
    a copy, another key, a mutable buffer or a node without the memo check again."""
    import sgcs.wire as wire

    checks = []
    real = wire.hmac.digest
    monkeypatch.setattr(wire.hmac, "digest", lambda *a: checks.append(1) or real(*a))
    data = seal(KEY, MsgType.DATA, Flag.NONE, 5, encode_records(1, [Record(5, 1, (), 0, b"x")]))
    memo = VerifiedMemo(capacity=2)
    other_key = derive_key(b"another-secret")
    same_key = derive_key(b"golden-secret")  # another node's key: equal, another object
    checks.clear()  # sealing and deriving computed some
    for _ in range(3):
        decode_datagram_untrusted(data, KEY, memo=memo)
    decode_datagram_untrusted(data, same_key, memo=memo)  # another node's equal key: the simulator's case
    assert len(checks) == 1
    decode_datagram_untrusted(bytes(bytearray(data)), KEY, memo=memo)  # an equal copy: another object
    decode_datagram_untrusted(data, KEY)  # no memo
    assert len(checks) == 3
    with pytest.raises(DecodeError, match="mac"):
        decode_datagram_untrusted(data, other_key, memo=memo)
    buffer = bytearray(data)
    decode_datagram_untrusted(buffer, KEY, memo=memo)  # type: ignore[arg-type]
    decode_datagram_untrusted(buffer, KEY, memo=memo)  # type: ignore[arg-type]
    assert len(checks) == 6, "another key checks; a mutable buffer is checked every time"
    for n in range(3):  # the capacity holds: the oldest is forgotten
        decode_datagram_untrusted(seal(KEY, MsgType.DATA, Flag.NONE, 5, encode_records(1, [Record(5, n, (), 0, b"")])),
                                  KEY, memo=memo)
    checks.clear()
    decode_datagram_untrusted(data, KEY, memo=memo)
    assert len(checks) == 1


def test_a_verified_memo_shares_one_body_and_its_decoded_value_per_datagram_object() -> None:
    """Receivers of one datagram object get one body object, and a decoded
    value kept for it, under the same kind only; a body the memo never
    handed out keeps nothing, and forgetting a datagram forgets its value."""
    data = seal(KEY, MsgType.DATA, Flag.NONE, 5, encode_records(1, [Record(5, 1, (), 0, b"x")]))
    memo = VerifiedMemo(capacity=2)
    _, body = decode_datagram_untrusted(data, KEY, memo=memo)
    _, again = decode_datagram_untrusted(data, KEY, memo=memo)
    assert again is body
    assert memo.decoded(body, MsgType.DATA) is None
    value = decode_records_untrusted(body)
    memo.keep(body, MsgType.DATA, value)
    assert memo.decoded(body, MsgType.DATA) is value
    assert memo.decoded(body, MsgType.GOSSIP) is None, "another kind decodes another way"
    stranger = bytes(bytearray(body))
    memo.keep(stranger, MsgType.DATA, value)
    assert memo.decoded(stranger, MsgType.DATA) is None
    for n in range(2):  # the datagram is forgotten, and with it its value
        decode_datagram_untrusted(seal(KEY, MsgType.DATA, Flag.NONE, 5, encode_records(1, [Record(5, n, (), 0, b"")])),
                                  KEY, memo=memo)
    assert memo.decoded(body, MsgType.DATA) is None
    for n in range(50):  # a body's value goes with its datagram: nothing is left behind
        other = seal(KEY, MsgType.DATA, Flag.NONE, 5, encode_records(1, [Record(5, n, (), 0, b"")]))
        for key in (KEY, derive_key(b"golden-secret")):
            decode_datagram_untrusted(other, key, memo=memo)
    assert len(memo._decoded) <= memo.capacity
