"""A Jepsen-style nemesis: real member processes on network namespaces, faults
injected from a seed, the shared trace checked at the end. This is the
harness; ``benchmarks/nemesis.py`` is its command line, and
``tests/test_nemesis.py`` checks its pure parts and makes one short run.

    python benchmarks/nemesis.py --members 5 --seconds 60 --order total --seed S
        [--faults loss,delay,reorder,duplicate,partition,oneway,kill,pause,ratelimit]
        [--overlap 2] [--rate 5] [--keep DIR] [--json OUT]

Every member (``tests/membership_peer.py``, id i) runs alone on host i of
``tests/netns.py``'s bridge and multicasts ``--rate`` messages a second into
one group of order ``--order``, recording trace schema 1. Once the group has
formed, a nemesis thread plays a fault schedule drawn from
``random.Random(seed)`` (``schedule``: pure, so a seed replays the same
faults at the same offsets) and prints one timeline line per fault start and
end. How each fault is made (this kernel has no netem and no action modules,
so classic-BPF ``direct-action`` filters, which need neither, do the drops):

* loss: a cBPF filter on the host's ``eth0`` egress (clsact) that drops a
  frame when the kernel's random number is under the loss fraction;
* partition / oneway: on the switch's port toward each host (``p<i>``
  egress), a cBPF filter dropping IPv4 frames whose source address is on the
  other side; one-way drops only toward one side; isolating a host is the
  partition of one host from the rest. Multicast and unicast alike: the
  source is what is matched;
* delay (with jitter), reorder, duplicate: frames from the host are diverted
  to a small user-space link (``shaper``, a process in the switch namespace):
  a cBPF filter on the port's ingress drops IPv4 frames after the port's
  packet tap has given a copy to the link, which sends each one into the
  bridge (``br0``) after its delay, earlier for the reordered, twice for the
  duplicated;
* ratelimit: a ``tbf`` qdisc on the host's ``eth0``;
* kill: SIGKILL of the member, restarted after a while with the same id (a
  new incarnation, its trace in a directory of its own); pause: SIGSTOP,
  then SIGCONT.

At most ``--overlap`` faults are active at once and at most a minority of the
members are killed or paused at once. At the end every fault is healed (the
qdiscs removed, SIGCONT, restarts), the group must settle (every member in
one view of all members), the members leave gracefully, the traces are
merged into one (a ``crash`` row at each kill, a ``recover`` row at each
restart, one time axis) and checked with ``sgcs.sim.checks``. Exit 0 only
with 0 violations, every message of a live sender with an outcome, and a
settled group. ``docs/nemesis.md`` says more.
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import random
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any, Callable, Iterator, Sequence

import netns
from _net import private_group

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent

KINDS = ("loss", "delay", "reorder", "duplicate", "partition", "oneway", "kill", "pause", "ratelimit")
PROCESS_KINDS = frozenset({"kill", "pause"})
LINK_KINDS = frozenset({"delay", "reorder", "duplicate"})
"""Faults made by the user-space link (the kernel here has no netem)."""
APPLIES = {"fifo": ("3_total", "4_causal"), "causal": ("3_total",)}
"""Order -> invariants that do not apply to it (3 and 4 are for ordered groups)."""
GROUP = "g"
PORT = 47100
"""Member i's unicast port is PORT + i (fresh namespaces: every port is free there)."""
MULTICAST_PORT = 47017
FAULT_GAP = (1.0, 5.0)
"""Seconds between two fault starts."""
DURATION = {"kill": (1.0, 10.0), "pause": (1.0, 8.0)}
NETWORK_DURATION = (2.0, 12.0)
MIN_FAULT = 1.0
"""No fault lasts less; none starts less than this before the end of the schedule."""
FORM_TIMEOUT = 30.0
"""Seconds the members get to form one group before the nemesis starts."""
AT_REST = 3.0
"""Seconds of fault-free traffic after the group settled and before the members stop."""
GRACE = 2.0
"""Messages sent this long before the members stopped may still be in flight."""
STOP_GRACE = 10.0
QUIET_FOR = 2.0
"""Queue workload: seconds between the replicas' last writes and their stop."""
POLL = 0.1
TBF = ("burst", "4kb", "latency", "300ms")
PREF_FAULT = 100
"""Filter preference of fault k: PREF_FAULT + k (each fault removes only its own)."""
PREF_DIVERT, PREF_ECHO = 10, 11


# ====================================================================== the schedule (pure)


@dataclass(frozen=True)
class Fault:
    """One fault: ``kind`` from ``start`` to ``end`` (seconds after the nemesis
    starts). ``members`` are its targets (ids 1..n); a partition has ``sides``
    (one-way: traffic from ``sides[0]`` to ``sides[1]`` is dropped)."""

    index: int
    kind: str
    start: float
    end: float
    members: tuple[int, ...] = ()
    sides: tuple[tuple[int, ...], ...] = ()
    params: tuple[tuple[str, float], ...] = ()

    def param(self, name: str) -> float:
        return dict(self.params)[name]

    def describe(self) -> str:
        if self.sides:
            arrow = " -> " if self.kind == "oneway" else " | "
            targets = arrow.join("[" + " ".join(map(str, side)) + "]" for side in self.sides)
        else:
            targets = "members " + " ".join(map(str, self.members))
        extra = " ".join(f"{k}={v:g}" for k, v in self.params)
        return f"#{self.index} {self.kind} {targets}" + (f" ({extra})" if extra else "")


def minority(members: int) -> int:
    """The most members that may be down at once: fewer than half."""
    return (members - 1) // 2


