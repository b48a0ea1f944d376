"""The Prometheus exporter: a scrape of a running node shows its counters.

Real loopback sockets and real HTTP on 127.0.0.1; the scraped text is parsed
with ``prometheus_client``'s own parser. Timeouts are failure guards only."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

import pytest
import trio

pytest.importorskip("prometheus_client")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

import sgcs  # noqa: E402
from sgcs import metrics  # noqa: E402
from test_trio_driver import delivery_of, make_config, view_with  # noqa: E402

WAIT = 10.0
"""Seconds any single wait may take before the test fails instead of hanging."""
ROOT = Path(__file__).resolve().parent.parent
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=WAIT) as response:
        assert response.status == 200
        return response.read().decode()


def parse(text: str) -> Samples:
    """Every sample by (name, sorted labels); parsing fails on malformed text."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


async def test_scrape_of_a_running_trio_node_shows_its_counters(network: dict[str, object]) -> None:
    async with (
        sgcs.open_node(make_config(network, "alpha")) as a,
        sgcs.open_node(make_config(network, "beta")) as b,
        a.join("g") as ga,
        b.join("g") as gb,
        metrics.serve(a, port=0) as server,
    ):
        await view_with(ga, a.id, b.id)
        await view_with(gb, a.id, b.id)
        for n in range(24):  # one in 8 is timed: at least 2 of them
            await ga.send(b"m%d" % n)
        await delivery_of(gb, b"m23")
        with trio.fail_after(WAIT):
            while a.io_statistics().delivery_latency.count < 2:  # type: ignore[union-attr]
                await ga.receive()  # its own deliveries end the timings
            samples = parse(await trio.to_thread.run_sync(scrape, server.url))
    node = {"node": "alpha"}
    assert value(samples, "sgcs_node_info", node="alpha", node_id=str(a.id)) == 1
    assert value(samples, "sgcs_messages_sent_total", **node) == 24
    assert value(samples, "sgcs_messages_delivered_total", **node) >= 24  # its own, delivered to itself
    for counter in ("sgcs_datagrams_sent_total", "sgcs_sent_bytes_total", "sgcs_datagrams_received_total",
                    "sgcs_received_bytes_total"):
        assert value(samples, counter, **node) > 0, counter
    # histograms: cumulative buckets ending in +Inf == count; the join of beta was one view change
    timed = value(samples, "sgcs_delivery_latency_seconds_count", **node)
    assert timed >= 2 and value(samples, "sgcs_delivery_latency_seconds_bucket", le="+Inf", **node) == timed
    assert 0 < value(samples, "sgcs_delivery_latency_seconds_sum", **node) < WAIT * timed
    assert value(samples, "sgcs_view_change_seconds_count", **node) >= 1
    assert value(samples, "sgcs_view_change_seconds_bucket", le="10.0", **node) >= 1
    assert value(samples, "sgcs_groups", **node) == 1
    assert value(samples, "sgcs_group_members", node="alpha", group="g") == 2
    assert value(samples, "sgcs_receive_errors_total", **node) == 0


def test_scrape_of_a_running_asyncio_node_and_text(network: dict[str, object]) -> None:
    async def main() -> tuple[Samples, Samples]:
        async with sgcs.open_node(make_config(network, "gamma")) as node, node.join("g") as group:
            await group.send(b"hello")
            async with asyncio.timeout(WAIT):
                async for event in group:
                    if isinstance(event, sgcs.Delivery):
                        break
            async with metrics.serve(node, port=0) as server:
                scraped = parse(await asyncio.wait_for(asyncio.to_thread(scrape, server.url), WAIT))
            return scraped, parse(metrics.text(node))

    for samples in asyncio.run(main()):
        assert value(samples, "sgcs_messages_sent_total", node="gamma") == 1
        assert value(samples, "sgcs_messages_delivered_total", node="gamma") == 1
        assert value(samples, "sgcs_datagrams_sent_total", node="gamma") > 0
        assert value(samples, "sgcs_group_members", node="gamma", group="g") == 1


async def test_metrics_port_in_use_is_a_usage_error(network: dict[str, object]) -> None:
    async with sgcs.open_node(make_config(network, "delta")) as node, metrics.serve(node, port=0) as server:
        with pytest.raises(sgcs.UsageError, match=f"metrics port {server.address[1]} .* in use"):
            async with metrics.serve(node, port=server.address[1]):
                pass


def test_sgcs_stats_serves_a_scrape_of_its_running_node(network: dict[str, object]) -> None:
    command = [sys.executable, "-m", "sgcs", "stats", "observed", "--metrics-port", "0", "--name", "watcher",
               "--secret", "stats-test-secret", "--multicast-group", str(network["multicast_group"]),
               "--multicast-port", str(network["multicast_port"])]
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    guard = threading.Timer(3 * WAIT, process.kill)  # readline blocks: the guard ends a silent process
    guard.start()
    try:
        assert process.stderr is not None
        lines = []
        for line in process.stderr:  # warnings may come first
            lines.append(line)
            if " at http://127.0.0.1:" in line:
                break
        assert " at http://127.0.0.1:" in line, lines
        samples = parse(scrape(line.rsplit(" at ", 1)[1].strip()))
    finally:
        guard.cancel()
        process.terminate()
        process.communicate(timeout=WAIT)
    assert value(samples, "sgcs_datagrams_sent_total", node="watcher") > 0  # its join and beacons
    assert value(samples, "sgcs_group_members", node="watcher", group="observed") == 1


def test_sgcs_stats_bad_input_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    from sgcs.apps.cli import main

    assert main(["stats", "g", "--metrics-port", "70000"]) == 2
    assert main(["stats", "g", "--print", "-1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["sgcs stats: error: --metrics-port must be 0 to 65535, got 70000",
                   "sgcs stats: error: --print takes seconds to wait, at least 0, got -1.0"]
