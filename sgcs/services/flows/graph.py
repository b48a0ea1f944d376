"""Information flow graphs: spaces, arcs, validation, TOML.

Theory of operation (Gryphon, "information flow graph"): a graph has
*information spaces* (event histories and states, each with a schema) and
*arcs* between them: select, transform, collapse (history -> state) and
expand (state -> history). A space with several in-arcs merges them (fan-in);
one with several out-arcs copies its events to each (fan-out). Publishers
publish into history spaces that have no in-arc (*roots*); subscribers may
subscribe to any space.

Validation, each failure one line: arcs name known spaces of the right kind
(select and transform read and write histories, collapse goes history ->
state, expand state -> history); a select keeps its schema; a transform's
rule type-checks against both schemas; a state has exactly one in-arc, a
collapse; an expand writes the schema its state's collapse reads; the graph
is acyclic.

An expand arc carries a collapse rule: the interpretation its history must
have. By default it is the state's own collapse (the paper's region 4: the
history then reads like the state's source, and its subscribers can be sent
a shorter equivalent sequence). It may carry rules of its own instead,
interpreting a history of another schema as the state's value columns it
names (``values``; by default every column but the windows): the paper's
region 5, where a state of per-issue average price and largest recent drop
expands into an Alarms space, ``[i, d] -> <i: d>``, that consumers select
``drop > 20`` from. Each change of those columns is one event of the history;
a change elsewhere in the row (the window moving) is none.

Order: ``order_for(root)`` chooses the order of the group that carries a
root (``perkey.py``). A collapse downstream distinguishes the order of events
per key, not across keys (the paper's region 4), so where every state below
the root keys the root's events alike the group uses *per-key* order: FIFO in
sgcs, each key's events multicast by one owner. Otherwise (two keyings, a
state fed through an expand, or ``require_total_order``) it is TOTAL; with no
state downstream (selects and transforms are per event) FIFO is enough.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from typing import Any, Iterable, Literal, Union

from . import window as windows
from .collapse import Collapse
from .rules import Select, Transform, fold, r3_compose, substitute
from .schema import DEFAULT_FUNCTIONS, EventSchema, Functions, StateSchema
from .syntax import FlowError, Node, render

ArcKind = Literal["select", "transform", "collapse", "expand"]
Order = Literal["perkey", "total", "fifo"]


@dataclass(frozen=True, slots=True)
class History:
    name: str
    schema: EventSchema


@dataclass(frozen=True, slots=True)
class StateSpace:
    name: str
    schema: StateSchema


Space = Union[History, StateSpace]


@dataclass(frozen=True, slots=True)
class Arc:
    kind: ArcKind
    source: str
    target: str
    select: Select | None = None
    transform: Transform | None = None
    collapse: Collapse | None = None


class FlowGraph:
    """Spaces and arcs, checked as they are declared; ``validate()`` checks the whole."""

    def __init__(self, name: str, functions: Functions = DEFAULT_FUNCTIONS) -> None:
        if not name or not name.replace("-", "_").isidentifier():
            raise FlowError(f"flows: graph name {name!r} must be an identifier (letters, digits, _ and -)")
        self.name = name
        self.functions = functions
        self.spaces: dict[str, Space] = {}
        self.arcs: list[Arc] = []
        self.total_order_spaces: set[str] = set()
        """Spaces whose subscribers need one order across keys (``require_total_order``)."""
        self.total_everywhere = False
        """``require_total_order()`` without spaces: every group is TOTAL where it has a state."""
        self.per_key_allowed = False
        """``allow_per_key_order()``: groups whose states all key their events alike use per-key order."""

    # --- declaring ---------------------------------------------------------------------

    def history(self, name: str, schema: str | Iterable[tuple[str, str]] | EventSchema) -> History:
        space = History(self._new_name(name), EventSchema.of(schema))
        self.spaces[name] = space
        return space

    def state(self, name: str, keys: str | Iterable[tuple[str, str]], values: str | Iterable[tuple[str, str]]) -> StateSpace:
        space = StateSpace(self._new_name(name), StateSchema.of(keys, values))
        self.spaces[name] = space
        return space

    def select(self, source: str, target: str, predicate: str) -> Arc:
        src, dst = self._history(source), self._history(target)
        if src.schema != dst.schema:
            raise FlowError(f"flows: select {source} -> {target}: schemas differ ({src.schema} vs {dst.schema})")
        return self._add(Arc("select", source, target, select=Select.parse(src.schema, predicate, self.functions)))

    def transform(self, source: str, target: str, rule: str) -> Arc:
        src, dst = self._history(source), self._history(target)
        return self._add(Arc("transform", source, target,
                             transform=Transform.parse(src.schema, dst.schema, rule, self.functions)))

    def collapse(self, source: str, target: str, rules: Iterable[str] | str) -> Arc:
        src, dst = self._history(source), self._state(target)
        if any(a.target == target for a in self.arcs):
            raise FlowError(f"flows: state {target!r} already has its in-arc; a state has exactly one")
        texts = [rules] if isinstance(rules, str) else list(rules)
        return self._add(Arc("collapse", source, target, collapse=Collapse(src.schema, dst.schema, texts,
                                                                            self.functions)))

    def expand(self, source: str, target: str, rules: Iterable[str] | str | None = None,
               values: Iterable[str] | str | None = None) -> Arc:
        """An expand arc. Without ``rules`` it inverts the state's own collapse
        (``target`` has the schema that collapse reads); with ``rules`` (collapse
        rules from ``target``'s events into the state's ``values`` columns) it
        derives a history of its own schema (see the module docstring)."""
        state = self._state(source)
        dst = self._history(target)
        feeding = self.collapse_of(source)
        if feeding is None:
            raise FlowError(f"flows: expand {source} -> {target}: declare the collapse into {source!r} first")
        if self.in_arcs(target):
            raise FlowError(f"flows: expand {source} -> {target}: a history fed by an expand has no other in-arc")
        if rules is not None:
            texts = [rules] if isinstance(rules, str) else list(rules)
            projected = _projection(state, values, f"expand {source} -> {target}")
            return self._add(Arc("expand", source, target, collapse=Collapse(dst.schema, projected, texts,
                                                                              self.functions)))
        if values is not None:
            raise FlowError(f"flows: expand {source} -> {target}: values= needs rules of its own")
        if feeding.has_windows:
            raise FlowError(f"flows: expand {source} -> {target}: {source!r} has a window column, which no event of"
                            f" its source sets alone; give the expand rules of its own over the other columns")
        if feeding.source != dst.schema:
            raise FlowError(f"flows: expand {source} -> {target}: {target!r} must have the schema its collapse reads"
                            f" ({feeding.source}), has {dst.schema}, or the expand needs rules of its own")
        return self._add(Arc("expand", source, target))

    def _new_name(self, name: str) -> str:
        if not isinstance(name, str) or not name.replace("-", "_").isidentifier():
            raise FlowError(f"flows: space name {name!r} must be an identifier")
        if name in self.spaces:
            raise FlowError(f"flows: space {name!r} is declared twice")
        return name

    def _space(self, name: str) -> Space:
        space = self.spaces.get(name)
        if space is None:
            raise FlowError(f"flows: unknown space {name!r} (declared: {', '.join(sorted(self.spaces)) or 'none'})")
        return space

    def _history(self, name: str) -> History:
        space = self._space(name)
        if not isinstance(space, History):
            raise FlowError(f"flows: {name!r} is a state; this arc needs an event history")
        return space

    def _state(self, name: str) -> StateSpace:
        space = self._space(name)
        if not isinstance(space, StateSpace):
            raise FlowError(f"flows: {name!r} is an event history; this arc needs a state")
        return space

    def _add(self, arc: Arc) -> Arc:
        if arc.kind != "expand" and self.expand_source(arc.target) is not None:
            raise FlowError(f"flows: {arc.target!r} is fed by an expand; it has no other in-arc")
        if isinstance(self.spaces[arc.target], StateSpace) and arc.kind != "collapse":
            raise FlowError(f"flows: a state's in-arc must be a collapse, {arc.source} -> {arc.target} is {arc.kind}")
        self.arcs.append(arc)
        if self._cycle() is not None:
            self.arcs.pop()
            raise FlowError(f"flows: arc {arc.source} -> {arc.target} closes a cycle; the graph must be acyclic")
        return arc

    def require_total_order(self, *spaces: str) -> None:
        """Deliver the events that reach ``spaces`` (default: every space) in
        one total order, even where per-key order would do: for subscribers
        of a history who compare events across keys. Every member must hold
        the same graph, this included (it is part of the fingerprint)."""
        for name in spaces:
            self._space(name)
        self.total_order_spaces |= set(spaces)
        self.total_everywhere = self.total_everywhere or not spaces

    def allow_per_key_order(self) -> None:
        """Let a group whose states all key their events alike run in per-key
        order instead of one total order (``perkey.py``). It is cheaper where
        total order is costly (large views, where its promises go by gossip:
        11.5x the throughput measured there); at a few members total order
        costs about one hop and is the faster. History subscribers below such
        a root then see events in per-key order only. Off by default; every
        member must hold the same graph, this included (the fingerprint)."""
        self.per_key_allowed = True

    # --- queries -------------------------------------------------------------------------

    def out_arcs(self, name: str) -> list[Arc]:
        return [a for a in self.arcs if a.source == name]

    def in_arcs(self, name: str) -> list[Arc]:
        return [a for a in self.arcs if a.target == name]

    def roots(self) -> list[str]:
        """Histories publishers publish into: no in-arc, or fed by an expand only."""
        return [n for n, s in self.spaces.items() if isinstance(s, History)
                and all(a.kind == "expand" for a in self.in_arcs(n))]

    def publishable_roots(self) -> list[str]:
        """Roots publishers publish into (those fed by an expand are computed)."""
        return [r for r in self.roots() if self.expand_source(r) is None]

    def expand_source(self, history: str) -> str | None:
        """The state whose changes, expanded, make up ``history`` (None: not fed by an expand)."""
        return next((a.source for a in self.in_arcs(history) if a.kind == "expand"), None)

    def collapse_of(self, state: str) -> Collapse | None:
        return next((a.collapse for a in self.in_arcs(state) if a.kind == "collapse"), None)

    def expansion_into(self, history: str) -> tuple[Collapse, tuple[int, ...]]:
        """The interpretation of a history fed by an expand, and the positions
        in the state's rows of the value columns it interprets."""
        arc = next((a for a in self.in_arcs(history) if a.kind == "expand"), None)
        if arc is None:
            raise FlowError(f"flows: {history!r} is not fed by an expand")
        state = self.spaces[arc.source]
        rule = arc.collapse or self.collapse_of(arc.source)
        assert isinstance(state, StateSpace) and rule is not None
        names = state.schema.value_names
        return rule, tuple(names.index(n) for n in rule.target.value_names)

    def validate(self) -> None:
        """Everything that per-arc checks cannot see; FlowError on the first problem."""
        for name, space in self.spaces.items():
            if isinstance(space, StateSpace) and len(self.in_arcs(name)) != 1:
                raise FlowError(f"flows: state {name!r} has {len(self.in_arcs(name))} in-arcs; it needs exactly one"
                                f" collapse")
        cycle = self._cycle()
        if cycle is not None:
            raise FlowError(f"flows: the graph has a cycle through {' -> '.join(cycle)}")

    def _cycle(self) -> list[str] | None:
        colour: dict[str, int] = {}
        stack: list[str] = []

        def visit(name: str) -> list[str] | None:
            colour[name] = 1
            stack.append(name)
            for arc in self.out_arcs(name):
                if colour.get(arc.target) == 1:
                    return stack[stack.index(arc.target):] + [arc.target]
                if arc.target not in colour:
                    found = visit(arc.target)
                    if found:
                        return found
            stack.pop()
            colour[name] = 2
            return None
        for name in self.spaces:
            if name not in colour:
                found = visit(name)
                if found:
                    return found
        return None

    def downstream(self, name: str) -> set[str]:
        seen: set[str] = set()
        todo = [name]
        while todo:
            for arc in self.out_arcs(todo.pop()):
                if arc.target not in seen:
                    seen.add(arc.target)
                    todo.append(arc.target)
        return seen

    def order_for(self, root: str) -> tuple[str, str]:
        """(``"perkey"``, ``"total"`` or ``"fifo"``, why) for the group carrying ``root``."""
        analysis = self.order_analysis(root)
        return analysis.order, analysis.reason

    def order_analysis(self, root: str) -> "OrderAnalysis":
        """The cheapest order under which every replica of every state fed by
        ``root`` reaches the same rows, why, and the partition key (``perkey.py``)."""
        return _analyse(self, root)

    def __repr__(self) -> str:
        arcs = "; ".join(f"{a.source} -{a.kind}-> {a.target}: "
                         f"{a.select.text if a.select else a.transform.text if a.transform else ''}" for a in self.arcs)
        return f"<FlowGraph {self.name!r} {arcs}>"

    def group_name(self, root: str) -> str:
        """The sgcs group that carries ``root`` (shared with the roots it meets in a state)."""
        return next(g for g, roots in self.root_groups().items() if root in roots)

    def root_groups(self) -> dict[str, list[str]]:
        """group name -> roots it carries. Roots whose events meet in one state
        share a group: a collapse needs one order over all its inputs, and sgcs
        orders messages within a group only."""
        roots = sorted(self.publishable_roots())
        parent = {r: r for r in roots}

        def find(r: str) -> str:
            while parent[r] != r:
                r = parent[r]
            return r
        states_of = {r: {n for n in self.downstream(r) if isinstance(self.spaces[n], StateSpace)} for r in roots}
        for a in roots:
            for b in roots:
                if a < b and states_of[a] & states_of[b]:
                    parent[find(b)] = find(a)
        groups: dict[str, list[str]] = {}
        for r in roots:
            groups.setdefault(find(r), []).append(r)
        return {f"flows:{self.name}:{'+'.join(members)}": members for members in groups.values()}

    def fingerprint(self) -> str:
        """Names the graph's declaration: members compile each other's
        subscriptions only if they hold the same graph."""
        import hashlib
        text = repr(sorted((n, str(s.schema)) for n, s in self.spaces.items())) + repr(
            [(a.kind, a.source, a.target, a.select.text if a.select else a.transform.text if a.transform
              else a.collapse.describe() if a.collapse else "") for a in self.arcs]) + repr(
            [str(a.collapse.target) for a in self.arcs if a.kind == "expand" and a.collapse]) + repr(
            sorted(self.total_order_spaces)) + ("total" if self.total_everywhere else "") + (
            "perkey" if self.per_key_allowed else "")
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    # --- TOML ----------------------------------------------------------------------------

    @classmethod
    def from_toml(cls, text: str, functions: Functions = DEFAULT_FUNCTIONS) -> "FlowGraph":
        """A graph from TOML (see docs/flows.md); FlowError on any problem."""
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as error:
            raise FlowError(f"flows: TOML: {error}") from None
        graph = cls(str(data.get("name", "flows")), functions)
        for name, spec in _table(data, "spaces").items():
            _add_space(graph, name, spec)
        for index, spec in enumerate(data.get("arcs", [])):
            _add_arc(graph, index, spec)
        _add_total_order(graph, data.get("total_order", False))
        per_key = data.get("per_key_order", False)
        if not isinstance(per_key, bool):
            raise FlowError("flows: TOML: per_key_order is true or false")
        if per_key:
            graph.allow_per_key_order()
        graph.validate()
        return graph


