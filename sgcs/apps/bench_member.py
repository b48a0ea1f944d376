"""One member process of ``sgcs bench``; started by ``sgcs.apps.bench``, one per member.

Theory of operation
-------------------
The parent (``sgcs.apps.bench``) starts ``python -m sgcs.apps.bench_member SPEC`` once
per member, SPEC being a JSON object (``MemberSpec``), and the group secret
in the environment (``sgcs.apps.members.SECRET_ENV``, hex) rather than on the
command line. The member uses nothing but the public trio API, so the figures are
those a user gets:

1. open a node on 127.0.0.1 (or the address its network namespace gives it)
   with the run's own multicast group and port, and
   join the group "bench" by discovery (``members=None``);
2. wait until the view holds all N members (``view_timeout``);
3. a start barrier: the discovered members' streams start at the first
   record seen of them (``GroupStack``: "late" members), so a record lost
   before that point would never be repaired and the run would never
   complete. Each member therefore multicasts a small warm-up record every
   ``WARMUP_EVERY`` seconds until it has delivered a warm-up from every member
   (its streams of all of them are then in sync), says so with a "ready"
   message, and goes on until every member has said ready (every stream of
   every member is then in sync). This costs a few messages and a fraction
   of a second, outside the measurement;
4. sleep 0.5 s, as JGroups' JPerf does, then multicast M messages of S bytes
   (paced at ``rate`` messages per second when given, else as fast as flow
   control allows) while another task counts deliveries until N x M bench
   messages have been delivered, this member's own included. That task takes
   its events with ``GroupHandle.receive_many``, the batch call of the API:
   one scheduler trip per batch instead of per message (about 9 % less CPU
   per delivery than ``async for`` on 4 members, 20,000 x 1 KB).

Throughput is JPerf's: messages received / seconds from the start of sending
to the last delivery. Each payload's first 8 bytes are the sender's
``time.monotonic_ns()`` (CLOCK_MONOTONIC: one clock for every process of a
Linux host), so the receiver measures delivery latency; a member's own
messages, delivered locally without crossing the network, are left out of
the latency figures. Control messages carry a zero timestamp.

Messages to the parent are JSON lines on stdout (``{"event": ...}``); the
member reports "done" with its figures, then keeps serving the group
(retransmissions, ACKs for stability) until the parent closes its stdin, the
signal that every member is done. It then reports its node statistics,
leaves the group and exits. Stdin closing earlier means the parent is gone:
the member stops at once.
"""

from __future__ import annotations

import dataclasses
import json
import resource
import struct
import sys
import time
from dataclasses import dataclass
from typing import Any

import trio

import sgcs
from sgcs.api import Delivery, ViewChange  # the same classes as sgcs.Delivery, without the lazy lookup per event
from sgcs.apps.members import member_main, report, stdin_closed

GROUP = "bench"
START_PAUSE = 0.5
"""Seconds between the full view and the first send (JPerf's Thread.sleep(500))."""
WARMUP_EVERY = 0.05
"""Seconds between two warm-up messages of the start barrier."""
PROGRESS_EVERY = 0.25
"""Seconds between two progress reports to the parent."""
BEACON_INTERVAL = 0.1
"""Discovery beacons (Config.beacon_interval): a bench wants its view at once."""
BENCH_SUSPECT_FACTOR = 20.0
"""Config.suspect_factor for bench members: suspicion only after 20 heartbeat
rounds per hypercube dimension (4 s with 3 members), so that a member starved
of CPU by the others is not excluded mid-run."""
STAMP = struct.Struct("!Q")
WARMUP = STAMP.pack(0) + b"W"
READY = STAMP.pack(0) + b"R"


