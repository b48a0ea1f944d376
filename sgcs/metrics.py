"""Node and group statistics in the Prometheus text format (optional extra).

Theory of operation
-------------------
A node's counters live in its event loop's thread, and only that thread may
read them (the node changes its tables between two of its awaits). A scrape
arrives in ``prometheus_client``'s HTTP thread. So a scrape never reads the
node: it asks the node's loop for a ``Snapshot`` (``TrioToken.run_sync_soon``
under trio, ``call_soon_threadsafe`` under asyncio), waits for it at most
``SCRAPE_TIMEOUT`` seconds, and turns it into metric families. A node that
does not answer in time fails that scrape; it never blocks the loop.

Names follow Prometheus' conventions: ``sgcs_`` prefix, ``_total`` on
counters, base units last (``sgcs_received_bytes_total``), and two histograms
in seconds: ``sgcs_delivery_latency_seconds`` and ``sgcs_view_change_seconds``
(``sgcs/io/timings.py``). Every sample has a ``node`` label (``Config.name``);
group gauges also have ``group``; drop and send-error counters have
``reason``. Every integer field of ``NodeStatistics`` and ``DriverStatistics``
is exported (a field added later shows up as a counter unless ``GAUGES``
lists it), so the exporter does not fall behind the statistics.

Use::

    async with sgcs.open_node(config) as node, sgcs.metrics.serve(node, port=9464):
        ...                                    # http://127.0.0.1:9464/metrics

or ``text(node)`` for the text once, from the node's own loop. Needs the
``metrics`` extra: ``pip install 'sgcs[metrics]'``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import errno
import math
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

import sniffio

from .errors import UsageError

try:
    from prometheus_client import CollectorRegistry, generate_latest, start_http_server
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
except ImportError as exc:  # pragma: no cover - depends on the installation
    raise ImportError("sgcs.metrics needs prometheus_client: pip install 'sgcs[metrics]'") from exc

if TYPE_CHECKING:
    from .api import GroupStatistics, NodeHandle
    from .io.timings import HistogramSnapshot
    from .io.trio_driver import DriverStatistics
    from .node import NodeStatistics

SCRAPE_TIMEOUT = 5.0
"""Seconds a scrape waits for the node's loop to take a snapshot."""
DEFAULT_PORT = 9464
"""The metrics port of ``serve`` and ``sgcs stats`` when none is given."""

GAUGES = frozenset({"buffered", "peak_buffered", "groups", "fate_unknown"})
RENAMED = {"bytes_received": "received_bytes", "bytes_sent": "sent_bytes"}
"""Statistics fields whose metric puts the unit last, as Prometheus' naming guide asks."""
HISTOGRAMS = {
    "delivery_latency": ("sgcs_delivery_latency_seconds",
                         "Own multicasts (1 in 8 sampled): from send to own delivery, the order's wait included."),
    "view_change_duration": ("sgcs_view_change_seconds",
                             "View changes: from the first optimistic view to the installed view."),
}
"""Statistics fields that are levels, not counts since start."""
LABELLED = {"drop_reasons": ("dropped", "dropped"), "send_error_reasons": ("send_errors", "send_errors")}
"""Dict fields by reason: (metric name, the scalar field that sums them and is not exported apart)."""
HELP = {
    "datagrams_received": "Datagrams received.",
    "received_bytes": "Bytes received in datagrams.",
    "datagrams_sent": "Datagrams sent.",
    "sent_bytes": "Bytes sent in datagrams.",
    "messages_sent": "Application messages sent.",
    "messages_delivered": "Application messages delivered here.",
    "dropped": "Datagrams, records and messages dropped, by reason.",
    "foreign": "Valid datagrams for groups this node has not joined.",
    "duplicates": "Records received more than once.",
    "nacks_sent": "Negative acknowledgements sent.",
    "retransmissions": "Records retransmitted.",
    "gossip_pushes": "Records pushed to a gossip partner that lacked them.",
    "repaired_by_nack": "Missing records recovered after a NACK.",
    "repaired_by_gossip": "Missing records recovered by gossip.",
    "unicast_retransmissions": "Unicast records retransmitted.",
    "buffered": "Records held for retransmission, not yet stable.",
    "peak_buffered": "Most records ever held for retransmission.",
    "groups": "Groups this node belongs to.",
    "fate_unknown": "Own multicasts with no outcome yet (in flight, or waiting for order or a view change).",
    "not_delivered": "Own multicasts reported NotDelivered (dropped by a view change this node missed).",
    "send_errors": "Send errors, by errno name.",
    "receive_errors": "Receive errors.",
    "events_discarded": "Events that found no reader (group being left, shutdown).",
    "unreachable": "ICMP port-unreachable reports for datagrams this node sent.",
    "host_checks": "Host checks (a TCP handshake) of suspected members started.",
    "host_checks_answered": "Host checks whose host completed the handshake (the member's process exists).",
    "host_checks_refused": "Host checks refused: nobody listens at the member's address.",
    "host_checks_silent": "Host checks with no answer in time: the host or the path to it is gone.",
    "host_checks_failed": "Host checks that failed on this node's side (no verdict).",
    "host_check_accepts": "TCP connections from other members' host checks, accepted and closed unread.",
}


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything one scrape exports, taken in the node's loop."""

    node: str
    node_id: int
    statistics: NodeStatistics
    io: DriverStatistics
    groups: dict[str, GroupStatistics]


def snapshot(node: NodeHandle) -> Snapshot:
    """The node's figures now; call it from the node's own loop."""
    return Snapshot(node.name, node.id, node.statistics(), node.io_statistics(), node.group_statistics())


