"""The statistics against scipy on the same data, and by simulation."""

import numpy as np
import pytest
from scipy import stats
from statsmodels.stats.multitest import multipletests

from abstream.report.statistics import (
    Inference,
    MeanMoments,
    RatioMoments,
    adjusted_p_values,
    delta_ratio,
    srm_p_value,
    welch,
)


def _means(values: np.ndarray) -> MeanMoments:
    return MeanMoments(len(values), float(values.sum()), float((values ** 2).sum()))


def _ratios(x: np.ndarray, y: np.ndarray) -> RatioMoments:
    return RatioMoments(len(x), float(x.sum()), float(y.sum()), float((x * x).sum()),
                        float((y * y).sum()), float((x * y).sum()))


def test_welch_equals_scipy_on_the_same_data():
    rng = np.random.default_rng(3)
    control = rng.exponential(20.0, 800)
    variant = rng.exponential(23.0, 650) * rng.uniform(0.5, 1.5, 650)
    result = welch(_means(control), _means(variant))
    reference = stats.ttest_ind(variant, control, equal_var=False)
    interval = reference.confidence_interval(0.95)
    assert result.p_value == pytest.approx(reference.pvalue, rel=1e-9)
    assert (result.fixed.low, result.fixed.high) == pytest.approx(
        (interval.low, interval.high), rel=1e-9)
    assert result.lift == pytest.approx(variant.mean() / control.mean() - 1)


def test_delta_method_equals_the_linearised_per_unit_variance():
    rng = np.random.default_rng(4)
    visits = rng.poisson(1.8, 5_000) + 1
    orders = rng.binomial(visits, 0.07)
    moments = _ratios(orders.astype(float), visits.astype(float))
    ratio = orders.sum() / visits.sum()
    linearised = (orders - ratio * visits) / visits.mean()
    assert moments.variance == pytest.approx(linearised.var(ddof=1) / len(visits), rel=1e-9)


def test_delta_method_with_one_per_unit_is_welchs_t_test_of_means():
    rng = np.random.default_rng(5)
    a, b = rng.normal(10, 3, 2_000), rng.normal(10.3, 3, 2_100)
    result = delta_ratio(_ratios(a, np.ones_like(a)), _ratios(b, np.ones_like(b)))
    reference = stats.ttest_ind(b, a, equal_var=False)
    assert result.p_value == pytest.approx(reference.pvalue, rel=1e-9)


def test_srm_equals_scipy_chisquare():
    assert srm_p_value([5_100, 4_900], [1, 1]) == pytest.approx(
        stats.chisquare([5_100, 4_900]).pvalue, rel=1e-12)
    assert srm_p_value([3_000, 1_000, 1_050], [2, 1, 1]) == pytest.approx(
        stats.chisquare([3_000, 1_000, 1_050], [2_525, 1_262.5, 1_262.5]).pvalue, rel=1e-12)
    assert srm_p_value([5_300, 4_700], [1, 1]) < 1e-8, "a 53/47 split of 10,000 is flagged"
    assert srm_p_value([0, 0], [1, 1]) is None


def _visitors(rng, n: int, conversion: float) -> tuple[np.ndarray, np.ndarray]:
    visits = rng.poisson(1.5, n) + 1
    return rng.binomial(visits, conversion).astype(float), visits.astype(float)


def test_a_a_false_positive_rate_is_close_to_five_percent():
    rng = np.random.default_rng(6)
    experiments = 400
    positives = sum(
        delta_ratio(_ratios(*_visitors(rng, 2_000, 0.05)),
                    _ratios(*_visitors(rng, 2_000, 0.05))).p_value < 0.05
        for _ in range(experiments))
    assert 0.03 <= positives / experiments <= 0.07, positives


def test_a_planted_lift_is_recovered():
    rng = np.random.default_rng(7)
    result = delta_ratio(_ratios(*_visitors(rng, 40_000, 0.050)),
                         _ratios(*_visitors(rng, 40_000, 0.055)))
    assert result.p_value < 0.05
    assert result.fixed_lift.low < 0.10 < result.fixed_lift.high
    assert result.fixed_lift.low > 0


