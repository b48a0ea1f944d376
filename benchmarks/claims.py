"""The seed paper's claims, reproduced with our own protocol code (issue 6, item 4).

Usage::

    python benchmarks/claims.py [--quick] [--json OUT] [--only 1,2,3,4] [--keep DIR]
    python benchmarks/claims.py --render OUT.json

Prints a markdown table ``claim | paper | measured | command`` and detail
tables and, with ``--json``, writes every figure behind them (``--render``
prints the tables of such a file again). ``--quick`` uses small N and short
runs (about two minutes on one core, 250 MB); the full run takes about eleven
minutes and 2 GB at its peak (N = 8192; 3 minutes of it).

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
There is no application traffic, so no round is skipped for a multicast.

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

Measured:

1. Per node and per local round: heartbeat gossips sent (distinct targets;
   datagrams, a table over ``MAX_HEARTBEAT_ENTRIES`` is split) and received
   (distinct senders between two of the node's rounds).
2. For every origin and every round, the rounds until the counter value the
   origin set in that round is known at every node: ``min`` over nodes of the
   counter table is sampled half a round after each round (lockstep), so
   ``rounds = k' - k + 1`` where round k made the value and round k' is the
   first after which everyone has it. In the random model the same is
   measured in seconds (sampled every quarter interval) and divided by the
   gossip interval.
3. Worst age of news: at each node's round, ``now - max(heard_at,
   grace_from)``, the very quantity ``_find_suspects`` compares with
   ``suspect_timeout``, maximised over members and nodes after a warm-up of
   2 ceil(log2 N) rounds; and the false suspicions (``suspect`` events; every
   node is alive) per node per second for several ``suspect_factor`` values,
   with no loss and with 5% loss. Also: T_suspect = log2 N rounds exactly
   (not rounded up) for N not a power of 2, and a quiet member among members
   that all multicast once per round (``multicasters``: each calls
   ``note_multicast``, as ``Node.multicast`` does for a node in one group, and
   its multicast reaches every other node's ``heard``), which makes them skip
   their gossip rounds.

Claim 4 (bimodal reliability of plain gossip, Bimodal Multicast) runs the
simulator (the whole node: transport, ordering, membership) on
``simulations/scenarios/claims-*.toml`` and reads the trace's send and deliver
rows: for each message, the fraction of the group's other members that
delivered it within D seconds of its send, for several D and at the end of the
run. See ``claim4`` for the configurations and why.
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import random
import shutil
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from sgcs.membership.detector import FailureDetector, FdEvent, FdParams, FdSend
from sgcs.wire import MAX_HEARTBEAT_ENTRIES, MsgType, decode_control_untrusted, decode_heartbeat_untrusted

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ROOT / "simulations" / "scenarios"
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
        self.params = FdParams(gossip_interval=GOSSIP, suspect_factor=factor)
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
            age = float((t - np.maximum(det.heard_at, det.grace_from)).max())
        else:
            age = -math.inf
        outputs = det.on_timeout(t)
        if det.statistics().rounds == before:
            self._outputs(i, outputs, t)
            return
        if age > self.worst_age:
            self.worst_age = age
        targets = [o.dst for o in outputs if type(o) is FdSend and o.msg_type is MsgType.HEARTBEAT]
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
        else:
            msg = decode_control_untrusted(body)
            if msg_type is MsgType.PROBE:
                outputs = det.on_probe(src, msg)
            elif msg_type is MsgType.ASK:
                outputs = det.on_ask(src, msg, t)
            elif msg_type is MsgType.ASK_REPLY:
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


# ---------------------------------------------------------------------- claim 4: simulator


FLUSH_SLACK = 0.005
"""A dropped data multicast belongs to a send of its sender at most this long before it."""
BINS = [0.0, 1e-9, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1 - 1e-9, 1.0001]
BIN_LABELS = ["0", "(0,.1)", "[.1,.2)", "[.2,.3)", "[.3,.4)", "[.4,.5)", "[.5,.6)", "[.6,.7)", "[.7,.8)",
              "[.8,.9)", "[.9,1)", "1"]


def _sender_loss_simulator(q: float, seed: int) -> type:
    """A ``Simulator`` whose application data multicasts are each lost at the
    sender with probability ``q`` (no receiver gets that copy; everything else,
    retransmissions and gossip included, goes through the scenario's network)."""
    from simulations.simulator import Simulator

    class SenderLossSimulator(Simulator):
        dropped: list[tuple[int, float]] = []

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._sender_rng = random.Random(f"{seed}:sender-loss")
            SenderLossSimulator.dropped = []

        def _multicast(self, src: int, action: Any, now: float) -> None:
            if action.msg_type is MsgType.DATA and action.group is not None and self._sender_rng.random() < q:
                SenderLossSimulator.dropped.append((src, now))
                loss, self.network.loss = self.network.loss, 1.0  # every copy lost, and counted as lost
                try:
                    super()._multicast(src, action, now)
                finally:
                    self.network.loss = loss
                return
            super()._multicast(src, action, now)

    return SenderLossSimulator


def reliability(run: Path, deadlines: Sequence[float], dropped: list[tuple[int, float]], tail: float = 3.0
                ) -> dict[str, Any]:
    """Per message (send rows at least ``tail`` seconds before the end): the
    fraction of the group's other members that delivered it within D of its
    send, for each D (None: by the end of the run)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    meta = json.loads((run / "meta.json").read_text())
    n, duration = meta["nodes"], meta["duration"]
    table = pq.read_table(run / "events", columns=["t", "node", "kind", "sender", "seq"],
                          filters=pc.field("kind").isin(["send", "deliver"]))
    kind = table.column("kind").to_numpy(zero_copy_only=False)
    t = table.column("t").to_numpy()
    node = table.column("node").to_numpy()
    sender = table.column("sender").to_numpy()
    seq = table.column("seq").to_numpy()
    is_send = (kind == "send") & (t <= duration - tail)
    key = sender.astype(np.int64) * (1 << 40) + seq.astype(np.int64)
    send_keys, send_t, send_node = key[is_send], t[is_send], node[is_send]
    order = np.argsort(send_keys)
    send_keys, send_t, send_node = send_keys[order], send_t[order], send_node[order]
    # a message whose first multicast the sender lost: a drop by its sender at its send instant
    # (the record is flushed at once, flush_delay 0, or after a short send delay)
    lost_first = np.zeros(len(send_keys), dtype=bool)
    if dropped:
        drops = {}
        for src, at in dropped:
            drops.setdefault(src, []).append(at)
        for i in range(len(send_keys)):
            times = drops.get(int(send_node[i]))
            if times:
                lost_first[i] = any(0.0 <= at - send_t[i] < FLUSH_SLACK for at in times)
    is_dl = (kind == "deliver") & (node != sender)
    dl_keys, dl_t = key[is_dl], t[is_dl]
    pos = np.searchsorted(send_keys, dl_keys)
    pos = np.minimum(pos, max(0, len(send_keys) - 1))
    match = (send_keys[pos] == dl_keys) if len(send_keys) else np.zeros(0, dtype=bool)
    lag = dl_t[match] - send_t[pos[match]]
    which = pos[match]
    out: dict[str, Any] = {"messages": int(len(send_keys)), "sender_lost": int(lost_first.sum()), "by_deadline": {}}
    for deadline in deadlines:
        within = lag <= deadline if deadline is not None else np.ones(len(lag), dtype=bool)
        frac = np.bincount(which[within], minlength=len(send_keys)) / (n - 1)
        entry = {"all": _histogram(frac)}
        if dropped:
            entry["sender_lost"] = _histogram(frac[lost_first])
            entry["sent_out"] = _histogram(frac[~lost_first])
        out["by_deadline"]["end" if deadline is None else f"{deadline:g}"] = entry
    return out


def _histogram(frac: np.ndarray) -> dict[str, Any]:
    counts, _ = np.histogram(frac, bins=BINS)
    middle = int(((frac >= 0.1) & (frac < 0.9)).sum())
    return {"n": int(len(frac)), "mean": float(frac.mean()) if len(frac) else None,
            "min": float(frac.min()) if len(frac) else None,
            "hist": dict(zip(BIN_LABELS, counts.tolist())),
            "middle": middle, "middle_share": middle / len(frac) if len(frac) else None}


# ---------------------------------------------------------------------- the claims


@dataclass
class Plan:
    """Sizes of one invocation (``--quick`` or full)."""

    quick: bool
    lockstep_ns: tuple[int, ...]
    other_ns: tuple[int, ...]
    sweep: tuple[tuple[int, int, tuple[float, ...]], ...]
    """(N, rounds, factors) of the false-suspicion sweeps."""
    sim_fd: tuple[tuple[float, float], ...]
    """(suspect_factor, loss) of the whole-node cross-checks (claims-fd-64.toml);
    ``Config`` refuses a suspect_factor below 1, the harness takes any."""
    sim_fd_duration: float
    bimodal: tuple[tuple[str, float], ...]
    """(claims-bimodal-*.toml variant, sender-side loss)."""
    bimodal_duration: float | None


FULL = Plan(False, (16, 24, 100, 256, 1000, 1024, 3000, 4096, 8192), (16, 100, 1000),
            ((64, 300, (0.5, 0.75, 1.0, 1.5, 2.0)), (256, 150, (0.75, 1.0, 1.5, 2.0))),
            ((1.0, 0.0), (1.5, 0.0), (1.0, 0.05), (1.5, 0.05), (2.0, 0.05)), 30.0,
            (("gossip", 0.0), ("nack", 0.0), ("gossip", 0.3), ("nack", 0.3)), None)
QUICK = Plan(True, (16, 24, 100, 256, 1000), (16, 100),
             ((64, 150, (0.5, 0.75, 1.0, 1.5, 2.0)),),
             ((1.0, 0.0), (1.0, 0.05)), 15.0,
             (("gossip", 0.3), ("nack", 0.3)), 10.0)
LOSSES = (0.0, 0.05)
DEADLINES_ROUNDS = (0.5, 3, None, None)
"""Deadlines in gossip rounds; the Nones are ceil(log2 N) and 2 ceil(log2 N) rounds."""


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def claim_fd(plan: Plan) -> dict[str, Any]:
    """Claims 1 and 2 (and the no-loss age of claim 3), per N and timing model."""
    out: dict[str, Any] = {"lockstep": [], "desync": [], "random": []}
    for n in plan.lockstep_ns:
        d = dimensions(n)
        r = run_fd(n, 2 * d + 5, model="lockstep")
        _log(f"  lockstep N={n}: {r.wall:.1f} s")
        out["lockstep"].append(r.to_json())
    for model in ("desync", "random"):
        for n in plan.other_ns:
            d = dimensions(n)
            r = run_fd(n, 5 * d + 3, model=model)
            _log(f"  {model} N={n}: {r.wall:.1f} s")
            out[model].append(r.to_json())
    return out


def claim_fd_sim(keep: Path) -> dict[str, Any]:
    """Claim 1 in the whole node: heartbeat receives per node per gossip interval
    (net buckets of 0.1 s, after t=10 s), all nodes started together vs half of
    them joining 3.05 s late by merge."""
    import pyarrow.parquet as pq
    import simulations.run as sim_run
    from simulations.scenario import load_scenario

    out: dict[str, Any] = {}
    for name in ("claims-fd-64", "claims-fd-join-64"):
        scenario = load_scenario(str(SCENARIOS / f"{name}.toml"), duration=20.0)
        run = keep / f"{name}-buckets"
        started = time.perf_counter()
        sim_run.simulate(scenario, run, net_bucket=GOSSIP, progress=False)
        net = pq.read_table(run / "net", columns=["t", "node", "msg_type", "recv_count"]).to_pandas()
        net = net[(net["msg_type"] == "heartbeat") & (net["t"] >= 10.0 - 1e-9)]
        buckets = np.rint(net["t"].to_numpy() / GOSSIP).astype(np.int64)
        first, last = int(round(10.0 / GOSSIP)), int(round(20.0 / GOSSIP)) - 1
        grid = np.zeros((last - first + 1, scenario.nodes), dtype=np.int64)
        inside = buckets <= last
        np.add.at(grid, (buckets[inside] - first, net["node"].to_numpy()[inside]), net["recv_count"].to_numpy()[inside])
        values, counts = np.unique(grid, return_counts=True)
        out[name] = {"recv_per_bucket": {str(v): int(c) for v, c in zip(values, counts)},
                     "wall": time.perf_counter() - started,
                     "command": f".venv/bin/sgcs simulate simulations/scenarios/{name}.toml --out RUN --duration 20 "
                                f"(net buckets of 0.1 s: benchmarks/claims.py)"}
        _log(f"  sim {name}: {out[name]['wall']:.1f} s")
    return out


EXACT_LOG2_NS = (24, 100)
QUIET_N = 64
"""Every member but node 0 multicasts once per round: how often is the quiet node 0 suspected?"""
"""N (not powers of 2) run with T_suspect = log2 N * T_gossip exactly, the paper's bound not rounded up."""


def claim_suspicions(plan: Plan) -> list[dict[str, Any]]:
    """Claim 3: false suspicions per node per second against suspect_factor;
    then lockstep, no loss, with the factor that makes T_suspect exactly
    log2 N * T_gossip (log2 N / ceil(log2 N) < 1 when N is not a power of 2)."""
    rows = []
    for model in ("lockstep", "random"):
        for factor in (1.0, 4.0):
            n = QUIET_N
            r = run_fd(n, 200, model=model, factor=factor, spread=False, multicasters=frozenset(range(1, n)))
            rows.append({**r.to_json(), "bound": "quiet"})
            _log(f"  N={n} {model} factor={factor}, all but node 0 multicast every round: "
                 f"{r.quiet_suspicions} suspicions of node 0, {r.wall:.1f} s")
    for n in EXACT_LOG2_NS:
        factor = math.log2(n) / dimensions(n)
        r = run_fd(n, 100, model="lockstep", factor=factor, spread=False)
        rows.append({**r.to_json(), "bound": "log2"})
        _log(f"  N={n} lockstep T_suspect = log2 N rounds: {r.suspects_steady} suspicions, {r.wall:.1f} s")
    for n, rounds, factors in plan.sweep:
        for model in ("lockstep", "random"):
            for loss in LOSSES:
                for factor in factors:
                    r = run_fd(n, rounds, model=model, factor=factor, loss=loss, spread=False)
                    rows.append(r.to_json())
                    _log(f"  N={n} {model} loss={loss} factor={factor}: {r.suspects_steady} suspicions, {r.wall:.1f} s")
    return rows


def claim_suspicions_sim(plan: Plan, keep: Path) -> list[dict[str, Any]]:
    """Claim 3 cross-check with the whole node (simulator, claims-fd-64.toml)."""
    import tomllib

    import pyarrow.parquet as pq
    import simulations.run as sim_run
    from simulations.scenario import build_scenario

    source = SCENARIOS / "claims-fd-64.toml"
    rows = []
    for factor, loss in plan.sim_fd:
        raw = tomllib.loads(source.read_text())
        raw["protocol"]["suspect_factor"] = factor
        raw["network"]["loss"] = loss
        raw["duration"] = plan.sim_fd_duration
        scenario = build_scenario(raw, str(source))
        run = keep / f"claims-fd-64-f{factor:g}-l{loss:g}"
        summary = sim_run.simulate(scenario, run, progress=False)
        events = pq.read_table(run / "events", columns=["t", "kind", "members", "optimistic"]).to_pandas()
        warm = dimensions(scenario.nodes) * GOSSIP + 1.0
        suspects = int(((events["kind"] == "suspect") & (events["t"] >= warm)).sum())
        views = events[(events["kind"] == "view") & (events["optimistic"] != True)]  # noqa: E712
        shrunk = int(sum(len(m) < scenario.nodes for m in views["members"]))
        rows.append({"n": scenario.nodes, "factor": factor, "loss": loss, "duration": scenario.duration,
                     "suspects": suspects, "rate": suspects / (scenario.nodes * (scenario.duration - warm)),
                     "views_without_a_live_member": shrunk, "wall": summary.wall_seconds,
                     "command": f".venv/bin/sgcs simulate simulations/scenarios/claims-fd-64.toml --out RUN "
                                f"--duration {scenario.duration:g} with [protocol] suspect_factor = {factor:g}, "
                                f"[network] loss = {loss:g}"})
        _log(f"  sim N=64 factor={factor} loss={loss}: {suspects} suspicions, {summary.wall_seconds:.1f} s")
    return rows


def claim_bimodal(plan: Plan, keep: Path) -> list[dict[str, Any]]:
    """Claim 4: per-message reliability histograms.

    Configurations (100 nodes, one FIFO group of everyone, 20 msg/s, 20% loss
    per datagram per receiver):

    * ``nack``: our full transport (claims-bimodal-nack.toml);
    * ``gossip``: "plain gossip", NACK recovery off (claims-bimodal-gossip.toml).

    Two things make pbcast bimodal and are absent from our transport: the
    gossip about a message stops after a bounded number of rounds, and the
    first, unreliable multicast can fail as a whole (the sender's copy is lost
    or the sender stops). Our gossip never gives up on a record before it is
    stable, so the bound is applied in the measurement: a message's
    reliability within D is the fraction of the other members that delivered
    it within D of its send, for D = 0.5, 3, ceil(log2 N) and 2 ceil(log2 N)
    rounds (pbcast's analysis runs a fixed number of rounds after the
    multicast; under a per-holder retention bound the final reach would lie
    between the value at D and the value at the end). The whole-multicast
    failure is a sender-side loss: each data multicast is lost at the sender
    with probability 0.3 (``_sender_loss_simulator``), and messages are
    reported apart by whether their first multicast got out.
    """
    rows = []
    from simulations.scenario import load_scenario

    for variant, sender_loss in plan.bimodal:
        source = SCENARIOS / f"claims-bimodal-{variant}.toml"
        scenario = load_scenario(str(source), duration=plan.bimodal_duration)
        d = dimensions(scenario.nodes)
        deadlines = [0.05, 3 * GOSSIP, d * GOSSIP, 2 * d * GOSSIP, None]
        run = keep / f"claims-bimodal-{variant}-q{sender_loss:g}"
        summary, dropped = run_sim(scenario, run, sender_loss)
        result = reliability(run, deadlines, dropped)
        result.update({"variant": variant, "sender_loss": sender_loss, "nodes": scenario.nodes,
                       "duration": scenario.duration, "loss": scenario.network.loss,
                       "deadlines_rounds": [None if x is None else round(x / GOSSIP, 2) for x in deadlines],
                       "wall": summary["wall_seconds"],
                       "command": (f".venv/bin/sgcs simulate simulations/scenarios/claims-bimodal-{variant}.toml "
                                   f"--out RUN --duration {scenario.duration:g}")
                       + (f" + sender-side loss {sender_loss:g} (benchmarks/claims.py)" if sender_loss else "")})
        rows.append(result)
        _log(f"  sim {variant} sender_loss={sender_loss}: {summary['wall_seconds']:.1f} s")
    return rows


def run_sim(scenario: Any, out: Path, sender_loss: float = 0.0) -> tuple[dict[str, Any], list[tuple[int, float]]]:
    """Simulate ``scenario`` into ``out``, with a sender-side loss if asked;
    returns the run summary and the (sender, time) of every multicast dropped."""
    import simulations.run as sim_run

    original = sim_run.Simulator
    cls = _sender_loss_simulator(sender_loss, scenario.seed) if sender_loss else None
    if cls is not None:
        sim_run.Simulator = cls
    try:
        summary = sim_run.simulate(scenario, out, progress=False)
    finally:
        sim_run.Simulator = original
    if cls is not None and summary.sends and not cls.dropped:
        raise RuntimeError("the sender-side loss dropped nothing: did Simulator._multicast change? "
                           "(benchmarks/claims.py overrides it)")
    return summary.to_json(), list(cls.dropped) if cls is not None else []


# ---------------------------------------------------------------------- report


def _hist_text(hist: dict[Any, int]) -> str:
    return ", ".join(f"{k}: {v}" for k, v in sorted(hist.items(), key=lambda kv: int(kv[0])))


def _minmax(hist: dict[Any, int]) -> tuple[int, int]:
    keys = [int(k) for k, v in hist.items() if v]
    return min(keys), max(keys)


def _share_not_one(hist: dict[Any, int]) -> float:
    total = sum(hist.values())
    return 1 - hist.get("1", hist.get(1, 0)) / total if total else 0.0


def render(results: dict[str, Any]) -> str:
    lines: list[str] = []
    add = lines.append
    cmd = "python benchmarks/claims.py" + (" --quick" if results["quick"] else "")
    fd = results.get("fd")
    sweep = results.get("suspicions")
    sim_fd = results.get("suspicions_sim")
    bimodal = results.get("bimodal")
    node_sim = results.get("fd_sim")
    rows: list[tuple[str, str, str, str, str]] = []
    if fd:
        lock = fd["lockstep"]
        ns = ", ".join(str(r["n"]) for r in lock)
        sends = [_minmax(r["sends_hist"]) for r in lock]
        recvs = [_minmax(r["recv_hist"]) for r in lock]
        big = [r for r in lock if max(int(k) for k in r["datagrams_hist"]) > 1]
        node_rounds = sum(sum(r["sends_hist"].values()) for r in lock)
        split = (f"; at N > {MAX_HEARTBEAT_ENTRIES:,} one gossip is "
                 f"{max(int(k) for k in big[0]['datagrams_hist'])} datagrams (N={big[0]['n']})") if big else ""
        rows.append(("1a", "hypercube target: each member sends one FD gossip per round",
                     "exactly 1",
                     f"lockstep, N = {ns} ({node_rounds:,} node-rounds): min {min(a for a, _ in sends)}, "
                     f"max {max(b for _, b in sends)} distinct targets per node per round{split}",
                     f"`{cmd} --only 1`"))
        desync = fd["desync"]
        parts = [f"N={r['n']}: {_minmax(r['recv_hist'])[0]}..{_minmax(r['recv_hist'])[1]}, "
                 f"{_share_not_one(r['recv_hist']):.0%} of node-rounds != 1" for r in desync]
        sim_part = ""
        if node_sim:
            a, b = node_sim["claims-fd-64"]["recv_per_bucket"], node_sim["claims-fd-join-64"]["recv_per_bucket"]
            sim_part = (f"; whole node (simulator, N=64, receives per node per 0.1 s): all started together "
                        f"{_minmax(a)[0]}..{_minmax(a)[1]} ({_share_not_one(a):.0%} != 1, phase jitter), "
                        f"half joined later {_minmax(b)[0]}..{_minmax(b)[1]} ({_share_not_one(b):.0%} != 1)")
        rows.append(("1b", "... and receives exactly one per round", "exactly 1",
                     f"lockstep: min {min(a for a, _ in recvs)}, max {max(b for _, b in recvs)} for every N above, "
                     f"powers of 2 or not. **Round counters out of step** (nodes that ran 0-99 rounds alone "
                     f"first): {'; '.join(parts)}{sim_part}",
                     f"`{cmd} --only 1`"))
        exact = all(_minmax(r["spread"])[1] == dimensions(r["n"]) for r in lock)
        unfinished = sum(r["spread_unfinished"] for r in lock)
        per_n = ", ".join(f"{r['n']}: {_minmax(r['spread'])[1]}/{dimensions(r['n'])}" for r in lock)
        dparts = ", ".join(f"N={r['n']}: max {_minmax(r['spread'])[1]} (d={dimensions(r['n'])})"
                           + (f", {r['spread_unfinished']} not within 3d" if r["spread_unfinished"] else "")
                           for r in desync)
        rparts = ", ".join(f"N={r['n']}: median {r['spread_seconds_p50']:.2f}, max {r['spread_seconds_max']:.2f}"
                           for r in fd["random"] if r["spread_seconds_max"] is not None)
        rows.append(("2", "a heartbeat reaches every member within ceil(log2 N) rounds (no loss)",
                     "<= ceil(log2 N) rounds",
                     f"lockstep, max rounds over every origin and round / ceil(log2 N): {per_n}"
                     f"{' (always exactly ceil(log2 N))' if exact else ''}"
                     f"{f', {unfinished} values unfinished' if unfinished else ''}. "
                     f"Counters out of step: {dparts}. Random phases, 1 ms lognormal latency, in gossip intervals: "
                     f"{rparts}",
                     f"`{cmd} --only 2`"))
        ages = ", ".join(f"{r['n']}: {r['worst_age'] / GOSSIP:.2f} (log2 {math.log2(r['n']):.2f})" for r in lock)
        rages = ", ".join(f"{r['n']}: {r['worst_age'] / GOSSIP:.3f} (d={dimensions(r['n'])})" for r in fd["random"])
        rows.append(("3a", "worst age of heartbeat news without loss, in rounds, vs log2 N (so T_suspect >= "
                           "log2 N * T_gossip is the minimum)", "~ log2 N",
                     f"lockstep, N: age (log2 N): {ages}: always ceil(log2 N) minus the 1 ms latency. "
                     f"Random phases (as deployed): {rages}; above d means a false suspicion at factor 1 "
                     f"without any loss",
                     f"`{cmd} --only 3`"))
    exact = [r for r in sweep or [] if r.get("bound") == "log2"]
    quiet = [r for r in sweep or [] if r.get("bound") == "quiet"]
    sweep = [r for r in sweep or [] if r.get("bound") is None]
    if exact and rows and rows[-1][0] == "3a":
        row = rows[-1]
        rows[-1] = (row[0], row[1], row[2], row[3] + ". With T_suspect = log2 N * T_gossip exactly (not rounded up; "
                    "lockstep, no loss): " + ", ".join(
                        f"N={r['n']}: {r['suspicion_rate']:.2f} false suspicions per node per s" for r in exact)
                    + ": the bound needs ceil(log2 N), which the detector uses", row[4])
    if sweep:
        parts = []
        for n in sorted({r["n"] for r in sweep}):
            for model in ("lockstep", "random"):
                for loss in LOSSES:
                    sel = [r for r in sweep if r["n"] == n and r["model"] == model and r["loss"] == loss]
                    parts.append(f"N={n} {model} loss {loss:g}: " + ", ".join(
                        f"{r['factor']:g}: {r['suspicion_rate']:.3g}" for r in sel))
        sim_text = ""
        if sim_fd:
            sim_text = "; whole node (simulator, N=64): " + ", ".join(
                f"factor {r['factor']:g} loss {r['loss']:g}: {r['rate']:.3g}" for r in sim_fd)
        rows.append(("3b", "false suspicions per node per second vs suspect_factor (T_suspect = factor * "
                           "ceil(log2 N) * T_gossip), no loss and 5% loss",
                     "none without loss at factor >= 1",
                     "; ".join(parts) + sim_text + " (details below)",
                     f"`{cmd} --only 3`"))
    if quiet:
        text = "; ".join(
            f"{r['model']}, factor {r['factor']:g}: node 0 suspected {r['quiet_suspicions']} times in "
            f"{r['observed']:.1f} s, i.e. {r['quiet_suspicions'] / ((r['n'] - 1) * r['observed']):.2f} per observer "
            f"per s ({r['events'].get('failed', 0)} false failures)" for r in quiet)
        rows.append(("3c", f"heartbeats while the application multicasts (N={quiet[0]['n']}, no loss, every member "
                           "but node 0 multicasts once per round, node 0 never)",
                     "a live member is not suspected",
                     f"**{text}**. A member that multicast within the last gossip interval skips its gossip "
                     f"round, so it relays no one's counters: a quiet member's heartbeat stops at its hypercube "
                     f"targets", f"`{cmd} --only 3`"))
    if bimodal:
        for r in bimodal:
            d_end = r["by_deadline"]["end"]["all"]
            keys = list(r["by_deadline"])
            verdict = ("**every message reached every member by the end**"
                       + (" (not bimodal)" if r["variant"] == "gossip" else "") + "; " if d_end["min"] == 1.0 else "")
            text = (f"{verdict}{r['nodes']} nodes, loss {r['loss']:g}, sender-side loss {r['sender_loss']:g}, "
                    f"{r['messages']} messages; by the end: mean {d_end['mean']:.4f}, min {d_end['min']:.3f}, "
                    f"{d_end['hist']['1']} at 1.0, {d_end['middle']} in [0.1, 0.9)")
            for key in keys[1:-1]:
                e = r["by_deadline"][key]["all"]
                text += (f"; within {float(key) / GOSSIP:g} rounds: mean {e['mean']:.3f}, "
                         f"<0.1: {e['hist']['0'] + e['hist']['(0,.1)']}, [0.1,0.9): {e['middle']}, "
                         f">=0.9: {e['hist']['[.9,1)'] + e['hist']['1']}")
                if "sender_lost" in r["by_deadline"][key] and r["by_deadline"][key]["sender_lost"]["n"]:
                    lost = r["by_deadline"][key]["sender_lost"]
                    text += f" (first multicast lost at the sender: {lost['n']}, mean {lost['mean']:.3f})"
            name = "plain gossip (NACK off)" if r["variant"] == "gossip" else "NACK layer on"
            paper = "bimodal: almost all or almost none" if r["variant"] == "gossip" else "100%"
            rows.append(("4", f"per-message reliability, {name}", paper, text, f"`{cmd} --only 4`"))
    add("| # | claim | paper | measured | command |")
    add("|---|---|---|---|---|")
    for row in rows:
        add("| " + " | ".join(cell.replace("|", "/") for cell in row) + " |")
    if fd:
        add("")
        add("Failure detector per N (lockstep rounds; d = ceil(log2 N)):")
        add("")
        add("| N | log2 N | d | node-rounds | sends/round min-max | datagrams/round | receives/round min-max "
            "| rounds to reach all (max) | worst age (rounds) | wall s |")
        add("|---|---|---|---|---|---|---|---|---|---|")
        for r in fd["lockstep"]:
            s0, s1 = _minmax(r["sends_hist"])
            g0, g1 = _minmax(r["datagrams_hist"])
            v0, v1 = _minmax(r["recv_hist"])
            add(f"| {r['n']} | {math.log2(r['n']):.2f} | {dimensions(r['n'])} | {sum(r['sends_hist'].values()):,} "
                f"| {s0}-{s1} | {g0}-{g1} | {v0}-{v1} | {_minmax(r['spread'])[1]} | {r['worst_age'] / GOSSIP:.3f} "
                f"| {r['wall']:.1f} |")
        add("")
        add("Other timing models: receives per node-round (count of node-rounds), rounds/intervals to reach all:")
        add("")
        add("| model | N | receives histogram | reach all | worst age (intervals) |")
        add("|---|---|---|---|---|")
        for model in ("desync", "random"):
            for r in fd[model]:
                reach = (f"rounds histogram {_hist_text(r['spread'])}" if model == "desync" else
                         f"median {r['spread_seconds_p50']:.2f}, max {r['spread_seconds_max']:.2f} intervals")
                add(f"| {model} | {r['n']} | {_hist_text(r['recv_hist'])} | {reach} | {r['worst_age'] / GOSSIP:.3f} |")
    if sweep:
        add("")
        add("False suspicions per node per second (harness; gossip_interval 0.1 s; every node alive; "
            "'failed' = false failure verdicts):")
        add("")
        add("| N | model | loss | suspect_factor | T_suspect s | suspicions | per node per s | failed | wall s |")
        add("|---|---|---|---|---|---|---|---|---|")
        for r in sweep:
            add(f"| {r['n']} | {r['model']} | {r['loss']:g} | {r['factor']:g} | "
                f"{r['factor'] * dimensions(r['n']) * GOSSIP:.2f} | {r['suspects_steady']} | "
                f"{r['suspicion_rate']:.4f} | {r['events'].get('failed', 0)} | {r['wall']:.1f} |")
    if sim_fd:
        add("")
        add("Whole node in the simulator (claims-fd-64.toml, no application traffic):")
        add("")
        add("| suspect_factor | loss | s | suspicions | per node per s | views without a live member | wall s |")
        add("|---|---|---|---|---|---|---|")
        for r in sim_fd:
            add(f"| {r['factor']:g} | {r['loss']:g} | {r['duration']:g} | {r['suspects']} | {r['rate']:.4f} | "
                f"{r['views_without_a_live_member']} | {r['wall']:.1f} |")
    if bimodal:
        add("")
        add("Per-message reliability histograms (fraction of the other members that delivered the message; "
            "messages sent >= 3 s before the end):")
        add("")
        add("| config | sender-side loss | within | class | n | mean | " + " | ".join(BIN_LABELS) + " |")
        add("|---|---|---|---|---|---|" + "---|" * len(BIN_LABELS))
        for r in bimodal:
            for key, entry in r["by_deadline"].items():
                within = "end" if key == "end" else f"{float(key) / GOSSIP:g} rounds"
                for cls, h in entry.items():
                    if not h["n"]:
                        continue
                    add(f"| {r['variant']} | {r['sender_loss']:g} | {within} | {cls} | {h['n']} | {h['mean']:.3f} | "
                        + " | ".join(str(h["hist"][b]) for b in BIN_LABELS) + " |")
    add("")
    add(f"Wall time: {results['wall']:.0f} s ({cmd}).")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Reproduce the SGCS paper's claims with sgcs's own code.")
    parser.add_argument("--quick", action="store_true", help="small N and short runs (about two minutes)")
    parser.add_argument("--json", metavar="OUT", help="write every figure to this JSON file")
    parser.add_argument("--only", default="1,2,3,4", help="comma-separated claims to run (default: all)")
    parser.add_argument("--keep", metavar="DIR", help="keep the simulator traces in DIR (default: a temporary one)")
    parser.add_argument("--render", metavar="JSON", help="print the tables of an earlier --json output; run nothing")
    args = parser.parse_args(argv)
    if args.render:
        try:
            print(render(json.loads(Path(args.render).read_text())))
        except (OSError, ValueError, KeyError) as exc:
            parser.error(f"--render {args.render}: {exc}")
        return 0
    try:
        only = {int(x) for x in args.only.split(",") if x.strip()}
    except ValueError:
        parser.error("--only takes claim numbers, e.g. 1,3")
    if not only <= {1, 2, 3, 4}:
        parser.error("--only: claims are 1, 2, 3 and 4")
    plan = QUICK if args.quick else FULL
    import tempfile

    keep = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="sgcs-claims-"))
    keep.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    results: dict[str, Any] = {"quick": plan.quick, "gossip_interval": GOSSIP, "latency": LATENCY}
    try:
        if only & {1, 2, 3}:
            _log("claims 1-2: failure detector harness")
            results["fd"] = claim_fd(plan)
        if 1 in only:
            _log("claim 1: whole node in the simulator")
            results["fd_sim"] = claim_fd_sim(keep)
        if 3 in only:
            _log("claim 3: false suspicions")
            results["suspicions"] = claim_suspicions(plan)
            results["suspicions_sim"] = claim_suspicions_sim(plan, keep)
        if 4 in only:
            _log("claim 4: reliability histograms")
            results["bimodal"] = claim_bimodal(plan, keep)
    finally:
        if not args.keep:
            shutil.rmtree(keep, ignore_errors=True)
    results["wall"] = time.perf_counter() - started
    results["commit"] = _commit()
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
    print(render(results))
    return 0


def _commit() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main())
