"""Simulator speed: node-seconds per CPU second and per wall second, alternating
checkouts or settings, medians of several rounds.

Usage::

    python benchmarks/sim_speed.py SCENARIO --nodes N --duration S [--rounds 3]
        [--root PATH ...] [--set field=value ...] [--variant "field=value ..." ...] [--workers W]

Each configuration (every ``--root``, a checkout with its own compiled build,
times every ``--variant``, a set of ``[protocol]`` overrides) runs in a fresh
interpreter with that checkout first on ``sys.path``; the configurations run
in turn, round after round, so a change in the machine's load falls on all of
them alike. CPU seconds (user + system of the simulating process, start-up and
trace writing included) are far less disturbed by other jobs than wall time:
on a shared machine compare those. With ``--workers`` (a parallel run,
``sgcs.sim.parallel``) CPU seconds include the workers', and the peak RSS
is their sum; a checkout without ``--workers`` support fails the run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import json, resource, sys, tempfile, tomllib
root, scenario, nodes, duration, overrides, workers = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), json.loads(sys.argv[5]), int(sys.argv[6])
sys.path.insert(0, root)
import sgcs.sim.run as run
from sgcs.sim.scenario import build_scenario
import sgcs._compiled as compiled
raw = tomllib.loads(open(scenario).read())
raw["nodes"], raw["duration"] = nodes, duration
for key, value in overrides.items():
    if key == "order":
        raw["groups"][0]["order"] = value
    else:
        raw.setdefault("protocol", {})[key] = value
with tempfile.TemporaryDirectory() as out:
    s = run.simulate(build_scenario(raw, scenario), out, progress=False, **({"workers": workers} if workers > 1 else {}))
ru, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
cpu = ru.ru_utime + ru.ru_stime + kids.ru_utime + kids.ru_stime
rss = s.peak_rss_bytes / 1e9 if workers > 1 else ru.ru_maxrss / 1e6
print(json.dumps({"wall": s.wall_seconds, "cpu": cpu, "rss_gb": rss,
                  "datagrams": s.datagrams, "peak_buffered": s.peak_buffered, "reliability": s.reliability,
                  "mode": compiled.MODE}))
"""


def _value(text: str) -> object:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _overrides(text: str) -> dict[str, object]:
    pairs = [item.split("=", 1) for item in text.split()]
    return {key: _value(value) for key, value in pairs}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("scenario")
    parser.add_argument("--nodes", type=int, required=True)
    parser.add_argument("--duration", type=float, required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--root", action="append", default=[], help="a checkout to run (default: this one)")
    parser.add_argument("--variant", action="append", default=[], help='"field=value ..." overrides')
    parser.add_argument("--workers", type=int, default=1, help="processes per run (sgcs.sim.parallel)")
    args = parser.parse_args(argv)
    roots = args.root or [str(ROOT)]
    variants = args.variant or [""]
    scenario = str(Path(args.scenario).resolve())
    results: dict[tuple[str, str], list[dict]] = {(r, v): [] for r in roots for v in variants}
    for round_ in range(args.rounds):
        for root, variant in results:
            done = subprocess.run([sys.executable, "-c", CHILD, root, scenario, str(args.nodes), str(args.duration),
                                   json.dumps(_overrides(variant)), str(args.workers)],
                                  capture_output=True, text=True, check=True)
            result = json.loads(done.stdout.strip().splitlines()[-1])
            results[(root, variant)].append(result)
            print(f"round {round_ + 1} {root} {variant or '(defaults)'}: {json.dumps(result)}", flush=True)
    node_seconds = args.nodes * args.duration
    print("\n| checkout | overrides | node-s per CPU s (median, all) | node-s per wall s (median) | datagrams | "
          "peak buffer | peak RSS GB |\n|---|---|---|---:|---:|---:|---:|")
    for (root, variant), runs in results.items():
        per_cpu = [node_seconds / r["cpu"] for r in runs]
        per_wall = [node_seconds / r["wall"] for r in runs]
        print(f"| {root} ({runs[0]['mode']}) | {variant or '-'} | {statistics.median(per_cpu):.0f} "
              f"({', '.join(f'{x:.0f}' for x in per_cpu)}) | {statistics.median(per_wall):.0f} | "
              f"{runs[0]['datagrams']:,} | {runs[0]['peak_buffered']} | {max(r['rss_gb'] for r in runs):.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
