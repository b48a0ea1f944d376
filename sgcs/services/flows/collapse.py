"""The collapse engine: an event history folded into a keyed state.

Theory of operation (Gryphon, *collapse* arcs and "interpretations"): a
collapse arc turns the history of its source space into a state by rules::

    [n,p,v] -> <n: p, p>                                  (a key seen first)
    [n,p,v], <n: maxP, curP>, p > maxP  -> <n: p, p>
    [n,p,v], <n: maxP, curP>, p <= maxP -> <n: maxP, p>

Each event selects one row by the key the rules compute from it (every rule
must compute the key alike: the state is *keyed*, which is what lets the
order be per key and catch-up work per key). The first rule whose shape fits
(a rule without ``<...>`` fits only a missing row, the others only a present
one) and whose guard holds gives the row's new value; if none fits the event
does not change the state. A guard that fails (division by zero) is false.

``Collapse`` holds the parsed, type-checked rules; ``State`` is a relation
``key -> row`` with ``apply(event)``; ``expand.py`` inverts the rules.

A value column may be a window (``float[W]``: the last W values, for the
paper's "recent" aggregates, ``window.py``). Its size comes from the schema:
compiling a rule turns ``push(w, p)`` into ``push(w, p, W)``, and each new row
cuts its windows to W, so a key's row never holds more than W numbers per
window whatever the rules say.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, Sequence

from . import window as windows
from .evaluate import Env, EvalError, compile_node, compile_predicate
from .rules import bind_pattern, substitute
from .schema import DEFAULT_FUNCTIONS, EventSchema, Functions, StateSchema, TypeEnv, check_predicate, type_of, widens
from .syntax import Binary, Call, Const, FlowError, Name, Node, Unary, Value, parse_collapse

Key = tuple[Value, ...]
Row = tuple[Value, ...]


@dataclass(frozen=True, slots=True)
class Rule:
    """One parsed collapse rule, its variables resolved."""

    text: str
    creates: bool
    """True: applies only where the key has no row yet."""
    event_vars: Mapping[str, str]
    """variable -> source field."""
    key_vars: tuple[str, ...]
    state_vars: tuple[str, ...]
    """One per value field of the state, in order; empty when ``creates``."""
    guard: Node
    values: tuple[Node, ...]
    """The new row, one expression per value field, over the rule's variables."""


@dataclass(slots=True)
class _Compiled:
    creates: bool
    env_of: Callable[[Sequence[Value], Key, Row | None], dict[str, Value]]
    guard: Callable[[Env], bool]
    values: Callable[[Env], Row]


class Collapse:
    """The rules of one collapse arc, from ``source`` events to a ``target`` state."""

    def __init__(self, source: EventSchema, target: StateSchema, texts: Iterable[str],
                 functions: Functions = DEFAULT_FUNCTIONS) -> None:
        self.source, self.target, self.functions = source, target, functions
        self.rules: tuple[Rule, ...] = tuple(self._parse(text) for text in texts)
        if not self.rules:
            raise FlowError("flows: a collapse needs at least one rule")
        self.key_exprs = self._common_key()
        self._key_fns = [compile_node(k, functions) for k in self.key_exprs]
        self._compiled = [self._compile(rule) for rule in self.rules]
        self._field_index = {name: i for i, name in enumerate(source.names)}

    # --- parsing and checking ------------------------------------------------------------

    def _parse(self, text: str) -> Rule:
        parsed = parse_collapse(text)
        event_vars = bind_pattern(parsed.event, self.source, text)
        types = {var: self.source.types()[f] for var, f in event_vars.items()}
        keys, values = self.target.keys, self.target.values
        key_vars: tuple[str, ...] = ()
        state_vars: tuple[str, ...] = ()
        if parsed.state is not None:
            key_vars, state_vars = parsed.state.keys, parsed.state.values
            if len(key_vars) != len(keys) or len(state_vars) != len(values):
                raise FlowError(f'flows: state pattern needs {len(keys)} key and {len(values)} value variable(s)'
                                f' ({self.target}) in "{text}"')
            for var, (_, kind) in zip(key_vars + state_vars, keys + values):
                if var in types and types[var] != kind and var not in key_vars:
                    raise FlowError(f'flows: variable {var!r} is bound twice in "{text}"')
                types.setdefault(var, kind)
        env = TypeEnv(types, text, self.functions)
        check_predicate(parsed.guard, env)
        if len(parsed.keys) != len(keys) or len(parsed.values) != len(values):
            raise FlowError(f'flows: result needs {len(keys)} key and {len(values)} value(s) ({self.target})'
                            f' in "{text}"')
        for node, (name, kind) in zip(parsed.keys + parsed.values, keys + values):
            have = type_of(node, env)
            if not widens(have, kind):
                raise FlowError(f'flows: result {name!r} must be {kind}, the rule gives {have} in "{text}"')
        guard = _bind_capacities(parsed.guard, env)
        bound = tuple(_bind_capacities(v, env) for v in parsed.values)
        return Rule(text, parsed.state is None, event_vars, key_vars, state_vars, guard, bound)

    def _common_key(self) -> tuple[Node, ...]:
        """The key as expressions over source fields; the same for every rule."""
        common: tuple[Node, ...] | None = None
        for rule in self.rules:
            parsed = parse_collapse(rule.text)
            to_fields = {var: Name(f) for var, f in rule.event_vars.items()}
            if any(not (n.name in rule.event_vars) for k in parsed.keys for n in _names(k)):
                raise FlowError(f'flows: the key must be computed from the event alone in "{rule.text}"')
            keys = tuple(substitute(k, to_fields) for k in parsed.keys)
            if common is not None and keys != common:
                raise FlowError(f'flows: every collapse rule must compute the key alike; "{rule.text}" differs')
            common = keys
            if not rule.creates and parsed.state is not None:
                for var, key in zip(rule.key_vars, keys):  # <n: ...> must name the event's own key
                    bound = rule.event_vars.get(var)
                    if bound is not None and Name(bound) != key:
                        raise FlowError(f'flows: key variable {var!r} is not the row key in "{rule.text}"')
        assert common is not None
        return common

    def _compile(self, rule: Rule) -> _Compiled:
        positions = [(var, self.source.names.index(f)) for var, f in rule.event_vars.items()]
        key_vars, state_vars = rule.key_vars, rule.state_vars

        def env_of(event: Sequence[Value], key: Key, row: Row | None) -> dict[str, Value]:
            env = {var: event[i] for var, i in positions}
            env.update(zip(key_vars, key))
            if row is not None:
                env.update(zip(state_vars, row))
            return env
        values = [compile_node(v, self.functions) for v in rule.values]
        shapes = [_shape(kind) for _, kind in self.target.values]

        def new_row(env: Env) -> Row:
            return tuple(shape(v(env)) for v, shape in zip(values, shapes))
        return _Compiled(rule.creates, env_of, compile_predicate(rule.guard, self.functions), new_row)

    @property
    def has_windows(self) -> bool:
        """Some value column is a window (``float[W]``)."""
        return any(windows.is_window(kind) for _, kind in self.target.values)

    # --- the engine ----------------------------------------------------------------------

    def key_of(self, event: Sequence[Value]) -> Key:
        env = dict(zip(self.source.names, event))
        return tuple(k(env) for k in self._key_fns)

    def step(self, event: Sequence[Value], key: Key, row: Row | None) -> Row | None:
        """The key's new row after ``event``, or None when no rule fires."""
        for rule in self._compiled:
            if rule.creates != (row is None):
                continue
            env = rule.env_of(event, key, row)
            if rule.guard(env):
                try:
                    return rule.values(env)
                except (EvalError, OverflowError):
                    return None  # an undefined result changes nothing
        return None

    def describe(self) -> str:
        return "; ".join(r.text for r in self.rules)


