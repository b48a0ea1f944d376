"""The flow member as a state machine: content-based delivery, state transfer, catch-up.

Theory of operation (Gryphon's brokers, on sgcs groups instead of a broker
network: content-based delivery, state transfer for joiners and durable
subscriptions; docs/flows.md). The engine is sans-I/O: the trio
shell (``service.py``) feeds it deliveries, views and the clock, and carries
out what it returns (``Multicast``, ``Unicast``, ``Deliver``, ``Ready``,
``Persist``).

Delivery. Roots are carried by sgcs groups (``FlowGraph.root_groups``). Every
member multicasts its subscriptions (``wire.Sub``) whenever the view changes;
every member compiles the others' into root-level selects (``compiler.py``).
A publisher that has heard from every other member of the view filters at
the source: it sends only the events some member (itself included) wants, and
counts the bytes it did not send. Until it has heard from all, it sends
everything and the receivers filter (counted too). Receivers always run their
own compiled paths: the select, then the transform near the subscriber.

State transfer (a joiner). A subscription to a state goes through three
named phases:

``WAITING_CUT``  its request (``wire.Request``) is multicast; events delivered
                 before it are not ours: the state we will get contains them;
``BUFFERING``    our request was delivered: that place in the total order is
                 the cut. Events delivered after it are buffered. The keeper
                 with the lowest id answers with the rows it held at the cut
                 (every keeper holds the same rows there: total order). An
                 answer may overtake our own delivery of the request; it is
                 kept until our cut;
``LIVE``         the answer is installed, the buffer applied, and every later
                 event applied as it comes: no gap, no duplicate.

Catch-up (a durable subscriber coming back). The same, but the request
carries the rows the subscriber held when it left (``s0``, from its SQLite
store) and the keeper answers with the *expansion* from ``s0`` to its rows
(``expand.py``): the shortest event sequence, which the subscriber collapses
onto ``s0``; nothing it had is taken back.

Per-key order (``perkey.py``): where every state below a group's roots keys
their events alike, the group is FIFO and each key's events are multicast by
the key's owner (``wire.KeyedEvents``); a publisher forwards the events
others own and keeps each publication (a *ticket*) open until it has
delivered all of its events, routing again what a view change or a rollback
left undelivered (``Settled``). A state transfer's cut is then a vector of
sgcs sequence numbers instead of a place in the total order: the subscriber
buffers from its subscription on and applies what lies after the keeper's
cut.

A request goes out only once a keeper is in sight (a request delivered in a
view without one, e.g. the joiner's own first view, would cut nothing the
others share). One unanswered for ``retry_after`` seconds is sent again: a
new cut. A keeper that sees no other keeper buffers, and after
``keeper_solo_after`` seconds starts from its own stored rows plus that
buffer (the first keeper, or the last one standing). A keeper serves its own
member's other subscriptions itself, from its LIVE copy (``_serve_locally``).
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence, Union

from sgcs.errors import DecodeError, UsageError

from . import wire
from .collapse import Collapse, Key, Row, State
from .compiler import Matcher, Subscription, compile_subscription, split_by_keys
from .evaluate import Env, compile_predicate
from .expand import Expander
from .graph import FlowGraph, History, StateSpace
from .perkey import Vector, analyse, covers, merged, owner, partition_function
from .schema import check_value
from .syntax import FlowError, Value, parse_expression


class Phase(enum.Enum):
    WAITING_CUT = "waiting for the cut"
    BUFFERING = "buffering after the cut"
    LIVE = "live"


@dataclass(frozen=True, slots=True)
class Multicast:
    group: str
    payload: bytes
    tag: tuple[int, int, int] | None = None
    """Keyed events: (origin, ticket, part), for ``on_lost`` if sgcs does not deliver the multicast."""


@dataclass(frozen=True, slots=True)
class Unicast:
    group: str
    member: int
    payload: bytes


@dataclass(frozen=True, slots=True)
class Deliver:
    """An event for a subscription to a history."""

    sub_id: int
    event: tuple[Value, ...]


@dataclass(frozen=True, slots=True)
class Ready:
    """A state subscription became LIVE (after a transfer or a catch-up)."""

    sub_id: int


@dataclass(frozen=True, slots=True)
class Persist:
    """A durable subscription's rows changed: store them before going on."""

    sub_id: int


@dataclass(frozen=True, slots=True)
class Settled:
    """Every event of publication ``ticket`` was delivered and applied here (per-key groups)."""

    ticket: int


Output = Union[Multicast, Unicast, Deliver, Ready, Persist, Settled]
Stamp = tuple[int, int]
"""(sender, sgcs sequence number) of the message an event came in; (0, 0) in total order."""


@dataclass(slots=True)
class _Part:
    """A batch of a publication of ours, on its way to its owner's multicast."""

    group: str
    root: str
    ticket: int
    events: list[tuple[Value, ...]]
    target: int


