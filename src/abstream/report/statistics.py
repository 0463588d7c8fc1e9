"""Comparing a variant with control from sufficient statistics, never from raw rows.

- Means (one value per unit, e.g. revenue per visitor): Welch's t-test, whose degrees of
  freedom come from the Welch-Satterthwaite equation.
- Ratios of two sums over units (orders per visit, revenue per order, with the visitor as
  the unit, so visits of one visitor are not taken as independent): the delta method, a
  normal approximation of ratio = mean(x) / mean(y), its variance then compared as a mean's
  (Welch's t), as GrowthBook's engine does.
- Sample-ratio mismatch: Pearson's chi-square goodness-of-fit of units per variant against
  the allocation weights.

Lifts are relative (variant / control - 1) with their confidence interval from the delta
method; the absolute difference and its interval come along.

Every comparison has two kinds of inference (:class:`Inference`):

- fixed-horizon: the usual interval and p-value, valid for one look at a sample size
  chosen in advance;
- sequential: the asymptotic confidence sequence of Waudby-Smith, Arnold, Wu, Howard and
  Ramdas ("Time-uniform central limit theory and asymptotic confidence sequences", 2023),
  with the normal-mixture boundary of Howard et al.: it covers the true difference at every
  look at once with probability 1 - alpha, so a result may be read, and acted on, as often
  as it is refreshed. Its p-value is the smallest alpha whose sequence excludes zero.

A comparison's minimum detectable effect is the true difference its test would find with
80 % power at the current sample size (were this the last look).

Multiple comparisons: :func:`adjusted_p_values` (Holm, Benjamini-Hochberg).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from scipy import stats

from abstream.config import Correction

#: The power at which the minimum detectable effect is worked out.
POWER = 0.8
_Z_POWER = float(stats.norm.ppf(POWER))


@dataclass(frozen=True)
class Inference:
    """The confidence level of every interval, and the sequential interval's tuning: the
    number of units (visitors of both arms together) at which the confidence sequence is
    narrowest. Far from it the sequence is a little wider than it could be; it is valid
    at every sample size either way."""

    confidence: float = 0.95
    tuning: int = 5_000
    #: Fewer units than this on a side (units with orders, for a ratio per order) and the
    #: comparison is not made: the normal approximations need a sample.
    min_units: int = 2

    @property
    def alpha(self) -> float:
        return 1 - self.confidence

    @property
    def least_units(self) -> int:
        """Units a side needs for a comparison: ``min_units``, and never fewer than two."""
        return max(2, self.min_units)

    @property
    def rho2(self) -> float:
        """The mixture's variance per unit, rho², that makes the sequence narrowest at
        ``tuning`` units (Howard et al., the normal-mixture boundary)."""
        log_alpha = math.log(self.alpha)
        return (-2 * log_alpha + math.log(-2 * log_alpha + 1)) / self.tuning

    def sequential_multiplier(self, units: int) -> float:
        """The sequence's half-width over the estimate's standard error at ``units`` units:
        what z is to a fixed-horizon interval, growing slowly with the sample."""
        t = units * self.rho2
        return math.sqrt(2 * (t + 1) / t * math.log(math.sqrt(t + 1) / self.alpha))

    def sequential_p_value(self, z: float, units: int) -> float:
        """The smallest alpha at which the sequence (at this rho) excludes zero, for a
        difference ``z`` standard errors from it."""
        t = units * self.rho2
        return min(1.0, math.sqrt(t + 1) * math.exp(-z * z * t / (2 * (t + 1))))


@dataclass(frozen=True)
class MeanMoments:
    """n units, the sum of their values and of their squares; ``binary``: each value is 0
    or 1 (a proportion)."""

    n: int
    total: float
    total_sq: float
    binary: bool = False

    @property
    def mean(self) -> float:
        return self.total / self.n

    @property
    def variance(self) -> float:
        """A proportion's p(1 - p), else the sample variance (n - 1 in the denominator),
        as GrowthBook's engine has them."""
        if self.binary:
            return self.mean * (1 - self.mean)
        return max(0.0, (self.total_sq - self.total ** 2 / self.n) / (self.n - 1))


@dataclass(frozen=True)
class RatioMoments:
    """n units with values x (numerator) and y (denominator): sums of x, y, x², y², x·y;
    ``with_y``: how many units have a y other than 0 (all n when not given)."""

    n: int
    sum_x: float
    sum_y: float
    sum_xx: float
    sum_yy: float
    sum_xy: float
    with_y: int | None = None

    @property
    def informative(self) -> int:
        """The units that carry the ratio: those with a y."""
        return self.n if self.with_y is None else self.with_y

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


