"""Unit tests of the gossip failure detector (``sgcs.membership.detector``;
hypercube targets, counter merge, suspicion, pull, ask), driven by hand
message by message. The view agreement's are in test_agreement.py."""

from __future__ import annotations

import dataclasses
import math
import random

import numpy as np
import pytest

from sgcs.membership.detector import FailureDetector, FdEvent, FdSend
from sgcs.membership.messages import Ask, AskReply, decode_untrusted
from sgcs.transport.params import Params
from sgcs.wire import MsgType, decode_heartbeat_untrusted, decode_roster_heartbeat_untrusted

GOSSIP = 0.1
PARAMS = Params(gossip_interval=GOSSIP, suspect_factor=1.5, probe_count=3, probe_interval=0.2, ask_count=3,
                ask_timeout=0.4, heartbeat="pairs")
"""The pairs form, which the helpers below read; the roster form has tests of its own."""


# ---------------------------------------------------------------------- detector helpers


def detector(me: int, members: range | set[int], params: Params = PARAMS, now: float = 0.0) -> FailureDetector:
    d = FailureDetector(me, params, random.Random(me), now)
    d.set_members(set(members), now)
    return d


def sends(outputs: list, msg_type: MsgType) -> list[FdSend]:
    return [o for o in outputs if isinstance(o, FdSend) and o.msg_type is msg_type]


def events(outputs: list) -> list[tuple[str, int]]:
    return [(o.kind, o.member) for o in outputs if isinstance(o, FdEvent)]


def run_until(d: FailureDetector, end: float, on_output=None) -> list[tuple[float, object]]:
    """Fire every detector deadline up to ``end``; returns (time, output) pairs."""
    seen: list[tuple[float, object]] = []
    while (deadline := d.next_deadline()) is not None and deadline <= end:
        for output in d.on_timeout(deadline):
            seen.append((deadline, output))
            if on_output is not None:
                on_output(deadline, output)
    return seen


def counters_sent(d: FailureDetector, now: float) -> dict[int, int]:
    """The table our next heartbeat carries (member -> counter mod 2**16)."""
    d._last_multicast = -math.inf  # a heartbeat goes out this round
    d._next_round = now
    (heartbeat,) = sends(d.on_timeout(now), MsgType.HEARTBEAT)
    members, counters = decode_heartbeat_untrusted(heartbeat.body)
    return dict(zip(members.tolist(), counters.tolist()))


def heartbeat(d: FailureDetector, src: int, table: dict[int, int], now: float) -> list:
    members = np.array(sorted(table), dtype=np.int64)
    counters = np.array([table[m] for m in sorted(table)], dtype=np.int64)
    return d.on_heartbeat(src, members, counters, now)


def keep_others_alive(d: FailureDetector, member: int | None, now: float) -> None:
    """Every member but ``member`` is heard from (it alone goes silent)."""
    for other in d.ids.tolist():
        if other not in (d.me, member):
            d.heard(other, now)


def suspect_now(d: FailureDetector, member: int) -> tuple[float, list]:
    """Run the clock until ``member`` (the only silent member) is suspected;
    returns when, and the outputs of that step (the pull stage's first probe
    goes out at once)."""
    while (deadline := d.next_deadline()) is not None and deadline <= 100.0:
        keep_others_alive(d, member, deadline)
        out = d.on_timeout(deadline)
        if ("suspect", member) in events(out):
            return deadline, out
    raise AssertionError(f"{member} never suspected")


# ---------------------------------------------------------------------- hypercube targets


@pytest.mark.parametrize("me", range(8))
def test_hypercube_targets_cross_one_dimension_per_round(me: int) -> None:
    d = detector(me, range(8))
    targets = [s.dst for _, s in run_until(d, 0.41) if isinstance(s, FdSend) and s.msg_type is MsgType.HEARTBEAT]
    assert targets[:3] == [(me + 1) % 8, (me + 2) % 8, (me + 4) % 8]
    assert targets[3] == (me + 1) % 8, "round 4 starts the cycle again"


def test_hypercube_targets_index_the_sorted_member_list() -> None:
    ids = [3, 10, 11, 20, 42, 57, 58, 99]
    d = detector(20, set(ids))
    targets = [s.dst for _, s in run_until(d, 0.41) if isinstance(s, FdSend)]
    assert targets[:3] == [ids[4], ids[5], ids[7]]  # index 3 + 1, + 2, + 4