@dataclass(frozen=True, slots=True)
class MemberSpec:
    """What the parent tells every member; see ``sgcs bench --help``."""

    index: int
    members: int
    messages: int
    size: int
    order: str
    rate: float | None
    max_datagram: int
    multicast_group: str
    multicast_port: int
    view_timeout: float
    encrypt: bool = False
    settings: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Further Config fields (``sgcs bench --set``)."""
    bind_host: str = "127.0.0.1"
    """Where the member's node binds: loopback, or its network namespace's address."""

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> "MemberSpec":
        return cls(**json.loads(text))


class BenchFailure(Exception):
    """The member cannot complete the run; the message is one line for the user."""


class Member:
    """Counts, times and paces one member's share of the run."""

    def __init__(self, spec: MemberSpec, me: int) -> None:
        self.spec = spec
        self.me = me
        self.expected = spec.members * spec.messages
        self.view_size = 0
        self.view_full = trio.Event()
        self.warm_from: set[int] = set()
        self.ready_from: set[int] = set()
        self.all_ready = trio.Event()
        self.delivered = 0
        self.latencies: list[int] = []
        """Nanoseconds from send to delivery, other members' messages only."""
        self.per_sender: dict[int, int] = {}
        self.first_send_ns = 0
        self.last_send_ns = 0
        self.last_delivery_ns = 0
        self.done = trio.Event()
        self.released = trio.Event()
        """The parent closed our stdin: every member is done."""

    async def receive(self, group: sgcs.GroupHandle) -> None:
        """Consume every event of the group: views, control and bench messages,
        a batch at a time."""
        on_delivery = self._on_delivery
        try:
            while True:
                for event in await group.receive_many():
                    if type(event) is Delivery:
                        on_delivery(event)
                    elif isinstance(event, ViewChange):
                        self._on_view(event.members)
        except trio.EndOfChannel:
            raise BenchFailure("the group's event stream ended before the run completed") from None

    def _on_delivery(self, event: Delivery) -> None:
        now = time.monotonic_ns()
        payload = event.payload
        (stamp,) = STAMP.unpack_from(payload)
        if stamp == 0:
            (self.warm_from if payload == WARMUP else self.ready_from).add(event.sender)
            if len(self.ready_from) >= self.spec.members:
                self.all_ready.set()
            return
        self.delivered += 1
        self.per_sender[event.sender] = self.per_sender.get(event.sender, 0) + 1
        if event.sender != self.me:
            self.latencies.append(now - stamp)
        if self.delivered >= self.expected:
            self.last_delivery_ns = now
            self.done.set()

    def _on_view(self, members: tuple[int, ...]) -> None:
        if len(members) < self.view_size and self.view_full.is_set() and not self.done.is_set():
            # while discovering, concurrent merges may briefly shrink a view
            raise BenchFailure(f"a member left the group during the run (view of {len(members)})")
        self.view_size = len(members)
        report("view", members=len(members))
        if len(members) >= self.spec.members:
            self.view_full.set()

    async def start_barrier(self, group: sgcs.GroupHandle) -> None:
        """See the module docstring, step 3."""
        said_ready = False
        while not self.all_ready.is_set():
            await group.send(WARMUP)
            if not said_ready and len(self.warm_from) >= self.spec.members:
                await group.send(READY)
                said_ready = True
            with trio.move_on_after(WARMUP_EVERY):
                await self.all_ready.wait()

    async def send_all(self, group: sgcs.GroupHandle) -> None:
        spec = self.spec
        buffer = bytearray(spec.size)
        start = trio.current_time()
        self.first_send_ns = time.monotonic_ns()
        for i in range(spec.messages):
            if spec.rate is not None:
                await trio.sleep_until(start + i / spec.rate)
            STAMP.pack_into(buffer, 0, time.monotonic_ns())
            await group.send(bytes(buffer))
        self.last_send_ns = time.monotonic_ns()

    async def report_progress(self) -> None:
        while True:
            report("progress", delivered=self.delivered)
            await trio.sleep(PROGRESS_EVERY)

    def result(self) -> dict[str, Any]:
        seconds = (self.last_delivery_ns - self.first_send_ns) / 1e9
        latencies = sorted(self.latencies)
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return {
            "cpu_user_seconds": usage.ru_utime,
            "cpu_system_seconds": usage.ru_stime,
            "id": self.me,
            "delivered": self.delivered,
            "per_sender": sorted(self.per_sender.values()),
            "seconds": seconds,
            "send_seconds": (self.last_send_ns - self.first_send_ns) / 1e9,
            "rate": self.delivered / seconds if seconds > 0 else 0.0,
            "latency_p50_ms": _percentile(latencies, 0.50) / 1e6,
            "latency_p99_ms": _percentile(latencies, 0.99) / 1e6,
            "latency_samples": len(latencies),
        }


def _percentile(ordered: list[int], q: float) -> float:
    """Nearest-rank percentile of sorted values; 0 when there are none."""
    if not ordered:
        return 0.0
    rank = max(1, -(-len(ordered) * q // 1))  # ceil(len * q), at least 1
    return float(ordered[int(rank) - 1])


async def run_member(spec: MemberSpec, secret: bytes) -> None:
    fields: dict[str, Any] = {
        "beacon_interval": BEACON_INTERVAL,
        # members saturate the CPU on purpose: a starved member is slow, not dead
        "suspect_factor": BENCH_SUSPECT_FACTOR,
        **spec.settings,
    }
    config = sgcs.Config(
        name=f"bench-{spec.index}", secret=secret, bind_host=spec.bind_host,
        multicast_group=spec.multicast_group, multicast_port=spec.multicast_port,
        max_datagram=spec.max_datagram, encrypt=spec.encrypt, **fields,
    )
    async with sgcs.open_node(config) as node, node.join(GROUP, order=spec.order) as group:
        member = Member(spec, node.id)
        report("joined", id=node.id)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(member.receive, group)
            nursery.start_soon(member.report_progress)
            nursery.start_soon(_watch_parent, member)
            await _start(member, group, spec)
            await trio.sleep(START_PAUSE)
            await member.send_all(group)
            await member.done.wait()
            report("done", result=member.result())
            await member.released.wait()  # every member is done: stop serving the others
            report("stats", statistics=dataclasses.asdict(node.statistics()),
                   io=dataclasses.asdict(node.io_statistics()))
            nursery.cancel_scope.cancel()


async def _start(member: Member, group: sgcs.GroupHandle, spec: MemberSpec) -> None:
    with trio.move_on_after(spec.view_timeout):
        await member.view_full.wait()
        await member.start_barrier(group)
        return
    if not member.view_full.is_set():
        raise BenchFailure(
            f"the view never completed: {member.view_size} of {spec.members} members after "
            f"{spec.view_timeout:g} s (is IP multicast on loopback blocked?)"
        )
    raise BenchFailure(
        f"the start barrier did not complete in {spec.view_timeout:g} s: "
        f"{len(member.warm_from)} warm and {len(member.ready_from)} ready of {spec.members} members"
    )


async def _watch_parent(member: Member) -> None:
    """Stdin closes when every member is done, or earlier when the parent is gone."""
    await stdin_closed()
    if not member.done.is_set():
        raise BenchFailure("the parent process went away")
    member.released.set()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    return member_main(argv, "bench", MemberSpec.from_json, run_member, (BenchFailure,))


if __name__ == "__main__":
    sys.exit(main())
