"""The mailbox paper's cost model, and a discrete-event check of it on the real post offices.

Theory of operation. The mailbox paper, section 4.2 ("communication
efficiency"), models one communication (MI A mails MI B, B pulls it) with:
rho1 the probability that B runs in A's domain, rho2 the probability that B
is in the address book of A's domain, q the probability that B is migrating
between domains, C_ctl and C_mail the sizes of a control message and of a
mail, and the times

    t_ctl   = C_ctl / delta_inter               (the paper's t_ur-ctl)
    t_ml    = C_mail / delta_inter              (the paper's t_ur-ml)
    t_intra = (C_ctl + C_mail) / delta_intra    (the pull: a request and the mail)
    q       = t_mgt / (t_stay + t_mgt)

where t_mgt is the mean inter-domain migration time and t_stay the mean stay
in a domain. The printed text reads "q = t_mgt/t_stay + t_mgt"; taken
literally that is not a probability (it exceeds 1 whenever t_mgt > 0), so the
parentheses are restored (:func:`migrating_probability`).

Equation (1), expected time of one communication (:func:`expected_time`)::

    T = rho1 t_intra
      + rho2 [(1-q)(t_ml + t_intra) + q(2 t_ml + t_intra)]
      + (1-rho1-rho2) [(1-q)(2 t_ctl + t_ml + t_intra) + q(2 t_ctl + 2 t_ml + t_intra)]

The migration term (one more inter-domain mail, the forward from the old
PO) applies only when B is outside A's domain.

Equation (2), traffic of one communication, C_dly. As printed, its last
bracket lacks the factor q (:func:`expected_traffic_as_printed`)::

    C_dly = rho1 (C_ctl + C_mail)
          + rho2 [(1-q)(C_ctl + 2 C_mail) + q(C_ctl + 3 C_mail)]
          + (1-rho1-rho2) [(1-q)(3 C_ctl + 2 C_mail) + (3 C_ctl + 3 C_mail)]

which is a defect of the text: the three-step path would then cost
26 KB at q = 0 instead of 11, and traffic would fall as q rises, against
the paper's own reading of (2) ("the smaller q, the less traffic"). The
corrected form, with q(3 C_ctl + 3 C_mail), is :func:`expected_traffic`.

Equation (3), traffic of one inter-domain migration (:func:`migration_cost`)::

    C_mgt = (D_fri + 2) C_ctl

D_fri, which the paper does not define, is read as the number of friend
domains (one UPDATE each); the 2 are DEREG and the home's update. The total
migration cost of an MI's task is C = N_inter-mgt C_mgt
(:func:`total_migration_cost`), N_inter-mgt the expected number of
inter-domain migrations. The paper characterises it by two indices:
eta = inter-domain migrations / all migrations (:func:`inter_domain_rate`)
and xi = domains involved in communication / number of communications
(:func:`dispersion`). Figure 5's experiment fixes 100 migrations, draws each
one inter-domain with probability eta in {0.05, 0.1, 0.2}, and lets xi set
the number of update messages of each inter-domain migration;
:func:`simulate_figure5` repeats it on the real post offices, reading
D_fri = xi * communications (the number of domains involved, an inference:
the paper gives neither the formula nor the number of communications).

The paper's experiment uses C_ctl = 1 KB, C_mail = 4 KB and
delta_intra = 10 delta_inter (:class:`Costs`' defaults); time is in units of
1 KB / delta_inter, so t_ctl = 1, t_ml = 4, t_intra = 0.5.

``simulate`` runs the actual :class:`PostOffice` machines on a timed network
(each message takes size / bandwidth) for ``trials`` random communications
and measures each mail's path: the transfer times and bytes of the messages
that carried it or resolved its address (MAIL, FORWARD, QUERY, ANSWER, NACK),
plus the pull. Acknowledgements, which the paper's reliable network does not
need, are counted apart, as are the migration's own messages. ``simulate``
draws "B is migrating" with probability q for every communication, B in A's
domain included, and the real post office then forwards the mail; it
therefore measures :func:`expected_time_with_local_forwards` and
:func:`expected_traffic_with_local_forwards` (equations (1) and (2) plus
rho1 q t_ml, resp. rho1 q C_mail), which equal the paper's at q = 0.
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass

from .messages import Kind, make_name
from .postoffice import PostOffice, Send, Settings


@dataclass(frozen=True, slots=True)
class Costs:
    """Message sizes and bandwidths; the defaults are the paper's experiment."""

    c_ctl: float = 1.0
    """KB per control message."""
    c_mail: float = 4.0
    """KB per mail."""
    ratio: float = 10.0
    """Intra-domain bandwidth / inter-domain bandwidth."""

    @property
    def t_ctl(self) -> float:
        """Inter-domain time of a control message, C_ctl / delta_inter."""
        return self.c_ctl

    @property
    def t_ml(self) -> float:
        """Inter-domain time of a mail, C_mail / delta_inter."""
        return self.c_mail

    @property
    def t_intra(self) -> float:
        """Time of a pull inside the domain, (C_ctl + C_mail) / delta_intra."""
        return (self.c_ctl + self.c_mail) / self.ratio


