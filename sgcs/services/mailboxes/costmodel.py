"""The paper's cost model, and a discrete-event check of it on the real post offices.

Theory of operation (equations (1) and (2), as docs/mailboxes.md rebuilds
them, with q restored). A communication takes one of three paths:
with probability rho1 the receiver runs in the sender's domain (the mail goes
into its active mailbox at once); with probability rho2 it is in the sender
domain's address book (one inter-domain mail); otherwise the home PO is asked
(one query and one answer, then the mail). The receiver then pulls: a pull
request and the mail, both inside its domain. With probability q the
receiver is migrating, and the mail is forwarded once from the old PO to the
new one (one more inter-domain mail). Sizes C_ctl and C_mail; the
intra-domain bandwidth is ``ratio`` times the inter-domain one; time is in
units of 1 KB / inter-domain bandwidth.

Equation (1), expected time per communication::

    T = rho1 (C_ctl + C_mail)/B_intra
      + rho2 (C_mail/B_inter + (C_ctl + C_mail)/B_intra)
      + (1 - rho1 - rho2) ((2 C_ctl + C_mail)/B_inter + (C_ctl + C_mail)/B_intra)
      + q C_mail/B_inter

Equation (2), traffic per communication (every byte, intra or inter)::

    D = rho1 (C_ctl + C_mail) + rho2 (2 C_mail + C_ctl)
      + (1 - rho1 - rho2)(3 C_ctl + 2 C_mail) + q C_mail

The last term of (2) is the factor q the printed paper lacks (without it,
traffic fell as migration rose, against the paper's own conclusion). The
paper itself was not at hand: the terms above are rebuilt from a summary of
it (the project's task description) and reproduce its worked example exactly (rho1 = rho2 = 0.1,
q = 0: T = 5.70, D = 10.2). Migration cost: C_mgt = (D_fri + 2) C_ctl
(DEREG, HOME_UPDATE and one UPDATE per friend domain).

``simulate`` runs the actual :class:`PostOffice` machines on a timed network
(each message takes size / bandwidth) for ``trials`` random communications
and measures each mail's path: the transfer times and bytes of the messages
that carried it or resolved its address (MAIL, FORWARD, QUERY, ANSWER, NACK),
plus the pull. Acknowledgements, which the paper's reliable network does not
need, are counted apart, as are the migration's own messages.
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass

from .messages import Kind, make_name
from .postoffice import PostOffice, Send, Settings


@dataclass(frozen=True, slots=True)
class Costs:
    c_ctl: float = 1.0
    """KB per control message."""
    c_mail: float = 4.0
    """KB per mail."""
    ratio: float = 10.0
    """Intra-domain bandwidth / inter-domain bandwidth."""


def expected_time(rho1: float, rho2: float, q: float, costs: Costs = Costs()) -> float:
    """Equation (1), in units of 1 KB / inter-domain bandwidth."""
    intra = (costs.c_ctl + costs.c_mail) / costs.ratio
    rho3 = 1.0 - rho1 - rho2
    return (rho1 * intra + rho2 * (costs.c_mail + intra)
            + rho3 * (2 * costs.c_ctl + costs.c_mail + intra) + q * costs.c_mail)


def expected_traffic(rho1: float, rho2: float, q: float, costs: Costs = Costs()) -> float:
    """Equation (2) with q restored on its last term, in KB."""
    pull = costs.c_ctl + costs.c_mail
    rho3 = 1.0 - rho1 - rho2
    return rho1 * pull + rho2 * (costs.c_mail + pull) + rho3 * (2 * costs.c_ctl + costs.c_mail + pull) + q * costs.c_mail


def migration_cost(friend_domains: int, costs: Costs = Costs()) -> float:
    """C_mgt = (D_fri + 2) C_ctl, in KB."""
    return (friend_domains + 2) * costs.c_ctl


PATH_KINDS = frozenset({Kind.MAIL, Kind.FORWARD, Kind.QUERY, Kind.ANSWER, Kind.NACK})
ACK_KINDS = frozenset({Kind.MAIL_ACK, Kind.FORWARD_ACK, Kind.UPDATE_ACK, Kind.HOME_ACK})
MIGRATION_CONTROL = frozenset({Kind.DEREG, Kind.HOME_UPDATE, Kind.UPDATE})


class TimedNetwork:
    """Post offices whose messages take size / bandwidth to arrive."""

    def __init__(self, domains: int, costs: Costs) -> None:
        never = Settings(retry_initial=1e9, retry_max=1e9, tombstone_lifetime=1e9)
        self.pos = [PostOffice(d, never) for d in range(domains)]
        self.costs = costs
        self.now = 0.0
        self._heap: list[tuple[float, int, Send]] = []
        self._n = 0
        self.path_time = self.path_bytes = self.ack_bytes = self.migration_bytes = 0.0
        self.kinds: dict[Kind, int] = {}

    def size(self, send: Send) -> float:
        kind, body = send.envelope.kind, send.envelope.body
        if kind is Kind.MAIL:
            return self.costs.c_mail * len(body)
        if kind is Kind.FORWARD:
            return self.costs.c_mail * len(body[2])
        if kind is Kind.MIGRATE:
            return 0.0  # the MI's own transfer between hosts is not in the model
        return self.costs.c_ctl

    def emit(self, sends: list[Send]) -> None:
        for send in sends:
            self._n += 1
            heapq.heappush(self._heap, (self.now + self.size(send), self._n, send))

    def run(self) -> None:
        while self._heap:
            due, _, send = heapq.heappop(self._heap)
            self.now = due
            kind, size = send.envelope.kind, self.size(send)
            self.kinds[kind] = self.kinds.get(kind, 0) + 1
            if kind in PATH_KINDS:
                self.path_time += size  # inter-domain: 1 KB takes 1 unit
                self.path_bytes += size
            elif kind in ACK_KINDS:
                self.ack_bytes += size
            elif kind in MIGRATION_CONTROL:
                self.migration_bytes += size
            self.emit(self.pos[send.to].receive(send.envelope, self.now))

    def reset_counts(self) -> None:
        self.path_time = self.path_bytes = self.ack_bytes = self.migration_bytes = 0.0
        self.kinds = {}


@dataclass(frozen=True, slots=True)
class Measured:
    time: float
    """Mean time per communication (path transfer times plus the pull)."""
    traffic: float
    """Mean KB per communication on the paper's terms."""
    ack_traffic: float
    """Mean KB per communication of acknowledgements (not in the paper's model)."""
    trials: int


