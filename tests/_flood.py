"""Floods of hostile datagrams from one source, fed to one node: the harness
of ``benchmarks/flood.py`` (which measures them at 100,000 datagrams against
the documented cap) and of ``tests/test_limits.py`` (short floods, bounds).

Theory of operation
-------------------
One ``sgcs.node.Node`` (id 1) is a member of group ``g`` with one other
member (id 2, the attacker, which holds the group key). Each scenario feeds it
``count`` datagrams through ``Node.handle_datagram``, as the trio driver or the
simulator would, advancing virtual time by ``step`` seconds per datagram and
running the node's timers when they are due. ``tracemalloc`` measures the
Python heap above the joined node's: the peak during the flood and what is
still held after it (retained). The throughput figure counts the node's own
time only (datagrams are built and sealed outside the timed calls).

Scenarios (each from one source):

* ``garbage``: random bytes.
* ``bad_mac``: well-formed datagrams sealed under another secret.
* ``huge_seq``: valid records claiming random sequence numbers up to 2**62.
* ``far_ahead``: valid records 2, 3, 4... whose record 1 never comes.
* ``endless_message``: valid records 1, 2, 3... all flagged MORE_FRAGMENTS, a
  message that never ends (and is never acknowledged, so never stable).
* ``group_tags``: valid records, each for a different (unjoined) group tag.
* ``sender_ids``: valid records, each datagram from a different sender id.
* ``hello_ids``: join requests (HELLO), each from a different sender id.

The records forged here go below the public API on purpose (the wire codec
and the sealer): an attacker is not bound by it.
"""

from __future__ import annotations

import gc
import random
import time
import tracemalloc
from dataclasses import dataclass, field
from typing import Callable, Iterator

from sgcs.config import Config, Order
from sgcs.node import Node
from sgcs.transport.params import Params
from sgcs.records import MORE_FRAGMENTS, Record
from sgcs.wire import Flag, HelloMsg, MsgType, encode_hello, encode_records, group_tag

SECRET = b"flood-benchmark-secret"
VICTIM, ATTACKER = 1, 2
GROUP = "g"
FIRST_STRANGER = 1_000
"""Ids of the ``sender_ids`` and ``hello_ids`` floods start here."""
RECORD_OVERHEAD = 300
"""Bytes a buffered record costs besides its payload: the Record object, its
bytes header, and its entries in the stream's dicts."""
PEER_STATE = 400
"""Bytes per remembered stranger: its address, replay window and cipher entry."""

Sealing = Callable[[MsgType, Flag, bytes], bytes]


def sealer(sender: int, secret: bytes = SECRET) -> Sealing:
    """The one place datagrams are sealed: ``sgcs.security.Sealer`` (a fresh
    counter per datagram, so the replay window accepts each once)."""
    from sgcs.security import Sealer

    return Sealer(secret, sender, 1).seal


def default_config(**fields: object) -> Config:
    return Config(name="victim", secret=SECRET, **fields)  # type: ignore[arg-type]


def record_payload(config: Config) -> int:
    """Payload bytes of a full record under ``config`` (``Params.fragment_size``)."""
    return Params.of(config).fragment_size


# ---------------------------------------------------------------------- scenarios


def _records(seal: Sealing, tag: int, sender: int, seq: int, flags: int, payload: bytes) -> bytes:
    return seal(MsgType.DATA, Flag.NONE, encode_records(tag, [Record(sender, seq, (), flags, payload)]))


def _garbage(count: int, config: Config) -> Iterator[bytes]:
    rng = random.Random(1)
    for _ in range(count):
        yield rng.randbytes(rng.randrange(0, config.max_datagram))


def _bad_mac(count: int, config: Config) -> Iterator[bytes]:
    seal, tag, payload = sealer(ATTACKER, b"not-the-group-secret"), group_tag(GROUP), bytes(512)
    for i in range(count):
        yield _records(seal, tag, ATTACKER, i + 1, 0, payload)


def _huge_seq(count: int, config: Config) -> Iterator[bytes]:
    rng, seal, tag = random.Random(2), sealer(ATTACKER), group_tag(GROUP)
    payload = bytes(record_payload(config))
    for _ in range(count):
        yield _records(seal, tag, ATTACKER, rng.randrange(2**40, 2**62), 0, payload)


def _far_ahead(count: int, config: Config) -> Iterator[bytes]:
    seal, tag, payload = sealer(ATTACKER), group_tag(GROUP), bytes(record_payload(config))
    for i in range(count):
        yield _records(seal, tag, ATTACKER, i + 2, 0, payload)