def test_no_separate_heartbeat_in_a_round_after_an_application_multicast() -> None:
    d = detector(0, range(4))
    first = d.next_deadline()
    d.note_multicast(first - 0.01)
    assert not sends(d.on_timeout(first), MsgType.HEARTBEAT)
    assert d.statistics().heartbeats_skipped == 1
    assert sends(d.on_timeout(d.next_deadline()), MsgType.HEARTBEAT)


# ---------------------------------------------------------------------- counter merge


def test_merge_is_element_wise_maximum() -> None:
    d = detector(0, range(4))
    heartbeat(d, 1, {1: 5, 2: 9, 3: 2}, 0.01)
    heartbeat(d, 2, {1: 3, 2: 12, 3: 1}, 0.02)  # 1 and 3 are older than ours, 2 is newer
    table = counters_sent(d, 0.05)
    assert {m: table[m] for m in (1, 2, 3)} == {1: 5, 2: 12, 3: 2}


def test_merge_ignores_unknown_members_and_our_own_entry() -> None:
    d = detector(0, range(3))
    before = counters_sent(d, 0.0)[0]
    heartbeat(d, 1, {0: 500, 1: 4, 77: 9}, 0.01)
    table = counters_sent(d, 0.1)
    assert 77 not in table
    assert table[0] == before + 1, "only our own rounds raise our counter"
    assert table[1] == 4


def test_a_roster_heartbeat_merges_by_position_between_equal_member_lists() -> None:
    roster_params = dataclasses.replace(PARAMS, heartbeat="roster")
    a, b = detector(1, range(5), roster_params), detector(3, range(5), roster_params)
    for member, count in ((0, 7), (2, 4), (4, 9)):
        heartbeat(a, member, {member: count}, 0.01)
    a._last_multicast, a._next_round = -math.inf, 0.05
    (sent,) = sends(a.on_timeout(0.05), MsgType.HEARTBEAT_ROSTER)
    assert len(sent.body) == 12 + 2 * 5, "2 bytes a member"
    b.on_roster_heartbeat(1, *decode_roster_heartbeat_untrusted(sent.body), 0.06)
    table = dict(zip(b.ids.tolist(), b.counters.tolist()))
    assert {m: table[m] for m in (0, 1, 2, 4)} == {0: 7, 1: a.counters[1], 2: 4, 4: 9}
    assert table[3] == b.counters[3] == 0, "only we raise our own counter"


def test_a_roster_heartbeat_of_another_member_list_is_only_its_senders_evidence() -> None:
    roster_params = dataclasses.replace(PARAMS, heartbeat="roster")
    a, b = detector(1, range(5), roster_params), detector(3, range(6), roster_params)  # b already has 5
    heartbeat(a, 0, {0: 7}, 0.01)
    a._last_multicast, a._next_round = -math.inf, 0.05
    (sent,) = sends(a.on_timeout(0.05), MsgType.HEARTBEAT_ROSTER)
    b.on_roster_heartbeat(1, *decode_roster_heartbeat_untrusted(sent.body), 0.06)
    assert b.counters.tolist() == [0] * 6, "positions of another list are not ours to merge"
    assert b.statistics().mismatched == 1 and b.heard_from(1) == 0.06


def test_counter_merge_wraps_around_modulo_2_16() -> None:
    d = detector(0, range(3))
    heartbeat(d, 1, {1: 0x7FFF}, 0.01)
    heartbeat(d, 1, {1: 0xFFFE}, 0.02)
    heartbeat(d, 1, {1: 0x0001}, 0.03)  # three steps past 0xFFFE: newer despite the smaller number
    assert counters_sent(d, 0.04)[1] == 0x0001
    assert d.heard_from(1) == 0.03, "the wrapped counter rose: evidence"
    heartbeat(d, 2, {1: 0xFFFF}, 0.05)  # older than 0x0001 by two: ignored
    assert counters_sent(d, 0.06)[1] == 0x0001
    heartbeat(d, 2, {1: 0x0001 + 0x8000}, 0.07)  # half the ring ahead counts as older: ignored
    assert counters_sent(d, 0.08)[1] == 0x0001


def test_times_survive_the_epoch_moving_forward_after_twelve_days() -> None:
    """Times are int32 ms since an epoch that moves forward before they run
    out: news keeps its age across the move, and an ancient time is clamped,
    not wrapped into the future."""
    d = detector(0, range(3))
    for day in (13, 26):  # 2**31 ms is under 25 days: int32 would overflow without the moves
        later = day * 86400.0
        heartbeat(d, 1, {1: day}, later - 0.25)
        d._next_round = later
        d.on_timeout(later)
        assert d.heard_from(1) == later - 0.25, "1 kept its age across the move"
        assert set(d.suspects) == {2}, "2, long silent, is suspected, not made fresh by a wrapped clock"
    assert d._epoch > 13 * 86400.0