def _check(rho1: float, rho2: float, q: float) -> float:
    """Validate the probabilities; returns 1 - rho1 - rho2."""
    rho3 = 1.0 - rho1 - rho2
    if rho1 < 0.0 or rho2 < 0.0 or rho3 < -1e-9 or not 0.0 <= q <= 1.0:
        raise ValueError(f"need rho1, rho2 >= 0, rho1 + rho2 <= 1, 0 <= q <= 1: got {rho1}, {rho2}, {q}")
    return max(rho3, 0.0)


def migrating_probability(t_stay: float, t_mgt: float) -> float:
    """q = t_mgt / (t_stay + t_mgt): the share of its time an MI spends
    migrating between domains (the mailbox paper, section 4.2, after
    equation (1); the printed text drops the parentheses)."""
    if t_stay < 0.0 or t_mgt < 0.0 or t_stay + t_mgt <= 0.0:
        raise ValueError(f"need t_stay, t_mgt >= 0 and not both 0: got {t_stay}, {t_mgt}")
    return t_mgt / (t_stay + t_mgt)


def expected_time(rho1: float, rho2: float, q: float, costs: Costs = Costs()) -> float:
    """Equation (1) of the mailbox paper (section 4.2), as printed: the
    expected time of one communication, in units of 1 KB / delta_inter.
    The forward (q) applies only to a receiver outside the sender's domain."""
    rho3 = _check(rho1, rho2, q)
    t_ctl, t_ml, t_intra = costs.t_ctl, costs.t_ml, costs.t_intra
    known = (1 - q) * (t_ml + t_intra) + q * (2 * t_ml + t_intra)
    unknown = (1 - q) * (2 * t_ctl + t_ml + t_intra) + q * (2 * t_ctl + 2 * t_ml + t_intra)
    return rho1 * t_intra + rho2 * known + rho3 * unknown


def expected_traffic(rho1: float, rho2: float, q: float, costs: Costs = Costs()) -> float:
    """Equation (2) of the mailbox paper (section 4.2), corrected: C_dly, the
    traffic of one communication in KB, with the factor q the printed text
    lacks on its last term, q(3 C_ctl + 3 C_mail). See
    :func:`expected_traffic_as_printed` for the text as printed."""
    rho3 = _check(rho1, rho2, q)
    c_ctl, c_mail = costs.c_ctl, costs.c_mail
    known = (1 - q) * (c_ctl + 2 * c_mail) + q * (c_ctl + 3 * c_mail)
    unknown = (1 - q) * (3 * c_ctl + 2 * c_mail) + q * (3 * c_ctl + 3 * c_mail)
    return rho1 * (c_ctl + c_mail) + rho2 * known + rho3 * unknown


def expected_traffic_as_printed(rho1: float, rho2: float, q: float, costs: Costs = Costs()) -> float:
    """Equation (2) of the mailbox paper (section 4.2) exactly as printed,
    ``... + (1-rho1-rho2)[(1-q)(3 C_ctl + 2 C_mail) + (3 C_ctl + 3 C_mail)]``:
    the last term has no factor q. A defect of the text (it gives 22.2 KB
    instead of 10.2 at rho1 = rho2 = 0.1, q = 0, and falls as q rises);
    kept to show it. Use :func:`expected_traffic`."""
    rho3 = _check(rho1, rho2, q)
    c_ctl, c_mail = costs.c_ctl, costs.c_mail
    known = (1 - q) * (c_ctl + 2 * c_mail) + q * (c_ctl + 3 * c_mail)
    unknown = (1 - q) * (3 * c_ctl + 2 * c_mail) + (3 * c_ctl + 3 * c_mail)
    return rho1 * (c_ctl + c_mail) + rho2 * known + rho3 * unknown


def expected_time_with_local_forwards(rho1: float, rho2: float, q: float, costs: Costs = Costs()) -> float:
    """Not the paper's: equation (1) plus rho1 q t_ml, i.e. a receiver in
    the sender's domain also migrates with probability q and its mail is
    forwarded once. This is what :func:`simulate` measures (the earlier form
    of this module); it equals :func:`expected_time` at q = 0 or rho1 = 0."""
    return expected_time(rho1, rho2, q, costs) + rho1 * q * costs.t_ml


