"""CPU cost of the sans-I/O node's hot path, without sockets or trio.

Four members of one group; member 1 multicasts ``--messages`` messages of
``--size`` bytes in bursts (natural batching: one flush per burst), and
member 2 receives every datagram. Prints microseconds of CPU per message
sent (at member 1) and per message received (at member 2), the datagrams
sent and the messages per datagram. The figures are process CPU time, so
they are steadier than a socket benchmark on a busy machine, and they are
what the hot-path work changes. Run: ``python -m benchmarks.node_cost``.
"""

from __future__ import annotations

import argparse
import random
import time

from sgcs.actions import Multicast
from sgcs.config import Config
from sgcs.node import Node


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=1_000)
    parser.add_argument("--burst", type=int, default=64, help="sends between two flushes")
    parser.add_argument("--order", default="fifo")
    args = parser.parse_args(argv)
    config = Config(secret=b"node-cost-secret", window_max=1_000_000)
    members = [1, 2, 3, 4]
    sender, receiver = (Node(i, config, random.Random(i), resolve=lambda n: n) for i in (1, 2))
    for node in (sender, receiver):
        node.join("g", 0.0, order=args.order, members=members)
    payload = bytes(args.size)
    datagrams: list[bytes] = []
    now = 0.0
    start = time.process_time()
    for i in range(0, args.messages, args.burst):
        now += 0.001
        for _ in range(min(args.burst, args.messages - i)):
            datagrams += [a.data for a in sender.multicast("g", payload, now) if type(a) is Multicast]
        datagrams += [a.data for a in sender.handle_timeout(now) if type(a) is Multicast]
    send_cpu = time.process_time() - start
    start = time.process_time()
    delivered = 0
    for data in datagrams:
        delivered += sum(1 for a in receiver.handle_datagram(1, data, now) if type(a).__name__ == "Delivery")
    receive_cpu = time.process_time() - start
    print(f"send {1e6 * send_cpu / args.messages:.2f} us/message, receive {1e6 * receive_cpu / max(1, delivered):.2f} "
          f"us/message; {len(datagrams)} datagrams, {args.messages / max(1, len(datagrams)):.1f} messages each; "
          f"{delivered} delivered")


if __name__ == "__main__":
    main()
