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
``(S, T)`` pairs (AST nodes hash by structure) are one entry, and equality
tests on a field are shared through an index on its values.

``run_original`` interprets the graph arc by arc: the reference the
property tests compare compiled paths with.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from .evaluate import Env, EvalError, compile_predicate
from .graph import Arc, FlowGraph, History, StateSpace
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


class Matcher:
    """All compiled paths of one root: match an event once, get every target's copy.

    Sharing, as Gryphon's matching tree does: equal ``(S, T)`` pairs are one
    entry whatever the number of subscribers; a predicate anchored on an
    equality (``issue = "IBM" & ...``, or a disjunction of such) is filed
    under that value, so one dictionary lookup per field replaces the
    equality tests of every predicate anchored on it, and only the entries
    filed under the event's values (and the unanchored ones) are evaluated.
    (``evaluate.Memo`` shares every subexpression instead; under CPython its
    bookkeeping cost more than it saved: docs/flows.md.)"""

    def __init__(self, graph: FlowGraph, root: str) -> None:
        space = graph.spaces[root]
        if not isinstance(space, History):
            raise FlowError(f"flows: {root!r} is not an event history")
        self.graph, self.root, self.names = graph, root, space.schema.names
        self.entries: dict[tuple[Node, Transform], list[str]] = {}
        self._keys: list[tuple[Node, Transform]] = []
        self._predicates: list[Callable[[Env], bool]] = []
        self._apply: list[Callable[[Env], tuple[Value, ...]] | None] = []
        """None: the identity (the event itself)."""
        self._index: dict[str, dict[Value, list[int]]] = {}
        self._always: list[int] = []
        self._subtrees: set[Node] = set()
        self.nodes_total = 0

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
        index = len(self._keys)
        self.entries[key] = [label]
        self._keys.append(key)
        self._predicates.append(compile_predicate(path.predicate, self.graph.functions))
        self._apply.append(None if path.transform.is_identity else path.transform.compiled(self.graph.functions))
        anchor = _anchor(path.predicate, set(self.names))
        if anchor is None:
            self._always.append(index)
        else:
            field_name, values = anchor
            by_value = self._index.setdefault(field_name, {})
            for value in values:
                by_value.setdefault(value, []).append(index)

    def _candidates(self, env: Env) -> list[int]:
        found = list(self._always)
        for field_name, by_value in self._index.items():
            found += by_value.get(env[field_name], ())
        return sorted(set(found)) if self._index else found

    def match(self, event: Sequence[Value]) -> list[tuple[str, tuple[Value, ...]]]:
        """(label, transformed event) for every entry whose S holds and whose T is defined."""
        env = dict(zip(self.names, event))
        out: list[tuple[str, tuple[Value, ...]]] = []
        for index in self._candidates(env):
            if not self._predicates[index](env):
                continue
            apply = self._apply[index]
            try:
                value = tuple(event) if apply is None else apply(env)
            except EvalError:
                continue
            out += [(label, value) for label in self.entries[self._keys[index]]]
        return out

    def any_match(self, event: Sequence[Value]) -> bool:
        env = dict(zip(self.names, event))
        return any(self._predicates[i](env) for i in self._candidates(env))


def _anchor(predicate: Node, fields: set[str]) -> tuple[str, list[Value]] | None:
    """(field, values) such that the predicate can hold only where the field
    has one of the values: a conjunct ``f = c``, or a disjunction of them."""
    if isinstance(predicate, Binary) and predicate.op == "&":
        return _anchor(predicate.left, fields) or _anchor(predicate.right, fields)
    if isinstance(predicate, Binary) and predicate.op == "|":
        left, right = _anchor(predicate.left, fields), _anchor(predicate.right, fields)
        if left and right and left[0] == right[0]:
            return left[0], left[1] + right[1]
        return None
    if isinstance(predicate, Binary) and predicate.op == "=":
        for name, const in ((predicate.left, predicate.right), (predicate.right, predicate.left)):
            if isinstance(name, Name) and name.name in fields and isinstance(const, Const) \
                    and not isinstance(const.value, float):
                return name.name, [const.value]
    return None


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