#: The z of the ranks whose order statistics bound a quantile (95 %, as GrowthBook's
#: engine has them); the variance below is the same at any z.
Z_RANK = float(stats.norm.ppf(0.975))


@dataclass(frozen=True)
class QuantileMoments:
    """A quantile ``nu`` of the values of ``n`` events of one variant: its estimate, the
    order statistics at ranks n(nu -/+ Z_RANK sqrt(nu (1 - nu) / n)) (``lower``,
    ``upper``), and, over its ``units`` (the clusters the events come in), the sums of s
    (a unit's events at or below the estimate), of m (its events), of s², m² and s·m.

    The estimate's variance is Deng, Knoblich and Lu's (2018): the width of the order
    statistics' interval, for independent events, times the ratio of the delta-method
    variance of sum(s) / sum(m) over units to nu (1 - nu) / n, which is what several
    events per unit change (GrowthBook's ``QuantileClusteredStatistic``)."""

    nu: float
    n: int
    estimate: float
    lower: float
    upper: float
    units: int
    sum_s: float
    sum_m: float
    sum_ss: float
    sum_mm: float
    sum_sm: float

    @property
    def informative(self) -> bool:
        """Whether both ranks are inside the sample, and there are units to vary."""
        z2 = Z_RANK ** 2
        return self.n > z2 * self.nu / (1 - self.nu) and self.n > z2 * (1 - self.nu) / self.nu \
            and self.units > 1 and self.sum_m > 0

    @property
    def variance(self) -> float:
        """The variance of the estimate."""
        independent = (self.n - 1) / self.n * ((self.upper - self.lower) / (2 * Z_RANK)) ** 2
        k = self.units
        mean_s, mean_m = self.sum_s / k, self.sum_m / k
        var_s = (self.sum_ss / k - mean_s ** 2) * k / (k - 1)
        var_m = (self.sum_mm / k - mean_m ** 2) * k / (k - 1)
        cov = (self.sum_sm / k - mean_s * mean_m) * k / (k - 1)
        clustered = (var_s - 2 * mean_s * cov / mean_m + mean_s ** 2 * var_m / mean_m ** 2) \
            / (k * mean_m ** 2)
        return max(0.0, independent * clustered / (self.nu * (1 - self.nu) / self.n))


@dataclass(frozen=True)
class Interval:
    low: float
    high: float

    def excludes_zero(self) -> bool:
        return self.low > 0 or self.high < 0


@dataclass(frozen=True)
class Comparison:
    """A variant against control: values, relative lift and absolute difference, each with
    its fixed-horizon interval and its confidence sequence (lift intervals None when
    control is 0), the two p-values of no difference, and the minimum detectable effect of
    each test (absolute, like the difference)."""

    control_value: float
    variant_value: float
    difference: float
    lift: float | None
    fixed: Interval
    sequential: Interval
    fixed_lift: Interval | None
    sequential_lift: Interval | None
    p_value: float
    sequential_p_value: float
    mde: float
    sequential_mde: float


def welch(control: MeanMoments, variant: MeanMoments,
          inference: Inference = Inference()) -> Comparison | None:
    """Means compared with Welch's t-test; None with fewer than ``min_units`` (at least
    two) units on a side."""
    if min(control.n, variant.n) < inference.least_units:
        return None
    return _t_test((control.mean, variant.mean),
                   (control.variance / control.n, variant.variance / variant.n),
                   (control.n, variant.n), inference)


def delta_ratio(control: RatioMoments, variant: RatioMoments,
                inference: Inference = Inference()) -> Comparison | None:
    """Ratios compared with the delta method and Welch's t (its degrees of freedom from the
    ratios' variances, as GrowthBook's engine has them); None with fewer than ``min_units``
    (at least two) units with a denominator on a side."""
    if min(control.informative, variant.informative) < inference.least_units \
            or control.sum_y == 0 or variant.sum_y == 0:
        return None
    return _t_test((control.ratio, variant.ratio), (control.variance, variant.variance),
                   (control.n, variant.n), inference)


