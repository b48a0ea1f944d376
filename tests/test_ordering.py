"""The ordering layer as a pure state machine: random executions of 3 to 5
members whose messages carry the ACKs of what their sender had received, with
FIFO links per sender and null messages (promises) that may overtake them.
Checks total order agreement, causal order, and that everything is delivered
once the network drains."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sgcs.config import Order
from sgcs.ordering.total import OrderedMessage, OrderingLayer


class Member:
    def __init__(self, me: int, members: tuple[int, ...], order: Order) -> None:
        self.me = me
        self.layer = OrderingLayer(me, members, order)
        self.next_seq = 1
        self.received: dict[int, int] = {}
        self.dirty: dict[int, int] = {}
        self.delivered: list[tuple[int, int]] = []

    def send(self) -> OrderedMessage:
        message = OrderedMessage(self.me, self.next_seq, self.next_seq, tuple(sorted(self.dirty.items())), b"")
        self.next_seq += 1
        self.dirty.clear()
        self._deliver(self.layer.on_message(message))
        return message

    def receive(self, message: OrderedMessage) -> None:
        self.received[message.sender] = message.last
        self.dirty[message.sender] = message.last
        self._deliver(self.layer.on_message(message))

    def null(self) -> tuple[tuple[int, int], ...]:
        return ((self.me, self.next_seq - 1), *sorted(self.received.items()))

    def on_null(self, member: int, acks: tuple[tuple[int, int], ...]) -> None:
        self.layer.on_acks(member, acks)
        self._deliver(self.layer.deliverable())

    def _deliver(self, messages: list[OrderedMessage]) -> None:
        self.delivered += [(m.sender, m.first) for m in messages]


def run(order: Order, count: int, steps: list[tuple[int, int, int]],
        sent: dict[tuple[int, int], OrderedMessage] | None = None) -> dict[int, Member]:
    ids = tuple(range(1, count + 1))
    members = {i: Member(i, ids, order) for i in ids}
    links: dict[tuple[int, int], list[OrderedMessage]] = {(a, b): [] for a in ids for b in ids if a != b}
    nulls: list[tuple[int, int, tuple]] = []
    sent = {} if sent is None else sent
    for action, a, b in steps:
        a, b = ids[a % count], ids[b % count]
        if action == 0:
            message = members[a].send()
            sent[(a, message.first)] = message
            for other in ids:
                if other != a:
                    links[(a, other)].append(message)
        elif action == 1 and a != b and links[(a, b)]:
            members[b].receive(links[(a, b)].pop(0))  # FIFO per sender
        elif action == 2:
            nulls += [(a, other, members[a].null()) for other in ids if other != a]
        elif action == 3 and nulls:
            src, dst, acks = nulls.pop(b % len(nulls))  # nulls overtake anything
            members[dst].on_null(src, acks)
    for _ in range(3):  # drain: deliver everything, then every member promises
        for (a, b), queue in links.items():
            while queue:
                members[b].receive(queue.pop(0))
        for src, dst, acks in nulls:
            members[dst].on_null(src, acks)
        nulls = [(a, o, members[a].null()) for a in ids for o in ids if o != a]
    for src, dst, acks in nulls:
        members[dst].on_null(src, acks)
    members_sent = set(sent)
    for member in members.values():
        assert set(member.delivered) == members_sent, f"member {member.me} did not deliver everything"
    return members


STEPS = st.lists(st.tuples(st.integers(0, 3), st.integers(0, 9), st.integers(0, 99)), max_size=80)


@pytest.mark.parametrize("order", [Order.TOTAL, Order.SAFE])
@settings(max_examples=150, deadline=None)
@given(count=st.integers(3, 5), steps=STEPS)
def test_total_order_agrees_everywhere(order: Order, count: int, steps: list) -> None:
    members = run(order, count, steps)
    reference = members[1].delivered
    for member in members.values():
        assert member.delivered == reference, "members delivered in different orders"
        assert len(set(member.delivered)) == len(member.delivered), "a message was delivered twice"


@pytest.mark.parametrize("order", [Order.CAUSAL, Order.TOTAL, Order.SAFE])
@settings(max_examples=150, deadline=None)
@given(count=st.integers(3, 5), steps=STEPS)
def test_causal_predecessors_come_first(order: Order, count: int, steps: list) -> None:
    sent: dict[tuple[int, int], OrderedMessage] = {}
    members = run(order, count, steps, sent)
    for member in members.values():
        position = {message: i for i, message in enumerate(member.delivered)}
        for key, i in position.items():
            sender, seq = key
            assert position.get((sender, seq - 1), -1) < i, "FIFO broken"
            for acked_sender, high in sent[key].acks:  # everything it acknowledged comes first
                for earlier in range(1, high + 1):
                    assert position[(acked_sender, earlier)] < i, f"{key} delivered before its cause"


def test_total_order_waits_for_every_members_promise() -> None:
    a, b, c = (OrderingLayer(i, (1, 2, 3), Order.TOTAL) for i in (1, 2, 3))
    message = OrderedMessage(2, 1, 1, (), b"x")
    assert a.on_message(message) == []  # member 3 has not promised anything yet
    a.on_acks(3, ((3, 0), (2, 1)))
    assert a.deliverable() == [message]


def test_safe_order_waits_until_everyone_acknowledged() -> None:
    a = OrderingLayer(1, (1, 2, 3), Order.SAFE)
    message = OrderedMessage(2, 1, 1, (), b"x")
    a.on_message(message)
    a.on_acks(3, ((3, 0),))  # member 3 has sent nothing and not yet received member 2's message
    assert a.deliverable() == []
    a.on_acks(3, ((2, 1),))
    assert a.deliverable() == [message]
