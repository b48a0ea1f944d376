"""The ``sgcs`` command line.

Theory of operation
-------------------
One ``argparse`` sub-command per entry of ``COMMANDS``: a function that adds
the sub-command's arguments and one that runs it and returns the exit code.
Heavy imports (the simulator, numpy, pyarrow) happen inside the runner, so
``sgcs --version`` and ``--help`` stay instant.

Exit codes: 0 success; 2 bad input (any ``UsageError``, bad arguments, or an
``OSError`` on a path or resource the user named),
reported as one line on stderr without a traceback; 1 a bug, or a failed
``sgcs bench`` run (a member failed or timed out), also in one line. A bug inside a
simulation prints the seed and the exact command that replays it, then the
traceback.
"""

from __future__ import annotations

import argparse
import sys
from contextlib import contextmanager
from typing import Callable, Iterator, NoReturn, Sequence

from .. import __version__, _compiled
from ..errors import UsageError

EXIT_OK, EXIT_BUG, EXIT_USAGE = 0, 1, 2


class _Parser(argparse.ArgumentParser):
    """Reports argument errors in one line, like every other usage error."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


OPTIONAL = {"pyspark": "analysis", "matplotlib": "analysis", "pyarrow": "sim", "pandas": "sim",
            "prometheus_client": "metrics"}
"""Libraries of an extra (pyproject.toml): a command that needs a missing one says which extra brings it."""


@contextmanager
def _extra_needed() -> Iterator[None]:
    try:
        yield
    except ModuleNotFoundError as exc:
        top = (exc.name or "").split(".")[0]
        if top not in OPTIONAL:
            raise
        raise UsageError(f"this command needs {top}, which is not installed; run: pip install "
                         f"'sgcs[{OPTIONAL[top]}]'") from None


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
    parser.add_argument("--workers", type=int, default=1, metavar="W",
                        help="split the run over W processes, one per core (default 1; needs the scenario's "
                             "network.latency_ms.min > 0; the trace is the same)")


def _run_simulate(args: argparse.Namespace) -> int:
    # The simulator installs as sgcs.sim (the repository's simulations/ folder).
    with _extra_needed():
        from sgcs.sim.run import simulate
        from sgcs.sim.scenario import load_scenario
        from sgcs.sim.simulator import SimulationBug

    scenario = load_scenario(args.scenario, seed=args.seed, nodes=args.nodes, duration=args.duration)
    try:
        summary = simulate(scenario, args.out, net_bucket=args.net_bucket, progress=args.progress,
                           workers=args.workers)
    except SimulationBug as bug:
        print(f"sgcs simulate: BUG: {bug}", file=sys.stderr)
        print(f"sgcs simulate: replay with: {scenario.replay_command(args.out)}", file=sys.stderr)
        raise
    print(summary.format())
    return EXIT_OK


def _add_bench(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--members", type=int, default=4, metavar="N", help="member processes (default 4)")
    parser.add_argument("--messages", type=int, default=20_000, metavar="M",
                        help="messages each member multicasts (default 20000)")
    parser.add_argument("--size", type=int, default=1_000, metavar="S",
                        help="payload bytes per message, at least 8 (default 1000)")
    parser.add_argument("--order", default="fifo", choices=("fifo", "causal", "total", "safe"),
                        help="the group's delivery order (default fifo)")
    parser.add_argument("--rate", type=float, metavar="R",
                        help="messages per second per member, paced (default: as fast as flow control allows)")
    parser.add_argument("--max-datagram", type=int, default=None, metavar="B",
                        help="Config.max_datagram in bytes (default: the Config default)")
    parser.add_argument("--secret", help="group secret, at least 16 bytes (default: random for this run)")
    parser.add_argument("--encrypt", action="store_true",
                        help="encrypt datagram bodies with AES-256-GCM (Config.encrypt) to measure its cost")
    parser.add_argument("--timeout", type=float, metavar="S",
                        help="seconds for the whole run (default: 300 + 5 ms per member per message)")
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=JSON", dest="settings",
                        help="a protocol Config field for every member, e.g. --set ack_interval=0.002 (repeatable)")
    parser.add_argument("--json", action="store_true",
                        help="print a JSON report on stdout (the one-line summary goes to stderr)")
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                        help="show a progress bar (default: only when stderr is a terminal)")


def _run_bench(args: argparse.Namespace) -> int:
    import json

    from .bench import DEFAULT_MAX_DATAGRAM, BenchError, BenchOptions, parse_settings, run_bench

    options = BenchOptions(
        members=args.members, messages=args.messages, size=args.size, order=args.order, rate=args.rate,
        max_datagram=DEFAULT_MAX_DATAGRAM if args.max_datagram is None else args.max_datagram,
        secret=None if args.secret is None else args.secret.encode(), timeout=args.timeout, encrypt=args.encrypt,
        settings=parse_settings(args.settings),
    )
    try:
        report = run_bench(options, progress=args.progress)
    except BenchError as exc:
        print(f"sgcs bench: error: {exc}", file=sys.stderr)
        return EXIT_BUG
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
        print(report.summary(), file=sys.stderr)
    else:
        print(report.summary())
    return EXIT_OK


def _add_sweep(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("sweep", metavar="SWEEP.toml", help="sweep file: a base scenario and a [grid] of values")
    parser.add_argument("--out", required=True, metavar="DIR",
                        help="directory for runs/<point>/, report.md, metrics.json and the plots")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--master", metavar="URL", help="Spark master URL (default: local mode)")
    where.add_argument("--parallel", type=int, metavar="K",
                       help="simulations at once in local mode, local[K] (default: one per core)")
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                        help="show a progress bar (default: only when stderr is a terminal)")


def _run_sweep(args: argparse.Namespace) -> int:
    with _extra_needed():
        from sgcs.analysis.sweep import run_sweep

        return run_sweep(args.sweep, args.out, master=args.master, parallel=args.parallel, progress=args.progress)


def _add_analyze(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("runs", nargs="+", metavar="RUN", help="trace directory written by sgcs simulate --out")
    parser.add_argument("--master", metavar="URL", help="Spark master URL (default: local[*])")
    parser.add_argument("--out", metavar="DIR",
                        help="report directory (default: RUN/report; required with several runs)")
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                        help="show a progress bar (default: only when stderr is a terminal)")


def _run_analyze(args: argparse.Namespace) -> int:
    with _extra_needed():  # pyspark is imported once the runs are read
        from sgcs.analysis.command import run_analyze

        return run_analyze(args.runs, args.out, args.master, args.progress)


def _add_chat(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("group", metavar="GROUP", help="the group to join (found by discovery)")
    parser.add_argument("--name", help="display name shown to the others (default: your user name)")
    parser.add_argument("--order", default="total", choices=("fifo", "causal", "total", "safe"),
                        help="the group's delivery order (default total: everyone sees one conversation)")
    _add_network(parser)
    parser.add_argument("--trace", metavar="DIR", help="record trace schema 1 into DIR (for sgcs analyze)")
    parser.epilog = ("Once running, type a line to send it to the group; /to ID-OR-NAME TEXT sends to one member, "
                     "/who lists the view, /quit or end of input leaves gracefully.")


def _add_network(parser: argparse.ArgumentParser) -> None:
    """The secret and network options of a member that joins by discovery (chat, stats)."""
    parser.add_argument("--secret", help="group secret, at least 16 bytes (default: $SGCS_SECRET, else a public "
                                         "demo secret, with a warning)")
    parser.add_argument("--bind", metavar="ADDR", help="this machine's address on the network the members share "
                                                       "(default 127.0.0.1: this machine only; docs/multi-host.md)")
    parser.add_argument("--port", type=int, metavar="P", help="unicast UDP port (default: a free one)")
    parser.add_argument("--ttl", type=int, metavar="N", help="multicast hops (default 1: the local link)")
    parser.add_argument("--multicast-group", metavar="A", help="IPv4 multicast address (default 239.255.71.17)")
    parser.add_argument("--multicast-port", type=int, metavar="P", help="multicast UDP port (default 47017)")
    parser.add_argument("--peers", metavar="HOST:PORT,...",
                        help="no IP multicast: reach these members by unicast instead")


def _network(args: argparse.Namespace) -> dict[str, object]:
    """The Config fields that ``_add_network``'s options gave."""
    given = {"bind_host": args.bind, "port": args.port, "multicast_ttl": args.ttl,
             "multicast_group": args.multicast_group, "multicast_port": args.multicast_port}
    network: dict[str, object] = {key: value for key, value in given.items() if value is not None}
    if args.peers is not None:
        network.update(use_multicast=False, peers=[p.strip() for p in args.peers.split(",") if p.strip()])
    return network


