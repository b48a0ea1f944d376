"""The flow language: tokens, the AST, and a recursive-descent parser.

Theory of operation (Gryphon, "information flow graphs", the arcs *select*,
*transform* and *collapse*): the paper writes its arcs in a small rule
language: predicates such as ``issue = "IBM" & price < 120``, transform rules
``[issue:i, price:p, capital:c] -> [name: NAS(i), price: p, volume: c/p]``
and collapse rules ``[n,p,v], <n: maxP, curP>, p > maxP -> <n: p, p>``. We
parse that text into frozen AST nodes and never hand it to ``eval``: the
evaluator (``evaluate.py``) walks the tree itself, the type checker
(``schema.py``) checks it against a schema first.

Rules of this module:

* every error is a ``FlowError`` with one line: what was expected, the
  column (1-based), and the text, e.g. ``flows: expected ')' at column 17
  in "(price < 120 & x"``;
* AST nodes compare and hash by structure only (positions are excluded), so
  equal subexpressions are one key for the compiler's sharing;
* the paper's symbols are accepted too: ``≤ ≥ ≠ ⟨ ⟩ →`` and ``∧ ∨ ¬``;
* inside ``<...>`` (a state) expressions are arithmetic only, so ``>``
  closes the state instead of comparing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union

from sgcs.errors import UsageError


class FlowError(UsageError):
    """A flow expression, rule, schema or graph is wrong; the message says
    where, in one line."""


def error_at(message: str, text: str, pos: int) -> FlowError:
    return FlowError(f'flows: {message} at column {pos + 1} in "{text}"')


# --- the AST ---------------------------------------------------------------------------

Value = Union[int, float, str, bool, tuple[float, ...]]
"""A scalar, or a window of numbers (a state value column of type ``float[W]``, ``window.py``)."""


@dataclass(frozen=True, slots=True)
class Const:
    value: Value
    pos: int = field(default=0, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Name:
    name: str
    pos: int = field(default=0, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Unary:
    op: str  # "-" or "!"
    operand: "Node"
    pos: int = field(default=0, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Binary:
    op: str  # + - * / % = != < <= > >= & |
    left: "Node"
    right: "Node"
    pos: int = field(default=0, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Call:
    function: str
    args: tuple["Node", ...]
    pos: int = field(default=0, compare=False, repr=False)


Node = Union[Const, Name, Unary, Binary, Call]

TRUE = Const(True)
FALSE = Const(False)


@dataclass(frozen=True, slots=True)
class EventPattern:
    """``[issue:i, price:p]`` (by field) or ``[i, p, c]`` (by position):
    binds variables to an event's fields."""

    items: tuple[tuple[str | None, str], ...]
    """(field or None when positional, variable)."""


@dataclass(frozen=True, slots=True)
class StatePattern:
    """``<n: maxP, curP>``: the key variable(s), then one variable per value."""

    keys: tuple[str, ...]
    values: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class TransformRule:
    """``pattern -> [field: expr, ...]``; fields None when positional."""

    pattern: EventPattern
    outputs: tuple[tuple[str | None, Node], ...]
    text: str = field(default="", compare=False)


@dataclass(frozen=True, slots=True)
class CollapseRule:
    """``event, <state>?, guard? -> <key: values>``; no state pattern means
    the rule creates the key's row (it applies only when there is none)."""

    event: EventPattern
    state: StatePattern | None
    guard: Node
    keys: tuple[Node, ...]
    values: tuple[Node, ...]
    text: str = field(default="", compare=False)


# --- tokens ----------------------------------------------------------------------------

_SYMBOLS = ("->", "<=", ">=", "!=", "==", "=", "<", ">", "&", "|", "!", "+", "-", "*", "/", "%",
            "(", ")", "[", "]", ",", ":")
_UNICODE = {"≤": "<=", "≥": ">=", "≠": "!=", "⟨": "<", "⟩": ">", "→": "->", "∧": "&", "∨": "|", "¬": "!"}


