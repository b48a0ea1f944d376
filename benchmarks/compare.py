"""sgcs against its reference points, on this machine, in one run: a Markdown ratio table.

Usage::

    .venv/bin/python benchmarks/compare.py [--runs 3] [--quick] [--only fifo,total,safe,raft,latency,startup,scaling]
                                           [--json OUT] [--jgroups-isolated] [--no-scaling-jgroups] [--allow-pure]

Sections (``--only`` picks some; default all):

* ``fifo``: ``sgcs bench`` FIFO, 4 members x 20,000 x 1,000 B, msg/s received per
  member, against JGroups 2.12 ``udp.xml`` (``/work/shared/bench/jgroups/run.sh``);
* ``total`` / ``safe``: the same load in total / safe order, against JGroups
  ``sequencer.xml`` (JGroups 2.12 has no safe order: that row is sgcs's figure beside
  the sequencer's);
* ``raft``: 3 members, 16 B operations, unpaced total order, ops/s applied per member,
  against pysyncobj's Raft counter (``peers/pysyncobj_counter.py``); and the p50
  latency at 100 ops/s per member against pysyncobj's commit latency (and its
  apply-at-the-others latency, sgcs bench's own definition);
* ``latency``: 4 members x 250 msg/s x 1,000 B: FIFO and total p50/p99, against
  zeromq-pyre's p50/p99 at the same load (``peers/pyre_throughput.py``; it needs
  root for its network namespace, else the anchor is n/a);
* ``startup``: 8 processes started together, seconds until all see 8, sgcs against
  kinship (``peers/kinship_membership.py`` with its default and local presets;
  its ``stop`` scenario with no pause, so only the start-up is waited for);
* ``scaling``: sgcs msg/s per member at 4, 8 and 16 members, FIFO and total, each
  member sending 80,000 / N messages (every member receives 80,000); JGroups
  ``udp.xml`` / ``sequencer.xml`` at the same sizes unless ``--no-scaling-jgroups``;
* ``corosync``: on the same terms as Corosync 3 CPG (one member per network
  namespace on a bridge; ``benchmarks/bench_netns.py`` for sgcs,
  ``/work/shared/bench/corosync/run.sh`` for Corosync, knet transport; needs
  root): 3 and 4 members x 20,000 x 1,000 B, sgcs total and safe order against
  CPG's agreed order, msg/s received per member; 3 members x 250 msg/s x 1,000 B,
  latency p50/p99, sgcs FIFO and total against CPG's agreed order;
* ``durable``: a durable queue, 20,000 puts of 100 B with priorities 0-9 one at a time
  (each synced before it returns), 20,000 more in batches of 100, then receive + ack of
  each and of 100 at a time: sgcs's ``QueueStore`` (``benchmarks/queues_throughput.py
  --json full``, in the application's process, as sgcs's queue manager is) against a
  RabbitMQ 3.10 durable priority queue with publisher confirms (``run.sh durable``);
* ``quorum``: a replicated queue of 3 replicas, 10,000 puts of 100 B in batches of
  50 (each batch acknowledged before the next), kill -9 of a replica that is not
  the producer's while the puts go on (sgcs: within 1.5 s of the start; RabbitMQ:
  half-way): sgcs's ``benchmarks/queues_replicated.py`` (3 processes
  on loopback, safe order, each replica's state in its SQLite file, fsync normal) against a RabbitMQ 3.10 quorum
  queue (3 nodes, Raft, publisher confirms, the killed node a follower;
  ``/work/shared/bench/rabbitmq/run.sh quorum``, needs root). Rows: put msg/s,
  acknowledged messages lost, messages received twice.

Method: in every round each comparison runs sgcs and its anchor one after the
other, and the one that goes first flips from round to round (A B, B A, A B ...),
so a slow phase of the machine does not land on one side only. Every figure is
the median over ``--runs`` rounds (default 3), printed with its range; the ratio
is sgcs / anchor of the medians (throughput: higher is better for sgcs; latency
and time: lower is better). ``--quick`` divides the message counts by ten (a
smoke check, not a measurement).

Every command runs under ``timeout``, in an empty temporary directory (nothing in
the caller's working directory shadows a module), on 127.0.0.1 only. Progress
goes to stderr, the table to stdout, and ``--json OUT`` writes every raw run
(command, exit code, seconds, the tool's full JSON report).

JGroups' ``run.sh`` uses JGroups' fixed multicast port 45588 and the cluster name
"perf", so two such runs at the same time on one host join each other.
``--jgroups-isolated`` runs the same ``JPerf.java`` the same way but on a private
multicast port (``-Djgroups.udp.mcast_port``), for a shared machine.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SHARED_BENCH = Path(os.environ.get("SGCS_SHARED_BENCH", str(ROOT.parent / "shared" / "bench")))
if not SHARED_BENCH.exists():
    SHARED_BENCH = Path("/work/shared/bench")
JGROUPS_DIR = SHARED_BENCH / "jgroups"
PEERS_DIR = SHARED_BENCH / "peers"
SGCS = ROOT / ".venv" / "bin" / "sgcs"
ALLOW_PURE = False  # --allow-pure
SECTIONS = ("fifo", "total", "safe", "raft", "latency", "startup", "scaling", "quorum", "durable", "corosync")
SCALING_SIZES = (4, 8, 16)

Figures = dict[str, Any]
Parser = Callable[[str], Figures]


# ----------------------------------------------------------------- plan


@dataclass(frozen=True, slots=True)
class Plan:
    """Message counts of a run (``FULL`` or ``QUICK``)."""

    messages: int = 20_000  # fifo, total, safe: per member
    raft_ops: int = 20_000  # unpaced, per member
    raft_paced_ops: int = 1_000  # at 100 ops/s per member: 10 s
    latency_messages: int = 2_500  # at 250 msg/s per member: 10 s
    scaling_received: int = 80_000  # every member receives this many at every size
    quorum_messages: int = 10_000  # replicated queue puts, one replica killed half-way
    durable_messages: int = 20_000  # durable queue: puts one at a time, then in batches, then receives


FULL = Plan()
QUICK = Plan(messages=2_000, raft_ops=2_000, raft_paced_ops=200, latency_messages=500, scaling_received=8_000,
             quorum_messages=2_000, durable_messages=2_000)


# ----------------------------------------------------------------- jobs and runs


@dataclass(frozen=True, slots=True)
class Job:
    """One command that prints one measurement."""

    label: str
    """Unique key of its runs, e.g. ``sgcs fifo 4x20000x1000``."""
    system: str
    command: tuple[str, ...]
    limit: float
    """Seconds before ``timeout`` stops it."""
    parse: Parser


@dataclass(slots=True)
class Run:
    section: str
    label: str
    system: str
    round: int
    position: int
    """1: went first in its comparison this round; 2: second."""
    command: list[str]
    started: str
    seconds: float
    exit_code: int | None
    data: Figures = field(default_factory=dict)
    error: str | None = None
    stderr_tail: str = ""


@dataclass(slots=True)
class Bout:
    """sgcs jobs and anchor jobs that take turns, the first side flipping every round."""

    sgcs: list[Job]
    anchor: list[Job]


@dataclass(slots=True)
class Row:
    measure: str
    sgcs: list[float | None]
    anchor_name: str
    anchor: list[float | None]
    unit: str = ""
    digits: int = 0
    note: str = ""


# ----------------------------------------------------------------- parsers


def parse_json(stdout: str) -> Figures:
    """The JSON object the tool printed: all of stdout (sgcs bench indents it), else its last JSON line."""
    try:
        whole = json.loads(stdout)
    except json.JSONDecodeError:
        whole = None
    if isinstance(whole, dict):
        return whole
    for line in reversed(stdout.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            data = json.loads(line)
            if isinstance(data, dict):
                return data
    raise ValueError("no JSON object on stdout")


JGROUPS_LINE = re.compile(r"recv_rate_median=(\d+(?:\.\d+)?)")


def parse_jgroups(stdout: str) -> Figures:
    match = JGROUPS_LINE.search(stdout)
    if match is None:
        raise ValueError("no recv_rate_median in JGroups' output")
    return {"rate_median": float(match.group(1)), "line": stdout.strip().splitlines()[-1]}


# ----------------------------------------------------------------- commands


def sgcs_bench(members: int, messages: int, size: int, order: str, rate: float | None = None) -> Job:
    deliveries = members * members * messages
    limit = min(1800.0, 120.0 + deliveries / 400 + (messages / rate if rate else 0.0))
    command = [str(SGCS), "bench", "--members", str(members), "--messages", str(messages), "--size", str(size),
               "--order", order, "--json", "--no-progress", "--timeout", f"{limit - 15:.0f}"]
    if rate:
        command += ["--rate", f"{rate:g}"]
    label = f"sgcs {order} {members}x{messages}x{size}" + (f" @{rate:g}/s" if rate else "")
    return Job(label, "sgcs", tuple(command), limit, parse_json)


def jgroups(members: int, messages: int, size: int, stack: str, isolated: bool) -> Job:
    label = f"jgroups {stack} {members}x{messages}x{size}"
    if isolated:
        command = [sys.executable, str(Path(__file__).resolve()), "--jperf-isolated",
                   str(members), str(messages), str(size), stack]
    else:
        command = ["bash", str(JGROUPS_DIR / "run.sh"), str(members), str(messages), str(size), stack]
    return Job(label, f"JGroups {stack}", tuple(command), 420.0, parse_jgroups)


def host_python() -> str:
    """The interpreter for the peers' harnesses (they need only the standard library)."""
    return shutil.which("python3") or sys.executable