S, R, HOME, NEW = 0, 1, 2, 3


def one_communication(case: int, migrating: bool, costs: Costs, n: int) -> tuple[float, float, float]:
    """Time, paper traffic and ack traffic of one mail on the real protocol.

    Domains: S the sender's, R the receiver's, HOME its home, NEW where it
    goes if it is migrating. Case 1: the receiver runs in S; case 2: S's
    address book knows it (S sent it a mail before, and is its friend);
    case 3: S knows nothing and asks the home."""
    net = TimedNetwork(4, costs)
    sender, receiver = make_name("wf", S, "h", f"s{n}"), make_name("wf", HOME, "h", f"r{n}")
    net.emit(net.pos[HOME].create_mi(receiver, 0.0))
    net.emit(net.pos[S].create_mi(sender, 0.0))
    at = S if case == 1 else R
    net.emit(net.pos[HOME].move(receiver, at, 0.0))
    net.run()
    if case == 2:
        net.emit(net.pos[S].send_mail(sender, receiver, "", b"warm-up", net.now))
        net.run()
        net.pos[at].pull(receiver, net.now)
    net.reset_counts()
    start = net.now
    if migrating:  # the receiver leaves as the mail goes out: the mail meets the old PO
        net.emit(net.pos[at].move(receiver, NEW, start))
    net.emit(net.pos[S].send_mail(sender, receiver, "", b"measured", start))
    net.run()
    where = NEW if migrating else at
    mails, _ = net.pos[where].pull(receiver, net.now)
    if [m.content for m in mails] != [b"measured"]:
        raise AssertionError(f"case {case}, migrating {migrating}: pulled {mails}")
    pull = costs.c_ctl + costs.c_mail  # the pull request and the mail, inside the domain
    return net.path_time + pull / costs.ratio, net.path_bytes + pull, net.ack_bytes


def simulate(rho1: float, rho2: float, q: float, trials: int = 2000, seed: int = 1,
             costs: Costs = Costs()) -> Measured:
    """Mean time and traffic per communication over ``trials`` random ones."""
    rng = random.Random(seed)
    time = traffic = acks = 0.0
    for n in range(trials):
        draw = rng.random()
        case = 1 if draw < rho1 else 2 if draw < rho1 + rho2 else 3
        t, d, a = one_communication(case, rng.random() < q, costs, n)
        time, traffic, acks = time + t, traffic + d, acks + a
    return Measured(time / trials, traffic / trials, acks / trials, trials)


def simulate_migration(friends: int, costs: Costs = Costs()) -> dict[str, float]:
    """One move of an MI that has ``friends`` friend domains (none its home,
    old or new PO): the migration's control bytes and message counts."""
    domains = friends + 3
    net = TimedNetwork(domains, costs)
    home, old, new = 0, 1, 2
    mover = make_name("wf", home, "h", "mover")
    net.emit(net.pos[home].create_mi(mover, 0.0))
    net.emit(net.pos[home].move(mover, old, 0.0))
    net.run()
    for f in range(3, 3 + friends):
        friend = make_name("wf", f, "h", "friend")
        net.emit(net.pos[f].create_mi(friend, net.now))
        net.emit(net.pos[f].send_mail(friend, mover, "", b"hi", net.now))
    net.run()
    net.reset_counts()
    net.emit(net.pos[old].move(mover, new, net.now))
    net.run()
    counts = {k.value: float(v) for k, v in net.kinds.items()}
    return {"control_kb": net.migration_bytes, "ack_kb": net.ack_bytes, **counts}
