"""Simulator-based parts of ``benchmarks/claims.py``: whole-node cross-checks
of claims 1 and 3, and the claim-4 reliability histograms.

Theory of operation
-------------------
These run the simulator (the whole node: transport, ordering, membership) on
``simulations/scenarios/claims-*.toml`` and read its trace, where the harness
of ``claims_fd.py`` drives the failure detectors alone.

* ``claim_fd_sim`` (claim 1): heartbeat receives per node per gossip interval,
  from the ``net`` table in buckets of one interval.
* ``claim_suspicions_sim`` (claim 3): false suspicions per node per second and
  views that lost a live member, for several suspect_factor and loss values.
* ``claim_bimodal`` (claim 4, bimodal reliability of plain gossip, Bimodal
  Multicast): from the trace's send and deliver rows, for each message, the
  fraction of the group's other members that delivered it within D seconds of
  its send, for several D and at the end of the run (``reliability``). A
  sender-side loss, the whole first multicast failing, comes from a
  ``Simulator`` subclass (``_sender_loss_simulator``) that ``run_sim``
  installs for the run. See ``claim_bimodal`` for the configurations and why.
"""

from __future__ import annotations

import json
import random
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from benchmarks.claims_fd import GOSSIP, dimensions
from benchmarks.claims_plan import Plan
from sgcs.wire import MsgType

SCENARIOS = Path(__file__).resolve().parent.parent / "simulations" / "scenarios"


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


FLUSH_SLACK = 0.005
"""A dropped data multicast belongs to a send of its sender at most this long before it."""
BINS = [0.0, 1e-9, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1 - 1e-9, 1.0001]
BIN_LABELS = ["0", "(0,.1)", "[.1,.2)", "[.2,.3)", "[.3,.4)", "[.4,.5)", "[.5,.6)", "[.6,.7)", "[.7,.8)",
              "[.8,.9)", "[.9,1)", "1"]


def _sender_loss_simulator(q: float, seed: int) -> type:
    """A ``Simulator`` whose application data multicasts are each lost at the
    sender with probability ``q`` (no receiver gets that copy; everything else,
    retransmissions and gossip included, goes through the scenario's network)."""
    from sgcs.sim.simulator import Simulator

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


def claim_fd_sim(keep: Path) -> dict[str, Any]:
    """Claim 1 in the whole node: heartbeat receives per node per gossip interval
    (net buckets of 0.1 s, after t=10 s), all nodes started together vs half of
    them joining 3.05 s late by merge."""
    import pyarrow.parquet as pq
    import sgcs.sim.run as sim_run
    from sgcs.sim.scenario import load_scenario

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


def claim_suspicions_sim(plan: Plan, keep: Path) -> list[dict[str, Any]]:
    """Claim 3 cross-check with the whole node (simulator, claims-fd-64.toml)."""
    import tomllib

    import pyarrow.parquet as pq
    import sgcs.sim.run as sim_run
    from sgcs.sim.scenario import build_scenario

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
    from sgcs.sim.scenario import load_scenario

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
    import sgcs.sim.run as sim_run

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
                           "(benchmarks/claims_sim.py overrides it)")
    return summary.to_json(), list(cls.dropped) if cls is not None else []