def pysyncobj(ops: int, rate: float | None = None) -> Job:
    command = [host_python(), str(PEERS_DIR / "pysyncobj_counter.py"), "--replicas", "3", "--ops", str(ops), "--json"]
    if rate:
        command += ["--rate", f"{rate:g}"]
    label = f"pysyncobj 3x{ops}" + (f" @{rate:g}/s" if rate else "")
    return Job(label, "pysyncobj", tuple(command), 400.0, parse_json)


def pyre(messages: int, rate: float) -> Job:
    command = [host_python(), str(PEERS_DIR / "pyre_throughput.py"), "--members", "4", "--messages", str(messages),
               "--size", "1000", "--rate", f"{rate:g}", "--json"]
    return Job(f"pyre 4x{messages}x1000 @{rate:g}/s", "pyre", tuple(command), 400.0, parse_json)


def membership_start(system: str, preset: str = "default") -> Job:
    command = [host_python(), str(PEERS_DIR / "kinship_membership.py"), "--system", system, "--scenario", "stop",
               "--pause", "0", "--watch", "0", "--members", "8", "--converge-timeout", "60"]
    if system == "kinship":
        command += ["--preset", preset]
    label = f"{system}{' ' + preset if system == 'kinship' else ''} start 8"
    return Job(label, system if system == "sgcs" else f"kinship {preset}", tuple(command), 200.0, parse_json)