# --- order: per key or total (perkey.py) ---------------------------------------------------

@dataclass(frozen=True, slots=True)
class OrderAnalysis:
    """The order a root's group needs, and why (one line)."""

    order: Order
    reason: str
    key: tuple[Node, ...] = ()
    """For ``perkey``: the partition key, as expressions over the root's fields."""


def _analyse(graph: "FlowGraph", root: str) -> OrderAnalysis:
    """The cheapest order under which every replica of every state fed by
    ``root`` reaches the same rows (perkey.py explains when and how)."""
    below = graph.downstream(root) | {root}
    states = sorted(n for n in below if isinstance(graph.spaces[n], StateSpace))
    if not states:
        return OrderAnalysis("fifo", "only selects and transforms downstream: per event, any order per publisher")
    forced = sorted(n for n in below if n in graph.total_order_spaces or graph.total_everywhere)
    if forced:
        return OrderAnalysis("total", f"a total order is required for {', '.join(forced)}")
    expanded = sorted(s for s in states if _fed_through_expand(graph, root, s))
    if expanded:
        return OrderAnalysis("total", f"state {expanded[0]} is fed through an expand, whose events' order across the"
                                 f" keys of its state differs per member without a total order")
    keys: dict[tuple[str, ...], str] = {}
    found: tuple[Node, ...] = ()
    for state in states:
        for composed in _keys_over_root(graph, root, state):
            text = tuple(render(k) for k in composed)
            keys.setdefault(text, state)
            found = composed
    if len(keys) > 1:
        (a, sa), (b, sb) = sorted(keys.items())[:2]
        return OrderAnalysis("total", f"{root} events are keyed differently by {sa} ({', '.join(a)}) and {sb}"
                                 f" ({', '.join(b)}): one event would need two owners")
    why = f"every state below {root} ({', '.join(states)}) keys its events by {', '.join(render(k) for k in found)}"
    if not graph.per_key_allowed:
        return OrderAnalysis("total", f"{why}: per-key order would suffice, but total order is the default"
                                      f" (allow_per_key_order, or per_key_order = true)")
    return OrderAnalysis("perkey", f"{why}: per-key order suffices", found)


