"""Schemas of information spaces, the function registry, and the type checker.

Theory of operation (Gryphon, "information spaces"): every space has a
schema. An *event history* is a growing sequence of typed tuples, e.g.
``issue: str, price: float, capital: float``; a *state* is a keyed relation,
e.g. ``issue: str`` -> ``maxPrice: float, curPrice: float``. Expressions are
checked against the schema of the space they read before anything runs, so
a typo or a string compared with a number is a one-line ``FlowError`` at
declaration time, never a surprise per event.

Types are ``int``, ``float``, ``str`` and ``bool``. An ``int`` is accepted
wherever a ``float`` is expected (widening); ``/`` always gives a float.
Functions come from a registry (``Functions``): a name, parameter types, a
result type, and a total Python function (the paper's ``NAS(i)``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, Sequence

from . import window as windows
from .syntax import Binary, Call, Const, FlowError, Name, Node, Unary, Value, error_at

TYPES = ("int", "float", "str", "bool")
"""Scalar types; a state value column may also be a window, ``float[W]`` (``window.py``)."""
NUMERIC = ("int", "float")
_PY_TYPES: dict[str, tuple[type, ...]] = {"int": (int,), "float": (int, float), "str": (str,), "bool": (bool,)}


def _parse_fields(spec: str | Iterable[tuple[str, str]], what: str) -> tuple[tuple[str, str], ...]:
    """``"issue: str, price: float"`` or ``[("issue", "str"), ...]``."""
    if isinstance(spec, str):
        pairs = []
        for part in (p.strip() for p in spec.split(",") if p.strip()):
            name, sep, kind = (x.strip() for x in part.partition(":"))
            if not sep:
                raise FlowError(f"flows: {what} field {part!r} needs a type, e.g. '{part}: float'")
            pairs.append((name, kind))
    else:
        pairs = [(str(n), str(t)) for n, t in spec]
    seen: set[str] = set()
    for name, kind in pairs:
        if not name.isidentifier():
            raise FlowError(f"flows: {what} field name {name!r} is not an identifier")
        if windows.is_window(kind) and what == "state value":
            _check_capacity(name, kind)
        elif kind not in TYPES:
            windowed = " (a window, float[W], only as a state value)" if windows.is_window(kind) else ""
            raise FlowError(f"flows: {what} field {name!r} has unknown type {kind!r}{windowed}; use one of"
                            f" {', '.join(TYPES)}")
        if name in seen:
            raise FlowError(f"flows: {what} field {name!r} appears twice")
        seen.add(name)
    if not pairs:
        raise FlowError(f"flows: a {what} schema needs at least one field")
    return tuple(pairs)


def _check_capacity(name: str, kind: str) -> None:
    limit = windows.capacity(kind)
    if limit is None or not 1 <= limit <= windows.MAX_CAPACITY:
        raise FlowError(f"flows: window {name!r} needs a size from 1 to {windows.MAX_CAPACITY}, e.g. 'float[20]'")


def check_value(kind: str, value: object, where: str) -> Value:
    """``value`` as a value of type ``kind`` (ints widen to float), or FlowError."""
    if windows.is_window(kind):
        return _check_window(kind, value, where)
    if type(value) is bool and kind != "bool":
        raise FlowError(f"flows: {where} must be {kind}, got bool")
    if not isinstance(value, _PY_TYPES[kind]):
        raise FlowError(f"flows: {where} must be {kind}, got {type(value).__name__}")
    if kind == "float":
        try:
            number = float(value)  # type: ignore[arg-type]
        except OverflowError:
            raise FlowError(f"flows: {where} is too large for a float") from None
        if not math.isfinite(number):
            raise FlowError(f"flows: {where} must be a finite number")
        return number
    return value  # type: ignore[return-value]


def _check_window(kind: str, value: object, where: str) -> Value:
    limit = windows.capacity(kind) or windows.MAX_CAPACITY
    if not isinstance(value, (list, tuple)) or not 1 <= len(value) <= limit:
        raise FlowError(f"flows: {where} must be a window of 1 to {limit} numbers")
    return tuple(float(check_value("float", v, where)) for v in value)  # type: ignore[arg-type]  # a float, checked


@dataclass(frozen=True, slots=True)
class EventSchema:
    """The schema of an event history: ordered, typed fields."""

    fields: tuple[tuple[str, str], ...]

    @classmethod
    def of(cls, spec: "str | Iterable[tuple[str, str]] | EventSchema") -> "EventSchema":
        return spec if isinstance(spec, EventSchema) else cls(_parse_fields(spec, "event"))

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.fields)

    def types(self) -> dict[str, str]:
        return dict(self.fields)

    def event(self, values: Mapping[str, object] | Sequence[object]) -> tuple[Value, ...]:
        """A checked event tuple from a mapping by field or a sequence by position."""
        if isinstance(values, Mapping):
            extra = set(values) - set(self.names)
            if extra:
                raise FlowError(f"flows: event has unknown field(s) {sorted(extra)}; schema is {self}")
            missing = [n for n in self.names if n not in values]
            if missing:
                raise FlowError(f"flows: event lacks field(s) {missing}; schema is {self}")
            raw = [values[n] for n in self.names]
        else:
            raw = list(values)
            if len(raw) != len(self.fields):
                raise FlowError(f"flows: event has {len(raw)} values, schema {self} has {len(self.fields)}")
        return tuple(check_value(t, v, f"field {n!r}") for (n, t), v in zip(self.fields, raw))

    def __str__(self) -> str:
        return ", ".join(f"{n}: {t}" for n, t in self.fields)


@dataclass(frozen=True, slots=True)
class StateSchema:
    """The schema of a state: key fields -> value fields (one row per key)."""

    keys: tuple[tuple[str, str], ...]
    values: tuple[tuple[str, str], ...]

    @classmethod
    def of(cls, keys: str | Iterable[tuple[str, str]], values: str | Iterable[tuple[str, str]]) -> "StateSchema":
        schema = cls(_parse_fields(keys, "state key"), _parse_fields(values, "state value"))
        clash = set(schema.key_names) & set(schema.value_names)
        if clash:
            raise FlowError(f"flows: state field(s) {sorted(clash)} are both key and value")
        return schema

    @property
    def key_names(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.keys)

    @property
    def value_names(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.values)

    def types(self) -> dict[str, str]:
        return dict(self.keys + self.values)

    def __str__(self) -> str:
        return f"<{', '.join(f'{n}: {t}' for n, t in self.keys)} : {', '.join(f'{n}: {t}' for n, t in self.values)}>"


# --- functions ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Function:
    params: tuple[str, ...]
    result: str
    impl: Callable[..., Value]


def _nas(issue: str) -> str:
    # The paper's NAS(i) names an issue as the NAS exchange lists it; total by construction.
    return "NAS:" + issue.upper()


@dataclass(slots=True)
class Functions:
    """The functions expressions may call; copy ``DEFAULT_FUNCTIONS`` to add your own."""

    table: dict[str, Function] = field(default_factory=dict)

    def register(self, name: str, params: Sequence[str], result: str, impl: Callable[..., Value]) -> None:
        if not name.isidentifier():
            raise FlowError(f"flows: function name {name!r} is not an identifier")
        for kind in (*params, result):
            if kind not in TYPES and kind != windows.WINDOW:
                raise FlowError(f"flows: function {name!r} uses unknown type {kind!r}")
        self.table[name] = Function(tuple(params), result, impl)

    def copy(self) -> "Functions":
        return Functions(dict(self.table))


DEFAULT_FUNCTIONS = Functions()
for _name, _params, _result, _impl in (
    ("NAS", ("str",), "str", _nas),
    ("upper", ("str",), "str", str.upper),
    ("lower", ("str",), "str", str.lower),
    ("len", ("str",), "int", len),
    ("abs", ("float",), "float", lambda x: abs(float(x))),
    ("min", ("float", "float"), "float", lambda a, b: float(min(a, b))),
    ("max", ("float", "float"), "float", lambda a, b: float(max(a, b))),
    ("floor", ("float",), "int", math.floor),
):
    DEFAULT_FUNCTIONS.register(_name, _params, _result, _impl)
for _window_function in windows.FUNCTIONS:
    DEFAULT_FUNCTIONS.register(*_window_function)


# --- the type checker ----------------------------------------------------------------------


def widens(have: str, want: str) -> bool:
    """A value of type ``have`` may stand where ``want`` is expected. Any window
    stands for any other: a row cuts it to its column's size."""
    if windows.is_window(have) or windows.is_window(want):
        return windows.is_window(have) and windows.is_window(want)
    return have == want or (have == "int" and want == "float")