def sgcs_netns(members: int, messages: int, size: int, order: str, rate: float | None = None) -> Job:
    """``sgcs bench`` with one member per network namespace (``bench_netns.py``)."""
    bench = sgcs_bench(members, messages, size, order, rate)
    command = [sys.executable, str(ROOT / "benchmarks" / "bench_netns.py"), "--members", str(members),
               "--messages", str(messages), "--size", str(size), "--order", order, "--json",
               "--timeout", f"{bench.limit - 15:.0f}"] + (["--rate", f"{rate:g}"] if rate else [])
    return Job("netns " + bench.label, "sgcs", tuple(command), bench.limit, parse_json)


def corosync(members: int, messages: int, size: int, rate: float | None = None) -> Job:
    mode = "latency" if rate else "throughput"
    command = ["env", f"RATE={rate:g}" if rate else "RATE=250", f"SECS={messages / rate:g}" if rate else "SECS=10",
               "bash", str(SHARED_BENCH / "corosync" / "run.sh"), str(members), str(messages), str(size), mode]
    label = f"corosync {members}x{messages}x{size}" + (f" @{rate:g}/s" if rate else "")
    return Job(label, "Corosync CPG", tuple(command), 600.0, parse_corosync)


COROSYNC_FIGURE = re.compile(r"(recv_rate_median|latency_p50_ms|latency_p99_ms)=(\d+(?:\.\d+)?)")


def parse_corosync(stdout: str) -> Figures:
    """``run.sh``'s summary line: ``recv_rate_median=`` (throughput) or ``latency_p50_ms=``/``latency_p99_ms=``."""
    found = {key: float(value) for key, value in COROSYNC_FIGURE.findall(stdout)}
    if not found:
        raise ValueError("no figure in Corosync's run.sh output")
    return {("rate_median" if key == "recv_rate_median" else key): value for key, value in found.items()} | \
        {"line": stdout.strip().splitlines()[-1]}


def replicated_queue(messages: int) -> Job:
    command = [sys.executable, str(ROOT / "benchmarks" / "queues_replicated.py"), "--messages", str(messages),
               "--batch", "50", "--size", "100", "--durable"]
    return Job(f"sgcs replicated queue {messages}x100", "sgcs", tuple(command), 600.0, parse_json)


def durable_queue(messages: int) -> Job:
    command = [sys.executable, str(ROOT / "benchmarks" / "queues_throughput.py"), "--messages", str(messages),
               "--json", "full"]
    return Job(f"sgcs durable queue {messages}x100", "sgcs", tuple(command), 600.0, parse_json)


def rabbit_durable(messages: int) -> Job:
    command = ["bash", str(SHARED_BENCH / "rabbitmq" / "run.sh"), "durable", str(messages), "100"]
    return Job(f"rabbitmq durable {messages}x100", "RabbitMQ durable", tuple(command), 900.0, parse_json)


def rabbit_quorum(messages: int) -> Job:
    command = ["env", "BATCH=50", "bash", str(SHARED_BENCH / "rabbitmq" / "run.sh"), "quorum", str(messages), "100"]
    return Job(f"rabbitmq quorum {messages}x100", "RabbitMQ quorum", tuple(command), 900.0, parse_rabbit_quorum)


