"""Evaluating the flow language without ``eval``: ASTs become closures.

Theory of operation (Gryphon, select and transform arcs run per event at the
brokers): an expression is compiled once into nested Python closures, one per
AST node, that read names from a ``dict``; the per-event cost is then a few
calls per node and no parsing, no dispatch on node types.

Partial operations (``x / 0``, ``x % 0``) raise ``EvalError``. The rule that
makes rewriting sound (``compiler.py``): an error anywhere in a predicate
makes the predicate false, and an error anywhere in a transform drops the
event, whichever arc it occurred in. Both the original graph and the
rewritten one drop exactly the events that fail.

``Memo`` evaluates a shared subexpression once per event for all
subscriptions that contain it (the compiler's common subexpressions).
"""

from __future__ import annotations

import operator
from typing import Callable, Mapping

from .schema import DEFAULT_FUNCTIONS, Functions
from .syntax import Binary, Call, Const, Name, Node, Unary, Value

Env = Mapping[str, Value]
Compiled = Callable[[Env], Value]


class EvalError(Exception):
    """An expression is undefined on this event (division by zero)."""


def _divide(a: Value, b: Value) -> Value:
    if b == 0:
        raise EvalError("division by zero")
    return a / b  # type: ignore[operator]


def _modulo(a: Value, b: Value) -> Value:
    if b == 0:
        raise EvalError("modulo by zero")
    return a % b  # type: ignore[operator]


_ARITHMETIC: dict[str, Callable[[Value, Value], Value]] = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "/": _divide, "%": _modulo,
    "=": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
}


def compile_node(node: Node, functions: Functions = DEFAULT_FUNCTIONS) -> Compiled:
    """A closure computing ``node`` from an environment of names."""
    if isinstance(node, Const):
        value = node.value
        return lambda env: value
    if isinstance(node, Name):
        name = node.name
        return lambda env: env[name]
    if isinstance(node, Unary):
        inner = compile_node(node.operand, functions)
        if node.op == "!":
            return lambda env: not inner(env)
        return lambda env: -inner(env)  # type: ignore[operator]
    if isinstance(node, Binary):
        return _compile_binary(node, functions)
    impl = functions.table[node.function].impl
    args = tuple(compile_node(a, functions) for a in node.args)
    return lambda env: impl(*(a(env) for a in args))


def _compile_binary(node: Binary, functions: Functions) -> Compiled:
    if node.op in _COMPARISONS:
        direct = _field_against_constant(node)
        if direct is not None:
            return direct
    left, right = compile_node(node.left, functions), compile_node(node.right, functions)
    if node.op == "&":
        return lambda env: bool(left(env)) and bool(right(env))
    if node.op == "|":
        return lambda env: bool(left(env)) or bool(right(env))
    op = _ARITHMETIC[node.op]
    return lambda env: op(left(env), right(env))


_COMPARISONS = ("=", "!=", "<", "<=", ">", ">=")


def _field_against_constant(node: Binary) -> Compiled | None:
    """``price < 120`` as one closure instead of three: the commonest test in
    subscriptions, evaluated for every candidate event."""
    op = _ARITHMETIC[node.op]
    if isinstance(node.left, Name) and isinstance(node.right, Const):
        name, value = node.left.name, node.right.value
        return lambda env: op(env[name], value)
    if isinstance(node.left, Const) and isinstance(node.right, Name):
        name, value = node.right.name, node.left.value
        return lambda env: op(value, env[name])
    return None


def compile_predicate(node: Node, functions: Functions = DEFAULT_FUNCTIONS) -> Callable[[Env], bool]:
    """A predicate that is false wherever the expression is undefined."""
    inner = compile_node(node, functions)
    if _plain(node):
        return inner  # type: ignore[return-value]  # bool already, and nothing in it can fail: no wrapper to pay for

    def predicate(env: Env) -> bool:
        try:
            return bool(inner(env))
        except (EvalError, OverflowError):  # an int too large to compare with a float is undefined too
            return False
    return predicate


def _plain(node: Node) -> bool:
    """Only ``field op constant`` tests (and boolean constants) joined by ``& | !``:
    its value is a bool, and evaluating it raises nothing."""
    if isinstance(node, Binary) and node.op in ("&", "|"):
        return _plain(node.left) and _plain(node.right)
    if isinstance(node, Unary) and node.op == "!":
        return _plain(node.operand)
    if isinstance(node, Binary) and node.op in _COMPARISONS:
        return {type(node.left), type(node.right)} == {Name, Const}
    return isinstance(node, Const) and isinstance(node.value, bool)


def evaluate(node: Node, env: Env, functions: Functions = DEFAULT_FUNCTIONS) -> Value:
    """One-off evaluation (tests, constant folding); raises EvalError."""
    return compile_node(node, functions)(env)


def may_fail(node: Node) -> bool:
    """True if evaluating ``node`` can raise EvalError (a division or modulo
    whose divisor is not a non-zero constant)."""
    if isinstance(node, Binary):
        if node.op in ("/", "%") and not (isinstance(node.right, Const) and node.right.value != 0):
            return True
        return may_fail(node.left) or may_fail(node.right)
    if isinstance(node, Unary):
        return may_fail(node.operand)
    if isinstance(node, Call):
        return any(may_fail(a) for a in node.args)
    return False


class Memo:
    """Evaluates many predicates over one event, each distinct subexpression
    once: the matching engine's common subexpressions (``compiler.py``).

    ``add`` registers a predicate and returns its index; ``match(env)``
    returns the indices whose predicate holds."""

    def __init__(self, functions: Functions = DEFAULT_FUNCTIONS) -> None:
        self._functions = functions
        self._slots: dict[Node, int] = {}
        self._programs: list[Callable[[Env, list[object]], Value]] = []
        self._roots: list[int] = []

    @property
    def distinct_nodes(self) -> int:
        return len(self._slots)

    def add(self, node: Node) -> int:
        self._roots.append(self._slot(node))
        return len(self._roots) - 1

    def _slot(self, node: Node) -> int:
        slot = self._slots.get(node)
        if slot is None:
            program = self._program(node)
            slot = len(self._programs)
            self._slots[node] = slot
            self._programs.append(program)
        return slot

    def _program(self, node: Node) -> Callable[[Env, list[object]], Value]:
        if isinstance(node, Binary) and node.op in ("&", "|"):
            left, right = self._slot(node.left), self._slot(node.right)
            get = self._get
            if node.op == "&":
                return lambda env, cache: bool(get(left, env, cache)) and bool(get(right, env, cache))
            return lambda env, cache: bool(get(left, env, cache)) or bool(get(right, env, cache))
        if isinstance(node, Unary) and node.op == "!":
            inner = self._slot(node.operand)
            return lambda env, cache: not self._get(inner, env, cache)
        leaf = compile_node(node, self._functions)  # comparisons and below: small, evaluated whole
        return lambda env, cache: leaf(env)

    def _get(self, slot: int, env: Env, cache: list[object]) -> Value:
        value = cache[slot]
        if value is _UNSET:
            value = self._programs[slot](env, cache)
            cache[slot] = value
        if value is _FAILED:
            raise EvalError("memoised failure")
        return value  # type: ignore[return-value]

    def match(self, env: Env) -> list[int]:
        cache: list[object] = [_UNSET] * len(self._programs)
        matched = []
        for index, root in enumerate(self._roots):
            try:
                if self._get(root, env, cache):
                    matched.append(index)
            except EvalError:
                cache[root] = _FAILED
        return matched


_UNSET = object()
_FAILED = object()