@dataclass(frozen=True, slots=True)
class Token:
    kind: str  # "num", "str", "name", "sym", "end"
    text: str
    value: Value
    pos: int


def tokenize(text: str) -> list[Token]:
    tokens: list[Token] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c.isspace():
            i += 1
        elif c.isdigit() or (c == "." and text[i + 1:i + 2].isdigit()):
            i = _number(text, i, tokens)
        elif c in "\"'":
            i = _string(text, i, tokens)
        elif c.isalpha() or c == "_":
            j = i
            while j < len(text) and (text[j].isalnum() or text[j] == "_"):
                j += 1
            tokens.append(Token("name", text[i:j], text[i:j], i))
            i = j
        elif c in _UNICODE:
            tokens.append(Token("sym", _UNICODE[c], _UNICODE[c], i))
            i += 1
        else:
            symbol = next((s for s in _SYMBOLS if text.startswith(s, i)), None)
            if symbol is None:
                raise error_at(f"unexpected character {c!r}", text, i)
            width = len(symbol)
            symbol = "=" if symbol == "==" else symbol
            tokens.append(Token("sym", symbol, symbol, i))
            i += width
    tokens.append(Token("end", "end of text", "", len(text)))
    return tokens


def _number(text: str, i: int, tokens: list[Token]) -> int:
    j = i
    while j < len(text) and (text[j].isdigit() or text[j] == "."):
        j += 1
    if j < len(text) and text[j] in "eE":  # 1e6, 2.5e-3
        k = j + 1 + (text[j + 1:j + 2] in ("+", "-"))
        if text[k:k + 1].isdigit():
            j = k
            while j < len(text) and text[j].isdigit():
                j += 1
    raw = text[i:j]
    try:
        value: Value = int(raw) if raw.isdigit() else float(raw)
    except ValueError:
        raise error_at(f"bad number {raw!r}", text, i) from None
    tokens.append(Token("num", raw, value, i))
    return j


def _string(text: str, i: int, tokens: list[Token]) -> int:
    quote, j, chars = text[i], i + 1, []
    while j < len(text) and text[j] != quote:
        if text[j] == "\\" and j + 1 < len(text):
            j += 1
        chars.append(text[j])
        j += 1
    if j >= len(text):
        raise error_at("unterminated string", text, i)
    tokens.append(Token("str", text[i:j + 1], "".join(chars), i))
    return j + 1


# --- the parser ------------------------------------------------------------------------

_COMPARISONS = ("=", "!=", "<", "<=", ">", ">=")


