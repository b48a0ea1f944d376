"""The ``sgcs`` command line.

Theory of operation
-------------------
One ``argparse`` sub-command per entry of ``COMMANDS``: a function that adds
the sub-command's arguments and one that runs it and returns the exit code.
Heavy imports (the simulator, numpy, pyarrow) happen inside the runner, so
``sgcs --version`` and ``--help`` stay instant.

Exit codes: 0 success; 2 bad input (any ``UsageError``, or bad arguments),
reported as one line on stderr without a traceback; 1 a bug. A bug inside a
simulation prints the seed and the exact command that replays it, then the
traceback.
"""

from __future__ import annotations

import argparse
import sys
from typing import Callable, NoReturn, Sequence

from . import __version__
from .errors import UsageError

EXIT_OK, EXIT_BUG, EXIT_USAGE = 0, 1, 2


class _Parser(argparse.ArgumentParser):
    """Reports argument errors in one line, like every other usage error."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _add_simulate(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("scenario", nargs="?", default=None,
                        help="scenario TOML file (default: the embedded default experiment)")
    parser.add_argument("--out", required=True, metavar="RUN", help="trace directory to write")
    parser.add_argument("--seed", type=int, help="override the scenario's seed")
    parser.add_argument("--nodes", type=int, help="override the scenario's node count")
    parser.add_argument("--duration", type=float, metavar="S", help="override the simulated seconds")
    parser.add_argument("--net-bucket", type=float, default=1.0, metavar="S",
                        help="width of the net table's time buckets in seconds (default 1.0)")
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                        help="show a progress bar (default: only when stderr is a terminal)")


def _run_simulate(args: argparse.Namespace) -> int:
    # Submodules, not the package: an editable install made before
    # simulations/__init__.py existed maps "simulations" as a namespace.
    from simulations.run import simulate
    from simulations.scenario import load_scenario
    from simulations.simulator import SimulationBug

    scenario = load_scenario(args.scenario, seed=args.seed, nodes=args.nodes, duration=args.duration)
    try:
        summary = simulate(scenario, args.out, net_bucket=args.net_bucket, progress=args.progress)
    except SimulationBug as bug:
        print(f"sgcs simulate: BUG: {bug}", file=sys.stderr)
        print(f"sgcs simulate: replay with: {scenario.replay_command(args.out)}", file=sys.stderr)
        raise
    print(summary.format())
    return EXIT_OK


Command = tuple[str, Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]]
COMMANDS: tuple[Command, ...] = (
    ("simulate", _add_simulate, _run_simulate),
)
_HELP = {
    "simulate": "run a scenario in the deterministic simulator and write a trace directory",
}


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="sgcs", description="Scalable group communication: tools.")
    parser.add_argument("--version", action="version", version=f"sgcs {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    commands.required = True
    for name, add_arguments, run in COMMANDS:
        sub = commands.add_parser(name, help=_HELP.get(name), description=_HELP.get(name))
        add_arguments(sub)
        sub.set_defaults(run=run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.run(args))
    except UsageError as exc:
        print(f"sgcs {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(f"sgcs {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
