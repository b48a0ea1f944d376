"""The failure detector's ring form (``Config.heartbeat = "ring"``): who
watches whom, what a heartbeat carries, that news keeps coming through loss,
that a crash is found by every watcher and by no one else, and how verdicts
are told and taken. Pure state machines, wired by hand or by a small lossy
network; seeded runs print their replay."""

from __future__ import annotations

import dataclasses
import heapq
import math
import random

import pytest

from sgcs.membership.agreement import CtlSend, ViewAgreement
from sgcs.membership.detector import FailureDetector, FdEvent, FdSend, Verdict, ring_hops, ring_width
from sgcs.membership.messages import Ask, AskReply, Obituary, Probe, ProbeAck, Propose, decode_untrusted
from sgcs.transport.params import Params
from sgcs.wire import MsgType, decode_heartbeat_untrusted

GOSSIP = 0.1
RING = Params(gossip_interval=GOSSIP, suspect_factor=1.0, probe_count=2, probe_interval=0.2, ask_count=3,
              ask_timeout=0.4, heartbeat="ring")


def detector(me: int, members: range, now: float = 0.0, params: Params = RING) -> FailureDetector:
    d = FailureDetector(me, params, random.Random(me), now)
    d.set_members(set(members), now)
    return d


def heartbeats(outputs: list) -> list[FdSend]:
    return [o for o in outputs if isinstance(o, FdSend) and o.msg_type is MsgType.HEARTBEAT]


def verdicts(outputs: list) -> list[tuple[Verdict, int, bool]]:
    return [(o.kind, o.member, o.told) for o in outputs if isinstance(o, FdEvent)]


@pytest.mark.parametrize("n, width, hops", [(2, 1, (1,)), (3, 2, (1, 2)), (5, 3, (1, 2)), (16, 4, (1, 2, 4)),
                                            (1_000, 10, (1, 2, 4, 8)), (10_000, 14, (1, 2, 4, 8))])
def test_width_and_hops(n: int, width: int, hops: tuple[int, ...]) -> None:
    assert ring_width(n) == width
    assert ring_hops(width) == hops


@pytest.mark.parametrize("me", [0, 7, 19])
def test_a_heartbeat_goes_to_a_successor_and_carries_our_neighbourhood(me: int) -> None:
    n, members = 20, range(100, 120)  # ids are not positions
    d = detector(100 + me, members)
    k = ring_width(n)
    neighbourhood = {100 + (me - j) % n for j in range(k + 1)}
    targets = []
    for r in range(8):
        d._next_round = r * GOSSIP
        (sent,) = heartbeats(d.on_timeout(r * GOSSIP))
        carried, _ = decode_heartbeat_untrusted(sent.body)
        assert set(carried.tolist()) == neighbourhood
        assert len(sent.body) == 4 + 10 * (k + 1), "O(log N) bytes, not O(N)"
        targets.append(sent.dst)
    hops = ring_hops(k)
    assert targets == [100 + (me + hops[r % len(hops)]) % n for r in range(8)]


def test_an_application_multicast_does_not_replace_the_ring_heartbeat() -> None:
    d = detector(0, range(8))
    d.note_multicast(0.0)
    d._next_round = 0.01
    assert len(heartbeats(d.on_timeout(0.01))) == 1, "it relays the neighbourhood's counters too"


def test_only_the_members_before_us_are_suspected() -> None:
    n = 32
    d = detector(10, range(n))
    late = d.suspect_timeout() + 1.0
    d._next_round = late
    suspected = {member for kind, member, _ in verdicts(d.on_timeout(late)) if kind is Verdict.SUSPECT}
    assert suspected == {10 - k for k in range(1, ring_width(n) + 1)}


def test_a_member_watched_from_a_view_change_on_gets_one_suspect_timeout_of_grace() -> None:
    d = detector(10, range(32))
    late = d.suspect_timeout() * 3
    for member in range(32):
        if member != 4:
            d.heard(member, late)  # 4, watched from the next view on, was last heard at the start
    d.set_members(set(range(32)) - {9}, late)  # our predecessor left: 10 now watches 4 .. 8, not 5 .. 9
    assert d._watched_ids() == [4, 5, 6, 7, 8]
    for now in (late + 0.01, late + d.suspect_timeout() + 0.01):
        for member in set(range(32)) - {4, 9}:
            d.heard(member, now)
        d._next_round = now
        assert not verdicts(d.on_timeout(now)), f"no suspicion within the grace, at {now}"
    now = late + 2 * d.suspect_timeout() + 0.01
    d._next_round = now
    assert (Verdict.SUSPECT, 4, False) in verdicts(d.on_timeout(now)), "one timeout after the grace"


def test_the_ask_stage_asks_the_suspects_other_watchers_nearest_first() -> None:
    d = detector(12, range(32))  # 12 watches 7 .. 11
    assert d._neighbours(10) == [11, 13, 14]
    d.suspects[11] = None  # type: ignore[assignment]  # another suspect is not asked
    assert d._neighbours(10) == [13, 14, 15]


# ---------------------------------------------------------------------- told verdicts


