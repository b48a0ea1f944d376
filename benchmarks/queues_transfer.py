"""State transfer of a replicated queue (docs/queues.md), measured: two
replicas hold a queue of ``--megabytes`` of messages, a writer keeps putting
``--rate`` messages per second, and a third replica joins. Reports the time
from the join until the newcomer has loaded the snapshot and applies ops, the
longest wait of one ``put`` meanwhile (the senders' stall), the process's peak
RSS, and whether the three replicas end with equal queues.

All three replicas run in this process over loopback multicast, so the RSS is
theirs together.

    python benchmarks/queues_transfer.py --megabytes 20
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import resource
import sys
import time
from contextlib import AsyncExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SECRET = b"replicated transfer bench secret"
BODY = 4_096


def digest(queue: object) -> str:
    db = queue.store._db  # type: ignore[attr-defined]
    h = hashlib.blake2b(digest_size=16)
    for row in db.execute("SELECT seq, msg_id, priority, state, owner, deliveries FROM messages ORDER BY seq"):
        h.update(repr(row).encode())
    return h.hexdigest()


async def measure(args: argparse.Namespace) -> dict[str, object]:
    import trio

    import sgcs
    from sgcs.services.queues.replicated import Standing, open_replicated_queue

    rng = random.SystemRandom()
    net = {"multicast_group": f"239.255.{rng.randrange(1, 255)}.{rng.randrange(1, 255)}",
           "multicast_port": 40_000 + rng.randrange(20_000), "beacon_interval": 0.2}
    async with AsyncExitStack() as stack:
        queues = []
        for i in range(2):
            node = await stack.enter_async_context(sgcs.open_node(sgcs.Config(name=f"q{i}", secret=SECRET, **net)))
            queues.append(await stack.enter_async_context(open_replicated_queue(node, "big", replicas=3)))
        a, b = queues
        # a first start needs the whole replica set; then the third leaves, to join again late
        async with sgcs.open_node(sgcs.Config(name="q2", secret=SECRET, **net)) as node, \
                open_replicated_queue(node, "big", replicas=3) as first, trio.fail_after(60):
            while not all(q.standing is Standing.SETTLED and len(q.members) == 3 for q in (a, b, first)):
                await trio.sleep(0.05)
        with trio.fail_after(60):
            while not all(q.standing is Standing.SETTLED and len(q.members) == 2 for q in (a, b)):
                await trio.sleep(0.05)
        count = args.megabytes * 1_000_000 // BODY
        filled = time.monotonic()
        for start in range(0, count, 200):
            await a.put_many([(rng.randbytes(BODY), 0) for _ in range(min(200, count - start))])
        filled = time.monotonic() - filled
        stalls: list[float] = []

        async def writer() -> None:
            while True:
                t0 = time.monotonic()
                await b.put(b"w" * 100, 1)
                stalls.append(time.monotonic() - t0)
                await trio.sleep(max(0.0, 1 / args.rate - (time.monotonic() - t0)))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(writer)
            await trio.sleep(1.0)
            before = len(stalls)
            joined = time.monotonic()
            async with sgcs.open_node(sgcs.Config(name="q2", secret=SECRET, **net)) as node, \
                    open_replicated_queue(node, "big", replicas=3) as c:
                with trio.fail_after(600):
                    while not (c.standing is Standing.SETTLED and c.transfers):
                        await trio.sleep(0.01)
                transfer = time.monotonic() - joined
                during = stalls[before:]
                await trio.sleep(1.0)
                nursery.cancel_scope.cancel()
                with trio.CancelScope(shield=True), trio.fail_after(30):
                    while len({q.applied for q in (a, b, c)}) != 1:
                        await trio.sleep(0.05)
                    equal = digest(a) == digest(b) == digest(c)
                    depth = c.depth()
        return {"megabytes": args.megabytes, "messages": count, "fill_s": round(filled, 2),
                "transfer_s": round(transfer, 2), "writes_during": len(during),
                "longest_put_during_s": round(max(during, default=0.0), 3),
                "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
                "states_equal": equal, "depth": depth}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--megabytes", type=int, default=20)
    parser.add_argument("--rate", type=float, default=100.0, help="puts per second during the transfer")
    args = parser.parse_args()
    if args.megabytes < 1 or args.rate <= 0:
        parser.error("--megabytes must be at least 1 and --rate positive")
    import trio

    result = trio.run(measure, args)
    print(json.dumps(result))
    return 0 if result["states_equal"] else 1


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