def _endless_message(count: int, config: Config) -> Iterator[bytes]:
    seal, tag, payload = sealer(ATTACKER), group_tag(GROUP), bytes(record_payload(config))
    for i in range(count):
        yield _records(seal, tag, ATTACKER, i + 1, MORE_FRAGMENTS, payload)


def _group_tags(count: int, config: Config) -> Iterator[bytes]:
    rng, seal, payload = random.Random(3), sealer(ATTACKER), bytes(512)
    for i in range(count):
        yield _records(seal, rng.getrandbits(64), ATTACKER, i + 1, 0, payload)


def _sender_ids(count: int, config: Config) -> Iterator[bytes]:
    tag, payload = group_tag(GROUP), bytes(512)
    for i in range(count):
        sender = FIRST_STRANGER + i
        yield _records(sealer(sender), tag, sender, 1, 0, payload)


def _hello_ids(count: int, config: Config) -> Iterator[bytes]:
    body = encode_hello(HelloMsg(group_tag(GROUP), config_order(), True))
    for i in range(count):
        yield sealer(FIRST_STRANGER + i)(MsgType.HELLO, Flag.NONE, body)


def config_order() -> Order:
    """The victim's group order (FIFO): a hello of the same order asks to join."""
    return Order.FIFO


SCENARIO_FIELDS: dict[str, dict[str, object]] = {"hello_ids": {"max_members": 64}}
"""Config overrides per scenario. Every admitted joiner starts a new proposal
listing all members so far, O(members) of CPU each, and the fake joiners,
silent, are dropped from the next attempt after ``view_timeout``, which makes
room for more: at the default cap of 4,096 the join flood costs hours of
CPU (memory stays bounded). It runs at a cap of 64 to show the cap's policy."""

SCENARIOS: dict[str, Callable[[int, Config], Iterator[bytes]]] = {
    "garbage": _garbage, "bad_mac": _bad_mac, "huge_seq": _huge_seq, "far_ahead": _far_ahead,
    "endless_message": _endless_message, "group_tags": _group_tags, "sender_ids": _sender_ids,
    "hello_ids": _hello_ids,
}


# ---------------------------------------------------------------------- measuring


@dataclass
class FloodResult:
    scenario: str
    datagrams: int
    node_seconds: float
    peak_bytes: int
    retained_bytes: int
    drop_reasons: dict[str, int] = field(default_factory=dict)
    """The node's drop reasons, its groups' cap drops included."""
    foreign: int = 0
    members: int = 0

    @property
    def rate(self) -> float:
        return self.datagrams / self.node_seconds if self.node_seconds else float("inf")

    def line(self) -> str:
        drops = ", ".join(f"{k}={v}" for k, v in sorted(self.drop_reasons.items())) or "-"
        return (f"{self.scenario:16} {self.datagrams:>8} dg  peak {self.peak_bytes / 2**20:7.2f} MB  "
                f"retained {self.retained_bytes / 2**20:7.2f} MB  {self.rate:>9,.0f} dg/s  "
                f"foreign={self.foreign} members={self.members}  drops: {drops}")


def make_victim(config: Config) -> Node:
    node = Node(VICTIM, config, random.Random(VICTIM), resolve=lambda n: n)
    node.join(GROUP, 0.0, members=(VICTIM, ATTACKER))
    return node


def run_flood(scenario: str, count: int = 100_000, config: Config | None = None, step: float = 0.001) -> FloodResult:
    """Feed ``count`` datagrams of ``scenario`` to a fresh node and measure it."""
    config = config or default_config()
    node = make_victim(config)
    datagrams = SCENARIOS[scenario](count, config)
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        spent = _feed(node, datagrams, step)
        peak = tracemalloc.get_traced_memory()[1] - base
        gc.collect()
        retained = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    return _result(scenario, count, spent, peak, retained, node)


def _feed(node: Node, datagrams: Iterator[bytes], step: float) -> float:
    spent, now, clock = 0.0, 0.0, time.perf_counter
    for i, data in enumerate(datagrams):
        now = i * step
        start = clock()
        node.handle_datagram(ATTACKER, data, now)
        deadline = node.next_deadline()
        if deadline is not None and deadline <= now:
            node.handle_timeout(now)
        spent += clock() - start
    return spent


def _result(scenario: str, count: int, spent: float, peak: int, retained: int, node: Node) -> FloodResult:
    stats = node.statistics()  # its drop reasons include the groups' cap drops
    members = len(node.view(GROUP)[1])
    return FloodResult(scenario, count, spent, peak, retained, dict(stats.drop_reasons), stats.foreign, members)