def test_a_told_verdict_is_taken_when_we_have_not_heard_from_the_member() -> None:
    d = detector(0, range(32))
    late = d.suspect_timeout() + 0.5
    assert verdicts(d.on_obituary(20, 9, late)) == [(Verdict.FAILED, 9, True)]
    assert 9 in d.failed
    assert d.on_obituary(21, 9, late) == [], "taken once"
    assert d.statistics().told == 1


def test_a_told_verdict_about_a_member_still_heard_is_refused() -> None:
    d = detector(0, range(32))
    late = d.suspect_timeout() + 0.5
    d.heard(9, late - 0.2)
    assert d.on_obituary(20, 9, late) == []
    assert 9 not in d.failed


@pytest.mark.parametrize("src, member", [(99, 9), (20, 0), (20, 99)])
def test_a_told_verdict_from_a_stranger_about_us_or_about_a_stranger_is_ignored(src: int, member: int) -> None:
    d = detector(0, range(32))
    assert d.on_obituary(src, member, d.suspect_timeout() + 0.5) == []


def confirm_failed(d: FailureDetector, member: int, start: float) -> float:
    """Run ``d`` until its own three stages declare ``member`` failed (every
    other member heard throughout); returns when."""
    now = start
    while now < start + 60:
        now = d.next_deadline()  # type: ignore[assignment]
        for other in d.ids.tolist():
            if other not in (d.me, member):
                d.heard(other, now)
        for output in d.on_timeout(now):
            if isinstance(output, FdSend) and output.msg_type is MsgType.ASK:
                d.on_ask_reply(output.dst, AskReply(member, 10**6), now)
            if isinstance(output, FdEvent) and output.kind is Verdict.FAILED:
                return now
        if member in d.failed:
            return now
    raise AssertionError("never declared failed")


def test_our_own_verdict_is_told_again_each_suspect_timeout_until_the_view_drops_it() -> None:
    d = detector(12, range(32))
    failed_at = confirm_failed(d, 11, 0.0)
    told_again = []
    now = failed_at
    while now < failed_at + 3 * d.suspect_timeout() + GOSSIP:
        now = d.next_deadline()  # type: ignore[assignment]
        for other in d.ids.tolist():
            if other not in (d.me, 11):
                d.heard(other, now)
        told_again += [now for kind, member, told in verdicts(d.on_timeout(now))
                       if (kind, member, told) == (Verdict.FAILED, 11, False)]
    assert len(told_again) == 3
    assert all(b - a == pytest.approx(d.suspect_timeout(), abs=GOSSIP) for a, b in zip(told_again, told_again[1:]))
    d.set_members(set(range(32)) - {11}, now)  # the view without it
    d._next_round = now + d.suspect_timeout() * 2
    assert not [v for v in verdicts(d.on_timeout(now + d.suspect_timeout() * 2)) if v[1] == 11]


def test_a_verdict_refuted_by_the_member_itself_is_not_told_again() -> None:
    d = detector(12, range(32))
    failed_at = confirm_failed(d, 11, 0.0)
    d.heard(11, failed_at + 0.1)
    assert 11 not in d.failed and not d._retell


# ---------------------------------------------------------------------- a lossy network of detectors


