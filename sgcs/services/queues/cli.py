"""``sgcs queue``: put, get, ls (and bind, unbind, purge) on a queue store (docs/queues.md).

Theory of operation
-------------------
Local targets (``QUEUE``) work on the SQLite store file given by ``--store``
directly, with no network: the same ``QueueStore`` a queue manager opens (do
not run both on one file at once; SQLite would serialise them, but a running
manager's leases would be released by the CLI's open). Remote targets
(``QUEUE@NODE``) start an sgcs node and a short-lived queue manager on that
store (``--config`` for the node's Config TOML): ``put`` commits to the
transmission queue and then waits until NODE has acknowledged everything
(whatever is left goes out the next time a manager runs on the store);
``get`` receives with acknowledgement. Bulk operations show a progress bar on
stderr (``--progress``; default when stderr is a terminal).

Exit codes as every sgcs command: 0 done, 2 bad input (one line), 1 a remote
operation did not finish in ``--timeout``.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from pathlib import Path
from typing import Callable

from sgcs.config import SECRET_ENV, Config  # $SGCS_SECRET: a remote operation's secret without --config
from sgcs.errors import UsageError

from .manager import QueueManager, split_target
from .store import PRIORITIES, Message, QueueStore, Unbind

DEFAULT_STORE = "sgcs-queues.db"
BULK = 1_000
"""Messages per commit in bulk puts."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--store", default=os.environ.get("SGCS_QUEUE_STORE", DEFAULT_STORE), metavar="PATH",
                        help=f"the SQLite store file (default $SGCS_QUEUE_STORE or ./{DEFAULT_STORE})")
    parser.add_argument("--fsync", default="normal", choices=("full", "normal", "off"),
                        help="what a commit survives: full = power loss, normal/off = kill -9 (default normal)")
    sub = parser.add_subparsers(dest="queue_command", metavar="ACTION", parser_class=type(parser))
    sub.required = True
    put = sub.add_parser("put", help="send messages to QUEUE or QUEUE@NODE")
    put.add_argument("target", metavar="QUEUE[@NODE]")
    put.add_argument("messages", nargs="*", metavar="MESSAGE", help="message texts (default: one per stdin line)")
    put.add_argument("--priority", type=int, default=0, help="0 (lowest) to 9 (highest); default 0")
    put.add_argument("--count", type=int, metavar="N", help="send N generated messages of --size bytes instead")
    put.add_argument("--size", type=int, default=100, metavar="B", help="bytes per generated message (default 100)")
    put.add_argument("--bind", action="store_true", help="bind the local queue first if it is not bound")
    get = sub.add_parser("get", help="receive messages from QUEUE or QUEUE@NODE, highest priority first")
    get.add_argument("target", metavar="QUEUE[@NODE]")
    get.add_argument("--count", type=int, default=1, metavar="N", help="messages to receive (default 1)")
    get.add_argument("--no-ack", action="store_true", help="give them back instead of acknowledging (peek)")
    get.add_argument("--quiet", action="store_true", help="print only the count")
    ls = sub.add_parser("ls", help="queues with depth per priority, leased, dead and bytes; pending forwards")
    ls.add_argument("--json", action="store_true")
    bind = sub.add_parser("bind", help="create (or bind again) a durable queue")
    bind.add_argument("queue")
    unbind = sub.add_parser("unbind", help="unbind a queue by one of the two rules")
    unbind.add_argument("queue")
    unbind.add_argument("--rule", choices=("highest", "lowest"), default="lowest",
                        help="highest: now, leaving messages dead; lowest: after draining (default)")
    purge = sub.add_parser("purge", help="the dead-message monitor, once: delete dead messages")
    for action in (put, get, ls, bind, unbind, purge):
        # also after the action ("sgcs queue ls --store X"); SUPPRESS keeps a value given before it
        action.add_argument("--store", default=argparse.SUPPRESS, metavar="PATH", help="as before the action")
        action.add_argument("--fsync", default=argparse.SUPPRESS, choices=("full", "normal", "off"),
                            help="as before the action")
    for action in (put, get):
        action.add_argument("--config", metavar="TOML",
                            help=f"sgcs Config for the node of a remote operation (default: --name and ${SECRET_ENV})")
        action.add_argument("--name", default=f"cli-{os.getpid()}", help="this queue manager's name (remote)")
        action.add_argument("--timeout", type=float, default=30.0, metavar="S",
                            help="seconds a remote operation may take (default 30)")
        action.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                            help="progress bar (default: when stderr is a terminal)")


