"""Security: forged, replayed and cross-policy datagrams are refused; encryption
hides payloads; a node without the secret cannot join.

The shared in-memory network (tests/_memnet.py) runs sans-I/O nodes (the
same code as the trio driver and the simulator) and records every datagram
that crosses it, so the tests can inject each one again (replay) or altered
(forgery) and count how many a node accepted: an accepted datagram is one that did not raise the
node's drop counter.
"""

from __future__ import annotations

import random

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

import sgcs
from sgcs.actions import Deliver
from sgcs.config import Config
from sgcs.node import Node
from sgcs.security import ReplayWindow, Sealer
from sgcs.wire import Flag, MsgType, derive_key, encode_leave, LeaveMsg

from _memnet import Datagram, MemoryNetwork, recording
from _net import private_multicast

SECRET = b"security-test-secret"
PAYLOAD = b"attack at dawn #%d"
HKDF_KEY = "697ffa96cca818469fc8ec0eb8fc005f918d44dcdcab9d18a50ded5ccf9c7c83"
"""HKDF-SHA256(salt b"sgcs/v2 datagram keys", info b"sgcs datagram authentication") of bytes 0..15,
computed apart from the code by RFC 5869's two HMACs."""
HMAC_V1_KEY = "15ff20369c04496bcbfb75ed667b16ecd7b8c47bd6a63d6cc97cf072f7c654f3"


class Network(MemoryNetwork[Node]):
    """Nodes 1..n in group "g" (all known from the start) on the shared
    in-memory network, lossless and FIFO; every datagram it carries is
    recorded in ``captured``."""

    def __init__(self, n: int, encrypt: bool, key_derivation: str = "hkdf") -> None:
        config = Config(secret=SECRET, encrypt=encrypt, key_derivation=key_derivation)
        super().__init__({i: Node(i, config, random.Random(i), resolve=lambda m: m, incarnation=1, salt=i)
                          for i in range(1, n + 1)})
        self.captured: list[Datagram] = []
        self.tap = recording(self.captured)
        for i, node in self.nodes.items():
            self.submit(i, node.join("g", self.now, members=list(self.nodes)))

    def delivered(self, node_id: int) -> list[tuple[int, bytes]]:
        return [(a.sender, a.payload) for a in self.actions_of(node_id) if isinstance(a, Deliver)]

    def exchange(self, count: int) -> None:
        for k in range(count):
            for i, node in self.nodes.items():
                self.submit(i, node.multicast("g", PAYLOAD % (i * 1000 + k), self.now))
            self.run_events(self.now + 0.01)
        self.run_events(self.now + 1.0)

    def accepted(self, dst: int, src: int, data: bytes) -> bool:
        """Hand ``data`` to ``dst`` as from ``src``: did ``dst`` take it (not count it dropped)?"""
        node = self.nodes[dst]
        before = node.statistics().dropped
        self.inject(Datagram(src, dst, data))
        return node.statistics().dropped == before


def _forgeries(data: bytes, rng: random.Random) -> list[bytes]:
    """Altered copies of a genuine datagram: one bit flipped in each part
    (header, body, tag), truncated, extended, and re-sealed by an outsider."""
    header, tag = 29, len(data) - 16
    flips = [rng.randrange(0, header), rng.randrange(header, max(header + 1, tag)), rng.randrange(tag, len(data))]
    out = []
    for index in flips:
        altered = bytearray(data)
        altered[index] ^= 1 << rng.randrange(8)
        out.append(bytes(altered))
    outsider = Sealer(b"not-the-group-secret", 1, 1 << 32, encrypt=False)
    return out + [data[:-1], data + b"\0", outsider.seal(MsgType.LEAVE, Flag.NONE, encode_leave(LeaveMsg(0)))]


@pytest.mark.parametrize("encrypt", [False, True], ids=["plain", "encrypted"])
def test_forged_and_replayed_datagrams_are_all_refused(encrypt: bool) -> None:
    net = Network(3, encrypt)
    net.exchange(40)
    expected = sorted(PAYLOAD % (i * 1000 + k) for i in (1, 2, 3) for k in range(40))
    assert all(sorted(p for _, p in net.delivered(i)) == expected for i in net.nodes)
    genuine = list(net.captured)
    delivered_before = {i: len(net.delivered(i)) for i in net.nodes}
    rng = random.Random(8)
    forged = [(dst, src, f) for src, dst, data in genuine for f in _forgeries(data, rng)]
    accepted_forged = sum(net.accepted(dst, src, data) for dst, src, data in forged)
    accepted_replayed = sum(net.accepted(dst, src, data) for src, dst, data in genuine)
    print(f"{len(genuine)} genuine datagrams; {len(forged)} forged, {accepted_forged} accepted; "
          f"{len(genuine)} replayed, {accepted_replayed} accepted")
    assert (accepted_forged, accepted_replayed) == (0, 0)
    assert {i: len(net.delivered(i)) for i in net.nodes} == delivered_before, "nothing delivered twice"
    reasons = net.nodes[2].statistics().drop_reasons
    assert reasons.get("replay", 0) > 0 and reasons.get("mac", 0) > 0, reasons