@dataclass(slots=True)
class LocalSubscription:
    sub_id: int
    compiled: Subscription
    group: str
    durable: bool
    keeper: bool = False
    state: State | None = None
    phase: Phase = Phase.LIVE
    nonce: str = ""
    requested: bool = False
    """The current request went out (a keeper was in sight)."""
    early: tuple[wire.Snapshot | wire.Expansion, int] | None = None
    """An answer that came before our own request was delivered to us."""
    expands_into: str | None = None
    """A hidden subscription whose changes, expanded, feed this history."""
    asked_at: float = 0.0
    s0: dict[Key, Row] | None = None
    buffer: list[tuple[Stamp, tuple[Value, ...]]] = field(default_factory=list)
    perkey: bool = False
    """Its group has per-key order: the cut is a vector, the buffer runs from the subscription on."""
    vector: Vector = field(default_factory=dict)
    """Per-key, LIVE: the messages whose events its rows hold (the cut it would give)."""
    cut: Vector = field(default_factory=dict)
    """Per-key: the cut it went LIVE at. The keeper may have applied a message
    before we deliver it; when it comes, its events are already in our rows."""
    dirty: set[Key] = field(default_factory=set)
    """Keys changed since the shell last stored them (durable subscriptions)."""
    delivered: int = 0
    catchup_events: int = 0
    catchup_bytes: int = 0
    transfer_bytes: int = 0


@dataclass(slots=True)
class _Group:
    name: str
    roots: list[str]
    view: tuple[int, ...] = ()
    peers: dict[int, wire.Sub] = field(default_factory=dict)
    peer_matchers: dict[str, Matcher] = field(default_factory=dict)
    local_matchers: dict[str, Matcher] = field(default_factory=dict)
    perkey: bool = False
    delivered: Vector = field(default_factory=dict)
    """Per-key: the last keyed message delivered here from each sender."""
    deferred: list[tuple[int, wire.Request]] = field(default_factory=list)
    """Per-key, at a keeper: requests whose sender had delivered messages we had not yet."""
    owners: dict[object, int] = field(default_factory=dict)
    """Per-key: partition key -> owner in the current view (a cache)."""


@dataclass(frozen=True, slots=True)
class FlowStatistics:
    events_published: int
    events_sent: int
    events_filtered_at_publisher: int
    bytes_sent: int
    bytes_saved_at_publisher: int
    """Bytes of filtered events times the other members they were not sent to."""
    events_received: int
    events_dropped_at_receiver: int
    bytes_dropped_at_receiver: int
    garbage: int
    expansions_failed: int
    """Live state changes an expand arc could not turn into events (none found within the search budget)."""
    answers_sent: int
    answer_bytes_sent: int
    events_forwarded: int = 0
    """Per-key: events of ours unicast to their owner to multicast."""
    events_misrouted: int = 0
    """Per-key: events delivered from a member that was not their owner in that view (skipped; routed again)."""
    events_rerouted: int = 0
    """Per-key: events of ours routed again (owner gone, rolled back, or misrouted)."""


