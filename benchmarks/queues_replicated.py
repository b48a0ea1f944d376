"""The replicated queue's acceptance test (docs/queues.md): 3 replicas as real
processes, kill -9 of one during 10,000 sends; every acknowledged message is
received exactly once.

Replica 0 produces (``put_many`` in batches, logging the ids whose put
returned: acknowledged), replica 1 consumes (get, log, ack), replica 2 is the
victim by default (``--victim producer`` kills the producer instead). The
harness kills the victim with SIGKILL at a random moment while sends are under
way, then waits for the consumer to drain, and checks by id. With
``--restart-after N`` the killed replica starts again once N more puts were
acknowledged; it catches up by state transfer, and at the end every replica
reports its state (ops applied, a digest of its queue, tags, dead messages and
dedup ids), which must be equal. With ``--durable`` each replica keeps its
state in a file (``rN.sqlite``): the restarted one begins from it, then
loads the snapshot of what it missed.

    python benchmarks/queues_replicated.py --messages 10000
    python benchmarks/queues_replicated.py --messages 10000 --victim producer
    python benchmarks/queues_replicated.py --messages 20000 --restart-after 10000
"""

from __future__ import annotations

import argparse
import hashlib
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
    path = Path(args.dir) / f"r{args.index}.sqlite" if args.durable else None
    async with sgcs.open_node(config) as node, open_replicated_queue(node, "jobs", replicas=3, path=path) as queue, \
            trio.open_nursery() as nursery:
        nursery.start_soon(report_state, queue, Path(args.dir), args.index)
        with trio.fail_after(30):
            while len(queue.members) < 3 or (args.rejoin and not queue.transfers):
                await trio.sleep(0.05)
        print("ready", flush=True)
        if args.rejoin:
            await trio.sleep_forever()
        if args.index == 0:
            rng = random.Random(args.index)
            for start in range(0, args.messages, args.batch):
                ids = range(start, min(start + args.batch, args.messages))
                pad = bytes(max(0, args.size - BODY.size))
                await queue.put_many([(BODY.pack(i) + pad, rng.randrange(10)) for i in ids])
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
            await trio.sleep_forever()  # until the harness has its state
        else:
            await trio.sleep_forever()


async def report_state(queue: object, workdir: Path, index: int) -> None:
    """Once the harness asks (a file ``report``), write this replica's state when it
    has applied nothing new for half a second."""
    import trio

    while not (workdir / "report").exists():
        await trio.sleep(0.1)
    last = -1
    while last != queue.applied:  # type: ignore[attr-defined]
        last = queue.applied  # type: ignore[attr-defined]
        await trio.sleep(0.5)
    (workdir / f"r{index}.state").write_text(json.dumps(state_of(queue)))


