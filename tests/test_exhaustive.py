"""The exhaustive explorer (``tests/exhaustive.py``) in CI: every interleaving
of 3 members and a joiner to a small depth, every invariant checked; and the
checker itself, which must find a violation where a node breaks one.

The bound (``CI_BOUND``, in total and in FIFO order): 3 steps, each of which
is any delivery, loss or duplicate of a datagram in flight, one node's timer,
a multicast (one per member), the join, a crash, a restart, a leave, a
partition or its heal (one fault of each kind per path), or 10 ms of calm
network; every state at the bound is then settled (faults stop, the network
heals) and checked at rest. Per order: 7,266 distinct states and 6,856
settles, 25 s in pure Python (``SGCS_PURE_PYTHON=1``, as CI runs) and 14 s
compiled, on a 2-core machine. Deeper runs are for ``benchmarks/exhaustive.py``:
depth 4 is 105,000 states (3 minutes on 2 cores), depth 5 1.6 million.
"""

from __future__ import annotations

import dataclasses
import random
from typing import Any

import pytest

from sgcs.actions import Deliver
from sgcs.config import Config, Order
from sgcs.node import Node

from exhaustive import (
    Budget,
    ExploreConfig,
    Step,
    explore,
    format_path,
    frontier,
    merge_reports,
    parse_path,
    replay,
)

CI_BOUND = ExploreConfig(depth=3, order=Order.TOTAL, calm=(0.01,), partial_views=True)
"""3 members + 1 joiner, one multicast each, every fault kind once per path,
depth 3; every view installed by each member it lists that stays up (check P)."""


@pytest.mark.parametrize("order", [Order.TOTAL, Order.FIFO], ids=lambda o: o.value)
def test_every_interleaving_to_the_ci_bound_keeps_every_invariant(order: Order) -> None:
    cfg = dataclasses.replace(CI_BOUND, order=order)
    report = explore(cfg)
    print(report.summary())
    assert report.complete
    assert report.max_depth == cfg.depth
    assert report.settled == report.per_depth[-1] > 1_000, "every state at the bound was settled and checked"
    assert report.counts == {}, report.summary()


# ---------------------------------------------------------------------- the checker finds what is there


class _Wrapped:
    """A real node behind a wrapper that breaks it on purpose (a wrapper, not a
    subclass: a compiled ``Node`` cannot be subclassed by interpreted code)."""

    def __init__(self, node_id: int, config: Config, rng: random.Random, **options: Any) -> None:
        self.inner = Node(node_id, config, rng, **options)

    def __getattr__(self, name: str) -> Any:
        if name == "inner" or name.startswith("__"):  # (unpickling asks before ``inner`` exists)
            raise AttributeError(name)
        return getattr(self.inner, name)

    def handle_datagram(self, src: int, data: bytes, now: float) -> list[Any]:
        return self.broken(self.inner.handle_datagram(src, data, now))

    def handle_timeout(self, now: float) -> list[Any]:
        return self.broken(self.inner.handle_timeout(now))

    def multicast(self, group: str, payload: bytes, now: float) -> list[Any]:
        return self.broken(self.inner.multicast(group, payload, now))

    def broken(self, actions: list[Any]) -> list[Any]:
        return actions


class DuplicatingNode(_Wrapped):
    """Hands every multicast it delivers to the application twice."""

    def broken(self, actions: list[Any]) -> list[Any]:
        out: list[Any] = []
        for action in actions:
            out += [action, action] if type(action) is Deliver else [action]
        return out


class ForgetfulNode(_Wrapped):
    """Never delivers its own multicasts to itself (and reports nothing else for them)."""

    def broken(self, actions: list[Any]) -> list[Any]:
        return [a for a in actions if not (type(a) is Deliver and a.sender == self.inner.id)]


def test_the_checker_finds_a_duplicate_delivery_and_its_path_replays_it() -> None:
    cfg = ExploreConfig(depth=1, node_factory=DuplicatingNode, order=Order.FIFO)
    report = explore(cfg)
    print(report.summary())
    assert report.counts.get("1", 0) > 0, report.summary()
    first = next(v for v in report.violations if v.invariant == "1")
    assert first.path == (Step("send", 1),), first  # FIFO: the sender delivers its own message at once
    _, found = replay(cfg, format_path(first.path))  # from the printed form, as a reader would
    assert first.message in [v.message for v in found if v.invariant == "1"]
    _, found = replay(ExploreConfig(depth=1, order=Order.FIFO), first.path)
    assert found == [], "the real node does not do it"


