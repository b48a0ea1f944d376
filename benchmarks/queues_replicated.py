"""The replicated queue's acceptance test (docs/queues.md): 3 replicas as real
processes, kill -9 of one during 10,000 sends; every acknowledged message is
received exactly once.

Replica 0 produces (``put_many`` in batches, logging the ids whose put
returned: acknowledged), replica 1 consumes (get, log, ack), replica 2 is the
victim by default (``--victim producer`` kills the producer instead). The
harness kills the victim with SIGKILL at a random moment while sends are under
way, then waits for the consumer to drain, and checks by id.

    python benchmarks/queues_replicated.py --messages 10000
    python benchmarks/queues_replicated.py --messages 10000 --victim producer
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SECRET = b"replicated bench secret"
BODY = struct.Struct(">Q")


async def replica(args: argparse.Namespace) -> None:
    import trio

    import sgcs
    from sgcs.services.queues.replicated import open_replicated_queue

    config = sgcs.Config(name=f"r{args.index}", secret=SECRET, multicast_group=args.multicast_group,
                         multicast_port=args.multicast_port, beacon_interval=0.2)
    out = open(Path(args.dir) / f"r{args.index}.ids", "a")
    async with sgcs.open_node(config) as node, open_replicated_queue(node, "jobs") as queue:
        with trio.fail_after(30):
            while len(queue.members) < 3:
                await trio.sleep(0.05)
        print("ready", flush=True)
        if args.index == 0:
            rng = random.Random(args.index)
            for start in range(0, args.messages, args.batch):
                ids = range(start, min(start + args.batch, args.messages))
                await queue.put_many([(BODY.pack(i) + bytes(64), rng.randrange(10)) for i in ids])
                out.write("".join(f"{i}\n" for i in ids))  # acknowledged: every replica holds them
                out.flush()
            print("done", flush=True)
            await trio.sleep_forever()
        elif args.index == 1:
            idle_since = trio.current_time()
            while trio.current_time() - idle_since < args.idle:
                batch = await queue.get_many(256, timeout=0.5)
                if batch:
                    idle_since = trio.current_time()
                    out.write("".join(f"{BODY.unpack_from(m.body)[0]}\n" for m in batch))
                    out.flush()
                    await queue.ack(batch)
            print("done", flush=True)
        else:
            await trio.sleep_forever()


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def read_ids(path: Path) -> list[int]:
    return [int(line) for line in path.read_text().split()] if path.exists() else []


def harness(args: argparse.Namespace) -> int:
    rng = random.Random(args.seed)
    args.dir = args.dir or tempfile.mkdtemp(prefix="sgcs-rq-")
    net = random.SystemRandom()
    group, port = f"239.255.{net.randrange(256)}.{net.randrange(1, 255)}", free_port()
    print(f"seed {args.seed}; replay: python benchmarks/queues_replicated.py --messages {args.messages} "
          f"--victim {args.victim} --seed {args.seed}; files in {args.dir}")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    procs = []
    for index in range(3):
        cmd = [sys.executable, "-P", __file__, "--index", str(index), "--dir", args.dir, "--messages",
               str(args.messages), "--batch", str(args.batch), "--idle", str(args.idle),
               "--multicast-group", group, "--multicast-port", str(port)]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env,
                                      stderr=open(Path(args.dir) / f"r{index}.log", "w")))
    try:
        for proc in procs:
            assert proc.stdout is not None
            if proc.stdout.readline().strip() != "ready":
                raise SystemExit(f"a replica did not start; see {args.dir}")
        start = time.monotonic()
        victim = procs[0 if args.victim == "producer" else 2]
        acked_at_kill = 0
        time.sleep(rng.uniform(0.2, args.kill_within))
        os.kill(victim.pid, signal.SIGKILL)
        victim.wait()
        acked_at_kill = len(read_ids(Path(args.dir) / "r0.ids"))
        print(f"killed replica {procs.index(victim)} after {time.monotonic() - start:.2f} s, "
              f"{acked_at_kill} puts acknowledged then", flush=True)
        if args.victim != "producer":
            assert procs[0].stdout is not None
            if procs[0].stdout.readline().strip() != "done":
                raise SystemExit(f"the producer did not finish; see {args.dir}/r0.log")
        produced = time.monotonic() - start
        assert procs[1].stdout is not None
        if procs[1].stdout.readline().strip() != "done":
            raise SystemExit(f"the consumer did not finish; see {args.dir}/r1.log")
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    acked, received = read_ids(Path(args.dir) / "r0.ids"), read_ids(Path(args.dir) / "r1.ids")
    duplicates = len(received) - len(set(received))
    lost = len(set(acked) - set(received))
    ok = duplicates == 0 and lost == 0 and (args.victim == "producer" or len(set(acked)) == args.messages)
    print(json.dumps({"messages": args.messages, "victim": args.victim, "acknowledged": len(acked),
                      "acknowledged_at_kill": acked_at_kill, "received": len(received),
                      "acknowledged_lost": lost, "duplicates": duplicates,
                      "put_msg_per_s": round(len(acked) / produced) if args.victim != "producer" else None,
                      "exactly_once": ok}))
    return 0 if ok else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--index", type=int)
    parser.add_argument("--dir")
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--victim", choices=("replica", "producer"), default="replica")
    parser.add_argument("--kill-within", type=float, default=1.5, help="the kill comes within this many seconds")
    parser.add_argument("--idle", type=float, default=5.0, help="the consumer stops after this many idle seconds")
    parser.add_argument("--seed", type=int, default=random.SystemRandom().randrange(10**6))
    parser.add_argument("--multicast-group")
    parser.add_argument("--multicast-port", type=int)
    args = parser.parse_args()
    if args.index is not None:
        import trio

        trio.run(replica, args)
        return 0
    return harness(args)


if __name__ == "__main__":
    sys.exit(main())