def state_of(queue: object) -> dict[str, object]:
    db = queue.store._db  # type: ignore[attr-defined]
    digest = hashlib.blake2b(digest_size=16)
    for row in db.execute("SELECT seq, msg_id, priority, state, owner, deliveries, expires_at, body FROM messages "
                          "ORDER BY seq"):
        digest.update(repr(row).encode())
    digest.update(repr(db.execute("SELECT * FROM sqlite_sequence ORDER BY name").fetchall()).encode())
    digest.update(b"".join(queue._dedup))  # type: ignore[attr-defined]
    count = db.execute("SELECT count(*) FROM messages").fetchone()[0]
    return {"applied": queue.applied, "messages": count,  # type: ignore[attr-defined]
            "digest": digest.hexdigest(), "transfers": queue.transfers,  # type: ignore[attr-defined]
            "recovered": queue.recovered}  # type: ignore[attr-defined]


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
          f"--victim {args.victim} --seed {args.seed}"
          f"{'' if args.restart_after is None else f' --restart-after {args.restart_after}'}"
          f"{' --durable' if args.durable else ''}; files in {args.dir}")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    procs, commands = [], []
    for index in range(3):
        commands.append(cmd := [sys.executable, "-P", __file__, "--index", str(index), "--dir", args.dir, "--messages",
               str(args.messages), "--batch", str(args.batch), "--size", str(args.size), "--idle", str(args.idle),
               "--multicast-group", group, "--multicast-port", str(port), *(["--durable"] if args.durable else [])])
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
        if args.restart_after is not None and args.victim != "producer":
            while len(read_ids(Path(args.dir) / "r0.ids")) < acked_at_kill + args.restart_after:
                if procs[0].poll() is not None:
                    raise SystemExit(f"the producer ended; see {args.dir}/r0.log")
                time.sleep(0.05)
            procs[2] = subprocess.Popen([*commands[2], "--rejoin"], stdout=subprocess.PIPE, text=True, env=env,
                                        stderr=open(Path(args.dir) / "r2.rejoin.log", "w"))
            assert procs[2].stdout is not None
            if procs[2].stdout.readline().strip() != "ready":
                raise SystemExit(f"the restarted replica did not catch up; see {args.dir}/r2.rejoin.log")
            print(f"restarted replica 2 after {len(read_ids(Path(args.dir) / 'r0.ids')) - acked_at_kill} further "
                  "puts; it loaded a snapshot", flush=True)
        if args.victim != "producer":
            assert procs[0].stdout is not None
            if procs[0].stdout.readline().strip() != "done":
                raise SystemExit(f"the producer did not finish; see {args.dir}/r0.log")
        produced = time.monotonic() - start
        assert procs[1].stdout is not None
        if procs[1].stdout.readline().strip() != "done":
            raise SystemExit(f"the consumer did not finish; see {args.dir}/r1.log")
        states = final_states(args, procs)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    acked, received = read_ids(Path(args.dir) / "r0.ids"), read_ids(Path(args.dir) / "r1.ids")
    duplicates = len(received) - len(set(received))
    lost = len(set(acked) - set(received))
    ok = duplicates == 0 and lost == 0 and (args.victim == "producer" or len(set(acked)) == args.messages)
    same = len({(s["applied"], s["digest"]) for s in states.values()}) == 1
    ok = ok and (args.restart_after is None or (same and len(states) == 3))
    print(json.dumps({"states": states, "states_equal": same}))
    print(json.dumps({"messages": args.messages, "victim": args.victim, "acknowledged": len(acked),
                      "acknowledged_at_kill": acked_at_kill, "received": len(received),
                      "acknowledged_lost": lost, "duplicates": duplicates,
                      "put_msg_per_s": round(len(acked) / produced) if args.victim != "producer" else None,
                      "exactly_once": ok}))
    return 0 if ok else 1


def final_states(args: argparse.Namespace, procs: list[subprocess.Popen[str]]) -> dict[str, dict[str, object]]:
    """Ask the live replicas for their state (see ``report_state``)."""
    workdir = Path(args.dir)
    (workdir / "report").touch()
    live = [i for i, proc in enumerate(procs) if proc.poll() is None]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not all((workdir / f"r{i}.state").exists() for i in live):
        time.sleep(0.1)
    return {f"r{i}": json.loads((workdir / f"r{i}.state").read_text()) for i in live
            if (workdir / f"r{i}.state").exists()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--index", type=int)
    parser.add_argument("--dir")
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--size", type=int, default=72, help="bytes per message body (at least 8)")
    parser.add_argument("--victim", choices=("replica", "producer"), default="replica")
    parser.add_argument("--kill-within", type=float, default=1.5, help="the kill comes within this many seconds")
    parser.add_argument("--idle", type=float, default=5.0, help="the consumer stops after this many idle seconds")
    parser.add_argument("--restart-after", type=int, default=None,
                        help="restart the killed replica after this many further acknowledged puts")
    parser.add_argument("--rejoin", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--durable", action="store_true", help="replicas keep their state in files in --dir")
    parser.add_argument("--seed", type=int, default=random.SystemRandom().randrange(10**6))
    parser.add_argument("--multicast-group")
    parser.add_argument("--multicast-port", type=int)
    args = parser.parse_args()
    if args.size < BODY.size or args.messages < 1 or args.batch < 1:
        parser.error(f"--size must be at least {BODY.size}, --messages and --batch positive")
    if args.index is not None:
        import trio

        trio.run(replica, args)
        return 0
    return harness(args)


if __name__ == "__main__":
    sys.exit(main())
