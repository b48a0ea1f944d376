"""One group member as a process, and the harness that runs eight of them.

Run as a script, this is a member::

    python tests/membership_peer.py --id N --port P --group g [--order fifo] [--rate R]
        [--messages M --wait-for K] [--trace DIR]

It opens a node with id N on loopback port P, joins the group by discovery
(no member list: it starts as a singleton view and finds the others by
beacons), multicasts a small message every 1/R s, and prints one JSON line
per event to stdout, flushed: ``ready`` once the node is up, ``view`` for
every ViewChange, ``deliver`` with ``--verbose`` only, and ``exit`` with its
counters when SIGTERM (or ``--lifetime``) ends it after a graceful leave.
With ``--messages M`` it waits until its view holds ``--wait-for`` members,
sends exactly M messages (blocking under flow control) at the rate, reports
``sent_all``, then ``delivered`` counts every half second. With ``--trace
DIR`` the node records trace schema 1 into DIR, shared by all members.
Every line has ``t`` (``time.time()``): the harness compares it with the
instants at which it killed or stopped a member, on the same host clock.

Imported, this is the harness (``Cluster``) and the scenarios that
``tests/test_membership_processes.py`` asserts on and
``benchmarks/membership_processes.py`` measures. Real processes, killed with
SIGKILL or frozen with SIGSTOP, are the point: a crash leaves its port closed
(the kernel answers with ICMP "port unreachable"), a frozen process keeps its
port and merely falls silent, and the failure detector must tell the two apart.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Callable, Mapping, Sequence

from _net import free_udp_ports, private_group

HERE = Path(__file__).resolve().parent
SECRET = "membership-process-test-secret"
POLL = 0.02
"""Seconds between two looks at the members' events while the harness waits."""
STOP_GRACE = 5.0
"""Seconds the members get to leave gracefully on SIGTERM before SIGKILL."""

# ====================================================================== the member


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="An sgcs group member that reports its views as JSON lines.")
    parser.add_argument("--id", type=int, required=True, help="node id")
    parser.add_argument("--port", type=int, required=True, help="unicast UDP port on 127.0.0.1")
    parser.add_argument("--group", required=True)
    parser.add_argument("--order", default="fifo")
    parser.add_argument("--rate", type=float, default=5.0, help="multicasts per second (0: none)")
    parser.add_argument("--secret", default=SECRET)
    parser.add_argument("--multicast-group", default="239.255.71.17")
    parser.add_argument("--multicast-port", type=int, default=47017)
    parser.add_argument("--beacon-interval", type=float, default=0.1)
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                        help="any other sgcs.Config field (value parsed as JSON, else a string)")
    parser.add_argument("--lifetime", type=float, default=600.0,
                        help="seconds before the member exits on its own, so none outlives a crashed harness")
    parser.add_argument("--verbose", action="store_true", help="also report every delivery")
    parser.add_argument("--messages", type=int, help="send exactly this many messages, then stop sending")
    parser.add_argument("--wait-for", type=int, default=1, help="with --messages: members to wait for first")
    parser.add_argument("--trace", help="run directory to record trace schema 1 into")
    parser.add_argument("--queue", type=int, metavar="REPLICAS",
                        help="instead: be a replica of the replicated queue 'jobs' of REPLICAS replicas, put at "
                             "--rate, consume, and report acked, refused, received and consumed ids")
    parser.add_argument("--queue-path", help="with --queue: the replica's SQLite file (none: in memory)")
    return parser.parse_args(argv)


def emit(event: str, **fields: Any) -> None:
    """One flushed JSON line: the harness reads them as they come."""
    sys.stdout.write(json.dumps({"t": time.time(), "event": event, **fields}) + "\n")
    sys.stdout.flush()


def config_of(args: argparse.Namespace) -> Any:
    import sgcs

    fields: dict[str, Any] = {
        "name": f"member-{args.id}", "secret": args.secret, "node_id": args.id, "port": args.port,
        "multicast_group": args.multicast_group, "multicast_port": args.multicast_port,
        "beacon_interval": args.beacon_interval,
    }
    for setting in args.set:
        name, _, text = setting.partition("=")
        try:
            fields[name] = json.loads(text)
        except json.JSONDecodeError:
            fields[name] = text
    return sgcs.Config.from_mapping(fields)


