"""Catch-up with real processes (docs/flows.md, "Measured"): a durable subscriber to
50 issues leaves, 10,000 events are published, and it comes back.

    PYTHONPATH=. SGCS_PURE_PYTHON=1 python benchmarks/flows_processes.py [--events 10000] [--payload-max 1200]

This process is the keeper and the publisher. Two child processes subscribe
to ``prices`` for issues I000-I049: "stay" never leaves; "away" is durable
(SQLite), leaves gracefully after the first 500 events, and is started again
under the same name with the same file after the backlog. Prints the events
and bytes of its catch-up against replaying its part of the backlog, and
checks its state equals the one that stayed.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trio

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import sgcs  # noqa: E402
from sgcs.services.flows import FlowGraph, open_flows, wire  # noqa: E402

GRAPH = """
name = "market"
[spaces.quotes]
fields = "issue: str, price: float, volume: float"
[spaces.prices]
key = "issue: str"
values = "maxPrice: float, curPrice: float"
[[arcs]]
from = "quotes"
to = "prices"
collapse = ["[i,p,v] -> <i: p, p>",
            "[i,p,v], <i: maxP, curP>, p > maxP -> <i: p, p>",
            "[i,p,v], <i: maxP, curP>, p <= maxP -> <i: maxP, p>"]
"""
PREDICATE = 'issue < "I050"'
SECRET = b"flows processes benchmark"


def config(name: str, net: dict[str, object]) -> sgcs.Config:
    return sgcs.Config(name=name, secret=SECRET, beacon_interval=0.1, **net)  # type: ignore[arg-type]


async def child(role: str, work: Path, net: dict[str, object]) -> None:
    """A subscriber: signal ready, then dump rows when told to stop."""
    store = work / f"{role}.db" if role == "away" else None
    async with sgcs.open_node(config(role, net)) as node, open_flows(node, FlowGraph.from_toml(GRAPH), store=store) as flows:
        prices = await flows.subscribe("prices", PREDICATE, durable=store is not None)
        with trio.fail_after(60):
            await prices.ready()
        (work / f"{role}.ready").write_text("1")
        stop = work / f"{role}.stop"
        while not stop.exists():
            await trio.sleep(0.05)
        await trio.sleep(float(stop.read_text() or 0))
        rows = [[list(k), list(r)] for k, r in sorted(prices.rows().items())]
        (work / f"{role}.json").write_text(json.dumps({"rows": rows, "counters": prices.counters}))


def spawn(role: str, work: Path, net: dict[str, object]) -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return subprocess.Popen([sys.executable, __file__, "--child", role, "--work", str(work), "--net", json.dumps(net)],
                            env=env)


async def wait_file(path: Path, timeout: float = 60) -> None:
    with trio.fail_after(timeout):
        while not path.exists():
            await trio.sleep(0.05)


def load(path: Path) -> dict[str, object]:
    data = json.loads(path.read_text())
    path.unlink()
    return data  # type: ignore[no-any-return]


async def parent(events: int, batch: int, payload_max: int) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    rng = random.Random(5)
    net: dict[str, object] = {"multicast_group": f"239.255.{rng.randrange(256)}.{rng.randrange(1, 255)}",
                              "multicast_port": port}
    work = Path(tempfile.mkdtemp(prefix="flows-processes-"))
    graph = FlowGraph.from_toml(GRAPH)
    async with sgcs.open_node(config("keeper", net)) as node, open_flows(node, graph, keeper=True, payload_max=payload_max) as keeper:
        with trio.fail_after(30):
            await keeper.kept("prices").ready()
        stay, away = spawn("stay", work, net), spawn("away", work, net)
        await wait_file(work / "stay.ready")
        await wait_file(work / "away.ready")
        first = [(f"I{i:03d}", float(rng.randrange(1, 1000)), 1.0) for i in range(200)]
        for at in range(0, len(first), batch):
            await keeper.publish("quotes", first[at:at + batch])
        (work / "away.stop").write_text("1.0")
        away.wait(60)
        first_away = load(work / "away.json")
        before = {tuple(k): tuple(r) for k, r in first_away["rows"]}  # type: ignore[union-attr]
        print(f"first run of the returning subscriber: {len(before)} rows, "
              f"{first_away['counters']['delivered']} events delivered")  # type: ignore[index]
        backlog = [(f"I{rng.randrange(200):03d}", float(rng.randrange(1, 1000)), 1.0) for _ in range(events)]
        start = time.perf_counter()
        for at in range(0, events, batch):
            await keeper.publish("quotes", backlog[at:at + batch])
        kept = keeper.kept("prices")
        with trio.fail_after(120):  # delivered in total order at the keeper: the backlog is history
            while kept.counters["delivered"] < len(first) + events:
                await trio.sleep(0.02)
        published = time.perf_counter() - start
        (work / "away.stop").unlink()
        (work / "away.ready").unlink()
        start = time.perf_counter()
        away = spawn("away", work, net)
        await wait_file(work / "away.ready")
        caught_up = time.perf_counter() - start
        for role in ("away", "stay"):
            (work / f"{role}.stop").write_text("1.0")
        away.wait(60)
        stay.wait(60)
        back, stayed = load(work / "away.json"), load(work / "stay.json")
    after = {tuple(k): tuple(r) for k, r in back["rows"]}  # type: ignore[union-attr]
    counters = back["counters"]
    changed = [k for k in after if before.get(k) != after[k]]
    mine = [e for e in backlog if e[0] < "I050"]
    replay = wire.encoded_events_size("quotes", mine)
    print(f"published and delivered {events} events in {published:.2f} s; the returning subscriber was LIVE {caught_up:.2f} s after"
          f" its process started")
    print(f"catch-up: {counters['catchup_events']} events, {counters['catchup_bytes']:,} bytes for {len(changed)} changed"
          f" issues (at most 2 per issue: {counters['catchup_events'] <= 2 * len(changed)}); replaying its part of the"
          f" backlog: {len(mine)} events, {replay:,} bytes ({replay / max(1, counters['catchup_bytes']):.0f}x); state"
          f" transfer instead (no durable rows to start from): {counters['transfer_bytes']:,} bytes")  # type: ignore[index,operator]
    print(f"rows: {len(after)} after the return, {len(stayed['rows'])} at the subscriber that stayed "  # type: ignore[arg-type]
          f"(events it received live: {stayed['counters']['delivered']})")  # type: ignore[index]
    print(f"state equals the subscriber that stayed: {back['rows'] == stayed['rows']}; maxima never went back: "
          f"{all(after[k][0] >= before[k][0] for k in before)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=250)
    parser.add_argument("--payload-max", type=int, default=1_200, help="bytes of events per multicast at most")
    parser.add_argument("--child")
    parser.add_argument("--work")
    parser.add_argument("--net")
    args = parser.parse_args()
    if args.child:
        trio.run(child, args.child, Path(args.work), json.loads(args.net))
    else:
        trio.run(parent, args.events, args.batch, args.payload_max)


if __name__ == "__main__":
    main()
