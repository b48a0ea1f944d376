"""Failure-detector round harness: claims 1 to 3 of ``benchmarks/claims.py``
(through ``benchmarks/claims_fd.py``), checked at small N by
``tests/test_claims.py`` and ``tests/test_quiet_members.py``.

Theory of operation
-------------------
Claims 1 to 3 are about the gossip failure detector (SGCS paper, section 4.1;
``sgcs/membership/detector.py``). They are measured on the real
``FailureDetector`` objects, one per node, driven by a small discrete-event
harness (``FdHarness``) that does what ``Node`` and the simulator do for the
detector and nothing else: it fires each detector's ``next_deadline``, carries
every ``FdSend`` as a datagram (encoded by the detector, decoded here with the
wire's ``decode_*_untrusted``) after a latency, with an optional independent
loss per datagram, hands it to ``on_heartbeat`` / ``on_probe`` / ``on_ask`` /
``on_ask_reply`` and then, as ``Node.handle_datagram`` does, to ``heard``.
There is no application traffic unless ``multicasters`` are given (claim 3c),
so no round is skipped for a multicast.

Three timing models:

* ``lockstep``: the paper's synchronous rounds. Every detector is built with a
  ``random.Random`` whose first draw is 0, so every node's first round is at
  t=0 and its k-th at k * gossip_interval, at the same instant; datagrams take
  a fixed 1 ms, so a round's heartbeats all arrive before the next round.
* ``random``: as deployed and as in the simulator: each node's round phase is
  uniform in one gossip interval (the detector's own draw) and latencies are
  lognormal (median 1 ms, sigma 0.5, the scenarios' network).
* ``desync``: lockstep timing, but each node ran a random number (0..99) of
  rounds alone before the group formed, as a node does that started earlier
  and joined later (its round counter, hence its hypercube dimension r, is
  then out of step with the others'). The detector's round counter is local.

For N >= 2048 the harness shares one copy of the read-only sorted member list
(``ids``, ``_index``) and of ``grace_from`` between the detectors (identical in
every node; the detector only rebinds them in ``set_members`` and writes
``grace_from`` in place only on a *busy* verdict, which cannot happen without
loss and is checked). This keeps N = 8192 at about 1 GB instead of 8.

``run_fd`` runs one harness and returns an ``FdResult``: the per-round send
and receive histograms (claim 1), the rounds until a counter value is known
everywhere (claim 2), the worst age of news and the false suspicions (claim 3).
"""

from __future__ import annotations

import heapq
import math
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sgcs.membership.detector import FailureDetector, FdEvent, FdSend
from sgcs.membership.messages import Ask, AskReply, Probe, decode_untrusted
from sgcs.transport.params import Params
from sgcs.wire import MsgType, decode_heartbeat_untrusted, decode_roster_heartbeat_untrusted

HEARTBEATS = (MsgType.HEARTBEAT, MsgType.HEARTBEAT_ROSTER)

GOSSIP = 0.1
"""gossip_interval of every harness run (the default), seconds."""
LATENCY = 0.001
LEAN_FROM = 2048

_TIMER, _ARRIVE, _SAMPLE, _MULTICAST, _HEARD = 0, 1, 2, 3, 4


def dimensions(n: int) -> int:
    return max(1, math.ceil(math.log2(max(2, n))))


class AlignedRandom(random.Random):
    """A ``random.Random`` whose first ``random()`` is 0.0: the detector draws
    its round phase first, so every node's first round is at its creation time."""

    def __init__(self, seed: Any) -> None:
        super().__init__(seed)
        self._first = True

    def random(self) -> float:
        if self._first:
            self._first = False
            return 0.0
        return super().random()


# ---------------------------------------------------------------------- harness


