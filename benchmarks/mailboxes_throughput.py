"""End-to-end mail throughput: mails per second from send to pull, within one
domain and across two domains, with real post offices (sgcs nodes on
loopback, SQLite WAL), in one process (docs/mailboxes.md, "Measured").

    PYTHONPATH=. python benchmarks/mailboxes_throughput.py [--mails 20000] [--batch 100]
"""

from __future__ import annotations

import argparse
import os
import random
import socket
import sys
import tempfile
import time

import trio

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import sgcs  # noqa: E402
from sgcs.services.mailboxes.postoffice import Settings  # noqa: E402
from sgcs.services.mailboxes.service import PostOfficeService, open_post_office  # noqa: E402


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def measure(sender_po: PostOfficeService, receiver_po: PostOfficeService, sender: str, receiver: str,
                  mails: int, batch: int) -> float:
    received = 0
    start = time.perf_counter()

    async def pull() -> None:
        nonlocal received
        while received < mails:
            received += len(await receiver_po.pull(receiver))
            await trio.sleep(0.001)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(pull)
        payload = b"x" * 200
        for i in range(0, mails, batch):
            await sender_po.send_many(sender, [(receiver, payload)] * min(batch, mails - i))
    return mails / (time.perf_counter() - start)


async def main(args: argparse.Namespace) -> None:
    rng = random.Random()
    network = {"multicast_group": f"239.255.{rng.randrange(256)}.{rng.randrange(1, 255)}",
               "multicast_port": free_udp_port()}
    run = tempfile.mkdtemp(prefix="mailboxes-tput-")
    settings = Settings(outbox_max=20_000)

    def config(name: str) -> sgcs.Config:
        return sgcs.Config(name=name, secret=b"throughput-secret", beacon_interval=0.1, **network)

    async with open_post_office(0, config("po0"), os.path.join(run, "po0.db"), settings=settings) as po0, \
            open_post_office(1, config("po1"), os.path.join(run, "po1.db"), settings=settings) as po1:
        while not (po0.peers() and po1.peers()):
            await trio.sleep(0.05)
        a, b, c = po0.mi_name("h", "a"), po0.mi_name("h", "b"), po1.mi_name("h", "c")
        for po, name in ((po0, a), (po0, b), (po1, c)):
            await po.create_mi(name)
        await measure(po0, po1, a, c, 200, args.batch)  # warm-up: resolves c through its home
        same = await measure(po0, po0, a, b, args.mails, args.batch)
        across = await measure(po0, po1, a, c, args.mails, args.batch)
        if args.verbose:
            print(po0.statistics(), po1.statistics())
    print(f"{args.mails} mails of 200 bytes, send_many batches of {args.batch}, pulled as they come:")
    print(f"  same domain:   {same:8.0f} mails/s end to end")
    print(f"  across domains: {across:8.0f} mails/s end to end")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mails", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--verbose", action="store_true")
    trio.run(main, parser.parse_args())
