"""What a mailbox run did: the ledger of mails and messages, its checks, and the summary.

Theory of operation
-------------------
The ``Ledger`` is fed by the mailbox driver (``sgcs.sim.mailboxes``) at
four points: a mail accepted by its sender's post office (``sent``, with the
path the protocol took for it: ``local`` when the receiver's active mailbox is
in the sender's domain, ``known`` when the PO holds an address for it, else
``unknown``: the home is asked), an envelope handed to the network
(``envelope``), a pull that returned mails (``pulled``), and a move. From
these alone it checks the mailbox service's guarantee: every mail delivered exactly
once and, per (sender, receiver), in sequence order. A mail not delivered at
the end is *held* if some post office's durable records still hold it (it
would be delivered if the run went on) and *lost* otherwise.

Messages are counted where they leave a post office, as encoded envelopes:
every PO-to-PO message crosses domains (one PO per domain), so these are
the inter-domain messages and bytes of the mail layer. Below them, the sgcs
datagrams the PO nodes put on the simulated network (``packets``) include
sgcs's own headers, acknowledgements, heartbeats and views. The hosts are
folded into their PO (as in ``service.py``), so intra-domain traffic (a
sender handing in a mail, an MI pulling) is counted, not simulated.

The cost model (``sgcs.services.mailboxes.costmodel``) is evaluated at the
run's measured rho1 (share of ``local`` mails), rho2 (share of ``known``) and
q, as the paper defines it: among the mails whose receiver was outside the
sender's domain, the share that took a forward hop from an old post office
(in a FORWARD batch or from a tombstone). Local mails never enter q's terms
of equations (1) and (2); a local mail forwarded because its receiver moved
away is counted apart (``forwarded_local``), and set beside the run's traffic in the
model's units (C_mail per mail carried between domains, C_ctl per QUERY,
ANSWER and NACK, plus C_ctl + C_mail for the pull); acknowledgements, which
the paper's reliable network does not need, are listed apart. The migration
cost C_mgt = (D_fri + 2) C_ctl is set beside the first transmissions of
DEREG, HOME_UPDATE and UPDATE per move, with D_fri read from each FORWARD
(friend domains other than the new PO and the home, whose update is the
HOME_UPDATE), plus the friends the new PO learnt while the move was under way
(a mail that reached it before the FORWARD, sent on by the old PO's
tombstone, names a sender's domain that still has the old address: the new
PO updates it too, so it is a friend of the move); a move back to the home needs no HOME_UPDATE, so the measured
figure is below the model by the share of such moves.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from sgcs.services.mailboxes.costmodel import Costs, expected_time, expected_traffic, migration_cost
from sgcs.services.mailboxes.messages import Envelope, Kind, Mail, home_of

MailKey = tuple[str, str, int]
"""(receiver, sender, seq): the end-to-end mail id."""
PATHS = ("local", "known", "unknown")
MAIL_KINDS = (Kind.MAIL, Kind.MAIL_ACK, Kind.NACK, Kind.QUERY, Kind.ANSWER)
MOVE_KINDS = (Kind.MIGRATE, Kind.DEREG, Kind.FORWARD, Kind.FORWARD_ACK, Kind.UPDATE, Kind.UPDATE_ACK,
              Kind.HOME_UPDATE, Kind.HOME_ACK)
MIGRATION_CONTROL = (Kind.DEREG, Kind.HOME_UPDATE, Kind.UPDATE)


@dataclass
class SentMail:
    t_sent: float
    path: str
    moving: bool
    """The receiver was moving (between ``move`` and its new mailbox complete) when it was sent."""
    t_delivered: float = math.nan
    deliveries: int = 0


@dataclass
class Ledger:
    """Counters and per-mail records of one mailbox run."""

    mails: dict[MailKey, SentMail] = field(default_factory=dict)
    messages: Counter[str] = field(default_factory=Counter)
    """Envelopes sent, by kind."""
    bytes: Counter[str] = field(default_factory=Counter)
    mail_items: int = 0
    """Mails carried by MAIL envelopes, retries and tombstone forwards included."""
    forward_items: int = 0
    """Mails carried by FORWARD batches, retries included."""
    late_items: int = 0
    """Mails a tombstone sent on in a MAIL (its PO is not the sender's), retries included."""
    forwarded: set[MailKey] = field(default_factory=set)
    """Mails that took a forward hop (FORWARD batch or tombstone) at least once."""
    control_first: set[tuple[str, str, int, int]] = field(default_factory=set)
    """(kind, MI, epoch, to) of migration control messages: their first transmissions."""
    friends_at_forward: dict[tuple[str, int], set[int]] = field(default_factory=dict)
    """(MI, epoch) -> the friend domains of the move: as the FORWARD batch carried
    them (the new PO and the home excluded), and any the new PO sent an UPDATE to."""
    moves_home: set[tuple[str, int]] = field(default_factory=set)
    """(MI, epoch) of moves back to the home domain: the new PO is the home, no HOME_UPDATE."""
    moves: int = 0
    refused: int = 0
    """Mails a full outbox refused (WouldBlock); not sent, not counted."""
    fallback: int = 0
    """Mails whose aimed receiver class (local/unknown/known) was empty: drawn uniformly."""
    unroutable: int = 0
    """Payloads the node would not unicast (peer not in the view, or window full): the PO retries."""
    garbage: int = 0
    payloads_duplicated: int = 0
    payloads_delayed: int = 0
    pulls: int = 0
    pulled_bytes: int = 0
    duplicates: int = 0
    out_of_order: int = 0
    next_seq: dict[tuple[str, str], int] = field(default_factory=dict)
    crashes: int = 0
    restarts: int = 0
    packets: Counter[str] = field(default_factory=Counter)
    packet_bytes: Counter[str] = field(default_factory=Counter)
    generation_ended: float | None = None

    def sent(self, key: MailKey, t: float, path: str, moving: bool) -> None:
        self.mails[key] = SentMail(t, path, moving)

    def envelope(self, to: int, envelope: Envelope, size: int) -> None:
        kind, body = envelope.kind, envelope.body
        self.messages[kind.value] += 1
        self.bytes[kind.value] += size
        if kind is Kind.MAIL:
            self.mail_items += len(body)
            for item in body:
                if item[5] != envelope.source:  # not the sender's PO: a tombstone's forward
                    self.late_items += 1
                    self.forwarded.add((item[1], item[0], item[2]))
        elif kind is Kind.FORWARD:
            self.forward_items += len(body[2])
            self.forwarded.update((m[1], m[0], m[2]) for m in body[2])
            # the home's own update is the HOME_UPDATE, and the new PO needs none
            home = home_of(body[0])
            self.friends_at_forward.setdefault((body[0], body[1]), set(body[3]) - {to, home})
            if to == home:
                self.moves_home.add((body[0], body[1]))
        elif kind is Kind.UPDATE and (body[0], body[2]) in self.friends_at_forward:
            self.friends_at_forward[(body[0], body[2])].add(to)  # a friend learnt during the move
        if kind in MIGRATION_CONTROL:
            self.control_first.add((kind.value, body[0], body[-1], to))

    def pulled(self, mails: Iterable[Mail], t: float) -> None:
        self.pulls += 1
        for mail in mails:
            self.pulled_bytes += len(json.dumps(mail.to_json(), separators=(",", ":")))
            record = self.mails.get(mail.key)
            if record is None:
                raise RuntimeError(f"pulled a mail nobody sent: {mail.key}")
            record.deliveries += 1
            if record.deliveries > 1:
                self.duplicates += 1
                continue
            record.t_delivered = t
            pair = (mail.sender, mail.receiver)
            if mail.seq != self.next_seq.get(pair, 0):
                self.out_of_order += 1
            self.next_seq[pair] = max(self.next_seq.get(pair, 0), mail.seq + 1)

    def packet(self, label: str, size: int) -> None:
        self.packets[label] += 1
        self.packet_bytes[label] += size


def summarise(ledger: Ledger, held: set[MailKey], costs: Costs = Costs()) -> dict[str, Any]:
    """The run's figures as JSON (see the module docstring)."""
    n = len(ledger.mails)
    delivered = [m for m in ledger.mails.values() if m.deliveries]
    undelivered = [k for k, m in ledger.mails.items() if not m.deliveries]
    lost = [k for k in undelivered if k not in held]
    per = _per(n)
    paths = Counter(m.path for m in ledger.mails.values())
    rho1, rho2 = paths["local"] / n if n else 0.0, paths["known"] / n if n else 0.0
    remote = n - paths["local"]
    forwarded_local = sum(1 for k in ledger.forwarded if k in ledger.mails and ledger.mails[k].path == "local")
    q = (len(ledger.forwarded) - forwarded_local) / remote if remote else 0.0
    q_moving = sum(m.moving for m in ledger.mails.values()) / n if n else 0.0
    msgs, byts = ledger.messages, ledger.bytes
    query_like = sum(msgs[k.value] for k in (Kind.QUERY, Kind.ANSWER, Kind.NACK))
    inter_model = costs.c_mail * (ledger.mail_items + ledger.forward_items) + costs.c_ctl * query_like
    pull = costs.c_ctl + costs.c_mail
    ack_model = costs.c_ctl * sum(msgs[k.value] for k in (Kind.MAIL_ACK, Kind.FORWARD_ACK, Kind.UPDATE_ACK,
                                                          Kind.HOME_ACK))
    control = Counter(k for k, *_ in ledger.control_first)
    friends = [len(domains) for domains in ledger.friends_at_forward.values()]
    mean_friends = sum(friends) / len(friends) if friends else 0.0
    model_per_move = sum(migration_cost(f, costs) for f in friends) / len(friends) / costs.c_ctl if friends else 2.0
    latencies = sorted(m.t_delivered - m.t_sent for m in delivered)
    return {
        "mails": {
            "sent": n, "delivered": len(delivered), "lost": len(lost), "held_undelivered": len(undelivered) - len(lost),
            "duplicated": ledger.duplicates, "out_of_order": ledger.out_of_order, "refused_outbox_full": ledger.refused,
            "paths": {p: paths[p] for p in PATHS}, "aimed_class_empty": ledger.fallback,
            "forwarded": len(ledger.forwarded), "forward_hops": ledger.forward_items + ledger.late_items,
            "sent_while_receiver_moving": int(q_moving * n + 0.5),
            "latency_s": _quantiles(latencies),
            "lost_examples": [list(k) for k in lost[:5]],
        },
        "moves": ledger.moves,
        "post_office_crashes": ledger.crashes, "post_office_restarts": ledger.restarts,
        "generation_ended_at": ledger.generation_ended,
        "inter_domain": {
            "messages": sum(msgs.values()), "bytes": sum(byts.values()),
            "messages_per_mail": per(sum(msgs[k.value] for k in MAIL_KINDS)),
            "bytes_per_mail": per(sum(byts[k.value] for k in MAIL_KINDS)),
            "messages_per_move": _per(ledger.moves)(sum(msgs[k.value] for k in MOVE_KINDS)),
            "bytes_per_move": _per(ledger.moves)(sum(byts[k.value] for k in MOVE_KINDS)),
            "mail_transmissions_per_mail": per(ledger.mail_items),
            "by_kind": {k: {"messages": msgs[k], "bytes": byts[k]} for k in sorted(msgs)},
            "unroutable_payloads": ledger.unroutable, "garbage": ledger.garbage,
            "payloads_duplicated_below_mail": ledger.payloads_duplicated,
            "payloads_delayed_below_mail": ledger.payloads_delayed,
        },
        "intra_domain": {
            "stored_without_a_message": paths["local"], "pulls": ledger.pulls, "mails_pulled": len(delivered)
            + ledger.duplicates, "bytes_pulled": ledger.pulled_bytes,
            "note": "hosts are folded into their post office: counted, not simulated",
        },
        "sgcs_packets": {
            "datagrams": sum(ledger.packets.values()), "bytes": sum(ledger.packet_bytes.values()),
            "datagrams_per_mail": per(sum(ledger.packets.values())), "bytes_per_mail": per(sum(ledger.packet_bytes.values())),
            "by_type": {k: {"datagrams": ledger.packets[k], "bytes": ledger.packet_bytes[k]} for k in sorted(ledger.packets)},
        },
        "cost_model": {
            "units": "KB with C_ctl = 1, C_mail = 4; time in KB / inter-domain bandwidth, intra 10x faster",
            "rho1": rho1, "rho2": rho2, "q": q, "q_receiver_moving": q_moving, "forwarded_local": forwarded_local,
            "traffic_per_mail": {"measured": per(inter_model) + pull, "eq2": expected_traffic(rho1, rho2, q, costs)},
            "time_per_mail": {"from_counts": per(inter_model) + pull / costs.ratio,
                              "eq1": expected_time(rho1, rho2, q, costs)},
            "acks_per_mail_kb": per(ack_model),
            "migration_control_per_move": {
                "measured": _per(ledger.moves)(sum(control.values())),
                "dereg": _per(ledger.moves)(control[Kind.DEREG.value]),
                "home_update": _per(ledger.moves)(control[Kind.HOME_UPDATE.value]),
                "update": _per(ledger.moves)(control[Kind.UPDATE.value]),
                "mean_friend_domains": mean_friends,
                "moves_to_home": len(ledger.moves_home),
                "model": model_per_move,
            },
        },
    }


def format_summary(s: dict[str, Any]) -> str:
    m, inter, cm, pk = s["mails"], s["inter_domain"], s["cost_model"], s["sgcs_packets"]
    mig = cm["migration_control_per_move"]
    lat = m["latency_s"]
    return "\n".join((
        f"mailboxes: {m['sent']:,} mails sent, {m['delivered']:,} delivered, {m['lost']:,} lost, "
        f"{m['held_undelivered']:,} held undelivered, {m['duplicated']:,} duplicated, "
        f"{m['out_of_order']:,} out of order; {s['moves']:,} moves; "
        f"{s['post_office_crashes']} post office crashes, {s['post_office_restarts']} restarts",
        f"mailboxes: paths local {m['paths']['local']:,} / known {m['paths']['known']:,} / "
        f"unknown {m['paths']['unknown']:,}; {m['forwarded']:,} forwarded; latency p50 {lat['p50']:.4f} s, "
        f"p99 {lat['p99']:.4f} s",
        f"mailboxes: inter-domain {inter['messages']:,} messages, {inter['bytes']:,} bytes: "
        f"{inter['messages_per_mail']:.3f} messages and {inter['bytes_per_mail']:.0f} bytes per mail, "
        f"{inter['messages_per_move']:.2f} messages and {inter['bytes_per_move']:.0f} bytes per move; "
        f"sgcs below: {pk['datagrams_per_mail']:.2f} datagrams, {pk['bytes_per_mail']:.0f} bytes per mail",
        f"mailboxes: cost model at rho1={cm['rho1']:.3f} rho2={cm['rho2']:.3f} q={cm['q']:.3f}: "
        f"traffic {cm['traffic_per_mail']['measured']:.3f} KB measured vs {cm['traffic_per_mail']['eq2']:.3f} eq.(2); "
        f"time {cm['time_per_mail']['from_counts']:.3f} vs {cm['time_per_mail']['eq1']:.3f} eq.(1); "
        f"acks {cm['acks_per_mail_kb']:.3f} KB; migration control {mig['measured']:.2f} C_ctl per move vs "
        f"(D_fri+2) = {mig['model']:.2f}",
    ))


def write_mail_rows(directory: Path, ledger: Ledger) -> None:
    """One Parquet row per mail sent (a table of its own: the events schema is untouched)."""
    from sgcs.trace import pyarrow_modules

    pa, pq = pyarrow_modules()
    keys = list(ledger.mails)
    records = list(ledger.mails.values())
    table = pa.table({
        "receiver": pa.array([k[0] for k in keys], pa.string()),
        "sender": pa.array([k[1] for k in keys], pa.string()),
        "seq": pa.array([k[2] for k in keys], pa.int64()),
        "t_sent": pa.array([r.t_sent for r in records], pa.float64()),
        "t_delivered": pa.array([None if math.isnan(r.t_delivered) else r.t_delivered for r in records],
                                pa.float64()),
        "deliveries": pa.array([r.deliveries for r in records], pa.int32()),
        "path": pa.array([r.path for r in records], pa.string()),
        "receiver_moving": pa.array([r.moving for r in records], pa.bool_()),
        "forwarded": pa.array([k in ledger.forwarded for k in keys], pa.bool_()),
    })
    directory.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, directory / "part-00000.parquet")


def _per(count: int) -> Any:
    return lambda total: total / count if count else 0.0


def _quantiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {"mean": 0.0, "p50": 0.0, "p99": 0.0, "max": 0.0}
    pick = lambda p: values[min(len(values) - 1, int(p * len(values)))]  # noqa: E731
    return {"mean": sum(values) / len(values), "p50": pick(0.5), "p99": pick(0.99), "max": values[-1]}