async def run(args: argparse.Namespace) -> None:
    import sgcs
    import trio

    if args.queue is not None:
        await run_queue(args)
        return
    counts: Counter[str] = Counter()
    async with sgcs.open_node(config_of(args), trace=args.trace) as node, \
            node.join(args.group, order=args.order) as group:
        emit("ready", id=node.id, pid=os.getpid(), address=list(node.address))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_cancel_on_signal, nursery.cancel_scope)
            if args.messages is None:
                nursery.start_soon(_send_forever, group, args.rate, counts)
            else:
                nursery.start_soon(_send_counted, group, args, counts)
            with trio.move_on_after(args.lifetime):
                await _report_events(group, args.verbose, counts)
            nursery.cancel_scope.cancel()
    io = node.io_statistics()
    emit("exit", **counts, unreachable=getattr(io, "unreachable", None), send_errors=io.send_errors)


async def run_queue(args: argparse.Namespace) -> None:
    """The replicated-queue workload of ``benchmarks/nemesis.py --workload queue``."""
    import hashlib

    import sgcs
    import trio
    from sgcs.services.queues.replicated import NotPrimary, open_replicated_queue

    incarnation = f"{args.id}.{os.getpid()}"
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)  # until ``work`` listens: never a death
    async with sgcs.open_node(config_of(args), trace=args.trace) as node, \
            open_replicated_queue(node, "jobs", replicas=args.queue, path=args.queue_path) as queue:
        emit("ready", id=node.id, pid=os.getpid(), address=list(node.address), recovered=queue.recovered,
             applied=queue.applied, gen=queue.generation)
        _trace_replica(queue)

        async def views() -> None:
            seen = None
            while True:
                if queue.view_id != seen:
                    seen = queue.view_id
                    emit("view", view_id=seen, members=list(queue.members))
                await trio.sleep(0.02)

        async def produce() -> None:
            for n in itertools.count():
                await trio.sleep(1.0 / args.rate)
                body = f"{incarnation}.{n}".encode()
                if not queue.writable:
                    continue
                with trio.move_on_after(10):
                    try:
                        await queue.put(body)
                    except NotPrimary:
                        emit("refused", msg=body.decode())
                    else:
                        emit("acked", msg=body.decode(), members=len(queue.members), gen=queue.generation,
                             applied=queue.applied, trans=queue.transitional)
                    continue
                emit("put_timeout", msg=body.decode())

        async def consume() -> None:
            while True:
                try:
                    batch = await queue.get_many(20, timeout=0.5)
                    if batch:
                        emit("received", msgs=[m.body.decode() for m in batch])
                        acked = await queue.ack(batch)
                        emit("consumed", msgs=[m.body.decode() for m in acked])
                        if len(acked) < len(batch):  # excluded meanwhile: those go to another consumer
                            emit("lease_lost", msgs=[m.body.decode() for m in batch if m not in acked])
                except NotPrimary:
                    await queue.wait_writable()

        async def work() -> None:
            """Produce and consume until SIGUSR1 (the harness quiets every replica before
            it stops them, so that the last ops reach all of them before the first leaves)."""
            async with trio.open_nursery() as inner:
                inner.start_soon(produce)
                inner.start_soon(consume)
                with trio.open_signal_receiver(signal.SIGUSR1) as quiet:
                    async for _ in quiet:
                        inner.cancel_scope.cancel()
                        emit("quiet", applied=queue.applied)
                        return

        async with trio.open_nursery() as nursery:
            nursery.start_soon(_cancel_on_signal, nursery.cancel_scope)
            nursery.start_soon(views)
            nursery.start_soon(work)
            await trio.sleep(args.lifetime)
            nursery.cancel_scope.cancel()
        rows = queue.store._db.execute("SELECT seq, msg_id, priority, state, owner, deliveries, body FROM messages "
                                       "ORDER BY seq").fetchall()
        digest = hashlib.blake2b(repr(rows).encode(), digest_size=16).hexdigest()
        emit("queue_state", applied=queue.applied, digest=digest, standing=queue.standing.value,
             members=list(queue.members), remaining=[row[6].decode() for row in rows])