def _run_chat(args: argparse.Namespace) -> int:
    from .chat import run_command

    return run_command(args.name, args.group, args.order, args.secret, _network(args), args.trace)


def _add_stats(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("group", metavar="GROUP", help="the group to join as a quiet member (found by discovery)")
    parser.add_argument("--name", default="stats", help="this member's name, the metrics' node label (default stats)")
    parser.add_argument("--order", default="total", choices=("fifo", "causal", "total", "safe"),
                        help="the group's delivery order, as its members use it (default total)")
    _add_network(parser)
    parser.add_argument("--metrics-port", type=int, default=9464, metavar="P",
                        help="serve http://HOST:P/metrics for Prometheus (default 9464; 0: a free port)")
    parser.add_argument("--metrics-host", default="127.0.0.1", metavar="HOST",
                        help="address to serve on (default 127.0.0.1; 0.0.0.0 lets other machines scrape)")
    parser.add_argument("--print", type=float, default=None, metavar="S", dest="print_after",
                        help="instead of serving: wait S seconds, print the metrics once and leave")


def _run_stats(args: argparse.Namespace) -> int:
    from .stats import run_command

    return run_command(args.name, args.group, args.order, args.secret, _network(args), args.metrics_port,
                       args.metrics_host, args.print_after)


def _add_demo(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--members", type=int, default=4, metavar="N", help="member processes, 2 to 16 (default 4)")
    parser.add_argument("--duration", type=float, default=12.0, metavar="S", help="seconds to run (default 12)")
    parser.add_argument("--kill-at", type=float, metavar="S",
                        help="seconds into the run to SIGKILL a member chosen at random "
                             "(default: half the duration; 0: never)")
    parser.add_argument("--rate", type=float, default=20.0, metavar="R",
                        help="messages per second each member multicasts (default 20)")
    parser.add_argument("--order", default="total", choices=("fifo", "causal", "total", "safe"),
                        help="the group's delivery order (default total)")
    parser.add_argument("--trace", metavar="DIR",
                        help="every member records trace schema 1 into DIR, new or empty (for sgcs analyze)")
    parser.add_argument("--plain", action="store_true",
                        help="plain lines instead of the live table (the default when stdout is not a terminal)")


def _run_demo(args: argparse.Namespace) -> int:
    from .demo import DemoOptions, run_demo

    report = run_demo(DemoOptions(members=args.members, duration=args.duration, kill_at=args.kill_at,
                                  rate=args.rate, order=args.order, trace=args.trace, plain=args.plain))
    print(report.summary)
    if report.failure is not None:
        print(f"sgcs demo: error: {report.failure}", file=sys.stderr)
        return EXIT_BUG
    return EXIT_OK


def _add_queue(parser: argparse.ArgumentParser) -> None:
    from ..services.queues.cli import add_arguments

    add_arguments(parser)


def _run_queue(args: argparse.Namespace) -> int:
    from ..services.queues.cli import run

    return run(args)


def _add_keygen(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bytes", type=int, default=32, metavar="N",
                        help="random bytes, printed as 2N hex digits (default 32; at least 16)")


def _run_keygen(args: argparse.Namespace) -> int:
    import secrets

    if not 16 <= args.bytes <= 1024:
        raise UsageError(f"--bytes must be from 16 to 1024, got {args.bytes}")
    print(secrets.token_hex(args.bytes))
    return EXIT_OK


Command = tuple[str, Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]]
COMMANDS: tuple[Command, ...] = (
    ("simulate", _add_simulate, _run_simulate),
    ("bench", _add_bench, _run_bench),
    ("sweep", _add_sweep, _run_sweep),
    ("analyze", _add_analyze, _run_analyze),
    ("chat", _add_chat, _run_chat),
    ("demo", _add_demo, _run_demo),
    ("stats", _add_stats, _run_stats),
    ("queue", _add_queue, _run_queue),
    ("keygen", _add_keygen, _run_keygen),
)
_HELP = {
    "simulate": "run a scenario in the deterministic simulator and write a trace directory",
    "bench": "measure throughput and latency of real member processes on loopback (like JGroups' JPerf)",
    "sweep": "run a grid of simulations as Spark tasks, then fit load and detection time against N",
    "analyze": "run the Spark jobs over trace directories; write report.md, metrics.json and plots",
    "chat": "an interactive member: type lines to multicast them, see deliveries and view changes",
    "queue": "queue put/get/ls/bind/unbind/purge on a durable queue store, or QUEUE@NODE through sgcs",
    "stats": "a quiet member of GROUP that serves its node's metrics for Prometheus, or prints them once",
    "keygen": "print a random group secret (hex) for Config.secret, --secret or $SGCS_SECRET",
    "demo": "a live local group: N member processes multicast, one is killed partway, the others change view",
}


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="sgcs", description="Scalable group communication: tools.")
    parser.add_argument("--version", action="version", version=f"sgcs {__version__}, {_compiled.describe()}")
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
    except OSError as exc:  # a path or resource the user gave: one line, not a traceback
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"sgcs {args.command}: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(f"sgcs {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
