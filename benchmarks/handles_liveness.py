"""Survival signals on ADS handles, 10 nodes on loopback (docs/handles.md).

Ten processes each attach an ADS module to the data field ``atc`` and watch
its survival signals (``module.watch()``). The harness then, for ``--rounds``
rounds:

* starts a new node: time until each other node's handle reports it ``joined``
  (from the new process's spawn, and from its first view);
* asks one node to detach (SIGTERM: it leaves its ``attach`` block): time from
  the start of its detach until each other node reports ``left``;
* kills one node with SIGKILL: time until each other node reports ``failed``
  (and until the first ``suspected``).

The paper's figures (10 nodes): new node sensed under 10 s on average,
maintenance (planned leave) under 1 s, a fault under 10 s. Times are wall
clock on one host (the same clock for every process).

    python benchmarks/handles_liveness.py --nodes 10 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SECRET = b"handles liveness secret"


async def node_main(args: argparse.Namespace) -> None:
    import trio

    import sgcs
    from sgcs.services.handles import NodeEvent, attach

    def emit(**fields: Any) -> None:
        print(json.dumps({"t": time.time(), **fields}), flush=True)

    config = sgcs.Config(name="atc", secret=SECRET, multicast_group=args.multicast_group,
                         multicast_port=args.multicast_port, beacon_interval=args.beacon)
    async with sgcs.open_node(config) as node:
        with trio.open_signal_receiver(signal.SIGTERM) as signals:
            async with attach(node, "atc") as module:
                emit(event="attached", me=module.me, members=len(module.members))
                watch = module.watch()
                async with trio.open_nursery() as nursery:
                    async def relay() -> None:
                        async for event in watch:
                            if isinstance(event, NodeEvent):
                                emit(event=event.kind, node=event.node, members=len(module.members))

                    nursery.start_soon(relay)
                    async for _ in signals:
                        emit(event="detaching", me=module.me)
                        nursery.cancel_scope.cancel()
                        break


class Node:
    def __init__(self, args: argparse.Namespace) -> None:
        cmd = [sys.executable, "-P", __file__, "--node", "--multicast-group", args.multicast_group,
               "--multicast-port", str(args.multicast_port), "--beacon", str(args.beacon)]
        self.spawned = time.time()
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                     env=dict(os.environ, PYTHONPATH=str(ROOT)))
        self.events: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.me: int | None = None
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            event = json.loads(line)
            with self.lock:
                self.events.append(event)
                if event["event"] == "attached":
                    self.me = event["me"]

    def first(self, kind: str, node: int | None = None, after: float = 0.0) -> float | None:
        with self.lock:
            for e in self.events:
                if e["event"] == kind and e["t"] >= after and (node is None or e.get("node") == node):
                    return float(e["t"])
        return None

    def members(self) -> int:
        with self.lock:
            counts = [e["members"] for e in self.events if "members" in e]
        return counts[-1] if counts else 0


def wait_for(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.02)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def harness(args: argparse.Namespace) -> int:
    rng = random.SystemRandom()
    args.multicast_group = f"239.255.{rng.randrange(256)}.{rng.randrange(1, 255)}"
    args.multicast_port = free_port()
    nodes = [Node(args) for _ in range(args.nodes - 1)]
    results: dict[str, list[float]] = {"join_from_spawn": [], "join_from_first_view": [], "leave": [],
                                       "fault": [], "fault_first_suspected": []}
    try:
        wait_for(lambda: all(n.members() == args.nodes - 1 for n in nodes), 60, f"{args.nodes - 1} nodes to converge")
        print(f"{args.nodes - 1} nodes attached and agree; rounds of join / planned leave / kill -9 at {args.nodes} nodes")
        for round_ in range(args.rounds):
            # a new node
            new = Node(args)
            others = list(nodes)
            wait_for(lambda: new.me is not None and all(n.first("joined", new.me) for n in others), 60,
                     "the new node to be sensed")
            attached = new.first("attached")
            assert attached is not None and new.me is not None
            sensed = [n.first("joined", new.me) for n in others]
            results["join_from_spawn"] += [t - new.spawned for t in sensed if t]
            results["join_from_first_view"] += [max(0.0, t - attached) for t in sensed if t]
            nodes.append(new)
            wait_for(lambda: all(n.members() == args.nodes for n in nodes), 60, "all to see the new node")
            # a planned leave
            leaver = nodes.pop(rng.randrange(len(nodes)))
            os.kill(leaver.proc.pid, signal.SIGTERM)
            wait_for(lambda: leaver.first("detaching") is not None, 30, "the leaver to start detaching")
            began = leaver.first("detaching")
            assert began is not None
            wait_for(lambda: all(n.first("left", leaver.me, began) for n in nodes), 30, "the leave to be seen")
            results["leave"] += [n.first("left", leaver.me, began) - began for n in nodes]  # type: ignore[operator]
            leaver.proc.wait(timeout=30)
            # a fault
            victim = nodes.pop(rng.randrange(len(nodes)))
            killed = time.time()
            os.kill(victim.proc.pid, signal.SIGKILL)
            victim.proc.wait()
            wait_for(lambda: all(n.first("failed", victim.me, killed) for n in nodes), 60, "the fault to be seen")
            results["fault"] += [n.first("failed", victim.me, killed) - killed for n in nodes]  # type: ignore[operator]
            suspected = [n.first("suspected", victim.me, killed) for n in nodes]
            results["fault_first_suspected"] += [t - killed for t in suspected if t]
            # back to N - 1 running nodes for the next round's join
            print(f"  round {round_ + 1}: join {statistics.mean(results['join_from_spawn'][-len(others):]):.2f} s, "
                  f"leave {statistics.mean(results['leave'][-len(nodes):]):.3f} s, "
                  f"fault {statistics.mean(results['fault'][-len(nodes):]):.2f} s", flush=True)
            replacement = Node(args)
            nodes.append(replacement)
            wait_for(lambda: all(n.members() == args.nodes - 1 for n in nodes), 60, "a replacement to join")
    finally:
        for n in nodes:
            n.proc.kill()
            n.proc.wait()
    summary = {key: {"mean_s": round(statistics.mean(v), 3), "max_s": round(max(v), 3), "samples": len(v)}
               for key, v in results.items() if v}
    paper = {"join_from_spawn": 10.0, "leave": 1.0, "fault": 10.0}
    print(json.dumps({"nodes": args.nodes, "rounds": args.rounds, "beacon_interval": args.beacon, **summary,
                      "paper_targets_s": paper,
                      "met": all(summary[k]["mean_s"] < v for k, v in paper.items())}))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--node", action="store_true")
    parser.add_argument("--nodes", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--beacon", type=float, default=1.0, help="Config.beacon_interval (default 1.0, sgcs's default)")
    parser.add_argument("--multicast-group")
    parser.add_argument("--multicast-port", type=int)
    args = parser.parse_args()
    if args.node:
        import trio

        trio.run(node_main, args)
        return 0
    return harness(args)


if __name__ == "__main__":
    sys.exit(main())
