"""The post office on real sockets: trio shell around :class:`PostOffice`.

Theory of operation (docs/mailboxes.md, "How it works"): the post offices of one system
are the members of one sgcs group, ``mailboxes:<system>``; PO-to-PO messages
are reliable unicasts inside it (``GroupHandle.send(payload, to=member)``).
Each PO multicasts a hello ``(domain, incarnation)`` whenever the view changes
(and every ``hello_interval``), so every PO knows which member id serves which
domain; a PO restarted after a kill -9 comes back with a new member id and a
higher incarnation, and wins. Reliable unicast is not enough on its own: a
datagram to a member that just died is lost, so the post office's own
acknowledgements and retries do the end-to-end work, and the view only tells
us whom to address.

One step = inputs handed to the pure post office, its changed records
committed to SQLite, then its outputs sent. Inputs that arrive together (one
``receive_many``) share one transaction and one payload per destination.

Faults can be injected *below* the mail layer (``Faults``): each payload is
duplicated, or held back for a random delay so that it overtakes or is
overtaken, with the given probabilities.

The hosts of the domain are this process: MIs run here between moves;
``running()`` lists them and ``arrivals`` says when one came in.
"""

from __future__ import annotations

import json
import os
import random
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import AsyncIterator, Callable

import trio

import sgcs
from sgcs.errors import DecodeError, UsageError

from ..tasks import background
from .messages import Mail, MIState, decode_envelope_untrusted, home_of, make_name, pack_envelopes
from .postoffice import PostOffice, Send, Settings
from .store import Store

PAYLOAD_MAX = 60_000
"""Bytes of envelopes packed into one unicast payload at most."""
OUTGOING_MAX = 10_000
"""Outputs waiting for the transmit task; the step waits beyond (backpressure)."""


@dataclass(frozen=True, slots=True)
class Faults:
    """Faults injected below the mail layer, per payload."""

    duplicate: float = 0.0
    reorder: float = 0.0
    max_delay: float = 0.05
    """Seconds a reordered payload is held back at most."""
    seed: int | None = None


