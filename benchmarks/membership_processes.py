"""Membership with real processes: how fast a crash is noticed, and whether
frozen members are excluded when (and only when) they should be.

Runs the scenarios of ``tests/test_membership_processes.py`` ``--runs`` times,
each on a fresh cluster of ``--size`` member processes on loopback:

* kill: SIGKILL one member; seconds until the last survivor installed the
  view without it (the target is under 1 s: the kernel's ICMP "port
  unreachable" for the dead port is the signal);
* short: SIGSTOP one member for ``--short-pause`` s; it must not be excluded;
* long: SIGSTOP one member for ``--long-pause`` s; it must be excluded, and
  readmitted after SIGCONT.

Prints one line per run and scenario, then the medians and maxima: the
figures for the membership protocol's liveness and exclusion times. Usage::

    .venv/bin/python benchmarks/membership_processes.py [--runs 5] [--set FIELD=VALUE ...]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from membership_peer import Cluster, converge, kill_one, long_pause, short_pause  # noqa: E402

CONVERGE_TIMEOUT = 15.0
KILL_TIMEOUT = 10.0
REJOIN_TIMEOUT = 15.0
VICTIM = 4


@dataclass
class Figures:
    """Everything measured over all runs; None where the deadline passed."""

    converge: list[float | None] = field(default_factory=list)
    kill_to_view: list[float | None] = field(default_factory=list)
    short_pause_excluded: list[bool] = field(default_factory=list)
    long_pause_excluded_after: list[float | None] = field(default_factory=list)
    long_pause_readmitted_after: list[float | None] = field(default_factory=list)


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--size", type=int, default=8, help="member processes per cluster")
    parser.add_argument("--rate", type=float, default=5.0, help="multicasts per second per member")
    parser.add_argument("--short-pause", type=float, default=1.0)
    parser.add_argument("--watch", type=float, default=4.0, help="seconds watched after the short pause")
    parser.add_argument("--long-pause", type=float, default=10.0)
    parser.add_argument("--scenarios", default="kill,short,long", help="comma-separated subset of kill,short,long")
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                        help="an sgcs.Config field for every member, e.g. --set gossip_interval=0.05")
    parser.add_argument("--json", type=Path, help="also write the raw figures here")
    parser.add_argument("--timeline", action="store_true", help="print the timeline of every failed scenario")
    return parser.parse_args(argv)


def run_kill(cluster: Cluster, args: argparse.Namespace, figures: Figures) -> str:
    took = kill_one(cluster, VICTIM, KILL_TIMEOUT)
    figures.kill_to_view.append(took)
    return f"kill -9 to last survivor's view: {_seconds(took)}"


def run_short(cluster: Cluster, args: argparse.Namespace, figures: Figures) -> str:
    outcome = short_pause(cluster, VICTIM, pause=args.short_pause, watch=args.watch)
    excluded = bool(outcome.wrongful_views)
    figures.short_pause_excluded.append(excluded)
    return f"stopped {args.short_pause:g} s: {'EXCLUDED (wrong)' if excluded else 'kept'}"


def run_long(cluster: Cluster, args: argparse.Namespace, figures: Figures) -> str:
    outcome = long_pause(cluster, VICTIM, pause=args.long_pause, rejoin_timeout=REJOIN_TIMEOUT)
    figures.long_pause_excluded_after.append(outcome.excluded_after)
    figures.long_pause_readmitted_after.append(outcome.readmitted_after)
    return (f"stopped {args.long_pause:g} s: excluded after {_seconds(outcome.excluded_after)}, "
            f"readmitted {_seconds(outcome.readmitted_after)} after SIGCONT")


SCENARIOS: dict[str, Callable[[Cluster, argparse.Namespace, Figures], str]] = {
    "kill": run_kill, "short": run_short, "long": run_long,
}


def run_once(name: str, args: argparse.Namespace, figures: Figures) -> bool:
    """One scenario on a fresh cluster; False if the cluster never converged."""
    with tempfile.TemporaryDirectory(prefix="sgcs-membership-") as workdir:
        with Cluster(args.size, Path(workdir), rate=args.rate, settings=tuple(args.set)) as cluster:
            took = converge(cluster, CONVERGE_TIMEOUT)
            figures.converge.append(took)
            if took is None:
                print(f"  {name:<5} the cluster did not converge within {CONVERGE_TIMEOUT} s", flush=True)
                if args.timeline:
                    print(cluster.timeline())
                return False
            line = SCENARIOS[name](cluster, args, figures)
            print(f"  {name:<5} converged in {took:.2f} s; {line}", flush=True)
            if args.timeline and ("None" in line or "not" in line or "wrong" in line):
                print(cluster.timeline())
    return True


def summary(figures: Figures, args: argparse.Namespace) -> list[str]:
    lines = [f"converge ({args.size} members): {_spread(figures.converge)}"]
    if figures.kill_to_view:
        lines.append(f"kill -9 to last survivor's view: {_spread(figures.kill_to_view)}")
    if figures.short_pause_excluded:
        wrong = sum(figures.short_pause_excluded)
        lines.append(f"stopped {args.short_pause:g} s: wrongly excluded in {wrong}/{len(figures.short_pause_excluded)} runs")
    if figures.long_pause_excluded_after:
        lines.append(f"stopped {args.long_pause:g} s: excluded after {_spread(figures.long_pause_excluded_after)}")
        lines.append(f"  readmitted after SIGCONT: {_spread(figures.long_pause_readmitted_after)}")
    return lines


def _spread(values: list[float | None]) -> str:
    """Median and max of the runs that met their deadline, and how many did."""
    done = [v for v in values if v is not None]
    if not done:
        return f"never (0/{len(values)} runs)"
    return f"median {statistics.median(done):.3f} s, max {max(done):.3f} s ({len(done)}/{len(values)} runs)"


def _seconds(value: float | None) -> str:
    return "not within the deadline" if value is None else f"{value:.3f} s"


def main() -> int:
    args = parse(sys.argv[1:])
    names = [name.strip() for name in args.scenarios.split(",") if name.strip()]
    unknown = [name for name in names if name not in SCENARIOS]
    if unknown or args.runs < 1:
        print(f"membership_processes: unknown scenario {unknown} or --runs < 1; use kill,short,long", file=sys.stderr)
        return 2
    figures = Figures()
    for run in range(1, args.runs + 1):
        print(f"run {run}/{args.runs}", flush=True)
        for name in names:
            run_once(name, args, figures)
    print("\n".join(["", *summary(figures, args)]))
    if args.json:
        args.json.write_text(json.dumps(figures.__dict__, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
