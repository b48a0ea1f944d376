"""Windows: the last W values of a number per key, for "recent" aggregates.

Theory of operation (Gryphon, the stock example's region 5: "a collapse
operation ... computes a state which tracks for each stock issue the average
price and the magnitude of the largest recent price drop"; an expand of that
state gives an Alarms space, where "drop exceeding 20" is a subscription).
The paper leaves "recent" open. Here it is the last W events of the key: a
state value column may have the type ``float[W]``, whose value is the tuple of
at most W numbers, oldest first. Collapse rules build it with ``window(p)``
(a first event) and ``push(w, p)`` (append, forget the oldest beyond W), and
read it with total aggregates: ``wlen``, ``wsum``, ``wavg``, ``wmax``,
``wmin`` and ``drawdown`` (the largest fall from an earlier value to a later
one: the paper's "largest recent drop"). For example::

    [i,p,v] -> <i: p, 1, window(p), 0>
    [i,p,v], <i: avg, n, w, d> -> <i: avg + (p - avg) / (n + 1), n + 1, push(w, p), drawdown(push(w, p))>

Why a count window and not seconds: a collapse runs at every member on the
same events in the same order and must reach the same rows; the last W
*events* do, a wall clock would not (each member's clock differs). A window
over an event-time field would also do; not built.

The window is part of the row, so everything that moves rows moves it: state
transfer, durable rows, snapshots. Memory per key is at most W floats per
window column. ``W`` comes from the schema: ``collapse.py`` passes it to
``push`` when it compiles a rule (``push(w, p)`` runs as ``push(w, p, W)``),
and the row is cut to W again when stored, whatever made it. A window is
never empty (``window(p)`` starts it with one value, ``push`` only adds), so
every aggregate is defined.
"""

from __future__ import annotations

import re
from typing import Sequence

WINDOW = "float[]"
"""The type of a window expression whose capacity is not known (``window(p)``)."""
MAX_CAPACITY = 10_000
"""W at most: a row travels in one message."""
_KIND = re.compile(r"^float\[([0-9]*)\]$")

Window = tuple[float, ...]


def is_window(kind: str) -> bool:
    return _KIND.match(kind) is not None


def capacity(kind: str) -> int | None:
    """W of ``float[W]``; None for ``float[]`` or a scalar type."""
    found = _KIND.match(kind)
    return int(found.group(1)) if found and found.group(1) else None


def window(value: float) -> Window:
    return (float(value),)


def push(values: Sequence[float], value: float, limit: int | None = None) -> Window:
    """``values`` with ``value`` appended, the oldest forgotten beyond ``limit``."""
    grown = tuple(values) + (float(value),)
    return grown[-limit:] if limit else grown


def wlen(values: Sequence[float]) -> int:
    return len(values)


def wsum(values: Sequence[float]) -> float:
    return float(sum(values))


def wavg(values: Sequence[float]) -> float:
    return float(sum(values)) / len(values)


def wmax(values: Sequence[float]) -> float:
    return float(max(values))


def wmin(values: Sequence[float]) -> float:
    return float(min(values))


def drawdown(values: Sequence[float]) -> float:
    """The largest ``values[i] - values[j]`` with ``i <= j``: how far the
    window fell from a high to a later low (0 if it never fell)."""
    high, worst = float("-inf"), 0.0
    for value in values:
        high = max(high, value)
        worst = max(worst, high - value)
    return float(worst)


FUNCTIONS = (
    ("window", ("float",), WINDOW, window),
    ("push", (WINDOW, "float"), WINDOW, push),
    ("wlen", (WINDOW,), "int", wlen),
    ("wsum", (WINDOW,), "float", wsum),
    ("wavg", (WINDOW,), "float", wavg),
    ("wmax", (WINDOW,), "float", wmax),
    ("wmin", (WINDOW,), "float", wmin),
    ("drawdown", (WINDOW,), "float", drawdown),
)
"""(name, parameter types, result type, implementation) for ``schema.DEFAULT_FUNCTIONS``."""

__all__ = ["FUNCTIONS", "MAX_CAPACITY", "WINDOW", "Window", "capacity", "drawdown", "is_window", "push", "window"]