def schedule(seed: int, members: int, seconds: float, kinds: Sequence[str] = KINDS, overlap: int = 2,
             outage: tuple[int, float, float] | None = None) -> list[Fault]:
    """The faults of a run, from ``random.Random(seed)`` alone. Faults start
    in order; a fault is drawn only where fewer than ``overlap`` are active,
    and a kill or pause only where fewer than ``minority(members)`` members
    are down (it takes a member that is up). ``outage`` (member, start, end):
    one more kill, last in the list, of that member for that long (a replica
    that misses thousands of writes); no other kill or pause takes it near
    then, and it counts as down for the minority rule."""
    held = [] if outage is None else [Fault(0, "kill", outage[1], outage[2], members=(outage[0],))]
    longest = max(DURATION.values(), key=lambda d: d[1])[1]
    rng = random.Random(seed)
    faults: list[Fault] = []
    t = rng.uniform(*FAULT_GAP)
    while t <= seconds - MIN_FAULT:
        active = [f for f in faults if f.end > t]
        if len(active) >= overlap:
            t = min(f.end for f in active) + rng.uniform(0.0, FAULT_GAP[0])  # soon after a slot frees
            continue
        kind = rng.choice(list(kinds))
        low, high = DURATION.get(kind, NETWORK_DURATION)
        end = round(min(t + rng.uniform(low, high), seconds), 3)
        near = [f for f in held if f.start - longest <= t <= f.end]
        fault = _draw(rng, kind, members, active + near)
        if fault is not None:
            faults.append(replace(fault, index=len(faults), start=round(t, 3), end=max(end, round(t + MIN_FAULT, 3))))
        t += rng.uniform(*FAULT_GAP)
    return faults + [replace(f, index=len(faults)) for f in held]


def _draw(rng: random.Random, kind: str, members: int, active: list[Fault]) -> Fault | None:
    """Targets and parameters of one fault of ``kind``; None where the rules forbid it now."""
    everyone = list(range(1, members + 1))
    if kind in PROCESS_KINDS:
        down = {m for f in active if f.kind in PROCESS_KINDS for m in f.members}
        up = [m for m in everyone if m not in down]
        if len(down) >= minority(members) or not up:
            return None
        return Fault(0, kind, 0.0, 0.0, members=(rng.choice(up),))
    if kind in ("partition", "oneway"):
        shuffled = rng.sample(everyone, members)
        cut = 1 if kind == "partition" and rng.random() < 0.4 else rng.randint(1, members - 1)  # 0.4: isolate one
        return Fault(0, kind, 0.0, 0.0, sides=(tuple(sorted(shuffled[:cut])), tuple(sorted(shuffled[cut:]))))
    targets = tuple(everyone) if rng.random() < 0.3 else (rng.choice(everyone),)  # one host's link, or all
    return Fault(0, kind, 0.0, 0.0, members=targets, params=tuple(_link_params(rng, kind).items()))


