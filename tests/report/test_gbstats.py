"""The comparisons equal GrowthBook's stats engine (``gbstats``) on the same sufficient
statistics: its fixed-horizon ``TwoSidedTTest`` and its ``SequentialTwoSidedTTest`` (the
asymptotic confidence sequence), the lift and its intervals against its relative
difference, the difference, its intervals and the p-values against its absolute one."""

import numpy as np
import pytest
from gbstats.frequentist.tests import (
    FrequentistConfig,
    SequentialConfig,
    SequentialTwoSidedTTest,
    TwoSidedTTest,
)
from gbstats.models.statistics import RatioStatistic, SampleMeanStatistic

from abstream.report.statistics import (
    Comparison,
    Inference,
    Interval,
    MeanMoments,
    RatioMoments,
    delta_ratio,
    welch,
)

CONFIDENCE = 0.95
TUNING = 5_000


def _mean(values: np.ndarray) -> tuple[MeanMoments, SampleMeanStatistic]:
    n, total, squares = len(values), float(values.sum()), float((values ** 2).sum())
    return MeanMoments(n, total, squares), SampleMeanStatistic(n=n, sum=total,
                                                               sum_squares=squares)


def _ratio(x: np.ndarray, y: np.ndarray) -> tuple[RatioMoments, RatioStatistic]:
    n = len(x)
    moments = RatioMoments(n, float(x.sum()), float(y.sum()), float((x * x).sum()),
                           float((y * y).sum()), float((x * y).sum()))
    statistic = RatioStatistic(
        n=n, m_statistic=SampleMeanStatistic(n=n, sum=moments.sum_x, sum_squares=moments.sum_xx),
        d_statistic=SampleMeanStatistic(n=n, sum=moments.sum_y, sum_squares=moments.sum_yy),
        m_d_sum_of_products=moments.sum_xy)
    return moments, statistic


def _growthbook(control, variant, difference: str, sequential: bool):
    alpha = 1 - CONFIDENCE
    if sequential:
        return SequentialTwoSidedTTest(control, variant, SequentialConfig(
            alpha=alpha, difference_type=difference,
            sequential_tuning_parameter=TUNING)).compute_result()
    return TwoSidedTTest(control, variant, FrequentistConfig(
        alpha=alpha, difference_type=difference)).compute_result()


def assert_equal_to_growthbook(result: Comparison, control, variant) -> None:
    """``result`` equals gbstats' fixed and sequential tests on ``control`` and
    ``variant`` (its statistics), relative for the lift, absolute for the rest."""
    cases = [
        ("fixed", "absolute", False, result.difference, result.fixed, result.p_value),
        ("sequential", "absolute", True, result.difference, result.sequential,
         result.sequential_p_value),
        ("fixed lift", "relative", False, result.lift, result.fixed_lift, None),
        ("sequential lift", "relative", True, result.lift, result.sequential_lift, None),
    ]
    for name, difference, sequential, estimate, interval, p_value in cases:
        theirs = _growthbook(control, variant, difference, sequential)
        assert theirs.error_message is None, name
        assert isinstance(interval, Interval), name
        assert (estimate, interval.low, interval.high) == pytest.approx(
            (theirs.expected, *theirs.ci), rel=1e-9, abs=1e-12), name
        if p_value is not None:
            assert p_value == pytest.approx(theirs.p_value, rel=1e-9, abs=1e-15), name


INFERENCE = Inference(confidence=CONFIDENCE, tuning=TUNING)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_mean_per_visitor_equals_growthbook(seed):
    rng = np.random.default_rng(seed)
    control = rng.exponential(20.0, 900) * rng.binomial(1, 0.3, 900)
    variant = rng.exponential(22.0, 850) * rng.binomial(1, 0.32, 850)
    (ours_c, theirs_c), (ours_v, theirs_v) = _mean(control), _mean(variant)

    assert_equal_to_growthbook(welch(ours_c, ours_v, INFERENCE), theirs_c, theirs_v)


@pytest.mark.parametrize("seed", [4, 5, 6])
def test_a_ratio_per_visitor_equals_growthbook(seed):
    rng = np.random.default_rng(seed)

    def arm(n: int, rate: float) -> tuple[np.ndarray, np.ndarray]:
        visits = (rng.poisson(1.5, n) + 1).astype(float)
        return rng.binomial(visits.astype(int), rate).astype(float), visits

    (ours_c, theirs_c), (ours_v, theirs_v) = _ratio(*arm(1_200, 0.08)), _ratio(*arm(1_150, 0.09))

    assert_equal_to_growthbook(delta_ratio(ours_c, ours_v, INFERENCE), theirs_c, theirs_v)