@dataclass
class FdResult:
    n: int
    model: str
    rounds: int
    factor: float
    loss: float
    seconds: float = 0.0
    sends_hist: dict[int, int] = field(default_factory=dict)
    """Distinct heartbeat targets per node per round -> (node, round) count."""
    datagrams_hist: dict[int, int] = field(default_factory=dict)
    recv_hist: dict[int, int] = field(default_factory=dict)
    """Distinct heartbeat senders between two rounds of a node -> count."""
    spread: dict[int, int] = field(default_factory=dict)
    """Lockstep/desync: rounds until a value is known everywhere -> (origin, round) count."""
    spread_unfinished: int = 0
    spread_seconds_max: float | None = None
    spread_seconds_p50: float | None = None
    worst_age: float | None = None
    """Seconds, after warm-up (only meaningful without loss)."""
    events: dict[str, int] = field(default_factory=dict)
    suspects_steady: int = 0
    """``suspect`` events after the warm-up (d + 1 rounds)."""
    observed: float = 0.0
    """Seconds after the warm-up."""
    multicasters: int = 0
    """Nodes that multicast once per round (application traffic)."""
    quiet_suspicions: int = 0
    """With multicasters: steady-state suspicions of the members that never multicast."""
    wall: float = 0.0

    @property
    def suspicion_rate(self) -> float:
        """False suspicions per node per second (every node is alive)."""
        return self.suspects_steady / (self.n * self.observed) if self.observed > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        out = dict(self.__dict__)
        out["suspicion_rate"] = self.suspicion_rate
        for key in ("sends_hist", "datagrams_hist", "recv_hist", "spread"):
            out[key] = {str(k): v for k, v in sorted(out[key].items())}
        return out


