"""``sgcs stats``: a quiet member that exports its node's metrics.

Theory of operation
-------------------
It joins GROUP like ``sgcs chat`` does (same network options and secret),
sends nothing and reads every event (an unread queue would stall the node by
backpressure). Its node's counters then show the group as one member sees it:
datagrams and messages received, repairs, drops, the view's size and the
flow window. By default it serves them for Prometheus on ``--metrics-port``
until interrupted; ``--print S`` instead prints the text format once, after S
seconds, and leaves (for a look by hand, or a cron job).
"""

from __future__ import annotations

import sys
from functools import partial

import trio

from ..api import GroupHandle, open_node
from .chat import BEACON_INTERVAL, DEMO_SECRET, SECRET_ENV, resolve_secret
from ..config import Config
from ..errors import UsageError
from .members import first_failure


async def _drain(group: GroupHandle) -> None:
    async for _ in group:
        pass


async def run(config: Config, group: str, order: str, port: int, host: str, print_after: float | None) -> None:
    from .. import metrics

    async with open_node(config) as node, node.join(group, order=order) as handle, trio.open_nursery() as nursery:
        nursery.start_soon(_drain, handle)
        if print_after is not None:
            await trio.sleep(print_after)
            print(metrics.text(node), end="", flush=True)
        else:
            async with metrics.serve(node, port, host) as server:
                print(f"sgcs stats: serving the metrics of node {node.id} in group {group!r} at {server.url}",
                      file=sys.stderr, flush=True)
                await trio.sleep_forever()
        nursery.cancel_scope.cancel()


def run_command(name: str | None, group: str, order: str, secret: str | None, network: dict[str, object],
                port: int, host: str, print_after: float | None) -> int:
    """``sgcs stats``: ``network`` holds the Config fields given on the command line."""
    if print_after is not None and print_after < 0:
        raise UsageError(f"--print takes seconds to wait, at least 0, got {print_after}")
    if not 0 <= port <= 65_535:
        raise UsageError(f"--metrics-port must be 0 to 65535, got {port}")
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        raise UsageError("sgcs stats needs prometheus_client: pip install 'sgcs[metrics]'") from None
    given = resolve_secret(secret)
    config = Config.from_mapping({"name": name or "stats", "secret": given or DEMO_SECRET,
                                  "beacon_interval": BEACON_INTERVAL, **network})
    if given is None:
        print(f"sgcs stats: warning: no --secret and no ${SECRET_ENV}: using the demo secret, which is not secret",
              file=sys.stderr)
    try:
        trio.run(partial(run, config, group, order, port, host, print_after))
    except BaseExceptionGroup as failures:  # e.g. UsageError: the group uses another order
        raise first_failure(failures) from None
    return 0
