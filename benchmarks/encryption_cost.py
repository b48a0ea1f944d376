"""Encryption's cost in ``sgcs bench`` throughput, as a ratio.

Alternates plain and encrypted runs of the same bench (so both see the same
machine noise) and prints each run, the medians and encrypted / plain.

    python benchmarks/encryption_cost.py [--pairs 3] [--members 4] [--messages 10000] [--size 1000]
"""

from __future__ import annotations

import argparse
import statistics

from sgcs.bench import BenchOptions, run_bench


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--members", type=int, default=4)
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--size", type=int, default=1_000)
    parser.add_argument("--order", default="fifo")
    args = parser.parse_args()
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