def run(args: argparse.Namespace) -> int:
    actions: dict[str, Callable[[argparse.Namespace], int]] = {
        "put": _put, "get": _get, "ls": _ls, "bind": _bind, "unbind": _unbind, "purge": _purge}
    return actions[args.queue_command](args)


def _open(args: argparse.Namespace) -> QueueStore:
    return QueueStore(args.store, fsync=args.fsync)


def _existing(args: argparse.Namespace) -> QueueStore:
    """The store, which must exist: a command that fails must not leave a new file behind."""
    if not Path(args.store).exists():
        raise UsageError(f"no queue store at {args.store}; give --store, or create one with "
                         f"'sgcs queue bind QUEUE' or 'sgcs queue put QUEUE MESSAGE --bind'")
    return _open(args)


def _remote_config(args: argparse.Namespace) -> Config:
    """The node's Config for a remote operation, checked before anything is
    committed: ``--config``, else ``--name`` with the secret in ``$SGCS_SECRET``."""
    if args.config:
        return Config.from_toml(args.config)
    secret = os.environ.get(SECRET_ENV)
    if not secret:
        raise UsageError(f"a remote operation needs the group's secret: --config TOML (with secret = ...) "
                         f"or ${SECRET_ENV}")
    return Config(name=args.name, secret=secret.encode())


@contextmanager
def _bar(total: int, label: str, show: bool | None) -> Iterator[Callable[[int], None]]:
    if show is None:
        show = sys.stderr.isatty()
    if not show:
        yield lambda done: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    with Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                  console=Console(stderr=True), transient=True) as progress:
        task = progress.add_task(label, total=total)
        yield lambda done: progress.update(task, completed=done)


def _bodies(args: argparse.Namespace) -> list[bytes]:
    if args.count is not None:
        if args.count < 1 or args.size < 0:
            raise UsageError("--count must be positive and --size not negative")
        return [i.to_bytes(8, "big")[-min(8, args.size):] + bytes(max(0, args.size - 8)) for i in range(args.count)]
    if args.messages:
        return [m.encode() for m in args.messages]
    return [line.rstrip("\n").encode() for line in sys.stdin]


def _put(args: argparse.Namespace) -> int:
    if type(args.priority) is not int or not 0 <= args.priority < PRIORITIES:
        raise UsageError(f"--priority must be 0 to {PRIORITIES - 1}, got {args.priority}")
    queue, node = split_target(args.target)
    config = None if node is None else _remote_config(args)  # a bad one fails before anything is committed
    bodies = _bodies(args)
    opened = _open(args) if node is not None or args.bind else _existing(args)
    with opened as store, _bar(len(bodies), f"put {args.target}", args.progress) as advance:
        if node is None and args.bind and not store.is_bound(queue):
            store.bind(queue)
        for start in range(0, len(bodies), BULK):
            chunk = [(b, args.priority) for b in bodies[start:start + BULK]]
            if node is None:
                store.put_many(queue, chunk)
            else:
                store.enqueue_remote(node, queue, chunk)
            advance(start + len(chunk))
    if node is not None and config is not None:
        return _forward_remote(args, config, node, len(bodies))
    print(f"put {len(bodies)} messages to {queue} (priority {args.priority}) in {args.store}")
    return 0


def _forward_remote(args: argparse.Namespace, config: Config, node: str, total: int) -> int:
    import trio

    async def main() -> int:
        async with _remote_manager(args, config) as manager:
            with _bar(total, f"forward to {node}", args.progress) as advance, trio.move_on_after(args.timeout):
                while manager.store.xmit_count(node):
                    advance(total - manager.store.xmit_count(node))
                    await trio.sleep(0.1)
            left = manager.store.xmit_count(node)
        if left:
            print(f"sgcs queue put: {left} messages are still in the transmission queue of {args.store}; "
                  f"they go out the next time a queue manager runs on it", file=sys.stderr)
            return 1
        print(f"put {total} messages to {args.target}: committed there")
        return 0

    return trio.run(main)


def _remote_manager(args: argparse.Namespace, config: Config) -> AbstractAsyncContextManager[QueueManager]:
    import sgcs

    from .manager import open_queue_manager


    @asynccontextmanager
    async def opened() -> AsyncIterator[QueueManager]:
        async with sgcs.open_node(config) as node, open_queue_manager(
                node, args.name, path=args.store, fsync=args.fsync) as manager:
            yield manager

    return opened()


