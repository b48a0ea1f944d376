"""Mailbox scenarios: the mailbox service's post offices as simulated sgcs nodes.

Theory of operation
-------------------
``MailboxSimulator`` is the ``Simulator`` plus the mailbox service's shell,
playing for the simulated nodes the part ``sgcs.services.mailboxes.service``
plays on real sockets. The post office (PO) of domain ``d`` is the pure
``PostOffice`` state machine on node ``d``; the POs are the members of one
group, ``mailboxes:<system>``, joined at t=0 like any scenario group (and
rejoined by merging after a restart), and every PO-to-PO message travels as
a reliable unicast inside that group through the node's public sans-I/O API
(``Node.unicast``): sgcs frames it, the simulated network delays, loses,
duplicates or partitions its datagrams, and a ``Delivery`` to the peer hands
it to that PO. Nothing reaches a PO by any other way.

One step of a PO is the shell's: inputs (a delivered payload, a timer, a host's
send, move or pull) go to the PO at the node's own clock; the records the step
changed are committed to the PO's *durable* dict (what the SQLite store would
hold) before any output leaves; then its envelopes go out, packed per
destination. A crash of the node (a ``[[faults]]`` crash, or ``crash_every``)
drops the PO with it; the node's recovery restores the PO from its durable
records (``PostOffice.restore``, next incarnation), with every pending
exchange due at once. The member id of the PO of domain ``d`` is ``d`` in
every incarnation, so no hello exchange is needed here (``service.py`` needs
one because a restarted process gets a new member id).

``payload_duplicate`` and ``payload_reorder`` inject faults *below the mail
layer* and above sgcs, as ``service.Faults`` does on real sockets: sgcs's
reliable unicast never duplicates or reorders, so without them the post
offices' own deduplication and reordering would only be exercised by their
retries.

A unicast the node refuses (the peer is not in the view yet after its restart,
or the unicast window to it is full) is counted and dropped: the PO's own
retries send it again, exactly as on real sockets.

The hosts are folded into their PO: an MI runs at the PO whose ``mis`` holds
it; the workload (Poisson mails, a move per MI every ``move_interval``, a pull
of every running MI every ``pull_every``) is generated here from a generator
derived from the seed, as ``SERVICE`` events on the engine's heap, so a seed
replays a run. Once ``mails`` mails are sent, moves and generated crashes stop
and the run drains until ``duration``. ``mailreport`` keeps the ledger and
checks exactly-once, in-order delivery.
"""

from __future__ import annotations

import json
import random
from collections import deque
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from sgcs.actions import Deliver, Multicast, Send as NodeSend
from sgcs.config import Order
from sgcs.errors import DecodeError, UsageError, WouldBlock
from sgcs.services.mailboxes.messages import Mail, decode_envelope_untrusted, make_name, pack_envelopes
from sgcs.services.mailboxes.postoffice import PostOffice, Send

from .engine import FAULT, SERVICE
from .faultspec import Fault
from .mailreport import Ledger, MailKey, summarise, write_mail_rows
from .mailspec import MailboxSpec
from .scenario import GroupSpec, Scenario
from .simulator import Simulator

PAYLOAD_MAX = 60_000
"""Bytes of envelopes per unicast payload, as in ``service.py``."""
Step = Callable[[PostOffice, float], list[Send]]


