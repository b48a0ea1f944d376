"""The R1-R3 compiler: every path of a flow graph as one select then one transform.

Theory of operation (Gryphon, "rewriting rules" and "subscriptions to
internal spaces"): events enter at root spaces and flow along select and
transform arcs. Walking a path from its root we keep ``(S, T)``: a predicate
over the root's fields and a transform from the root's schema to the current
space. A select arc ``S(p)`` becomes ``S & p[fields := T]`` (R1, then R2 to
join); a transform arc ``T2`` becomes ``T; T2`` composed (R3). So
``[T T S T S T]`` ends as ``[S T]``: the select runs where the events enter
(at the publishers, who can then drop what nobody wants) and the transform
runs at the subscriber.

A subscription to an internal space is *externalised*: its predicate is one
more select at the end of every path into that space. A subscription to a
state pushes the part of its predicate over key fields down to the events
(keys are computed from events alike by every rule, ``collapse.py``); a
predicate over state values stays a filter on rows (``residual``).

Fan-in: a space reached by several paths gets one copy per path, as in the
original graph. Common subexpressions are shared by ``Matcher``: equal
``(S, T)`` pairs (AST nodes hash by structure) are one entry, and the tests
of field values against constants (equalities and ranges) are shared through
an index on each field (``index.py``).

``run_original`` interprets the graph arc by arc: the reference the
property tests compare compiled paths with.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from .evaluate import Env, EvalError, compile_predicate
from .graph import Arc, FlowGraph, History, StateSpace
from .index import Access, Plan, Sample, access_of, plan, unordered
from .rules import Transform, conjoin, r1_select_before_transform, r3_compose, substitute
from .syntax import TRUE, Binary, Call, Const, FlowError, Name, Node, Unary, Value, names_in, parse_expression, render
from .schema import TypeEnv, check_predicate


@dataclass(frozen=True, slots=True)
class CompiledPath:
    """One path from ``root`` to ``target``, rewritten to ``[S T]``."""

    root: str
    target: str
    predicate: Node
    """S, over the root's fields."""
    transform: Transform
    """T, from the root's schema to the target's."""
    original: tuple[str, ...]
    """The arc kinds walked, e.g. ``("T", "T", "S", "T", "S", "T")``."""

    def describe(self) -> str:
        return (f"{self.root} -> {self.target}: [{' '.join(self.original)}] => "
                f"[S({render(self.predicate)}) T({', '.join(render(o) for o in self.transform.outputs)})]")


def compile_arcs(root_schema: History, arcs: Sequence[Arc], graph: FlowGraph) -> CompiledPath:
    """R1, R2 and R3 along one path of select and transform arcs."""
    predicate: Node = TRUE
    transform = Transform.identity(root_schema.schema)
    kinds = []
    for arc in arcs:
        if arc.select is not None:
            kinds.append("S")
            predicate = conjoin(predicate, r1_select_before_transform(transform, arc.select.predicate,
                                                                      graph.functions))
        elif arc.transform is not None:
            kinds.append("T")
            transform = r3_compose(transform, arc.transform, graph.functions)
        else:
            raise FlowError(f"flows: a path of events cannot cross a {arc.kind} arc")
    target = arcs[-1].target if arcs else root_schema.name
    return CompiledPath(root_schema.name, target, predicate, transform, tuple(kinds))


def event_paths(graph: FlowGraph, target: str) -> list[CompiledPath]:
    """Every root-to-``target`` path of select and transform arcs, compiled."""
    if not isinstance(graph.spaces.get(target), History):
        raise FlowError(f"flows: {target!r} is not an event history")
    found: list[CompiledPath] = []
    for root in graph.roots():
        for arcs in _walks(graph, root, target):
            found.append(compile_arcs(graph.spaces[root], arcs, graph))  # type: ignore[arg-type]
    return found


def _walks(graph: FlowGraph, here: str, target: str) -> list[list[Arc]]:
    walks: list[list[Arc]] = [[]] if here == target else []
    for arc in graph.out_arcs(here):
        if arc.kind in ("select", "transform"):
            walks += [[arc] + rest for rest in _walks(graph, arc.target, target)]
    return walks


@dataclass(frozen=True, slots=True)
class Subscription:
    """A subscription compiled to root-level ``[S T]`` paths."""

    space: str
    text: str
    paths: tuple[CompiledPath, ...]
    residual: Node = TRUE
    """For a state: the part over row values, checked on rows at the subscriber."""
    state: str | None = None
    """The state subscribed to; its collapse consumes the paths' events."""


