"""The seed paper's claims, reproduced with our own protocol code.

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
This module holds the CLI, the orchestration of the claims and the rendering
of the tables; the sizes of a run (``Plan``: ``QUICK``, ``FULL``) are in
``benchmarks/claims_plan.py``. The measuring is done elsewhere:

* ``benchmarks/claims_fd.py``: claims 1 to 3 on the real ``FailureDetector``
  objects, driven by a discrete-event round harness (``FdHarness``, ``run_fd``)
  in three timing models: ``lockstep``, ``desync`` and ``random``;
* ``benchmarks/claims_sim.py``: the whole node in the simulator, as a
  cross-check of claims 1 and 3 and for the claim-4 reliability histograms.

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
4. Bimodal reliability of plain gossip (Bimodal Multicast): for each message,
   the fraction of the group's other members that delivered it within D
   seconds of its send, for several D and at the end of the run (see
   ``claims_sim.claim_bimodal``).
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Sequence

if __name__ == "__main__":  # run as a script: the repository (benchmarks, simulations) goes on the path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.claims_fd import GOSSIP, LATENCY, dimensions, run_fd  # noqa: E402
from benchmarks.claims_plan import FULL, QUICK, Plan  # noqa: E402
from benchmarks.claims_sim import BIN_LABELS, claim_bimodal, claim_fd_sim, claim_suspicions_sim  # noqa: E402
from sgcs.wire import MAX_HEARTBEAT_ENTRIES  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


# ---------------------------------------------------------------------- the claims


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


EXACT_LOG2_NS = (24, 100)
"""N (not powers of 2) run with T_suspect = log2 N * T_gossip exactly, the paper's bound not rounded up."""
QUIET_N = 64
"""Every member but node 0 multicasts once per round: how often is the quiet node 0 suspected?"""


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
    raise SystemExit(main())