def test_the_checker_finds_a_multicast_without_outcome_at_rest() -> None:
    cfg = ExploreConfig(depth=1, node_factory=ForgetfulNode, order=Order.FIFO,
                        budget=Budget(losses=0, duplicates=0, crashes=0, restarts=0, leaves=0, partitions=0))
    report = explore(cfg)
    print(report.summary())
    assert report.counts.get("8", 0) > 0, report.summary()
    shortest = report.shortest()["8"]
    assert [s.kind for s in shortest.path] == ["send", "settle"], shortest
    assert "has no outcome" in shortest.message


@pytest.mark.parametrize("order", list(Order))
def test_a_member_restarted_before_its_exclusion_rejoins_after_a_transitional_view(order: Order) -> None:
    """Found at depth 5: 2 sends, crashes and restarts before anyone heard
    either self; the next view holds the new 2, which never installed the old
    view. Its members must not take 2 for a member that moved with them
    (its former self's message is delivered by nobody)."""
    world, found = replay(ExploreConfig(depth=6, order=order),
                          "send 2; join 4; crash 2; restart 2; partition 1+3+4; settle")
    assert found == [], found
    for n in (1, 3):
        log = world.logs[(n, 0)]
        old, new = log.views
        assert log.transitional == {old: (1, 3)}, log.transitional
        assert world.installed[new] == (1, 2, 3, 4)


@pytest.mark.parametrize("order", list(Order))
def test_a_member_completes_a_cut_from_a_view_mate_when_the_sender_left(order: Order) -> None:
    """1's multicast reached 3, not 2, and 1 left: the cut holds it, and 2
    fetches it from 3 (which installed the new view already) instead of
    asking only the departed 1, giving the cut up and installing a view
    alone, which left the new view installed by 3 alone (check P)."""
    _, found = replay(ExploreConfig(depth=4, order=order, partial_views=True),
                      "send 1; drop 1->2 DATA #1cd6f9b306; leave 1; settle")
    assert found == [], found


@pytest.mark.parametrize("order", [Order.TOTAL, Order.FIFO], ids=lambda o: o.value)
def test_a_joiner_bound_to_one_merge_waits_for_it_before_a_higher_one(order: Order) -> None:
    """1 restarts and merges with the joiner 4 while 2 excludes the old 1 and
    takes 4 in: 4 answered 1's proposal first, so it asks 1 to give it up (or
    installs 1's view) before it answers 2's. Taking 2's higher proposal at
    once left 1's view (1, 4) installed without 4 (check P)."""
    _, found = replay(ExploreConfig(depth=3, order=order, partial_views=True), "crash 1; restart 1; join 4; settle")
    assert found == [], found


def test_the_stage_check_fails_when_stage_and_phase_disagree(monkeypatch: pytest.MonkeyPatch) -> None:
    """Check S can fail: with a map that puts a frozen member in no stage, a view change breaks it."""
    import exhaustive
    from sgcs.membership.stages import Stage
    from sgcs.membership.synchrony import PHASES, Phase

    monkeypatch.setattr(exhaustive, "PHASES", {**PHASES, Stage.ANSWERED: frozenset({Phase.STABLE})})
    _, found = replay(ExploreConfig(depth=2, order=Order.TOTAL), "crash 3; settle")
    assert any(v.invariant == "S" for v in found), found


def test_fingerprints_merge_only_states_that_look_the_same() -> None:
    """Successors merged with a state already seen are executed too and must
    show what it shows (views, deliveries, statistics, timers, datagrams)."""
    cfg = ExploreConfig(depth=2, calm=(0.01,), verify_merges=True, settle="none")
    report = explore(cfg)
    assert report.transitions > report.distinct - 1, "some successors merged"
    assert report.counts == {}, report.summary()


def test_paths_print_and_parse_back() -> None:
    cfg = ExploreConfig(depth=2, calm=(0.01,), settle="none")
    (prefix,) = [p for p in frontier(cfg, 1) if p[0].kind == "send" and p[0].node == 1]
    world, _ = replay(cfg, prefix)
    deliver = next(step for step, _ in world.successors() if step.kind == "deliver")
    path = (*prefix, deliver, Step("partition", side=(1, 3)), Step("calm", amount=0.01), Step("settle"))
    parsed = parse_path(format_path(path))
    assert [str(s) for s in parsed] == [str(s) for s in path]
    assert deliver.datagram is not None and parsed[1].datagram is not None
    assert deliver.datagram.startswith(parsed[1].datagram)  # a prefix of the id names the datagram
    _, found = replay(cfg, parsed)
    assert found == []


def test_a_split_run_covers_what_one_run_covers() -> None:
    cfg = ExploreConfig(depth=2, settle="none")
    whole = explore(cfg)
    shares = frontier(cfg, 1)
    merged = merge_reports(cfg, [explore(cfg, prefixes=shares[i::2]) for i in range(2)])
    assert merged.per_depth[2] >= whole.per_depth[2]
    assert merged.counts == whole.counts == {}