def _print(messages: list[Message], quiet: bool) -> None:
    if quiet:
        return
    for m in messages:
        text = m.body.decode("utf-8", "backslashreplace")
        print(f"{m.priority}\t{m.msg_id.hex()}\t{text if text.isprintable() else '0x' + m.body.hex()}")


def _get(args: argparse.Namespace) -> int:
    if args.count < 1:
        raise UsageError(f"--count must be positive, got {args.count}")
    queue, node = split_target(args.target)
    if node is not None:
        return _get_remote(args, _remote_config(args), node)
    got: list[Message] = []
    with _existing(args) as store, _bar(args.count, f"get {queue}", getattr(args, "progress", None)) as advance:
        while len(got) < args.count:
            if got and not store.is_bound(queue):
                break  # a draining queue unbound itself when we took its last message
            batch = store.get(queue, "cli", min(BULK, args.count - len(got)))
            if not batch:
                break
            (store.release if args.no_ack else store.ack)([m.tag for m in batch], "cli")
            got += batch
            advance(len(got))
    _print(got, args.quiet)
    print(f"got {len(got)} messages from {queue}" + (" (given back)" if args.no_ack else ""), file=sys.stderr)
    return 0


def _get_remote(args: argparse.Namespace, config: Config, node: str) -> int:
    import trio

    known = False

    async def main() -> list[Message]:
        nonlocal known
        got: list[Message] = []
        async with _remote_manager(args, config) as manager:
            with _bar(args.count, f"get {args.target}", args.progress) as advance, trio.move_on_after(args.timeout):
                while len(got) < args.count:
                    batch = await manager.get_many(args.target, min(BULK, args.count - len(got)), timeout=1.0)
                    if not batch and got:
                        break  # drained
                    await (manager.release if args.no_ack else manager.ack)(batch)
                    got += batch
                    advance(len(got))
            known = node in manager.known_nodes
            await trio.sleep(0.2)  # let the last ack out before leaving the group
        return got

    got = trio.run(main)
    if not got and not known:
        print(f"sgcs queue get: no queue manager named {node!r} was heard within {args.timeout:g} s",
              file=sys.stderr)
        return 1
    _print(got, args.quiet)
    print(f"got {len(got)} messages from {args.target}", file=sys.stderr)
    return 0


def _ls(args: argparse.Namespace) -> int:
    if not Path(args.store).exists():
        raise UsageError(f"no queue store at {args.store}; give --store or put a message first")
    with _open(args) as store:
        infos = store.queues()
        pending = {dest: store.xmit_count(dest) for dest in store.xmit_dests()}
    if args.json:
        import json

        print(json.dumps({"queues": [{"name": i.name, "bound": i.bound, "draining": i.draining,
                                      "depth": list(i.depth), "leased": i.leased, "dead": i.dead,
                                      "bytes": i.bytes} for i in infos], "forwarding": pending}))
        return 0
    header = f"{'queue':<20} {'state':<9} {'ready':>7}  " + " ".join(f"{'p' + str(p):>5}" for p in range(
        PRIORITIES - 1, -1, -1)) + f" {'leased':>7} {'dead':>6} {'bytes':>10}"
    print(header)
    for i in infos:
        state = "draining" if i.draining else "bound" if i.bound else "unbound"
        depth = " ".join(f"{i.depth[p]:>5}" for p in range(PRIORITIES - 1, -1, -1))
        print(f"{i.name:<20} {state:<9} {i.ready:>7}  {depth} {i.leased:>7} {i.dead:>6} {i.bytes:>10}")
    for dest, count in pending.items():
        print(f"forwarding to {dest}: {count} messages waiting")
    return 0


def _bind(args: argparse.Namespace) -> int:
    with _open(args) as store:
        store.bind(args.queue)
    print(f"bound {args.queue} in {args.store}")
    return 0


def _unbind(args: argparse.Namespace) -> int:
    with _existing(args) as store:
        done = store.unbind(args.queue, Unbind(args.rule))
        info = store.info(args.queue)
    if done:
        print(f"unbound {args.queue}" + (f"; {info.dead} dead messages left for purge" if info.dead else ""))
    else:
        print(f"{args.queue} is draining: {info.ready + info.leased} messages left; it unbinds once they are received")
    return 0


def _purge(args: argparse.Namespace) -> int:
    with _existing(args) as store:
        print(f"purged {store.purge_dead()} dead messages")
    return 0
