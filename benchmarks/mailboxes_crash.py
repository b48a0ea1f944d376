"""Exactly once under motion and faults, with real processes (docs/mailboxes.md).

Starts one process per domain (``sgcs.services.mailboxes.worker``) on
loopback; MIs move every move_min..move_max seconds and mail each other until
``--mails`` are sent; payloads between post offices are duplicated and
reordered with the given probabilities (below the mail layer); every
``--kill-every`` seconds one post office is killed with SIGKILL and started
again on its SQLite file. Then moves stop, the mail drains, every process is
killed, and the checker reads the post offices' files: each mail must be
delivered exactly once, per sender in order.

    PYTHONPATH=. python benchmarks/mailboxes_crash.py --domains 4 --per-domain 5 --mails 100000
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from sgcs.services.mailboxes.messages import MIState  # noqa: E402
from sgcs.services.mailboxes.store import read_table  # noqa: E402


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start(domain: int, args: argparse.Namespace, run_dir: str, network: dict[str, Any]) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "sgcs.services.mailboxes.worker", "--domain", str(domain),
               "--domains", str(args.domains), "--dir", run_dir, "--per-domain", str(args.per_domain),
               "--quota", str(args.mails // (args.domains * args.per_domain)),
               "--multicast-group", network["group"], "--multicast-port", str(network["port"]),
               "--duplicate", str(args.duplicate), "--reorder", str(args.reorder), "--seed", str(args.seed),
               "--move-min", str(args.move_min), "--move-max", str(args.move_max), "--burst", str(args.burst)]
    log = open(os.path.join(run_dir, f"po{domain}.log"), "ab")
    return subprocess.Popen(command, stdout=log, stderr=log, env={**os.environ, "PYTHONPATH": os.getcwd()})


def tables(run_dir: str, domains: int, table: str) -> list[tuple[int, str, Any]]:
    rows = []
    for d in range(domains):
        path = os.path.join(run_dir, f"po{d}.db")
        if os.path.exists(path):
            try:
                rows += [(d, k, v) for k, v in read_table(path, table)]
            except Exception:  # a file being created or recovered: read it next time
                pass
    return rows


def progress(run_dir: str, domains: int) -> tuple[int, int, int]:
    """Mails sent, mails delivered, MIs settled in a post office (not moving)."""
    settled = [MIState.from_json(v) for _, _, v in tables(run_dir, domains, "mi")]
    moving = [MIState.from_json(v[2]) for _, k, v in tables(run_dir, domains, "ctl") if k.startswith("mig|")]
    sent = sum(sum(s.next_seq.values()) for s in {s.name: s for s in settled + moving}.values())
    return sent, len(tables(run_dir, domains, "dlog")), len({s.name for s in settled})


def check(run_dir: str, domains: int, expected_mis: int) -> dict[str, int]:
    """Read every post office's file (all processes are dead) and count problems."""
    states: dict[str, MIState] = {}
    twice = 0
    for _, name, value in tables(run_dir, domains, "mi"):
        twice += name in states
        states[name] = MIState.from_json(value)
    deliveries: dict[str, list[tuple[int, str, int]]] = {}
    seen: dict[str, int] = {}
    for _, key, value in tables(run_dir, domains, "dlog"):
        receiver, sender, seq = key.split("\x1f")
        seen[key] = seen.get(key, 0) + 1
        deliveries.setdefault(receiver, []).append((value[0], sender, int(seq)))
    sent = {(s.name, r): n for s in states.values() for r, n in s.next_seq.items()}
    duplicated = sum(n - 1 for n in seen.values())
    out_of_order = 0
    for receiver, rows in deliveries.items():
        positions = [p for p, _, _ in rows]
        state = states.get(receiver)
        if state is not None:  # a repeated delivery at one office overwrote its row: counts show it
            duplicated += max(0, state.delivered - len(set(positions)))
        duplicated += len(positions) - len(set(positions))
        last: dict[str, int] = {}
        for _, sender, seq in sorted(rows):
            if seq != last.get(sender, -1) + 1:
                out_of_order += 1
            last[sender] = seq
    delivered_ids = {(s, r, int(q)) for r, rows in deliveries.items() for _, s, q in rows}
    lost = sum(1 for (s, r), n in sent.items() for q in range(n) if (s, r, q) not in delivered_ids)
    phantom = sum(1 for s, r, q in delivered_ids if q >= sent.get((s, r), 0))
    return {"mis_found": len(states), "mis_expected": expected_mis, "mis_in_two_places": twice,
            "moves": sum(s.epoch for s in states.values()),
            "sent": sum(sent.values()), "delivered": len(delivered_ids), "lost": lost,
            "duplicated": duplicated, "out_of_order": out_of_order, "never_sent_but_delivered": phantom}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--domains", type=int, default=4)
    p.add_argument("--per-domain", type=int, default=5)
    p.add_argument("--mails", type=int, default=100_000)
    p.add_argument("--duplicate", type=float, default=0.2)
    p.add_argument("--reorder", type=float, default=0.2)
    p.add_argument("--kill-every", type=float, default=10.0, help="seconds; 0: no kills")
    p.add_argument("--move-min", type=float, default=0.5)
    p.add_argument("--move-max", type=float, default=2.0)
    p.add_argument("--burst", type=int, default=20)
    p.add_argument("--timeout", type=float, default=1200.0)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    run_dir = tempfile.mkdtemp(prefix="mailboxes-crash-")
    rng = random.Random(args.seed)
    network = {"group": f"239.255.{rng.randrange(256)}.{rng.randrange(1, 255)}", "port": free_udp_port()}
    print(f"run dir {run_dir}; replay: PYTHONPATH=. python benchmarks/mailboxes_crash.py " + " ".join(sys.argv[1:]))
    procs = {d: start(d, args, run_dir, network) for d in range(args.domains)}
    quota = (args.mails // (args.domains * args.per_domain)) * args.domains * args.per_domain
    t0 = time.monotonic()
    kills, next_kill, next_report, victim = 0, t0 + args.kill_every, t0, 0
    drained_at = sent_done_at = None
    try:
        while time.monotonic() - t0 < args.timeout:
            time.sleep(0.2)
            now = time.monotonic()
            sent, delivered, settled = progress(run_dir, args.domains)
            if now >= next_report:
                print(f"t={now - t0:6.1f}s sent {sent:>7} delivered {delivered:>7} kills {kills}", flush=True)
                next_report = now + 5.0
            if sent_done_at is None and sent >= quota:
                sent_done_at = now
                open(os.path.join(run_dir, "stop_moving"), "w").close()
                print(f"t={now - t0:6.1f}s all {sent} mails sent; moves and kills stop, draining", flush=True)
            if sent_done_at is None and args.kill_every and now >= next_kill:
                procs[victim].send_signal(signal.SIGKILL)
                procs[victim].wait()
                kills += 1
                time.sleep(0.5)
                procs[victim] = start(victim, args, run_dir, network)
                victim = (victim + 1) % args.domains
                next_kill = now + args.kill_every
            if sent_done_at is not None and delivered >= quota and settled == args.domains * args.per_domain:
                drained_at = now
                break
    finally:
        for proc in procs.values():
            proc.send_signal(signal.SIGKILL)
            proc.wait()
    result = check(run_dir, args.domains, args.domains * args.per_domain)
    elapsed = (drained_at or time.monotonic()) - t0
    print(f"domains {args.domains}, MIs {args.domains * args.per_domain}, duplicate {args.duplicate}, "
          f"reorder {args.reorder}, kill -9 every {args.kill_every} s: {kills} kills")
    for key, value in result.items():
        print(f"  {key}: {value}")
    print(f"  elapsed: {elapsed:.1f} s; end-to-end {result['delivered'] / elapsed:.0f} mails/s delivered")
    ok = (result["lost"] == 0 and result["duplicated"] == 0 and result["out_of_order"] == 0
          and result["sent"] == quota and drained_at is not None and result["mis_found"] == result["mis_expected"])
    print("RESULT:", "exactly once, in order" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
