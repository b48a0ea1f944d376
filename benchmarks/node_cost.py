"""CPU cost of the sans-I/O node's hot path, without sockets or trio.

``--members`` nodes of one group on a lossless in-memory network. In each
round (1 ms of virtual time) every member multicasts a burst of ``--burst``
messages of ``--size`` bytes (natural batching: one flush per burst), every
datagram reaches its destinations, and every node's timers run. Prints the
CPU microseconds per message delivered (send, receive, timers and ordering
all included, summed over the nodes and divided by the deliveries), the
datagrams per message and the deliveries. The figures are process CPU time of
one process, so they are steadier than a socket benchmark on a busy machine,
and they are what the hot-path work changes.
Run: ``python -m benchmarks.node_cost [--order total] [--members 4]``.
"""

from __future__ import annotations

import argparse
import random
import time
from collections import deque

from sgcs.actions import Delivery, Multicast, Send
from sgcs.config import Config
from sgcs.node import Node


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="CPU cost of the sans-I/O node per message delivered")
    parser.add_argument("--members", type=int, default=4)
    parser.add_argument("--messages", type=int, default=20_000, help="per member")
    parser.add_argument("--size", type=int, default=1_000)
    parser.add_argument("--burst", type=int, default=64, help="sends between two flushes")
    parser.add_argument("--order", default="fifo")
    args = parser.parse_args(argv)
    config = Config(secret=b"node-cost-secret")
    ids = list(range(1, args.members + 1))
    nodes = {i: Node(i, config, random.Random(i), resolve=lambda n: n) for i in ids}
    for node in nodes.values():
        node.join("g", 0.0, order=args.order, members=ids)
    payload = bytes(args.size)
    inflight: deque[tuple[int, int | None, bytes]] = deque()  # (source, destination or None, data)
    delivered = datagrams = sent = 0
    now = 0.0

    def route(source: int, actions: list) -> None:
        nonlocal delivered, datagrams
        for action in actions:
            kind = type(action)
            if kind is Delivery:
                delivered += 1
            elif kind is Multicast:
                datagrams += 1
                inflight.append((source, None, action.data))
            elif kind is Send:
                datagrams += 1
                inflight.append((source, action.dst, action.data))

    start = time.process_time()
    target = args.members * args.messages * args.members
    rounds = 0
    while delivered < target and rounds < 100_000:
        rounds += 1
        now += 0.001
        for i, node in nodes.items():
            for _ in range(args.burst):
                if sent >= args.members * args.messages or node.send_ready_at("g", now) is None:
                    break
                route(i, node.multicast("g", payload, now))
                sent += 1
            route(i, node.handle_timeout(now))
        while inflight:
            source, destination, data = inflight.popleft()
            for j in ids if destination is None else (destination,):
                if j != source:
                    route(j, nodes[j].handle_datagram(source, data, now))
    cpu = time.process_time() - start
    print(f"{args.order} x{args.members}: {1e6 * cpu / max(1, delivered):.2f} us of CPU per delivery; "
          f"{datagrams / max(1, sent):.3f} datagrams per message; {delivered} of {target} delivered "
          f"in {rounds} rounds")


if __name__ == "__main__":
    main()
