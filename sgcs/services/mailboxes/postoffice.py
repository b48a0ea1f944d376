"""The post office: a sans-I/O state machine, one per service domain.

Theory of operation (the migrating-workflow paper's communication
scheme, with its gaps closed):

* **Source mailbox (home record).** The PO of the domain written in an MI's name
  keeps, for the MI's whole life, where it is now: ``(post office, epoch)``.
  The epoch counts the MI's moves and orders every address record: an older
  record never overwrites a newer one, whatever order messages arrive in.
* **Active mailbox.** The PO of the domain where the MI runs queues its mails
  and the set of *friend domains* (domains whose POs sent it mail).
* **Addressing, in order:** an active mailbox here; the domain's *address
  book*; a tombstone here; the home PO (local record, or a QUERY answered with
  an ANSWER). Nothing else is ever consulted.
* **Moving** (``move``): the MI's state leaves in a MIGRATE; the new PO
  registers the new active mailbox first, then sends DEREG to the old one;
  the old PO keeps accepting mail until that DEREG, then sends everything
  queued in one FORWARD batch (with the friend domains) and leaves a
  *forwarding tombstone*; the new PO, once the batch is in, sends UPDATE to
  every friend domain and HOME_UPDATE to the home: ``D_fri + 2`` control
  messages (DEREG, HOME_UPDATE and the updates).
* **Late mail** that reaches the old PO is forwarded by its tombstone (which
  lives ``tombstone_lifetime`` seconds) and the sender is told the new address
  in the acknowledgement; after that, the old PO answers NACK and the sender
  re-resolves through the home.
* **Exactly once, in order.** Every mail has the end-to-end id ``(sender,
  receiver, seq)``. A PO that takes a mail keeps it in its outbox under a
  fresh *token* and retries it, with backoff, until the PO it aims at
  acknowledges that token. A PO acknowledges only once it holds the mail
  itself (in the active mailbox, or in its own outbox under a new token, as a
  tombstone does), so an old acknowledgement can never release a newer
  holding and some PO always holds every mail not yet in a mailbox. The receiver's
  next-expected numbers travel with the MI, so ``pull`` drops duplicates and
  delivers each sender's mails in seq order, wherever the MI is.
* **Every control exchange is retried** (MIGRATE until DEREG, DEREG until
  FORWARD, FORWARD/UPDATE/HOME_UPDATE until their acks, QUERY until ANSWER);
  the handlers are idempotent so duplicates are harmless.
* **Crashes.** Everything above is a record. After each input the shell
  commits the changed records (``take_dirty``) *before* it sends the outputs;
  ``PostOffice.restore`` rebuilds a PO from them with every pending exchange
  due at once. So an acknowledged mail is never lost: it is durable at the PO
  that acknowledged it (durability by SQLite, not replication).

The PO never performs I/O, reads no clock and draws no randomness: time comes
in as ``now``; outputs are :class:`Send` values.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from sgcs.errors import UsageError, WouldBlock

from .messages import (
    MAX_ITEMS,
    Envelope,
    Kind,
    Mail,
    MIState,
    home_of,
)

Key = tuple[str, str, int]
OutEntry = tuple[Mail, int, int]
"""An outbox entry: the mail, the domain it is aimed at (-1: resolving), and
the token of this holding; only an ack that echoes the token releases it."""
Record = tuple[str, str, Any]
"""(table, key, JSON value or None for deleted): the unit of durability."""


@dataclass(frozen=True, slots=True)
class Send:
    """Output: send ``envelope`` to the post office of domain ``to``."""

    to: int
    envelope: Envelope


@dataclass(frozen=True, slots=True)
class Settings:
    """Timers and caps of a post office (seconds, counts)."""

    retry_initial: float = 0.5
    """First retry of any unacknowledged exchange."""
    retry_max: float = 4.0
    """Backoff doubles up to this."""
    tombstone_lifetime: float = 30.0
    """How long an old PO forwards late mail for a departed MI."""
    outbox_max: int = 50_000
    """Mails this PO may hold unacknowledged; ``send_mail`` raises WouldBlock beyond."""
    mailbox_max: int = 50_000
    """Mails one active mailbox holds; beyond, arriving mail is not acknowledged (retried later)."""
    book_max: int = 10_000
    """Address-book entries; the least recently used is forgotten (the home answers again)."""
    batch_max: int = 512
    """Mails per MAIL message."""
    log_deliveries: bool = False
    """Keep a durable record of every delivered mail id (for checkers)."""


@dataclass(slots=True)
class Mailbox:
    epoch: int
    friends: set[int] = field(default_factory=set)
    complete: bool = True
    """False until the previous PO's FORWARD batch arrived."""
    predecessor: int = -1
    pending_dereg: tuple[int, int] | None = None
    mails: dict[tuple[str, int], Mail] = field(default_factory=dict)

    def to_json(self) -> list[Any]:
        return [self.epoch, sorted(self.friends), self.complete, self.predecessor,
                list(self.pending_dereg) if self.pending_dereg else None]


