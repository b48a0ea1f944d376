"""Rounds from a multicast to its stability at every member, on the real
``ReliableStream`` objects (the stability all-reduce of sgcs/transport/stability.py).

Usage::

    python benchmarks/stability_rounds.py [--sizes 128,256,1024] [--seeds 3] [--messages 20] [--extra-levels K]

N streams, one per member, run in one discrete-event loop: every member's
gossip timer starts at a random phase (members share no clock), datagrams
take ``--latency`` seconds, nothing is lost. Member 0 multicasts one message
per gossip interval (``--messages`` of them, after a warm-up); for each, the
time until *every* member holds it as stable (its buffer dropped it) is
measured in gossip intervals and compared with ceil(log2 N), the paper's
bound (SGCS: stable once all members ACKed; the all-reduce needs one round
per hypercube level). Also printed: digests sent per member per round (the
cost). Views of at most 64 members also learn stability from the ACK matrix,
so use N > 64 to see the all-reduce alone. The harness (the event loop and
``measure``) is ``tests/_stability_rounds.py``; a test checks the bound with it.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent.parent / "tests")]  # the harness: tests/_stability_rounds.py

from _stability_rounds import measure  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="128,256,1024")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--messages", type=int, default=20)
    parser.add_argument("--latency", type=float, default=0.001)
    parser.add_argument("--interval", type=float, default=0.1)
    parser.add_argument("--extra-levels", type=int, default=64,
                        help="changed levels sent per round besides the round's own (Config.stability_extra_levels)")
    parser.add_argument("--in-step", action="store_true",
                        help="start every member together (round counts in step); default: spread over a cycle")
    args = parser.parse_args()
    print(f"members {'started together' if args.in_step else 'started over one cycle of levels'}, "
          f"latency {args.latency * 1e3:g} ms, gossip interval {args.interval:g} s, no loss")
    print("| N | ceil(log2 N) | rounds to stable everywhere: median | p99 | max | digests per member per round | wall s |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for n in (int(s) for s in args.sizes.split(",")):
        started = time.perf_counter()
        spans: list[float] = []
        costs = []
        for seed in range(args.seeds):
            got, cost = measure(n, seed, args.messages, args.latency, args.interval, args.in_step, args.extra_levels)
            spans += got
            costs.append(cost)
        spans.sort()
        p99 = spans[min(len(spans) - 1, math.ceil(0.99 * len(spans)) - 1)]
        print(f"| {n} | {math.ceil(math.log2(n))} | {statistics.median(spans):.2f} | {p99:.2f} | {spans[-1]:.2f} "
              f"| {statistics.mean(costs):.2f} | {time.perf_counter() - started:.1f} |", flush=True)


if __name__ == "__main__":
    main()
