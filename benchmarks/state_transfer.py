"""State transfer to a joiner (``join(..., state=...)``, docs/library.md),
measured: four members hold a state of ``--megabytes`` and each multicasts
``--rate`` messages per second in total order; a fifth joins. Reports the
time from its join until it holds state, the longest wait of one ``send`` of
the four writers meanwhile (their stall), the rate they achieved, peak
memory, and whether the joiner ends with the state of a member that stayed
(the state is the blob plus a hash chain of every delivery).

The four writers run in this process, the joiner in a process of its own
(over loopback multicast), so memory is told apart: the joiner's peak RSS is
its own, read when it has loaded the state; the provider's is the largest
rise of this process's RSS during the transfer, sampled every 5 ms, over its
RSS just before the join (the other three writers allocate nothing more
meanwhile).

    python benchmarks/state_transfer.py --megabytes 100 --rate 1000
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import resource
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import trio

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
    import sgcs

    rng = random.SystemRandom()
    net: dict[str, Any] = {"multicast_group": f"239.255.{rng.randrange(1, 255)}.{rng.randrange(1, 255)}",
           "multicast_port": 40_000 + rng.randrange(20_000), "beacon_interval": 0.2}
    blob = random.Random(1).randbytes(args.megabytes * 1_000_000)
    states = [Chained(blob) for _ in range(4)]
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
        rss_before, rss_during = _rss_mb(), [0]

        async def sample() -> None:  # this process's RSS while the provider (in it) sends the snapshot
            while True:
                rss_during[0] = max(rss_during[0], _rss_mb())
                await trio.sleep(0.005)

        nursery.start_soon(sample)
        command = [sys.executable, __file__, "--joiner", "--multicast-group", net["multicast_group"],
                   "--multicast-port", str(net["multicast_port"])]
        joiner = await trio.lowlevel.open_process(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        try:
            assert joiner.stdout is not None and joiner.stdin is not None
            lines = _lines(joiner.stdout)
            with trio.fail_after(60):
                assert (await lines.__anext__())["joining"]
            before, sent_before, joined = len(stalls), sent, time.monotonic()
            with trio.fail_after(600):
                loaded = await lines.__anext__()
                assert loaded["has_state"]
            transfer = time.monotonic() - joined
            during, rate = stalls[before:], (sent - sent_before) / transfer
            await trio.sleep(1.0)
            writing = False
            rss_after = rss_during[0]
            with trio.fail_after(60):
                while len({s.count for s in states}) != 1:
                    await trio.sleep(0.05)
                while True:  # the joiner's count and state, once it caught up with the writers
                    await joiner.stdin.send_all(b"report\n")
                    report = await lines.__anext__()
                    # no await from here to the digest: a member that stayed
                    # cannot deliver more in between (sends still in flight)
                    if report["count"] == states[0].count:
                        equal = report["digest"] == _digest(states[0])
                        break
                    await trio.sleep(0.1)
            await joiner.stdin.send_all(b"stop\n")
        finally:
            with trio.move_on_after(10):
                await joiner.wait()
            joiner.kill()
        nursery.cancel_scope.cancel()
    return {"megabytes": args.megabytes, "rate_asked_per_member": args.rate,
            "rate_during_transfer_total": round(rate), "transfer_s": round(transfer, 2),
            "longest_send_during_s": round(max(during, default=0.0), 3), "sends_during": len(during),
            "writers_rss_before_mb": rss_before, "provider_added_peak_rss_mb": rss_after - rss_before,
            "joiner_peak_rss_at_load_mb": loaded["peak_rss_mb"],
            "joiner_equal": equal, "deliveries_per_member": states[0].count}


def _peak_rss_mb() -> int:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)


def _rss_mb() -> int:
    """This process's resident memory now (``VmRSS``), in MB."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024)
    return 0


def _digest(state: Chained) -> str:
    return hashlib.blake2b(state.get_state(), digest_size=16).hexdigest()


async def _lines(stream: trio.abc.ReceiveStream) -> AsyncIterator[dict[str, Any]]:
    buffer = b""
    while True:
        while b"\n" not in buffer:
            chunk = await stream.receive_some()
            if not chunk:
                raise RuntimeError("the joiner process ended early")
            buffer += chunk
        line, buffer = buffer.split(b"\n", 1)
        yield json.loads(line)


async def joiner(args: argparse.Namespace) -> None:
    """The fifth member, in a process of its own: says when it joins and when
    it holds state, then reports its deliveries and state digest on request."""
    import sgcs

    state = Chained(b"")
    config = sgcs.Config(name="s4", secret=SECRET, multicast_group=args.multicast_group,
                         multicast_port=args.multicast_port, beacon_interval=0.2)
    say = lambda **fields: print(json.dumps(fields), flush=True)  # noqa: E731
    stdin = trio.lowlevel.FdStream(os.dup(0))
    async with sgcs.open_node(config) as node, trio.open_nursery() as nursery:
        say(joining=True)
        async with node.join("bench", order="total", state=state) as group:

            async def consume() -> None:
                async for event in group:
                    if isinstance(event, sgcs.Delivery):
                        state.apply(event.payload)

            nursery.start_soon(consume)
            while not group.has_state:  # type: ignore[attr-defined]
                await trio.sleep(0.01)
            say(has_state=True, peak_rss_mb=_peak_rss_mb())
            async for request in _requests(stdin):
                if request == "stop":
                    break
                say(count=state.count, digest=_digest(state), peak_rss_mb=_peak_rss_mb())
            nursery.cancel_scope.cancel()


async def _requests(stream: trio.abc.ReceiveStream) -> AsyncIterator[str]:
    buffer = b""
    while True:
        chunk = await stream.receive_some()
        if not chunk:
            return
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            yield line.decode().strip()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--megabytes", type=int, default=100)
    parser.add_argument("--rate", type=float, default=1000.0, help="multicasts per second per member")
    parser.add_argument("--joiner", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--multicast-group", help=argparse.SUPPRESS)
    parser.add_argument("--multicast-port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.joiner:
        trio.run(joiner, args)
        return 0
    if args.megabytes < 0 or args.rate <= 0:
        parser.error("--megabytes must be at least 0 and --rate positive")
    result = trio.run(measure, args)
    print(json.dumps(result))
    return 0 if result["joiner_equal"] else 1


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