def _trace_replica(queue: Any) -> None:
    """Lines that let a lost message be followed through the replica's state:
    every settle point (who provided, who was behind), every snapshot loaded,
    every op that removed messages (an ACK, a PURGE) with their bodies."""
    from sgcs.services.queues.replicated import Put, Settle

    def standing() -> dict[str, Any]:
        return {"view": queue.view_id, "gen": queue.generation, "applied": queue.applied,
                "digest": f"{queue.digest:016x}", "primary": list(queue.primary), "trans": queue.transitional}

    def bodies(tags: Any) -> list[str]:
        if not tags:
            return []
        marks = ",".join("?" * len(tags))
        rows = queue.store._db.execute(f"SELECT body FROM messages WHERE seq IN ({marks})", list(tags)).fetchall()
        return [row[0].decode(errors="replace") for row in rows]

    apply, settled, load = queue._apply, queue._become_settled, queue._load

    def traced_apply(sender: int, op: Any, raw: bytes) -> None:
        gone = bodies(queue.store.leased_to("q", f"m:{sender}", op.tags)) \
            if isinstance(op, Settle) and not op.release else []
        apply(sender, op, raw)
        if gone:
            emit("rq_ack", sender=sender, bodies=gone, **standing())
        elif isinstance(op, Put) and sender == queue.me:
            emit("rq_put", body=op.body.decode(errors="replace"), **standing())

    def traced_settled(behind: frozenset[int], state_settled: bool = False) -> None:
        before = standing()
        hellos = {m: [h.generation, h.applied, f"{h.digest:016x}", list(h.primary), h.tentative]
                  for m, h in queue._hellos.items()}
        settled(behind, state_settled)
        emit("rq_settle", provider=queue._provider, behind=sorted(behind), hellos=hellos, before=before,
             **standing())

    @contextlib.contextmanager
    def traced_load(image: bytes) -> Iterator[None]:
        before = standing()
        held = queue.store._db.execute("SELECT msg_id, body FROM messages").fetchall()
        with load(image):
            yield
        # a message this replica held whose PUT the loaded state never applied
        vanished = [bytes(body).decode(errors="replace") for msg_id, body in held if bytes(msg_id) not in queue._dedup]
        emit("rq_load", provider=queue._provider, before=before, vanished=vanished, **standing())

    queue._apply, queue._become_settled, queue._load = traced_apply, traced_settled, traced_load


async def _report_events(group: Any, verbose: bool, counts: Counter[str]) -> None:
    import sgcs

    async for event in group:
        if isinstance(event, sgcs.ViewChange):
            emit("view", view_id=event.view_id, members=list(event.members))
        else:
            counts["delivered"] += 1
            if verbose:
                emit("deliver", sender=event.sender, seq=event.seq, view_id=event.view_id)


async def _send_forever(group: Any, rate: float, counts: Counter[str]) -> None:
    """Steady traffic, so the members have something to agree on; a full window
    skips a message rather than block (the count says so)."""
    import sgcs
    import trio

    if rate <= 0:
        return
    while True:
        await trio.sleep(1.0 / rate)
        try:
            await group.send(b"%d:%d" % (group.node_id, counts["sent"] + counts["skipped"]), block=False)
            counts["sent"] += 1
        except sgcs.WouldBlock:
            counts["skipped"] += 1


async def _send_counted(group: Any, args: argparse.Namespace, counts: Counter[str]) -> None:
    """Exactly ``args.messages`` messages once the view is big enough; then
    report the delivery count now and then, so the harness sees when all arrived."""
    import trio

    while len(group.view) < args.wait_for:
        await trio.sleep(0.05)
    emit("sending", view_size=len(group.view))
    for index in range(args.messages):
        await group.send(b"%d:%d" % (group.node_id, index))
        counts["sent"] += 1
        if args.rate > 0:
            await trio.sleep(1.0 / args.rate)
    emit("sent_all", sent=counts["sent"])
    while True:
        emit("delivered", delivered=counts["delivered"])
        await trio.sleep(0.5)


async def _cancel_on_signal(scope: Any) -> None:
    import trio

    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for _ in signals:
            scope.cancel()
            return


def main() -> int:
    import trio

    args = parse(sys.argv[1:])
    try:
        trio.run(run, args)
    except BrokenPipeError:  # the harness went away
        return 1
    return 0