class NodeCollector:
    """A ``prometheus_client`` collector over a thread-safe ``read`` of snapshots."""

    def __init__(self, read: Callable[[], Snapshot]) -> None:
        self._read = read

    def collect(self) -> Iterator[Metric]:
        shot = self._read()
        labels = {"node": shot.node}
        info = GaugeMetricFamily("sgcs_node_info", "The node's member id.", labels=["node", "node_id"])
        info.add_metric([shot.node, str(shot.node_id)], 1)
        yield info
        yield from _families(shot.statistics, labels)
        yield from _families(shot.io, labels)
        yield from _group_families(shot.groups, shot.node)


def _families(stats: NodeStatistics | DriverStatistics, labels: dict[str, str]) -> Iterator[Metric]:
    summed = {total for _, total in LABELLED.values()}
    for field in dataclasses.fields(stats):
        value = getattr(stats, field.name)
        if field.name in HISTOGRAMS:
            if value is not None:
                yield _histogram(*HISTOGRAMS[field.name], value, labels)
        elif field.name in LABELLED:
            name, _ = LABELLED[field.name]
            family = CounterMetricFamily(f"sgcs_{name}", HELP.get(name, name), labels=[*labels, "reason"])
            for reason, count in sorted(value.items()):
                family.add_metric([*labels.values(), reason], count)
            yield family
        elif field.name in summed or isinstance(value, bool) or not isinstance(value, int):
            continue
        else:
            kind = GaugeMetricFamily if field.name in GAUGES else CounterMetricFamily
            name = RENAMED.get(field.name, field.name)
            metric = kind(f"sgcs_{name}", HELP.get(name, name.replace("_", " ")), labels=list(labels))
            metric.add_metric(list(labels.values()), value)
            yield metric


def _histogram(name: str, text: str, shot: HistogramSnapshot, labels: dict[str, str]) -> Metric:
    family = HistogramMetricFamily(name, text, labels=list(labels))
    cumulative, buckets = 0, []
    for bound, count in zip((*shot.bounds, math.inf), shot.counts):
        cumulative += count
        buckets.append(("+Inf" if bound == math.inf else repr(bound), cumulative))
    family.add_metric(list(labels.values()), buckets, shot.total)
    return family


def _group_families(groups: dict[str, GroupStatistics], node: str) -> Iterator[Metric]:
    gauges = {
        "members": "Members in the group's installed view.",
        "held": "Messages held here: unstable, or waiting for a view change or their order.",
        "window": "Unstable records: the group's flow window in use.",
        "changing_view": "1 while a view change is under way (sends are optimistic).",
    }
    for field, text in gauges.items():
        family = GaugeMetricFamily(f"sgcs_group_{field}", text, labels=["node", "group"])
        for group, stats in sorted(groups.items()):
            family.add_metric([node, group], int(getattr(stats, field)))
        yield family


def text(node: NodeHandle) -> str:
    """The node's metrics in the Prometheus text format; call it from the node's loop."""
    registry = CollectorRegistry()
    registry.register(NodeCollector(lambda: snapshot(node)))
    return generate_latest(registry).decode()


def _reader(node: NodeHandle) -> Callable[[], Snapshot]:
    """A ``read`` for another thread: it asks the node's loop for a snapshot."""
    schedule: Callable[[Callable[[], object]], object]
    if sniffio.current_async_library() == "asyncio":
        schedule = asyncio.get_running_loop().call_soon_threadsafe
    else:
        import trio

        schedule = trio.lowlevel.current_trio_token().run_sync_soon

    def read() -> Snapshot:
        future: concurrent.futures.Future[Snapshot] = concurrent.futures.Future()

        def take() -> None:
            try:
                future.set_result(snapshot(node))
            except Exception as exc:  # the node closed meanwhile: that scrape fails
                future.set_exception(exc)

        schedule(take)
        return future.result(timeout=SCRAPE_TIMEOUT)

    return read


@dataclass(frozen=True, slots=True)
class MetricsServer:
    address: tuple[str, int]
    """Where the server listens; ``http://HOST:PORT/metrics``."""

    @property
    def url(self) -> str:
        return f"http://{self.address[0]}:{self.address[1]}/metrics"


@asynccontextmanager
async def serve(node: NodeHandle, port: int = DEFAULT_PORT, host: str = "127.0.0.1") -> AsyncIterator[MetricsServer]:
    """Serve ``node``'s metrics over HTTP for the duration of the block
    (trio or asyncio). ``port`` 0 picks a free one; ``host`` "0.0.0.0" lets
    other machines scrape."""
    registry = CollectorRegistry()  # not auto_describe: that would scrape, and wait on this very loop
    registry.register(NodeCollector(_reader(node)))
    try:
        server, thread = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        reason = "in use; choose another" if exc.errno == errno.EADDRINUSE else f"unusable ({exc.strerror or exc})"
        raise UsageError(f"metrics port {port} on {host} is {reason}; choose another port (0: any free one)") from None
    try:
        yield MetricsServer((host, int(server.server_port)))
    finally:
        # shutdown() waits for the serving loop, which polls every 0.5 s:
        # done in a worker thread, so the node's loop goes on meanwhile.
        await _in_thread(server.shutdown)
        server.server_close()
        thread.join()


async def _in_thread(fn: Callable[[], None]) -> None:
    if sniffio.current_async_library() == "asyncio":
        await asyncio.to_thread(fn)
    else:
        import trio

        await trio.to_thread.run_sync(fn)