def _fed_through_expand(graph: "FlowGraph", root: str, state: str) -> bool:
    """``state`` is reached from ``root`` only through some expand arc."""
    direct = {root} | _history_reach(graph, root)
    collapse = next(a for a in graph.in_arcs(state) if a.kind == "collapse")
    return collapse.source not in direct


def _history_reach(graph: "FlowGraph", space: str) -> set[str]:
    seen: set[str] = set()
    todo = [space]
    while todo:
        for arc in graph.out_arcs(todo.pop()):
            if arc.kind in ("select", "transform") and arc.target not in seen:
                seen.add(arc.target)
                todo.append(arc.target)
    return seen


def _keys_over_root(graph: "FlowGraph", root: str, state: str) -> list[tuple[Node, ...]]:
    """The state's key, rewritten into ``root``'s fields (R3 along each path), once per path."""
    collapse = graph.collapse_of(state)
    source = next(a.source for a in graph.in_arcs(state) if a.kind == "collapse")
    space = graph.spaces[root]
    assert collapse is not None and isinstance(space, History)
    out = []
    for transform in _transforms_to(graph, root, source, Transform.identity(space.schema)):
        mapping = transform.mapping()
        out.append(tuple(fold(substitute(k, mapping), graph.functions) for k in collapse.key_exprs))
    return out


