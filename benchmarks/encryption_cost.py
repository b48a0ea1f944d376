"""Encryption's cost in ``sgcs bench`` throughput, as a ratio.

Alternates plain and encrypted runs of the same bench (so both see the same
machine noise) and prints each run, the medians and encrypted / plain. First
it times sealing and opening one full datagram both ways, since on a noisy
machine the bench ratio may hide a cost of a few microseconds.

    python benchmarks/encryption_cost.py [--pairs 3] [--members 4] [--messages 10000] [--size 1000]
"""

from __future__ import annotations

import argparse
import statistics
import timeit

from sgcs.apps.bench import BenchOptions, run_bench
from sgcs.security import Sealer
from sgcs.wire import Flag, MsgType, decode_datagram_untrusted


def per_datagram_microseconds(size: int = 1_300, repeat: int = 5, number: int = 20_000) -> dict[bool, float]:
    """Median over ``repeat`` of the time to seal and open one datagram, in µs."""
    body = bytes(range(256)) * (size // 256) + bytes(size % 256)
    costs = {}
    for encrypt in (False, True):
        sealer = Sealer(b"benchmark-secret", 1, 1 << 32, encrypt)

        def round_trip() -> None:
            decode_datagram_untrusted(bytes(sealer.seal(MsgType.DATA, Flag.NONE, body)), sealer.key, sealer.cipher)

        costs[encrypt] = statistics.median(timeit.repeat(round_trip, repeat=repeat, number=number)) / number * 1e6
    return costs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--members", type=int, default=4)
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--size", type=int, default=1_000)
    parser.add_argument("--order", default="fifo")
    args = parser.parse_args()
    costs = per_datagram_microseconds()
    print(f"seal + open one 1,300-byte datagram: plain {costs[False]:.1f} µs, encrypted {costs[True]:.1f} µs",
          flush=True)
    rates: dict[bool, list[float]] = {False: [], True: []}
    for pair in range(args.pairs):
        for encrypt in (False, True):
            options = BenchOptions(members=args.members, messages=args.messages, size=args.size, order=args.order,
                                   encrypt=encrypt)
            report = run_bench(options, progress=False)
            rates[encrypt].append(statistics.median(report.rates))
            print(f"pair {pair + 1}: {report.summary()}", flush=True)
    plain, encrypted = statistics.median(rates[False]), statistics.median(rates[True])
    print(f"median msg/s per member: plain {plain:,.0f}, encrypted {encrypted:,.0f}; "
          f"encrypted / plain = {encrypted / plain:.3f} over {args.pairs} pairs")


if __name__ == "__main__":
    main()
