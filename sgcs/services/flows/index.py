"""An index over many subscriptions' predicates: per event, only the few that may hold.

Theory of operation (Gryphon, section 5, "content-based publish/subscribe
with efficient matching"; the matching itself is the paper's reference [1],
Aguilera et al., PODC'99, which files subscriptions under the attribute tests
they make so that an event visits only the tests its values pass). Each
predicate gets an *access condition*: a union of intervals, each over one
field, that holds wherever the predicate does. ``price < 120 & issue = "IBM"``
may be filed under ``issue in ["IBM", "IBM"]`` or ``price in (-inf, 120)``;
``issue = "IBM" | volume > 180`` under both. The index stabs each field's
intervals with the event's value, and only the predicates filed under a hit
(plus those with no access condition) are evaluated.

Deriving the condition (``access_of``): a comparison of a field with a
constant is an interval (``!=`` two rays); ``!`` swaps what we look for (the
events where the node is *false*: De Morgan); ``|`` is the union; ``&`` keeps
the cheaper side (or, on one field, the exact intersection). The result is
*exact* when membership is equivalent to the predicate and nothing in it can
fail (``x / 0``): then the predicate need not be evaluated at all. Anything
else (``price * volume > 10000``, functions) gives no condition: evaluated
for every event, as before. Constants compare with values as Python compares
them (an ``int`` field against ``1.5``; strings lexicographically); a NaN
constant gives no condition, and an event holding a NaN is matched without
the index (its comparisons are not a total order).

Which side of an ``&``: the fraction of recent events each interval admits,
counted on a sample of the first ``sample_size`` events' values (bisect on
the sorted sample); before the sample fills, fixed guesses (a point admits
fewer events than a span, a span fewer than a ray). The plan is rebuilt once
when the sample fills. The choice changes only the cost, never the result.

Per field: points in a ``dict``; rays (``x < c``, ``x >= c``) in two sorted
lists of bounds, so the rays an event satisfies are one ``bisect`` and a
slice; bounded spans (``3 < x <= 7``) in a centred interval tree, ``O(log n
+ k)`` per stab.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, Sequence

from .syntax import Binary, Const, Name, Node, Unary, Value

_MIRROR = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "=": "=", "!=": "!="}
"""``c op x`` is ``x _MIRROR[op] c``."""
_NEGATE = {"<": ">=", "<=": ">", ">": "<=", ">=": "<", "=": "!=", "!=": "="}
MAX_PAIRS = 16
"""Atoms of an exact intersection on one field at most; beyond, the cheaper side is kept."""
GUESS_POINT, GUESS_SPAN, GUESS_RAY = 0.01, 0.1, 0.3
"""Fractions of events an interval admits, guessed before the sample fills."""


@dataclass(frozen=True, slots=True)
class Interval:
    """The values of ``field`` from ``low`` to ``high`` (None: unbounded on that side)."""

    field: str
    low: Value | None = None
    low_closed: bool = False
    high: Value | None = None
    high_closed: bool = False

    @classmethod
    def point(cls, field: str, value: Value) -> "Interval":
        return cls(field, value, True, value, True)

    @property
    def is_point(self) -> bool:
        return self.low is not None and self.high is not None and self.low_closed and self.high_closed \
            and self.low == self.high

    def contains(self, value: Value) -> bool:
        if self.low is not None and not (self.low < value or (self.low_closed and self.low == value)):  # type: ignore[operator]
            return False
        return self.high is None or value < self.high or (self.high_closed and value == self.high)  # type: ignore[operator]

    def intersect(self, other: "Interval") -> "Interval | None":
        """Both at once (same field), or None when nothing is."""
        low, low_closed = _tighter(self.low, self.low_closed, other.low, other.low_closed, lower=True)
        high, high_closed = _tighter(self.high, self.high_closed, other.high, other.high_closed, lower=False)
        if low is not None and high is not None:
            if low > high or (low == high and not (low_closed and high_closed)):  # type: ignore[operator]
                return None
        return Interval(self.field, low, low_closed, high, high_closed)


def _tighter(a: Value | None, a_closed: bool, b: Value | None, b_closed: bool, *, lower: bool) -> tuple[Value | None, bool]:
    if a is None:
        return b, b_closed
    if b is None or a == b:
        return a, a_closed and (b is None or b_closed)
    a_wins = (a > b) if lower else (a < b)  # type: ignore[operator]
    return (a, a_closed) if a_wins else (b, b_closed)


@dataclass(frozen=True, slots=True)
class Access:
    """Where the events a predicate accepts can lie: in one of ``atoms``, or
    ``anywhere``. ``exact``: the predicate holds exactly there and never fails."""

    atoms: tuple[Interval, ...]
    anywhere: bool
    exact: bool

    @property
    def nowhere(self) -> bool:
        return not self.anywhere and not self.atoms


UNKNOWN = Access((), True, False)
Estimate = Callable[[Interval], float]


def access_of(node: Node, types: Mapping[str, str], estimate: Estimate, holds: bool = True) -> Access:
    """The access condition of the events on which ``node`` evaluates, without
    failing, to ``holds`` (see the module docstring)."""
    if isinstance(node, Unary) and node.op == "!":
        return access_of(node.operand, types, estimate, not holds)
    if isinstance(node, Binary) and node.op in ("&", "|"):
        left = access_of(node.left, types, estimate, holds)
        right = access_of(node.right, types, estimate, holds)
        # a & b is true where both are; it is false where either is (De Morgan), and | the other way
        return _both(left, right, estimate) if (node.op == "&") == holds else _either(left, right)
    if isinstance(node, Const):
        return Access((), bool(node.value) == holds, True)
    if isinstance(node, Name) and types.get(node.name) == "bool":
        return Access((Interval.point(node.name, holds),), False, True)
    if isinstance(node, Binary) and node.op in _NEGATE:
        atoms = _comparison(node, types, holds)
        if atoms is not None:
            return Access(atoms, False, True)
    return UNKNOWN


def _comparison(node: Binary, types: Mapping[str, str], holds: bool) -> tuple[Interval, ...] | None:
    op = node.op
    if isinstance(node.left, Name) and isinstance(node.right, Const):
        name, value = node.left.name, node.right.value
    elif isinstance(node.right, Name) and isinstance(node.left, Const):
        name, value, op = node.right.name, node.left.value, _MIRROR[op]
    else:
        return None
    kind = types.get(name)
    if kind is None or (isinstance(value, float) and math.isnan(value)):
        return None
    op = op if holds else _NEGATE[op]
    if op == "=":
        return (Interval.point(name, value),)
    if op == "!=":
        if kind == "bool":
            return (Interval.point(name, not value),)
        return (Interval(name, high=value), Interval(name, low=value))
    return ({"<": Interval(name, high=value), "<=": Interval(name, high=value, high_closed=True),
             ">": Interval(name, low=value), ">=": Interval(name, low=value, low_closed=True)}[op],)


def cost(access: Access, estimate: Estimate) -> float:
    """The fraction of events that pass ``access`` (estimated)."""
    if access.anywhere:
        return 1.0
    return min(1.0, sum(estimate(atom) for atom in access.atoms))


def _both(a: Access, b: Access, estimate: Estimate) -> Access:
    exact = a.exact and b.exact
    if a.anywhere and a.exact:  # true & b: b
        return b
    if b.anywhere and b.exact:
        return a
    if a.nowhere or b.nowhere:
        return Access((), False, exact)
    fields = {atom.field for atom in a.atoms + b.atoms}
    if not (a.anywhere or b.anywhere) and len(fields) == 1 and len(a.atoms) * len(b.atoms) <= MAX_PAIRS:
        meets = (x.intersect(y) for x in a.atoms for y in b.atoms)
        return Access(tuple(dict.fromkeys(m for m in meets if m is not None)), False, exact)
    cheaper = a if cost(a, estimate) <= cost(b, estimate) else b
    return Access(cheaper.atoms, cheaper.anywhere, False)


def _either(a: Access, b: Access) -> Access:
    exact = a.exact and b.exact
    if a.anywhere or b.anywhere:
        return Access((), True, exact)
    return Access(tuple(dict.fromkeys(a.atoms + b.atoms)), False, exact)


class Sample:
    """The values of each field in the first ``size`` events, to estimate the
    fraction of events an interval admits."""

    def __init__(self, names: Sequence[str], size: int) -> None:
        self.names, self.size = tuple(names), size
        self.seen = 0
        self._values: dict[str, list[Value]] = {n: [] for n in names}
        self._sorted: dict[str, list[Value]] = {}

    @property
    def filling(self) -> bool:
        return self.seen < self.size

    def observe(self, event: Sequence[Value]) -> bool:
        """Record an event; True when this one filled the sample."""
        if any(isinstance(v, float) and math.isnan(v) for v in event):
            return False  # unordered: it would spoil the sorted sample
        for name, value in zip(self.names, event):
            self._values[name].append(value)
        self.seen += 1
        if self.seen == self.size:
            self._sorted = {n: sorted(vs) for n, vs in self._values.items()}
            self._values = {}
            return True
        return False

    def estimate(self, interval: Interval) -> float:
        values = self._sorted.get(interval.field)
        if not values:
            return GUESS_POINT if interval.is_point else GUESS_SPAN if None not in (interval.low, interval.high) \
                else GUESS_RAY
        start = 0 if interval.low is None else (bisect_left if interval.low_closed else bisect_right)(values, interval.low)
        end = len(values) if interval.high is None else \
            (bisect_right if interval.high_closed else bisect_left)(values, interval.high)
        return (max(0, end - start) + 0.5) / (len(values) + 1)  # never free: the sample may have missed it


class FieldIndex:
    """The intervals filed under one field: points, rays and bounded spans."""

    def __init__(self) -> None:
        self.points: dict[Value, list[int]] = {}
        self._below: list[tuple[tuple[Value, int], int]] = []
        """``x < c`` as ``((c, 0), entry)``, ``x <= c`` as ``((c, 1), entry)``: ``x`` passes where the bound > ``(x, 0)``."""
        self._above: list[tuple[tuple[Value, int], int]] = []
        """``x > c`` as ``((c, 1), entry)``, ``x >= c`` as ``((c, 0), entry)``: ``x`` passes where the bound < ``(x, 1)``."""
        self._spans: list[tuple[Interval, int]] = []
        self._below_keys: list[tuple[Value, int]] = []
        self._below_ids: list[int] = []
        self._above_keys: list[tuple[Value, int]] = []
        self._above_ids: list[int] = []
        self._tree: _SpanTree | None = None

    def add(self, interval: Interval, entry: int) -> None:
        if interval.is_point:
            assert interval.low is not None
            self.points.setdefault(interval.low, []).append(entry)
        elif interval.low is None and interval.high is None:
            raise ValueError("an unbounded interval is no access condition")
        elif interval.low is None:
            self._below.append(((interval.high, int(interval.high_closed)), entry))  # type: ignore[arg-type]
        elif interval.high is None:
            self._above.append(((interval.low, int(not interval.low_closed)), entry))
        else:
            self._spans.append((interval, entry))

    def freeze(self) -> None:
        """Sort what ``add`` filed; call before ``stab``."""
        below = sorted(self._below, key=lambda pair: pair[0])
        above = sorted(self._above, key=lambda pair: pair[0])
        self._below_keys, self._below_ids = [k for k, _ in below], [e for _, e in below]
        self._above_keys, self._above_ids = [k for k, _ in above], [e for _, e in above]
        self._tree = _SpanTree(self._spans) if self._spans else None

    def stab(self, value: Value, found: set[int]) -> None:
        """Add to ``found`` every entry filed under an interval that holds ``value``."""
        hit = self.points.get(value)
        if hit:
            found.update(hit)
        if self._below_keys:
            found.update(self._below_ids[bisect_right(self._below_keys, (value, 0)):])
        if self._above_keys:
            found.update(self._above_ids[:bisect_left(self._above_keys, (value, 1))])
        if self._tree is not None:
            self._tree.stab(value, found)


class _SpanTree:
    """A centred interval tree of bounded spans (both ends finite)."""

    __slots__ = ("center", "by_low", "by_high", "left", "right")

    def __init__(self, spans: list[tuple[Interval, int]]) -> None:
        ends: list[Value] = sorted(v for span, _ in spans for v in (span.low, span.high) if v is not None)  # type: ignore[type-var]
        self.center = ends[len(ends) // 2]
        here, lower, upper = [], [], []
        for pair in spans:
            span = pair[0]
            if span.high < self.center:  # type: ignore[operator]
                lower.append(pair)
            elif span.low > self.center:  # type: ignore[operator]
                upper.append(pair)
            else:
                here.append(pair)  # the centre is an end of some span: each level holds at least one
        self.by_low = sorted(here, key=lambda pair: pair[0].low)  # type: ignore[arg-type,return-value]
        self.by_high = sorted(here, key=lambda pair: pair[0].high, reverse=True)  # type: ignore[arg-type,return-value]
        self.left = _SpanTree(lower) if lower else None
        self.right = _SpanTree(upper) if upper else None

    def stab(self, value: Value, found: set[int]) -> None:
        node: _SpanTree | None = self
        while node is not None:
            if value < node.center:  # type: ignore[operator]
                for span, entry in node.by_low:  # every span here reaches past the centre: only its low end matters
                    if span.low > value:  # type: ignore[operator]
                        break
                    if span.low < value or span.low_closed:  # type: ignore[operator]
                        found.add(entry)
                node = node.left
            elif value > node.center:  # type: ignore[operator]
                for span, entry in node.by_high:
                    if span.high < value:  # type: ignore[operator]
                        break
                    if span.high > value or span.high_closed:  # type: ignore[operator]
                        found.add(entry)
                node = node.right
            else:
                found.update(entry for span, entry in node.by_low if span.contains(value))
                return


@dataclass(slots=True)
class Plan:
    """Entries filed by field, those evaluated for every event, and which need no evaluation."""

    fields: list[tuple[int, FieldIndex]]
    """(position of the field in the event, its index)."""
    always: list[int]
    exact: list[bool]


def plan(predicates: Iterable[Node], names: Sequence[str], types: Mapping[str, str], estimate: Estimate) -> Plan:
    """File each predicate (entry ``i`` is the ``i``-th) under its access condition."""
    by_field: dict[str, FieldIndex] = {}
    always: list[int] = []
    exact: list[bool] = []
    for entry, predicate in enumerate(predicates):
        access = access_of(predicate, types, estimate)
        exact.append(access.exact)
        if access.anywhere:
            always.append(entry)
        for atom in access.atoms:  # none at all: the predicate never holds, never a candidate
            by_field.setdefault(atom.field, FieldIndex()).add(atom, entry)
    for index in by_field.values():
        index.freeze()
    position = {n: i for i, n in enumerate(names)}
    fields = sorted(((position[f], index) for f, index in by_field.items()), key=lambda pair: pair[0])
    return Plan(fields, always, exact)


def unordered(value: Value) -> bool:
    """A value the index cannot place (NaN)."""
    return isinstance(value, float) and value != value


__all__ = ["Access", "FieldIndex", "Interval", "Plan", "Sample", "access_of", "cost", "plan", "unordered"]