def test_too_few_units_or_no_denominator_compare_nothing():
    one = MeanMoments(1, 5.0, 25.0)
    assert welch(one, MeanMoments(10, 50.0, 300.0)) is None
    assert delta_ratio(RatioMoments(5, 0, 0, 0, 0, 0), RatioMoments(5, 1, 5, 1, 5, 1)) is None
    flat = welch(MeanMoments(3, 6.0, 12.0), MeanMoments(3, 6.0, 12.0))
    assert (flat.p_value, flat.sequential_p_value, flat.lift, flat.fixed.low,
            flat.sequential.high) == (1.0, 1.0, 0.0, 0.0, 0.0)


def test_adjusted_p_values_equal_statsmodels():
    rng = np.random.default_rng(8)
    for size in (1, 2, 5, 12):
        raw = list(np.concatenate([rng.uniform(0, 0.08, size), [0.03, 0.03]]))
        for correction, method in (("holm", "holm"), ("bh", "fdr_bh")):
            assert adjusted_p_values(raw, correction) == pytest.approx(
                list(multipletests(raw, method=method)[1]), rel=1e-12), (correction, size)
        assert adjusted_p_values(raw, "none") == raw
    assert adjusted_p_values([], "holm") == []


def test_the_sequence_is_narrowest_at_its_tuning_sample():
    for units in (500, 5_000, 50_000):
        tuned = Inference(tuning=units).sequential_multiplier(units)
        for other in (units // 10, units * 10):
            assert tuned < Inference(tuning=other).sequential_multiplier(units)
        assert tuned > stats.norm.ppf(0.975), "wider than one look's interval"


def test_the_sequential_p_value_is_below_alpha_exactly_when_the_sequence_excludes_zero():
    inference = Inference(0.95, 2_000)
    rng = np.random.default_rng(9)
    for _ in range(200):
        control = _ratios(*_visitors(rng, 1_000, 0.05))
        variant = _ratios(*_visitors(rng, 1_000, rng.uniform(0.045, 0.065)))
        result = delta_ratio(control, variant, inference)
        assert (result.sequential_p_value < 0.05) == result.sequential.excludes_zero()
    boundary = inference.sequential_multiplier(2_000)
    assert inference.sequential_p_value(boundary, 2_000) == pytest.approx(0.05, rel=1e-9)


def test_peeking_inflates_fixed_intervals_but_not_the_sequence():
    """Streams of A/A unit differences looked at 50 times: the fixed-horizon z interval
    excludes zero at some look far more often than 5 %, the confidence sequence at most
    5 % of the time at any look."""
    rng = np.random.default_rng(10)
    looks = np.unique(np.geomspace(20, 5_000, 50).astype(int))
    inference = Inference(0.95, 2_000)
    streams, fixed_hits, sequential_hits = 2_000, 0, 0
    z = stats.norm.ppf(0.975)
    multipliers = np.array([inference.sequential_multiplier(n) for n in looks])
    for _ in range(streams):
        values = rng.exponential(1.0, looks[-1]) - 1.0
        sums = np.cumsum(values)[looks - 1]
        squares = np.cumsum(values ** 2)[looks - 1]
        means = sums / looks
        se = np.sqrt((squares - sums ** 2 / looks) / (looks - 1) / looks)
        distance = np.abs(means) / se
        fixed_hits += bool((distance > z).any())
        sequential_hits += bool((distance > multipliers).any())
    assert fixed_hits / streams > 0.15, fixed_hits
    assert sequential_hits / streams <= 0.05, sequential_hits


def test_at_the_minimum_detectable_effect_the_test_has_80_percent_power():
    rng = np.random.default_rng(11)
    control, variant = _ratios(*_visitors(rng, 3_000, 0.05)), _ratios(*_visitors(rng, 3_000, 0.05))
    result = delta_ratio(control, variant, Inference(0.95, 6_000))
    se = np.sqrt(control.variance + variant.variance)
    fixed_bound = (result.fixed.high - result.fixed.low) / 2
    sequential_bound = (result.sequential.high - result.sequential.low) / 2
    assert stats.norm.sf(fixed_bound, loc=result.mde, scale=se) == pytest.approx(0.8)
    assert stats.norm.sf(sequential_bound, loc=result.sequential_mde, scale=se) == \
        pytest.approx(0.8)
    assert result.sequential_mde > result.mde