def _link_params(rng: random.Random, kind: str) -> dict[str, float]:
    if kind == "loss":
        return {"loss": rng.choice((0.05, 0.1, 0.2, 0.3))}
    if kind == "delay":
        delay = rng.randint(20, 300)
        return {"delay_ms": delay, "jitter_ms": rng.randint(0, delay // 2)}
    if kind == "reorder":
        return {"delay_ms": rng.randint(10, 50), "reorder": rng.choice((0.25, 0.5))}
    if kind == "duplicate":
        return {"duplicate": rng.choice((0.05, 0.1, 0.3))}
    if kind == "ratelimit":
        return {"kbit": rng.choice((64, 128, 512))}
    raise ValueError(f"unknown fault kind {kind!r}")


def overlap_at(faults: Sequence[Fault], t: float) -> list[Fault]:
    """The faults active at ``t`` (start inclusive, end exclusive)."""
    return [f for f in faults if f.start <= t < f.end]


# ====================================================================== tc command lines (pure)

SHOT, UNSPEC = 2, 0xFFFFFFFF
"""cls_bpf direct-action verdicts: drop; no verdict (the next filter decides)."""
_LDH_ETHERTYPE = (0x28, 0, 0, 12)
_LD_IP_SOURCE = (0x20, 0, 0, 26)
_LD_RANDOM = (0x20, 0, 0, 0xFFFFF000 + 56)  # SKF_AD_OFF + SKF_AD_RANDOM
_ETH_P_IP = 0x0800
_ETH_P_ALL = 0x0003
Program = list[tuple[int, int, int, int]]


def bytecode(program: Program) -> str:
    """A classic BPF program as ``tc ... bpf bytecode`` takes it."""
    return f"{len(program)}," + ",".join(" ".join(map(str, op)) for op in program)


def drop_sources(addresses: Sequence[str]) -> Program:
    """Drop IPv4 frames from any of ``addresses``; no verdict on the rest."""
    n = len(addresses)
    program: Program = [_LDH_ETHERTYPE, (0x15, 0, n + 1, _ETH_P_IP), _LD_IP_SOURCE]
    program += [(0x15, n - i, 0, _address(a)) for i, a in enumerate(addresses)]  # jeq: to the drop
    return program + [(0x06, 0, 0, UNSPEC), (0x06, 0, 0, SHOT)]


def drop_randomly(fraction: float) -> Program:
    """Drop each frame with probability ``fraction`` (the kernel's per-packet random number)."""
    threshold = min(int(fraction * 2**32), 2**32 - 1)
    return [_LD_RANDOM, (0x35, 1, 0, threshold), (0x06, 0, 0, SHOT), (0x06, 0, 0, UNSPEC)]  # jge: keep


def drop_ipv4() -> Program:
    return [_LDH_ETHERTYPE, (0x15, 0, 1, _ETH_P_IP), (0x06, 0, 0, SHOT), (0x06, 0, 0, UNSPEC)]


def _address(text: str) -> int:
    return struct.unpack("!I", socket.inet_aton(text))[0]


def _filter(namespace: str, dev: str, hook: str, pref: int, program: Program) -> list[str]:
    return ["tc", "-n", namespace, "filter", "add", "dev", dev, hook, "pref", str(pref), "protocol", "all",
            "bpf", "bytecode", bytecode(program), "da"]


def _unfilter(namespace: str, dev: str, hook: str, pref: int) -> list[str]:
    return ["tc", "-n", namespace, "filter", "del", "dev", dev, hook, "pref", str(pref)]


def setup_commands(hosts: netns.Hosts) -> list[list[str]]:
    """A clsact qdisc (the hooks the filters hang on) on every host's eth0 and switch port."""
    return [["tc", "-n", name, "qdisc", "add", "dev", "eth0", "clsact"] for name in hosts.names] + \
        [["tc", "-n", hosts.switch, "qdisc", "add", "dev", hosts.port(i), "clsact"] for i in range(len(hosts.names))]


def heal_commands(hosts: netns.Hosts) -> list[list[str]]:
    """Remove every qdisc (and with them every filter) the nemesis may have added."""
    commands = []
    for i, name in enumerate(hosts.names):
        commands += [["tc", "-n", name, "qdisc", "del", "dev", "eth0", "root"],
                     ["tc", "-n", name, "qdisc", "del", "dev", "eth0", "clsact"],
                     ["tc", "-n", hosts.switch, "qdisc", "del", "dev", hosts.port(i), "clsact"]]
    return commands


def filter_commands(fault: Fault, hosts: netns.Hosts) -> tuple[list[list[str]], list[list[str]]]:
    """(apply, remove) for the faults made by filters alone: loss, partition, oneway."""
    pref = PREF_FAULT + fault.index % 60000
    places: list[tuple[str, str, str, Program]] = []  # (namespace, device, hook, program)
    if fault.kind == "loss":
        places = [(hosts.names[m - 1], "eth0", "egress", drop_randomly(fault.param("loss"))) for m in fault.members]
    elif fault.kind in ("partition", "oneway"):
        a, b = fault.sides
        directions = [(a, b)] if fault.kind == "oneway" else [(a, b), (b, a)]
        for source, target in directions:
            senders = [hosts.addresses[m - 1] for m in source]
            places += [(hosts.switch, hosts.port(m - 1), "egress", drop_sources(senders)) for m in target]
    else:
        raise ValueError(f"{fault.kind} is not made by filters")
    return ([_filter(ns, dev, hook, pref, program) for ns, dev, hook, program in places],
            [_unfilter(ns, dev, hook, pref) for ns, dev, hook, _ in places])


def rate_command(hosts: netns.Hosts, member: int, kbit: float | None) -> list[str]:
    """Limit member's uplink to ``kbit`` (the lowest of its active limits), or lift the limit (None)."""
    name = hosts.names[member - 1]
    if kbit is None:
        return ["tc", "-n", name, "qdisc", "del", "dev", "eth0", "root"]
    return ["tc", "-n", name, "qdisc", "replace", "dev", "eth0", "root", "tbf", "rate", f"{kbit:g}kbit", *TBF]


def divert_commands(hosts: netns.Hosts, member: int) -> tuple[list[list[str]], list[list[str]]]:
    """(apply, remove): frames from the member's host go through its user-space link only.
    The port's ingress drops IPv4 (its tap has copied each frame to the link);
    its egress drops frames from the host's own address, which the link's
    injection into the bridge would otherwise flood back to it."""
    port, switch = hosts.port(member - 1), hosts.switch
    own = [hosts.addresses[member - 1]]
    return ([_filter(switch, port, "egress", PREF_ECHO, drop_sources(own)),
             _filter(switch, port, "ingress", PREF_DIVERT, drop_ipv4())],
            [_unfilter(switch, port, "ingress", PREF_DIVERT), _unfilter(switch, port, "egress", PREF_ECHO)])


def run_tc(command: list[str], check: bool = True) -> bool:
    done = subprocess.run(command, capture_output=True, text=True, timeout=netns.COMMAND_TIMEOUT)
    if check and done.returncode != 0:
        raise RuntimeError(f"`{' '.join(command)}` failed: {done.stderr.strip()}")
    return done.returncode == 0


def leftover_qdiscs(hosts: netns.Hosts) -> list[str]:
    """Qdiscs still on the hosts' eth0 or the switch ports other than the default (should be none)."""
    places = [(name, "eth0") for name in hosts.names] + [(hosts.switch, hosts.port(i)) for i in range(len(hosts.names))]
    found = []
    for namespace, dev in places:
        shown = subprocess.run(["tc", "-n", namespace, "qdisc", "show", "dev", dev], capture_output=True, text=True,
                               timeout=netns.COMMAND_TIMEOUT).stdout
        found += [f"{namespace} {dev}: {line}" for line in shown.splitlines() if line and "noqueue" not in line]
    return found


# ====================================================================== the user-space link


@dataclass(frozen=True)
class Link:
    """What the user-space link does to each frame (netem's delay, jitter, reorder, duplicate)."""

    delay_ms: float = 0.0
    jitter_ms: float = 0.0
    reorder: float = 0.0
    """Fraction of frames sent at once, ahead of the others (which wait ``delay_ms``)."""
    duplicate: float = 0.0

    @staticmethod
    def merge(faults: Sequence[Fault]) -> "Link":
        """Overlapping faults on one host: the strongest of each."""
        merged: dict[str, float] = {}
        for fault in faults:
            for name, value in fault.params:
                merged[name] = max(merged.get(name, 0.0), value)
        return Link(**merged)

    def delays(self, rng: random.Random) -> list[float]:
        """Seconds to hold one frame, one entry per copy sent."""
        delay = self.delay_ms / 1000
        if self.reorder and rng.random() < self.reorder:
            delay = 0.0
        delay = max(0.0, delay + rng.uniform(-self.jitter_ms, self.jitter_ms) / 1000)
        return [delay, delay] if self.duplicate and rng.random() < self.duplicate else [delay]


def shaper(listen: str, inject: str, seed: int) -> int:
    """The link, run in the switch namespace: frames arriving on port ``listen``
    (IPv4 only) are sent into ``inject`` (the bridge) as the current ``Link``
    says. Reads one JSON ``Link`` per line on stdin; ends on EOF, sending what
    it still holds."""
    rng = random.Random(seed)
    # every protocol: a socket for IPv4 alone would see nothing, since the
    # bridge consumes a port's frames before protocol handlers; taps come first
    receiver = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(_ETH_P_ALL))
    receiver.bind((listen, _ETH_P_ALL))
    receiver.setblocking(False)
    sender = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
    sender.bind((inject, 0))
    link, counter, pending = Link(), 0, b""
    held: list[tuple[float, int, bytes]] = []  # (when to send, arrival number, frame): a heap
    print("ready", flush=True)

    def send(frame: bytes) -> None:
        try:
            sender.send(frame)
        except OSError:
            pass  # a frame the bridge refuses is a lost frame

    while True:
        timeout = max(0.0, held[0][0] - time.monotonic()) if held else None
        readable, _, _ = select.select([receiver, sys.stdin.fileno()], [], [], timeout)
        if sys.stdin.fileno() in readable:
            chunk = os.read(sys.stdin.fileno(), 4096)
            if not chunk:
                break
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                link = Link(**json.loads(line))
        if receiver in readable:
            for frame in _drain(receiver):
                now = time.monotonic()
                for delay in link.delays(rng):
                    counter += 1
                    heapq.heappush(held, (now + delay, counter, frame))
        while held and held[0][0] <= time.monotonic():
            send(heapq.heappop(held)[2])
    for _, _, frame in sorted(held):
        send(frame)
    return 0


def _drain(receiver: socket.socket) -> Iterator[bytes]:
    """IPv4 frames arriving from the host (not those the port sends to it, nor
    ARP and IPv6, which the divert filter lets through), their UDP checksum
    cleared: a veth frame's checksum is left for the offload to fill, and 0
    means "none" in IPv4."""
    while True:
        try:
            frame, address = receiver.recvfrom(65536)
        except BlockingIOError:
            return
        if address[2] == socket.PACKET_OUTGOING or frame[12:14] != b"\x08\x00":
            continue
        yield _clear_udp_checksum(frame)


def _clear_udp_checksum(frame: bytes) -> bytes:
    if len(frame) < 34 or frame[23] != 17:  # IPv4 protocol byte: not UDP
        return frame
    header = (frame[14] & 0x0F) * 4
    fragment_offset = struct.unpack("!H", frame[20:22])[0] & 0x1FFF
    at = 14 + header + 6
    if fragment_offset or len(frame) < at + 2:  # only the first fragment holds the UDP header
        return frame
    return frame[:at] + b"\x00\x00" + frame[at + 2:]


class Shaper:
    """The link process of one host, started when the first link fault on it
    starts and ended when the last one ends."""

    def __init__(self, hosts: netns.Hosts, member: int, seed: int) -> None:
        self.hosts, self.member = hosts, member
        command = ["ip", "netns", "exec", hosts.switch, sys.executable, str(Path(__file__).resolve()),
                   "--shaper", hosts.port(member - 1), "br0", str(seed)]
        # a session of its own, as the members: the harness ends it itself, after a Ctrl-C too
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                        start_new_session=True)
        assert self.process.stdout is not None
        said = self.process.stdout.readline().strip()
        if said != "ready":
            self.process.kill()
            raise RuntimeError(f"the link for member {member} said {said!r}")
        apply, self.remove = divert_commands(hosts, member)
        for command in apply:
            run_tc(command)

    def set(self, link: Link) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(link.__dict__) + "\n")
        self.process.stdin.flush()

    def close(self) -> None:
        for command in self.remove:
            run_tc(command, check=False)
        try:
            assert self.process.stdin is not None
            self.process.stdin.close()
            self.process.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            self.process.kill()
            self.process.wait()