class MailboxSimulator(Simulator):
    """A run whose nodes 0..domains-1 are post offices (see the module docstring)."""

    def __init__(self, scenario: Scenario, out: Path, net_bucket: float = 1.0) -> None:
        spec = scenario.mailboxes
        if spec is None:
            raise UsageError("a mailbox run needs a [mailboxes] table")
        offices = GroupSpec(spec.group, Order.FIFO, tuple(range(spec.domains)), "post offices", 0.0, 0)
        super().__init__(replace(scenario, groups=(*scenario.groups, offices)), out, net_bucket)
        self.spec: MailboxSpec = spec
        self.pos: list[PostOffice | None] = [None] * spec.domains
        self.durable: list[dict[tuple[str, str], str]] = [{} for _ in range(spec.domains)]
        """Per PO, what its store holds: (table, key) -> JSON, committed after every step."""
        self.po_timer_at: list[float | None] = [None] * spec.domains
        self.rng = random.Random(f"{scenario.seed}:mailboxes:workload")
        self.fault_rng = random.Random(f"{scenario.seed}:mailboxes:payload-faults")
        self.ledger = Ledger()
        self.names = [make_name(spec.system, d, f"h{d}", f"mi{k}")
                      for d in range(spec.domains) for k in range(spec.mis_per_domain)]
        self.at: dict[str, int | None] = {}
        """Where each MI runs (None while it moves); it runs only if that PO is up."""
        self.moving: set[str] = set()
        """MIs from ``move`` until their new active mailbox is complete."""
        self.generating = True
        self._inbox: deque[tuple[int, int, bytes]] = deque()
        self._draining = False
        self._on_action[Deliver] = self._deliver_or_post
        self._dispatch = (*self._dispatch, self._service)
        self._ops: dict[str, Callable[[float, int, Any], None]] = {
            "start": self._start, "mail": self._mail, "move": self._move, "pull": self._pull,
            "po_timer": self._po_timer, "crash": self._crash_one, "recover": self._recover_one,
            "later": self._later,
        }

    # ------------------------------------------------------------ the run

    def run(self, progress: Callable[[float], None] | None = None) -> None:
        self.engine.schedule(0.0, SERVICE, -1, "start")  # before start_run's t=0 faults: the POs exist first
        super().run(progress)

    def report(self, out: Path) -> dict[str, Any]:
        """Check and count the run; write its ``mail/`` table; the summary as JSON."""
        write_mail_rows(out / "mail", self.ledger)
        return summarise(self.ledger, self._held())

    def _service(self, t: float, node: int, op: str, arg: Any) -> None:
        self._ops[op](t, node, arg)

    def _start(self, t: float, _: int, __: Any) -> None:
        spec = self.spec
        for d in range(spec.domains):
            po = PostOffice(d, spec.settings, self.incarnation[d])
            self.pos[d] = po
            for name in self.names[d * spec.mis_per_domain:(d + 1) * spec.mis_per_domain]:
                self._step(d, t, _creating(name))
                self.at[name] = d
            self.engine.schedule(t + spec.pull_every * (d + 1) / spec.domains, SERVICE, d, "pull")
        self.engine.schedule(t + self.rng.expovariate(spec.mail_rate), SERVICE, -1, "mail")
        if spec.move_interval is not None:
            for name in self.names:
                self.engine.schedule(t + self.rng.uniform(*spec.move_interval), SERVICE, -1, "move", name)
        if spec.crash_every:
            self.engine.schedule(t + spec.crash_every, SERVICE, -1, "crash")

    # ------------------------------------------------------------ one PO step

    def _step(self, d: int, t: float, compute: Step) -> None:
        """Inputs, then commit, then outputs: a kill between two steps loses nothing acknowledged."""
        po = self.pos[d]
        if po is None:
            raise RuntimeError(f"post office {d} is down")
        sends = compute(po, self.local(d, t))
        durable = self.durable[d]
        for table, key, value in po.take_dirty():
            if value is None:
                durable.pop((table, key), None)
            else:  # serialised now, as SQLite does
                durable[(table, key)] = json.dumps(value, separators=(",", ":"))
        for name in po.take_arrived():
            self.at[name] = d
        self._transmit(d, t, sends)
        self._po_rearm(d, t)

    def _transmit(self, d: int, t: float, sends: list[Send]) -> None:
        by_target: dict[int, list[bytes]] = {}
        for send in sends:
            data = send.envelope.encode()
            self.ledger.envelope(send.to, send.envelope, len(data))
            by_target.setdefault(send.to, []).append(data)
        spec, rng = self.spec, self.fault_rng
        for target, lines in by_target.items():
            for payload in pack_envelopes(lines, PAYLOAD_MAX):
                if spec.payload_reorder and rng.random() < spec.payload_reorder:
                    self.ledger.payloads_delayed += 1
                    self.engine.schedule(t + rng.uniform(0.0, spec.payload_delay_max), SERVICE, d, "later",
                                         (self.incarnation[d], target, payload))
                else:
                    self._unicast(d, t, target, payload)
                if spec.payload_duplicate and rng.random() < spec.payload_duplicate:
                    self.ledger.payloads_duplicated += 1
                    self._unicast(d, t, target, payload)

    def _unicast(self, d: int, t: float, target: int, payload: bytes) -> None:
        node = self.nodes[d]
        if node is None:
            raise RuntimeError(f"post office {d} sends while its node is down")
        try:
            actions = node.unicast(self.spec.group, target, payload, self.local(d, t))
        except (UsageError, WouldBlock):  # not in our view (yet), or its window is full
            self.ledger.unroutable += 1
            return
        self.apply(d, actions, t)

    def _later(self, t: float, d: int, held: tuple[int, int, bytes]) -> None:
        """A payload held back below the mail layer goes now, unless its process died meanwhile."""
        incarnation, target, payload = held
        if self.nodes[d] is not None and incarnation == self.incarnation[d]:
            self._unicast(d, t, target, payload)

    def apply(self, node_id: int, actions: list[Any], now: float) -> None:
        """The node's actions first; then what they delivered to its PO (never
        from inside another PO step, so every step runs to its commit)."""
        super().apply(node_id, actions, now)
        if self._inbox and not self._draining:
            self._draining = True
            try:
                while self._inbox:
                    d, member, payload = self._inbox.popleft()
                    self._receive(d, member, payload, now)
            finally:
                self._draining = False

    def _deliver_or_post(self, node_id: int, action: Deliver, now: float) -> None:
        self._deliver(node_id, action, now)
        if action.dest is not None and action.group == self.spec.group and node_id < self.spec.domains:
            self._inbox.append((node_id, action.sender, action.payload))

    def _receive(self, d: int, member: int, payload: bytes, t: float) -> None:
        if self.pos[d] is None or self.nodes[d] is None:
            return  # delivered to a node that crashed since: the sender's PO retries
        envelopes = []
        lines = payload[1:].split(b"\n") if payload[:1] == b"M" else []
        if not lines:
            self.ledger.garbage += 1
        for line in lines:
            try:
                envelopes.append(decode_envelope_untrusted(line))
            except DecodeError:
                self.ledger.garbage += 1

        def compute(po: PostOffice, now: float) -> list[Send]:
            sends: list[Send] = []
            for envelope in envelopes:
                sends += po.receive(envelope, now)
            return sends
        self._step(d, t, compute)

    # ------------------------------------------------------------ PO timers

    def _po_rearm(self, d: int, t: float) -> None:
        po = self.pos[d]
        deadline = po.next_deadline() if po is not None else None
        if deadline is None:
            self.po_timer_at[d] = None
            return
        due = max(t, self.simulated(d, deadline))
        if due != self.po_timer_at[d]:
            self.po_timer_at[d] = due
            self.engine.schedule(due, SERVICE, d, "po_timer", self.incarnation[d])

    def _po_timer(self, t: float, d: int, incarnation: int) -> None:
        if self.pos[d] is None or incarnation != self.incarnation[d] or self.po_timer_at[d] != t:
            return  # stale: moved, or the PO crashed
        self.po_timer_at[d] = None
        if self.paused_until[d] > t:  # a paused process runs no timer: due again at its resume
            self.po_timer_at[d] = self.paused_until[d]
            self.engine.schedule(self.paused_until[d], SERVICE, d, "po_timer", incarnation)
            return
        self._step(d, t, lambda po, now: po.tick(now))

    # ------------------------------------------------------------ the hosts' workload

    def _ready(self, d: int | None, t: float) -> PostOffice | None:
        """The PO of ``d`` if it is up and not paused (its hosts can act)."""
        if d is None or self.paused_until[d] > t:
            return None
        return self.pos[d]

    def _mail(self, t: float, _: int, __: Any) -> None:
        spec, rng = self.spec, self.rng
        if len(self.ledger.mails) >= spec.mails:
            self._stop_generating(t)
            return
        self.engine.schedule(t + rng.expovariate(spec.mail_rate), SERVICE, -1, "mail")
        senders = [n for n in self.names if self._runs(n, t)]
        if not senders:
            return
        sender = senders[rng.randrange(len(senders))]
        d = self.at[sender]
        assert d is not None
        po = self.pos[d]
        assert po is not None
        receiver = self._receiver(po, sender)
        path = "local" if receiver in po.mailboxes else \
            "known" if receiver in po.book or receiver in po.tombstones or receiver in po.home else "unknown"
        seq = po.mis[sender].next_seq.get(receiver, 0)
        try:
            self._step(d, t, lambda po, now: po.send_mail(sender, receiver, "", bytes(spec.size), now))
        except WouldBlock:
            self.ledger.refused += 1
            return
        self.ledger.sent((receiver, sender, seq), t, path, self._moving(receiver))

    def _receiver(self, po: PostOffice, sender: str) -> str:
        """Uniform, or aimed at a class (local / unknown / known) by the spec's fractions."""
        spec, rng = self.spec, self.rng
        others = [n for n in self.names if n != sender]
        if spec.local is None and spec.unknown is None:
            return others[rng.randrange(len(others))]
        draw = rng.random()
        if draw < (spec.local or 0.0):
            pool = [n for n in others if n in po.mis]
        elif draw < (spec.local or 0.0) + (spec.unknown or 0.0):
            pool = [n for n in others if n not in po.mailboxes and n not in po.book and n not in po.tombstones
                    and n not in po.home]
        else:
            pool = [n for n in others if n not in po.mailboxes and (n in po.book or n in po.tombstones
                                                                     or n in po.home)]
        if not pool:
            self.ledger.fallback += 1
            pool = others
        return pool[rng.randrange(len(pool))]

    def _moving(self, name: str) -> bool:
        if name not in self.moving:
            return False
        d = self.at[name]
        po = self.pos[d] if d is not None else None
        box = po.mailboxes.get(name) if po is not None else None
        if box is not None and box.complete:
            self.moving.discard(name)
            return False
        return True

    def _move(self, t: float, _: int, name: str) -> None:
        spec = self.spec
        if not self.generating or spec.move_interval is None:
            return
        self.engine.schedule(t + self.rng.uniform(*spec.move_interval), SERVICE, -1, "move", name)
        if not self._runs(name, t):
            return
        d = self.at[name]
        assert d is not None
        to = self.rng.choice([x for x in range(spec.domains) if x != d])
        self._step(d, t, lambda po, now: po.move(name, to, now))
        self.at[name] = None
        self.moving.add(name)
        self.ledger.moves += 1

    def _pull(self, t: float, d: int, _: Any) -> None:
        self.engine.schedule(t + self.spec.pull_every, SERVICE, d, "pull")
        po = self._ready(d, t)
        if po is None:
            return
        pulled: list[Mail] = []

        def compute(po: PostOffice, now: float) -> list[Send]:
            sends: list[Send] = []
            for name in list(po.mis):
                if name in po.mailboxes:
                    mails, more = po.pull(name, now)
                    pulled.extend(mails)
                    sends += more
            return sends
        self._step(d, t, compute)
        if pulled:
            self.ledger.pulled(pulled, t)

    def _runs(self, name: str, t: float) -> bool:
        po = self._ready(self.at[name], t)
        return po is not None and name in po.mis

    def _stop_generating(self, t: float) -> None:
        if self.generating:
            self.generating = False
            self.ledger.generation_ended = t

    # ------------------------------------------------------------ crashes

    def _fault(self, t: float, node: int, fault: Any, arg: Any) -> None:
        """Any fault, then the POs follow their nodes: down with them, restored with them."""
        super()._fault(t, node, fault, arg)
        for d in range(self.spec.domains):
            if self.nodes[d] is None and self.pos[d] is not None:
                self.pos[d] = None  # its state dies; its durable dict stays
                self.po_timer_at[d] = None
                self.ledger.crashes += 1
            elif self.nodes[d] is not None and self.pos[d] is None and self.at:
                records = [(table, key, json.loads(value)) for (table, key), value in self.durable[d].items()]
                self.pos[d] = PostOffice.restore(d, records, self.local(d, t), self.spec.settings,
                                                 self.incarnation[d])
                self.ledger.restarts += 1
                self._step(d, t, lambda po, now: po.tick(now))

    def _crash_one(self, t: float, _: int, __: Any) -> None:
        """crash_every: a random PO that is up crashes, and restarts down_for later."""
        spec = self.spec
        if not self.generating:
            return
        self.engine.schedule(t + spec.crash_every, SERVICE, -1, "crash")
        up = [d for d in range(spec.domains) if self.nodes[d] is not None]
        if up:
            victim = up[self.rng.randrange(len(up))]
            self._fault(t, -1, Fault(-1, t, "crash", (victim,)), None)
            self.engine.schedule(t + spec.down_for, SERVICE, victim, "recover")

    def _recover_one(self, t: float, d: int, _: Any) -> None:
        self._fault(t, -1, Fault(-1, t, "recover", (d,)), None)

    # ------------------------------------------------------------ packets and the end

    def _send(self, src: int, action: NodeSend, now: float) -> None:
        if src < self.spec.domains:
            self.ledger.packet(action.msg_type.label, len(action.data))
        super()._send(src, action, now)

    def _multicast(self, src: int, action: Multicast, now: float) -> None:
        if src < self.spec.domains:
            self.ledger.packet(action.msg_type.label, len(action.data))
        super()._multicast(src, action, now)

    def _held(self) -> set[MailKey]:
        """Mails some PO's durable records still hold (outbox, mailbox, or a FORWARD batch)."""
        held: set[MailKey] = set()
        for durable in self.durable:
            for (table, _), text in durable.items():
                value = json.loads(text)
                if table == "mail":
                    held.add((value[1], value[0], value[2]))
                elif table == "out":
                    held.add((value[0][1], value[0][0], value[0][2]))
                elif table == "ctl" and value[1] == "forward":
                    held.update((m[1], m[0], m[2]) for m in value[2][2])
        return held


def _creating(name: str) -> Step:
    return lambda po, now: po.create_mi(name, now)