@dataclass(slots=True)
class Pending:
    """An exchange waiting for its answer; retried at ``due``."""

    to: int
    kind: Kind
    body: Any
    attempts: int = 0
    due: float = 0.0


@dataclass(frozen=True, slots=True)
class Statistics:
    sent: dict[str, int]
    received: dict[str, int]
    delivered: int
    duplicates_dropped: int
    retries: int
    forwarded_late: int
    refused_full: int


def _mail_key(key: Key) -> str:
    return f"{key[0]}\x1f{key[1]}\x1f{key[2]}"


class PostOffice:
    """The post office of one domain (see the module docstring)."""

    def __init__(self, domain: int, settings: Settings | None = None, incarnation: int = 0) -> None:
        if not isinstance(domain, int) or domain < 0:
            raise UsageError(f"domain must be a non-negative int, got {domain!r}")
        self.domain = domain
        self.settings = settings or Settings()
        self.mis: dict[str, MIState] = {}
        self.mailboxes: dict[str, Mailbox] = {}
        self.tombstones: dict[str, tuple[int, int, float]] = {}
        self.home: dict[str, tuple[int, int]] = {}
        self.book: OrderedDict[str, tuple[int, int]] = OrderedDict()
        self.outbox: dict[Key, OutEntry] = {}
        """Mails this PO must still hand on."""
        self._token = incarnation << 32
        """Tokens name holdings; the incarnation keeps a restarted PO from reissuing one."""
        self.control: dict[str, Pending] = {}
        self.seen: dict[str, int] = {}
        """Per MI, the highest epoch that ever arrived here: a late duplicate
        MIGRATE (its tombstone long expired) must not raise a ghost."""
        self.queries: dict[str, Pending] = {}
        self._timers: dict[tuple[str, Any], float] = {}
        self._attempts: dict[tuple[str, Any], int] = {}
        self._heap: list[tuple[float, str, Any]] = []
        self._dirty: dict[tuple[str, str], Any] = {}
        self._sends: list[Send] = []
        self.arrived: list[str] = []
        """MIs that arrived here since the host last looked (cleared by the host)."""
        self._sent: dict[str, int] = {}
        self._received: dict[str, int] = {}
        self._counts = {"delivered": 0, "duplicates_dropped": 0, "retries": 0, "forwarded_late": 0, "refused_full": 0}

    # --- the application's side (the hosts of this domain) --------------------

    def create_mi(self, name: str, now: float, app_state: bytes = b"") -> list[Send]:
        """Create an MI whose home is this domain: its source mailbox and its
        first active mailbox are here, and it runs here."""
        if home_of(name) != self.domain:
            raise UsageError(f"MI {name!r} must be created in its home domain {home_of(name)}, not {self.domain}")
        if name in self.home:
            raise UsageError(f"MI {name!r} exists already")
        self._set_home(name, self.domain, 0)
        self._set_mailbox(name, Mailbox(epoch=0))
        self._set_mi(MIState(name, app_state=app_state))
        return self._take_sends()

    def send_many(self, sender: str, mails: list[tuple[str, bytes]], title: str, now: float) -> tuple[int, list[Send]]:
        """``send_mail`` for several mails of one MI; mails to one PO share MAIL
        messages. Returns how many were taken (fewer when the outbox filled)."""
        taken = 0
        for receiver, content in mails:
            try:
                self._send_one(sender, receiver, title, content, now)
            except WouldBlock:
                break
            taken += 1
        return taken, self._take_sends()

    def send_mail(self, sender: str, receiver: str, title: str, content: bytes, now: float) -> list[Send]:
        """MI ``sender`` (running here) sends a mail; once this returns and the
        shell has committed, the mail will be delivered exactly once."""
        self._send_one(sender, receiver, title, content, now)
        return self._take_sends()

    def _send_one(self, sender: str, receiver: str, title: str, content: bytes, now: float) -> None:
        state = self._running(sender)
        home_of(receiver)  # checks the name
        if not isinstance(content, bytes) or not isinstance(title, str):
            raise UsageError("mail content must be bytes and its title a str")
        if len(self.outbox) >= self.settings.outbox_max:
            raise WouldBlock(f"post office {self.domain} holds {len(self.outbox)} unacknowledged mails")
        seq = state.next_seq.get(receiver, 0)
        state.next_seq[receiver] = seq + 1
        self._set_mi(state)
        mail = Mail(sender, receiver, seq, title, content, self.domain, now)
        box = self.mailboxes.get(receiver)
        if box is not None and len(box.mails) < self.settings.mailbox_max:
            self._store(receiver, box, mail)  # same domain: no message at all
        else:
            self._put_out(mail, self._resolve(receiver), now)

    def pull(self, name: str, now: float, max_mails: int = 10_000) -> tuple[list[Mail], list[Send]]:
        """The mails MI ``name`` (running here) can have now: per sender, the
        next seq numbers in order; duplicates are dropped."""
        state = self._running(name)
        box = self.mailboxes.get(name)
        if box is None:
            raise UsageError(f"MI {name!r} has no active mailbox here yet")
        out: list[Mail] = []
        for sender in sorted({s for s, _ in box.mails}):
            expected = state.next_expected.get(sender, 0)
            while len(out) < max_mails:
                mail = box.mails.pop((sender, expected), None)
                if mail is None:
                    break
                self._dirty[("mail", _mail_key(mail.key))] = None
                if self.settings.log_deliveries:
                    self._dirty[("dlog", _mail_key(mail.key))] = [state.delivered]
                state.delivered += 1
                out.append(mail)
                expected += 1
            state.next_expected[sender] = expected
        for stale in [k for k in box.mails if k[1] < state.next_expected.get(k[0], 0)]:
            self._dirty[("mail", _mail_key((name, stale[0], stale[1])))] = None
            del box.mails[stale]
            self._counts["duplicates_dropped"] += 1
        self._counts["delivered"] += len(out)
        self._set_mi(state)
        return out, self._take_sends()

    def move(self, name: str, to_domain: int, now: float, app_state: bytes | None = None) -> list[Send]:
        """Hand MI ``name`` (running here) to the PO of ``to_domain``. Its
        active mailbox stays here, accepting mail, until the new PO deregisters it."""
        state = self._running(name)
        if to_domain == self.domain or not isinstance(to_domain, int) or to_domain < 0:
            raise UsageError(f"move MI {name!r} to another domain, not {to_domain!r}")
        if app_state is not None:
            state.app_state = app_state
        state.epoch += 1
        del self.mis[name]
        self._dirty[("mi", name)] = None
        self._start(f"mig|{name}", Pending(to_domain, Kind.MIGRATE, state.to_json()), now)
        return self._take_sends()

    def take_arrived(self) -> list[str]:
        arrived, self.arrived = self.arrived, []
        return arrived

    # --- the network's side ----------------------------------------------------

    def receive(self, envelope: Envelope, now: float) -> list[Send]:
        """Handle one decoded envelope from another PO."""
        self._received[envelope.kind.value] = self._received.get(envelope.kind.value, 0) + 1
        self._HANDLERS[envelope.kind](self, envelope.source, envelope.body, now)
        return self._take_sends()

    def next_deadline(self) -> float | None:
        while self._heap:
            due, table, key = self._heap[0]
            if self._timers.get((table, key)) == due:
                return due
            heapq.heappop(self._heap)
        return None

    def tick(self, now: float) -> list[Send]:
        """Retry every exchange that is due; expire tombstones."""
        while self._heap and self._heap[0][0] <= now:
            due, table, key = heapq.heappop(self._heap)
            if self._timers.get((table, key)) != due:
                continue
            del self._timers[(table, key)]
            self._counts["retries"] += 1
            self._RETRY[table](self, key, now)
        return self._take_sends()

    # --- durability --------------------------------------------------------------

    def take_dirty(self) -> list[Record]:
        """The records changed since the last call, to commit before sending."""
        dirty, self._dirty = self._dirty, {}
        return [(table, key, value) for (table, key), value in dirty.items()]

    @classmethod
    def restore(cls, domain: int, records: Iterable[Record], now: float, settings: Settings | None = None,
                incarnation: int = 0) -> PostOffice:
        """A PO rebuilt from its committed records; every pending exchange is due
        now. ``incarnation`` must grow with every restart (the shell keeps it)."""
        po = cls(domain, settings, incarnation)
        boxes: dict[str, list[Any]] = {}
        mails: list[Mail] = []
        for table, key, value in records:
            if table == "mi":
                po.mis[key] = MIState.from_json(value)
            elif table == "mbox":
                boxes[key] = value
            elif table == "mail":
                mails.append(Mail.from_json(value))
            elif table == "tomb":
                po.tombstones[key] = (value[0], value[1], now + po.settings.tombstone_lifetime)
                po._schedule("tomb", key, now + po.settings.tombstone_lifetime)
            elif table == "home":
                po.home[key] = (value[0], value[1])
            elif table == "seen":
                po.seen[key] = value
            elif table == "book":
                po.book[key] = (value[0], value[1])
            elif table == "out":
                mail = Mail.from_json(value[0])
                po.outbox[mail.key] = (mail, value[1], value[2])
                po._schedule("out", mail.key, now)
            elif table == "ctl":
                po.control[key] = Pending(value[0], Kind(value[1]), value[2])
                po._schedule("ctl", key, now)
            elif table == "query":
                po.queries[key] = Pending(home_of(key), Kind.QUERY, key)
                po._schedule("query", key, now)
        for name, v in boxes.items():
            po.mailboxes[name] = Mailbox(v[0], set(v[1]), v[2], v[3], tuple(v[4]) if v[4] else None)
        for mail in mails:
            if mail.receiver in po.mailboxes:
                po.mailboxes[mail.receiver].mails[(mail.sender, mail.seq)] = mail
        po._dirty.clear()
        return po

    def statistics(self) -> Statistics:
        return Statistics(dict(self._sent), dict(self._received), **self._counts)

    # --- handlers ------------------------------------------------------------------

    def _on_mail(self, source: int, body: Any, now: float) -> None:
        acked: list[list[Any]] = []
        hints: dict[str, list[Any]] = {}
        nacked: list[list[Any]] = []
        for value in body:
            mail, token = Mail.from_json(value[:7]), value[7]
            outcome = self._accept(mail, now)
            if outcome == "nack":
                nacked.append([*mail.key, token])
            elif outcome == "ack":
                acked.append([*mail.key, token])
                tomb = self.tombstones.get(mail.receiver)
                if tomb is not None and mail.receiver not in self.mailboxes:
                    hints[mail.receiver] = [mail.receiver, tomb[0], tomb[1]]
        if acked:
            self._send(source, Kind.MAIL_ACK, [acked, list(hints.values())])
        if nacked:
            self._send(source, Kind.NACK, nacked)

    def _accept(self, mail: Mail, now: float) -> str:
        """'ack' (taken, by the active mailbox or a tombstone), 'full' (not
        taken, no answer: the sender retries) or 'nack' (unknown here)."""
        box = self.mailboxes.get(mail.receiver)
        if box is not None:
            if len(box.mails) >= self.settings.mailbox_max:
                self._counts["refused_full"] += 1
                return "full"
            if mail.sender_po != self.domain and mail.sender_po not in box.friends:
                box.friends.add(mail.sender_po)
                self._dirty[("mbox", mail.receiver)] = box.to_json()
            self._store(mail.receiver, box, mail)
            return "ack"
        tomb = self.tombstones.get(mail.receiver)
        if tomb is not None:
            # We take the duty on under a fresh token, even for a mail already
            # in our outbox: an ack still in flight for the old holding may come
            # from a PO that handed the mail back to us, and must not release it.
            self._counts["forwarded_late"] += 1
            self._put_out(mail, tomb[0], now)
            return "ack"
        return "nack"

    def _on_mail_ack(self, source: int, body: Any, now: float) -> None:
        for key in body[0]:
            k = (key[0], key[1], key[2])
            entry = self.outbox.get(k)
            if entry is not None and entry[2] == key[3]:  # this very holding was taken on
                self._drop_out(k)
        for name, po, epoch in body[1]:
            self._learn(name, po, epoch, now)

    def _on_nack(self, source: int, body: Any, now: float) -> None:
        for key in body:
            k = (key[0], key[1], key[2])
            entry = self.outbox.get(k)
            if entry is None or entry[1] != source or entry[2] != key[3]:
                continue
            if self.book.get(k[0], (None,))[0] == source:
                del self.book[k[0]]
                self._dirty[("book", k[0])] = None
            # resolve again at the next retry, not now: a stale home would
            # otherwise bounce the mail between us and the old PO at network speed
            self.outbox[k] = (entry[0], -1, entry[2])
            self._dirty[("out", _mail_key(k))] = [entry[0].to_json(), -1, entry[2]]

    def _on_query(self, source: int, name: str, now: float) -> None:
        po, epoch = self.home.get(name, (-1, 0))
        self._send(source, Kind.ANSWER, [name, po, epoch])

    def _on_answer(self, source: int, body: Any, now: float) -> None:
        name, po, epoch = body
        if po < 0 or name not in self.queries:
            return  # unknown yet (the MI is being created): the query is retried
        self._stop("query", name)
        self._learn(name, po, epoch, now, force=True)

    def _on_migrate(self, source: int, body: Any, now: float) -> None:
        state = MIState.from_json(body)
        box = self.mailboxes.get(state.name)
        tomb = self.tombstones.get(state.name)
        if self.seen.get(state.name, -1) >= state.epoch:
            return  # a duplicate: our DEREG for it is pending or done
        if box is not None:
            return  # our old mailbox here still awaits its DEREG (reordered): the MIGRATE is retried
        if tomb is not None:
            del self.tombstones[state.name]
            self._dirty[("tomb", state.name)] = None
        self.seen[state.name] = state.epoch
        self._dirty[("seen", state.name)] = state.epoch
        self._set_mailbox(state.name, Mailbox(state.epoch, complete=False, predecessor=source))
        self._set_mi(state)
        self.arrived.append(state.name)
        self._start(f"dereg|{state.name}", Pending(source, Kind.DEREG, [state.name, state.epoch]), now)

    def _on_dereg(self, source: int, body: Any, now: float) -> None:
        name, epoch = body
        mig = self.control.get(f"mig|{name}")
        if mig is not None and mig.to == source and mig.body[1] == epoch:
            self._stop("ctl", f"mig|{name}")
        box = self.mailboxes.get(name)
        if box is None or box.epoch >= epoch:
            return  # done already (the FORWARD is pending or acknowledged)
        if not box.complete:
            box.pending_dereg = (source, epoch)  # our own batch must come in first
            self._dirty[("mbox", name)] = box.to_json()
            return
        self._forward(name, box, source, epoch, now)

    def _forward(self, name: str, box: Mailbox, to: int, epoch: int, now: float) -> None:
        mails = [m.to_json() for m in box.mails.values()]
        for mail in box.mails.values():
            self._dirty[("mail", _mail_key(mail.key))] = None
        del self.mailboxes[name]
        self._dirty[("mbox", name)] = None
        self.tombstones[name] = (to, epoch, now + self.settings.tombstone_lifetime)
        self._dirty[("tomb", name)] = [to, epoch]
        self._schedule("tomb", name, now + self.settings.tombstone_lifetime)
        self._start(f"fwd|{name}", Pending(to, Kind.FORWARD, [name, epoch, mails, sorted(box.friends)]), now)

    def _on_forward(self, source: int, body: Any, now: float) -> None:
        name, epoch, mails, friends = body
        self._send(source, Kind.FORWARD_ACK, [name, epoch])
        box = self.mailboxes.get(name)
        if box is None or box.epoch != epoch or box.complete:
            return  # a duplicate
        self._stop("ctl", f"dereg|{name}")
        for value in mails:
            self._store(name, box, Mail.from_json(value))
        box.friends |= set(friends)
        box.friends.discard(self.domain)
        box.complete = True
        self._dirty[("mbox", name)] = box.to_json()
        home = home_of(name)
        for friend in sorted(box.friends - {home}):
            self._start(f"upd|{name}|{friend}", Pending(friend, Kind.UPDATE, [name, self.domain, epoch]), now)
        if home == self.domain:
            self._set_home(name, self.domain, epoch)
        else:
            self._start(f"home|{name}", Pending(home, Kind.HOME_UPDATE, [name, self.domain, epoch]), now)
        if box.pending_dereg is not None:
            to, next_epoch = box.pending_dereg
            box.pending_dereg = None
            self._forward(name, box, to, next_epoch, now)

    def _on_forward_ack(self, source: int, body: Any, now: float) -> None:
        self._ack_control(f"fwd|{body[0]}", body[1])

    def _on_update(self, source: int, body: Any, now: float) -> None:
        self._learn(body[0], body[1], body[2], now)
        self._send(source, Kind.UPDATE_ACK, [body[0], body[2]])

    def _on_update_ack(self, source: int, body: Any, now: float) -> None:
        self._ack_control(f"upd|{body[0]}|{source}", body[1])

    def _on_home_update(self, source: int, body: Any, now: float) -> None:
        name, po, epoch = body
        if home_of(name) == self.domain and name in self.home and self.home[name][1] < epoch:
            self._set_home(name, po, epoch)
        self._send(source, Kind.HOME_ACK, [name, epoch])

    def _on_home_ack(self, source: int, body: Any, now: float) -> None:
        self._ack_control(f"home|{body[0]}", body[1])

    _HANDLERS: dict[Kind, Callable[[PostOffice, int, Any, float], None]] = {
        Kind.MAIL: _on_mail,
        Kind.MAIL_ACK: _on_mail_ack,
        Kind.NACK: _on_nack,
        Kind.QUERY: _on_query,
        Kind.ANSWER: _on_answer,
        Kind.MIGRATE: _on_migrate,
        Kind.DEREG: _on_dereg,
        Kind.FORWARD: _on_forward,
        Kind.FORWARD_ACK: _on_forward_ack,
        Kind.UPDATE: _on_update,
        Kind.UPDATE_ACK: _on_update_ack,
        Kind.HOME_UPDATE: _on_home_update,
        Kind.HOME_ACK: _on_home_ack,
    }

    # --- addressing and the outbox -------------------------------------------------

    def _resolve(self, receiver: str) -> int:
        """The three-step addressing: our active mailboxes, then the newest
        address we hold (address book, our own tombstone, or, at the home,
        the source mailbox); -1 when the home must be asked."""
        if receiver in self.mailboxes:
            return self.domain
        best: tuple[int, int] | None = None
        for known in (self.book.get(receiver), self.tombstones.get(receiver), self.home.get(receiver)):
            if known is not None and (best is None or known[1] > best[0]):
                best = (known[1], known[0])  # (epoch, post office)
        if receiver in self.book:
            self.book.move_to_end(receiver)
        return -1 if best is None else best[1]

    def _learn(self, name: str, po: int, epoch: int, now: float, force: bool = False) -> None:
        """An address for ``name``: keep it if newer; point waiting mails at it."""
        known = self.book.get(name)
        if po == self.domain or (known is not None and known[1] >= epoch and not force):
            return
        self.book[name] = (po, epoch)
        self.book.move_to_end(name)
        self._dirty[("book", name)] = [po, epoch]
        while len(self.book) > self.settings.book_max:
            old, _ = self.book.popitem(last=False)
            self._dirty[("book", old)] = None
        # Only mails waiting for an address go now. A mail in flight to the
        # old address stays aimed there: the old PO's tombstone forwards it
        # (re-sending it now would cost a second inter-domain mail); its retry,
        # if one is needed, resolves again.
        for key, (mail, target, _) in list(self.outbox.items()):
            if key[0] == name and target == -1:
                self._retarget(key, po, now)

    def _put_out(self, mail: Mail, target: int, now: float) -> None:
        self._token += 1
        self.outbox[mail.key] = (mail, target, self._token)
        self._dirty[("out", _mail_key(mail.key))] = [mail.to_json(), target, self._token]
        self._attempt(mail.key, now)

    def _retarget(self, key: Key, target: int, now: float) -> None:
        self._put_out(self.outbox[key][0], target, now)

    def _drop_out(self, key: Key) -> None:
        del self.outbox[key]
        self._timers.pop(("out", key), None)
        self._attempts.pop(("out", key), None)
        self._dirty[("out", _mail_key(key))] = None

    def _attempt(self, key: Key, now: float) -> None:
        """Try to hand on one outbox mail now, and retry it later."""
        mail, target, token = self.outbox[key]
        retry = self._backoff("out", key, now) > 0
        if target == -1 or retry:  # a retry uses the freshest address we know
            target = self._resolve(mail.receiver)
            if target == -1:
                self._ask_home(mail.receiver, now)
                return
        if target == self.domain:
            box = self.mailboxes.get(mail.receiver)
            tomb = self.tombstones.get(mail.receiver)
            if box is not None:
                if len(box.mails) < self.settings.mailbox_max:
                    self._store(mail.receiver, box, mail)
                    self._drop_out(key)
                return
            # a stale home record or book pointed here: follow our tombstone, or ask again
            target = tomb[0] if tomb is not None else -1
        if target != self.outbox[key][1]:
            self.outbox[key] = (mail, target, token)
            self._dirty[("out", _mail_key(key))] = [mail.to_json(), target, token]
        if target >= 0:
            self._batch(target, [*mail.to_json(), token])

    def _batch(self, target: int, item: list[Any]) -> None:
        """Mails to one PO in one step share MAIL messages."""
        for send in reversed(self._sends[-4:]):
            if send.to == target and send.envelope.kind is Kind.MAIL and len(send.envelope.body) < self.settings.batch_max:
                send.envelope.body.append(item)
                return
        self._send(target, Kind.MAIL, [item])

    def _ask_home(self, name: str, now: float) -> None:
        if name in self.queries:
            return
        home = home_of(name)
        if home == self.domain:
            return  # we are the home and know nothing yet: the mails wait and retry
        pending = Pending(home, Kind.QUERY, name)
        self.queries[name] = pending
        self._dirty[("query", name)] = 1
        self._retry_query(name, now)

    # --- timers and retries ---------------------------------------------------------

    def _backoff(self, table: str, key: Any, now: float) -> int:
        """Schedule the next retry of an exchange; returns its attempt number."""
        attempts = self._attempts.get((table, key), 0)
        self._attempts[(table, key)] = attempts + 1
        delay = min(self.settings.retry_max, self.settings.retry_initial * 2 ** min(attempts, 16))
        self._schedule(table, key, now + delay)
        return attempts

    def _schedule(self, table: str, key: Any, due: float) -> None:
        self._timers[(table, key)] = due
        heapq.heappush(self._heap, (due, table, key))

    def _start(self, key: str, pending: Pending, now: float) -> None:
        self.control[key] = pending
        self._dirty[("ctl", key)] = [pending.to, pending.kind.value, pending.body]
        self._retry_control(key, now)

    def _stop(self, table: str, key: str) -> None:
        store = self.control if table == "ctl" else self.queries
        if store.pop(key, None) is not None:
            self._dirty[(table, key)] = None
        self._timers.pop((table, key), None)
        self._attempts.pop((table, key), None)

    def _ack_control(self, key: str, epoch: int) -> None:
        pending = self.control.get(key)
        if pending is not None and pending.body[-1 if pending.kind is not Kind.FORWARD else 1] == epoch:
            self._stop("ctl", key)

    def _retry_out(self, key: Key, now: float) -> None:
        if key in self.outbox:
            self._attempt(key, now)

    def _retry_control(self, key: str, now: float) -> None:
        pending = self.control.get(key)
        if pending is not None:
            self._backoff("ctl", key, now)
            self._send(pending.to, pending.kind, pending.body)

    def _retry_query(self, name: str, now: float) -> None:
        pending = self.queries.get(name)
        if pending is not None:
            self._backoff("query", name, now)
            self._send(pending.to, Kind.QUERY, name)

    def _expire_tombstone(self, name: str, now: float) -> None:
        tomb = self.tombstones.get(name)
        if tomb is not None and tomb[2] <= now:
            del self.tombstones[name]
            self._dirty[("tomb", name)] = None

    _RETRY: dict[str, Callable[[PostOffice, Any, float], None]] = {
        "out": _retry_out,
        "ctl": _retry_control,
        "query": _retry_query,
        "tomb": _expire_tombstone,
    }

    # --- small helpers ---------------------------------------------------------------

    def _running(self, name: str) -> MIState:
        state = self.mis.get(name)
        if state is None:
            raise UsageError(f"MI {name!r} does not run at post office {self.domain}")
        return state

    def _store(self, receiver: str, box: Mailbox, mail: Mail) -> None:
        state = self.mis.get(receiver)
        if state is not None and mail.seq < state.next_expected.get(mail.sender, 0):
            self._counts["duplicates_dropped"] += 1
            return
        if (mail.sender, mail.seq) in box.mails:
            self._counts["duplicates_dropped"] += 1
            return
        box.mails[(mail.sender, mail.seq)] = mail
        self._dirty[("mail", _mail_key(mail.key))] = mail.to_json()

    def _set_mi(self, state: MIState) -> None:
        self.mis[state.name] = state
        self._dirty[("mi", state.name)] = state.to_json()

    def _set_mailbox(self, name: str, box: Mailbox) -> None:
        self.mailboxes[name] = box
        self._dirty[("mbox", name)] = box.to_json()

    def _set_home(self, name: str, po: int, epoch: int) -> None:
        self.home[name] = (po, epoch)
        self._dirty[("home", name)] = [po, epoch]

    def _send(self, to: int, kind: Kind, body: Any) -> None:
        self._sent[kind.value] = self._sent.get(kind.value, 0) + 1
        self._sends.append(Send(to, Envelope(kind, self.domain, body)))

    def _take_sends(self) -> list[Send]:
        sends, self._sends = self._sends, []
        return sends


assert MAX_ITEMS >= Settings().batch_max