def compile_subscription(graph: FlowGraph, space: str, predicate: str = "true") -> Subscription:
    """Externalise a subscription to any space (R1 through every path into it)."""
    target = graph.spaces.get(space)
    if target is None:
        raise FlowError(f"flows: unknown space {space!r}")
    if isinstance(target, StateSpace):
        return _state_subscription(graph, target, predicate)
    node = parse_expression(predicate)
    check_predicate(node, TypeEnv(target.schema.types(), predicate, graph.functions))
    paths = tuple(_with_select(p, node, graph) for p in event_paths(graph, space))
    return Subscription(space, predicate, paths)


def _with_select(path: CompiledPath, predicate: Node, graph: FlowGraph) -> CompiledPath:
    pushed = r1_select_before_transform(path.transform, predicate, graph.functions)
    return CompiledPath(path.root, path.target, conjoin(path.predicate, pushed), path.transform,
                        path.original + ("S",))


def _state_subscription(graph: FlowGraph, state: StateSpace, predicate: str) -> Subscription:
    node = parse_expression(predicate)
    check_predicate(node, TypeEnv(state.schema.types(), predicate, graph.functions))
    arc = graph.in_arcs(state.name)[0]
    collapse = arc.collapse
    assert collapse is not None
    key_part, residual = split_by_keys(node, set(state.schema.key_names))
    # Keys as expressions over the collapse's source fields: the key part becomes an event select.
    on_events = substitute(key_part, dict(zip(state.schema.key_names, collapse.key_exprs)))
    paths = tuple(_with_select(p, on_events, graph) for p in event_paths(graph, arc.source))
    return Subscription(state.name, predicate, paths, residual, state.name)


def split_by_keys(node: Node, keys: set[str]) -> tuple[Node, Node]:
    """(the conjuncts over keys only, the rest)."""
    if isinstance(node, Binary) and node.op == "&":
        k1, r1 = split_by_keys(node.left, keys)
        k2, r2 = split_by_keys(node.right, keys)
        return conjoin(k1, k2), conjoin(r1, r2)
    return (node, TRUE) if names_in(node) <= keys else (TRUE, node)


# --- the matching engine ---------------------------------------------------------------

SAMPLE_SIZE = 256
"""Events whose values choose, once, the cheaper side of each ``&`` (``index.py``)."""



class Matcher:
    """All compiled paths of one root: match an event once, get every target's copy.

    Sharing, as Gryphon's matching tree does: equal ``(S, T)`` pairs are one
    entry whatever the number of subscribers, and each entry is filed in an
    index (``index.py``) under the intervals of field values where its
    predicate can hold: equalities (``issue = "IBM"``), ranges (``price <
    120``, ``3 < x <= 7``) and disjunctions of them, across fields too. An
    event stabs each field's intervals with its value; only the entries filed
    under a hit, and those with no interval, are evaluated, and an entry whose
    predicate is exactly its intervals is not evaluated at all.
    ``match_unindexed`` evaluates every entry: the reference the property
    tests compare with. (``evaluate.Memo`` shares every subexpression instead;
    under CPython its bookkeeping cost more than it saved: docs/flows.md.)"""

    def __init__(self, graph: FlowGraph, root: str, *, sample_size: int = SAMPLE_SIZE) -> None:
        space = graph.spaces[root]
        if not isinstance(space, History):
            raise FlowError(f"flows: {root!r} is not an event history")
        self.graph, self.root, self.names = graph, root, space.schema.names
        self._types = space.schema.types()
        self.entries: dict[tuple[Node, Transform], list[str]] = {}
        self._keys: list[tuple[Node, Transform]] = []
        self._predicates: list[Callable[[Env], bool]] = []
        self._apply: list[Callable[[Env], tuple[Value, ...]] | None] = []
        """None: the identity (the event itself)."""
        self._labels: list[list[str]] = []
        self._sample = Sample(self.names, sample_size)
        self._plan: Plan | None = None
        """Built at the first match after a change (subscriptions arrive in bursts)."""
        self._subtrees: set[Node] = set()
        self.nodes_total = 0
        self.candidates = 0
        """Entries the index proposed, over all events matched (for the benchmark)."""
        self.evaluated = 0
        """Predicates evaluated, over all events matched."""

    @property
    def distinct_nodes(self) -> int:
        """Distinct subexpressions over all entries (equal ones counted once)."""
        return len(self._subtrees)

    def add(self, path: CompiledPath, label: str) -> None:
        if path.root != self.root:
            raise FlowError(f"flows: path from {path.root!r} added to the matcher of {self.root!r}")
        key = (path.predicate, path.transform)
        self.nodes_total += _size(path.predicate)
        if key in self.entries:
            self.entries[key].append(label)
            return
        _collect(path.predicate, self._subtrees)
        self.entries[key] = labels = [label]
        self._keys.append(key)
        self._labels.append(labels)
        self._predicates.append(compile_predicate(path.predicate, self.graph.functions))
        self._apply.append(None if path.transform.is_identity else path.transform.compiled(self.graph.functions))
        self._plan = None

    def access(self, index: int) -> Access:
        """Where entry ``index`` is filed (for tests and the benchmark)."""
        return access_of(self._keys[index][0], self._types, self._sample.estimate)

    def _current_plan(self) -> Plan:
        if self._plan is None:
            self._plan = plan((k[0] for k in self._keys), self.names, self._types, self._sample.estimate)
        return self._plan

    def _candidates(self, event: Sequence[Value]) -> tuple[list[int], list[bool] | None]:
        """(entries to consider, in order; which of them need no evaluation, None: all do)."""
        if self._sample.filling and self._sample.observe(event):
            self._plan = None  # the sample just filled: choose the access conditions again with it
        current = self._current_plan()
        found = set(current.always)
        for position, index in current.fields:
            value = event[position]
            if unordered(value):
                return list(range(len(self._keys))), None
            index.stab(value, found)
        return sorted(found), current.exact

    def match(self, event: Sequence[Value]) -> list[tuple[str, tuple[Value, ...]]]:
        """(label, transformed event) for every entry whose S holds and whose T is defined."""
        candidates, exact = self._candidates(event)
        return self._run(event, candidates, exact)

    def match_unindexed(self, event: Sequence[Value]) -> list[tuple[str, tuple[Value, ...]]]:
        """``match`` by evaluating every entry's predicate (the reference)."""
        return self._run(event, range(len(self._keys)), None)

    def _run(self, event: Sequence[Value], candidates: Sequence[int],
             exact: list[bool] | None) -> list[tuple[str, tuple[Value, ...]]]:
        env = dict(zip(self.names, event))
        itself = tuple(event)
        predicates, applies, labels = self._predicates, self._apply, self._labels
        out: list[tuple[str, tuple[Value, ...]]] = []
        evaluated = 0
        for index in candidates:
            if exact is None or not exact[index]:
                evaluated += 1
                if not predicates[index](env):
                    continue
            apply = applies[index]
            try:
                value = itself if apply is None else apply(env)
            except EvalError:
                continue
            for label in labels[index]:
                out.append((label, value))
        self.candidates += len(candidates)
        self.evaluated += evaluated
        return out

    def any_match(self, event: Sequence[Value]) -> bool:
        candidates, exact = self._candidates(event)
        env = dict(zip(self.names, event))
        return any((exact is not None and exact[i]) or self._predicates[i](env) for i in candidates)