class PostOfficeService:
    """A running post office; get one from :func:`open_post_office`."""

    def __init__(self, domain: int, group: sgcs.GroupHandle, store: Store, po: PostOffice,
                 incarnation: int, faults: Faults, nursery: trio.Nursery) -> None:
        self.domain = domain
        self._group, self._store, self._po = group, store, po
        self.incarnation = incarnation
        self._faults = faults
        self._rng = random.Random(faults.seed)
        self._nursery = nursery
        self._members: dict[int, tuple[int, int]] = {}
        """domain -> (incarnation, member id) of the PO serving it."""
        self._outgoing_send, self._outgoing = trio.open_memory_channel[Send](OUTGOING_MAX)
        self._arrival = trio.Event()
        trace_dir = os.environ.get("SGCS_MAILBOX_TRACE")  # a debugging aid: one line per envelope
        self._trace = open(os.path.join(trace_dir, f"trace-po{domain}-{incarnation}.txt"), "a", buffering=1) \
            if trace_dir else None
        self.counters = {"garbage": 0, "unroutable": 0, "payloads_sent": 0, "duplicated": 0, "delayed": 0}

    # --- the API a workflow engine uses -----------------------------------------------

    def mi_name(self, host: str, ident: str, system: str = "wf") -> str:
        """A name for an MI created here (this domain is its home)."""
        return make_name(system, self.domain, host, ident)

    async def create_mi(self, name: str, app_state: bytes = b"") -> None:
        await self._step(lambda now: self._po.create_mi(name, now, app_state))

    async def send(self, sender: str, receiver: str, content: bytes, title: str = "") -> None:
        """Send a mail; on return it is committed here and will be delivered
        exactly once, in order. Waits while this PO's outbox is full."""
        await self.send_many(sender, [(receiver, content)], title)

    async def send_many(self, sender: str, mails: list[tuple[str, bytes]], title: str = "") -> None:
        """Several mails from one MI, in as few transactions as the outbox allows."""
        for receiver, content in mails:  # check everything before anything is taken
            home_of(receiver)
            if not isinstance(content, bytes):
                raise UsageError("mail content must be bytes")
        remaining = list(mails)
        while remaining:
            taken = 0

            def step(now: float) -> list[Send]:
                nonlocal taken
                taken, sends = self._po.send_many(sender, remaining, title, now)
                return sends
            await self._step(step)
            remaining = remaining[taken:]
            if remaining:  # the outbox is full: wait for acknowledgements
                await trio.sleep(0.05)

    async def pull(self, name: str, max_mails: int = 10_000) -> list[Mail]:
        """The mails MI ``name`` can have now, each once, per sender in order."""
        result: list[Mail] = []

        def step(now: float) -> list[Send]:
            mails, sends = self._po.pull(name, now, max_mails)
            result.extend(mails)
            return sends
        await self._step(step)
        return result

    async def move(self, name: str, to_domain: int, app_state: bytes | None = None) -> None:
        """Hand MI ``name`` and its state to the PO of ``to_domain``."""
        await self._step(lambda now: self._po.move(name, to_domain, now, app_state))

    def has_home_record(self, name: str) -> bool:
        """True if ``name`` was created here (this PO is its home and knows it)."""
        return name in self._po.home

    def running(self) -> list[str]:
        """MIs that run here now."""
        return sorted(self._po.mis)

    def mi_state(self, name: str) -> MIState | None:
        """A copy of the state of MI ``name`` if it runs here (its counters, its app state)."""
        state = self._po.mis.get(name)
        return None if state is None else MIState.from_json(state.to_json())

    async def wait_arrival(self) -> None:
        """Return once an MI arrives here (or at once if one did since the last call)."""
        await self._arrival.wait()
        self._arrival = trio.Event()

    def peers(self) -> dict[int, int]:
        """The member id serving each other domain, as far as the hellos told us."""
        return {domain: member for domain, (_, member) in self._members.items()}

    def statistics(self) -> dict[str, object]:
        return {"post_office": self._po.statistics(), **self.counters, "members": dict(self._members)}

    # --- steps: compute, commit, then send ----------------------------------------------

    async def _step(self, compute: Callable[[float], list[Send]]) -> None:
        sends = compute(trio.current_time())
        self._store.commit(self._po.take_dirty())
        await self._enqueue(sends)

    async def _enqueue(self, sends: list[Send]) -> None:
        for send in sends:
            await self._outgoing_send.send(send)
        if self._po.arrived:
            self._po.take_arrived()
            self._arrival.set()

    async def _receive_loop(self) -> None:
        group = self._group
        await self._hello()
        while True:
            events = await group.receive_many()
            sends: list[Send] = []
            now = trio.current_time()
            for event in events:
                if isinstance(event, sgcs.Delivery):
                    sends += self._on_payload(event.sender, event.payload, now)
                elif isinstance(event, sgcs.ViewChange):
                    gone = set(event.left) | set(event.failed)
                    self._members = {d: m for d, m in self._members.items() if m[1] not in gone}
                    await self._hello()
            self._store.commit(self._po.take_dirty())
            await self._enqueue(sends)

    def _on_payload(self, member: int, payload: bytes, now: float) -> list[Send]:
        if payload[:1] == b"H":
            try:
                domain, incarnation = json.loads(payload[1:])
                if type(domain) is not int or type(incarnation) is not int:
                    raise ValueError
            except (ValueError, TypeError):
                self.counters["garbage"] += 1
                return []
            known = self._members.get(domain)
            if domain != self.domain and (known is None or known[0] <= incarnation):
                self._members[domain] = (incarnation, member)
            return []
        if payload[:1] != b"M":
            self.counters["garbage"] += 1
            return []
        sends: list[Send] = []
        for line in payload[1:].split(b"\n"):
            try:
                envelope = decode_envelope_untrusted(line)
            except DecodeError:
                self.counters["garbage"] += 1
                continue
            if self._trace is not None:
                self._trace.write(f"{now:.3f} recv {envelope.kind.value} from {envelope.source} {json.dumps(envelope.body)[:3000]}\n")
            sends += self._po.receive(envelope, now)
        return sends

    async def _hello(self) -> None:
        await self._group.send(b"H" + json.dumps([self.domain, self.incarnation]).encode())

    async def _hello_loop(self, interval: float) -> None:
        while True:
            await trio.sleep(interval)
            await self._hello()

    async def _timer_loop(self) -> None:
        while True:
            deadline = self._po.next_deadline()
            now = trio.current_time()
            await trio.sleep(0.05 if deadline is None else max(0.0, min(deadline - now, 0.05)))
            await self._step(self._po.tick)

    async def _transmit_loop(self) -> None:
        while True:
            batch = [await self._outgoing.receive()]
            while len(batch) < 4096:
                try:
                    batch.append(self._outgoing.receive_nowait())
                except trio.WouldBlock:
                    break
            by_target: dict[int, list[bytes]] = {}
            for send in batch:
                if self._trace is not None:
                    self._trace.write(f"{trio.current_time():.3f} send {send.envelope.kind.value} to {send.to} "
                                      f"{json.dumps(send.envelope.body)[:3000]}\n")
                by_target.setdefault(send.to, []).append(send.envelope.encode())
            for target, lines in by_target.items():
                for payload in _pack(lines):
                    await self._transmit(target, payload)

    async def _transmit(self, domain: int, payload: bytes) -> None:
        faults = self._faults
        if faults.reorder and self._rng.random() < faults.reorder:
            self.counters["delayed"] += 1
            self._nursery.start_soon(self._send_later, domain, payload, self._rng.uniform(0, faults.max_delay))
        else:
            await self._unicast(domain, payload)
        if faults.duplicate and self._rng.random() < faults.duplicate:
            self.counters["duplicated"] += 1
            await self._unicast(domain, payload)

    async def _send_later(self, domain: int, payload: bytes, delay: float) -> None:
        await trio.sleep(delay)
        await self._unicast(domain, payload)

    async def _unicast(self, domain: int, payload: bytes) -> None:
        member = self._members.get(domain)
        if member is None:
            self.counters["unroutable"] += 1  # the PO's retries send it again once we know the member
            return
        try:
            await self._group.send(payload, to=member[1])
            self.counters["payloads_sent"] += 1
        except UsageError:  # the member left the view meanwhile
            self.counters["unroutable"] += 1