def test_encryption_hides_payloads_and_plain_does_not() -> None:
    for encrypt in (False, True):
        net = Network(2, encrypt)
        net.exchange(5)
        visible = any(b"attack at dawn" in data for _, _, data in net.captured)
        assert visible is not encrypt, f"encrypt={encrypt}: payload visible on the wire: {visible}"
        assert len(net.delivered(1)) == len(net.delivered(2)) == 10


def test_keys_come_from_hkdf_and_the_former_scheme_is_kept_apart() -> None:
    """The derivation is part of the wire: pinned here. Members of the two
    schemes do not hear each other; each scheme works among its own."""
    secret = bytes(range(16))
    assert derive_key(secret).hex() == HKDF_KEY
    assert derive_key(secret, "hmac-v1").hex() == HMAC_V1_KEY
    for encrypt in (False, True):
        hkdf, v1 = Network(2, encrypt), Network(2, encrypt, "hmac-v1")
        hkdf.exchange(1)
        v1.exchange(1)
        assert len(hkdf.delivered(1)) == len(v1.delivered(1)) == 2
        (src, dst, data) = v1.captured[0]
        assert not hkdf.accepted(dst, src, data)
        (src, dst, data) = hkdf.captured[0]
        assert not v1.accepted(dst, src, data)


def test_a_group_does_not_mix_plain_and_encrypted_datagrams() -> None:
    plain, encrypted = Network(2, False), Network(2, True)
    plain.exchange(1)
    encrypted.exchange(1)
    (src, dst, data) = plain.captured[0]
    assert not encrypted.accepted(dst, src, data)
    (src, dst, data) = encrypted.captured[0]
    assert not plain.accepted(dst, src, data)
    assert plain.nodes[dst].statistics().drop_reasons == {"policy": 1}
    assert encrypted.nodes[dst].statistics().drop_reasons == {"policy": 1}


def test_a_restarted_sender_is_heard_and_its_former_self_is_not() -> None:
    window = ReplayWindow(size=64)
    old, new = 5 << 32 | 7, 6 << 32 | 3
    assert window.accept(1, old, 10) and window.accept(1, new, 1), "a later incarnation starts afresh"
    assert not window.accept(1, old, 11), "the former incarnation's datagrams are refused"
    salted = 6 << 32 | 9
    assert window.accept(1, salted, 1), "a restart within one incarnation tick shows a new salt"


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(1, 300), max_size=200), st.integers(1, 64))
def test_replay_window_accepts_each_counter_at_most_once(counters: list[int], size: int) -> None:
    """Every counter is accepted at most once; a fresh one is refused only when
    it is ``size`` or more below the highest accepted."""
    window = ReplayWindow(size=size)
    seen: set[int] = set()
    for counter in counters:
        fresh = counter not in seen and (not seen or counter > max(seen) - size)
        assert window.accept(3, 1 << 32, counter) == fresh, (counter, sorted(seen))
        if fresh:
            seen.add(counter)


def test_replay_state_is_capped_at_max_senders() -> None:
    window = ReplayWindow(size=64, max_senders=100)
    for sender in range(1_000):
        window.accept(sender, 0, 1)
    assert len(window) == 100


# -------------------------------------------------------------- a node without the key, over real sockets

WAIT = 3.0


@pytest.mark.integration
async def test_a_keyless_node_cannot_join_and_the_view_is_untouched() -> None:
    network = private_multicast(beacon_interval=0.1)
    views: dict[str, list[tuple[int, ...]]] = {"a": [], "b": [], "outsider": []}
    stats: dict[str, sgcs.NodeStatistics] = {}

    async def member(name: str, node_id: int, secret: bytes, delay: float) -> None:
        await trio.sleep(delay)
        async with sgcs.open_node(Config(name=name, secret=secret, node_id=node_id, **network)) as node:
            async with node.join("g", order="total") as group:
                with trio.move_on_after(WAIT - delay):
                    async for event in group:
                        if isinstance(event, sgcs.ViewChange):
                            views[name].append(tuple(event.members))
            stats[name] = node.statistics()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(member, "a", 1, SECRET, 0.0)
        nursery.start_soon(member, "b", 2, SECRET, 0.0)
        nursery.start_soon(member, "outsider", 3, b"a-guessed-secret", 0.5)
    assert views["a"][-1] == views["b"][-1] == (1, 2), views
    assert all(3 not in v for v in views["a"] + views["b"]), views
    assert views["outsider"] and all(v == (3,) for v in views["outsider"]), views
    assert stats["a"].drop_reasons.get("mac", 0) > 0, "the outsider's beacons reached a and were dropped"
    print(f"outsider's datagrams dropped as 'mac': a {stats['a'].drop_reasons.get('mac', 0)}, "
          f"b {stats['b'].drop_reasons.get('mac', 0)}; views of a: {views['a']}")


def test_a_secret_never_appears_in_a_repr_or_a_str() -> None:
    from sgcs.apps.bench import BenchOptions

    secret = b"do-not-print-this-secret"
    shown = [repr(Config(secret=secret)), str(Config(secret=secret)),
             repr(BenchOptions(members=2, messages=1, size=64, secret=secret))]
    assert all(secret.decode() not in text and repr(secret) not in text for text in shown), shown