# ====================================================================== the members


@dataclass
class Incarnation:
    """One process of member ``member``; ``number`` 0 is the first start."""

    member: int
    number: int
    process: subprocess.Popen[str]
    trace: Path
    spawned: float
    events: list[dict[str, Any]] = field(default_factory=list)
    killed: float | None = None
    """When the nemesis (or the tear-down) killed it; None if it ended otherwise or runs."""
    stopping: bool = False

    def views(self) -> list[dict[str, Any]]:
        return [e for e in list(self.events) if e.get("event") == "view"]


class Members:
    """Member i on host i (``tests/membership_peer.py`` under ``ip netns exec``)."""

    def __init__(self, hosts: netns.Hosts, workdir: Path, order: str, rate: float, lifetime: float,
                 queue: bool = False, queue_store: str = "disk") -> None:
        self.hosts, self.workdir, self.order, self.rate, self.lifetime = hosts, workdir, order, rate, lifetime
        self.queue = queue
        """The replicated-queue workload: every member a replica of one queue (safe order)."""
        self.queue_store = queue_store
        """disk: each replica keeps its state in ``member-<id>.rq.sqlite`` across restarts; memory: it restarts empty."""
        self.ids = list(range(1, len(hosts.names) + 1))
        self.multicast = private_group()
        self.all: list[Incarnation] = []
        self.current: dict[int, Incarnation] = {}
        self.paused: set[int] = set()
        self.forced: list[int] = []
        """Members that did not leave within STOP_GRACE of SIGTERM (a wedge, or a slow leave)."""
        self.lock = threading.Lock()

    def main_trace(self) -> Path:
        return self.workdir / "trace"

    def start(self, member: int) -> Incarnation:
        number = sum(1 for i in self.all if i.member == member)
        trace = self.main_trace() if number == 0 else self.workdir / f"trace-{member}.{number}"
        command = [*self.hosts.prefix(member - 1), sys.executable, str(TESTS / "membership_peer.py"),
                   "--id", str(member), "--port", str(PORT + member), "--group", GROUP, "--order", self.order,
                   "--rate", str(self.rate), "--multicast-group", self.multicast,
                   "--multicast-port", str(MULTICAST_PORT), f"--set=bind_host={self.hosts.addresses[member - 1]}",
                   "--lifetime", str(self.lifetime), "--trace", str(trace),
                   *(["--queue", str(len(self.ids))] if self.queue else []),
                   *(["--queue-path", str(self.workdir / f"member-{member}.rq.sqlite")]
                     if self.queue and self.queue_store == "disk" else [])]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(TESTS), os.environ.get("PYTHONPATH", "")])}
        with (self.workdir / f"member-{member}.{number}.stderr").open("w") as stderr:
            # a session of its own: a Ctrl-C for the harness does not reach the members
            process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=stderr, text=True, bufsize=1,
                                       env=env, start_new_session=True)
        incarnation = Incarnation(member, number, process, trace, time.time())
        threading.Thread(target=_read_lines, args=(process.stdout, incarnation.events), daemon=True).start()
        with self.lock:
            self.all.append(incarnation)
            self.current[member] = incarnation
        return incarnation

    def kill(self, member: int) -> None:
        incarnation = self.current[member]
        incarnation.killed = time.time()
        incarnation.process.kill()
        incarnation.process.wait()
        self.paused.discard(member)

    def pause(self, member: int) -> None:
        self.current[member].process.send_signal(signal.SIGSTOP)
        self.paused.add(member)

    def resume(self, member: int) -> None:
        self.current[member].process.send_signal(signal.SIGCONT)
        self.paused.discard(member)

    def heal(self, restart: bool = True) -> None:
        """SIGCONT the paused, restart the killed."""
        for member in sorted(self.paused):
            self.resume(member)
        for member in self.ids if restart else ():
            if self.current[member].killed is not None:
                self.start(member)

    def unexpected(self) -> list[Incarnation]:
        """Incarnations that ended without being asked (a crash of sgcs or of the member)."""
        return [i for i in self.all if i.killed is None and not i.stopping and i.process.poll() is not None]

    def quiet(self) -> None:
        """Queue workload: every replica stops writing (SIGUSR1), and the ops under way
        get QUIET_FOR s to reach every replica, so that their final states compare."""
        for incarnation in self.current.values():
            if incarnation.process.poll() is None:
                _signal_quietly(incarnation.process, signal.SIGUSR1)
        time.sleep(QUIET_FOR)

    def stop(self) -> float:
        """End every member gracefully (SIGCONT, SIGTERM); SIGKILL those that do not end
        within STOP_GRACE (they count as killed). Returns when SIGTERM was sent."""
        alive = [i for i in self.current.values() if i.process.poll() is None]
        at = time.time()
        for incarnation in alive:
            incarnation.stopping = True
            for signum in (signal.SIGCONT, signal.SIGTERM):
                _signal_quietly(incarnation.process, signum)
        deadline = time.monotonic() + STOP_GRACE
        for incarnation in alive:
            try:
                incarnation.process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                incarnation.killed = time.time()
                incarnation.process.kill()
                incarnation.process.wait()
                self.forced.append(incarnation.member)
        return at

    def kill_all(self) -> None:
        """The tear-down's guarantee: no member process survives."""
        for incarnation in self.all:
            if incarnation.process.poll() is None:
                _signal_quietly(incarnation.process, signal.SIGKILL)
                incarnation.process.wait()

    def agreed(self, at: float) -> bool:
        """Every member's process running at ``at`` had, as its latest view by then,
        one and the same view of exactly all members."""
        seen = set()
        for member in self.ids:
            running = [i for i in self.all if i.member == member and i.spawned <= at
                       and (i.killed is None or i.killed > at)]
            if not running:
                return False
            views = [v for v in running[-1].views() if v["t"] <= at]
            if not views or sorted(views[-1]["members"]) != self.ids:
                return False
            seen.add(views[-1]["view_id"])
        return len(seen) == 1

    def settled_at(self, since: float, until: float) -> float | None:
        """The first instant in [since, until] at which ``agreed`` holds (it can only
        start holding at ``since`` or at a view line)."""
        instants = sorted({since, *(v["t"] for i in list(self.all) for v in i.views() if since < v["t"] <= until)})
        return next((t for t in instants if self.agreed(t)), None)