class TypeEnv:
    """Types of the names an expression may read, and the text for errors."""

    __slots__ = ("names", "text", "functions")

    def __init__(self, names: Mapping[str, str], text: str, functions: Functions = DEFAULT_FUNCTIONS) -> None:
        self.names, self.text, self.functions = names, text, functions


def type_of(node: Node, env: TypeEnv) -> str:
    """The type of ``node``; FlowError with the column of the culprit."""
    if isinstance(node, Const):
        return {bool: "bool", int: "int", float: "float", str: "str"}[type(node.value)]
    if isinstance(node, Name):
        if node.name not in env.names:
            known = ", ".join(sorted(env.names)) or "none"
            raise error_at(f"unknown name {node.name!r} (known: {known})", env.text, node.pos)
        return env.names[node.name]
    if isinstance(node, Unary):
        inner = type_of(node.operand, env)
        want = ("bool",) if node.op == "!" else NUMERIC
        if inner not in want:
            raise error_at(f"{node.op!r} needs {' or '.join(want)}, got {inner}", env.text, node.pos)
        return inner
    if isinstance(node, Binary):
        return _binary_type(node, type_of(node.left, env), type_of(node.right, env), env)
    return _call_type(node, env)


def _binary_type(node: Binary, left: str, right: str, env: TypeEnv) -> str:
    op = node.op
    if op in ("&", "|"):
        if left != "bool" or right != "bool":
            raise error_at(f"{op!r} needs bool on both sides, got {left} and {right}", env.text, node.pos)
        return "bool"
    if op in ("=", "!="):
        if not (left == right or (left in NUMERIC and right in NUMERIC)):
            raise error_at(f"{op!r} compares {left} with {right}", env.text, node.pos)
        return "bool"
    if op in ("<", "<=", ">", ">="):
        if not ((left in NUMERIC and right in NUMERIC) or left == right == "str"):
            raise error_at(f"{op!r} needs two numbers or two strings, got {left} and {right}", env.text, node.pos)
        return "bool"
    if op == "+" and left == right == "str":
        return "str"
    if left not in NUMERIC or right not in NUMERIC:
        raise error_at(f"{op!r} needs numbers, got {left} and {right}", env.text, node.pos)
    if op == "/":
        return "float"
    return "int" if left == right == "int" else "float"


def _call_type(node: Call, env: TypeEnv) -> str:
    function = env.functions.table.get(node.function)
    if function is None:
        known = ", ".join(sorted(env.functions.table))
        raise error_at(f"unknown function {node.function!r} (known: {known})", env.text, node.pos)
    if len(node.args) != len(function.params):
        raise error_at(f"{node.function} takes {len(function.params)} argument(s), got {len(node.args)}",
                       env.text, node.pos)
    kinds = [type_of(arg, env) for arg in node.args]
    for arg, want, have in zip(node.args, function.params, kinds):
        if not widens(have, want):
            raise error_at(f"{node.function} needs {want}, got {have}", env.text, getattr(arg, "pos", node.pos))
    if function.result == windows.WINDOW and function.params[:1] == (windows.WINDOW,):
        return kinds[0]  # push(w, p) is a window of w's size
    return function.result


def check_predicate(node: Node, env: TypeEnv) -> None:
    kind = type_of(node, env)
    if kind != "bool":
        raise error_at(f"a predicate must be bool, this is {kind}", env.text, getattr(node, "pos", 0))
