"""Deep exhaustive exploration of the real nodes: the command line of ``tests/exhaustive.py``.

Explores every interleaving of a small group (``--members`` started together,
``--joiners`` that join later, ``--sends`` multicasts per member) to
``--depth`` steps, with one loss, one duplicate, one crash, one restart, one
leave and one partition per path by default (``--losses`` ... change the
budgets), checking invariants 1-8 in every state and the quiescent ones
(6, 8, liveness) after settling each state at the depth bound. The theory of
operation (steps, fault budgets, the fingerprints, the checks) is the
docstring of ``tests/exhaustive.py``; ``tests/test_exhaustive.py`` runs a
small bound in CI.

Prints the states executed, the distinct states, the depth reached, the wall
time and every violation kept (the first ``--examples`` of each invariant,
shortest first) with the path of steps that replays it:

    .venv/bin/python benchmarks/exhaustive.py --depth 4 --order total --minutes 30
    .venv/bin/python benchmarks/exhaustive.py --depth 5 --calm 0.01,0.1 --workers 2 --minutes 60
    .venv/bin/python benchmarks/exhaustive.py --replay "send 1; crash 1; settle"

``--minutes`` stops the search when the time is spent (the report then says
INCOMPLETE and gives the states per depth reached). ``--workers N`` splits
the states after the first ``--split`` steps among N processes, each with
its own table of states seen (a state reachable from two shares is explored
by both: the sum of distinct states is an upper bound). Exit status 1 when a
violation was found.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from sgcs.config import Order  # noqa: E402

import exhaustive as ex  # noqa: E402  (tests/exhaustive.py)


def config_of(args: argparse.Namespace) -> ex.ExploreConfig:
    budget = ex.Budget(losses=args.losses, duplicates=args.duplicates, crashes=args.crashes, restarts=args.restarts,
                       leaves=args.leaves, partitions=args.partitions)
    calm = tuple(float(c) for c in args.calm.split(",") if c) if args.calm else ()
    return ex.ExploreConfig(
        members=args.members, joiners=args.joiners, sends=args.sends, joiner_sends=args.joiner_sends,
        order=Order.parse(args.order), depth=args.depth, budget=budget, calm=calm, search=args.search,
        single_steps=not args.macro_only,
        settle=args.settle, max_states=args.max_states, max_examples=args.examples,
        max_seconds=args.minutes * 60 if args.minutes else None, branching=args.branching,
        outcome_after_leave=args.outcome_after_leave, partial_views=args.partial_views)


def progress(report: ex.Report) -> None:
    """One line a minute: a long run shows how far it got even if it is stopped."""
    print(f"  [{os.getpid()}] {report.wall_seconds / 60:.1f} min: states {report.states:,}, distinct "
          f"{report.distinct:,}, per depth {report.per_depth}, settled {report.settled:,}, violations "
          f"{dict(sorted(report.counts.items()))}", flush=True)
    for violation in report.violations[len(getattr(progress, "shown", ())):]:
        print(f"  [{os.getpid()}] {violation}", flush=True)
    progress.shown = list(report.violations)  # type: ignore[attr-defined]


def _explore_share(cfg: ex.ExploreConfig, prefixes: list[tuple[ex.Step, ...]]) -> ex.Report:
    return ex.explore(cfg, prefixes=prefixes, progress=progress)


def explore_parallel(cfg: ex.ExploreConfig, workers: int, split: int) -> ex.Report:
    """The states after ``split`` steps, dealt round robin to ``workers`` processes."""
    started = time.perf_counter()
    prefixes = ex.frontier(cfg, split)
    shares = [prefixes[i::workers] for i in range(workers)]
    with ProcessPoolExecutor(workers) as pool:
        reports = list(pool.map(_explore_share, [cfg] * workers, shares))
    merged = ex.merge_reports(cfg, reports)
    merged.wall_seconds = time.perf_counter() - started
    return merged


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--depth", type=int, default=4, help="steps per path (default 4)")
    parser.add_argument("--order", default="total", choices=[o.value for o in Order])
    parser.add_argument("--members", type=int, default=3)
    parser.add_argument("--joiners", type=int, default=1)
    parser.add_argument("--sends", type=int, default=1, help="multicasts per member (default 1)")
    parser.add_argument("--joiner-sends", action="store_true", help="joiners multicast too")
    parser.add_argument("--minutes", type=float, default=0.0, help="time budget (0: none)")
    parser.add_argument("--max-states", type=int, default=None)
    parser.add_argument("--search", default="bfs", choices=["bfs", "dfs"])
    parser.add_argument("--settle", default="leaves", choices=["leaves", "all", "none"])
    parser.add_argument("--calm", default="", help="durations of the calm macro step, e.g. 0.01,0.1 (default: none)")
    parser.add_argument("--macro-only", action="store_true",
                        help="no single deliveries or timers: only --calm steps move the network (deeper runs)")
    parser.add_argument("--branching", default="auto", choices=["auto", "pickle", "deepcopy", "replay"])
    parser.add_argument("--examples", type=int, default=3, help="violations kept per invariant")
    parser.add_argument("--outcome-after-leave", action="store_true",
                        help="hold members that left to invariant 8 too")
    parser.add_argument("--partial-views", action="store_true",
                        help="check P too: every listed member that neither crashed nor left installs the view")
    for kind in ("losses", "duplicates", "crashes", "restarts", "leaves", "partitions"):
        parser.add_argument(f"--{kind}", type=int, default=1, help=f"budget of {kind} per path (default 1)")
    parser.add_argument("--workers", type=int, default=1, help="processes (default 1)")
    parser.add_argument("--split", type=int, default=1, help="with --workers: steps before the split (default 1)")
    parser.add_argument("--replay", default="", help="replay one path (as printed) and print what it finds")
    args = parser.parse_args(argv)
    cfg = config_of(args)
    if args.macro_only and not cfg.calm:
        parser.error("--macro-only needs --calm durations")
    if args.replay:
        world, found = ex.replay(cfg, args.replay)
        views = {n: node.view(cfg.group) for n, node in world.nodes().items() if world.in_group.get(n)}
        print(f"replayed {len(ex.parse_path(args.replay))} steps; views {views}")
        for log in world.logs.values():
            print(f"  node {log.name}: views {log.views}, delivered {log.delivered}, "
                  f"own outcomes {log.outcomes}{', ' + log.gone if log.gone else ''}")
        for violation in found:
            print(f"  {violation}")
        print(f"violations: {len(found)}")
        return 1 if found else 0
    if args.workers > 1:
        report = explore_parallel(cfg, args.workers, args.split)
    else:
        report = ex.explore(cfg, progress=progress)
    print(report.summary(), flush=True)
    return 1 if report.counts else 0


if __name__ == "__main__":
    sys.exit(main())
