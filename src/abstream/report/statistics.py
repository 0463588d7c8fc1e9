"""Comparing a variant with control from sufficient statistics, never from raw rows.

- Means (one value per unit, e.g. revenue per visitor): Welch's t-test, whose degrees of
  freedom come from the Welch-Satterthwaite equation.
- Ratios of two sums over units (orders per visit, revenue per order, with the visitor as
  the unit, so visits of one visitor are not taken as independent): the delta method, a
  normal approximation of ratio = mean(x) / mean(y).
- Sample-ratio mismatch: Pearson's chi-square goodness-of-fit of units per variant against
  the allocation weights.

Lifts are relative (variant / control - 1) with their confidence interval from the delta
method; the absolute difference and its interval come along.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from scipy import stats


@dataclass(frozen=True)
class MeanMoments:
    """n units, the sum of their values and of their squares."""

    n: int
    total: float
    total_sq: float

    @property
    def mean(self) -> float:
        return self.total / self.n

    @property
    def variance(self) -> float:
        """Sample variance (n - 1 in the denominator)."""
        return max(0.0, (self.total_sq - self.total ** 2 / self.n) / (self.n - 1))


@dataclass(frozen=True)
class RatioMoments:
    """n units with values x (numerator) and y (denominator): sums of x, y, x², y², x·y."""

    n: int
    sum_x: float
    sum_y: float
    sum_xx: float
    sum_yy: float
    sum_xy: float

    @property
    def ratio(self) -> float:
        return self.sum_x / self.sum_y

    @property
    def variance(self) -> float:
        """Delta-method variance of sum(x) / sum(y)."""
        n = self.n
        mean_y = self.sum_y / n
        var_x = (self.sum_xx - self.sum_x ** 2 / n) / (n - 1)
        var_y = (self.sum_yy - self.sum_y ** 2 / n) / (n - 1)
        cov = (self.sum_xy - self.sum_x * self.sum_y / n) / (n - 1)
        r = self.ratio
        return max(0.0, (var_x - 2 * r * cov + r * r * var_y) / (n * mean_y * mean_y))


@dataclass(frozen=True)
class Comparison:
    """A variant against control: values, relative lift with its interval, absolute
    difference with its interval, and the two-sided p-value of no difference."""

    control_value: float
    variant_value: float
    lift: float | None
    ci_low: float | None
    ci_high: float | None
    difference: float
    difference_low: float
    difference_high: float
    p_value: float


def welch(control: MeanMoments, variant: MeanMoments,
          confidence: float = 0.95) -> Comparison | None:
    """Means compared with Welch's t-test; None with fewer than two units on a side."""
    if control.n < 2 or variant.n < 2:
        return None
    se_c2, se_v2 = control.variance / control.n, variant.variance / variant.n
    se2 = se_c2 + se_v2
    if se2 == 0:
        df = math.inf
    else:
        df = se2 ** 2 / (se_c2 ** 2 / (control.n - 1) + se_v2 ** 2 / (variant.n - 1))
    quantile = float(stats.t.ppf((1 + confidence) / 2, df)) if math.isfinite(df) else \
        float(stats.norm.ppf((1 + confidence) / 2))
    p_value = _p_value(variant.mean - control.mean, se2,
                       lambda z: 2 * float(stats.t.sf(abs(z), df)))
    return _compare(control.mean, variant.mean, se_c2, se_v2, quantile=quantile,
                    p_value=p_value)


def delta_ratio(control: RatioMoments, variant: RatioMoments,
                confidence: float = 0.95) -> Comparison | None:
    """Ratios compared with the delta method (z-test); None with fewer than two units on a
    side or a zero denominator."""
    if control.n < 2 or variant.n < 2 or control.sum_y == 0 or variant.sum_y == 0:
        return None
    quantile = float(stats.norm.ppf((1 + confidence) / 2))
    var_c, var_v = control.variance, variant.variance
    p_value = _p_value(variant.ratio - control.ratio, var_c + var_v,
                       lambda z: 2 * float(stats.norm.sf(abs(z))))
    return _compare(control.ratio, variant.ratio, var_c, var_v, quantile=quantile,
                    p_value=p_value)


def _p_value(difference: float, variance: float,
             two_sided: Callable[[float], float]) -> float:
    """Two-sided p-value of ``difference`` with ``variance``; certain when it is 0."""
    if variance == 0:
        return 1.0 if difference == 0 else 0.0
    return two_sided(difference / math.sqrt(variance))


def _compare(control: float, variant: float, var_c: float, var_v: float, *,
             quantile: float, p_value: float) -> Comparison:
    difference = variant - control
    margin = quantile * math.sqrt(var_c + var_v)
    lift = low = high = None
    if control != 0:
        lift = variant / control - 1
        # Delta method for variant / control: Var ≈ Var(v)/c² + v²·Var(c)/c⁴.
        relative = quantile * math.sqrt(var_v / control ** 2 + variant ** 2 * var_c / control ** 4)
        low, high = lift - relative, lift + relative
    return Comparison(control, variant, lift, low, high, difference, difference - margin,
                      difference + margin, p_value)


def srm_p_value(units: Sequence[int], weights: Sequence[float]) -> float | None:
    """Chi-square p-value of units per variant against the allocation weights (a small
    value means the split is not what was configured); None without units."""
    total, weight = sum(units), sum(weights)
    if total == 0 or len(units) < 2:
        return None
    expected = [total * w / weight for w in weights]
    statistic = sum((o - e) ** 2 / e for o, e in zip(units, expected, strict=True))
    return float(stats.chi2.sf(statistic, len(units) - 1))