def _transforms_to(graph: "FlowGraph", here: str, target: str, so_far: Transform) -> list[Transform]:
    """The composed transform of every select/transform path from ``here`` to ``target``."""
    found = [so_far] if here == target else []
    for arc in graph.out_arcs(here):
        if arc.kind == "select":
            found += _transforms_to(graph, arc.target, target, so_far)
        elif arc.kind == "transform" and arc.transform is not None:
            found += _transforms_to(graph, arc.target, target, r3_compose(so_far, arc.transform, graph.functions))
    return found


def _table(data: dict[str, Any], key: str) -> dict[str, Any]:
    value = data.get(key, {})
    if not isinstance(value, dict):
        raise FlowError(f"flows: TOML: [{key}] must be a table")
    return value


def _add_space(graph: FlowGraph, name: str, spec: Any) -> None:
    if not isinstance(spec, dict):
        raise FlowError(f"flows: TOML: spaces.{name} must be a table")
    if "fields" in spec:
        graph.history(name, spec["fields"])
    elif "key" in spec and "values" in spec:
        graph.state(name, spec["key"], spec["values"])
    else:
        raise FlowError(f"flows: TOML: spaces.{name} needs fields = \"...\" (a history) or key and values (a state)")


def _add_arc(graph: FlowGraph, index: int, spec: Any) -> None:
    if not isinstance(spec, dict) or "from" not in spec or "to" not in spec:
        raise FlowError(f"flows: TOML: arcs[{index}] needs from and to")
    kinds = [k for k in ("select", "transform", "collapse", "expand") if k in spec]
    if len(kinds) != 1:
        raise FlowError(f"flows: TOML: arcs[{index}] needs exactly one of select, transform, collapse, expand")
    source, target, kind = str(spec["from"]), str(spec["to"]), kinds[0]
    if kind == "select":
        graph.select(source, target, str(spec["select"]))
    elif kind == "transform":
        graph.transform(source, target, str(spec["transform"]))
    elif kind == "collapse":
        rules = spec["collapse"]
        graph.collapse(source, target, [str(r) for r in rules] if isinstance(rules, list) else str(rules))
    else:
        _add_expand(graph, index, source, target, spec)