def _read_lines(stream: IO[str] | None, events: list[dict[str, Any]]) -> None:
    assert stream is not None
    for line in stream:
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(event, dict):
            events.append(event)


def _signal_quietly(process: subprocess.Popen[str], signum: signal.Signals) -> None:
    try:
        process.send_signal(signum)
    except ProcessLookupError:
        pass


# ====================================================================== the nemesis


class Nemesis(threading.Thread):
    """Plays ``faults`` (times from the thread's start), printing one timeline line per fault start and end."""

    def __init__(self, faults: list[Fault], hosts: netns.Hosts, members: Members, seed: int,
                 say: Callable[[str], None]) -> None:
        super().__init__(name="nemesis", daemon=True)
        self.faults, self.hosts, self.members, self.seed, self.say = faults, hosts, members, seed, say
        self.stopping = threading.Event()
        self.started_at = 0.0
        self.active: dict[int, Fault] = {}
        self.removals: dict[int, list[list[str]]] = {}
        self.shapers: dict[int, Shaper] = {}
        self.timeline: list[tuple[float, str, Fault]] = []
        """(wall time, "start" or "end", fault) as played."""
        self.error: BaseException | None = None

    def run(self) -> None:
        self.started_at = time.time()
        steps = sorted([(f.start, 1, f.index, "start") for f in self.faults] +
                       [(f.end, 0, f.index, "end") for f in self.faults])  # ends before starts at one instant
        try:
            for at, _, index, step in steps:
                if self.stopping.wait(max(0.0, self.started_at + at - time.time())):
                    return
                fault = self.faults[index]
                (self.begin if step == "start" else self.finish)(fault)
                now = time.time()
                self.timeline.append((now, step, fault))
                self.say(f"{now - self.started_at:8.2f}s {step:<5} {fault.describe()}")
        except BaseException as error:  # reported by the main thread, which then tears down
            self.error = error

    def begin(self, fault: Fault) -> None:
        self.active[fault.index] = fault
        if fault.kind == "kill":
            self.members.kill(fault.members[0])
        elif fault.kind == "pause":
            self.members.pause(fault.members[0])
        elif fault.kind == "ratelimit":
            self._rates(fault.members)
        elif fault.kind in LINK_KINDS:
            self._links(fault.members)
        else:
            apply, self.removals[fault.index] = filter_commands(fault, self.hosts)
            for command in apply:
                run_tc(command)

    def finish(self, fault: Fault) -> None:
        del self.active[fault.index]
        if fault.kind == "kill":
            self.members.start(fault.members[0])
        elif fault.kind == "pause":
            self.members.resume(fault.members[0])
        elif fault.kind == "ratelimit":
            self._rates(fault.members)
        elif fault.kind in LINK_KINDS:
            self._links(fault.members)
        else:
            for command in self.removals.pop(fault.index):
                run_tc(command, check=False)

    def _on(self, member: int, kinds: frozenset[str]) -> list[Fault]:
        return [f for f in self.active.values() if f.kind in kinds and member in f.members]

    def _rates(self, members: Sequence[int]) -> None:
        for member in members:
            limits = [f.param("kbit") for f in self._on(member, frozenset({"ratelimit"}))]
            run_tc(rate_command(self.hosts, member, min(limits) if limits else None), check=bool(limits))

    def _links(self, members: Sequence[int]) -> None:
        for member in members:
            faults = self._on(member, LINK_KINDS)
            if not faults:
                shaper = self.shapers.pop(member, None)
                if shaper is not None:
                    shaper.close()
                continue
            if member not in self.shapers:
                self.shapers[member] = Shaper(self.hosts, member, self.seed * 1000 + member)
            self.shapers[member].set(Link.merge(faults))

    def heal(self, restart: bool = True) -> None:
        """End whatever is still active: every link, qdisc and filter, every
        pause, and (with ``restart``) every kill."""
        for shaper in self.shapers.values():
            shaper.close()
        self.shapers.clear()
        for command in heal_commands(self.hosts):
            run_tc(command, check=False)
        self.members.heal(restart)