class FlowEngine:
    """One member's flows over every group of ``graph`` (see the module docstring)."""

    def __init__(self, graph: FlowGraph, name: str, me: int, *, keeper: bool = False,
                 retry_after: float = 2.0, keeper_solo_after: float = 1.0, payload_max: int = 1_200) -> None:
        graph.validate()
        self.graph, self.name, self.me, self.keeper = graph, name, me, keeper
        self.retry_after, self.keeper_solo_after = retry_after, keeper_solo_after
        self.payload_max = payload_max
        """Bytes of events per multicast at most (one sgcs record: ``Config.max_datagram`` is 1,400);
        multicasts of several records did not reach other processes in our runs (docs/flows.md)."""
        self.fingerprint = graph.fingerprint()
        self.groups = {g: _Group(g, roots) for g, roots in graph.root_groups().items()}
        self._group_of_root = {r: g for g, roots in graph.root_groups().items() for r in roots}
        for root in graph.roots():  # a history made by an expand travels with the events of its state
            state = graph.expand_source(root)
            if state is not None:
                feeding = {self._group_of_root[p.root] for p in compile_subscription(graph, state).paths}
                if len(feeding) == 1:
                    self._group_of_root[root] = feeding.pop()
        self._publishable = graph.publishable_roots()
        self._partition: dict[str, Callable[[Sequence[Value]], object]] = {}
        for group in self.groups.values():
            analyses = [analyse(graph, r) for r in group.roots]
            group.perkey = (all(a.order != "total" for a in analyses) and any(a.order == "perkey" for a in analyses))
            for root, analysis in zip(group.roots, analyses):
                if group.perkey and analysis.order == "perkey":
                    self._partition[root] = partition_function(graph, root, analysis.key)
        self._parts: dict[int, _Part] = {}
        self._open_tickets: dict[int, int] = {}
        """ticket -> events of it not yet delivered and applied here."""
        self.subs: dict[int, LocalSubscription] = {}
        self._expanders: dict[str, Expander] = {}
        self._compiled: dict[tuple[str, str], Subscription] = {}
        self._counter = 0
        self._count = {f.name: 0 for f in dataclasses.fields(FlowStatistics)}

    # --- local commands ---------------------------------------------------------------------

    def order_of(self, group: str) -> str:
        """The sgcs order to join ``group`` with: per-key order is FIFO plus owners."""
        roots = self.groups[group].roots
        return "total" if any(self.graph.order_for(r)[0] == "total" for r in roots) else "fifo"

    def group_of_root(self, root: str) -> str:
        return self._group_of_root[root]

    def per_key(self, group: str) -> bool:
        """``group`` has per-key order (``perkey.py``)."""
        return self.groups[group].perkey

    def subscribe(self, space: str, predicate: str = "true", *, durable: bool = False,
                  s0: dict[Key, Row] | None = None, now: float = 0.0, keeper: bool = False) -> tuple[int, list[Output]]:
        """Register a subscription; for a state, start its transfer (or catch-up from ``s0``)."""
        compiled = self._compile(space, predicate)
        unplaced = sorted(p.root for p in compiled.paths if p.root not in self._group_of_root)
        if unplaced:
            raise UsageError(f"flows: {unplaced[0]!r} is expanded from a state fed by several groups; not supported")
        groups = {self._group_of_root[p.root] for p in compiled.paths}
        if len(groups) > 1:
            raise UsageError(f"flows: space {space!r} is fed from several groups ({sorted(groups)}); subscribe"
                             " to each feeding space instead")
        if not groups:
            raise UsageError(f"flows: no root feeds space {space!r}; nothing could ever arrive")
        (group,) = groups
        out: list[Output] = []
        for root in sorted({p.root for p in compiled.paths}):
            if self.graph.expand_source(root) is not None:
                out += self._feeder(root, now)
        self._counter += 1
        sub = LocalSubscription(self._counter, compiled, group, durable, keeper, perkey=self.groups[group].perkey)
        self.subs[sub.sub_id] = sub
        for path in compiled.paths:
            matcher = self.groups[group].local_matchers.setdefault(path.root, Matcher(self.graph, path.root))
            matcher.add(path, str(sub.sub_id))
        out.append(self.announce(group))
        if compiled.state is not None:
            collapse = self.graph.collapse_of(compiled.state)
            assert collapse is not None
            sub.state = State(collapse)
            sub.s0 = dict(s0) if s0 is not None else None
            out += self._ask(sub, now)
        return sub.sub_id, out

    def _feeder(self, root: str, now: float) -> list[Output]:
        """Make sure a hidden subscription holds the state whose changes, expanded,
        are history ``root``: every member computes that history itself, in the
        order of the state's events, so no one has to publish it (and no keeper
        change can duplicate or lose it)."""
        if any(s.expands_into == root for s in self.subs.values()):
            return []
        state = self.graph.expand_source(root)
        assert state is not None
        sub_id, out = self.subscribe(state, "true", now=now)
        self.subs[sub_id].expands_into = root
        return out

    def subscribe_keeper(self, now: float = 0.0, stored: dict[str, dict[Key, Row]] | None = None) -> list[Output]:
        """Keep every state of the graph in full, to answer transfers and catch-ups."""
        out: list[Output] = []
        for name, space in self.graph.spaces.items():
            if isinstance(space, StateSpace):
                _, more = self.subscribe(name, "true", durable=True, s0=(stored or {}).get(name), now=now, keeper=True)
                out += more
        return out

    def publish(self, root: str, events: Iterable[Sequence[object]]) -> list[Output]:
        """Checked events of ``root``, filtered at the source when we can."""
        return self.publish_ticket(root, events)[1]

    def publish_ticket(self, root: str, events: Iterable[Sequence[object]]) -> tuple[int | None, list[Output]]:
        """As ``publish``; in a per-key group also the publication's ticket,
        which a ``Settled`` output closes once every event is applied here
        (None: the multicasts' own outcomes are the publication's)."""
        space = self.graph.spaces.get(root)
        if not isinstance(space, History) or root not in self._publishable:
            raise UsageError(f"flows: {root!r} is not a root space; publish into one of {sorted(self._publishable)}")
        checked = [space.schema.event(e) for e in events]
        if not checked:
            return None, []
        group = self.groups[self._group_of_root[root]]
        self._count["events_published"] += len(checked)
        kept = checked
        if self._knows_all(group):
            kept = [e for e in checked if self._wanted(group, root, e)]
            saved = len(checked) - len(kept)
            if saved:
                others = max(0, len(group.view) - 1)
                self._count["events_filtered_at_publisher"] += saved
                full = wire.encoded_events_size(root, checked)
                self._count["bytes_saved_at_publisher"] += (full - (wire.encoded_events_size(root, kept)
                                                                    if kept else 0)) * others
        self._count["events_sent"] += len(kept)
        if group.perkey:
            self._counter += 1
            ticket = self._counter
            self._open_tickets[ticket] = len(kept)
            return ticket, self._route(group, root, ticket, kept) if kept else [Settled(ticket)]
        out: list[Output] = []
        for payload in wire.encode_events(root, kept, self.payload_max):
            self._count["bytes_sent"] += len(payload)
            out.append(Multicast(group.name, payload))
        return None, out

    # --- per-key order: routing to owners ------------------------------------------------------

    def _owner(self, group: _Group, root: str, event: Sequence[Value]) -> int:
        """The member that multicasts ``event`` in the current view (any member for an event no state keys)."""
        partition = self._partition.get(root)
        key = partition(event) if partition is not None else None
        if key is None or not group.view:
            return self.me
        found = group.owners.get(key)
        if found is None:
            if len(group.owners) > 100_000:
                group.owners.clear()
            found = group.owners[key] = owner(key, group.view)
        return found

    def _route(self, group: _Group, root: str, ticket: int, events: list[tuple[Value, ...]]) -> list[Output]:
        """Our events to their owners: multicast what we own, forward the rest."""
        by_owner: dict[int, list[tuple[Value, ...]]] = {}
        for event in events:
            by_owner.setdefault(self._owner(group, root, event), []).append(event)
        out: list[Output] = []
        for target, mine in sorted(by_owner.items()):
            for batch in wire.split_events(root, mine, self.payload_max):
                self._counter += 1
                part = self._counter
                self._parts[part] = _Part(group.name, root, ticket, batch, target)
                payload = wire.encode(wire.KeyedEvents(root, self.me, ticket, part, tuple(batch), target != self.me))
                self._count["bytes_sent"] += len(payload)
                if target == self.me:
                    out.append(Multicast(group.name, payload, (self.me, ticket, part)))
                else:
                    self._count["events_forwarded"] += len(batch)
                    out.append(Unicast(group.name, target, payload))
        return out

    def _reroute(self, part_id: int) -> list[Output]:
        part = self._parts.pop(part_id, None)
        if part is None:
            return []  # delivered meanwhile, or routed again already
        self._count["events_rerouted"] += len(part.events)
        return self._route(self.groups[part.group], part.root, part.ticket, part.events)

    def on_lost(self, group: str, tag: tuple[int, int, int]) -> list[Output]:
        """sgcs will not deliver our keyed multicast ``tag`` here (rolled back or
        not delivered): route it again, or tell its publisher to."""
        origin, ticket, part = tag
        if origin == self.me:
            return self._reroute(part)
        if origin in self.groups[group].view:
            return [Unicast(group, origin, wire.encode(wire.Bounce(ticket, part)))]
        return []  # its publisher is gone: nobody waits for it

    def _on_forward(self, group: _Group, sender: int, message: wire.KeyedEvents) -> list[Output]:
        """Multicast a publisher's events we own (the receivers check that we do)."""
        if message.origin != sender or message.root not in group.roots:
            self._count["garbage"] += 1
            return []
        payload = wire.encode(dataclasses.replace(message, forward=False))
        self._count["bytes_sent"] += len(payload)
        return [Multicast(group.name, payload, (message.origin, message.ticket, message.part))]

    def _on_keyed(self, group: _Group, sender: int, seq: int, message: wire.KeyedEvents, size: int) -> list[Output]:
        """An owner's multicast: apply the events it owns in this view, then, if
        they are ours, close or route again what they carried."""
        space = self.graph.spaces.get(message.root)
        if not isinstance(space, History) or message.root not in group.roots:
            self._count["garbage"] += 1
            return []
        accepted: list[tuple[Value, ...]] = []
        misrouted: list[tuple[Value, ...]] = []
        for raw in message.events:
            try:
                event = space.schema.event(raw)
            except FlowError:
                self._count["garbage"] += 1
                continue
            (accepted if self._owner(group, message.root, event) == sender else misrouted).append(event)
        self._count["events_misrouted"] += len(misrouted)
        out = self._match_and_feed(group, message.root, accepted, size, len(message.events), (sender, seq))
        if seq > group.delivered.get(sender, 0):
            group.delivered[sender] = seq
        for sub in self.subs.values():
            if sub.group == group.name and sub.perkey and sub.phase is Phase.LIVE and sub.state is not None:
                sub.vector[sender] = max(seq, sub.vector.get(sender, 0))
        if message.origin == self.me:
            out += self._settle(group, message, len(accepted), misrouted)
        return out + (self._answer_deferred(group, force=False) if group.deferred else [])

    def _settle(self, group: _Group, message: wire.KeyedEvents, applied: int,
                misrouted: list[tuple[Value, ...]]) -> list[Output]:
        self._parts.pop(message.part, None)
        left = self._open_tickets.get(message.ticket)
        if left is None:
            return []
        out: list[Output] = []
        if misrouted:
            self._count["events_rerouted"] += len(misrouted)
            out += self._route(group, message.root, message.ticket, misrouted)
        left -= applied
        if left <= 0:
            del self._open_tickets[message.ticket]
            out.append(Settled(message.ticket))
        else:
            self._open_tickets[message.ticket] = left
        return out

    def announce(self, group: str) -> Multicast:
        subs = tuple((s.compiled.space, s.compiled.text) for s in self.subs.values() if s.group == group)
        return Multicast(group, wire.encode(wire.Sub(self.name, self.fingerprint, self.keeper, subs)))

    # --- inputs from the group ----------------------------------------------------------------

    def on_view(self, group: str, members: Sequence[int]) -> list[Output]:
        state = self.groups[group]
        state.view = tuple(sorted(members))
        gone = [m for m in state.peers if m not in members]
        for member in gone:
            del state.peers[member]
        if gone:
            self._rebuild_peer_matchers(state)
        out: list[Output] = [self.announce(group)]  # newcomers learn what we want
        if state.perkey:
            state.owners = {}
            # Virtual synchrony: what a member that left had not delivered to us in
            # the old view, nobody delivers; so route again what we forwarded to it.
            lost = [p for p, part in self._parts.items() if part.group == group and part.target not in state.view]
            for part_id in sorted(lost):
                out += self._reroute(part_id)
            out += self._answer_deferred(state, force=True)
        return out

    def on_delivery(self, group: str, sender: int, payload: bytes, now: float, seq: int = 0) -> list[Output]:
        """One sgcs delivery (``seq``: the sender's sequence number, which per-key groups need)."""
        try:
            message = wire.decode_untrusted(payload)
        except DecodeError:
            self._count["garbage"] += 1
            return []
        state = self.groups.get(group)
        if state is None:
            return []
        if isinstance(message, wire.Events):
            if state.perkey:
                self._count["garbage"] += 1  # unkeyed events in a per-key group: another build's member
                return []
            return self._on_events(state, message, len(payload))
        if isinstance(message, wire.KeyedEvents):
            if not state.perkey:
                self._count["garbage"] += 1
                return []
            if message.forward:
                return self._on_forward(state, sender, message)
            return self._on_keyed(state, sender, seq, message, len(payload))
        if isinstance(message, wire.Bounce):
            return self._reroute(message.part) if message.part in self._parts else []
        if isinstance(message, wire.Sub):
            newcomer = sender != self.me and sender not in state.peers
            self._on_sub(state, sender, message)
            out = self._send_pending(state, now) if message.keeper else []
            # A member we did not know may have missed our announcement (it joined
            # without a view change we saw, e.g. leaving and coming back at once).
            return out + [self.announce(group)] if newcomer else out
        if isinstance(message, wire.Request):
            return self._on_request(state, sender, message, now)
        return self._on_answer(message, len(payload))

    def tick(self, now: float) -> list[Output]:
        """Send requests that waited for a keeper, ask again where an answer is
        overdue, and let a keeper that sees no other keeper start alone."""
        out: list[Output] = []
        for sub in self.subs.values():
            if sub.phase is Phase.LIVE:
                continue
            others = self._other_keepers(self.groups[sub.group])
            if not sub.requested:
                if others:
                    out += self._ask(sub, now)
                elif sub.keeper and now - sub.asked_at >= self.keeper_solo_after:
                    out += self._go_live(sub, dict(sub.s0 or {}))  # the first keeper, or the last one standing
            elif now - sub.asked_at >= self.retry_after:
                out += self._ask(sub, now)
        return out

    def statistics(self) -> FlowStatistics:
        return FlowStatistics(**self._count)

    def rows(self, sub_id: int) -> dict[Key, Row]:
        """The rows a state subscription sees (its value predicate applied)."""
        sub = self.subs[sub_id]
        if sub.state is None:
            raise UsageError("flows: this subscription is to a history, it has no rows")
        residual = compile_predicate(sub.compiled.residual, self.graph.functions)
        schema = sub.state.collapse.target
        names = schema.key_names + schema.value_names
        return {k: r for k, r in sub.state.rows.items() if residual(dict(zip(names, k + r)))}

    # --- internals: delivery ------------------------------------------------------------------

    def _compile(self, space: str, predicate: str) -> Subscription:
        key = (space, predicate)
        if key not in self._compiled:
            self._compiled[key] = compile_subscription(self.graph, space, predicate)
        return self._compiled[key]

    def _knows_all(self, group: _Group) -> bool:
        return bool(group.view) and all(m in group.peers for m in group.view if m != self.me)

    def _wanted(self, group: _Group, root: str, event: tuple[Value, ...]) -> bool:
        for matchers in (group.peer_matchers, group.local_matchers):
            matcher = matchers.get(root)
            if matcher is not None and matcher.any_match(event):
                return True
        return False

    def _on_sub(self, group: _Group, sender: int, message: wire.Sub) -> None:
        if sender == self.me:
            return
        if message.fingerprint != self.fingerprint:
            self._count["garbage"] += 1  # another graph under the same name: we cannot compile its subscriptions
            return
        if group.peers.get(sender) != message:
            group.peers[sender] = message
            self._rebuild_peer_matchers(group)

    def _rebuild_peer_matchers(self, group: _Group) -> None:
        group.peer_matchers = {}
        for member, sub in sorted(group.peers.items()):
            for space, text in sub.subs:
                try:
                    compiled = self._compile(space, text)
                except FlowError:
                    self._count["garbage"] += 1
                    continue
                for path in compiled.paths:
                    if path.root in group.roots:
                        group.peer_matchers.setdefault(path.root, Matcher(self.graph, path.root)).add(path, str(member))

    def _on_events(self, group: _Group, message: wire.Events, size: int) -> list[Output]:
        space = self.graph.spaces.get(message.root)
        if not isinstance(space, History) or message.root not in group.roots:
            self._count["garbage"] += 1
            return []
        events: list[tuple[Value, ...]] = []
        for raw in message.events:
            try:
                events.append(space.schema.event(raw))
            except FlowError:
                self._count["events_received"] += 1
                self._count["garbage"] += 1
        return self._match_and_feed(group, message.root, events, size, len(message.events), (0, 0))

    def _match_and_feed(self, group: _Group, root: str, events: list[tuple[Value, ...]], size: int, count: int,
                        stamp: Stamp) -> list[Output]:
        """Run our compiled paths on checked events of ``root`` that came in one message."""
        matcher = group.local_matchers.get(root)
        out: list[Output] = []
        dropped = 0
        for event in events:
            self._count["events_received"] += 1
            matched = matcher.match(event) if matcher is not None else []
            if not matched:
                dropped += 1
            for label, value in matched:
                out += self._feed(self.subs[int(label)], value, stamp)
        if dropped:
            self._count["events_dropped_at_receiver"] += dropped
            self._count["bytes_dropped_at_receiver"] += size * dropped // max(1, count)
        return out

    def _feed(self, sub: LocalSubscription, event: tuple[Value, ...], stamp: Stamp = (0, 0)) -> list[Output]:
        if sub.state is None:
            sub.delivered += 1
            return [Deliver(sub.sub_id, event)]
        if sub.phase is Phase.WAITING_CUT:
            return []  # before our cut: the state we will be given holds it
        if sub.phase is Phase.BUFFERING:
            sub.buffer.append((stamp, event))
            return []
        if sub.perkey and stamp[1] <= sub.cut.get(stamp[0], 0):
            return []  # within the cut we were given: the rows hold it
        sub.delivered += 1
        return self._apply(sub, event)

    def _apply(self, sub: LocalSubscription, event: tuple[Value, ...]) -> list[Output]:
        """Fold a LIVE state's event in; expand the change if a history is made of it."""
        assert sub.state is not None
        key = sub.state.collapse.key_of(event)
        before = sub.state.rows.get(key)
        if sub.state.apply(event) is None:
            return []
        out: list[Output] = []
        if sub.durable:
            sub.dirty.add(key)
            out.append(Persist(sub.sub_id))
        if sub.expands_into is not None:
            out += self._expand_change(sub, key, before, sub.state.rows[key])
        return out

    def _expand_change(self, sub: LocalSubscription, key: Key, before: Row | None, after: Row) -> list[Output]:
        """The events of the expanded history for one row change: the expansion,
        under the arc's interpretation, of the change of the columns it reads."""
        assert sub.state is not None and sub.expands_into is not None
        interpretation, columns = self.graph.expansion_into(sub.expands_into)
        old = None if before is None else tuple(before[i] for i in columns)
        new = tuple(after[i] for i in columns)
        if old == new:
            return []  # only columns the history does not carry changed (a window moved)
        expander = self._expander(f"-> {sub.expands_into}", interpretation)
        try:
            events, _, _, _ = expander.expand_key(key, old, new)
        except FlowError:
            self._count["expansions_failed"] += 1
            return []
        matcher = self.groups[sub.group].local_matchers.get(sub.expands_into)
        out: list[Output] = []
        for event in events if matcher is not None else ():
            for label, value in matcher.match(event):  # type: ignore[union-attr]
                out += self._feed(self.subs[int(label)], value)
        return out

    def _expander(self, name: str, interpretation: Collapse) -> Expander:
        """One per state (catch-up) and per expanded history, built once: building one canonicalises the rules."""
        expander = self._expanders.get(name)
        if expander is None:
            expander = self._expanders[name] = Expander(interpretation)
        return expander

    # --- internals: transfer and catch-up ------------------------------------------------------

    def _ask(self, sub: LocalSubscription, now: float) -> list[Output]:
        """Multicast a request (its place in the total order is the cut) if some
        keeper can answer it; otherwise wait for one. A keeper that sees no
        other keeper buffers from now on, to start alone if none appears."""
        self._counter += 1
        sub.nonce, sub.asked_at, sub.early = f"{self.me}:{self._counter}", now, None
        if not sub.perkey:
            sub.buffer = []  # total order: the buffer starts at the cut
        served = self._serve_locally(sub)
        if served is not None:
            return served
        group = self.groups[sub.group]
        if not self._other_keepers(group):
            sub.requested = False
            sub.phase = Phase.BUFFERING if sub.keeper or sub.perkey else Phase.WAITING_CUT
            return []
        # Per-key: buffer from now on; the keeper answers once it has what we delivered so far.
        sub.requested, sub.phase = True, Phase.BUFFERING if sub.perkey else Phase.WAITING_CUT
        s0 = None if sub.s0 is None else tuple(sorted(sub.s0.items()))
        vector = tuple(sorted(group.delivered.items())) if sub.perkey else None
        request = wire.Request(sub.nonce, sub.compiled.space, sub.compiled.text, s0, vector)
        return [Multicast(sub.group, wire.encode(request))]

    def _serve_locally(self, sub: LocalSubscription) -> list[Output] | None:
        """A keeper answers the other subscriptions of its own member itself:
        the engine takes one delivery at a time, so the rows its LIVE keeper
        subscription holds now are the state at a cut between two deliveries,
        and both see every later event. None if this member keeps no LIVE copy
        of the space (the subscription then asks, or waits for its keeper)."""
        mine = None if sub.keeper else self._keeper_sub(sub.compiled.space)
        if mine is None or mine.phase is not Phase.LIVE or mine.state is None:
            return None
        answer = self._answer(mine, wire.Request(sub.nonce, sub.compiled.space, sub.compiled.text, None))
        sub.requested, sub.phase = True, Phase.BUFFERING
        return self._install(sub, answer, 0)

    def _serve_waiting(self, space: str, now: float) -> list[Output]:
        """Our keeper copy of ``space`` just went LIVE: serve the subscriptions that waited for a keeper."""
        out: list[Output] = []
        for sub in list(self.subs.values()):
            if (not sub.keeper and sub.compiled.space == space and sub.phase is not Phase.LIVE
                    and not sub.requested):
                out += self._ask(sub, now)
        return out

    def _send_pending(self, group: _Group, now: float) -> list[Output]:
        out: list[Output] = []
        for sub in self.subs.values():
            if sub.group == group.name and sub.phase is not Phase.LIVE and not sub.requested:
                out += self._ask(sub, now)
        return out

    def _other_keepers(self, group: _Group) -> list[int]:
        return sorted(m for m, s in group.peers.items() if s.keeper and m in group.view and m != self.me)

    def _on_request(self, group: _Group, sender: int, request: wire.Request, now: float) -> list[Output]:
        if sender == self.me:
            return self._at_own_cut(group, request)
        mine = self._keeper_sub(request.space)
        if mine is None or mine.phase is not Phase.LIVE or mine.state is None:
            return []
        if any(k < self.me for k in self._other_keepers(group) if k != sender):
            return []  # a keeper with a lower id answers
        if group.perkey and not covers(mine.vector, dict(request.vector or ())):
            group.deferred.append((sender, request))  # its sender delivered messages we have not applied yet
            return []
        return self._send_answer(group, sender, mine, request)

    def _answer_deferred(self, group: _Group, *, force: bool) -> list[Output]:
        """Answer the deferred requests we can now; all of them at a view change
        (what we lack then, virtual synchrony says we never get)."""
        out: list[Output] = []
        waiting, group.deferred = group.deferred, []
        for sender, request in waiting:
            mine = self._keeper_sub(request.space)
            if mine is None or sender not in group.view:
                continue
            if force or covers(mine.vector, dict(request.vector or ())):
                out += self._send_answer(group, sender, mine, request)
            else:
                group.deferred.append((sender, request))
        return out

    def _send_answer(self, group: _Group, sender: int, mine: LocalSubscription, request: wire.Request) -> list[Output]:
        try:
            answer = self._answer(mine, request)
        except (FlowError, UsageError):
            self._count["garbage"] += 1
            return []
        payload = wire.encode(answer)
        self._count["answers_sent"] += 1
        self._count["answer_bytes_sent"] += len(payload)
        return [Unicast(group.name, sender, payload)]

    def _keeper_sub(self, space: str) -> LocalSubscription | None:
        return next((s for s in self.subs.values() if s.keeper and s.compiled.space == space), None)

    def _answer(self, mine: LocalSubscription, request: wire.Request) -> wire.Snapshot | wire.Expansion:
        assert mine.state is not None
        wanted = self._compile(request.space, request.predicate)
        target = mine.state.collapse.target
        key_part = _key_predicate(wanted, self.graph)
        goal = {k: r for k, r in mine.state.rows.items() if key_part(dict(zip(target.key_names, k)))}
        cut = tuple(sorted(mine.vector.items())) if mine.perkey else None
        if request.s0 is None or mine.state.collapse.has_windows:
            # a window is the key's last W events: no sequence shorter than those rebuilds it, the rows are shorter
            return wire.Snapshot(request.nonce, request.space, tuple(sorted(goal.items())), cut)
        s0 = {tuple(k): tuple(r) for k, r in request.s0}
        expander = self._expander(request.space, mine.state.collapse)
        expansion = expander.expand(s0, goal)
        return wire.Expansion(request.nonce, request.space, expansion.events, cut)

    def _at_own_cut(self, group: _Group, request: wire.Request) -> list[Output]:
        sub = next((s for s in self.subs.values() if s.nonce == request.nonce), None)
        if sub is None or sub.phase is not Phase.WAITING_CUT:
            return []
        sub.phase = Phase.BUFFERING  # from here on, events are after the cut
        early, sub.early = sub.early, None
        return self._install(sub, *early) if early is not None else []

    def _on_answer(self, answer: wire.Message, size: int) -> list[Output]:
        if not isinstance(answer, (wire.Snapshot, wire.Expansion)):
            return []
        sub = next((s for s in self.subs.values() if s.nonce == answer.nonce), None)
        if sub is None or sub.state is None:
            return []  # late: a request we asked again since
        if sub.phase is Phase.WAITING_CUT:
            sub.early = (answer, size)  # the keeper delivered our request before we did: keep it for our cut
            return []
        if sub.phase is not Phase.BUFFERING:
            return []  # a second keeper's identical answer
        return self._install(sub, answer, size)

    def _install(self, sub: LocalSubscription, answer: wire.Snapshot | wire.Expansion, size: int) -> list[Output]:
        assert sub.state is not None
        schema = sub.state.collapse
        try:
            if isinstance(answer, wire.Snapshot):
                rows = {_typed_key(schema, k): _typed_row(schema, r) for k, r in answer.rows}
                sub.transfer_bytes += size
            else:
                state = State(schema, dict(sub.s0 or {}))
                source = schema.source
                for raw in answer.events:
                    state.apply(source.event(raw))
                rows = state.rows
                sub.catchup_events += len(answer.events)
                sub.catchup_bytes += size
        except (FlowError, IndexError, TypeError, ValueError):
            self._count["garbage"] += 1
            return []
        return self._go_live(sub, rows, dict(answer.cut or ()))

    def _go_live(self, sub: LocalSubscription, rows: dict[Key, Row], cut: Vector | None = None) -> list[Output]:
        """Install ``rows`` and apply the buffer after the cut (per-key: the
        buffered events whose message lies beyond ``cut``)."""
        assert sub.state is not None
        sub.state.rows = dict(rows)
        buffer, sub.buffer, sub.phase = sub.buffer, [], Phase.LIVE
        if sub.perkey:
            cut = cut or {}
            buffer = [(stamp, e) for stamp, e in buffer if stamp[1] > cut.get(stamp[0], 0)]
            sub.vector = merged(cut, self.groups[sub.group].delivered)
            sub.cut = cut
        out: list[Output] = [Ready(sub.sub_id)]
        for _, event in buffer:  # after the cut: as if live (an expanded history starts at the cut)
            out += [o for o in self._apply(sub, event) if not isinstance(o, Persist)]
        sub.delivered += len(buffer)
        sub.dirty |= set(sub.state.rows)
        out += [Persist(sub.sub_id)] if sub.durable else []
        # (the clock only stamps requests, and a served subscription makes none)
        return out + (self._serve_waiting(sub.compiled.space, sub.asked_at) if sub.keeper else [])

    def take_dirty(self, sub_id: int) -> dict[Key, Row]:
        """The rows of ``sub_id`` changed since the last call (to store them)."""
        sub = self.subs[sub_id]
        assert sub.state is not None
        dirty = {k: sub.state.rows[k] for k in sub.dirty}
        sub.dirty = set()
        return dirty


def _key_predicate(sub: Subscription, graph: FlowGraph) -> Callable[[Env], bool]:
    space = graph.spaces[sub.space]
    assert isinstance(space, StateSpace)
    key_part, _ = split_by_keys(parse_expression(sub.text), set(space.schema.key_names))
    return compile_predicate(key_part, graph.functions)


def _typed_key(collapse: Collapse, raw: Sequence[object]) -> Key:
    keys = collapse.target.keys
    if len(raw) != len(keys):
        raise FlowError("flows: key of the wrong width")
    return tuple(check_value(kind, v, f"key {name!r}") for (name, kind), v in zip(keys, raw))


def _typed_row(collapse: Collapse, raw: Sequence[object]) -> Row:
    values = collapse.target.values
    if len(raw) != len(values):
        raise FlowError("flows: row of the wrong width")
    return tuple(check_value(kind, v, f"value {name!r}") for (name, kind), v in zip(values, raw))
