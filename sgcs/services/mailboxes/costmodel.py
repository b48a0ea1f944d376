"""The mailbox paper's cost model, and a discrete-event check of it on the real post offices.

Theory of operation. The mailbox paper, section 4.2 ("communication
efficiency"), models one communication (MI A mails MI B, B pulls it) with:
rho1 the probability that B runs in A's domain, rho2 the probability that B
is in the address book of A's domain, q the probability that B is in the
middle of an *inter-domain* migration, C_ctl and C_mail the sizes of a
control message and of a mail, and the times

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
PO) applies only when B is outside A's domain: a B that runs in A's domain
is by the case's definition not between domains, and its moves between the
hosts of the domain are invisible to communication, its active mailbox
staying put (section 4.1, property 1).

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
the number of update messages of each inter-domain migration; D_fri is read
as xi * communications (the number of domains involved, an inference: the
paper gives neither the formula nor the number of communications).

The paper's experiment uses C_ctl = 1 KB, C_mail = 4 KB and
delta_intra = 10 delta_inter (:class:`Costs`' defaults); time is in units of
1 KB / delta_inter, so t_ctl = 1, t_ml = 4, t_intra = 0.5.

Two models that are not the paper's, to compare with:

* **Local forwards** (``*_with_local_forwards``): a B in A's domain that
  leaves the domain (an inter-domain move) as the mail is stored in its
  active mailbox. The real post offices must then forward the mail with the
  queued batch once the new PO's DEREG arrives: rho1 q (t_ctl + t_ml) more
  time and rho1 q C_mail more traffic. Equation (1) has no such term.
* **Home relay** (``*_home_relay``), the baseline the paper claims to beat
  ("less triangle routing", conclusion (1)): every mail to an MI outside the
  sender's domain goes to its home PO, which relays it to where the MI is
  (two inter-domain mails, no address book, no QUERY); a migration costs
  DEREG + the home's update, 2 C_ctl. With the home a third domain:
  T = rho1 t_intra + (1-rho1)[(1-q)(2 t_ml + t_intra) + q(3 t_ml + t_intra)].

The simulator. :func:`simulate` runs the actual :class:`PostOffice`
machines on a timed network (each message takes size / bandwidth) for
``trials`` random communications: it draws the case (rho1, rho2) and "B is
migrating" (q) for each, sets the four domains up (sender S, receiver R,
home, and NEW where a migrating B goes), and measures the time from the send
to the mail's arrival in B's current active mailbox, plus the pull, and the
bytes of the messages that carried the mail or resolved its address (MAIL,
FORWARD, QUERY, ANSWER, NACK), plus the pull. Acknowledgements, which the
paper's reliable network does not need, are counted apart, as are the
migration's own messages. A migrating B outside S leaves its PO as the mail
heads there, so the mail meets the old PO (the paper's q). What "migrating"
means for a B in S is the ``mode``:

* ``"paper"`` (the default): a move between hosts of S. The post offices
  see nothing (a PO serves all its domain's hosts, ``PostOffice.move`` is for
  moves between domains only): the mail waits in the active mailbox and the
  means follow equations (1) and (2).
* ``"local_forwards"``: B leaves S for NEW; the means follow
  :func:`expected_time_with_local_forwards` and
  :func:`expected_traffic_with_local_forwards`. Both modes use the same
  draws, so they differ only in the trials of case 1 that migrate.

``scheme="home_relay"`` runs the same draws on :class:`HomeRelayPostOffice`,
the baseline; :func:`draw_communications` with ``domains`` places the home
at random among that many domains (so it may be S or R) instead of apart.
:func:`simulate_figure5` runs the figure 5 experiment: real sequences of
100 migrations of an MI with D_fri friend domains.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from .messages import Kind, Mail, home_of, make_name
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


def check_probabilities(rho1: float, rho2: float, q: float) -> float:
    """Validate the probabilities; returns rho3 = 1 - rho1 - rho2."""
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
    rho3 = check_probabilities(rho1, rho2, q)
    t_ctl, t_ml, t_intra = costs.t_ctl, costs.t_ml, costs.t_intra
    known = (1 - q) * (t_ml + t_intra) + q * (2 * t_ml + t_intra)
    unknown = (1 - q) * (2 * t_ctl + t_ml + t_intra) + q * (2 * t_ctl + 2 * t_ml + t_intra)
    return rho1 * t_intra + rho2 * known + rho3 * unknown


def expected_traffic(rho1: float, rho2: float, q: float, costs: Costs = Costs()) -> float:
    """Equation (2) of the mailbox paper (section 4.2), corrected: C_dly, the
    traffic of one communication in KB, with the factor q the printed text
    lacks on its last term, q(3 C_ctl + 3 C_mail). See
    :func:`expected_traffic_as_printed` for the text as printed."""
    rho3 = check_probabilities(rho1, rho2, q)
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
    rho3 = check_probabilities(rho1, rho2, q)
    c_ctl, c_mail = costs.c_ctl, costs.c_mail
    known = (1 - q) * (c_ctl + 2 * c_mail) + q * (c_ctl + 3 * c_mail)
    unknown = (1 - q) * (3 * c_ctl + 2 * c_mail) + (3 * c_ctl + 3 * c_mail)
    return rho1 * (c_ctl + c_mail) + rho2 * known + rho3 * unknown


def expected_time_with_local_forwards(rho1: float, rho2: float, q: float, costs: Costs = Costs()) -> float:
    """Not the paper's: equation (1) plus rho1 q (t_ctl + t_ml). A receiver in
    the sender's domain leaves the domain with probability q as the mail is
    stored in its active mailbox; the old PO forwards the mail when the new
    PO's DEREG (t_ctl) arrives, one more inter-domain mail (t_ml). This is
    what :func:`simulate` measures with ``mode="local_forwards"``; it equals
    :func:`expected_time` at q = 0 or rho1 = 0."""
    return expected_time(rho1, rho2, q, costs) + rho1 * q * (costs.t_ctl + costs.t_ml)


def expected_traffic_with_local_forwards(rho1: float, rho2: float, q: float, costs: Costs = Costs()) -> float:
    """Not the paper's: corrected equation (2) plus rho1 q C_mail, the forward
    of :func:`expected_time_with_local_forwards` (the DEREG is the
    migration's own cost, equation (3))."""
    return expected_traffic(rho1, rho2, q, costs) + rho1 * q * costs.c_mail


def expected_time_home_relay(rho1: float, q: float, costs: Costs = Costs()) -> float:
    """The baseline, not the paper's scheme: every mail to an MI outside the
    sender's domain goes to its home PO (a third domain), which relays it to
    the MI's PO, forwarded once more if the MI is migrating:
    rho1 t_intra + (1-rho1)[(1-q)(2 t_ml + t_intra) + q(3 t_ml + t_intra)]."""
    check_probabilities(rho1, 0.0, q)
    t_ml, t_intra = costs.t_ml, costs.t_intra
    away = (1 - q) * (2 * t_ml + t_intra) + q * (3 * t_ml + t_intra)
    return rho1 * t_intra + (1 - rho1) * away


def expected_traffic_home_relay(rho1: float, q: float, costs: Costs = Costs()) -> float:
    """The baseline's traffic per communication (see
    :func:`expected_time_home_relay`): rho1 (C_ctl + C_mail)
    + (1-rho1)[(1-q)(C_ctl + 3 C_mail) + q(C_ctl + 4 C_mail)], in KB."""
    check_probabilities(rho1, 0.0, q)
    c_ctl, c_mail = costs.c_ctl, costs.c_mail
    away = (1 - q) * (c_ctl + 3 * c_mail) + q * (c_ctl + 4 * c_mail)
    return rho1 * (c_ctl + c_mail) + (1 - rho1) * away


def migration_cost_home_relay(costs: Costs = Costs()) -> float:
    """The baseline's migration cost, 2 C_ctl (DEREG and the home's update):
    with no address books there are no friend domains to update."""
    return 2 * costs.c_ctl


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


def friend_domains_from_dispersion(xi: float, communications: int) -> int:
    """D_fri = round(xi * communications): the domains an MI's
    communications involve (an inference; the paper gives no formula)."""
    if xi < 0.0 or communications < 0:
        raise ValueError(f"need xi >= 0, communications >= 0: got {xi}, {communications}")
    return round(xi * communications)


def expected_total_migration_cost(migrations: int, eta: float, xi: float, communications: int,
                                  costs: Costs = Costs()) -> float:
    """C = N_inter-mgt C_mgt with N_inter-mgt = eta * migrations and
    D_fri = xi * communications (the domains involved; an inference, the
    paper does not state it), in KB."""
    if not 0.0 <= eta <= 1.0 or xi < 0.0:
        raise ValueError(f"need 0 <= eta <= 1, xi >= 0: got {eta}, {xi}")
    return total_migration_cost(eta * migrations, xi * communications, costs)


# --- the simulator: the real post offices on a timed network ----------------------------------

PATH_KINDS = frozenset({Kind.MAIL, Kind.FORWARD, Kind.QUERY, Kind.ANSWER, Kind.NACK})
"""What carries a mail or resolves its address: equation (2)'s terms."""
ACK_KINDS = frozenset({Kind.MAIL_ACK, Kind.FORWARD_ACK, Kind.UPDATE_ACK, Kind.HOME_ACK})
MIGRATION_CONTROL = frozenset({Kind.DEREG, Kind.HOME_UPDATE, Kind.UPDATE})
"""Equation (3)'s messages."""

Mode = Literal["paper", "local_forwards"]
"""What "the receiver is migrating" means for a receiver in the sender's domain."""
MODES: tuple[Mode, ...] = ("paper", "local_forwards")
Scheme = Literal["mailboxes", "home_relay"]
"""The paper's scheme on :class:`PostOffice`, or the home-relay baseline."""
Home = Literal["apart", "sender", "receiver"]
"""Where the receiver's home is: a third domain, or the sender's or the receiver's domain."""


class HomeRelayPostOffice(PostOffice):
    """The baseline of :func:`expected_time_home_relay`: triangle routing
    through the home, as a home-agent scheme does. Everything else is the
    real post office (move, DEREG, FORWARD, tombstones, HOME_UPDATE), so the
    two schemes differ only in where a mail is sent and who relays it."""

    def _resolve(self, receiver: str) -> int:
        # No address book and no QUERY: the home's record, read by the home itself.
        if receiver in self.mailboxes:
            return self.domain
        home = home_of(receiver)
        return home if home != self.domain else self.home.get(receiver, (-1, 0))[0]

    def _accept(self, mail: Mail, now: float) -> str:
        box = self.mailboxes.get(mail.receiver)
        if box is not None:  # no friend domains recorded: nobody keeps the MI's address but its home
            self._store(mail.receiver, box, mail)
            return "ack"
        tomb = self.tombstones.get(mail.receiver)
        target = tomb[0] if tomb is not None else self.home.get(mail.receiver, (-1, 0))[0]
        if target < 0:
            return "nack"
        self._put_out(mail, target, now)  # the relay: the home (or a tombstone) takes the mail on
        return "ack"


class TimedNetwork:
    """Post offices whose messages take size / bandwidth to arrive; every
    inter-domain KB takes one unit of time, and messages never wait for each other."""

    def __init__(self, domains: int, costs: Costs, office: type[PostOffice] = PostOffice) -> None:
        never = Settings(retry_initial=1e9, retry_max=1e9, tombstone_lifetime=1e9)  # a reliable network
        self.pos = [office(d, never) for d in range(domains)]
        self.costs = costs
        self.now = 0.0
        self._heap: list[tuple[float, int, Send]] = []
        self._n = 0
        self.path_bytes = self.ack_bytes = self.migration_bytes = 0.0
        self.kinds: dict[Kind, int] = {}
        self.trigger: tuple[int, Callable[[], list[Send]]] | None = None
        """(domain, action): run the action once, when a MAIL to that domain leaves."""
        self.watch: tuple[int, str] | None = None
        """(domain, MI): note when a mail first waits in that MI's active mailbox there."""
        self.arrival: float | None = None

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
            if self.trigger and send.envelope.kind is Kind.MAIL and send.to == self.trigger[0]:
                action, self.trigger = self.trigger[1], None
                self.emit(action())
        self.look()

    def look(self) -> None:
        if self.watch is not None and self.arrival is None:
            box = self.pos[self.watch[0]].mailboxes.get(self.watch[1])
            if box is not None and box.mails:
                self.arrival = self.now

    def run(self) -> None:
        while self._heap:
            due, _, send = heapq.heappop(self._heap)
            self.now = due
            kind, size = send.envelope.kind, self.size(send)
            self.kinds[kind] = self.kinds.get(kind, 0) + 1
            if kind in PATH_KINDS:
                self.path_bytes += size
            elif kind in ACK_KINDS:
                self.ack_bytes += size
            elif kind in MIGRATION_CONTROL:
                self.migration_bytes += size
            self.emit(self.pos[send.to].receive(send.envelope, self.now))

    def reset_counts(self) -> None:
        self.path_bytes = self.ack_bytes = self.migration_bytes = 0.0
        self.kinds = {}


@dataclass(frozen=True, slots=True)
class Trip:
    """One measured communication."""

    time: float
    """From the send to the mail in the receiver's active mailbox, plus the pull."""
    traffic: float
    """KB of MAIL, FORWARD, QUERY, ANSWER and NACK, plus the pull."""
    ack_traffic: float
    """KB of acknowledgements (not in the paper's model)."""


S, R, HOME, NEW = 0, 1, 2, 3
"""The domains of :func:`one_communication`: sender, receiver, a third-domain home, and where a migrating receiver goes."""


def _place_receiver(net: TimedNetwork, sender: str, receiver: str, home: int, at: int, known: bool) -> None:
    """Create both MIs, move the receiver to ``at``, and if ``known`` let S
    learn its address (one mail, pulled), as the paper's case 2 supposes."""
    net.emit(net.pos[home].create_mi(receiver, 0.0))
    net.emit(net.pos[S].create_mi(sender, 0.0))
    if at != home:
        net.emit(net.pos[home].move(receiver, at, 0.0))
    net.run()
    if known:
        net.emit(net.pos[S].send_mail(sender, receiver, "", b"warm-up", net.now))
        net.run()
        net.pos[at].pull(receiver, net.now)


def one_communication(case: int, migrating: bool, costs: Costs = Costs(), n: int = 0, mode: Mode = "paper",
                      scheme: Scheme = "mailboxes", home: Home = "apart") -> Trip:
    """Time, traffic and ack traffic of one mail on the real post offices.

    Case 1: the receiver runs in S; case 2: S's address book knows it (S
    sent it a mail before, and is its friend); case 3: S knows nothing and
    asks the home. A migrating receiver outside S leaves its PO for NEW as
    the mail heads there; in S, it moves between hosts of S (``mode``
    "paper") or leaves for NEW as the mail is stored ("local_forwards")."""
    net = TimedNetwork(4, costs, HomeRelayPostOffice if scheme == "home_relay" else PostOffice)
    at = S if case == 1 else R
    home_domain = {"apart": HOME, "sender": S, "receiver": at}[home]
    sender, receiver = make_name("wf", S, "h", f"s{n}"), make_name("wf", home_domain, "h", f"r{n}")
    _place_receiver(net, sender, receiver, home_domain, at, known=case == 2)
    net.reset_counts()
    start = net.now

    def leave() -> list[Send]:
        return net.pos[at].move(receiver, NEW, net.now)

    leaves = migrating and (case != 1 or mode == "local_forwards")
    # In paper mode a migrating receiver in S changes host inside S: no PO
    # sees it (section 4.1, property 1), so there is nothing to run.
    if leaves and case == 1:
        net.emit(leave())  # the mailbox stays until the DEREG: the mail is stored there, then forwarded
    elif leaves:
        net.trigger = (at, leave)  # the mail meets the old PO: the forward of equation (1)'s q term
    where = NEW if leaves else at
    net.watch = (where, receiver)
    net.emit(net.pos[S].send_mail(sender, receiver, "", b"measured", start))
    net.run()
    mails, _ = net.pos[where].pull(receiver, net.now)
    if [m.content for m in mails] != [b"measured"] or net.arrival is None:
        raise AssertionError(f"case {case}, migrating {migrating}, {mode}, {scheme}, home {home}: pulled {mails}")
    pull = costs.c_ctl + costs.c_mail  # the pull request and the mail, inside the domain
    return Trip(net.arrival - start + pull / costs.ratio, net.path_bytes + pull, net.ack_bytes)


@dataclass(frozen=True, slots=True)
class Draw:
    """One communication of a workload: the paper's case, whether the
    receiver is migrating, and where its home is."""

    case: int
    migrating: bool
    home: Home


def draw_communications(rho1: float, rho2: float, q: float, trials: int, seed: int,
                        domains: int | None = None) -> list[Draw]:
    """``trials`` communications: case 1 with probability rho1, 2 with rho2,
    else 3; migrating with probability q. The home is a third domain, or
    with ``domains`` uniform among that many (so S's with probability
    1/domains, R's likewise when R is not S)."""
    check_probabilities(rho1, rho2, q)
    if domains is not None and domains < 3:
        raise ValueError(f"need at least 3 domains (sender, receiver, a third home): got {domains}")
    rng = random.Random(seed)
    draws = []
    for _ in range(trials):
        draw = rng.random()
        case = 1 if draw < rho1 else 2 if draw < rho1 + rho2 else 3
        migrating = rng.random() < q
        spot = rng.random()  # drawn whatever ``domains``, so that one seed gives one case and q sequence
        home: Home = "apart"
        if domains is not None and spot < 1 / domains:
            home = "sender"
        elif domains is not None and case != 1 and spot < 2 / domains:
            home = "receiver"
        draws.append(Draw(case, migrating, home))
    return draws


@dataclass(frozen=True, slots=True)
class Measured:
    time: float
    """Mean time per communication (send to arrival, plus the pull)."""
    traffic: float
    """Mean KB per communication on the paper's terms."""
    ack_traffic: float
    """Mean KB per communication of acknowledgements (not in the paper's model)."""
    trials: int
    time_sd: float = 0.0
    """Standard deviation of one communication's time (the mean's error is time_sd / sqrt(trials))."""
    traffic_sd: float = 0.0


def measure(draws: list[Draw], costs: Costs = Costs(), mode: Mode = "paper",
            scheme: Scheme = "mailboxes") -> Measured:
    """Run every drawn communication on fresh post offices; the means and spreads."""
    if not draws:
        raise ValueError("no communications to measure")
    trips = [one_communication(d.case, d.migrating, costs, n, mode, scheme, d.home) for n, d in enumerate(draws)]
    count = len(trips)
    time = sum(t.time for t in trips) / count
    traffic = sum(t.traffic for t in trips) / count
    time_sd = (sum((t.time - time) ** 2 for t in trips) / max(count - 1, 1)) ** 0.5
    traffic_sd = (sum((t.traffic - traffic) ** 2 for t in trips) / max(count - 1, 1)) ** 0.5
    return Measured(time, traffic, sum(t.ack_traffic for t in trips) / count, count, time_sd, traffic_sd)


def simulate(rho1: float, rho2: float, q: float, trials: int = 2000, seed: int = 1, costs: Costs = Costs(),
             mode: Mode = "paper") -> Measured:
    """Mean time and traffic per communication over ``trials`` random ones.
    With ``mode="paper"`` the means follow equations (1) and (2) (corrected);
    with ``"local_forwards"``, :func:`expected_time_with_local_forwards` and
    :func:`expected_traffic_with_local_forwards`."""
    return measure(draw_communications(rho1, rho2, q, trials, seed), costs, mode)


def compare_home_relay(rho1: float, rho2: float, q: float, trials: int = 2000, seed: int = 1,
                       domains: int | None = None, costs: Costs = Costs()) -> tuple[Measured, Measured]:
    """The paper's scheme and the home-relay baseline on the same drawn
    communications: (mailboxes, home relay)."""
    draws = draw_communications(rho1, rho2, q, trials, seed, domains)
    return measure(draws, costs, "paper", "mailboxes"), measure(draws, costs, "paper", "home_relay")


def _mover_with_friends(friends: int, costs: Costs,
                        office: type[PostOffice] = PostOffice) -> tuple[TimedNetwork, str]:
    """An MI of home 0 running in domain 1 that each of domains 3 .. 3 + friends - 1
    has mailed (so, on the paper's scheme, they are its friend domains)."""
    net = TimedNetwork(friends + 3, costs, office)
    mover = make_name("wf", 0, "h", "mover")
    net.emit(net.pos[0].create_mi(mover, 0.0))
    net.emit(net.pos[0].move(mover, 1, 0.0))
    net.run()
    for f in range(3, 3 + friends):
        friend = make_name("wf", f, "h", "friend")
        net.emit(net.pos[f].create_mi(friend, net.now))
        net.emit(net.pos[f].send_mail(friend, mover, "", b"hi", net.now))
    net.run()
    net.reset_counts()
    return net, mover


def simulate_migration(friends: int, costs: Costs = Costs(), scheme: Scheme = "mailboxes") -> dict[str, float]:
    """One move (domain 1 to 2) of an MI that has ``friends`` friend domains
    (none its home, old or new PO): the migration's control KB, ack KB and
    message counts by kind."""
    net, mover = _mover_with_friends(friends, costs, HomeRelayPostOffice if scheme == "home_relay" else PostOffice)
    net.emit(net.pos[1].move(mover, 2, net.now))
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
    """D_fri of the MI, round(xi * communications)."""
    messages: int
    """DEREG + HOME_UPDATE + UPDATE the real post offices sent, in all."""
    cost_kb: float
    """Their size in KB (C_ctl each)."""


def simulate_figure5(eta: float, xi: float, communications: int, migrations: int = 100, seed: int = 1,
                     costs: Costs = Costs()) -> MigrationRun:
    """The mailbox paper's figure 5 experiment on the real post offices: an
    MI with D_fri friend domains makes ``migrations`` migrations, each
    inter-domain with probability ``eta``; the DEREG, HOME_UPDATE and UPDATE
    messages the post offices send are counted ("the system records the
    total number of messages"). An inter-domain migration is a real move
    between domains 1 and 2, neither the home nor a friend, so D_fri stays
    fixed; an intra-domain one changes host inside the domain, which no PO
    sees (section 4.1, property 1)."""
    if not 0.0 <= eta <= 1.0 or migrations < 0:
        raise ValueError(f"need 0 <= eta <= 1, migrations >= 0: got {eta}, {migrations}")
    rng = random.Random(seed)
    friends = friend_domains_from_dispersion(xi, communications)
    net, mover = _mover_with_friends(friends, costs)
    here, inter = 1, 0
    for _ in range(migrations):
        if rng.random() < eta:
            inter += 1
            net.emit(net.pos[here].move(mover, 3 - here, net.now))
            net.run()
            here = 3 - here
    messages = sum(net.kinds.get(k, 0) for k in MIGRATION_CONTROL)
    return MigrationRun(migrations, inter, friends, messages, net.migration_bytes)
