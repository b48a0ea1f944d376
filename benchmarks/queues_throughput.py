"""Durable queue throughput: sgcs queues (local and remote) against persist-queue (docs/queues.md, "Figures").

Local: one ``QueueStore`` file, 100-byte messages, put one at a time (one
commit each), put in batches of 100 (one commit each batch), get + ack one at
a time, get + ack in batches of 100; fsync ``full`` (persist-queue's setting:
WAL with SQLite's default synchronous=FULL) and ``normal``.

persist-queue (``SQLiteQueue`` and ``SQLiteAckQueue``, auto_commit, same file
system) runs in its own venv (``--pq-python``, default /tmp/pq-venv/bin/python;
``python3 -m venv /tmp/pq-venv && /tmp/pq-venv/bin/pip install persist-queue``).

Remote: a queue manager in another process on loopback; this process's
manager puts N messages to ``q@m`` (timed until ``m`` acknowledged the last
one, i.e. committed it) and then gets them with ack (batches of 512).

    python benchmarks/queues_throughput.py --messages 20000

Push (``--push``): one queue manager in this process, a durable queue of N
messages, drained four ways, each message acknowledged on its own: the get
loop (``qm.get`` + ``qm.ack``, one at a time), ``qm.get_many`` in batches of
the prefetch (one ack per message), a session's async iterator
(``session.messages(prefetch=P)``) and a session's callback
(``session.subscribe``). ``--runs`` rounds, the four modes alternated in each
round; the medians are printed.

    python benchmarks/queues_throughput.py --push --messages 20000 --runs 3
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

BODY = bytes(100)
SECRET = b"queues throughput secret"


def rate(count: int, seconds: float) -> int:
    return round(count / seconds)


def local(messages: int, fsync: str, directory: Path) -> dict[str, int]:
    from sgcs.services.queues.store import QueueStore

    out = {}
    store = QueueStore(directory / f"local-{fsync}.db", fsync=fsync)
    store.bind("q")
    t = time.perf_counter()
    for _ in range(messages):
        store.put("q", BODY, random.randrange(10))
    out["put x1"] = rate(messages, time.perf_counter() - t)
    t = time.perf_counter()
    for start in range(0, messages, 100):
        store.put_many("q", [(BODY, random.randrange(10)) for _ in range(100)])
    out["put x100"] = rate(messages, time.perf_counter() - t)
    t = time.perf_counter()
    for _ in range(messages):
        (m,) = store.get("q", "c")
        store.ack([m.tag], "c")
    out["get+ack x1"] = rate(messages, time.perf_counter() - t)
    t = time.perf_counter()
    for _ in range(0, messages, 100):
        batch = store.get("q", "c", 100)
        store.ack([m.tag for m in batch], "c")
    out["get+ack x100"] = rate(messages, time.perf_counter() - t)
    store.close()
    return out


PQ = textwrap.dedent("""
    import json, sys, time, tempfile
    from persistqueue import SQLiteQueue, SQLiteAckQueue
    n = int(sys.argv[1]); body = bytes(100); out = {}
    q = SQLiteQueue(tempfile.mkdtemp(), auto_commit=True)
    t = time.perf_counter()
    for _ in range(n): q.put(body)
    out["put x1"] = round(n / (time.perf_counter() - t))
    t = time.perf_counter()
    for _ in range(n): q.get()
    out["get x1"] = round(n / (time.perf_counter() - t))
    a = SQLiteAckQueue(tempfile.mkdtemp(), auto_commit=True)
    t = time.perf_counter()
    for _ in range(n): a.put(body)
    out["ack queue put x1"] = round(n / (time.perf_counter() - t))
    t = time.perf_counter()
    for _ in range(n):
        item = a.get(raw=True); a.ack(id=item["pqid"])
    out["ack queue get+ack x1"] = round(n / (time.perf_counter() - t))
    print(json.dumps(out))