# ====================================================================== the trace


def merge_traces(members: Members, out: Path) -> Path:
    """One run directory from the members' traces: the first incarnations share
    ``trace/``; a restarted one wrote its own directory, on its own time axis.
    Per member: its rows, a ``crash`` row at each kill and a ``recover`` row at
    each restart (the checker splits incarnations there), times shifted to the
    first directory's epoch."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    main = members.main_trace()
    epoch = float(json.loads((main / "meta.json").read_text())["epoch"])
    schema = pq.read_table(main / "events").schema
    pieces = []

    def row(t: float, member: int, kind: str) -> Any:
        return pa.Table.from_pylist([{"t": t, "node": member, "kind": kind}], schema=schema)

    for member in members.ids:
        for incarnation in [i for i in members.all if i.member == member]:
            if incarnation.number > 0:
                pieces.append(row(incarnation.spawned - epoch, member, "recover"))
            pieces.append(_rows_of(incarnation, epoch, schema, pa, pc, pq))
            if incarnation.killed is not None:
                pieces.append(row(incarnation.killed - epoch, member, "crash"))
    (out / "events").mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.concat_tables(pieces), out / "events" / "part-0.parquet")
    meta = json.loads((main / "meta.json").read_text())
    meta.update(members=members.ids, nodes=len(members.ids), merged_from=sorted({str(i.trace) for i in members.all}))
    (out / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    return out


def _rows_of(incarnation: Incarnation, epoch: float, schema: Any, pa: Any, pc: Any, pq: Any) -> Any:
    events = incarnation.trace / "events"
    if not events.is_dir():
        return schema.empty_table()
    table = pq.read_table(events, schema=schema)
    table = table.filter(pc.equal(table["node"], incarnation.member))
    if table.num_rows == 0:
        return table
    shift = float(json.loads((incarnation.trace / "meta.json").read_text())["epoch"]) - epoch
    return table.set_column(schema.get_field_index("t"), "t", pc.add(table["t"], shift))


def unresolved(events: Any, before: float) -> int:
    """Multicasts sent up to ``before`` (trace seconds) by an incarnation that was
    not killed, with no outcome at their sender: invariant 8 for members that
    left only when the run ended (the checker exempts every incarnation that
    leaves, whenever it left)."""
    from sgcs.sim import checks

    rows = events[events["kind"] != "leave"]
    return len(checks.without_outcome(rows, grace=max(0.0, float(rows["t"].max()) - before)))


# ====================================================================== the run


@dataclass
class Outcome:
    """The summary of a run, as printed and as ``--json`` writes it."""

    seed: int
    order: str
    members: int
    seconds: float
    faults: dict[str, int] = field(default_factory=dict)
    sent: int = 0
    delivered: int = 0
    violations: dict[str, int | None] = field(default_factory=dict)
    without_outcome: int | None = None
    nemesis_start: float | None = None
    """Seconds on the trace's time axis at which the nemesis started (timeline 0.00s)."""
    settle_final: float | None = None
    settle_intermediate: list[dict[str, Any]] = field(default_factory=list)
    unexpected_exits: list[str] = field(default_factory=list)
    timeline: list[str] = field(default_factory=list)
    leftovers: list[str] = field(default_factory=list)
    error: str | None = None
    trace: str | None = None
    queue: dict[str, Any] | None = None
    """The replicated-queue workload's figures (``queue_figures``)."""

    def ok(self) -> bool:
        queue_ok = self.queue is None or (not self.queue["lost"] and not self.queue["consumed_twice"]
                                          and self.queue["states_equal"])
        return (self.error is None and not self.unexpected_exits and self.settle_final is not None and queue_ok
                and self.without_outcome == 0 and not any(self.violations.values()) and bool(self.violations))


def _outage(text: str) -> tuple[int, float, float]:
    try:
        member, start, end = text.split(":")
        outage = int(member), float(start), float(end)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--outage takes MEMBER:START:END, got {text!r}") from None
    if not (outage[0] >= 1 and 0 < outage[1] < outage[2]):
        raise argparse.ArgumentTypeError(f"--outage: a member id from 1 and 0 < START < END, got {text!r}")
    return outage


def replay_command(args: argparse.Namespace) -> str:
    return (f"python benchmarks/nemesis.py --members {args.members} --seconds {args.seconds:g} --order {args.order} "
            f"--seed {args.seed} --faults {','.join(args.faults)} --overlap {args.overlap} --rate {args.rate:g}"
            + (" --workload queue" if args.workload == "queue" else "")
            + (" --queue-store memory" if args.workload == "queue" and args.queue_store == "memory" else "")
            + (" --outage {}:{:g}:{:g}".format(*args.outage) if args.outage else ""))


