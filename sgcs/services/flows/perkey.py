"""Per-key order for interpretation subscribers: when it suffices, and how.

Theory of operation (Gryphon, region 4: subscribers who keep only a state
per key "cannot ignore ordering entirely ... but they can ignore the order
between today's IBM price and today's HP price", and guaranteeing a total
order "adds to the cost of the delivery protocol"). A collapse applies each
event to the row of the key the event carries, so replicas of a state reach
the same rows when they apply, per key, the same events in the same order;
the order between keys does not change any row.

**When** (``analyse``, which is ``FlowGraph.order_analysis``). A root's group may use per-key order when, for that
root, every state downstream computes its key from the root's events by the
same expressions (the collapse key, rewritten through the path's transforms
into the root's fields): then one function of the event, its *partition
key*, decides the row it touches in every state. It may not when:

* two states (or two paths) key the root's events differently (``issue``
  and ``exchange``): one event would need two owners;
* a state is fed through an expand: the expanded history's events follow
  the changes of another state, and their order across its keys would then
  differ per member;
* the graph asks for a total order for a space downstream
  (``FlowGraph.require_total_order``), for subscribers of a history who need
  one order across keys.

A root with no state downstream keeps FIFO (selects and transforms are per
event), as before.

**How** (``owner`` and the engine). sgcs offers FIFO order per sender with
virtual synchrony: members that move from a view to the next together
deliver the same messages in it, and a message is delivered in the view it
was sent in. Each partition key has an *owner*, a deterministic function of
the key and the view's members. Only the owner multicasts that key's
events: a publisher multicasts the events it owns and unicasts the others
to their owners, which multicast them. Per key, every member then delivers
the owner's events in the owner's order, and a change of owner happens at a
view change, which every member crosses at the same point of the owner's
streams. Receivers check the owner of every event in the view they deliver
it in and skip an event whose sender was not its owner there (sent under an
older view); the publisher, which delivers the same message, routes it
again. So every event is applied once, by its owner, at every member.

State transfer needs a cut every member agrees on. Total order gave it as a
place in the one order; here it is a *vector*: per sending member, the last
sgcs sequence number whose events the answering keeper had applied
(``Vector``). The joiner buffers every event from its subscription on, each
with its sender and number, and applies the ones after the cut. Its request
carries the numbers it had delivered when it asked, and the keeper answers
only once it has applied at least those, so nothing the joiner delivered
before it buffered is missing from the rows; at a view change the keeper
answers what it waited for anyway (virtual synchrony: what it lacks then, it
never gets, and neither does the state).
"""

from __future__ import annotations

import hashlib
from typing import Callable, Mapping, Sequence

from .evaluate import EvalError, compile_node
from .graph import FlowGraph, History, OrderAnalysis
from .syntax import Node, Value

Vector = dict[int, int]
"""sending member -> the last of its sgcs sequence numbers applied."""


def analyse(graph: FlowGraph, root: str) -> OrderAnalysis:
    """The cheapest order under which every replica of every state fed by
    ``root`` reaches the same rows (``FlowGraph.order_analysis``, which the
    module docstring explains)."""
    return graph.order_analysis(root)


def partition_function(graph: FlowGraph, root: str, key: tuple[Node, ...]) -> Callable[[Sequence[Value]], object]:
    """event of ``root`` -> its partition key (None where a key expression fails: no state gets the event)."""
    space = graph.spaces[root]
    assert isinstance(space, History)
    names = space.schema.names
    fns = [compile_node(k, graph.functions) for k in key]

    def partition(event: Sequence[Value]) -> object:
        env = dict(zip(names, event))
        try:
            return tuple(fn(env) for fn in fns)
        except (EvalError, ZeroDivisionError, OverflowError):
            return None
    return partition


def owner(key: object, members: Sequence[int]) -> int:
    """The member that multicasts ``key``'s events in a view of ``members``
    (sorted): the same at every member, for any key that ``repr`` names."""
    digest = hashlib.blake2b(repr(key).encode(), digest_size=8).digest()
    return members[int.from_bytes(digest, "big") % len(members)]


def covers(have: Mapping[int, int], wanted: Mapping[int, int]) -> bool:
    """``have`` holds at least every number in ``wanted``."""
    return all(have.get(sender, 0) >= seq for sender, seq in wanted.items())


def merged(a: Mapping[int, int], b: Mapping[int, int]) -> Vector:
    out = dict(a)
    for sender, seq in b.items():
        if seq > out.get(sender, 0):
            out[sender] = seq
    return out


__all__ = ["OrderAnalysis", "Vector", "analyse", "covers", "merged", "owner", "partition_function"]
