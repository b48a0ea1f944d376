"""The paper's structural failure-detection claims, on our own detector
(tests/_fd_rounds.py, the harness of benchmarks/claims.py, drives the real
FailureDetector objects in lockstep rounds): with hypercube targets every
member sends and receives exactly one heartbeat gossip per round, and with no
loss a counter value reaches every member in exactly ceil(log2 N) rounds, so
the news of any member is never older than ceil(log2 N) rounds. Small N only,
simulated time only."""

from __future__ import annotations

import pytest

from _fd_rounds import GOSSIP, LATENCY, dimensions, run_fd


@pytest.fixture(scope="module", params=[8, 13, 64])
def lockstep(request):
    n = request.param
    return run_fd(n, 3 * dimensions(n) + 5, model="lockstep")


def test_each_member_sends_one_heartbeat_gossip_per_round(lockstep) -> None:
    assert set(lockstep.sends_hist) == {1}
    assert set(lockstep.datagrams_hist) == {1}
    assert sum(lockstep.sends_hist.values()) == lockstep.n * lockstep.rounds


def test_each_member_receives_one_heartbeat_gossip_per_round(lockstep) -> None:
    assert set(lockstep.recv_hist) == {1}, "hypercube targets of one round are a permutation, N a power of 2 or not"
    assert sum(lockstep.recv_hist.values()) == lockstep.n * (lockstep.rounds - 1)


def test_a_heartbeat_reaches_everyone_in_ceil_log2_n_rounds(lockstep) -> None:
    assert lockstep.spread, "some counter values were followed"
    assert set(lockstep.spread) == {dimensions(lockstep.n)}
    assert lockstep.spread_unfinished == 0
    assert sum(lockstep.spread.values()) >= lockstep.n


def test_news_is_never_older_than_ceil_log2_n_rounds(lockstep) -> None:
    worst = dimensions(lockstep.n) * GOSSIP
    assert lockstep.worst_age == pytest.approx(worst - LATENCY)
    assert lockstep.events == {}, "no suspicion without loss at suspect_factor 1 in lockstep rounds"