def queue_figures(members: Members) -> dict[str, Any]:
    """The replicated queue's history, from every incarnation's lines: every
    acknowledged PUT consumed (acknowledged) once or left in the queue at the
    end, none consumed twice, and the replicas that ended in one view with
    equal states.

    A batch a consumer received whose ``ack`` never returned (the consumer
    was killed, or the ack raised ``NotPrimary`` as a partition began) may
    have been acknowledged by the primary all the same: its messages were
    received once, so they count as ``ack_uncertain``, not lost."""
    lines = [event for incarnation in members.all for event in list(incarnation.events)]
    uncertain: set[str] = set()
    for incarnation in members.all:
        pending: list[str] = []  # the consumer's last batch, until its ack returns ("consumed")
        for event in list(incarnation.events):
            if event.get("event") == "received":
                uncertain.update(pending)
                pending = list(event["msgs"])
            elif event.get("event") == "consumed":
                pending = []
        uncertain.update(pending)
    acked = {e["msg"] for e in lines if e.get("event") == "acked"}
    consumed = Counter(m for e in lines if e.get("event") == "consumed" for m in e["msgs"])
    received = Counter(m for e in lines if e.get("event") == "received" for m in e["msgs"])
    finals = [e for e in lines if e.get("event") == "queue_state"]
    last = {}
    for incarnation in members.all:
        mine = [e for e in list(incarnation.events) if e.get("event") == "queue_state"]
        if mine and incarnation is members.current.get(incarnation.member):
            last[incarnation.member] = mine[-1]
    remaining = set().union(*(set(e["remaining"]) for e in last.values())) if last else set()
    states = {(e["applied"], e["digest"]) for e in last.values()}
    missing = acked - set(consumed) - remaining - uncertain
    acked_at = {e["msg"]: e.get("t", 0.0) for e in lines if e.get("event") == "acked"}
    # A fresh start (every HELLO of a settle point with no state) needs the whole replica
    # set, all restarted: what was acknowledged before it and not yet consumed was in
    # memory only at replicas that were all killed. Reported apart, not as a protocol loss.
    fresh = [(e["t"], e["view"]) for e in lines if e.get("event") == "rq_settle" and e.get("hellos")
             and all(h[0] == 0 for h in e["hellos"].values())]
    amnesia = {m for m in missing if any(t > acked_at[m] for t, _ in fresh)}
    return {"acked": len(acked), "refused": sum(1 for e in lines if e.get("event") == "refused"),
            "put_timeouts": sum(1 for e in lines if e.get("event") == "put_timeout"),
            "received": sum(received.values()), "redelivered": sum(n - 1 for n in received.values() if n > 1),
            "consumed": len(consumed), "consumed_twice": sorted(m for m, n in consumed.items() if n > 1)[:20],
            "ack_uncertain": len(uncertain - set(consumed)),
            "lost": sorted(missing - amnesia)[:20], "lost_with_every_replica": len(amnesia),
            "fresh_starts": len({view for _, view in fresh}),
            "recovered_starts": sum(1 for e in lines if e.get("event") == "ready" and e.get("recovered")),
            "left_in_queue": len(remaining),
            "final_states": len(last), "states_equal": len(states) == 1 and len(last) == len(members.ids),
            "final_reports": len(finals)}


def run(args: argparse.Namespace, workdir: Path, say: Callable[[str], None] = print) -> Outcome:
    """One nemesis run in ``workdir``: form, play the faults, heal, settle, stop, check."""
    faults = schedule(args.seed, args.members, args.seconds, args.faults, args.overlap, args.outage)
    outcome = Outcome(args.seed, args.order, args.members, args.seconds)
    say(f"{len(faults)} faults planned over {args.seconds:g} s: {dict(Counter(f.kind for f in faults))}")
    lifetime = args.seconds + args.settle_timeout + FORM_TIMEOUT + 120
    stopped_at: float | None = None
    with netns.hosts(args.members) as hosts:
        members = Members(hosts, workdir, "safe" if args.workload == "queue" else args.order, args.rate, lifetime,
                          queue=args.workload == "queue", queue_store=args.queue_store)
        nemesis = Nemesis(faults, hosts, members, args.seed, say)
        try:
            for command in setup_commands(hosts):
                run_tc(command)
            for member in members.ids:
                members.start(member)
            formed = _wait(lambda: members.agreed(time.time()), FORM_TIMEOUT, members)
            if not formed:
                raise RuntimeError(f"the {args.members} members did not form one group within {FORM_TIMEOUT:g} s")
            say(f"group of {args.members} formed; nemesis starts")
            nemesis.start()
            while nemesis.is_alive():
                nemesis.join(timeout=POLL)
            if nemesis.error is not None:
                raise RuntimeError(f"the nemesis failed: {nemesis.error!r}")
            final_heal = max([t for t, _, _ in nemesis.timeline], default=time.time())
            nemesis.heal()  # nothing should be left; removes the clsact hooks too
            outcome.leftovers = leftover_qdiscs(hosts)
            if _wait(lambda: members.agreed(time.time()), args.settle_timeout, members):
                settled = members.settled_at(final_heal, time.time())
                outcome.settle_final = None if settled is None else round(settled - final_heal, 3)
                say(f"settled {outcome.settle_final} s after the final heal")
                time.sleep(AT_REST)
            else:
                say(f"NOT settled within {args.settle_timeout:g} s of the final heal (a wedge?)")
            outcome.settle_intermediate = intermediate_settles(faults, nemesis, members, final_heal)
            if args.workload == "queue":
                members.quiet()
            stopped_at = members.stop()
        except KeyboardInterrupt:
            outcome.error = "interrupted"
            say("interrupted: tearing down")
        except Exception as error:  # noqa: BLE001 - reported in the summary, after the tear-down
            outcome.error = f"{type(error).__name__}: {error}"
            say(f"error: {outcome.error}")
        finally:
            nemesis.stopping.set()
            if nemesis.is_alive():
                nemesis.join(timeout=netns.COMMAND_TIMEOUT)
            if stopped_at is None:  # an error or Ctrl-C: no restarts, just end it all (the trace is still checked)
                nemesis.heal(restart=False)
                stopped_at = members.stop()
            members.kill_all()
            outcome.faults = dict(Counter(f.kind for _, step, f in nemesis.timeline if step == "start"))
            outcome.unexpected_exits = [f"member {i.member} incarnation {i.number} exited "
                                        f"{i.process.returncode} unasked" for i in members.unexpected()]
            outcome.unexpected_exits += [f"member {m} did not leave within {STOP_GRACE:g} s of SIGTERM (killed)"
                                         for m in members.forced]
            outcome.timeline = [f"{t - nemesis.started_at:8.2f}s {step:<5} {fault.describe()}"
                                for t, step, fault in nemesis.timeline]
    if stopped_at is not None and (members.main_trace() / "meta.json").exists():
        try:
            check(outcome, members, workdir, stopped_at, nemesis.started_at or None)
        except Exception as error:  # noqa: BLE001 - a trace that cannot be read or checked fails the run
            outcome.error = f"checking the trace: {type(error).__name__}: {error}"
    if args.workload == "queue":
        outcome.queue = queue_figures(members)
    for incarnation in members.all:  # the members' lines, to read a failure afterwards
        lines = "".join(json.dumps(e) + "\n" for e in list(incarnation.events))
        (workdir / f"member-{incarnation.member}.{incarnation.number}.jsonl").write_text(lines)
    return outcome


