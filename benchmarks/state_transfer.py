"""State transfer to a joiner (``join(..., state=...)``, docs/library.md),
measured: four members hold a state of ``--megabytes`` and each multicasts
``--rate`` messages per second in total order; a fifth joins. Reports the
time from its join until it holds state, the longest wait of one ``send`` of
the four writers meanwhile (their stall), the rate they achieved, the
process's peak RSS (all five members run in this process, over loopback
multicast), and whether the joiner ends with the state of a member that
stayed (the state is the blob plus a hash chain of every delivery).

    python benchmarks/state_transfer.py --megabytes 100 --rate 1000
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SECRET = b"state transfer bench secret"


class Chained:
    """A blob and a hash chain over every delivery."""

    def __init__(self, blob: bytes) -> None:
        self.blob, self.chain, self.count = blob, b"\0" * 16, 0

    def get_state(self) -> bytes:
        return self.chain + self.count.to_bytes(8, "big") + self.blob

    def set_state(self, state: bytes) -> None:
        self.chain, self.count, self.blob = state[:16], int.from_bytes(state[16:24], "big"), state[24:]

    def apply(self, payload: bytes) -> None:
        self.chain = hashlib.blake2b(self.chain + payload, digest_size=16).digest()
        self.count += 1


async def measure(args: argparse.Namespace) -> dict[str, object]:
    import trio

    import sgcs

    rng = random.SystemRandom()
    net = {"multicast_group": f"239.255.{rng.randrange(1, 255)}.{rng.randrange(1, 255)}",
           "multicast_port": 40_000 + rng.randrange(20_000), "beacon_interval": 0.2}
    blob = random.Random(1).randbytes(args.megabytes * 1_000_000)
    states = [Chained(blob) for _ in range(4)] + [Chained(b"")]
    groups: list[sgcs.GroupHandle] = []
    stalls: list[float] = []
    sent = 0
    writing = True

    async def member(index: int, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        config = sgcs.Config(name=f"s{index}", secret=SECRET, **net)
        async with sgcs.open_node(config) as node, node.join("bench", order="total", state=states[index]) as group:
            groups.append(group)
            task_status.started()
            async for event in group:
                if isinstance(event, sgcs.Delivery):
                    states[index].apply(event.payload)

    async def writer(group: sgcs.GroupHandle) -> None:
        nonlocal sent
        period = 1 / args.rate
        while writing:
            t0 = time.monotonic()
            await group.send(b"w" * 100)
            stalls.append(time.monotonic() - t0)
            sent += 1
            await trio.sleep(max(0.0, period - (time.monotonic() - t0)))

    async with trio.open_nursery() as nursery:
        for index in range(4):
            await nursery.start(member, index)
        with trio.fail_after(60):
            while not all(len(g.view.members) == 4 and g.has_state for g in groups):  # type: ignore[attr-defined]
                await trio.sleep(0.05)
        for group in list(groups):
            nursery.start_soon(writer, group)
        await trio.sleep(2.0)
        before, sent_before, joined = len(stalls), sent, time.monotonic()
        await nursery.start(member, 4)
        joiner = groups[4]
        with trio.fail_after(600):
            while not joiner.has_state:  # type: ignore[attr-defined]
                await trio.sleep(0.01)
        transfer = time.monotonic() - joined
        during, rate = stalls[before:], (sent - sent_before) / transfer
        await trio.sleep(1.0)
        writing = False
        with trio.fail_after(60):
            while len({s.count for s in states}) != 1:
                await trio.sleep(0.05)
        equal = states[4].get_state() == states[0].get_state()
        nursery.cancel_scope.cancel()
    return {"megabytes": args.megabytes, "rate_asked_per_member": args.rate,
            "rate_during_transfer_total": round(rate), "transfer_s": round(transfer, 2),
            "longest_send_during_s": round(max(during, default=0.0), 3), "sends_during": len(during),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
            "joiner_equal": equal, "deliveries_per_member": states[0].count}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--megabytes", type=int, default=100)
    parser.add_argument("--rate", type=float, default=1000.0, help="multicasts per second per member")
    args = parser.parse_args()
    if args.megabytes < 0 or args.rate <= 0:
        parser.error("--megabytes must be at least 0 and --rate positive")
    import trio

    result = trio.run(measure, args)
    print(json.dumps(result))
    return 0 if result["joiner_equal"] else 1


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