def _collect(node: Node, seen: set[Node]) -> None:
    seen.add(node)
    if isinstance(node, Unary):
        _collect(node.operand, seen)
    elif isinstance(node, Binary):
        _collect(node.left, seen)
        _collect(node.right, seen)
    elif isinstance(node, Call):
        for arg in node.args:
            _collect(arg, seen)


def _size(node: Node) -> int:
    if isinstance(node, Unary):
        return 1 + _size(node.operand)
    if isinstance(node, Binary):
        return 1 + _size(node.left) + _size(node.right)
    if isinstance(node, Call):
        return 1 + sum(_size(a) for a in node.args)
    return 1


# --- the reference interpreter ----------------------------------------------------------


def run_original(graph: FlowGraph, root: str, event: Sequence[Value]) -> dict[str, list[tuple[Value, ...]]]:
    """Push one event through the graph arc by arc: each history's copies."""
    reached: dict[str, list[tuple[Value, ...]]] = {}
    _push(graph, root, tuple(event), reached)
    return reached


def _push(graph: FlowGraph, space: str, event: tuple[Value, ...], reached: dict[str, list[tuple[Value, ...]]]) -> None:
    reached.setdefault(space, []).append(event)
    names = graph.spaces[space].schema.names  # type: ignore[union-attr]
    env = dict(zip(names, event))
    for arc in graph.out_arcs(space):
        if arc.select is not None:
            if compile_predicate(arc.select.predicate, graph.functions)(env):
                _push(graph, arc.target, event, reached)
        elif arc.transform is not None:
            try:
                out = arc.transform.compiled(graph.functions)(env)
            except EvalError:
                continue
            _push(graph, arc.target, out, reached)


def run_compiled(graph: FlowGraph, root: str, event: Sequence[Value]) -> dict[str, list[tuple[Value, ...]]]:
    """The same through compiled paths (one matcher per call: for tests)."""
    matcher = Matcher(graph, root)
    for space, kind in graph.spaces.items():
        if isinstance(kind, History):
            for path in event_paths(graph, space):
                if path.root == root:
                    matcher.add(path, space)
    reached: dict[str, list[tuple[Value, ...]]] = {}
    for label, value in matcher.match(event):
        reached.setdefault(label, []).append(value)
    return reached


__all__ = ["CompiledPath", "Matcher", "Subscription", "compile_arcs", "compile_subscription", "event_paths",
           "run_compiled", "run_original", "split_by_keys"]