def expected_traffic_with_local_forwards(rho1: float, rho2: float, q: float, costs: Costs = Costs()) -> float:
    """Not the paper's: corrected equation (2) plus rho1 q C_mail (see
    :func:`expected_time_with_local_forwards`)."""
    return expected_traffic(rho1, rho2, q, costs) + rho1 * q * costs.c_mail


def migration_cost(friend_domains: float, costs: Costs = Costs()) -> float:
    """Equation (3) of the mailbox paper: C_mgt = (D_fri + 2) C_ctl, in KB."""
    if friend_domains < 0:
        raise ValueError(f"friend_domains must be >= 0: got {friend_domains}")
    return (friend_domains + 2) * costs.c_ctl


def total_migration_cost(inter_domain_migrations: float, friend_domains: float, costs: Costs = Costs()) -> float:
    """C = N_inter-mgt C_mgt (the mailbox paper, section 4.2, after
    equation (3)), in KB."""
    if inter_domain_migrations < 0:
        raise ValueError(f"inter_domain_migrations must be >= 0: got {inter_domain_migrations}")
    return inter_domain_migrations * migration_cost(friend_domains, costs)


def inter_domain_rate(inter_domain_migrations: int, migrations: int) -> float:
    """eta = inter-domain migrations / all migrations (the mailbox paper, section 4.2)."""
    if migrations <= 0 or not 0 <= inter_domain_migrations <= migrations:
        raise ValueError(f"need 0 <= inter-domain <= migrations, migrations > 0: got {inter_domain_migrations}, "
                         f"{migrations}")
    return inter_domain_migrations / migrations


def dispersion(domains_involved: int, communications: int) -> float:
    """xi = domains involved in communication / number of communications
    (the mailbox paper, section 4.2)."""
    if communications <= 0 or domains_involved < 0:
        raise ValueError(f"need communications > 0, domains_involved >= 0: got {domains_involved}, {communications}")
    return domains_involved / communications


def expected_total_migration_cost(migrations: int, eta: float, xi: float, communications: int,
                                  costs: Costs = Costs()) -> float:
    """C = N_inter-mgt C_mgt with N_inter-mgt = eta * migrations and
    D_fri = xi * communications (the domains involved; an inference, the
    paper does not state it), in KB."""
    if not 0.0 <= eta <= 1.0 or xi < 0.0:
        raise ValueError(f"need 0 <= eta <= 1, xi >= 0: got {eta}, {xi}")
    return total_migration_cost(eta * migrations, xi * communications, costs)


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
    """Mean time and traffic per communication over ``trials`` random ones.

    The receiver is migrating with probability q whatever the case, so a
    mail to a receiver in the sender's domain is forwarded too: the means
    follow :func:`expected_time_with_local_forwards` and
    :func:`expected_traffic_with_local_forwards`, not the paper's (1), (2),
    except at q = 0."""
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


@dataclass(frozen=True, slots=True)
class MigrationRun:
    """One run of the figure 5 experiment (see :func:`simulate_figure5`)."""

    migrations: int
    inter_domain: int
    """Migrations drawn inter-domain (probability eta each)."""
    friend_domains: int
    """D_fri of every inter-domain migration, round(xi * communications)."""
    messages: int
    """DEREG + HOME_UPDATE + UPDATE the real post offices sent, in all."""
    cost_kb: float
    """Their size in KB (C_ctl each)."""


def friend_domains_from_dispersion(xi: float, communications: int) -> int:
    """D_fri = round(xi * communications): the domains an MI's
    communications involve (an inference; the paper gives no formula)."""
    if xi < 0.0 or communications < 0:
        raise ValueError(f"need xi >= 0, communications >= 0: got {xi}, {communications}")
    return round(xi * communications)


def simulate_figure5(eta: float, xi: float, communications: int, migrations: int = 100, seed: int = 1,
                     costs: Costs = Costs()) -> MigrationRun:
    """The mailbox paper's figure 5 experiment on the real post offices:
    ``migrations`` migrations, each inter-domain with probability ``eta``
    (an intra-domain one sends nothing between POs); each inter-domain one
    is a real move of an MI with D_fri friend domains (``simulate_migration``),
    and its DEREG, HOME_UPDATE and UPDATE messages are counted."""
    if not 0.0 <= eta <= 1.0 or migrations < 0:
        raise ValueError(f"need 0 <= eta <= 1, migrations >= 0: got {eta}, {migrations}")
    rng = random.Random(seed)
    inter = sum(rng.random() < eta for _ in range(migrations))
    friends = friend_domains_from_dispersion(xi, communications)
    move = simulate_migration(friends, costs) if inter else {}
    per_move = sum(int(move.get(k.value, 0)) for k in MIGRATION_CONTROL)
    return MigrationRun(migrations, inter, friends, inter * per_move, inter * move.get("control_kb", 0.0))
