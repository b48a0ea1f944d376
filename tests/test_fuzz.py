"""Fuzzing in the suite: hypothesis over every fuzz target,
and a short coverage-guided atheris run. Long runs: tests/fuzz/run.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fuzz.targets import DECODERS, SEEDS, TAG, TARGETS, Reader, Sealer, make_harness, node_target, wire_decoder_names
from sgcs.config import Order
from sgcs.wire import ORDER_CODES, Control, HelloMsg, MsgType, encode_control, encode_hello

RUN = Path(__file__).parent / "fuzz" / "run.py"
FAST = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def test_every_untrusted_decoder_has_a_target() -> None:
    missing = set(wire_decoder_names()) - set(DECODERS)
    assert not missing, f"add a DecoderTarget in tests/fuzz/targets.py for: {sorted(missing)}"
    assert set(DECODERS) <= set(wire_decoder_names()), "a target names a decoder sgcs.wire no longer has"


@pytest.mark.parametrize("name", sorted(DECODERS))
def test_decoder_seeds_decode(name: str) -> None:
    """Seeds are valid: mutation starts from inputs that reach the whole body."""
    assert DECODERS[name].seeds
    for seed in DECODERS[name].seeds:
        DECODERS[name].call(seed)  # a DecodeError here means a broken seed, not a finding


def _mutated(name: str) -> st.SearchStrategy[bytes]:
    """Random bytes, and seeds with a few bytes overwritten, cut or extended."""

    def edit(seed: bytes, pos: int, value: bytes, cut: int) -> bytes:
        pos %= len(seed) + 1
        return (seed[:pos] + value + seed[pos + len(value) :])[: len(seed) + len(value) - cut]

    seeds = st.sampled_from(SEEDS[name])
    return st.binary(max_size=512) | st.builds(edit, seeds, st.integers(0, 4096), st.binary(max_size=8),
                                               st.integers(0, 16))


@pytest.mark.parametrize("name", sorted(DECODERS))
def test_decoder_raises_only_decode_error(name: str) -> None:
    @FAST
    @given(_mutated(name))
    def check(data: bytes) -> None:
        TARGETS[name](data)  # swallows DecodeError only

    check()


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_mutated("node"))
def test_node_survives_sealed_fuzzed_datagrams(data: bytes) -> None:
    node_target(data)


def test_node_target_reaches_protocol_logic() -> None:
    """Datagrams sealed by the harness pass the MAC (and replay) checks and
    reach the body decoders and handlers; only a deliberate replay is dropped."""
    h = make_harness(Reader(bytes([0])))
    h.send(MsgType.HELLO, 0, 2, encode_hello(HelloMsg(TAG, Order.FIFO, True)))
    assert h.node.statistics().dropped == 0
    h.send(MsgType.HELLO, 0, 2, b"")
    assert h.node.statistics().drop_reasons == {"length": 1}, "past the MAC, refused by decode_hello_untrusted"
    if Sealer is not None:  # with sgcs.security, a replay is dropped before its body is read
        h.feed(h.last)
        assert h.node.statistics().drop_reasons == {"length": 1, "replay": 1}


@pytest.mark.integration
def test_short_atheris_run(tmp_path: Path) -> None:
    pytest.importorskip("atheris", reason="atheris is not installed (pip install atheris): no coverage-guided run")
    result = subprocess.run([sys.executable, str(RUN), "--engine", "atheris", "--target", "node", "--inputs",
                             "10000", "--out", str(tmp_path)], capture_output=True, text=True, timeout=300)
    summary = json.loads(result.stdout.splitlines()[-1])
    assert summary["inputs"] == 10000, result.stderr[-2000:]
    assert summary["exceptions"] == 0, f"uncaught exceptions: {summary['findings']}; replay with " \
                                       f"{RUN} --replay FILE"


def test_proposal_at_the_largest_attempt_cannot_break_a_take_over() -> None:
    """Found by the fuzz: a PROPOSE with attempt 2**32 - 1 (the wire's largest)
    was accepted; with no COMMIT the member took over at attempt 2**32, which
    the 32-bit field cannot carry, and handle_timeout raised struct.error."""
    h = make_harness(Reader(bytes([0x10])))  # node 2 of (1, 2, 3): the next coordinator if 1 fails
    members = ((1, 0), (2, 0), (3, 0))
    h.send(MsgType.PROPOSE, 0, 1, encode_control(Control(TAG, 2, 2**32 - 1, 1, 0, (members,))))
    for step in range(1, 40):
        h.node.handle_timeout(step * 0.25)  # no commit comes: node 2 takes over


def test_a_beacon_at_the_largest_epoch_cannot_make_an_undecodable_proposal() -> None:
    """Found by the fuzz: a beacon at epoch 2**63 - 1 (the wire's largest) made
    the coordinator propose epoch 2**63, which its own decoder refused, and
    handle_timeout raised DecodeError. Epochs from 2**62 on are ignored."""
    from sgcs.membership.messages import MAX_EPOCH

    for epoch in (MAX_EPOCH, 2**63 - 1):
        h = make_harness(Reader(bytes([0x10])))
        order = ORDER_CODES.index(h.node.order_of("g"))
        h.send(MsgType.BEACON, 0, 5, encode_control(Control(TAG, epoch, 0, 0, order, (((5, 0),),))))
        for step in range(1, 20):
            h.node.handle_timeout(step * 0.25)
        assert 5 not in h.node.view("g")[1]