def _pack(lines: list[bytes]) -> list[bytes]:
    return pack_envelopes(lines, PAYLOAD_MAX)


@asynccontextmanager
async def open_post_office(domain: int, config: sgcs.Config, path: str | os.PathLike[str], *,
                           system: str = "wf", settings: Settings | None = None, faults: Faults | None = None,
                           hello_interval: float = 2.0) -> AsyncIterator[PostOfficeService]:
    """Run the post office of ``domain`` for the block: its state lives in the
    SQLite file ``path`` (recovered if it exists); it joins the group of the
    system's post offices with ``config`` (same secret and multicast group as the others)."""
    if not isinstance(domain, int) or domain < 0:
        raise UsageError(f"domain must be a non-negative int, got {domain!r}")
    store = Store(path)
    try:
        incarnation = store.next_incarnation()
        po = PostOffice.restore(domain, store.load(), trio.current_time(), settings, incarnation)
        async with sgcs.open_node(config) as node, node.join(f"mailboxes:{system}") as group:
            async with background() as nursery:
                service = PostOfficeService(domain, group, store, po, incarnation, faults or Faults(), nursery)
                nursery.start_soon(service._receive_loop)
                nursery.start_soon(service._transmit_loop)
                nursery.start_soon(service._timer_loop)
                nursery.start_soon(service._hello_loop, hello_interval)
                yield service
                nursery.cancel_scope.cancel()
    finally:
        store.close()