# ====================================================================== the harness


@dataclass
class Peer:
    """One member process and the events it reported so far."""

    node_id: int
    port: int
    process: subprocess.Popen[str]
    stderr_path: Path
    events: list[dict[str, Any]] = field(default_factory=list)
    """Appended by the reader thread; read a copy (``list(peer.events)``)."""
    killed: bool = False
    """The harness killed it on purpose: its end is no failure."""

    def views(self, since: float = 0.0) -> list[dict[str, Any]]:
        return [e for e in list(self.events) if e.get("event") == "view" and e["t"] >= since]

    def latest_view(self) -> dict[str, Any] | None:
        views = self.views()
        return views[-1] if views else None

    def died(self) -> bool:
        """It ended without the harness asking."""
        return not self.killed and self.process.poll() is not None

    def stderr_tail(self, lines: int = 15) -> str:
        try:
            text = self.stderr_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


class Cluster:
    """``size`` member processes of one group on loopback, with ids 1..size.

    Each cluster has its own multicast group and port, so clusters in parallel
    test runs do not hear each other. Use it as a context manager: leaving it
    ends every process (SIGCONT, SIGTERM, then SIGKILL after STOP_GRACE).

    Elsewhere than on loopback (``tests/netns.py``): ``ports`` fixes the
    members' unicast ports (else free loopback ports), ``prefix[id]`` is put
    before member ``id``'s command (``ip netns exec HOST``, which execs the
    member, so the harness's signals reach it), and ``member_settings[id]``
    adds Config fields for it alone (its ``bind_host``, a peer list)."""

    def __init__(
        self, size: int, workdir: Path, *, rate: float = 5.0, order: str = "fifo",
        settings: tuple[str, ...] = (), group: str = "g", messages: int | None = None, trace: Path | None = None,
        ports: Sequence[int] | None = None, prefix: Mapping[int, Sequence[str]] | None = None,
        member_settings: Mapping[int, Sequence[str]] | None = None,
    ) -> None:
        self.size = size
        self.workdir = workdir
        self.rate = rate
        self.order = order
        self.settings = settings
        self.group = group
        self.messages = messages
        self.trace = trace
        """The run directory the members record their trace into; a SIGKILL adds a crash row."""
        self.ports = ports
        self.prefix = prefix or {}
        self.member_settings = member_settings or {}
        self.peers: dict[int, Peer] = {}
        self.marks: list[tuple[float, str]] = []
        """What the harness did and when (``time.time()``), for the timeline."""
        self.started = 0.0
        self._readers: list[threading.Thread] = []

    @property
    def ids(self) -> list[int]:
        return sorted(self.peers)

    def __enter__(self) -> "Cluster":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        *ports, multicast_port = free_udp_ports(self.size + 1)
        if self.ports is not None:
            ports = list(self.ports)
        multicast_group = private_group()
        self.started = self.mark(f"start {self.size} members, multicast {multicast_group}:{multicast_port}")
        for node_id, port in enumerate(ports, start=1):
            self.peers[node_id] = self._spawn(node_id, port, multicast_group, multicast_port)

    def _spawn(self, node_id: int, port: int, multicast_group: str, multicast_port: int) -> Peer:
        command = [
            *self.prefix.get(node_id, ()), sys.executable, str(HERE / "membership_peer.py"), "--id", str(node_id), "--port", str(port),
            "--group", self.group, "--order", self.order, "--rate", str(self.rate),
            "--multicast-group", multicast_group, "--multicast-port", str(multicast_port),
            *(f"--set={setting}" for setting in (*self.settings, *self.member_settings.get(node_id, ()))),
            *(() if self.messages is None else ("--messages", str(self.messages), "--wait-for", str(self.size))),
            *(() if self.trace is None else ("--trace", str(self.trace))),
        ]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent), os.environ.get("PYTHONPATH", "")])}
        stderr_path = self.workdir / f"member-{node_id}.stderr"
        with stderr_path.open("w") as stderr:
            # A session of its own: a Ctrl-C meant for the harness does not reach
            # the members, which the harness ends itself.
            process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=stderr, text=True, bufsize=1,
                                       env=env, start_new_session=True)
        peer = Peer(node_id, port, process, stderr_path)
        reader = threading.Thread(target=_read_lines, args=(process.stdout, peer.events), daemon=True)
        reader.start()
        self._readers.append(reader)
        return peer

    def close(self) -> None:
        alive = [peer for peer in self.peers.values() if peer.process.poll() is None]
        for peer in alive:
            _signal_quietly(peer.process, signal.SIGCONT)
            _signal_quietly(peer.process, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE
        for peer in alive:
            try:
                peer.process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                peer.process.kill()
                peer.process.wait()
        for reader in self._readers:
            reader.join(timeout=1.0)

    # ------------------------------------------------------------------ acting

    def mark(self, text: str) -> float:
        now = time.time()
        self.marks.append((now, text))
        return now

    def signal(self, node_id: int, signum: signal.Signals) -> float:
        """Send ``signum`` to a member; returns the instant, just before sending."""
        peer = self.peers[node_id]
        if signum == signal.SIGKILL:
            peer.killed = True
        at = self.mark(f"{signum.name} member {node_id}")
        peer.process.send_signal(signum)
        if signum == signal.SIGKILL and self.trace is not None:
            from sgcs.io.recorder import record_crash

            record_crash(self.trace, node_id)
        return at

    # ------------------------------------------------------------------ observing

    def wait_until(self, predicate: Callable[[], bool], timeout: float) -> bool:
        """Poll ``predicate`` until it holds (True), ``timeout`` passes or a
        member dies unasked (False: no point waiting for a broken cluster)."""
        deadline = time.monotonic() + timeout
        while True:
            if predicate():
                return True
            if time.monotonic() >= deadline or any(peer.died() for peer in self.peers.values()):
                return False
            time.sleep(POLL)

    def agreed(self, ids: list[int]) -> bool:
        """Every member in ``ids`` holds, as its latest view, the same view of exactly ``ids``."""
        views = [self.peers[i].latest_view() for i in ids]
        if any(view is None or sorted(view["members"]) != sorted(ids) for view in views):
            return False
        return len({view["view_id"] for view in views if view is not None}) == 1

    def last_install(self, ids: list[int], members: list[int], since: float) -> float | None:
        """When the last of ``ids`` first installed a view of exactly ``members``
        after ``since``; None if one of them has not."""
        installs = []
        for node_id in ids:
            found = [v["t"] for v in self.peers[node_id].views(since) if sorted(v["members"]) == sorted(members)]
            if not found:
                return None
            installs.append(found[0])
        return max(installs)

    def timeline(self) -> str:
        """Everything the members reported and the harness did, in time order:
        what a failing test prints."""
        rows = [(t, "harness", text) for t, text in self.marks]
        for peer in self.peers.values():
            rows += [(e.get("t", 0.0), f"member {peer.node_id}", _describe(e)) for e in list(peer.events)]
        lines = [f"timeline (seconds since the start, {len(rows)} rows):"]
        lines += [f"  {t - self.started:8.3f}  {who:<10} {what}" for t, who, what in sorted(rows, key=lambda r: r[0])]
        lines.append("latest views:")
        for peer in self.peers.values():
            view = peer.latest_view()
            state = "killed" if peer.killed else "running" if peer.process.poll() is None else f"exited {peer.process.returncode}"
            lines.append(f"  member {peer.node_id} ({state}): {_describe(view) if view else 'none'}")
            tail = peer.stderr_tail()
            if tail:
                lines.append("    stderr: " + tail.replace("\n", "\n    stderr: "))
        return "\n".join(lines)


def _read_lines(stream: IO[str] | None, events: list[dict[str, Any]]) -> None:
    assert stream is not None
    for line in stream:
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            event = {"t": time.time(), "event": "garbage", "line": line.rstrip()}
        if not isinstance(event, dict):
            event = {"t": time.time(), "event": "garbage", "line": line.rstrip()}
        events.append(event)


def _describe(event: dict[str, Any]) -> str:
    kind = event.get("event")
    if kind == "view":
        members = " ".join(str(m) for m in event["members"])
        return f"view {str(event['view_id'])[:16]} [{members}] ({len(event['members'])})"
    details = {k: v for k, v in event.items() if k not in ("t", "event")}
    return f"{kind} {json.dumps(details)}" if details else str(kind)


def _signal_quietly(process: subprocess.Popen[str], signum: signal.Signals) -> None:
    try:
        process.send_signal(signum)
    except ProcessLookupError:
        pass


# ====================================================================== the scenarios


def converge(cluster: Cluster, timeout: float) -> float | None:
    """Seconds from the start until all members hold one view of everyone; None if not within ``timeout``."""
    everyone = cluster.ids
    if not cluster.wait_until(lambda: cluster.agreed(everyone), timeout):
        return None
    return max(cluster.peers[i].latest_view()["t"] for i in everyone) - cluster.started  # type: ignore[index]


def kill_one(cluster: Cluster, victim: int, timeout: float) -> float | None:
    """SIGKILL ``victim``; seconds from the kill until the last survivor
    installed the view of the survivors, or None if that took over ``timeout``."""
    survivors = [i for i in cluster.ids if i != victim]
    killed_at = cluster.signal(victim, signal.SIGKILL)
    if not cluster.wait_until(lambda: cluster.agreed(survivors), timeout):
        return None
    last = cluster.last_install(survivors, survivors, killed_at)
    return None if last is None else last - killed_at


@dataclass(frozen=True)
class ShortPause:
    """What a brief freeze of one member caused."""

    wrongful_views: list[tuple[int, dict[str, Any]]]
    """(survivor, view) for every view without the frozen member that a survivor installed."""
    agreed_after: bool
    """All members held one view of everyone when the watch ended."""


def short_pause(cluster: Cluster, victim: int, pause: float = 1.0, watch: float = 4.0) -> ShortPause:
    """SIGSTOP ``victim`` for ``pause`` s, SIGCONT it, watch ``watch`` s more.
    A member that is merely slow must not be excluded."""
    stopped_at = cluster.signal(victim, signal.SIGSTOP)
    time.sleep(pause)
    cluster.signal(victim, signal.SIGCONT)
    time.sleep(watch)
    cluster.mark("end of watch")
    wrongful = [
        (i, view) for i in cluster.ids if i != victim
        for view in cluster.peers[i].views(stopped_at) if victim not in view["members"]
    ]
    return ShortPause(wrongful, cluster.agreed(cluster.ids))


@dataclass(frozen=True)
class LongPause:
    """What a long freeze of one member caused."""

    excluded_after: float | None
    """Seconds from SIGSTOP until the last survivor installed the survivors'
    view; None if that did not happen during the freeze."""
    readmitted_after: float | None
    """Seconds from SIGCONT until all members held one view of everyone again;
    None if not within the rejoin timeout."""


def long_pause(cluster: Cluster, victim: int, pause: float = 10.0, rejoin_timeout: float = 15.0) -> LongPause:
    """SIGSTOP ``victim`` for ``pause`` s: the survivors should exclude it; after
    SIGCONT it should merge back, and all members agree on one view again."""
    survivors = [i for i in cluster.ids if i != victim]
    stopped_at = cluster.signal(victim, signal.SIGSTOP)
    cluster.wait_until(lambda: cluster.agreed(survivors), pause)
    last = cluster.last_install(survivors, survivors, stopped_at)
    excluded_after = None if last is None else last - stopped_at
    time.sleep(max(0.0, stopped_at + pause - time.time()))
    resumed_at = cluster.signal(victim, signal.SIGCONT)
    if excluded_after is None:
        return LongPause(None, None)  # never left the view: there is no readmission to wait for
    everyone = cluster.ids
    readmitted_after = None
    if cluster.wait_until(lambda: cluster.agreed(everyone) and _installed_since(cluster, everyone, resumed_at), rejoin_timeout):
        readmitted_after = max(cluster.peers[i].latest_view()["t"] for i in everyone) - resumed_at  # type: ignore[index]
    return LongPause(excluded_after, readmitted_after)


def _installed_since(cluster: Cluster, ids: list[int], since: float) -> bool:
    """Some member of ``ids`` installed its latest view after ``since`` (the
    agreement is a new one, not the one from before the freeze)."""
    return any(cluster.peers[i].latest_view()["t"] >= since for i in ids)  # type: ignore[index]


if __name__ == "__main__":
    sys.exit(main())