class Parser:
    """Recursive descent over one text; ``expression``, ``transform`` and
    ``collapse`` parse a whole text or raise ``FlowError``."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = tokenize(text)
        self.at = 0
        self.depth = 0

    # tokens
    def peek(self) -> Token:
        return self.tokens[self.at]

    def take(self) -> Token:
        token = self.tokens[self.at]
        self.at += 1
        return token

    def accept(self, symbol: str) -> bool:
        token = self.peek()
        if token.kind == "sym" and token.text == symbol:
            self.at += 1
            return True
        return False

    def expect(self, symbol: str) -> Token:
        token = self.peek()
        if token.kind != "sym" or token.text != symbol:
            raise self.fail(f"expected {symbol!r}")
        return self.take()

    def expect_name(self, what: str) -> str:
        token = self.peek()
        if token.kind != "name":
            raise self.fail(f"expected {what}")
        self.at += 1
        return token.text

    def fail(self, message: str) -> FlowError:
        token = self.peek()
        found = "end of text" if token.kind == "end" else repr(token.text)
        return error_at(f"{message}, found {found}", self.text, token.pos)

    def finish(self) -> None:
        if self.peek().kind != "end":
            raise self.fail("expected end of text")

    # expressions, lowest precedence first
    def expression(self, arithmetic_only: bool = False) -> Node:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise self.fail(f"expression nests deeper than {MAX_DEPTH} levels")
        try:
            return self.sum() if arithmetic_only else self.disjunction()
        finally:
            self.depth -= 1

    def disjunction(self) -> Node:
        node = self.conjunction()
        while self.peek().text == "|" and self.peek().kind == "sym":
            pos = self.take().pos
            node = Binary("|", node, self.conjunction(), pos)
        return node

    def conjunction(self) -> Node:
        node = self.negation()
        while self.peek().text == "&" and self.peek().kind == "sym":
            pos = self.take().pos
            node = Binary("&", node, self.negation(), pos)
        return node

    def negation(self) -> Node:
        token, count = self.peek(), 0
        while token.kind == "sym" and token.text == "!":  # a loop, not recursion: "!!!!...x" from a peer
            self.take()
            count, token = count + 1, self.peek()
        node = self.comparison()
        for _ in range(count):
            node = Unary("!", node, token.pos)
        return node

    def comparison(self) -> Node:
        node = self.sum()
        token = self.peek()
        if token.kind == "sym" and token.text in _COMPARISONS:
            self.take()
            node = Binary(token.text, node, self.sum(), token.pos)
        return node

    def sum(self) -> Node:
        node = self.product()
        while self.peek().kind == "sym" and self.peek().text in ("+", "-"):
            token = self.take()
            node = Binary(token.text, node, self.product(), token.pos)
        return node

    def product(self) -> Node:
        node = self.unary()
        while self.peek().kind == "sym" and self.peek().text in ("*", "/", "%"):
            token = self.take()
            node = Binary(token.text, node, self.unary(), token.pos)
        return node

    def unary(self) -> Node:
        token, count = self.peek(), 0
        while token.kind == "sym" and token.text == "-":
            self.take()
            count, token = count + 1, self.peek()
        node = self.atom()
        for _ in range(count):
            node = Unary("-", node, token.pos)
        return node

    def atom(self) -> Node:
        token = self.peek()
        if token.kind in ("num", "str"):
            self.take()
            return Const(token.value, token.pos)
        if token.kind == "name":
            self.take()
            if token.text in ("true", "false"):
                return Const(token.text == "true", token.pos)
            if self.accept("("):
                return Call(token.text, self.arguments(), token.pos)
            return Name(token.text, token.pos)
        if self.accept("("):
            node = self.expression()
            self.expect(")")
            return node
        raise self.fail("expected a value, a name or '('")

    def arguments(self) -> tuple[Node, ...]:
        args: list[Node] = []
        if self.accept(")"):
            return ()
        while True:
            args.append(self.expression())
            if self.accept(")"):
                return tuple(args)
            self.expect(",")

    # rules
    def event_pattern(self) -> EventPattern:
        self.expect("[")
        items: list[tuple[str | None, str]] = []
        while True:
            first = self.expect_name("a field or variable name")
            items.append((first, self.expect_name("a variable name")) if self.accept(":") else (None, first))
            if self.accept("]"):
                return EventPattern(tuple(items))
            self.expect(",")

    def state_pattern(self) -> StatePattern:
        self.expect("<")
        keys = [self.expect_name("a key variable")]
        while self.accept(","):
            keys.append(self.expect_name("a key variable"))
        self.expect(":")
        values = [self.expect_name("a value variable")]
        while self.accept(","):
            values.append(self.expect_name("a value variable"))
        self.expect(">")
        return StatePattern(tuple(keys), tuple(values))

    def state_output(self) -> tuple[tuple[Node, ...], tuple[Node, ...]]:
        self.expect("<")
        keys = [self.expression(arithmetic_only=True)]
        while self.accept(","):
            keys.append(self.expression(arithmetic_only=True))
        self.expect(":")
        values = [self.expression(arithmetic_only=True)]
        while self.accept(","):
            values.append(self.expression(arithmetic_only=True))
        self.expect(">")
        return tuple(keys), tuple(values)

    def transform_outputs(self) -> tuple[tuple[str | None, Node], ...]:
        self.expect("[")
        outputs: list[tuple[str | None, Node]] = []
        while True:
            token, after = self.peek(), self.tokens[min(self.at + 1, len(self.tokens) - 1)]
            if token.kind == "name" and after.kind == "sym" and after.text == ":":
                self.at += 2
                outputs.append((token.text, self.expression()))
            else:
                outputs.append((None, self.expression()))
            if self.accept("]"):
                return tuple(outputs)
            self.expect(",")


MAX_DEPTH = 64
"""Nesting of an expression at most: texts come from peers too, and the
parser, the checker and the evaluator recurse over the tree."""


def parse_expression(text: str) -> Node:
    """A predicate or value expression: ``issue = "IBM" & price < 120``."""
    parser = Parser(text)
    node = parser.expression()
    parser.finish()
    return check_depth(node, text)


def check_depth(node: Node, text: str) -> Node:
    """``node``, or FlowError if it nests deeper than ``MAX_DEPTH`` (iteratively: no recursion)."""
    stack: list[tuple[Node, int]] = [(node, 1)]
    while stack:
        current, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise error_at(f"expression nests deeper than {MAX_DEPTH} levels", text, getattr(current, "pos", 0))
        if isinstance(current, Unary):
            stack.append((current.operand, depth + 1))
        elif isinstance(current, Binary):
            stack += [(current.left, depth + 1), (current.right, depth + 1)]
        elif isinstance(current, Call):
            stack += [(a, depth + 1) for a in current.args]
    return node


def parse_transform(text: str) -> TransformRule:
    """``[issue:i, price:p, capital:c] -> [name: NAS(i), price: p, volume: c/p]``."""
    parser = Parser(text)
    pattern = parser.event_pattern()
    parser.expect("->")
    outputs = parser.transform_outputs()
    parser.finish()
    for _, node in outputs:
        check_depth(node, text)
    return TransformRule(pattern, outputs, text)


def parse_collapse(text: str) -> CollapseRule:
    """``[n,p,v], <n: maxP, curP>, p > maxP -> <n: p, p>`` or, creating a
    row, ``[n,p,v] -> <n: p, p>``."""
    parser = Parser(text)
    event = parser.event_pattern()
    state: StatePattern | None = None
    guard: Node = TRUE
    if parser.accept(","):
        if parser.peek().kind == "sym" and parser.peek().text == "<":
            state = parser.state_pattern()
            if parser.accept(","):
                guard = parser.expression()
        else:
            guard = parser.expression()
    parser.expect("->")
    keys, values = parser.state_output()
    parser.finish()
    for node in (guard, *keys, *values):
        check_depth(node, text)
    return CollapseRule(event, state, guard, keys, values, text)


def names_in(node: Node) -> set[str]:
    """The variable or field names a node reads."""
    if isinstance(node, Name):
        return {node.name}
    if isinstance(node, Unary):
        return names_in(node.operand)
    if isinstance(node, Binary):
        return names_in(node.left) | names_in(node.right)
    if isinstance(node, Call):
        return set().union(*(names_in(a) for a in node.args)) if node.args else set()
    return set()


def render(node: Node) -> str:
    """The node as text in the language (fully parenthesised where needed)."""
    if isinstance(node, Const):
        if isinstance(node.value, bool):
            return "true" if node.value else "false"
        if isinstance(node.value, str):
            return '"' + node.value.replace("\\", "\\\\").replace('"', '\\"') + '"'
        return repr(node.value)
    if isinstance(node, Name):
        return node.name
    if isinstance(node, Unary):
        return f"{node.op}{_wrap(node.operand)}"
    if isinstance(node, Binary):
        return f"{_wrap(node.left)} {node.op} {_wrap(node.right)}"
    return f"{node.function}({', '.join(render(a) for a in node.args)})"


def _wrap(node: Node) -> str:
    text = render(node)
    if isinstance(node, Const) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool) \
            and node.value < 0:
        return f"({text})"
    return f"({text})" if isinstance(node, (Binary, Unary)) else text
