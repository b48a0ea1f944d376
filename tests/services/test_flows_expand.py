"""Catch-up by expansion (issue 19, build item 4): the paper's worked example,
the uniform unconstrained replacement form (exactly ceil(m/k) events), and
property tests: for random small (s0, g), collapsing the expansion onto s0
gives g, and its length is BFS's shortest."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sgcs.services.flows.collapse import Collapse, State
from sgcs.services.flows.expand import Expander
from sgcs.services.flows.schema import EventSchema, StateSchema
from sgcs.services.flows.syntax import FlowError

TRADES = EventSchema.of("issue: str, price: float, volume: float")
PRICES = StateSchema.of("issue: str", "maxPrice: float, curPrice: float")
MAX_CUR = Collapse(TRADES, PRICES, ["[n,p,v] -> <n: p, p>",
                                    "[n,p,v], <n: maxP, curP>, p > maxP -> <n: p, p>",
                                    "[n,p,v], <n: maxP, curP>, p <= maxP -> <n: maxP, p>"])


def test_the_papers_example_160_140_to_200_120() -> None:
    expansion = Expander(MAX_CUR).expand({("IBM",): (160.0, 140.0)}, {("IBM",): (200.0, 120.0)})
    assert [event[:2] for event in expansion.events] == [("IBM", 200.0), ("IBM", 120.0)]
    assert expansion.method == "astar" and expansion.keys == 1


def test_a_new_key_and_an_unchanged_key() -> None:
    s0 = {("IBM",): (160.0, 140.0), ("HP",): (5.0, 5.0)}
    goal = {("IBM",): (160.0, 150.0), ("HP",): (5.0, 5.0), ("SUN",): (9.0, 3.0)}
    expansion = Expander(MAX_CUR).expand(s0, goal)
    assert [e[:2] for e in expansion.events] == [("IBM", 150.0), ("SUN", 9.0), ("SUN", 3.0)]


def test_rows_never_vanish() -> None:
    with pytest.raises(FlowError, match="vanished"):
        Expander(MAX_CUR).expand({("IBM",): (1.0, 1.0)}, {})


def uniform(width: int, k: int) -> Collapse:
    """Every k-subset of ``width`` components replaceable by one event, no guard
    on the state: the paper's uniform unconstrained replacement form."""
    names = [f"c{j}" for j in range(width)]
    history = EventSchema.of("key: str, slot: int, " + ", ".join(f"x{i}: int" for i in range(k)))
    state = StateSchema.of("key: str", ", ".join(f"{n}: int" for n in names))
    rules = [f"[n, s, {', '.join(f'x{i}' for i in range(k))}] -> <n: {', '.join('0' for _ in names)}>"]
    for slot, subset in enumerate(itertools.combinations(range(width), k)):
        outputs = [f"x{subset.index(j)}" if j in subset else names[j] for j in range(width)]
        rules.append(f"[n, s, {', '.join(f'x{i}' for i in range(k))}], <n: {', '.join(names)}>, s = {slot}"
                     f" -> <n: {', '.join(outputs)}>")
    return Collapse(history, state, rules)


@pytest.mark.parametrize("width, k", [(4, 2), (5, 2), (5, 3), (3, 1)])
def test_uniform_unconstrained_form_takes_ceil_m_over_k(width: int, k: int) -> None:
    expander = Expander(uniform(width, k))
    assert all(len(entry) == k for entry in expander.table)
    start = tuple(0 for _ in range(width))
    for m in range(width + 1):
        goal = tuple(j + 1 if j < m else 0 for j in range(width))
        expansion = expander.expand({("k",): start}, {("k",): goal})
        assert len(expansion.events) == math.ceil(m / k) == expansion.estimate
        state = State(expander.collapse, {("k",): start})
        state.apply_all(expansion.events)
        assert state.rows[("k",)] == goal


def test_without_a_table_bfs_finds_the_shortest_and_replay_is_the_last_resort() -> None:
    history = EventSchema.of("issue: str, price: int")
    counts = StateSchema.of("issue: str", "total: int")
    summing = Collapse(history, counts, ["[i, p] -> <upper(i): p>", "[i, p], <n: t> -> <upper(i): t + p>"])
    expander = Expander(summing)
    assert not expander.has_table  # the key is computed: no regression
    found, method, _, _ = expander.expand_key(("IBM",), (3,), (5,), None)
    assert method == "bfs" and len(found) == 1 and found[0][1] == 2  # one event of +2 (a candidate: 3 - 1)
    backlog = [("ibm", 40), ("ibm", 60)]
    expansion = expander.expand({("IBM",): (3,)}, {("IBM",): (103,)}, backlog)
    assert expansion.method == "replay" and list(expansion.events) == backlog


@st.composite
def changes(draw: st.DrawFn) -> tuple[tuple[float, float] | None, list[float]]:
    row0 = draw(st.none() | st.tuples(st.integers(0, 6), st.integers(0, 6)).map(lambda t: (float(max(t)), float(t[1]))))
    return row0, draw(st.lists(st.integers(0, 9).map(float), max_size=6))


@settings(max_examples=150, deadline=None)
@given(change=changes())
def test_expansion_collapses_to_the_goal_in_bfs_shortest_length(
        change: tuple[tuple[float, float] | None, list[float]]) -> None:
    row0, prices = change
    state = State(MAX_CUR, {} if row0 is None else {("IBM",): row0})
    state.apply_all(("IBM", p, 0.0) for p in prices)
    goal = state.rows.get(("IBM",))
    if goal is None:
        return  # nothing happened to a missing row: nothing to expand
    expander = Expander(MAX_CUR)
    expansion = expander.expand({} if row0 is None else {("IBM",): row0}, {("IBM",): goal})
    replay = State(MAX_CUR, {} if row0 is None else {("IBM",): row0})
    replay.apply_all(expansion.events)
    assert replay.rows[("IBM",)] == goal
    shortest = expander.bfs_key(("IBM",), row0, goal)
    assert shortest is not None and len(expansion.events) == len(shortest) <= len(prices)
    assert len(expansion.events) <= 2 and expansion.method == "astar"


@settings(max_examples=60, deadline=None)
@given(width=st.integers(2, 4), k=st.integers(1, 2), data=st.data())
def test_uniform_form_random_goals_match_bfs(width: int, k: int, data: st.DataObject) -> None:
    expander = Expander(uniform(width, min(k, width)))
    start = tuple(data.draw(st.lists(st.integers(0, 2), min_size=width, max_size=width)))
    goal = tuple(data.draw(st.lists(st.integers(0, 2), min_size=width, max_size=width)))
    expansion = expander.expand({("k",): start}, {("k",): goal})
    m = sum(a != b for a, b in zip(start, goal))
    assert len(expansion.events) == math.ceil(m / min(k, width))
    shortest = expander.bfs_key(("k",), start, goal)
    assert shortest is not None and len(shortest) == len(expansion.events)
