"""Heartbeat bytes per member per second against N, for each heartbeat form,
and crash detection and false suspicions at N = 256 with 5% loss.

Usage::

    python benchmarks/heartbeat_bytes.py [--sizes 16,64,256,1024,4096] [--seconds 10] [--seeds 21,22,23]
        [--forms roster,pairs,ring]

Part 1 runs the simulator with N nodes in one FIFO group (1 message a second,
so heartbeats are nearly all that flows), no loss, for ``--seconds``, once per
``Config.heartbeat`` form (``roster``: the whole table, 2 bytes a member;
``pairs``: the whole table, 10 bytes a member; ``ring``: ceil(log2 N) + 1
counters of 10 bytes, the sender's neighbourhood), and
reads the heartbeat bytes sent (datagram sizes, header and MAC included) from
the trace's ``net`` table after a 3 s warm-up. The exponent is the slope of
log(bytes per member per second) against log N (least squares).

Part 2 runs ``simulations/scenarios/membership-crash-256.toml`` (256 nodes, 5%
loss, node 100 crashes at t = 10 s) per form and seed and reports, through
``benchmarks/membership.py``, the first suspicion, the exclusion time by every
survivor (median, max), suspicions in all, and live members excluded.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import tomllib
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import pyarrow.parquet as pq  # noqa: E402

import sgcs.sim.run as sim_run  # noqa: E402
from benchmarks.membership import measure  # noqa: E402
from sgcs.sim.scenario import build_scenario  # noqa: E402

FORMS = ("roster", "pairs", "ring")
WARM_UP = 3.0
CRASH_SCENARIO = ROOT / "simulations" / "scenarios" / "membership-crash-256.toml"


def heartbeat_rate(n: int, form: str, seconds: float, work: Path) -> tuple[float, float]:
    """Heartbeat bytes per member per second after the warm-up, and the wall seconds of the run."""
    scenario = build_scenario({
        "seed": 5, "nodes": n, "duration": seconds,
        "network": {"latency_ms": {"median": 1.0, "sigma": 0.5}, "loss": 0.0},
        "protocol": {"heartbeat": form, "max_members": max(n, 4_096)},
        "groups": [{"name": "g", "order": "fifo", "members": "all", "rate": 1.0, "size": 64}],
    })
    run = work / f"rate-{form}-{n}"
    started = time.perf_counter()
    sim_run.simulate(scenario, run, progress=False)
    wall = time.perf_counter() - started
    net = pq.read_table(run / "net", columns=["t", "msg_type", "sent_bytes"]).to_pandas()
    beats = net[(net["msg_type"] == "heartbeat") & (net["t"] >= WARM_UP - 1e-9)]
    return float(beats["sent_bytes"].sum()) / (n * (seconds - WARM_UP)), wall


def crash_run(form: str, seed: int, work: Path) -> dict[str, Any]:
    raw = tomllib.loads(CRASH_SCENARIO.read_text())
    raw["seed"] = seed
    raw.setdefault("protocol", {})["heartbeat"] = form
    run = work / f"crash-{form}-{seed}"
    sim_run.simulate(build_scenario(raw, str(CRASH_SCENARIO)), run, progress=False)
    result = measure(str(run))
    (crash,) = result["crashes"]
    return {"first_suspicion_s": crash["first_suspicion_s"], "exclusion_median_s": crash["exclusion_median_s"],
            "exclusion_max_s": crash["exclusion_max_s"], "never_excluded": crash["never_excluded"],
            "suspects": result["false_positives"]["suspects"],
            "live_exclusions": result["false_positives"]["live_exclusions"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="16,64,256,1024,4096")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--seeds", default="21,22,23")
    parser.add_argument("--skip-crash", action="store_true")
    parser.add_argument("--forms", default=",".join(FORMS), help="Config.heartbeat forms to measure")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    forms = tuple(args.forms.split(","))
    unknown = [form for form in forms if form not in FORMS]
    if unknown:
        parser.error(f"unknown form {unknown[0]!r}: choose from {', '.join(FORMS)}")
    with tempfile.TemporaryDirectory(prefix="sgcs-heartbeat-") as tmp:
        work = Path(tmp)
        print("| N | " + " | ".join(f"{form}: bytes/member/s (wall s)" for form in forms) + " |")
        print("|---:|" + "---:|" * len(forms))
        rates: dict[str, list[float]] = {form: [] for form in forms}
        for n in sizes:
            cells = []
            for form in forms:
                rate, wall = heartbeat_rate(n, form, args.seconds, work)
                rates[form].append(rate)
                cells.append(f"{rate:,.0f} ({wall:.0f})")
            print(f"| {n:,} | " + " | ".join(cells) + " |", flush=True)
        for form in forms:
            slope = np.polyfit(np.log(sizes), np.log(rates[form]), 1)[0] if len(sizes) > 1 else float("nan")
            print(f"{form}: bytes per member per second ~ N^{slope:.2f}")
        if args.skip_crash:
            return 0
        print("\n| form | seed | first suspicion s | exclusion median / max s | never excluded | suspicions | "
              "live exclusions |\n|---|---:|---:|---|---:|---:|---:|")
        for form in forms:
            rows = [crash_run(form, int(seed), work) for seed in args.seeds.split(",")]
            for seed, r in zip(args.seeds.split(","), rows):
                print(f"| {form} | {seed} | {r['first_suspicion_s']:.2f} | {r['exclusion_median_s']:.2f} / "
                      f"{r['exclusion_max_s']:.2f} | {r['never_excluded']} | {r['suspects']} | "
                      f"{r['live_exclusions']} |", flush=True)
            medians = [r["exclusion_median_s"] for r in rows]
            print(f"| {form} | median | | {statistics.median(medians):.2f} | | "
                  f"{statistics.median(r['suspects'] for r in rows):.0f} | |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
