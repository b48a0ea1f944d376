"""The typed membership control messages (``sgcs.membership.messages``):
golden byte vectors of every type (the wire format must not drift), round
trips, and strict decoding: a malformed body raises ``DecodeError`` only."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sgcs.errors import DecodeError
from sgcs.membership.messages import (
    MESSAGES,
    Ask,
    AskReply,
    Beacon,
    CommitMsg,
    ControlMessage,
    Flush,
    InstalledMsg,
    Obituary,
    Probe,
    ProbeAck,
    Propose,
    decode_untrusted,
    decode_view_message,
    encode,
)
from sgcs.wire import Control, MsgType, encode_control

TAG = 0x1122334455667788
GOLDEN: list[tuple[ControlMessage, str]] = [
    (Propose(TAG, 3, 2, 1, (1, 2, 5)),
     "1122334455667788000000000000000300000002000000000000000100000000000000000103010001000300"),
    (Flush(TAG, 3, 2, 7, 9, ((1, 4), (2, 0)), 3074457344186602837),
     "1122334455667788000000000000000300000002000000000000000700000000000000090202010401000100d5aad5aaa5d5aad52a"),
    (Flush(TAG, 3, 2, 7, 9, ((1, 4), (2, 0)), 3074457344186602837, ((5, 1),)),
     "1122334455667788000000000000000300000002000000000000000700000000000000090302010401000100d5aad5aaa5d5aad52a010501"),
    (CommitMsg(TAG, 3, 2, 1, ((1, 0), (2, 0), (5, 0)), ((1, 4), (2, 7)), ((2, 9),)),
     "11223344556677880000000000000003000000020000000000000001000000000000000003030100010003000201040107010209"),
    (CommitMsg(TAG, 3, 2, 1, ((1, 0), (2, 0), (5, 0)), ((1, 4), (2, 7)), ((2, 9),), ((5, 3),)),
     "11223344556677880000000000000003000000020000000000000001000000000000000004030100010003000201040107010209010503"),
    # withdraw: a second pair (1, 1) in the lineage list
    (Flush(TAG, 3, 2, 7, 9, ((1, 4), (2, 0)), 3074457344186602837, (), True),
     "1122334455667788000000000000000300000002000000000000000700000000000000090202010401000200d5aad5aaa5d5aad52a0101"),
    # refuse: bits 2 of that pair (an empty vector, lineage 0)
    (Flush(TAG, 3, 2, 0, 0, (), 0, refuse=True),
     "11223344556677880000000000000003000000020000000000000000000000000000000002000200000102"),
    # withdrawn ranges: a fifth list, after an empty rollback and an empty foreign list
    (CommitMsg(TAG, 3, 2, 1, ((1, 0), (2, 0), (5, 0)), ((1, 4), (2, 7)), (), (), ((2, 9),)),
     "112233445566778800000000000000030000000200000000000000010000000000000000050301000100030002010401070000010209"),
    # the incarnations whose answers were counted: a sixth list
    (CommitMsg(TAG, 3, 2, 1, ((1, 0), (2, 0), (5, 0)), ((1, 4), (2, 7)), (), (), (), ((1, 3), (2, 300), (5, 9))),
     "1122334455667788000000000000000300000002000000000000000100000000000000000603010001000300020104010700000003010301ac020309"),
    (InstalledMsg(TAG, 3, 2), "11223344556677880000000000000003000000020000000000000000000000000000000000"),
    (Beacon(TAG, 3, 4, 2, (1, 2, 5)),
     "1122334455667788000000000000000300000000000000000000000400000000000000020103010001000300"),
    (Probe(123456789), "000000000000000000000000000000000000000000000000075bcd15000000000000000000"),
    (ProbeAck(123456789), "000000000000000000000000000000000000000000000000075bcd15000000000000000000"),
    (Ask(5, 42), "00000000000000000000000000000000000000000000000000000005000000000000002a00"),
    (AskReply(5, 250), "0000000000000000000000000000000000000000000000000000000500000000000000fa00"),
    (Obituary(5), "00000000000000000000000000000000000000000000000000000005000000000000000000"),
]


def test_every_control_type_has_a_golden_vector() -> None:
    assert {type(m) for m, _ in GOLDEN} == set(MESSAGES.values())  # Flush and Commit more than once: optional lists
    assert set(MESSAGES) == {MsgType.PROPOSE, MsgType.FLUSH, MsgType.COMMIT, MsgType.INSTALLED, MsgType.BEACON,
                             MsgType.PROBE, MsgType.PROBE_ACK, MsgType.ASK, MsgType.ASK_REPLY, MsgType.OBITUARY}


@pytest.mark.parametrize("message, golden", GOLDEN, ids=[type(m).__name__ for m, _ in GOLDEN])
def test_golden_bytes(message: ControlMessage, golden: str) -> None:
    assert encode(message).hex() == golden
    assert decode_untrusted(message.TYPE, bytes.fromhex(golden)) == message


BAD_SHAPES = [
    (MsgType.PROPOSE, Control(TAG, 3, 1, 1, 0, ())),  # no member list
    (MsgType.PROPOSE, Control(TAG, 3, 1, 1, 0, (((1, 0), (1, 0)),))),  # a member twice
    (MsgType.FLUSH, Control(TAG, 3, 1, 0, 0, ())),
    (MsgType.FLUSH, Control(TAG, 3, 1, 0, 0, ((), (), (), ()))),
    (MsgType.COMMIT, Control(TAG, 3, 1, 1, 0, (((1, 0),), ()))),  # two lists, not three
    (MsgType.COMMIT, Control(TAG, 2**62 + 1, 1, 1, 0, ((), (), ()))),  # absurd epoch
    (MsgType.INSTALLED, Control(TAG, 3, 1, 0, 0, ((),))),
    (MsgType.BEACON, Control(TAG, 3, 0, 1, 0, ((), ()))),
    (MsgType.PROBE, Control(a=1, lists=((),))),
    (MsgType.ASK_REPLY, Control(a=1, b=2, lists=(((1, 1),),))),
    (MsgType.OBITUARY, Control(a=1, lists=(((1, 1),),))),
]


@pytest.mark.parametrize("msg_type, control", BAD_SHAPES)
def test_a_body_of_the_wrong_shape_is_a_decode_error(msg_type: MsgType, control: Control) -> None:
    with pytest.raises(DecodeError):
        decode_untrusted(msg_type, encode_control(control))


def test_only_control_types_decode_and_view_messages_only_where_expected() -> None:
    with pytest.raises(DecodeError):
        decode_untrusted(MsgType.DATA, encode(Probe(1)))
    with pytest.raises(DecodeError):
        decode_view_message(MsgType.PROBE, encode(Probe(1)))
    assert decode_view_message(MsgType.INSTALLED, encode(InstalledMsg(TAG, 1, 1))) == InstalledMsg(TAG, 1, 1)


ids = st.integers(0, 2**63 - 1)
pairs = st.lists(st.tuples(ids, ids), max_size=6).map(lambda p: tuple(sorted(p)))  # lists travel sorted by id
members = st.lists(ids, max_size=6, unique=True).map(lambda m: tuple(sorted(m)))
epochs = st.integers(0, 2**62)
attempts = st.integers(0, 2**32 - 1)
MESSAGES_ST = st.one_of(
    st.builds(Propose, ids, epochs, attempts, ids, members),
    st.builds(Flush, ids, epochs, attempts, ids, ids, pairs, ids, pairs, st.booleans(), st.booleans()),
    st.builds(CommitMsg, ids, epochs, attempts, ids, members.map(lambda ms: tuple((m, 0) for m in ms)), pairs, pairs,
              pairs, pairs),
    st.builds(InstalledMsg, ids, epochs, attempts),
    st.builds(Beacon, ids, epochs, ids, ids, members),
    st.builds(Probe, ids), st.builds(ProbeAck, ids), st.builds(Ask, ids, ids), st.builds(AskReply, ids, ids),
)


@given(MESSAGES_ST)
def test_round_trip(message: ControlMessage) -> None:
    assert decode_untrusted(message.TYPE, encode(message)) == message


@given(st.sampled_from(sorted(MESSAGES)), st.binary(max_size=200))
def test_garbage_raises_decode_error_only(msg_type: MsgType, body: bytes) -> None:
    try:
        decode_untrusted(msg_type, body)
    except DecodeError:
        pass
