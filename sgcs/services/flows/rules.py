"""Select and transform arcs as typed values, and the algebra R1-R3 rewrites with.

Theory of operation (Gryphon, "rewriting rules"): a *select* is a predicate
over its space's fields; a *transform* maps each field of the destination
schema to an expression over the source fields. Pattern variables
(``[issue:i, price:p]``) are replaced by the field names they bind, so both
are plain expressions over field names and the three rules are substitution:

* R1 ``T; S(p)`` = ``S(p[fields := T]); T``: the select moves ahead of the
  transform by substituting the transform's outputs into its predicate;
* R2 ``S(p); S(q)`` = ``S(p & q)``;
* R3 ``T1; T2`` = ``T2[fields := T1]``.

A transform also carries ``checks``: expressions that must be defined for the
event to pass. R3 keeps there the outputs of ``T1`` that ``T2`` drops, so a
division by zero that dropped the event in the original path still drops it
in the composed one (``evaluate.py`` states the error rule).

``fold`` simplifies constants and boolean identities, only where that cannot
change which events fail.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping

from .evaluate import Env, EvalError, compile_node, compile_predicate, evaluate, may_fail
from .schema import DEFAULT_FUNCTIONS, EventSchema, Functions, TypeEnv, check_predicate, type_of, widens
from .syntax import (FALSE, TRUE, Binary, Call, Const, EventPattern, FlowError, Name, Node, Unary, Value,
                     names_in, parse_expression, parse_transform)


def substitute(node: Node, mapping: Mapping[str, Node]) -> Node:
    """``node`` with every name in ``mapping`` replaced, simultaneously."""
    if isinstance(node, Name):
        return mapping.get(node.name, node)
    if isinstance(node, Unary):
        return Unary(node.op, substitute(node.operand, mapping), node.pos)
    if isinstance(node, Binary):
        return Binary(node.op, substitute(node.left, mapping), substitute(node.right, mapping), node.pos)
    if isinstance(node, Call):
        return Call(node.function, tuple(substitute(a, mapping) for a in node.args), node.pos)
    return node


def fold(node: Node, functions: Functions = DEFAULT_FUNCTIONS) -> Node:
    """Constant folding and boolean identities that keep failures as they are."""
    if isinstance(node, Unary):
        inner = fold(node.operand, functions)
        if isinstance(inner, Unary) and inner.op == node.op:  # !!x = x, --x = x
            return inner.operand
        node = Unary(node.op, inner, node.pos)
    elif isinstance(node, Binary):
        left, right = fold(node.left, functions), fold(node.right, functions)
        if node.op in ("&", "|"):
            return _fold_logic(node.op, left, right)
        node = Binary(node.op, left, right, node.pos)
    elif isinstance(node, Call):
        node = Call(node.function, tuple(fold(a, functions) for a in node.args), node.pos)
    else:
        return node
    if _constant(node):
        try:
            return Const(evaluate(node, {}, functions))
        except EvalError:
            return node  # keep the failure where it is
    return node


def _constant(node: Node) -> bool:
    if isinstance(node, Const):
        return True
    if isinstance(node, Unary):
        return isinstance(node.operand, Const)
    if isinstance(node, Binary):
        return isinstance(node.left, Const) and isinstance(node.right, Const)
    if isinstance(node, Call):
        return all(isinstance(a, Const) for a in node.args)
    return False


def _fold_logic(op: str, left: Node, right: Node) -> Node:
    absorbing, neutral = (FALSE, TRUE) if op == "&" else (TRUE, FALSE)
    if left == absorbing:
        return absorbing  # evaluation stops at the left operand: the right one never fails
    if left == neutral:
        return right
    if right == neutral:
        return left
    if right == absorbing and not may_fail(left):
        return absorbing
    if left == right:
        return left
    return Binary(op, left, right)


def conjoin(*predicates: Node) -> Node:
    """R2: the conjunction, left to right, folded."""
    result: Node = TRUE
    for predicate in predicates:
        result = _fold_logic("&", result, predicate)
    return result


@dataclass(frozen=True, slots=True)
class Select:
    """A select arc's predicate over ``schema``'s fields."""

    schema: EventSchema
    predicate: Node
    text: str = field(default="", compare=False)

    @classmethod
    def parse(cls, schema: EventSchema, text: str, functions: Functions = DEFAULT_FUNCTIONS) -> "Select":
        node = parse_expression(text)
        check_predicate(node, TypeEnv(schema.types(), text, functions))
        return cls(schema, node, text)

    def compiled(self, functions: Functions = DEFAULT_FUNCTIONS) -> Callable[[Env], bool]:
        return compile_predicate(self.predicate, functions)


@dataclass(frozen=True, slots=True)
class Transform:
    """A transform arc: each destination field as an expression over source fields."""

    source: EventSchema
    target: EventSchema
    outputs: tuple[Node, ...]
    """One per field of ``target``, in order."""
    checks: tuple[Node, ...] = ()
    text: str = field(default="", compare=False)

    @classmethod
    def identity(cls, schema: EventSchema) -> "Transform":
        return cls(schema, schema, tuple(Name(n) for n in schema.names), (), "identity")

    @property
    def is_identity(self) -> bool:
        return self.source == self.target and self.outputs == tuple(Name(n) for n in self.source.names) \
            and not self.checks

    @classmethod
    def parse(cls, source: EventSchema, target: EventSchema, text: str,
              functions: Functions = DEFAULT_FUNCTIONS) -> "Transform":
        rule = parse_transform(text)
        binding = bind_pattern(rule.pattern, source, text)
        env = TypeEnv({var: source.types()[f] for var, f in binding.items()}, text, functions)
        by_field = _outputs_by_field(rule.outputs, target, text)
        outputs = []
        for name, kind in target.fields:
            node = by_field[name]
            have = type_of(node, env)
            if not widens(have, kind):
                raise FlowError(f'flows: output {name!r} must be {kind}, the rule gives {have} in "{text}"')
            outputs.append(substitute(node, {var: Name(f) for var, f in binding.items()}))
        return cls(source, target, tuple(outputs), (), text)

    def mapping(self) -> dict[str, Node]:
        return dict(zip(self.target.names, self.outputs))

    def compiled(self, functions: Functions = DEFAULT_FUNCTIONS) -> Callable[[Env], tuple[Value, ...]]:
        """``env -> target tuple``; raises EvalError when the event is dropped."""
        outputs = [compile_node(o, functions) for o in self.outputs]
        checks = [compile_node(c, functions) for c in self.checks]
        floats = [kind == "float" for _, kind in self.target.fields]

        def apply(env: Env) -> tuple[Value, ...]:
            try:
                for check in checks:
                    check(env)
                return tuple(float(o(env)) if f else o(env) for o, f in zip(outputs, floats))  # type: ignore[arg-type]
            except OverflowError:
                raise EvalError("a number too large for a float") from None
        return apply


def bind_pattern(pattern: EventPattern, schema: EventSchema, text: str) -> dict[str, str]:
    """variable -> field for ``[issue:i, price:p]`` or ``[i, p, c]``."""
    names = schema.names
    positional = [f is None for f, _ in pattern.items]
    if any(positional) and not all(positional):
        raise FlowError(f'flows: a pattern binds either by position or by field, not both, in "{text}"')
    if all(positional) and len(pattern.items) > len(names):
        raise FlowError(f'flows: pattern has {len(pattern.items)} variables, schema ({schema}) has {len(names)}'
                        f' fields, in "{text}"')
    binding: dict[str, str] = {}
    for index, (field_name, var) in enumerate(pattern.items):
        field_name = names[index] if field_name is None else field_name
        if field_name not in names:
            raise FlowError(f'flows: unknown field {field_name!r} (schema: {schema}) in "{text}"')
        if var in binding:
            raise FlowError(f'flows: variable {var!r} is bound twice in "{text}"')
        binding[var] = field_name
    return binding


def _outputs_by_field(outputs: tuple[tuple[str | None, Node], ...], target: EventSchema, text: str) -> dict[str, Node]:
    if all(f is None for f, _ in outputs):
        if len(outputs) != len(target.fields):
            raise FlowError(f'flows: rule gives {len(outputs)} values, target ({target}) has {len(target.fields)}'
                            f' fields, in "{text}"')
        return dict(zip(target.names, (n for _, n in outputs)))
    if any(f is None for f, _ in outputs):
        raise FlowError(f'flows: outputs are either all named or all positional in "{text}"')
    by_field = {str(f): n for f, n in outputs}
    missing = [n for n in target.names if n not in by_field]
    extra = [n for n in by_field if n not in target.names]
    if missing or extra or len(by_field) != len(outputs):
        raise FlowError(f'flows: outputs must name each target field once (missing {missing}, unknown {extra})'
                        f' in "{text}"')
    return by_field


# --- R1, R2, R3 ------------------------------------------------------------------------------


def r1_select_before_transform(transform: Transform, predicate: Node, functions: Functions = DEFAULT_FUNCTIONS) -> Node:
    """R1: the predicate over ``transform``'s source equivalent to ``predicate``
    over its target, applied after it."""
    return fold(substitute(predicate, transform.mapping()), functions)


def r3_compose(first: Transform, second: Transform, functions: Functions = DEFAULT_FUNCTIONS) -> Transform:
    """R3: ``first`` then ``second`` as one transform from ``first.source``."""
    if first.target != second.source:
        raise FlowError(f"flows: cannot compose transforms: {first.target} is not {second.source}")
    mapping = first.mapping()
    outputs = tuple(fold(substitute(o, mapping), functions) for o in second.outputs)
    checks = list(first.checks) + [fold(substitute(c, mapping), functions) for c in second.checks]
    used = set().union(*(names_in(o) for o in second.outputs)) if second.outputs else set()
    # outputs of `first` that `second` never reads: still must be defined (they could fail)
    checks += [o for name, o in zip(first.target.names, first.outputs) if name not in used and may_fail(o)]
    unique = tuple(dict.fromkeys(c for c in checks if may_fail(c)))
    return Transform(first.source, second.target, outputs, unique, f"({first.text}) ; ({second.text})")


__all__ = ["Select", "Transform", "bind_pattern", "conjoin", "fold", "r1_select_before_transform", "r3_compose",
           "substitute"]