def test_a_raised_counter_is_evidence_a_stale_one_is_not() -> None:
    d = detector(0, range(3))
    heartbeat(d, 1, {2: 7}, 1.0)
    assert d.heard_from(2) == 1.0
    heartbeat(d, 1, {2: 7}, 2.0)
    assert d.heard_from(2) == 1.0, "an unchanged counter says nothing new about member 2"


# ---------------------------------------------------------------------- suspicion


@pytest.mark.parametrize("factor", [1.0, 1.5, 3.0])
@pytest.mark.parametrize(("n", "rounds"), [(1, 3), (2, 3), (3, 3), (4, 3), (5, 3), (8, 3), (9, 4), (1000, 10)])
def test_suspect_timeout_formula(n: int, rounds: int, factor: float) -> None:
    params = Params(gossip_interval=0.05, suspect_factor=factor)
    d = detector(0, range(n), params)
    assert d.suspect_timeout() == pytest.approx(factor * rounds * 0.05)
    assert rounds == max(3, math.ceil(math.log2(max(2, n))))  # the paper's log2 N rounds, at least 3


@pytest.mark.parametrize("n", [2, 3, 8])
def test_suspicion_only_after_suspect_timeout(n: int) -> None:
    d = detector(0, range(n))
    timeout = d.suspect_timeout()
    while d.next_deadline() <= 1.0:  # everyone alive until 1.0, past the newcomers' grace
        deadline = d.next_deadline()
        keep_others_alive(d, None, deadline)
        assert not events(d.on_timeout(deadline))
    keep_others_alive(d, None, 1.0)  # the last evidence of member 1
    t, _ = suspect_now(d, 1)
    assert 1.0 + timeout < t <= 1.0 + timeout + GOSSIP + 1e-9, "suspected at the first round past the timeout"
    assert 1 in d.suspects


def test_newcomers_get_one_suspect_timeout_of_grace() -> None:
    d = detector(0, {0, 1}, now=0.0)
    run_until(d, 5.0)  # 1 was failed long ago: the detector watches 0 and 2 from now on
    d.set_members({2}, 5.0)
    timeout = d.suspect_timeout()
    t, _ = suspect_now(d, 2)
    assert 5.0 + 2 * timeout < t <= 5.0 + 2 * timeout + GOSSIP + 1e-9, "its heartbeat needs log2 N rounds to arrive"


def test_a_member_kept_alive_by_heartbeats_is_never_suspected() -> None:
    d = detector(0, range(3))
    suspected: set[int] = set()
    t = 0.0
    while t < 3.0:
        t = round(t + 0.05, 10)
        heartbeat(d, 1, {1: int(t * 100)}, t)  # member 1 keeps raising its counter
        for _, output in run_until(d, t):
            if isinstance(output, FdEvent) and output.kind == "suspect":
                suspected.add(output.member)
    assert suspected == {2}


@pytest.mark.parametrize("evidence", ["heard", "probe_ack", "heartbeat_via_other"])
def test_any_evidence_cancels_suspicion(evidence: str) -> None:
    d = detector(0, range(4))
    t, out = suspect_now(d, 2)
    (probe,) = sends(out, MsgType.PROBE)  # the pull stage starts at once
    assert probe.dst == 2
    if evidence == "heard":  # any authenticated datagram from the suspect
        out = d.heard(2, t + 0.05)
    elif evidence == "probe_ack":  # the answer is a datagram from it: the node calls heard()
        out = d.heard(2, t + 0.05)
        assert d.on_probe(0, decode_untrusted(MsgType.PROBE, probe.body)) == [
            FdSend(0, MsgType.PROBE_ACK, probe.body)], "a probe is answered with its nonce"
    else:  # a neighbour's heartbeat carrying a raised counter of the suspect
        out = heartbeat(d, 3, {2: 50}, t + 0.05)
    assert ("unsuspect", 2) in events(out)
    assert 2 not in d.suspects
    assert d.statistics().refuted >= 1
    quiet_until = t + 0.05 + d.suspect_timeout() - 0.01  # before 2 could be suspected afresh
    later = [o for _, o in run_until(d, quiet_until) if isinstance(o, FdSend) and o.msg_type is MsgType.PROBE
             and o.dst == 2]
    assert not later, "no more probes after the suspicion ended"


# ---------------------------------------------------------------------- pull and ask stages


