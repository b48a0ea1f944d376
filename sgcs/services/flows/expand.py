"""The expand engine: the shortest event sequence that takes a state to another.

Theory of operation (Gryphon, *expand* arcs and "catch-up" of disconnected
subscribers): a subscriber that was away holds state ``s0``; the space now
holds ``g``. Instead of replaying the backlog we send the *shortest
equivalent event sequence*: events whose collapse takes ``s0`` to ``g``. The
state is keyed (``collapse.py``), so each changed key is solved alone and the
answers are concatenated.

Per key, A* searches *backwards from the goal*. A search node is a predicate
over the row's components (``#0``, ``#1``, ...): "from any row satisfying it,
the events found so far lead to ``g``". The goal node is ``#0 = g0 & #1 =
g1 ...``. Regressing a node ``P`` through rule ``r`` gives its weakest
precondition ``guard_r & !guard_earlier & P[#j := value_j]`` (earlier rules'
guards are negated because the first fitting rule fires); the event's fields
are fixed by the equalities this produces (``p = 200``), the rest drawn from a
small candidate domain (the values of ``s0``, ``g``, the rules' constants, and
their neighbours +-1). A node is reached when ``s0``'s row satisfies it.

The estimate is the paper's *replacement form*, relaxed: forgetting guards
and values, rule ``r`` can only *replace* the components its result does not
copy (``<n: maxP, p>`` replaces the second). Each component that ``s0``
violates must be replaced at least once, so the fewest table entries that
cover the violated components is a lower bound (admissible): A* returns a
shortest sequence. For the *uniform unconstrained* form (every k-subset
replaceable, no guards) the bound is exact: ``ceil(m / k)``.

Worked example (the paper's): rules max/current, ``s0 = <IBM: 160, 140>``,
``g = <IBM: 200, 120>``: ``[IBM, 200]`` (a new maximum) then ``[IBM, 120]``.

Fallbacks: without a table (key not a plain field, or an opaque collapse
function) a forward breadth-first search over the candidate events finds a
shortest sequence; past its budget, the key's backlog is replayed. Every
answer is checked by collapsing it onto ``s0`` before it is returned.

Fields no rule reads carry their type's zero in the events sent.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

from .collapse import Collapse, Key, Row
from .evaluate import EvalError, compile_predicate, evaluate
from .rules import conjoin, fold, substitute
from .syntax import FALSE, TRUE, Binary, Call, Const, FlowError, Name, Node, Unary, Value, names_in

ZERO: dict[str, Value] = {"int": 0, "float": 0.0, "str": "", "bool": False}
ABSENT = Const("<no row>")
"""The search node 'the key has no row yet' (reached through a creating rule)."""


def component(j: int) -> Name:
    return Name(f"#{j}")


def field_var(name: str) -> Name:
    return Name(f"${name}")


@dataclass(frozen=True, slots=True)
class CanonicalRule:
    """A collapse rule over canonical names: ``$field`` for the event, ``#j``
    for the row (the predecessor's, in a regression)."""

    creates: bool
    guard: Node
    values: tuple[Node, ...]
    replaces: frozenset[int]


@dataclass(frozen=True, slots=True)
class Expansion:
    """The catch-up for one state change."""

    events: tuple[tuple[Value, ...], ...]
    method: str
    """``"astar"``, ``"bfs"`` or ``"replay"`` (the worst of the keys')."""
    nodes: int
    """Search nodes expanded, over all keys."""
    estimate: int
    """The replacement-form estimate at the start, summed over keys."""
    keys: int
    """Keys that changed."""


@dataclass(slots=True)
class _Search:
    key: Key
    row0: Row | None
    goal: Row
    domain: dict[str, list[Value]]
    expanded: int = 0
    parents: dict[Node, tuple[Node, tuple[Value, ...]] | None] = field(default_factory=dict)


class Expander:
    """Expansion for the states of one collapse (see the module docstring)."""

    def __init__(self, collapse: Collapse, *, max_nodes: int = 20_000, max_candidates: int = 400) -> None:
        self.collapse = collapse
        self.max_nodes, self.max_candidates = max_nodes, max_candidates
        self.source = collapse.source
        self.width = len(collapse.target.values)
        self.key_fields = self._plain_key_fields()
        self.rules = tuple(self._canonical(i) for i in range(len(collapse.rules)))
        self.table = sorted({r.replaces for r in self.rules if not r.creates and r.replaces}, key=sorted)
        self.constants = _constants([r.guard for r in self.rules] + [v for r in self.rules for v in r.values])
        self._cover_cache: dict[frozenset[int], int | None] = {}

    @property
    def has_table(self) -> bool:
        return self.key_fields is not None

    def _plain_key_fields(self) -> tuple[str, ...] | None:
        keys = self.collapse.key_exprs
        if all(isinstance(k, Name) for k in keys):
            return tuple(k.name for k in keys)  # type: ignore[union-attr]
        return None  # a computed key: no regression, BFS instead

    def _canonical(self, index: int) -> CanonicalRule:
        rule = self.collapse.rules[index]
        names: dict[str, Node] = {var: field_var(f) for var, f in rule.event_vars.items()}
        names.update({var: field_var(k.name) if isinstance(k, Name) else k  # type: ignore[misc]
                      for var, k in zip(rule.key_vars, self.collapse.key_exprs)})
        names.update({var: component(j) for j, var in enumerate(rule.state_vars)})
        values = tuple(substitute(v, names) for v in rule.values)
        replaces = frozenset(j for j, v in enumerate(values) if v != component(j))
        return CanonicalRule(rule.creates, substitute(rule.guard, names), values, replaces)

    # --- the whole state -----------------------------------------------------------------

    def expand(self, s0: Mapping[Key, Row], goal: Mapping[Key, Row],
               backlog: Iterable[Sequence[Value]] | None = None) -> Expansion:
        """Events taking ``s0`` to ``goal``; FlowError if it cannot be done."""
        lost = [k for k in s0 if k not in goal]
        if lost:
            raise FlowError(f"flows: cannot expand: rows {lost[:3]} vanished (states only grow)")
        events: list[tuple[Value, ...]] = []
        methods, nodes, estimate = set(), 0, 0
        changed = sorted(k for k in goal if s0.get(k) != goal[k])
        by_key = _backlog_by_key(self.collapse, backlog) if backlog is not None else {}
        for key in changed:
            found, method, expanded, h = self.expand_key(key, s0.get(key), goal[key], by_key.get(key))
            events += found
            methods.add(method)
            nodes += expanded
            estimate += h
        worst = next((m for m in ("replay", "bfs", "astar") if m in methods), "astar")
        return Expansion(tuple(events), worst, nodes, estimate, len(changed))

    def expand_key(self, key: Key, row0: Row | None, goal: Row,
                   backlog: list[tuple[Value, ...]] | None = None) -> tuple[list[tuple[Value, ...]], str, int, int]:
        """(events, method, nodes expanded, start estimate) for one key."""
        search = _Search(key, row0, goal, self._domain(key, row0, goal))
        h0 = 0
        if self.has_table:
            h0 = self._estimate(self._goal_node(goal), row0) or 0
            found = self._astar(search)
            if found is not None and self._replays_to(key, row0, found, goal):
                return found, "astar", search.expanded, h0
        found = self.bfs_key(key, row0, goal, search.domain)
        if found is not None:
            return found, "bfs", search.expanded, h0
        if backlog is not None and self._replays_to(key, row0, backlog, goal):
            return list(backlog), "replay", search.expanded, h0
        raise FlowError(f"flows: no event sequence found from {row0} to {goal} for key {key}"
                        f" within {self.max_nodes} nodes, and no backlog to replay")

    def _replays_to(self, key: Key, row0: Row | None, events: Sequence[Sequence[Value]], goal: Row) -> bool:
        row = row0
        for event in events:
            new = self.collapse.step(event, key, row)
            row = row if new is None else new
        return row == goal

    # --- A* backwards ----------------------------------------------------------------------

    def _goal_node(self, goal: Row) -> Node:
        return normalize(conjoin(*(Binary("=", component(j), Const(v)) for j, v in enumerate(goal))))

    def _astar(self, search: _Search) -> list[tuple[Value, ...]] | None:
        start = self._goal_node(search.goal)
        h = self._estimate(start, search.row0)
        if h is None:
            return None
        tie = itertools.count()
        frontier: list[tuple[int, int, int, Node]] = [(h, next(tie), 0, start)]
        depth: dict[Node, int] = {start: 0}
        search.parents[start] = None
        while frontier:
            _, _, g, node = heapq.heappop(frontier)
            if g > depth.get(node, g):
                continue
            if self._reached(node, search.row0):
                return _path(search, node)
            search.expanded += 1
            if search.expanded > self.max_nodes:
                return None
            for before, event in self._regress(node, search):
                cost = g + 1
                if cost >= depth.get(before, cost + 1):
                    continue
                estimate = self._estimate(before, search.row0)
                if estimate is None:
                    continue
                depth[before] = cost
                search.parents[before] = (node, event)
                heapq.heappush(frontier, (cost + estimate, next(tie), cost, before))
        return None

    def _reached(self, node: Node, row0: Row | None) -> bool:
        if row0 is None or node == ABSENT:
            return row0 is None and node == ABSENT
        return _holds(node, row0, self.collapse)

    def _regress(self, node: Node, search: _Search) -> list[tuple[Node, tuple[Value, ...]]]:
        """(predecessor node, the event) for every rule and event that can lead into ``node``."""
        if node == ABSENT:
            return []
        out: list[tuple[Node, tuple[Value, ...]]] = []
        for index, rule in enumerate(self.rules):
            earlier = [r.guard for r in self.rules[:index] if r.creates == rule.creates]
            formula = conjoin(rule.guard, *(Unary("!", g) for g in earlier),
                              substitute(node, {f"#{j}": v for j, v in enumerate(rule.values)}))
            formula = substitute(formula, {f"${f}": Const(v) for f, v in zip(self.key_fields or (), search.key)})
            for bound, before in self._bind_event(fold(formula, self.collapse.functions), search):
                if rule.creates:
                    if _truth(before, self.collapse) is True:
                        out.append((ABSENT, self._event(search.key, bound)))
                elif before != FALSE:
                    out.append((normalize(before), self._event(search.key, bound)))
        return out

    def _bind_event(self, formula: Node, search: _Search) -> list[tuple[dict[str, Value], Node]]:
        """Event fields fixed by equalities, the others enumerated from the domain."""
        bound: dict[str, Value] = {}
        while True:
            fixed = _equalities(formula)
            if not fixed:
                break
            bound.update(fixed)
            formula = fold(substitute(formula, {f"${f}": Const(v) for f, v in fixed.items()}), self.collapse.functions)
        if formula == FALSE:
            return []
        free = sorted(n[1:] for n in names_in(formula) if n.startswith("$"))
        if not free:
            return [(bound, formula)]
        choices = [search.domain[f] for f in free]
        out = []
        for values in itertools.islice(itertools.product(*choices), self.max_candidates):
            assigned = dict(zip(free, values))
            node = fold(substitute(formula, {f"${f}": Const(v) for f, v in assigned.items()}), self.collapse.functions)
            if node != FALSE:
                out.append(({**bound, **assigned}, node))
        return out

    def _event(self, key: Key, bound: Mapping[str, Value]) -> tuple[Value, ...]:
        values = dict(zip(self.key_fields or (), key))
        values.update(bound)
        return tuple(_typed(kind, values.get(name, ZERO[kind])) for name, kind in self.source.fields)

    # --- the replacement-form estimate --------------------------------------------------------

    def _estimate(self, node: Node, row0: Row | None) -> int | None:
        """Fewest events before ``node`` holds (admissible); None: never."""
        if row0 is None:
            return 0 if node == ABSENT else 1
        if node == ABSENT:
            return None  # a row never disappears
        violated = frozenset(j for j, conjunct in _single_component_conjuncts(node)
                             if not _holds(conjunct, row0, self.collapse))
        if not violated:
            return 0 if _holds(node, row0, self.collapse) else 1
        return self.cover(violated)

    def cover(self, components: frozenset[int]) -> int | None:
        """Fewest replacement-table entries whose union covers ``components``."""
        if components in self._cover_cache:
            return self._cover_cache[components]
        result: int | None = None
        useful = [s & components for s in self.table if s & components]
        for count in range(1, len(components) + 1):
            if any(frozenset().union(*combo) >= components for combo in itertools.combinations_with_replacement(useful, count)):
                result = count
                break
        self._cover_cache[components] = result
        return result

    # --- the forward breadth-first fallback (and oracle) --------------------------------------

    def _domain(self, key: Key, row0: Row | None, goal: Row) -> dict[str, list[Value]]:
        seen: list[Value] = list(goal) + list(row0 or ()) + list(key) + self.constants
        by_type: dict[str, list[Value]] = {}
        for name, kind in self.source.fields:
            values: list[Value] = []
            for v in seen:
                if kind in ("int", "float") and isinstance(v, (int, float)) and not isinstance(v, bool):
                    values += [_typed(kind, v), _typed(kind, v + 1), _typed(kind, v - 1)]
                elif kind == "str" and isinstance(v, str) or kind == "bool" and isinstance(v, bool):
                    values.append(v)
            values.append(ZERO[kind])
            by_type[name] = sorted(set(values), key=repr)
        return by_type

    def bfs_key(self, key: Key, row0: Row | None, goal: Row, domain: Mapping[str, list[Value]] | None = None,
                max_depth: int = 8) -> list[tuple[Value, ...]] | None:
        """A shortest sequence by forward BFS over candidate events (needs no table)."""
        domain = domain or self._domain(key, row0, goal)
        events = self._candidate_events(key, domain)
        if row0 == goal:
            return []
        parents: dict[Row | None, tuple[Row | None, tuple[Value, ...]] | None] = {row0: None}
        queue: deque[tuple[Row | None, int]] = deque([(row0, 0)])
        while queue and len(parents) <= self.max_nodes:
            row, depth = queue.popleft()
            if depth >= max_depth:
                continue
            for event in events:
                new = self.collapse.step(event, key, row)
                if new is None or new in parents:
                    continue
                parents[new] = (row, event)
                if new == goal:
                    return _unwind(parents, new)
                queue.append((new, depth + 1))
        return None

    def _candidate_events(self, key: Key, domain: Mapping[str, list[Value]]) -> list[tuple[Value, ...]]:
        read = set()
        for rule in self.collapse.rules:
            read |= {f for var, f in rule.event_vars.items()}
        keyed = dict(zip(self.key_fields or (), key))
        choices = [[keyed[n]] if n in keyed else (domain[n] if n in read else [ZERO[kind]])
                   for n, kind in self.source.fields]
        events = list(itertools.islice(itertools.product(*choices), 50_000))
        return [tuple(e) for e in events if self.collapse.key_of(e) == key]


# --- helpers ----------------------------------------------------------------------------------


def _typed(kind: str, value: Value) -> Value:
    if kind == "float":
        return float(value)  # type: ignore[arg-type]
    if kind == "int" and isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _constants(nodes: Iterable[Node]) -> list[Value]:
    found: list[Value] = []

    def walk(node: Node) -> None:
        if isinstance(node, Const):
            found.append(node.value)
        elif isinstance(node, Unary):
            walk(node.operand)
        elif isinstance(node, Binary):
            walk(node.left)
            walk(node.right)
        elif isinstance(node, Call):
            for a in node.args:
                walk(a)
    for n in nodes:
        walk(n)
    return found


def _conjuncts(node: Node) -> list[Node]:
    if isinstance(node, Binary) and node.op == "&":
        return _conjuncts(node.left) + _conjuncts(node.right)
    return [] if node == TRUE else [node]


def normalize(node: Node) -> Node:
    """Conjuncts deduplicated and sorted; ``#j = c`` substituted into the others."""
    parts = _conjuncts(fold(node))
    fixed: dict[str, Node] = {}
    for part in parts:
        if isinstance(part, Binary) and part.op == "=" and isinstance(part.left, Name) \
                and part.left.name.startswith("#") and isinstance(part.right, Const):
            fixed.setdefault(part.left.name, part.right)
    if fixed:
        rest = [fold(substitute(p, fixed)) for p in parts if not _is_fixing(p, fixed)]
        parts = [Binary("=", Name(n), c) for n, c in fixed.items()] + rest
    if FALSE in parts:
        return FALSE
    unique = sorted({repr(p): p for p in parts if p != TRUE}.items())
    return conjoin(*(p for _, p in unique))


def _is_fixing(part: Node, fixed: Mapping[str, Node]) -> bool:
    return isinstance(part, Binary) and part.op == "=" and isinstance(part.left, Name) \
        and part.left.name in fixed and part.right == fixed[part.left.name]


def _single_component_conjuncts(node: Node) -> list[tuple[int, Node]]:
    out = []
    for part in _conjuncts(node):
        names = names_in(part)
        if len(names) == 1:
            (name,) = names
            if name.startswith("#"):
                out.append((int(name[1:]), part))
    return out


def _holds(node: Node, row: Row, collapse: Collapse) -> bool:
    env = {f"#{j}": v for j, v in enumerate(row)}
    return compile_predicate(node, collapse.functions)(env)


def _truth(node: Node, collapse: Collapse) -> bool | None:
    if names_in(node):
        return None
    try:
        return bool(evaluate(node, {}, collapse.functions))
    except EvalError:
        return False


def _equalities(formula: Node) -> dict[str, Value]:
    """``$f = c`` conjuncts (either way round)."""
    fixed: dict[str, Value] = {}
    for part in _conjuncts(formula):
        if isinstance(part, Binary) and part.op == "=":
            for var, const in ((part.left, part.right), (part.right, part.left)):
                if isinstance(var, Name) and var.name.startswith("$") and isinstance(const, Const):
                    fixed.setdefault(var.name[1:], const.value)
    return fixed


def _path(search: _Search, node: Node) -> list[tuple[Value, ...]]:
    events = []
    link = search.parents[node]
    while link is not None:
        after, event = link
        events.append(event)
        link = search.parents[after]
    return events


def _unwind(parents: Mapping[Row | None, tuple[Row | None, tuple[Value, ...]] | None],
            row: Row | None) -> list[tuple[Value, ...]]:
    events = []
    link = parents[row]
    while link is not None:
        before, event = link
        events.append(event)
        link = parents[before]
    return events[::-1]


def _backlog_by_key(collapse: Collapse, backlog: Iterable[Sequence[Value]]) -> dict[Key, list[tuple[Value, ...]]]:
    by_key: dict[Key, list[tuple[Value, ...]]] = {}
    for event in backlog:
        by_key.setdefault(collapse.key_of(event), []).append(tuple(event))
    return by_key