def _add_total_order(graph: FlowGraph, value: Any) -> None:
    """``total_order = true`` (every space) or a list of spaces."""
    if value is True:
        graph.require_total_order()
    elif isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        graph.require_total_order(*value)
    elif value is not False:
        raise FlowError("flows: TOML: total_order is true, false or a list of space names")


def _add_expand(graph: FlowGraph, index: int, source: str, target: str, spec: dict[str, Any]) -> None:
    rules, values = spec["expand"], spec.get("values")
    if rules is True:
        graph.expand(source, target, values=values)
    elif isinstance(rules, (str, list)):
        graph.expand(source, target, [str(r) for r in rules] if isinstance(rules, list) else rules,
                     [str(v) for v in values] if isinstance(values, list) else values)
    else:
        raise FlowError(f"flows: TOML: arcs[{index}]: expand is true or the expand's own rules")


def _projection(state: StateSpace, values: Iterable[str] | str | None, where: str) -> StateSchema:
    """The state's keys and the ``values`` columns (default: every column but the windows)."""
    kinds = dict(state.schema.values)
    if values is None:
        names = [n for n, k in state.schema.values if not windows.is_window(k)]
    else:
        names = [v.strip() for v in values.split(",")] if isinstance(values, str) else list(values)
    for name in names:
        if name not in kinds:
            raise FlowError(f"flows: {where}: {name!r} is not a value column of {state.name!r} ({state.schema})")
        if windows.is_window(kinds[name]):
            raise FlowError(f"flows: {where}: an expand interprets scalar columns; {name!r} is a window")
    if not names or len(set(names)) != len(names):
        raise FlowError(f"flows: {where}: values must name one or more columns, each once")
    return StateSchema(state.schema.keys, tuple((n, kinds[n]) for n in names))