def to_ask_stage(d: FailureDetector, member: int) -> tuple[float, list[FdSend], float]:
    """Suspect ``member`` and let the pull stage run out; returns (suspect time,
    the ASKs, when the ask stage began)."""
    t, out = suspect_now(d, member)
    probes = len([o for o in sends(out, MsgType.PROBE) if o.dst == member])
    while True:
        deadline = d.next_deadline()
        keep_others_alive(d, member, deadline)
        out = d.on_timeout(deadline)
        probes += len([o for o in sends(out, MsgType.PROBE) if o.dst == member])
        asks = sends(out, MsgType.ASK)
        if asks:
            assert probes == PARAMS.probe_count
            return t, asks, deadline
        assert member in d.suspects


def test_pull_sends_probe_count_probes_probe_interval_apart() -> None:
    d = detector(0, range(8))
    t, out = suspect_now(d, 5)
    probe_times = [t for o in sends(out, MsgType.PROBE) if o.dst == 5]
    while len(probe_times) < PARAMS.probe_count:
        deadline = d.next_deadline()
        keep_others_alive(d, 5, deadline)
        probe_times += [deadline for o in sends(d.on_timeout(deadline), MsgType.PROBE) if o.dst == 5]
    assert probe_times[0] == pytest.approx(t)
    assert np.diff(probe_times) == pytest.approx([PARAMS.probe_interval] * (PARAMS.probe_count - 1))


def test_ask_stage_asks_the_suspects_hypercube_neighbours() -> None:
    d = detector(0, range(8), Params(gossip_interval=GOSSIP, suspect_factor=50.0))
    out = d.on_unreachable(5, 1.0)  # only 5 is suspected: every neighbour qualifies
    asks = sends(out, MsgType.ASK)
    assert sorted(a.dst for a in asks) == [1, 6, 7]  # 5 + 1, 5 + 2, 5 + 4 (mod 8)
    ask = decode_untrusted(MsgType.ASK, asks[0].body)
    assert ask == Ask(5, d.suspects[5].nonce)


def test_ask_skips_ourselves_and_other_suspects() -> None:
    d = detector(4, range(8), Params(gossip_interval=GOSSIP, suspect_factor=50.0))
    d.on_unreachable(6, 1.0)  # 6 is a suspect in the ask stage
    asks = sends(d.on_unreachable(3, 1.0), MsgType.ASK)  # 3's neighbours: 4 (us), 5, 7
    assert sorted(a.dst for a in asks) == [5, 7]


def test_neighbour_that_heard_recently_makes_the_suspect_busy() -> None:
    d = detector(0, range(8))
    _, asks, began = to_ask_stage(d, 5)
    assert asks
    out = d.on_ask_reply(asks[0].dst, AskReply(5, int(d.suspect_timeout() * 1000) - 50), began + 0.1)
    assert events(out) == [("busy", 5)]
    assert 5 not in d.suspects and 5 not in d.failed
    assert d.statistics().busy == 1
    # busy restarts the suspicion clock: no new suspicion within a suspect timeout
    assert not [o for _, o in run_until(d, began + 0.1 + d.suspect_timeout() - 0.01)
                if isinstance(o, FdEvent) and o.member == 5]


def test_neighbour_that_heard_long_ago_does_not_save_the_suspect() -> None:
    d = detector(0, range(8))
    _, asks, began = to_ask_stage(d, 5)
    assert len(asks) == 3
    stale = AskReply(5, int(d.suspect_timeout() * 1000) + 1)
    assert d.on_ask_reply(asks[0].dst, stale, began + 0.1) == []
    assert d.on_ask_reply(asks[1].dst, AskReply(2, 0), began + 0.1) == [], "a reply about a non-suspect is ignored"
    assert 5 in d.suspects, "one neighbour of three answered"


def test_failed_at_once_when_every_neighbour_asked_has_not_heard() -> None:
    d = detector(0, range(8))
    _, asks, began = to_ask_stage(d, 5)
    stale = AskReply(5, int(d.suspect_timeout() * 1000) + 1)
    for ask in asks[:-1]:
        assert d.on_ask_reply(ask.dst, stale, began + 0.1) == []
    assert d.on_ask_reply(asks[0].dst, stale, began + 0.1) == [], "a repeated answer is not a new one"
    assert events(d.on_ask_reply(asks[-1].dst, stale, began + 0.1)) == [("failed", 5)], "no wait for ask_timeout"