""")


def persist_queue(messages: int, python: str) -> dict[str, int] | None:
    if not Path(python).exists():
        return None
    done = subprocess.run([python, "-c", PQ, str(messages)], capture_output=True, text=True, timeout=1_800)
    if done.returncode:
        print(done.stderr, file=sys.stderr)
        return None
    return json.loads(done.stdout)  # type: ignore[no-any-return]


MANAGER = textwrap.dedent("""
    import sys, trio, sgcs
    from sgcs.services.queues.manager import open_queue_manager
    async def main():
        config = sgcs.Config(name="m", secret=%r, multicast_group=sys.argv[1], multicast_port=int(sys.argv[2]),
                             beacon_interval=0.1)
        async with sgcs.open_node(config) as node, open_queue_manager(node, "m", path=sys.argv[3],
                                                                       fsync=sys.argv[4]) as m:
            m.create_queue("q")
            print("ready", flush=True)
            await trio.sleep_forever()
    trio.run(main)
""" % SECRET)


def remote(messages: int, fsync: str, directory: Path) -> dict[str, int]:
    import trio

    import sgcs
    from sgcs.services.queues.manager import open_queue_manager

    rng = random.SystemRandom()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    group = f"239.255.{rng.randrange(256)}.{rng.randrange(1, 255)}"
    proc = subprocess.Popen([sys.executable, "-c", MANAGER, group, str(port), str(directory / f"m-{fsync}.db"), fsync],
                            stdout=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    out: dict[str, int] = {}

    async def main() -> None:
        config = sgcs.Config(name="a", secret=SECRET, multicast_group=group, multicast_port=port, beacon_interval=0.1)
        async with sgcs.open_node(config) as node, open_queue_manager(node, "a", path=directory / f"a-{fsync}.db",
                                                                       fsync=fsync) as a:
            while "m" not in a.known_nodes:
                await trio.sleep(0.01)
            t = trio.current_time()
            for _ in range(0, messages, 100):
                await a.put_many("q@m", [(BODY, random.randrange(10)) for _ in range(100)])
            while a.store.xmit_count():
                await trio.sleep(0.005)
            out["remote put x100 (until committed at m)"] = rate(messages, trio.current_time() - t)
            t = trio.current_time()
            got = 0
            while got < messages:
                batch = await a.get_many("q@m", 512, timeout=5)
                await a.ack(batch)
                got += len(batch)
            out["remote get+ack x512"] = rate(messages, trio.current_time() - t)

    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        trio.run(main)
    finally:
        proc.kill()
        proc.wait()
    return out


PUSH_MODES = ("get loop x1", "get_many xP", "push iterator", "push callback")


def push(messages: int, prefetch: int, runs: int, fsync: str, directory: Path) -> dict[str, list[int]]:
    """msg/s of each drain mode over ``runs`` alternated rounds (a fresh queue each time)."""
    import trio

    import sgcs
    from sgcs.services.queues.manager import QueueManager, open_queue_manager
    from sgcs.services.queues.store import Message

    rng = random.SystemRandom()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    group = f"239.255.{rng.randrange(256)}.{rng.randrange(1, 255)}"
    rates: dict[str, list[int]] = {mode: [] for mode in PUSH_MODES}

    async def drain(qm: QueueManager, mode: str, queue: str) -> None:
        if mode == "get loop x1":
            for _ in range(messages):
                await qm.ack([await qm.get(queue, timeout=5)])
        elif mode == "get_many xP":
            got = 0
            while got < messages:
                batch = await qm.get_many(queue, prefetch, timeout=5)
                for message in batch:
                    await qm.ack([message])
                got += len(batch)
        elif mode == "push iterator":
            _, session = await qm.connect("bench")
            got = 0
            async for message in session.messages(queue, prefetch=prefetch):
                await session.ack([message])
                got += 1
                if got == messages:
                    break
            await session.unbind()
        else:
            _, session = await qm.connect("bench")
            done = trio.Event()
            count = 0

            async def callback(message: Message) -> None:
                nonlocal count
                await session.ack([message])
                count += 1
                if count == messages:
                    done.set()

            session.subscribe(queue, callback, prefetch=prefetch)
            await done.wait()
            await session.unbind()

    async def main() -> None:
        config = sgcs.Config(name="p", secret=SECRET, multicast_group=group, multicast_port=port, beacon_interval=0.1)
        async with sgcs.open_node(config) as node, open_queue_manager(node, "p", path=directory / f"push-{fsync}.db",
                                                                       fsync=fsync) as qm:
            for run in range(runs):
                order = PUSH_MODES if run % 2 == 0 else PUSH_MODES[::-1]
                for mode in order:
                    queue = f"q{run}{PUSH_MODES.index(mode)}"
                    qm.create_queue(queue)
                    for _ in range(0, messages, 1_000):
                        await qm.put_many(queue, [(BODY, rng.randrange(10)) for _ in range(1_000)])
                    t = trio.current_time()
                    await drain(qm, mode, queue)
                    rates[mode].append(rate(messages, trio.current_time() - t))
                    assert qm.store.info(queue).ready == qm.store.info(queue).leased == 0, mode

    trio.run(main)
    return rates


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--pq-python", default="/tmp/pq-venv/bin/python")
    parser.add_argument("--json", metavar="FSYNC", choices=("full", "normal", "off"),
                        help="only the local store with this fsync, as one JSON line (benchmarks/compare.py)")
    parser.add_argument("--push", action="store_true", help="only push delivery against the get loop (see above)")
    parser.add_argument("--prefetch", type=int, default=64, help="--push: prefetch and get_many batch (default 64)")
    parser.add_argument("--runs", type=int, default=3, help="--push: alternated rounds (default 3)")
    parser.add_argument("--fsync", default="normal", choices=("full", "normal", "off"), help="--push: store fsync")
    args = parser.parse_args()
    directory = Path(tempfile.mkdtemp(prefix="sgcs-qtput-"))
    if args.push:
        if args.messages % 1_000:
            parser.error("--push needs --messages in thousands")
        runs = push(args.messages, args.prefetch, args.runs, args.fsync, directory)
        print(f"{args.messages:,} messages of {len(BODY)} bytes, durable queue (fsync {args.fsync}), "
              f"prefetch {args.prefetch}, {args.runs} alternated rounds; each message acked on its own")
        print("| drain | median msg/s | runs |\n|---|---:|---|")
        for mode, values in runs.items():
            label = mode.replace("xP", f"x{args.prefetch}")
            print(f"| {label} | {statistics.median(values):,.0f} | {', '.join(f'{v:,}' for v in values)} |")
        return 0
    if args.json:
        figures = local(args.messages, args.json, directory)
        print(json.dumps({"messages": args.messages, "size": len(BODY), "fsync": args.json,
                          **{key.replace(" ", "_").replace("+", "_"): value for key, value in figures.items()}}))
        return 0
    rows: list[tuple[str, str, int]] = []
    for fsync in ("full", "normal"):
        for op, value in local(args.messages, fsync, directory).items():
            rows.append((f"sgcs QueueStore, fsync {fsync}", op, value))
    pq = persist_queue(args.messages, args.pq_python)
    for op, value in (pq or {}).items():
        rows.append(("persist-queue 1.x SQLite (WAL, synchronous FULL)", op, value))
    for fsync in ("full", "normal"):
        for op, value in remote(args.messages, fsync, directory).items():
            rows.append((f"sgcs queue manager, remote over loopback, fsync {fsync}", op, value))
    print(f"{args.messages:,} messages of {len(BODY)} bytes; msg/s")
    print("| queue | operation | msg/s |\n|---|---|---:|")
    for who, op, value in rows:
        print(f"| {who} | {op} | {value:,} |")
    if pq is None:
        print(f"(persist-queue not measured: no {args.pq_python})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
