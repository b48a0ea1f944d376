"""The queues' crash test with real processes (docs/queues.md, "Figures").

A producer process sends N messages with random priorities to the durable
queue ``q`` on another node's queue manager (store and forward); a consumer
process receives them from there with acknowledgement, and records each id in
its own SQLite file in one transaction before acking (so a redelivery after a
crash is recognised). The harness kills -9 the producer, the remote queue
manager and the consumer at random moments, at least ``--kills`` times each,
and restarts each one (with a new member id; the SQLite files stay).

Afterwards it checks, counted by id:
* the remote queue committed every message exactly once (the manager's audit
  table records every commit of a forwarded message: store and forward is
  exactly once);
* the consumer recorded every message exactly once, none lost (the consumer's
  receive is at least once; redeliveries are reported);
* the producer's transmission queue is empty.

    python benchmarks/queues_crash.py --messages 100000 --kills 10
    python benchmarks/queues_crash.py --messages 100000 --kills 0 --fsync full   # throughput, no kills
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import socket
import sqlite3
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SECRET = b"queues crash bench secret"
BODY = struct.Struct(">Q")
PAD = 100


def network_args(args: argparse.Namespace) -> dict[str, Any]:
    return {"multicast_group": args.multicast_group, "multicast_port": args.multicast_port,
            "beacon_interval": 0.2}


async def run_producer(args: argparse.Namespace) -> None:
    import trio

    import sgcs
    from sgcs.services.queues.manager import open_queue_manager

    rng = random.Random()
    config = sgcs.Config(name="producer", secret=SECRET, **network_args(args))
    async with sgcs.open_node(config) as node, open_queue_manager(
            node, "p", path=Path(args.dir) / "p.db", fsync=args.fsync, retry=0.5) as manager:
        store = manager.store
        start = time.monotonic()
        sent_at_start = store.xmit_total()
        while (done := store.xmit_total()) < args.messages:
            count = min(args.batch, args.messages - done)
            batch = [(BODY.pack(done + i) + bytes(PAD), rng.randrange(10)) for i in range(count)]
            await manager.put_many("q@m", batch)  # returns once committed locally
            if args.rate:
                ahead = (store.xmit_total() - sent_at_start) / args.rate - (time.monotonic() - start)
                if ahead > 0:
                    await trio.sleep(ahead)
            else:
                await trio.sleep(0)
        while store.xmit_count():
            await trio.sleep(0.05)
        print(json.dumps({"role": "producer", "event": "done"}), flush=True)


async def run_manager(args: argparse.Namespace) -> None:
    import trio

    import sgcs
    from sgcs.services.queues.manager import open_queue_manager

    config = sgcs.Config(name="manager", secret=SECRET, **network_args(args))
    async with sgcs.open_node(config) as node, open_queue_manager(
            node, "m", path=Path(args.dir) / "m.db", fsync=args.fsync, audit=True) as manager:
        if not manager.store.is_bound("q"):
            manager.create_queue("q")
        print(json.dumps({"role": "manager", "event": "ready"}), flush=True)
        await trio.sleep_forever()


def open_received(path: Path, fsync: str) -> sqlite3.Connection:
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute(f"PRAGMA synchronous={ {'full': 'FULL', 'normal': 'NORMAL', 'off': 'OFF'}[fsync] }")
    db.execute("CREATE TABLE IF NOT EXISTS received(app_id INTEGER PRIMARY KEY, msg_id BLOB, priority INTEGER)")
    db.execute("CREATE TABLE IF NOT EXISTS counters(name TEXT PRIMARY KEY, value INTEGER)")
    return db


async def run_consumer(args: argparse.Namespace) -> None:
    import sgcs
    from sgcs.services.queues.manager import open_queue_manager

    db = open_received(Path(args.dir) / "c.db", args.fsync)
    config = sgcs.Config(name="consumer", secret=SECRET, **network_args(args))
    async with sgcs.open_node(config) as node, open_queue_manager(node, "c") as manager:
        while True:
            count = db.execute("SELECT count(*) FROM received").fetchone()[0]
            if count >= args.messages:
                break
            batch = await manager.get_many("q@m", 512, timeout=2.0, lease=10.0)
            if not batch:
                continue
            db.execute("BEGIN IMMEDIATE")
            before = db.total_changes
            db.executemany("INSERT OR IGNORE INTO received VALUES(?, ?, ?)",
                           [(BODY.unpack_from(m.body)[0], m.msg_id, m.priority) for m in batch])
            fresh = db.total_changes - before
            db.executemany("INSERT INTO counters VALUES(?, ?) ON CONFLICT(name) DO UPDATE "
                           "SET value=value+excluded.value",
                           [("redelivered", len(batch) - fresh),
                            ("handed_out_again", sum(m.deliveries > 1 for m in batch))])
            db.execute("COMMIT")  # recorded: now the ack may go
            await manager.ack(batch)
    print(json.dumps({"role": "consumer", "event": "done"}), flush=True)


async def run_churn(args: argparse.Namespace) -> None:
    """A node that joins the queue managers' group for a while, asks the queue
    manager for a queue that does not exist, and leaves (or is killed)."""
    import trio

    import sgcs
    from sgcs.services.queues.manager import open_queue_manager

    config = sgcs.Config(name="churn", secret=SECRET, **network_args(args))
    async with sgcs.open_node(config) as node, open_queue_manager(node, f"churn-{os.getpid()}") as manager:
        with trio.move_on_after(random.uniform(2.0, 15.0)):
            while True:
                try:
                    await manager.get("nothing@m", timeout=1.0)
                except sgcs.UsageError:
                    pass  # "not bound at node m": the answer we expect
                except TimeoutError:
                    pass  # m is restarting: nobody answered
                await trio.sleep(0.5)
    print(json.dumps({"role": "churn", "event": "done"}), flush=True)


ROLES = {"producer": run_producer, "manager": run_manager, "consumer": run_consumer}
ALL_ROLES = {**ROLES, "churn": run_churn}


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Harness:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.procs: dict[str, subprocess.Popen[str]] = {}
        self.kills = {role: 0 for role in ROLES}
        self.finished: set[str] = set()
        self.churned = 0
        self.paused = 0.0
        self.churn_killed = 0
        self.logs = {role: open(Path(args.dir) / f"{role}.log", "a") for role in ROLES}

    def start(self, role: str) -> None:
        a = self.args
        cmd = [sys.executable, "-P", __file__, "--role", role, "--dir", a.dir, "--messages", str(a.messages),
               "--fsync", a.fsync, "--batch", str(a.batch), "--rate", str(a.rate),
               "--multicast-group", a.multicast_group, "--multicast-port", str(a.multicast_port)]
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        self.procs[role] = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self.logs[role], text=True, env=env)
        os.set_blocking(self.procs[role].stdout.fileno(), False)  # type: ignore[union-attr]

    def poll(self) -> None:
        for role, proc in list(self.procs.items()):
            try:
                out = proc.stdout.read() if proc.stdout else None
            except (BlockingIOError, TypeError):
                out = None
            if out and '"done"' in out:
                self.finished.add(role)
            code = proc.poll()
            if code is not None and role not in self.finished:
                raise SystemExit(f"{role} exited with {code} without finishing; see {self.args.dir}/{role}.log")

    def kill(self, role: str) -> None:
        proc = self.procs[role]
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            self.kills[role] += 1

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def harness(args: argparse.Namespace) -> int:
    args.dir = args.dir or tempfile.mkdtemp(prefix="sgcs-queues-crash-")
    rng = random.Random(args.seed)
    print(f"seed {args.seed}; replay: python benchmarks/queues_crash.py --messages {args.messages} "
          f"--kills {args.kills} --fsync {args.fsync} --rate {args.rate} --seed {args.seed}; files in {args.dir}")
    h = Harness(args)
    victims = [v for v in args.victims.split(",") if v]
    unknown = set(victims) - set(ROLES)
    if unknown:
        raise SystemExit(f"--victims: unknown roles {sorted(unknown)}")
    for role in ("manager", "consumer", "producer"):
        h.start(role)
    start = time.monotonic()
    next_kill = start + rng.uniform(1.0, 3.0)
    next_churn = start + args.churn_every
    next_rss = start
    last_report = start
    churn: list[tuple[subprocess.Popen[str], float, bool]] = []  # process, end time, kill it
    churn_log = open(Path(args.dir) / "churn.log", "a")
    rss_file = open(Path(args.dir) / "rss.csv", "a")
    try:
        while "consumer" not in h.finished:
            time.sleep(0.05)
            if args.pause_while and os.path.exists(args.pause_while):
                paused = pause_while_quiet(args.pause_while, [*h.procs.values(), *(c[0] for c in churn)])
                start += paused  # the machine's quiet time is not soak time
                h.paused += paused
                next_kill, next_churn, next_rss, last_report = (x + paused for x in
                                                               (next_kill, next_churn, next_rss, last_report))
                churn = [(proc, end + paused, kill) for proc, end, kill in churn]
            h.poll()
            now = time.monotonic()
            if now - start > args.timeout:
                raise SystemExit(f"not done after {args.timeout} s; see logs in {args.dir}")
            if args.kills and victims and now >= next_kill:
                candidates = [r for r in victims if r not in h.finished
                              and (args.keep_killing or h.kills[r] < args.kills)]
                if candidates:
                    fewest = min(h.kills[r] for r in candidates)
                    role = rng.choice([r for r in candidates if h.kills[r] == fewest])
                    h.kill(role)
                    time.sleep(rng.uniform(0.1, 0.6))
                    h.start(role)
                next_kill = time.monotonic() + rng.uniform(args.kill_every * 0.5, args.kill_every * 1.5)
            if args.churn_every and now >= next_churn:
                next_churn = now + args.churn_every
                churn.append((start_churn(args, churn_log), now + rng.uniform(2.0, 12.0), rng.random() < 0.5))
                h.churned += 1
            for entry in list(churn):
                proc, end, kill = entry
                if proc.poll() is not None:
                    churn.remove(entry)
                elif kill and now >= end:
                    os.kill(proc.pid, signal.SIGKILL)
                    proc.wait()
                    h.churn_killed += 1
                    churn.remove(entry)
            if args.rss_every and now >= next_rss:
                next_rss = now + args.rss_every
                for role, proc in h.procs.items():
                    rss = rss_kib(proc.pid)
                    if rss is not None:
                        rss_file.write(f"{now - start:.1f},{role},{proc.pid},{rss}\n")
                rss_file.flush()
            if now - last_report > args.report_every:
                last_report = now
                print(f"  {now - start:6.1f} s  kills {h.kills}  churn {h.churned} ({h.churn_killed} killed)  "
                      f"finished {sorted(h.finished)}  received {count_received(args.dir)}", flush=True)
    finally:
        elapsed = time.monotonic() - start
        h.stop_all()
        for proc, _, _ in churn:
            proc.kill()
            proc.wait()
    return verify(args, h, elapsed)


def pause_while_quiet(marker: str, procs: list[subprocess.Popen[str]]) -> float:
    """While ``marker`` exists another job measures performance: every process of the run is stopped."""
    began = time.monotonic()
    live = [p for p in procs if p.poll() is None]
    for proc in live:
        os.kill(proc.pid, signal.SIGSTOP)
    print(f"  paused while {marker} exists", flush=True)
    while os.path.exists(marker):
        time.sleep(5)
    for proc in live:
        os.kill(proc.pid, signal.SIGCONT)
    return time.monotonic() - began


def start_churn(args: argparse.Namespace, log: Any) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-P", __file__, "--role", "churn", "--dir", args.dir,
           "--multicast-group", args.multicast_group, "--multicast-port", str(args.multicast_port)]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log, text=True,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)))


def rss_kib(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def rss_summary(directory: str) -> dict[str, Any]:
    """Per role, the RSS of its longest-lived process: median of its first and last tenth of samples."""
    path = Path(directory) / "rss.csv"
    if not path.exists():
        return {}
    samples: dict[tuple[str, int], list[tuple[float, int]]] = {}
    for line in path.read_text().splitlines():
        t, role, pid, rss = line.split(",")
        samples.setdefault((role, int(pid)), []).append((float(t), int(rss)))
    out: dict[str, Any] = {}
    for (role, pid), rows in samples.items():
        rows = [r for r in rows if r[0] - rows[0][0] >= 30.0]  # past start-up and imports
        if len(rows) < 2:
            continue
        span = rows[-1][0] - rows[0][0]
        if role in out and out[role]["span_s"] >= span:
            continue
        tenth = max(1, len(rows) // 10)
        first = sorted(r for _, r in rows[:tenth])[tenth // 2]
        last = sorted(r for _, r in rows[-tenth:])[tenth // 2]
        out[role] = {"span_s": round(span), "rss_kib_first": first, "rss_kib_last": last,
                     "rss_kib_max": max(r for _, r in rows)}
    return out


def count_received(directory: str) -> int:
    try:
        db = sqlite3.connect(Path(directory) / "c.db")
        return int(db.execute("SELECT count(*) FROM received").fetchone()[0])
    except sqlite3.Error:
        return 0


def verify(args: argparse.Namespace, h: Harness, elapsed: float) -> int:
    d = Path(args.dir)
    m = sqlite3.connect(d / "m.db")
    audit = dict(m.execute("SELECT msg_id, count(*) FROM audit GROUP BY msg_id").fetchall())
    committed_twice = sum(1 for n in audit.values() if n > 1)
    leftover = m.execute("SELECT count(*) FROM messages WHERE queue='q'").fetchone()[0]
    c = sqlite3.connect(d / "c.db")
    ids = [row[0] for row in c.execute("SELECT app_id FROM received")]
    row = c.execute("SELECT value FROM counters WHERE name='redelivered'").fetchone()
    redelivered = row[0] if row else 0
    row = c.execute("SELECT value FROM counters WHERE name='handed_out_again'").fetchone()
    again = row[0] if row else 0
    p = sqlite3.connect(d / "p.db")
    pending = p.execute("SELECT count(*) FROM xmit").fetchone()[0]
    missing = args.messages - len(set(ids))
    ok = (len(audit) == args.messages and committed_twice == 0 and len(ids) == args.messages
          and set(ids) == set(range(args.messages)) and pending == 0)
    print(json.dumps({
        "messages": args.messages, "fsync": args.fsync, "kills": h.kills, "seconds": round(elapsed, 1),
        "msg_per_s_end_to_end": round(args.messages / elapsed),
        "remote_queue_commits_distinct_ids": len(audit), "remote_queue_ids_committed_twice": committed_twice,
        "consumer_recorded": len(ids), "consumer_missing": missing, "consumer_redeliveries_filtered": redelivered,
        "messages_handed_out_more_than_once": again,
        "remote_queue_left_unacked": leftover,
        "paused_for_quiet_s": round(h.paused), "churn_nodes": h.churned, "churn_killed": h.churn_killed, "rss": rss_summary(args.dir), "producer_xmit_left": pending, "exactly_once": ok}))
    return 0 if ok else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--role", choices=sorted(ALL_ROLES))
    parser.add_argument("--dir")
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--kills", type=int, default=10, help="kill -9 each process at least this many times")
    parser.add_argument("--kill-every", type=float, default=1.5, help="mean seconds between kills")
    parser.add_argument("--fsync", default="normal", choices=("full", "normal", "off"))
    parser.add_argument("--batch", type=int, default=200, help="messages per producer commit")
    parser.add_argument("--rate", type=float, default=0.0, help="producer msg/s cap (0: as fast as it can)")
    parser.add_argument("--seed", type=int, default=random.SystemRandom().randrange(10**6))
    parser.add_argument("--timeout", type=float, default=1_800.0)
    parser.add_argument("--pause-while", metavar="FILE", default=None,
                        help="stop every process of the run while FILE exists (a soak sharing the machine with "
                             "benchmarks: the quiet time is not soak time); default: never pause")
    parser.add_argument("--victims", default="producer,manager,consumer",
                        help="comma-separated roles to kill (default all three)")
    parser.add_argument("--keep-killing", action="store_true",
                        help="go on killing after --kills each, until the end (soak)")
    parser.add_argument("--churn-every", type=float, default=0.0, metavar="S",
                        help="start a node that joins the group for 2-15 s every S seconds (half of them killed)")
    parser.add_argument("--rss-every", type=float, default=0.0, metavar="S", help="sample RSS every S seconds")
    parser.add_argument("--report-every", type=float, default=5.0, metavar="S")
    parser.add_argument("--multicast-group")
    parser.add_argument("--multicast-port", type=int)
    args = parser.parse_args()
    if args.role:
        import trio

        trio.run(ALL_ROLES[args.role], args)
        return 0
    rng = random.SystemRandom()
    args.multicast_group = args.multicast_group or f"239.255.{rng.randrange(256)}.{rng.randrange(1, 255)}"
    args.multicast_port = args.multicast_port or free_port()
    return harness(args)


if __name__ == "__main__":
    sys.exit(main())