def test_no_replies_mean_failed_after_ask_timeout() -> None:
    d = detector(0, range(8))
    _, _, began = to_ask_stage(d, 5)
    assert not [o for o in d.on_timeout(began + PARAMS.ask_timeout - 0.01) if isinstance(o, FdEvent)]
    assert events(d.on_timeout(began + PARAMS.ask_timeout)) == [("failed", 5)]
    assert 5 in d.failed and 5 not in d.suspects
    assert d.statistics().failures == 1


def test_a_failed_member_heard_again_is_cleared() -> None:
    """A verdict only a coordinator acts on must not outlive evidence of life:
    a member that keeps it would exclude a live member the day it coordinates,
    and a group with such verdicts never settles (adversarial machine, seed
    2952616851)."""
    d = detector(0, range(8))
    _, _, began = to_ask_stage(d, 5)
    d.on_timeout(began + PARAMS.ask_timeout)
    assert 5 in d.failed
    assert events(d.heard(5, began + PARAMS.ask_timeout + 0.1)) == [("unsuspect", 5)]
    assert 5 not in d.failed
    assert d.heard(5, began + PARAMS.ask_timeout + 0.2) == [], "said once"


def test_group_of_two_skips_the_ask_stage() -> None:
    d = detector(0, {0, 1})
    t, _ = suspect_now(d, 1)
    seen = run_until(d, t + 5.0)
    assert not [o for _, o in seen if isinstance(o, FdSend) and o.msg_type is MsgType.ASK]
    failed = [when for when, o in seen if isinstance(o, FdEvent) and o.kind == "failed"]
    assert failed == [pytest.approx(t + PARAMS.probe_count * PARAMS.probe_interval)]


def test_on_ask_reports_the_age_of_our_last_evidence() -> None:
    d = detector(0, range(4))
    d.heard(2, 1.0)
    (reply,) = d.on_ask(3, Ask(2, 77), 1.25)
    assert reply.dst == 3 and reply.msg_type is MsgType.ASK_REPLY
    assert decode_untrusted(MsgType.ASK_REPLY, reply.body) == AskReply(2, 250)
    (unknown,) = d.on_ask(3, Ask(99, 0), 1.25)
    assert decode_untrusted(MsgType.ASK_REPLY, unknown.body) == AskReply(99, 2**62)


def test_unreachable_goes_straight_to_the_ask_stage() -> None:
    d = detector(0, range(8))
    out = d.on_unreachable(5, 0.05)
    assert ("suspect", 5) in events(out)
    assert not sends(out, MsgType.PROBE), "the refusal answered the pull stage"
    assert sends(out, MsgType.ASK)
    assert d.suspects[5].stage == "ask"
    assert events(d.on_timeout(0.05 + PARAMS.ask_timeout)) == [("failed", 5)]


def test_unreachable_needs_evidence_newer_than_the_refusal() -> None:
    d = detector(0, range(8))
    refused_at = 1.0
    d.on_unreachable(5, refused_at)
    # heard 0.2 s ago, i.e. 0.1 s BEFORE the refusal: well within the suspect
    # timeout (0.45 s), but the host has since said nobody listens there
    assert d.on_ask_reply(6, AskReply(5, 200), refused_at + 0.1) == []
    assert 5 in d.suspects
    # heard 0.05 s ago, after the refusal: a new incarnation answers there
    assert events(d.on_ask_reply(7, AskReply(5, 50), refused_at + 0.1)) == [("busy", 5)]


def test_unreachable_ignores_ourselves_strangers_and_the_failed() -> None:
    d = detector(0, {0, 1})
    assert d.on_unreachable(0, 1.0) == []
    assert d.on_unreachable(42, 1.0) == []
    assert events(d.on_unreachable(1, 1.0)) == [("suspect", 1), ("failed", 1)]  # no neighbour to ask
    assert d.on_unreachable(1, 2.0) == []


def test_set_members_keeps_state_of_stayers_and_forgets_leavers() -> None:
    d = detector(0, range(4))
    heartbeat(d, 1, {1: 9}, 0.5)
    d.on_unreachable(3, 0.6)
    d.set_members({1, 2}, 0.7)
    assert 3 not in d.suspects
    assert counters_sent(d, 0.8)[1] == 9


def test_readmit_watches_a_failed_member_afresh() -> None:
    d = detector(0, range(2))
    run_until(d, 5.0)
    assert 1 in d.failed
    d.readmit(1, 5.0)
    assert 1 not in d.failed
    assert events([o for _, o in run_until(d, 5.0 + d.suspect_timeout() * 0.9)]) == [], "a newcomer's grace"
    assert ("suspect", 1) in events([o for _, o in run_until(d, 20.0)]), "silent: suspected again"
    assert 1 in d.failed

