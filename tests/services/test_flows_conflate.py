"""Live conflation for slow readers (``conflate.py``; Gryphon's region 4: an
interpretation lets the system drop superseded events). On random streams and
random reading patterns: a reader that keeps up gets every event in order;
one that falls behind gets, per key, a subsequence ending with the latest
event, and never holds more than ``max(behind, keys)`` unread; without a key
nothing is merged."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sgcs.services.flows import FlowGraph
from sgcs.services.flows.conflate import DeliveryQueue, key_of
from sgcs.services.flows.syntax import FlowError

GRAPH = FlowGraph("c")
GRAPH.history("quotes", "issue: str, price: float, volume: float")
GRAPH.state("prices", "issue: str", "last: float")
GRAPH.collapse("quotes", "prices", ["[i,p,v] -> <i: p>", "[i,p,v], <i: l> -> <i: p>"])
ISSUE = key_of(GRAPH, "quotes", "issue")

events = st.lists(st.tuples(st.sampled_from("ABCDEFG"), st.integers(0, 50).map(float), st.just(1.0)), max_size=120)


@settings(max_examples=300, deadline=None)
@given(stream=events, reads=st.lists(st.integers(0, 6), min_size=1), behind=st.integers(1, 10))
def test_a_slow_reader_gets_the_latest_per_key_with_bounded_memory(
        stream: list[tuple[str, float, float]], reads: list[int], behind: int) -> None:
    queue, got, keys = DeliveryQueue(ISSUE, behind=behind), [], set()
    for n, event in enumerate(stream):
        queue.push(event)
        keys.add(event[0])
        assert len(queue) <= max(behind, len(keys))
        for _ in range(reads[n % len(reads)] if n % 3 == 0 else 0):  # reads now and then, a few at a time
            popped = queue.pop()
            if popped is not None:
                got.append(popped)
    got += queue.drain()
    assert len(queue) == 0 and queue.pop() is None
    for issue in keys:
        sent = [e for e in stream if e[0] == issue]
        seen = [e for e in got if e[0] == issue]
        assert seen[-1] == sent[-1]  # the latest value always arrives
        it = iter(sent)
        assert all(any(e == s for s in it) for e in seen)  # in order, nothing invented
    assert len(got) + queue.conflated == len(stream)
    assert queue.high_water <= max(behind, len(keys)) and queue.dropped == 0


@settings(max_examples=100, deadline=None)
@given(stream=events, behind=st.integers(1, 10))
def test_a_reader_that_keeps_up_gets_every_event_in_order(stream: list[tuple[str, float, float]], behind: int) -> None:
    queue, got = DeliveryQueue(ISSUE, behind=behind), []
    for n, event in enumerate(stream):
        queue.push(event)
        if len(queue) == behind or n % 2:  # never more than `behind` unread
            while (popped := queue.pop()) is not None:
                got.append(popped)
    got += queue.drain()
    assert got == stream and queue.conflated == 0 and not queue.conflating


def test_once_drained_the_queue_is_a_fifo_again_and_without_a_key_drops_the_oldest() -> None:
    queue = DeliveryQueue(ISSUE, behind=2)
    for price in (1.0, 2.0, 3.0, 4.0):
        queue.push(("A", price, 1.0))
    assert queue.conflating and queue.drain() == [("A", 4.0, 1.0)] and queue.conflated == 3
    queue.push(("A", 5.0, 1.0))
    queue.push(("A", 6.0, 1.0))
    assert not queue.conflating and [queue.pop(), queue.pop()] == [("A", 5.0, 1.0), ("A", 6.0, 1.0)]
    plain = DeliveryQueue(limit=3)
    for price in range(5):
        plain.push(("A", float(price), 1.0))
    assert plain.drain() == [("A", p, 1.0) for p in (2.0, 3.0, 4.0)] and plain.dropped == 2


def test_conflation_keys_of_two_fields_and_errors() -> None:
    both = key_of(GRAPH, "quotes", ["issue", "volume"])
    assert both(("A", 1.0, 2.0)) == ("A", 2.0)
    with pytest.raises(FlowError, match="unknown"):
        key_of(GRAPH, "quotes", "nope")
    with pytest.raises(FlowError, match="not one"):
        key_of(GRAPH, "prices", "issue")