def _wait(predicate: Callable[[], bool], timeout: float, members: Members) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= deadline or members.unexpected():
            return False
        time.sleep(POLL)
    return True


def intermediate_settles(faults: list[Fault], nemesis: Nemesis, members: Members, final: float) -> list[dict[str, Any]]:
    """For every heal after which no fault was active until the next fault's start:
    seconds until the members agreed again (None: not before the next fault)."""
    started = {f.index: t for t, step, f in nemesis.timeline if step == "start"}
    ended = {f.index: t for t, step, f in nemesis.timeline if step == "end"}
    settles = []
    for fault in faults:
        heal = ended.get(fault.index)
        if heal is None or heal >= final or any(started.get(f.index, 0) <= heal < ended.get(f.index, 1e18)
                                                for f in faults if f.index != fault.index):
            continue
        next_start = min((t for t in started.values() if t > heal), default=final)
        settled = members.settled_at(heal, next_start)
        settles.append({"after": fault.describe(), "at": round(heal - nemesis.started_at, 2),
                        "settle": None if settled is None else round(settled - heal, 3),
                        "window": round(next_start - heal, 2)})
    return settles


def check(outcome: Outcome, members: Members, workdir: Path, stopped_at: float,
          nemesis_started: float | None) -> None:
    """Merge the traces, run the checker, fill the outcome's figures."""
    from sgcs.sim import checks

    merged = merge_traces(members, workdir / "merged")
    events = checks.read_events(merged)
    epoch = float(json.loads((merged / "meta.json").read_text())["epoch"])
    found = checks.violations(events)
    found["9_safe_undelivered"] = len(checks.unsafe_deliveries(events))
    skipped = APPLIES.get(members.order, ())
    outcome.violations = {k: (None if k in skipped else v) for k, v in found.items()}
    outcome.sent = int(((events["kind"] == "send") & events["dest"].isna()).sum())
    outcome.delivered = int((events["kind"] == "deliver").sum())
    outcome.without_outcome = unresolved(events, stopped_at - epoch - GRACE)
    outcome.trace = str(merged)
    outcome.nemesis_start = None if nemesis_started is None else round(nemesis_started - epoch, 3)


def summary(outcome: Outcome, args: argparse.Namespace) -> str:
    lines = ["summary:",
             f"  faults injected: {outcome.faults}",
             f"  messages: {outcome.sent} multicast, {outcome.delivered} deliveries",
             "  violations: " + (", ".join(f"{k}={'n/a' if v is None else v}" for k, v in outcome.violations.items())
                                 or "not checked"),
             f"  without an outcome at a live sender: {outcome.without_outcome}",
             f"  settle after the final heal: {outcome.settle_final} s"]
    for entry in outcome.settle_intermediate:
        lines.append(f"    after {entry['after']} at {entry['at']} s: settled in {entry['settle']} s "
                     f"(next fault {entry['window']} s later)")
    for text in outcome.unexpected_exits + [f"left behind: {q}" for q in outcome.leftovers]:
        lines.append(f"  {text}")
    if outcome.error:
        lines.append(f"  error: {outcome.error}")
    if outcome.queue is not None:
        lines.append("  replicated queue: " + ", ".join(f"{k}={v}" for k, v in outcome.queue.items()))
    lines.append(f"  trace: {outcome.trace} (the timeline's 0.00s is {outcome.nemesis_start} s there)")
    lines.append(f"  result: {'OK' if outcome.ok() else 'FAILED'}")
    lines.append(f"replay: {replay_command(args)}")
    return "\n".join(lines)


def parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--members", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=60.0, help="length of the fault schedule")
    parser.add_argument("--order", default="total", choices=("fifo", "causal", "total", "safe"))
    parser.add_argument("--seed", type=int, default=None, help="fault schedule seed (default: a fresh one, printed)")
    parser.add_argument("--faults", default=",".join(KINDS), help=f"comma-separated, of {','.join(KINDS)}")
    parser.add_argument("--overlap", type=int, default=2, help="most faults active at once")
    parser.add_argument("--rate", type=float, default=5.0, help="multicasts per second per member")
    parser.add_argument("--settle-timeout", type=float, default=60.0)
    parser.add_argument("--workload", default="group", choices=("group", "queue"),
                        help="group: multicasts in --order; queue: every member a replica of one replicated queue "
                             "(safe order), putting at --rate and consuming")
    parser.add_argument("--queue-store", default="disk", choices=("disk", "memory"),
                        help="queue workload: replicas keep their state in a file across restarts (disk), "
                             "or in memory, so that the queue empties once every replica has restarted")
    parser.add_argument("--outage", type=_outage, default=None, metavar="MEMBER:START:END",
                        help="also kill MEMBER from START to END seconds (e.g. a replica that misses 10,000 writes)")
    parser.add_argument("--keep", type=Path, default=None, help="run directory (traces, members' stderr) to keep")
    parser.add_argument("--json", type=Path, default=None, help="write the summary here as JSON")
    args = parser.parse_args(argv)
    args.faults = [k for k in args.faults.split(",") if k]
    unknown = sorted(set(args.faults) - set(KINDS))
    if unknown or not args.faults:
        parser.error(f"--faults: unknown kinds {unknown}" if unknown else "--faults: none given")
    if not 2 <= args.members <= len(netns.HOSTS):
        parser.error(f"--members: 2 to {len(netns.HOSTS)}")
    if args.outage and (args.outage[0] > args.members or args.outage[2] > args.seconds):
        parser.error(f"--outage: member 1 to {args.members}, ending by --seconds ({args.seconds:g})")
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(2**31)
    return args


if __name__ == "__main__":  # the link process a ``Shaper`` starts in the switch namespace
    if len(sys.argv) != 5 or sys.argv[1] != "--shaper":
        sys.exit("usage: python tests/_nemesis.py --shaper PORT BRIDGE SEED (started by the nemesis itself)")
    sys.exit(shaper(sys.argv[2], sys.argv[3], int(sys.argv[4])))
