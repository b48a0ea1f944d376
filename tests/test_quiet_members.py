"""A member that never multicasts, among members that multicast every round,
is never suspected while the network is healthy.

A multicast tells every receiver that its sender lives, so a member that
multicast within the last gossip interval sends no heartbeat of its own; but it
still passes on other members' news (counters that rose in its table) for
ceil(log2 N) rounds, one per hypercube dimension. Driven here on the real
``FailureDetector`` objects (``tests/_fd_rounds.py``, the round harness of
``benchmarks/claims.py``, with the deployed ``suspect_factor`` of 1, the
shortest timeout), by hand on one detector, and on whole nodes in the
simulator."""

from __future__ import annotations

import math
import random
from pathlib import Path

import numpy as np
import pytest

from _fd_rounds import run_fd
from sgcs.membership.detector import FailureDetector, FdSend
from sgcs.transport.params import Params
from sgcs.wire import MsgType, decode_heartbeat_untrusted, decode_roster_heartbeat_untrusted, \
    encode_roster_heartbeat

GOSSIP = 0.1


@pytest.mark.parametrize("model", ["lockstep", "random"])
@pytest.mark.parametrize("n", [16, 64])
def test_a_quiet_member_among_busy_ones_is_never_suspected(n: int, model: str) -> None:
    r = run_fd(n, 150, model=model, factor=1.0, spread=False, multicasters=frozenset(range(1, n)))
    assert r.observed > 10.0
    assert r.quiet_suspicions == 0, f"node 0 suspected {r.quiet_suspicions} times by its {n - 1} observers"
    assert r.events.get("suspect", 0) == 0


def test_half_quiet_half_busy_with_loss_suspected_no_more_than_without_traffic() -> None:
    """With 1% loss a quiet member's news can age past a timeout of ceil(log2 N)
    rounds now and then, as in a group without any traffic; half the members
    multicasting must not make that more frequent (it made it 70 times more)."""
    n = 64
    quiet = frozenset(random.Random(n).sample(range(n), n // 2))
    mixed = [run_fd(n, 200, model="random", factor=1.0, loss=0.01, spread=False, seed=seed,
                    multicasters=frozenset(range(n)) - quiet) for seed in (1, 2)]
    silent = [run_fd(n, 200, model="random", factor=1.0, loss=0.01, spread=False, seed=seed) for seed in (1, 2)]
    assert sum(r.events.get("failed", 0) for r in mixed) == 0
    assert sum(r.quiet_suspicions for r in mixed) <= sum(r.suspects_steady for r in silent)


def test_when_every_member_multicasts_nobody_sends_heartbeats() -> None:
    n = 32
    r = run_fd(n, 150, model="random", factor=1.0, spread=False, multicasters=frozenset(range(n)))
    assert r.events.get("suspect", 0) == 0
    # the first rounds (before the first multicasts) are news, relayed for ceil(log2 N) rounds
    sent = sum(k * v for k, v in r.sends_hist.items())
    assert sent <= n * (2 * math.ceil(math.log2(n)) + 2), f"{sent} heartbeats in {n * 150} rounds"


# ---------------------------------------------------------------------- one detector by hand

ROSTER = Params(gossip_interval=GOSSIP, suspect_factor=1.0)


def _detector(n: int) -> FailureDetector:
    d = FailureDetector(0, ROSTER, random.Random(0), 0.0)
    d.set_members(range(n), 0.0)
    return d


def _round(d: FailureDetector, *, multicast: bool) -> list[FdSend]:
    """Fire the next gossip round, after a multicast just before it or not."""
    at = d.next_round
    if multicast:
        d.note_multicast(at - GOSSIP / 2)
    return [o for o in d.on_timeout(at) if isinstance(o, FdSend) and o.msg_type is MsgType.HEARTBEAT_ROSTER]


def test_under_a_multicast_only_the_news_is_relayed_then_nothing() -> None:
    n = 8
    d = _detector(n)
    _round(d, multicast=False)
    own_before = int(d.counters[0])
    tag = d._roster_tag
    news = np.zeros(n, dtype=np.uint16)
    news[5] = 7  # member 5's counter rose: news to pass on
    d.on_roster_heartbeat(1, tag, 0, news, d.next_round - 0.01)
    relayed = []
    for _ in range(math.ceil(math.log2(n))):
        (sent,) = _round(d, multicast=True)
        _, start, counters = decode_roster_heartbeat_untrusted(sent.body)
        relayed.append((start, counters.tolist()))
    assert relayed == [(5, [7])] * 3, "member 5's counter alone, along each of the 3 dimensions"
    assert _round(d, multicast=True) == [], "news passed on along every dimension: nothing more to send"
    assert int(d.counters[0]) == own_before, "under a multicast our own counter is not raised"
    assert d.statistics().heartbeats_skipped == 1
    (full,) = _round(d, multicast=False)
    _, start, counters = decode_roster_heartbeat_untrusted(full.body)
    assert (start, len(counters), int(counters[0])) == (0, n, own_before + 1), "no multicast: the whole table"


def test_the_pairs_form_relays_only_the_news_too() -> None:
    d = FailureDetector(0, Params(gossip_interval=GOSSIP, heartbeat="pairs"), random.Random(0), 0.0)
    d.set_members(range(8), 0.0)
    d.on_heartbeat(1, np.array([4, 5, 6]), np.array([0, 3, 0]), d.next_round - 0.01)
    d.note_multicast(d.next_round - GOSSIP / 2)
    (sent,) = [o for o in d.on_timeout(d.next_round) if isinstance(o, FdSend)]
    members, counters = decode_heartbeat_untrusted(sent.body)
    assert (sent.msg_type, members.tolist(), counters.tolist()) == (MsgType.HEARTBEAT, [5], [3])


def test_a_partial_roster_heartbeat_merges_by_position() -> None:
    d = _detector(8)
    d.on_roster_heartbeat(1, d._roster_tag, 5, np.array([3, 4], dtype=np.uint16), 0.01)
    assert d.counters.tolist() == [0, 0, 0, 0, 0, 3, 4, 0]
    assert encode_roster_heartbeat(d._roster_tag, 5, d.counters[5:7])[4:8] == (5).to_bytes(4, "big")


# ---------------------------------------------------------------------- whole nodes


def test_quiet_members_in_the_simulator_are_not_suspected(tmp_path: Path) -> None:
    from benchmarks.claims_sim import busy_half_sim

    result = busy_half_sim(tmp_path / "run", nodes=48, duration=6.0, loss=0.0)
    assert result["sends"] > 48 // 2 * 6 * 5, "the busy half multicast about once a round"
    assert result["suspects_of_quiet"] == 0
    assert result["suspects"] == 0
    assert result["live_exclusions"] == 0