def _shape(kind: str) -> Callable[[Value], Value]:
    """What a new row's column holds: a float for ``float``, the last W numbers for ``float[W]``."""
    limit = windows.capacity(kind)
    if limit is not None:
        return lambda value: tuple(float(x) for x in value[-limit:])  # type: ignore[index,arg-type]
    if kind == "float":
        return lambda value: float(value)  # type: ignore[arg-type]
    return lambda value: value


def _bind_capacities(node: Node, env: TypeEnv) -> Node:
    """``push(w, p)`` as ``push(w, p, W)`` where ``w`` is a ``float[W]``."""
    if isinstance(node, Unary):
        return Unary(node.op, _bind_capacities(node.operand, env), node.pos)
    if isinstance(node, Binary):
        return Binary(node.op, _bind_capacities(node.left, env), _bind_capacities(node.right, env), node.pos)
    if not isinstance(node, Call):
        return node
    args = tuple(_bind_capacities(a, env) for a in node.args)
    function = env.functions.table.get(node.function)
    if function is not None and function.impl is windows.push and len(args) == 2:
        limit = windows.capacity(type_of(node.args[0], env))
        if limit is not None:
            args += (Const(limit),)
    return Call(node.function, args, node.pos)


def _names(node: Node) -> list[Name]:
    if isinstance(node, Name):
        return [node]
    if isinstance(node, Unary):
        return _names(node.operand)
    if isinstance(node, Binary):
        return _names(node.left) + _names(node.right)
    if isinstance(node, Call):
        return [n for a in node.args for n in _names(a)]
    return []


@dataclass(slots=True)
class State:
    """A keyed relation maintained by one collapse: ``rows[key] = row``."""

    collapse: Collapse
    rows: dict[Key, Row] = field(default_factory=dict)
    applied: int = 0
    """Events that changed a row."""

    def apply(self, event: Sequence[Value]) -> Key | None:
        """Fold one event in; the key whose row changed, or None."""
        key = self.collapse.key_of(event)
        row = self.rows.get(key)
        new = self.collapse.step(event, key, row)
        if new is None or new == row:
            return None
        self.rows[key] = new
        self.applied += 1
        return key

    def apply_all(self, events: Iterable[Sequence[Value]]) -> None:
        for event in events:
            self.apply(event)

    def copy(self) -> "State":
        return State(self.collapse, dict(self.rows), self.applied)

    def records(self) -> list[dict[str, Value]]:
        """The rows as dicts of the state schema's fields, sorted by key."""
        names = self.collapse.target.key_names + self.collapse.target.value_names
        return [dict(zip(names, key + row)) for key, row in sorted(self.rows.items())]
