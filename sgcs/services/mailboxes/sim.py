"""An in-memory world of post offices for tests and the cost model.

Theory of operation: each domain's :class:`PostOffice` runs unchanged; the
"network" is a list of encoded envelopes in flight that the caller delivers,
duplicates, drops or reorders one by one (or ``settle`` delivers them all).
After every step a PO's changed records are committed to its *durable* dict
before its outputs enter the network, exactly as the SQLite shell does, so
``crash`` (forget the PO) and ``restart`` (``PostOffice.restore`` from the
durable dict) model a kill -9 at any point between two steps.

The hosts are folded in: an MI runs at the PO where ``location`` says; a move
leaves it nowhere until the new PO reports its arrival. Every delivered mail
id is recorded, so a test can check exactly-once and per-sender order.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from sgcs.errors import DecodeError

from .messages import Envelope, Kind, Mail, decode_envelope_untrusted
from .postoffice import PostOffice, Send, Settings


@dataclass(slots=True)
class InFlight:
    source: int
    to: int
    data: bytes
    kind: Kind


@dataclass
class World:
    """Post offices of ``domains`` domains and the messages between them."""

    domains: int
    settings: Settings = field(default_factory=Settings)
    now: float = 0.0

    def __post_init__(self) -> None:
        self.durable: dict[int, dict[tuple[str, str], Any]] = {d: {} for d in range(self.domains)}
        self.pos: dict[int, PostOffice | None] = {d: PostOffice(d, self.settings) for d in range(self.domains)}
        self.flight: list[InFlight] = []
        self.sent: Counter[str] = Counter()
        """Inter-domain messages sent, by kind."""
        self.sent_bytes: Counter[str] = Counter()
        self.location: dict[str, int | None] = {}
        self.delivered: dict[str, list[Mail]] = {}
        """Per receiver, the mails its pulls returned, in order."""
        self.garbage = 0
        self.incarnations = {d: 0 for d in range(self.domains)}

    # --- the hosts' side ----------------------------------------------------------

    def create(self, domain: int, name: str) -> None:
        self._emit(domain, self._po(domain).create_mi(name, self.now))
        self.location[name] = domain
        self.delivered[name] = []

    def send(self, sender: str, receiver: str, content: bytes = b"", title: str = "") -> None:
        domain = self._where(sender)
        self._emit(domain, self._po(domain).send_mail(sender, receiver, title, content, self.now))

    def move(self, name: str, to: int) -> None:
        domain = self._where(name)
        self._emit(domain, self._po(domain).move(name, to, self.now))
        self.location[name] = None

    def pull(self, name: str) -> list[Mail]:
        domain = self._where(name)
        mails, sends = self._po(domain).pull(name, self.now)
        self._emit(domain, sends)
        self.delivered[name].extend(mails)
        return mails

    def up(self, domain: int) -> bool:
        return self.pos[domain] is not None

    # --- the network's side ---------------------------------------------------------

    def deliver(self, index: int = 0, *, duplicate: bool = False) -> None:
        item = self.flight[index] if duplicate else self.flight.pop(index)
        po = self.pos[item.to]
        if po is None:
            return  # the PO is down: the datagram is lost
        try:
            envelope = decode_envelope_untrusted(item.data)
        except DecodeError:
            self.garbage += 1
            return
        self._emit(item.to, po.receive(envelope, self.now))
        for name in po.take_arrived():
            self.location[name] = item.to

    def drop(self, index: int = 0) -> None:
        self.flight.pop(index)

    def advance(self, seconds: float) -> None:
        self.now += seconds
        for domain, po in self.pos.items():
            if po is not None:
                self._emit(domain, po.tick(self.now))

    def crash(self, domain: int) -> None:
        self.pos[domain] = None

    def restart(self, domain: int) -> None:
        records = [(t, k, json.loads(v)) for (t, k), v in self.durable[domain].items()]
        self.incarnations[domain] += 1
        self.pos[domain] = PostOffice.restore(domain, records, self.now, self.settings, self.incarnations[domain])
        self._emit(domain, self.pos[domain].tick(self.now))  # type: ignore[union-attr]

    def settle(self, rng: random.Random | None = None, max_rounds: int = 200) -> None:
        """Deliver everything (in random order with ``rng``) and let retries
        run until nothing is in flight and nothing is pending."""
        for _ in range(max_rounds):
            while self.flight:
                self.deliver(rng.randrange(len(self.flight)) if rng else 0)
            if not self.busy():
                return
            self.advance(self.settings.retry_max)
        raise AssertionError(f"the world did not settle: {self.pending_summary()}")

    def busy(self) -> bool:
        return bool(self.flight) or any(
            po is not None and (po.outbox or po.control or po.queries) for po in self.pos.values()
        ) or any(where is None for where in self.location.values())

    def pending_summary(self) -> str:
        parts = []
        for d, po in self.pos.items():
            if po is not None:
                parts.append(f"po{d}: out={len(po.outbox)} ctl={sorted(po.control)} q={sorted(po.queries)}")
        return "; ".join(parts) + f"; in transit={[n for n, w in self.location.items() if w is None]}"

    # --- helpers -----------------------------------------------------------------------

    def _po(self, domain: int) -> PostOffice:
        po = self.pos[domain]
        if po is None:
            raise RuntimeError(f"post office {domain} is down")
        return po

    def _where(self, name: str) -> int:
        where = self.location[name]
        if where is None:
            raise RuntimeError(f"MI {name} is moving")
        return where

    def _emit(self, domain: int, sends: list[Send]) -> None:
        po = self._po(domain)
        durable = self.durable[domain]
        for table, key, value in po.take_dirty():  # commit before anything leaves
            if value is None:
                durable.pop((table, key), None)
            else:  # serialised now, as SQLite does: later changes must be committed again
                durable[(table, key)] = json.dumps(value)
        for send in sends:
            data = send.envelope.encode()
            self.sent[send.envelope.kind.value] += 1
            self.sent_bytes[send.envelope.kind.value] += len(data)
            self.flight.append(InFlight(domain, send.to, data, send.envelope.kind))


def check_exactly_once(world: World, sent: dict[tuple[str, str], int]) -> list[str]:
    """Problems with what was delivered: ``sent[(sender, receiver)]`` mails
    were sent; each must be delivered once, in seq order."""
    problems = []
    for receiver, mails in world.delivered.items():
        per_sender: dict[str, list[int]] = {}
        for mail in mails:
            per_sender.setdefault(mail.sender, []).append(mail.seq)
        for sender, seqs in per_sender.items():
            expected = list(range(sent.get((sender, receiver), 0)))
            if seqs != expected:
                problems.append(f"{sender}->{receiver}: delivered {seqs[:20]}..., expected 0..{len(expected) - 1}")
    for (sender, receiver), count in sent.items():
        if count and not any(m.sender == sender for m in world.delivered.get(receiver, [])):
            problems.append(f"{sender}->{receiver}: none of {count} delivered")
    return problems


__all__ = ["World", "InFlight", "Envelope", "Scenario", "check_exactly_once", "run_scenario"]


@dataclass(frozen=True)
class Scenario:
    """A mailbox workload for :func:`run_scenario` (rates per second of simulated time)."""

    domains: int = 4
    mis: int = 20
    mail_rate: float = 200.0
    """Mails per second, all MIs together; sender and receiver drawn uniformly."""
    move_rate: float = 0.5
    """Moves per second per MI (to a uniformly drawn other domain)."""
    duration: float = 20.0
    latency: float = 0.005
    """Seconds a message takes, times a uniform factor in [1, 2) (so messages overtake each other)."""
    loss: float = 0.0
    duplicate: float = 0.0
    crash_every: float = 0.0
    """Seconds between crashes of a random post office (restarted 0.5 s later); 0: none."""
    pull_every: float = 0.05
    seed: int = 1


def run_scenario(scenario: Scenario) -> dict[str, Any]:
    """Run a timed random workload on the real post offices; count the
    inter-domain messages and bytes per mail and per move, and check that
    every mail was delivered exactly once, in per-sender order."""
    import heapq

    sc, rng = scenario, random.Random(scenario.seed)
    world = World(sc.domains, Settings(retry_initial=0.2, retry_max=1.0, tombstone_lifetime=5.0))
    names = [f"wf|{i % sc.domains}|h|mi{i}" for i in range(sc.mis)]
    for i, name in enumerate(names):
        world.create(i % sc.domains, name)
    sent: dict[tuple[str, str], int] = {}
    heap: list[tuple[float, int, str, Any]] = []
    counter = 0
    moves = mails = 0

    def at(t: float, kind: str, arg: Any = None) -> None:
        nonlocal counter
        counter += 1
        heapq.heappush(heap, (t, counter, kind, arg))

    def network(before: int) -> None:
        """Give the messages a step just sent their fate: lost, late, twice."""
        fresh = world.flight[before:]
        del world.flight[before:]
        for item in fresh:
            copies = 0 if rng.random() < sc.loss else 1 + (rng.random() < sc.duplicate)
            for _ in range(copies):
                at(world.now + sc.latency * (1 + rng.random()), "deliver", item)

    def runs(name: str) -> bool:
        where = world.location[name]
        return where is not None and world.up(where)

    at(rng.expovariate(sc.mail_rate), "mail")
    for name in names:
        at(rng.expovariate(sc.move_rate) if sc.move_rate else sc.duration * 2, "move", name)
    at(sc.pull_every, "pull")
    at(0.05, "tick")
    if sc.crash_every:
        at(sc.crash_every, "crash")
    while heap:
        t, _, kind, arg = heapq.heappop(heap)
        world.now = max(world.now, t)
        before = len(world.flight)
        generating = t < sc.duration
        if kind == "deliver":
            world.flight.append(arg)
            world.deliver(len(world.flight) - 1)
        elif kind == "mail" and generating:
            s, r = rng.choice(names), rng.choice(names)
            if runs(s):
                world.send(s, r, b"m")
                sent[(s, r)] = sent.get((s, r), 0) + 1
                mails += 1
            at(t + rng.expovariate(sc.mail_rate), "mail")
        elif kind == "move" and generating:
            if runs(arg):
                world.move(arg, rng.choice([d for d in range(sc.domains) if d != world.location[arg]]))
                moves += 1
            at(t + rng.expovariate(sc.move_rate), "move", arg)
        elif kind == "pull":
            for name in names:
                if runs(name):
                    world.pull(name)
            if generating or world.busy():
                at(t + sc.pull_every, "pull")
        elif kind == "tick":
            world.advance(0.0)
            if generating or world.busy():
                at(t + 0.05, "tick")
        elif kind == "crash" and generating:
            victim = rng.randrange(sc.domains)
            if world.up(victim):
                world.crash(victim)
                at(t + 0.5, "restart", victim)
            at(t + sc.crash_every, "crash")
        elif kind == "restart":
            world.restart(arg)
        network(before)
        if t > sc.duration * 20 + 600:
            raise AssertionError(f"scenario did not settle: {world.pending_summary()}")
    inter = sum(world.sent.values())
    mail_kinds = ("mail", "mail_ack", "nack", "query", "answer")
    move_kinds = ("migrate", "dereg", "forward", "forward_ack", "update", "update_ack", "home_update", "home_ack")
    return {
        "mails": mails, "moves": moves, "delivered": sum(len(v) for v in world.delivered.values()),
        "problems": check_exactly_once(world, sent),
        "inter_domain_messages": inter, "inter_domain_bytes": sum(world.sent_bytes.values()),
        "messages_per_mail": sum(world.sent[k] for k in mail_kinds) / max(1, mails),
        "bytes_per_mail": sum(world.sent_bytes[k] for k in mail_kinds) / max(1, mails),
        "messages_per_move": sum(world.sent[k] for k in move_kinds) / max(1, moves),
        "by_kind": dict(world.sent),
    }
