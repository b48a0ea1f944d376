"""N ``ReliableStream`` objects, one per member, in one discrete-event loop:
the harness of ``benchmarks/stability_rounds.py`` (rounds from a multicast to
its stability at every member, at N up to thousands) and of
``tests/test_transport_reliable.py`` (the ceil(log2 N) bound at N = 100).

Theory of operation
-------------------
Every member's gossip timer starts at a random phase (members share no
clock), datagrams take ``latency`` seconds, nothing is lost. Member 0
multicasts one message per gossip interval (``messages`` of them, after a
warm-up); for each, ``measure`` gives the time until *every* member holds it
as stable (its buffer dropped it), in gossip intervals, and the digests sent
per member per round (the cost). Views of at most 64 members also learn
stability from the ACK matrix, so N > 64 shows the all-reduce alone
(``sgcs/transport/stability.py``).
"""

from __future__ import annotations

import heapq
import math
import random

from sgcs.msgtype import MsgType
from sgcs.records import OutDigest, OutNack, OutNull, OutRecords
from sgcs.transport.params import Params
from sgcs.transport.reliable import ReliableStream

WARM_UP = 0.5
"""Seconds after the last member started before the first message."""


class Harness:
    def __init__(self, n: int, seed: int, latency: float, interval: float, spread: float,
                 extra_levels: int = 64) -> None:
        rng = random.Random(seed)
        self.latency, self.interval = latency, interval
        params = Params(gossip_interval=interval, max_members=max(n, 4_096), stability_extra_levels=extra_levels)
        members = tuple(range(n))
        # members started up to ``spread`` apart: their round counts (hence
        # the hypercube level of each round) are out of step, as in real life
        starts = [rng.uniform(0, spread) for _ in members]
        self.streams = [ReliableStream(i, members, params, random.Random(rng.random()), starts[i]) for i in members]
        self.heap: list[tuple[float, int, int, object]] = []
        self.order = 0
        self.timer = [math.inf] * n
        self.digests = 0
        self.now = 0.0
        for i in members:
            self._arm(i)
            # a node's other timers (heartbeats) run its stream's timer every
            # interval, busy or idle, so its round count follows its own time
            self._push(starts[i] + interval * rng.random(), i, "tick")

    def _push(self, at: float, member: int, event: object) -> None:
        self.order += 1
        heapq.heappush(self.heap, (at, self.order, member, event))

    def _arm(self, member: int) -> None:
        deadline = self.streams[member].next_deadline()
        if deadline is not None and deadline < self.timer[member]:
            deadline = max(deadline, self.now)  # a deadline already passed fires now
            self.timer[member] = deadline
            self._push(deadline, member, None)

    def _route(self, src: int, outputs: list) -> None:
        at = self.now + self.latency
        for out in outputs:
            if type(out) is OutRecords and out.dst is None:
                for member in range(len(self.streams)):
                    if member != src:
                        self._push(at, member, ("records", src, out.records))
            elif type(out) is OutRecords:
                self._push(at, out.dst, ("records", src, out.records))
            elif type(out) is OutDigest:
                self.digests += 1
                self._push(at, out.dst, ("digest", src, out))
            elif type(out) is OutNack:
                self._push(at, out.dst, ("nack", src, out))
            elif type(out) is OutNull:
                self._push(at, out.dst, ("acks", src, out.acks))

    def _handle(self, member: int, event: object) -> None:
        stream, now = self.streams[member], self.now
        if event == "tick":
            self._push(now + self.interval, member, "tick")
            self._route(member, stream.on_timeout(now))
        elif event is None:
            if now < self.timer[member]:
                return  # superseded by an earlier deadline
            self.timer[member] = math.inf
            self._route(member, stream.on_timeout(now))
        else:
            kind, src, body = event  # type: ignore[misc]
            if kind == "records":
                stream.on_records(src, body, MsgType.DATA, now)
            elif kind == "digest":
                self._route(member, stream.on_digest(src, body.entries, now, body.aggregate))
            elif kind == "nack":
                self._route(member, stream.on_nack(src, body.sender, body.ranges, body.pull))
            else:
                stream.on_acks(src, body, now)
        self._arm(member)

    def run_until(self, end: float, watch: dict[int, list[float | None]] | None = None) -> None:
        while self.heap and self.heap[0][0] <= end:
            self.now, _, member, event = heapq.heappop(self.heap)
            self._handle(member, event)
            if watch is not None:
                stable = self.streams[member].stable(0)
                for seq, times in watch.items():
                    if seq <= stable and times[member] is None:
                        times[member] = self.now
        self.now = end

    def send(self, payload: bytes) -> int:
        seq, outputs = self.streams[0].send(payload, self.now)
        self._route(0, outputs)
        self._arm(0)
        return seq


def measure(n: int, seed: int, messages: int, latency: float, interval: float,
            in_step: bool, extra_levels: int = 64) -> tuple[list[float], float]:
    """Per message: gossip intervals from its send until every member holds it
    stable; and digests sent per member per round."""
    spread = 0.0 if in_step else math.ceil(math.log2(n)) * interval
    h = Harness(n, seed, latency, interval, spread, extra_levels)
    h.run_until(spread + WARM_UP)
    started = h.now
    watch: dict[int, list[float | None]] = {}
    sent_at: dict[int, float] = {}
    h.digests = 0
    for i in range(messages):
        seq = h.send(b"m%d" % i)
        watch[seq] = [None] * n
        sent_at[seq] = h.now
        h.run_until(h.now + interval, watch)
    limit = h.now + 60 * math.ceil(math.log2(n)) * interval
    while any(t is None for times in watch.values() for t in times) and h.now < limit:
        h.run_until(h.now + interval, watch)
    rounds_run = (h.now - started) / interval
    per_member = h.digests / n / rounds_run
    spans = []
    for seq, times in watch.items():
        done = [t for t in times if t is not None]
        spans.append(math.inf if len(done) < n else (max(done) - sent_at[seq]) / interval)
    return spans, per_member