class Ring:
    """N ring detectors joined by a network that loses ``loss`` of the
    datagrams and delays each by 0.5 to 5 ms; a crashed member sends and
    answers nothing."""

    def __init__(self, n: int, loss: float, seed: int, params: Params = RING) -> None:
        self.rng = random.Random(seed)
        self.loss = loss
        start = {m: self.rng.random() * GOSSIP for m in range(n)}
        self.nodes = {m: detector(m, range(n), start[m], params) for m in range(n)}
        self.crashed: set[int] = set()
        self.queue: list[tuple[float, int, int, int, FdSend]] = []
        self.seq = 0
        self.log: list[tuple[float, int, Verdict, int, bool]] = []

    def deliver(self, now: float, src: int, send: FdSend) -> None:
        if self.rng.random() < self.loss:
            return
        self.seq += 1
        heapq.heappush(self.queue, (now + self.rng.uniform(0.0005, 0.005), self.seq, src, send.dst, send))

    def handle(self, now: float, member: int, outputs: list) -> None:
        for output in outputs:
            if isinstance(output, FdSend):
                self.deliver(now, member, output)
            else:
                self.log.append((now, member, output.kind, output.member, output.told))

    def receive(self, now: float, src: int, dst: int, send: FdSend) -> None:
        d = self.nodes[dst]
        outputs = d.heard(src, now)
        if send.msg_type is MsgType.HEARTBEAT:
            members, counters = decode_heartbeat_untrusted(send.body)
            outputs += d.on_heartbeat(src, members, counters, now)
        else:
            msg = decode_untrusted(send.msg_type, send.body)
            if isinstance(msg, Probe):
                outputs += d.on_probe(src, msg)
            elif isinstance(msg, Ask):
                outputs += d.on_ask(src, msg, now)
            elif isinstance(msg, AskReply):
                outputs += d.on_ask_reply(src, msg, now)
            elif isinstance(msg, Obituary):
                outputs += d.on_obituary(src, msg.member, now)
            else:
                assert isinstance(msg, ProbeAck)
        self.handle(now, dst, outputs)

    def run(self, until: float) -> None:
        while True:
            live = [(d.next_deadline(), m) for m, d in self.nodes.items() if m not in self.crashed]
            timer, member = min((t, m) for t, m in live if t is not None)
            if self.queue and self.queue[0][0] <= timer:
                now, _, src, dst, send = heapq.heappop(self.queue)
                if now > until:
                    return
                if dst not in self.crashed:
                    self.receive(now, src, dst, send)
            else:
                if timer > until:
                    return
                self.handle(timer, member, self.nodes[member].on_timeout(timer))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_through_five_percent_loss_no_live_member_is_declared_failed_and_a_crash_is_found_by_its_watchers(
        seed: int) -> None:
    n = 48
    replay = f"pytest 'tests/test_detector_ring.py::test_through_five_percent_loss_no_live_member_is_declared_" \
             f"failed_and_a_crash_is_found_by_its_watchers[{seed}]'"
    ring, whole = Ring(n, 0.05, seed), Ring(n, 0.05, seed, dataclasses.replace(RING, heartbeat="pairs"))
    ring.run(20.0)
    whole.run(20.0)
    failed = [entry for entry in ring.log if entry[2] is Verdict.FAILED]
    assert failed == [], f"live members declared failed: {failed[:5]}; replay: {replay}"
    suspicions = [sum(1 for entry in run.log if entry[2] is Verdict.SUSPECT) for run in (ring, whole)]
    assert suspicions[0] <= suspicions[1], f"false suspicions, ring against whole table: {suspicions}; " \
                                           f"replay: {replay}"
    victim = 30
    ring.crashed.add(victim)
    whole.crashed.add(victim)
    end = 20.0 + ring.nodes[0].suspect_timeout() + 3.0
    ring.run(end)
    whole.run(end)
    found, found_whole = first_verdicts(ring, victim), first_verdicts(whole, victim)
    watchers = {(victim + k) % n for k in range(1, ring_width(n) + 1)}
    assert set(found) == watchers, f"declared by {sorted(found)}, watchers {sorted(watchers)}; replay: {replay}"
    assert len(found_whole) == n - 1, f"replay: {replay}"
    assert max(found.values()) <= max(found_whole.values()), \
        f"detection, ring {found} against whole table {sorted(found_whole.values())}; replay: {replay}"
    others = [entry for entry in ring.log if entry[2] is Verdict.FAILED and entry[3] != victim]
    assert others == [], f"replay: {replay}"


def first_verdicts(ring: Ring, victim: int) -> dict[int, float]:
    """When each member first declared ``victim`` failed by its own three stages."""
    found: dict[int, float] = {}
    for t, member, kind, about, told in ring.log:
        if kind is Verdict.FAILED and about == victim and not told:
            found.setdefault(member, t)
    return found


def test_a_ring_of_two_watches_each_other() -> None:
    ring = Ring(2, 0.0, 7)
    ring.run(5.0)
    assert not ring.log
    ring.crashed.add(1)
    ring.run(5.0 + ring.nodes[0].suspect_timeout() + 1.0)
    assert (Verdict.FAILED, 1) in {(kind, about) for _, member, kind, about, _ in ring.log if member == 0}


def test_params_flag_follows_the_config_choice() -> None:
    assert RING.ring_heartbeats and not RING.roster_heartbeats
    assert not dataclasses.replace(RING, heartbeat="roster").ring_heartbeats
    assert math.isclose(RING.suspect_timeout(16), 4 * GOSSIP), "the whole-table detector's timeout"


# ---------------------------------------------------------------------- taking charge (partitions)


def test_a_member_whose_verdict_stands_takes_charge_and_proposes_what_it_wants() -> None:
    view = ViewAgreement(7, range(14), RING, 0.0, 3, epoch=4)
    assert view.take_charge(1.0) == [], "no verdict of ours: nothing to do"
    for member in (2, 3, 4, 6):
        assert view.member_failed(member, 1.0) == [], "0 coordinates: we only record the verdicts"
    (proposal,) = [o for o in view.take_charge(2.0) if isinstance(o, CtlSend)]
    msg = decode_untrusted(proposal.msg_type, proposal.body)
    assert isinstance(msg, Propose) and proposal.dst is None
    assert msg.members == (0, 1, 5, 7, 8, 9, 10, 11, 12, 13), "0 and 1, which nobody here watches, " \
                                                               "are left out when they do not answer"
    assert msg.epoch == 5 and msg.coordinator == 7
    assert view.take_charge(2.5) == [], "one change at a time"


def test_a_member_already_in_a_change_does_not_take_charge() -> None:
    view = ViewAgreement(9, range(14), RING, 0.0, 3, epoch=4)
    view.member_failed(6, 1.0)
    view.on_propose(8, Propose(3, 5, 1, 8, tuple(m for m in range(14) if m != 6)), (0, {}), 1.1)
    assert view.take_charge(2.0) == []