def quantile_test(control: QuantileMoments, variant: QuantileMoments,
                  inference: Inference = Inference()) -> Comparison | None:
    """Quantiles compared by Welch's t on their estimates' variances; None with fewer than
    ``min_units`` units on a side, or too few events for the order statistics."""
    if min(control.units, variant.units) < inference.least_units \
            or not (control.informative and variant.informative):
        return None
    return _t_test((control.estimate, variant.estimate), (control.variance, variant.variance),
                   (control.n, variant.n), inference)


def _t_test(estimates: tuple[float, float], variances: tuple[float, float],
            units: tuple[int, int], inference: Inference) -> Comparison:
    """Control's and the variant's estimates, with the variances of their estimation from
    their units, compared with Welch's t: its degrees of freedom from the
    Welch-Satterthwaite equation."""
    (control, variant), (var_c, var_v), (n_c, n_v) = estimates, variances, units
    se2 = var_c + var_v
    df = se2 ** 2 / (var_c ** 2 / (n_c - 1) + var_v ** 2 / (n_v - 1)) if se2 > 0 else math.inf
    two_sided = 1 - inference.alpha / 2
    quantile = float(stats.t.ppf(two_sided, df)) if math.isfinite(df) else \
        float(stats.norm.ppf(two_sided))
    p_value = _p_value(variant - control, se2, lambda z: 2 * float(stats.t.sf(abs(z), df)))
    return _compare(control, variant, var_c, var_v, quantile=quantile, p_value=p_value,
                    units=n_c + n_v, inference=inference)


def _p_value(difference: float, variance: float,
             two_sided: Callable[[float], float]) -> float:
    """Two-sided p-value of ``difference`` with ``variance``; certain when it is 0."""
    if variance == 0:
        return 1.0 if difference == 0 else 0.0
    return two_sided(difference / math.sqrt(variance))


def _around(value: float, margin: float) -> Interval:
    return Interval(value - margin, value + margin)


def _compare(control: float, variant: float, var_c: float, var_v: float, *,
             quantile: float, p_value: float, units: int, inference: Inference
             ) -> Comparison:
    difference = variant - control
    se = math.sqrt(var_c + var_v)
    multiplier = inference.sequential_multiplier(units)
    sequential_p = _p_value(difference, se * se,
                            lambda z: inference.sequential_p_value(z, units))
    lift = fixed_lift = sequential_lift = None
    if control != 0:
        lift = variant / control - 1
        # Delta method for variant / control: Var ≈ Var(v)/c² + v²·Var(c)/c⁴.
        relative = math.sqrt(var_v / control ** 2 + variant ** 2 * var_c / control ** 4)
        fixed_lift = _around(lift, quantile * relative)
        sequential_lift = _around(lift, multiplier * relative)
    return Comparison(
        control_value=control, variant_value=variant, difference=difference, lift=lift,
        fixed=_around(difference, quantile * se),
        sequential=_around(difference, multiplier * se),
        fixed_lift=fixed_lift, sequential_lift=sequential_lift,
        p_value=p_value, sequential_p_value=sequential_p,
        mde=(quantile + _Z_POWER) * se, sequential_mde=(multiplier + _Z_POWER) * se)


def adjusted_p_values(p_values: Sequence[float], correction: Correction) -> list[float]:
    """``p_values`` adjusted for their number: Holm's step-down (family-wise error rate),
    Benjamini-Hochberg's step-up (false discovery rate), or as they are (``none``). A
    comparison is significant at alpha when its adjusted p-value is below alpha."""
    m = len(p_values)
    if correction == "none" or m == 0:
        return list(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [0.0] * m
    if correction == "holm":
        running = 0.0
        for rank, i in enumerate(order):
            running = max(running, min(1.0, (m - rank) * p_values[i]))
            adjusted[i] = running
        return adjusted
    running = 1.0
    for rank in range(m - 1, -1, -1):
        i = order[rank]
        running = min(running, m / (rank + 1) * p_values[i])
        adjusted[i] = running
    return adjusted


def srm_p_value(units: Sequence[int], weights: Sequence[float]) -> float | None:
    """Chi-square p-value of units per variant against the allocation weights (a small
    value means the split is not what was configured); None without units."""
    total, weight = sum(units), sum(weights)
    if total == 0 or len(units) < 2:
        return None
    expected = [total * w / weight for w in weights]
    statistic = sum((o - e) ** 2 / e for o, e in zip(units, expected, strict=True))
    return float(stats.chi2.sf(statistic, len(units) - 1))