class FdHarness:
    """Every node's ``FailureDetector`` and a network between them (see module doc)."""

    def __init__(self, n: int, *, model: str = "lockstep", factor: float = 1.0, loss: float = 0.0,
                 seed: int = 1, spread: bool = True, age: bool = True,
                 multicasters: frozenset[int] = frozenset()) -> None:
        if model not in ("lockstep", "random", "desync"):
            raise ValueError(model)
        self.n, self.model, self.loss = n, model, loss
        self.params = Params(gossip_interval=GOSSIP, suspect_factor=factor)
        self.net = random.Random(f"{seed}:net")
        self.track_spread, self.track_age = spread, age
        self.heap: list[tuple] = []
        self.tie = 0
        self.timer_at: list[float | None] = [None] * n
        self.dets: list[FailureDetector] = []
        members = set(range(n))
        offsets = random.Random(f"{seed}:offsets")
        shared: tuple | None = None
        for i in range(n):
            if model == "random":
                det = FailureDetector(i, self.params, random.Random(f"{seed}:{i}"), 0.0)
            else:
                alone = offsets.randrange(100) if model == "desync" else 0
                start = -alone * GOSSIP
                det = FailureDetector(i, self.params, AlignedRandom(f"{seed}:{i}"), start)
                for k in range(alone):  # rounds run alone (a singleton) before the group formed
                    det.on_timeout(start + k * GOSSIP)
            det._epoch = 0.0  # one epoch for all: the lean mode shares grace_from, in ms since it
            det.set_members(members, 0.0)
            if n >= LEAN_FROM:
                if shared is None:
                    shared = (det.ids, det._index, det.grace_from)
                else:
                    det.ids, det._index, det.grace_from = shared
            self.dets.append(det)
        self.lean = shared is not None
        # claim 1
        self.rounds_done = [0] * n
        self.recv_from: list[set[int]] = [set() for _ in range(n)]
        self.sends_hist: Counter[int] = Counter()
        self.datagrams_hist: Counter[int] = Counter()
        self.recv_hist: Counter[int] = Counter()
        # claim 2
        self.samples_t: list[float] = []
        self.samples_min: list[np.ndarray] = []
        self.round_times: list[list[float]] = [[] for _ in range(n)]
        self.round_value: list[list[int]] = [[] for _ in range(n)]
        # claim 3
        self.worst_age = -math.inf
        self.age_from = (dimensions(n) + 1) * GOSSIP
        self.events: Counter[str] = Counter()
        self.suspects_after = self.age_from
        self.suspect_count = 0
        self.suspected: Counter[int] = Counter()
        """Steady-state suspicions per suspected member."""
        self.multicasters = multicasters

    # ------------------------------------------------------------ engine

    def _push(self, t: float, kind: int, a: Any, b: Any = None) -> None:
        self.tie += 1
        heapq.heappush(self.heap, (t, self.tie, kind, a, b))

    def _rearm(self, i: int) -> None:
        deadline = self.dets[i].next_deadline()
        if deadline is not None and deadline != self.timer_at[i]:
            self.timer_at[i] = deadline
            self._push(deadline, _TIMER, i)

    def _latency(self) -> float:
        if self.model == "random":
            return self.net.lognormvariate(math.log(LATENCY), 0.5)
        return LATENCY

    def _outputs(self, i: int, outputs: list, now: float) -> None:
        for output in outputs:
            if type(output) is FdSend:
                if self.loss and self.net.random() < self.loss:
                    continue
                self._push(now + self._latency(), _ARRIVE, output.dst, (i, output.msg_type, output.body))
            else:
                assert type(output) is FdEvent
                self.events[output.kind] += 1
                if output.kind == "suspect" and now >= self.suspects_after:
                    self.suspect_count += 1
                    self.suspected[output.member] += 1

    def run(self, rounds: int) -> None:
        end = (rounds - 0.5) * GOSSIP
        if self.track_spread:  # after each round's deliveries (lockstep), or every quarter round
            times = [(k + 0.5) * GOSSIP for k in range(rounds)] if self.model != "random" else \
                [k * GOSSIP / 4 for k in range(1, 4 * rounds)]
            for t in times:
                if t <= end:
                    self._push(t, _SAMPLE, None)
        for k in range(rounds):  # application traffic: one multicast per round, mid-round
            for i in sorted(self.multicasters):
                self._push((k + 0.5) * GOSSIP, _MULTICAST, i)
        for i in range(self.n):
            self._rearm(i)
        heap = self.heap
        while heap and heap[0][0] <= end:
            t, _, kind, a, b = heapq.heappop(heap)
            if kind == _TIMER:
                if self.timer_at[a] != t:
                    continue
                self.timer_at[a] = None
                self._timer(a, t)
                self._rearm(a)
            elif kind == _ARRIVE:
                self._arrive(a, b, t)
                self._rearm(a)
            elif kind == _SAMPLE:
                self._sample(t)
            elif kind == _MULTICAST:  # as Node.multicast: the detector skips its next gossip
                self.dets[a].note_multicast(t)
                self._push(t + LATENCY, _HEARD, a)
            else:  # the multicast reached the others: direct evidence (Node.handle_datagram)
                for j in range(self.n):
                    if j != a and not (self.loss and self.net.random() < self.loss):
                        self._outputs(j, self.dets[j].heard(a, t), t)
                        self._rearm(j)

    def _timer(self, i: int, t: float) -> None:
        det = self.dets[i]
        before = det.statistics().rounds
        if self.track_age and t >= self.age_from:
            age = float((det._ms(t) - np.maximum(det.heard_at, det.grace_from)).max()) / 1000
        else:
            age = -math.inf
        outputs = det.on_timeout(t)
        if det.statistics().rounds == before:
            self._outputs(i, outputs, t)
            return
        if age > self.worst_age:
            self.worst_age = age
        targets = [o.dst for o in outputs if type(o) is FdSend and o.msg_type in HEARTBEATS]
        self.sends_hist[len(set(targets))] += 1
        self.datagrams_hist[len(targets)] += 1
        if self.rounds_done[i]:
            self.recv_hist[len(self.recv_from[i])] += 1
        self.recv_from[i] = set()
        self.rounds_done[i] += 1
        if self.track_spread:
            self.round_times[i].append(t)
            self.round_value[i].append(int(det.counters[det._index[i]]))
        self._outputs(i, outputs, t)

    def _arrive(self, dst: int, packet: tuple[int, MsgType, bytes], t: float) -> None:
        src, msg_type, body = packet
        det = self.dets[dst]
        if msg_type is MsgType.HEARTBEAT:
            self.recv_from[dst].add(src)
            members, counters = decode_heartbeat_untrusted(body)
            outputs = det.on_heartbeat(src, members, counters, t)
        elif msg_type is MsgType.HEARTBEAT_ROSTER:
            self.recv_from[dst].add(src)
            outputs = det.on_roster_heartbeat(src, *decode_roster_heartbeat_untrusted(body), t)
        else:
            msg = decode_untrusted(msg_type, body)
            if type(msg) is Probe:
                outputs = det.on_probe(src, msg)
            elif type(msg) is Ask:
                outputs = det.on_ask(src, msg, t)
            elif type(msg) is AskReply:
                outputs = det.on_ask_reply(src, msg, t)
            else:
                outputs = []
        outputs += det.heard(src, t)  # as Node.handle_datagram: any datagram is evidence
        self._outputs(dst, outputs, t)

    def _sample(self, t: float) -> None:
        low = self.dets[0].counters.copy()
        for det in self.dets[1:]:
            np.minimum(low, det.counters, out=low)
        self.samples_t.append(t)
        self.samples_min.append(low)

    # ------------------------------------------------------------ results

    def result(self, rounds: int, wall: float) -> FdResult:
        if self.lean:
            assert self.events["busy"] == 0, "a busy verdict wrote the shared grace_from"
        r = FdResult(self.n, self.model, rounds, self.params.suspect_factor, self.loss)
        r.sends_hist, r.datagrams_hist, r.recv_hist = dict(self.sends_hist), dict(self.datagrams_hist), \
            dict(self.recv_hist)
        r.worst_age = self.worst_age if self.worst_age > -math.inf else None
        r.events = dict(self.events)
        r.suspects_steady = self.suspect_count
        r.multicasters = len(self.multicasters)
        r.quiet_suspicions = sum(c for m, c in self.suspected.items() if m not in self.multicasters)
        r.observed = max(0.0, (rounds - 0.5) * GOSSIP - self.suspects_after)
        r.wall = wall
        if self.track_spread and self.samples_t:
            self._spread(r)
        return r

    def _spread(self, r: FdResult) -> None:
        """Rounds (lockstep, desync) or seconds (random) from a counter value's
        creation until every node holds it."""
        times = np.array(self.samples_t)
        lows = np.stack(self.samples_min)  # samples x origins, non-decreasing down each column
        d = dimensions(self.n)
        window = d + 2 if self.model == "lockstep" else 3 * d
        hist: Counter[int] = Counter()
        delays: list[float] = []
        unfinished = 0
        for o in range(self.n):
            made_t = np.array(self.round_times[o])
            values = np.array(self.round_value[o])
            keep = made_t >= d * GOSSIP  # past the start-up (everyone starts from counter 0)
            made_t, values = made_t[keep], values[keep]
            column = lows[:, o]
            first = np.searchsorted(column, values, side="left")  # first sample with low >= value
            done = first < len(times)
            # a value made too late in the run to finish can't be judged: only those made at
            # least ``window`` rounds before the last sample count (unfinished then: > window)
            judged = made_t <= times[-1] - window * GOSSIP
            unfinished += int((~done & judged).sum())
            ok = done & judged
            if self.model == "random":
                delays += (times[first[ok]] - made_t[ok]).tolist()
            else:
                k_made = np.rint(made_t[ok] / GOSSIP).astype(np.int64)
                k_known = np.rint((times[first[ok]] - GOSSIP / 2) / GOSSIP).astype(np.int64)
                hist.update((k_known - k_made + 1).tolist())
        r.spread = dict(hist)
        r.spread_unfinished = unfinished
        if delays:
            arr = np.array(delays) / GOSSIP
            r.spread_seconds_max = float(arr.max())
            r.spread_seconds_p50 = float(np.median(arr))


def run_fd(n: int, rounds: int, **kwargs: Any) -> FdResult:
    started = time.perf_counter()
    harness = FdHarness(n, **kwargs)
    harness.run(rounds)
    return harness.result(rounds, time.perf_counter() - started)