def parse_rabbit_quorum(stdout: str) -> Figures:
    """``run.sh quorum``'s JSON line, its kill phase named as sgcs's replicated-queue report names it."""
    kill = parse_json(stdout).get("kill_one_follower")
    if not isinstance(kill, dict):
        raise ValueError("no kill_one_follower section in RabbitMQ's report")
    return {"put_msg_per_s": kill.get("put_batched_msgs_per_s"), "acknowledged_lost": kill.get("lost"),
            "duplicates": kill.get("duplicated"), "acknowledged": kill.get("confirmed"),
            "received": kill.get("received")}


def pyre_available() -> str | None:
    """Why pyre cannot run here, or None."""
    if os.geteuid() != 0:
        return "needs root for its network namespace"
    if shutil.which("unshare") is None:
        return "no unshare"
    return None


# ----------------------------------------------------------------- running


def log(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("PEERS_VENV", "/tmp/peers-venv")
    env["SGCS_DIR"] = str(ROOT)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def run_job(job: Job, section: str, round_: int, position: int, cwd: Path) -> Run:
    command = ["timeout", "-k", "15", f"{job.limit:.0f}", *job.command]
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    t0 = time.monotonic()
    run = Run(section, job.label, job.system, round_, position, list(job.command), started, 0.0, None)
    # `timeout` puts itself and the command in a process group of their own: on any way out, that group goes
    process = subprocess.Popen(command, cwd=cwd, env=child_env(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = process.communicate(timeout=job.limit + 60)
    except subprocess.TimeoutExpired:
        run.error = f"no end within {job.limit + 60:.0f} s"
        stdout, stderr = "", ""
    finally:
        if process.poll() is None:
            stop_group(process)
    run.seconds = time.monotonic() - t0
    if run.error:
        return run
    run.exit_code = process.returncode
    run.stderr_tail = stderr[-1500:]
    try:
        run.data = job.parse(stdout)
    except (ValueError, json.JSONDecodeError) as exc:
        run.error = f"exit {process.returncode}: {exc}" + (" (timed out)" if process.returncode == 124 else "")
        return run
    if process.returncode != 0 or "error" in run.data:
        run.error = str(run.data.get("error") or f"exit {process.returncode}")
    hot_path = str(run.data.get("hot_path", "compiled"))
    if job.system == "sgcs" and not hot_path.startswith("compiled") and not ALLOW_PURE:
        run.error = f"sgcs ran as {hot_path}"  # a source edited mid-run: not the figure of the compiled code
    return run


def hot_path_problem() -> str | None:
    """Why the checkout's sgcs would not run compiled, or None. A figure of the
    pure-Python fallback is about a quarter lower: twice, a stale extension made a
    total-order run look like a regression of the code."""
    sys.path.insert(0, str(ROOT))
    try:
        with warnings.catch_warnings():  # importing sgcs warns of the very thing we report
            warnings.simplefilter("ignore", RuntimeWarning)
            from sgcs import _compiled
    finally:
        sys.path.pop(0)
    mode, why = _compiled.choose(str(ROOT))
    return None if mode == "native" else why


def stop_group(process: subprocess.Popen[str], grace: float = 15.0) -> None:
    """SIGTERM the process group led by ``process`` (a `timeout` we started), SIGKILL it after ``grace``."""
    for signum in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, signum)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            process.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


def _exit_on_sigterm(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


def headline(run: Run) -> str:
    if run.error:
        last = run.stderr_tail.strip().splitlines()[-1:] if run.stderr_tail.strip() else []
        return f"FAILED ({run.error}){': ' + last[0][:200] if last else ''}"
    d = run.data
    parts = []
    for key, name in (("rate_median", "rate"), ("latency_p50_ms", "p50 ms"), ("latency_p99_ms", "p99 ms"),
                      ("commit_p50_ms", "commit p50 ms"), ("converge_s", "converge s")):
        if isinstance(d.get(key), (int, float)):
            parts.append(f"{name} {d[key]:,.2f}" if key != "rate_median" else f"{name} {d[key]:,.0f}")
    return ", ".join(parts) or "ok"


def alternate(section: str, bouts: list[Bout], runs: int, cwd: Path, sink: list[Run]) -> None:
    """Round by round; in each bout the side that goes first flips every round."""
    for round_ in range(1, runs + 1):
        for bout in bouts:
            sides = [bout.sgcs, bout.anchor] if round_ % 2 == 1 else [bout.anchor, bout.sgcs]
            position = 0
            for jobs in sides:
                if not jobs:
                    continue
                position += 1
                for job in jobs:
                    log(f"{section}: {job.label}, round {round_}/{runs} ...")
                    run = run_job(job, section, round_, position, cwd)
                    sink.append(run)
                    log(f"    {headline(run)} ({run.seconds:.1f} s)")


# ----------------------------------------------------------------- sections


def bouts_for(section: str, plan: Plan, args: argparse.Namespace, only: set[str]) -> list[Bout]:
    m = plan.messages
    iso = args.jgroups_isolated
    if section == "fifo":
        return [Bout([sgcs_bench(4, m, 1000, "fifo")], [jgroups(4, m, 1000, "udp.xml", iso)])]
    if section == "total":  # total and safe share the sequencer runs
        sg = [sgcs_bench(4, m, 1000, order) for order in ("total", "safe") if order in only]
        return [Bout(sg, [jgroups(4, m, 1000, "sequencer.xml", iso)])]
    if section == "raft":
        return [Bout([sgcs_bench(3, plan.raft_ops, 16, "total")], [pysyncobj(plan.raft_ops)]),
                Bout([sgcs_bench(3, plan.raft_paced_ops, 16, "total", rate=100)],
                     [pysyncobj(plan.raft_paced_ops, rate=100)])]
    if section == "latency":
        anchor = [] if pyre_available() else [pyre(plan.latency_messages, 250)]
        return [Bout([sgcs_bench(4, plan.latency_messages, 1000, order, rate=250) for order in ("fifo", "total")],
                     anchor)]
    if section == "startup":
        return [Bout([membership_start("sgcs")],
                     [membership_start("kinship", "default"), membership_start("kinship", "local")])]
    if section == "quorum":
        return [Bout([replicated_queue(plan.quorum_messages)], [rabbit_quorum(plan.quorum_messages)])]
    if section == "durable":
        return [Bout([durable_queue(plan.durable_messages)], [rabbit_durable(plan.durable_messages)])]
    if section == "corosync":
        n = plan.latency_messages
        return [Bout([sgcs_netns(members, m, 1000, order) for order in ("total", "safe")], [corosync(members, m, 1000)])
                for members in (3, 4)] + \
            [Bout([sgcs_netns(3, n, 1000, order, rate=250) for order in ("fifo", "total")], [corosync(3, n, 1000, 250)])]
    if section == "scaling":
        out = []
        for n in SCALING_SIZES:
            per = max(1, plan.scaling_received // n)
            anchor = [] if args.no_scaling_jgroups else \
                [jgroups(n, per, 1000, "udp.xml", iso), jgroups(n, per, 1000, "sequencer.xml", iso)]
            out.append(Bout([sgcs_bench(n, per, 1000, "fifo"), sgcs_bench(n, per, 1000, "total")], anchor))
        return out
    raise ValueError(section)


def figures(runs: list[Run], label: str, key: str) -> list[float | None]:
    out: list[float | None] = []
    for run in runs:
        if run.label != label:
            continue
        value = None if run.error else run.data.get(key)
        out.append(float(value) if isinstance(value, (int, float)) else None)
    return out


def rows_for(section: str, plan: Plan, args: argparse.Namespace, only: set[str], all_runs: list[Run]) -> list[Row]:
    runs = [r for r in all_runs if r.section == section]  # scaling's 4-member runs share fifo's labels
    m = plan.messages
    load = f"4 members × {m:,} × 1,000 B"
    if section == "fifo":
        return [Row(f"FIFO, {load}: msg/s received per member", figures(runs, f"sgcs fifo 4x{m}x1000", "rate_median"),
                    "JGroups udp.xml", figures(runs, f"jgroups udp.xml 4x{m}x1000", "rate_median"))]
    if section == "total":
        seq = figures(runs, f"jgroups sequencer.xml 4x{m}x1000", "rate_median")
        rows = []
        if "total" in only:
            rows.append(Row(f"total order, {load}: msg/s received per member",
                            figures(runs, f"sgcs total 4x{m}x1000", "rate_median"), "JGroups sequencer.xml", seq))
        if "safe" in only:
            rows.append(Row(f"safe order, {load}: msg/s received per member",
                            figures(runs, f"sgcs safe 4x{m}x1000", "rate_median"), "JGroups sequencer.xml", seq,
                            note="JGroups 2.12 has no safe order: its total order is the nearest"))
        return rows
    if section == "raft":
        o, p = plan.raft_ops, plan.raft_paced_ops
        sg_paced, ps_paced = f"sgcs total 3x{p}x16 @100/s", f"pysyncobj 3x{p} @100/s"
        return [
            Row(f"3 members, 16 B ops, unpaced total order ({o:,} each): ops/s per member",
                figures(runs, f"sgcs total 3x{o}x16", "rate_median"), "pysyncobj Raft counter",
                figures(runs, f"pysyncobj 3x{o}", "rate_median")),
            Row("3 members, 100 ops/s per member: p50 latency (ms); pysyncobj: commit (proposal → callback)",
                figures(runs, sg_paced, "latency_p50_ms"), "pysyncobj commit p50",
                figures(runs, ps_paced, "commit_p50_ms"), " ms", 2),
            Row("  same, pysyncobj: apply at the other replicas (sgcs bench's definition)",
                figures(runs, sg_paced, "latency_p50_ms"), "pysyncobj apply p50",
                figures(runs, ps_paced, "apply_p50_ms"), " ms", 2),
            Row("  p99 latency (ms) vs pysyncobj commit p99",
                figures(runs, sg_paced, "latency_p99_ms"), "pysyncobj commit p99",
                figures(runs, ps_paced, "commit_p99_ms"), " ms", 2),
        ]
    if section == "latency":
        n = plan.latency_messages
        py = f"pyre 4x{n}x1000 @250/s"
        why = pyre_available()
        anchor = f"pyre: n/a, {why}" if why else "pyre, Zyre shout, unordered"
        rows = []
        for order in ("fifo", "total"):
            sg = f"sgcs {order} 4x{n}x1000 @250/s"
            for q in ("p50", "p99"):
                rows.append(Row(f"{order}, 4 members × 250 msg/s × 1,000 B: latency {q} (ms)",
                                figures(runs, sg, f"latency_{q}_ms"), anchor,
                                figures(runs, py, f"latency_{q}_ms"), " ms", 2))
        return rows
    if section == "startup":
        sg = "sgcs start 8"
        rows = []
        for preset in ("default", "local"):
            kin = f"kinship {preset} start 8"
            rows.append(Row("8 processes started together → all see 8 (s from spawn)",
                            figures(runs, sg, "converge_s"), f"kinship {preset}",
                            figures(runs, kin, "converge_s"), " s", 2))
            rows.append(Row("  same, from the last process's library import (s)",
                            figures(runs, sg, "converge_after_import_s"), f"kinship {preset}",
                            figures(runs, kin, "converge_after_import_s"), " s", 2))
        return rows
    if section == "quorum":
        puts = plan.quorum_messages
        sg, rq = f"sgcs replicated queue {puts}x100", f"rabbitmq quorum {puts}x100"
        load = f"3 replicas, {puts:,} puts × 100 B in batches of 50, kill -9 of a replica meanwhile"
        return [Row(f"{load}: put msg/s", figures(runs, sg, "put_msg_per_s"), "RabbitMQ quorum queue",
                    figures(runs, rq, "put_msg_per_s"),
                    note="both on disk: sgcs's replicas in SQLite files (fsync normal), RabbitMQ's Raft log"),
                Row("  same: acknowledged messages lost", figures(runs, sg, "acknowledged_lost"),
                    "RabbitMQ quorum queue", figures(runs, rq, "acknowledged_lost")),
                Row("  same: messages received twice", figures(runs, sg, "duplicates"),
                    "RabbitMQ quorum queue", figures(runs, rq, "duplicates"))]
    if section == "durable":
        n = plan.durable_messages
        sg, rb = f"sgcs durable queue {n}x100", f"rabbitmq durable {n}x100"
        load = f"durable queue, {n:,} × 100 B, priorities 0-9, puts synced before they return"
        return [Row(f"{load}: put, one confirm each (msg/s)", figures(runs, sg, "put_x1"), "RabbitMQ durable queue",
                    figures(runs, rb, "put_x1_msgs_per_s"),
                    note="sgcs: the application's own store (SQLite, fsync full); RabbitMQ: a broker over AMQP"),
                Row("  same: put, batches of 100 (msg/s)", figures(runs, sg, "put_x100"), "RabbitMQ durable queue",
                    figures(runs, rb, "put_batched_msgs_per_s")),
                Row("  same: receive + ack each (msg/s)", figures(runs, sg, "get_ack_x1"), "RabbitMQ durable queue",
                    figures(runs, rb, "get_ack_each_msgs_per_s")),
                Row("  same: receive + ack, 100 at a time (msg/s)", figures(runs, sg, "get_ack_x100"),
                    "RabbitMQ durable queue", figures(runs, rb, "get_ack_multiple100_msgs_per_s"))]
    if section == "corosync":
        n, rows = plan.latency_messages, []
        for members in (3, 4):
            cpg = figures(runs, f"corosync {members}x{m}x1000", "rate_median")
            for order in ("total", "safe"):
                rows.append(Row(f"namespaces, {order} order, {members} members × {m:,} × 1,000 B: msg/s received "
                                "per member", figures(runs, f"netns sgcs {order} {members}x{m}x1000", "rate_median"),
                                "Corosync CPG agreed", cpg))
        for order in ("fifo", "total"):
            for q in ("p50", "p99"):
                rows.append(Row(f"namespaces, {order}, 3 members × 250 msg/s × 1,000 B: latency {q} (ms)",
                                figures(runs, f"netns sgcs {order} 3x{n}x1000 @250/s", f"latency_{q}_ms"),
                                "Corosync CPG agreed", figures(runs, f"corosync 3x{n}x1000 @250/s", f"latency_{q}_ms"),
                                " ms", 2))
        return rows
    if section == "scaling":
        rows = []
        for order, stack in (("fifo", "udp.xml"), ("total", "sequencer.xml")):
            for n in SCALING_SIZES:
                per = max(1, plan.scaling_received // n)
                reference: list[float | None] = [] if args.no_scaling_jgroups else \
                    figures(runs, f"jgroups {stack} {n}x{per}x1000", "rate_median")
                rows.append(Row(f"scaling, {order}, {n} members × {per:,} × 1,000 B: msg/s received per member",
                                figures(runs, f"sgcs {order} {n}x{per}x1000", "rate_median"),
                                "—" if args.no_scaling_jgroups else f"JGroups {stack}", reference))
        return rows
    raise ValueError(section)


# ----------------------------------------------------------------- table


def median(values: Sequence[float | None]) -> float | None:
    done = [v for v in values if v is not None]
    return statistics.median(done) if done else None


def cell(values: Sequence[float | None], unit: str, digits: int) -> str:
    if not values:
        return "—"
    done = [v for v in values if v is not None]
    if not done:
        return f"failed ({len(values)} of {len(values)})"
    text = f"{statistics.median(done):,.{digits}f}{unit}"
    if len(done) > 1:
        text += f" [{min(done):,.{digits}f}–{max(done):,.{digits}f}]"
    if len(done) < len(values):
        text += f" ({len(values) - len(done)} of {len(values)} failed)"
    return text


def ratio(row: Row) -> str:
    a, b = median(row.sgcs), median(row.anchor)
    if a is None or b is None or b == 0:
        return "n/a"
    return f"{a / b:.2f}"


def table(rows: list[Row]) -> str:
    lines = ["| measure | sgcs | anchor | ratio |", "|---|---|---|---|"]
    for row in rows:
        anchor = cell(row.anchor, row.unit, row.digits) if row.anchor else "—"
        anchor_text = f"{anchor} ({row.anchor_name})" if row.anchor_name != "—" else "—"
        measure = row.measure + (f" ({row.note})" if row.note else "")
        lines.append(f"| {measure} | {cell(row.sgcs, row.unit, row.digits)} | {anchor_text} | {ratio(row)} |")
    return "\n".join(lines)


# ----------------------------------------------------------------- context


def git_commit(root: Path = ROOT) -> str:
    """Short sha of HEAD, ``+dirty`` when tracked files differ (benchmarks/history.csv aside)."""
    try:
        sha = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, check=True).stdout.strip()
        status = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no", "--", ".",
                                 ":(exclude)benchmarks/history.csv"], capture_output=True, text=True,
                                check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return sha + ("+dirty" if status.strip() else "")


def prepare_peers() -> str | None:
    """Create/fill the peers' venv before any timing (first use installs pinned packages); error text or None."""
    code = f"import sys; sys.path.insert(0, {str(PEERS_DIR)!r}); import peerlib; print(peerlib.peers_python())"
    try:
        done = subprocess.run(["timeout", "900", host_python(), "-c", code], env=child_env(), capture_output=True,
                              text=True)
    except OSError as exc:
        return str(exc)
    if done.returncode != 0:
        return (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
    return None


def jperf_isolated(argv: list[str]) -> int:
    """``run.sh``'s procedure (same JPerf.java, same JVM flags, median of members) on a private multicast port."""
    members, messages, size = (int(a) for a in argv[:3])
    stack = argv[3] if len(argv) > 3 else "udp.xml"
    jar = "/usr/share/java/jgroups.jar"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    group = f"239.255.{secrets.randbelow(254) + 1}.{secrets.randbelow(254) + 1}"
    signal.signal(signal.SIGTERM, _exit_on_sigterm)  # so that `finally` stops the JVMs
    with tempfile.TemporaryDirectory(prefix="jperf-") as work:
        subprocess.run(["javac", "-d", work, "-cp", jar, str(JGROUPS_DIR / "JPerf.java")], check=True)
        outputs = [Path(work) / f"out{i}" for i in range(members)]
        processes: list[subprocess.Popen[bytes]] = []
        try:
            for out in outputs:
                with out.open("w") as handle:
                    processes.append(subprocess.Popen(
                        ["timeout", "300", "java", "-Djava.net.preferIPv4Stack=true", "-Djgroups.bind_addr=127.0.0.1",
                         f"-Djgroups.udp.mcast_port={port}", f"-Djgroups.udp.mcast_addr={group}",
                         "-cp", f"{jar}:{work}", "JPerf", str(members), str(messages), str(size), stack],
                        stdout=handle, stderr=subprocess.STDOUT))
            for process in processes:
                process.wait()
        finally:
            for process in processes:
                if process.poll() is None:
                    process.terminate()  # `timeout` passes SIGTERM on to its JVM
            for process in processes:
                process.wait()
        rates = sorted(float(m) for out in outputs for m in re.findall(r"recv_rate=(\d+)", out.read_text()))
        if len(rates) < members:
            print(f"jgroups: only {len(rates)} of {members} members finished", file=sys.stderr)
            return 1
        print(f"jgroups stack={stack} members={members} size={size} "
              f"recv_rate_median={rates[(len(rates) + 1) // 2 - 1]:.0f} msg/s per member (isolated port {port})")
    return 0


# ----------------------------------------------------------------- main


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3, help="rounds per comparison (the median is taken; default 3)")
    parser.add_argument("--quick", action="store_true", help="a tenth of the messages: a smoke check")
    parser.add_argument("--only", default=",".join(SECTIONS), help=f"comma-separated sections of {','.join(SECTIONS)}")
    parser.add_argument("--json", type=Path, metavar="OUT", help="write every raw run and the table here")
    parser.add_argument("--jgroups-isolated", action="store_true",
                        help="run JPerf on a private multicast port instead of run.sh's fixed 45588")
    parser.add_argument("--no-scaling-jgroups", action="store_true", help="scaling: sgcs figures only")
    parser.add_argument("--allow-pure", action="store_true",
                        help="measure sgcs even when its hot path runs as pure Python (not compiled, or a source "
                             "changed after it was compiled); by default that is refused")
    args = parser.parse_args(argv)
    only = {s.strip() for s in args.only.split(",") if s.strip()}
    unknown = only - set(SECTIONS)
    if unknown:
        parser.error(f"unknown sections {sorted(unknown)}; choose from {','.join(SECTIONS)}")
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    args.sections = only
    return args


def main(argv: Sequence[str] | None = None) -> int:
    raw = list(sys.argv[1:] if argv is None else argv)
    if raw[:1] == ["--jperf-isolated"]:
        return jperf_isolated(raw[1:])
    args = parse_args(raw)
    global ALLOW_PURE
    ALLOW_PURE = args.allow_pure
    signal.signal(signal.SIGTERM, _exit_on_sigterm)  # so that run_job's `finally` stops the command under way
    only: set[str] = args.sections
    plan = QUICK if args.quick else FULL
    if not SGCS.exists():
        print(f"compare: no {SGCS}: run scripts/setup.sh first", file=sys.stderr)
        return 2
    problem = hot_path_problem()
    if problem and not args.allow_pure:
        print(f"compare: sgcs would run as pure Python ({problem}): run scripts/setup.sh, or pass --allow-pure",
              file=sys.stderr)
        return 2
    commit = git_commit()
    log(f"sgcs {commit} at {ROOT}; references in {SHARED_BENCH}; sections {','.join(s for s in SECTIONS if s in only)};"
        f" {args.runs} runs{' (quick)' if args.quick else ''}")
    if only & {"raft", "latency", "startup"}:
        log("peers' venv ...")
        problem = prepare_peers()
        if problem:
            log(f"    peers unavailable: {problem}")
    if "latency" in only and pyre_available():
        log(f"pyre skipped: {pyre_available()}")
    # safe order runs in the "total" section, beside the sequencer runs it is compared with
    order = [s for s in SECTIONS if s != "safe" and (s in only or (s == "total" and "safe" in only))]
    runs: list[Run] = []
    rows: list[Row] = []
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="sgcs-compare-cwd-") as cwd:
        for section in order:
            alternate(section, bouts_for(section, plan, args, only), args.runs, Path(cwd), runs)
            rows += rows_for(section, plan, args, only, runs)
    text = table(rows)
    print(text, flush=True)
    failed = [r for r in runs if r.error]
    log(f"{len(runs)} runs in {time.time() - started:.0f} s, {len(failed)} failed")
    if args.json:
        args.json.write_text(json.dumps({
            "commit": commit, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
            "cores": os.cpu_count(), "runs_per_comparison": args.runs, "quick": args.quick,
            "sections": sorted(only), "plan": asdict(plan), "table": text,
            "rows": [asdict(r) | {"ratio": ratio(r)} for r in rows], "runs": [asdict(r) for r in runs],
        }, indent=1))
        log(f"raw runs in {args.json}")
    return 1 if runs and len(failed) == len(runs) else 0


if __name__ == "__main__":
    sys.exit(main())
