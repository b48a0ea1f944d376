"""How fast the members exclude a host that vanishes, with no ICMP to help.

Each run builds ``--members`` hosts in network namespaces on a bridge
(``tests/netns.py``), starts one ``tests/membership_peer.py`` member per host
(as ``benchmarks/nemesis.py`` does), waits until all share one view, then
plays one scenario on the last member and measures from that instant:

* ``silent``: its host's link goes down (``ip link set eth0 down`` in its
  namespace): its process runs on, but nothing it sends leaves and nothing
  reaches it, and no "port unreachable" comes back, as when a machine loses
  power or its cable. Figure: seconds until each survivor installed a view
  without it (the slowest survivor is the run's figure);
* ``kill``: kill -9 of its process; its host stays up, so the kernel answers
  with ICMP "port unreachable" (the loopback figure's conditions);
* ``pause``: SIGSTOP for ``--pause`` s, then SIGCONT; it must not be
  excluded (a view without it within ``--watch`` s counts as a false exclusion).

Prints one line per run and the medians and maxima. Needs root.

    python benchmarks/silent_host.py --runs 10 --scenarios silent,kill,pause
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from _nemesis import FORM_TIMEOUT, POLL, Members, netns  # noqa: E402

EXCLUDE_WITHIN = 15.0
"""Seconds a survivor may take to exclude the victim before the run counts as a miss."""


def wait_agreed(members: Members, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if members.agreed(time.time()):
            return True
        time.sleep(POLL)
    return False


def excluded_after(members: Members, victim: int, since: float, until: float) -> dict[int, float | None]:
    """Per survivor: seconds from ``since`` to its first view without ``victim``."""
    out: dict[int, float | None] = {}
    for member in members.ids:
        if member == victim:
            continue
        views = [v for v in members.current[member].views() if since <= v["t"] <= until
                 and victim not in v["members"]]
        out[member] = round(views[0]["t"] - since, 3) if views else None
    return out


def one_run(scenario: str, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    victim = args.members
    with netns.hosts(args.members) as hosts:
        members = Members(hosts, workdir, "fifo", args.rate, lifetime=FORM_TIMEOUT + EXCLUDE_WITHIN + 60)
        try:
            for member in members.ids:
                members.start(member)
            if not wait_agreed(members, FORM_TIMEOUT):
                return {"scenario": scenario, "error": f"no common view within {FORM_TIMEOUT:g} s"}
            time.sleep(1.0)  # a second of steady traffic and heartbeats first
            at = time.time()
            if scenario == "silent":
                subprocess.run([*hosts.prefix(victim - 1), "ip", "link", "set", "eth0", "down"], check=True)
            elif scenario == "kill":
                members.kill(victim)
            else:
                members.pause(victim)
                time.sleep(args.pause)
                members.resume(victim)
            watch = args.watch if scenario == "pause" else EXCLUDE_WITHIN
            deadline = time.monotonic() + watch
            while time.monotonic() < deadline:
                found = excluded_after(members, victim, at, time.time())
                if scenario != "pause" and all(v is not None for v in found.values()):
                    break
                time.sleep(POLL)
            found = excluded_after(members, victim, at, time.time())
        finally:
            members.kill_all()
    if scenario == "pause":
        return {"scenario": scenario, "excluded": any(v is not None for v in found.values()), "survivors": found}
    slowest = None if any(v is None for v in found.values()) else max(v for v in found.values() if v is not None)
    return {"scenario": scenario, "slowest": slowest, "survivors": found}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--members", type=int, default=3)
    parser.add_argument("--rate", type=float, default=5.0, help="multicasts per second per member")
    parser.add_argument("--scenarios", default="silent,kill,pause")
    parser.add_argument("--pause", type=float, default=1.0, help="seconds of SIGSTOP in the pause scenario")
    parser.add_argument("--watch", type=float, default=5.0, help="seconds watched after a pause")
    parser.add_argument("--json", type=Path, help="write every run here")
    args = parser.parse_args(argv)
    problem = netns.unavailable()
    if problem:
        print(f"silent_host: {problem}", file=sys.stderr)
        return 2
    results: list[dict[str, Any]] = []
    scenarios = args.scenarios.split(",")
    with tempfile.TemporaryDirectory(prefix="sgcs-silent-") as tmp:
        for run in range(1, args.runs + 1):
            for scenario in scenarios:  # alternated: a slow phase of the machine lands on every scenario
                workdir = Path(tmp) / f"{scenario}-{run}"
                workdir.mkdir()
                result = one_run(scenario, args, workdir) | {"run": run}
                results.append(result)
                print(json.dumps(result), flush=True)
    for scenario in scenarios:
        mine = [r for r in results if r["scenario"] == scenario and "error" not in r]
        if scenario == "pause":
            print(f"pause {args.pause:g} s: {sum(r['excluded'] for r in mine)} false exclusions in {len(mine)} runs")
            continue
        times = [r["slowest"] for r in mine if r["slowest"] is not None]
        missed = len(mine) - len(times)
        if times:
            print(f"{scenario}: every survivor's new view after median {statistics.median(times):.2f} s, "
                  f"max {max(times):.2f} s over {len(times)} runs; {missed} missed")
        else:
            print(f"{scenario}: no run excluded the victim; {missed} missed")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
