"""Growth fits: does a measure grow as O(1), O(log N) or O(N)?

Theory of operation
-------------------
The SGCS paper claims that per-member failure-detection and gossip load grows
as O(log N). A sweep measures a value y (load per member, detection time) at
several group sizes N and fits it three ways, by ordinary least squares:

* ``log2``: y = a + b * log2(N), the paper's model;
* ``linear``: y = a + b * N, what a protocol that talks to everyone would show;
* ``exponent``: the slope k of log(y) against log(N) (y ~ c * N^k), a
  model-free summary: k near 0 is flat, near 1 is linear, and a logarithmic
  curve shows a small k that falls as N grows. Only defined when every y > 0.

R² = 1 - SS_res / SS_tot is reported for the first two. When every y is the
same, SS_tot is 0 and R² is undefined (None): a flat measure has nothing to
explain, which ``verdict`` reports as flat instead.

``verdict`` reads the two fits the way a reader of the README would, in
this order: *inconclusive* with fewer than three distinct N (two points fit
any line exactly); *flat* when the log2 fit moves less than ``FLAT_CHANGE``
(relative to the mean) across the measured range; *decreasing* when it
falls (a per-member share of a fixed group-wide rate falls as 1/N);
*noisy* when neither model explains ``MIN_R2`` of the variance; otherwise
the model with the higher R², *O(log N)* or *O(N)*. The numbers are always
reported beside it.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Sequence

import numpy as np

FLAT_CHANGE = 0.10
"""Relative change of the fitted value over the N range below which a measure is flat."""
MIN_POINTS_FOR_VERDICT = 3
MIN_R2 = 0.8
"""Below this R² for both models, growth is not told apart from scatter."""


@dataclass(frozen=True, slots=True)
class LineFit:
    """y = a + b * x over the fitted points; r2 None when y is constant."""

    a: float
    b: float
    r2: float | None


@dataclass(frozen=True, slots=True)
class GrowthFit:
    """The fits of one measure against N."""

    n_points: int
    nodes: tuple[int, ...]
    values: tuple[float, ...]
    log2: LineFit
    linear: LineFit
    exponent: float | None
    verdict: str

    def to_json(self) -> dict[str, Any]:
        result = asdict(self)
        result["nodes"], result["values"] = list(self.nodes), list(self.values)
        return result


def fit_line(x: Sequence[float], y: Sequence[float]) -> LineFit:
    """Least-squares y = a + b * x; needs two distinct x."""
    xs, ys = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if len(xs) != len(ys) or len(set(xs.tolist())) < 2:
        raise ValueError("a line fit needs at least two distinct x values")
    b, a = np.polyfit(xs, ys, 1)
    residual = float(np.sum((ys - (a + b * xs)) ** 2))
    total = float(np.sum((ys - ys.mean()) ** 2))
    # Relative to the data's scale, so float noise on a flat series is not "variance".
    scale = max(float(np.sum(ys**2)), 1e-300)
    r2 = None if total <= 1e-12 * scale else 1.0 - residual / total
    return LineFit(float(a), float(b), r2)


def fit_growth(nodes: Sequence[int], values: Sequence[float]) -> GrowthFit:
    """Fit ``values`` measured at group sizes ``nodes`` (one value per distinct N)."""
    if len(nodes) != len(values):
        raise ValueError("nodes and values differ in length")
    pairs = sorted(zip(nodes, values))
    ns = [int(n) for n, _ in pairs]
    ys = [float(v) for _, v in pairs]
    log_fit = fit_line([math.log2(n) for n in ns], ys)
    linear_fit = fit_line(ns, ys)
    exponent = None
    if all(y > 0 for y in ys):
        exponent = float(np.polyfit(np.log(ns), np.log(ys), 1)[0])
    return GrowthFit(len(ns), tuple(ns), tuple(ys), log_fit, linear_fit, exponent,
                     verdict(ns, ys, log_fit, linear_fit))


def verdict(nodes: Sequence[int], values: Sequence[float], log_fit: LineFit, linear_fit: LineFit) -> str:
    """inconclusive, flat, decreasing, noisy, O(log N) or O(N) (see the module docstring)."""
    if len(set(nodes)) < MIN_POINTS_FOR_VERDICT:
        return "inconclusive"
    mean = abs(float(np.mean(values)))
    change = log_fit.b * (math.log2(max(nodes)) - math.log2(min(nodes)))
    if mean == 0.0 or abs(change) <= FLAT_CHANGE * mean:
        return "flat"
    if change < 0:
        return "decreasing"
    log_r2 = -math.inf if log_fit.r2 is None else log_fit.r2
    linear_r2 = -math.inf if linear_fit.r2 is None else linear_fit.r2
    if max(log_r2, linear_r2) < MIN_R2:
        return "noisy"
    return "O(log N)" if log_r2 >= linear_r2 else "O(N)"
