"""Small checkers that turn a bad scenario value into a one-line UsageError.

Theory of operation
-------------------
Every message starts with the path of the offending field, as a user would
write it (``network.loss``, ``groups[0].members``, ``faults[2].crash``), then
says what was found and what is allowed. TOML gives ints, floats, bools,
strings, lists and tables; bools are ints in Python, so every numeric check
rejects them explicitly.
"""

from __future__ import annotations

import math
from typing import Any, NoReturn, Sequence

from sgcs.errors import UsageError


def fail(path: str, message: str) -> NoReturn:
    raise UsageError(f"{path}: {message}" if path else message)


def show(value: Any) -> str:
    """A short rendering of a bad value, with its TOML type."""
    kind = {bool: "boolean", int: "integer", float: "float", str: "string", list: "array", dict: "table"}
    text = repr(value)
    if len(text) > 40:
        text = text[:37] + "..."
    return f"{text} ({kind.get(type(value), type(value).__name__)})"


def check_keys(path: str, table: Any, allowed: Sequence[str] | None, required: Sequence[str] = ()) -> None:
    """``table`` must be a table with only ``allowed`` keys (None: any)."""
    if not isinstance(table, dict):
        fail(path or "scenario", f"must be a table, got {show(table)}")
    if allowed is not None:
        for key in table:
            if key not in allowed:
                fail(_join(path, key), f"unknown field; allowed here: {', '.join(allowed)}")
    for key in required:
        if key not in table:
            fail(_join(path, key), "is required")


def integer(path: str, value: Any, low: int, high: int, *, what: str = "", hint: str = "") -> int:
    """An int in [low, high]; ``what`` prefixes the value (``node 900``)."""
    if isinstance(value, bool) or not isinstance(value, int):
        fail(path, f"must be an integer in {low}..{high}, got {show(value)}")
    if not low <= value <= high:
        label = f"{what} {value}" if what else str(value)
        fail(path, f"{label} is not in {low}..{high}{hint}")
    return value


def number(path: str, value: Any, low: float, high: float, *, low_open: bool = False) -> float:
    """A finite number in [low, high] (or (low, high] when ``low_open``)."""
    bracket = "(" if low_open else "["
    allowed = f"{bracket}{low:g}, {high:g}]"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        fail(path, f"must be a number in {allowed}, got {show(value)}")
    result = float(value)
    too_low = result <= low if low_open else result < low
    if not math.isfinite(result) or too_low or result > high:
        fail(path, f"{value!r} is not in {allowed}")
    return result


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else str(key)
