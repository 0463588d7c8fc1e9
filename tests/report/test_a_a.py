"""Experiments simulated through the report's own Spark moments and statistics.

A/A experiments (no difference between the arms): at one look, 5 % of comparisons (and of
SRM checks) come out significant at 5 %; looked at again and again as the data accumulates,
the fixed-horizon test finds a difference far more often, the confidence sequence at most
5 % of the time, and Holm's correction keeps the rate of experiments with any false
positive among their comparisons at 5 %. Experiments with a planted conversion lift
measure what the sequence costs in power. Visitors differ in propensity and have several
visits, so treating visits as independent units would not hold; the visitor is the unit
here.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from abstream.config import ReportSettings
from abstream.report.build import ExperimentReport, experiment_report
from abstream.report.moments import VariantSeries, served_series
from abstream.report.statistics import Comparison, adjusted_p_values
from abstream.schemas import EVENT_LISTS
from tests.helpers import CATALOG, assigned_entry

pytestmark = pytest.mark.long_module

METRICS = CATALOG.definitions

log = logging.getLogger(__name__)

EXPERIMENTS = 1_000
VISITORS = 300
#: Experiments with a planted lift of the order propensity, and their visitors each.
PLANTED_EXPERIMENTS, PLANTED_VISITORS, PLANTED_LIFT = 400, 1_000, 0.35
START = datetime(2026, 3, 1, tzinfo=UTC)
#: Visits start within 60 hours: with ``LOOKS`` points, a look every 3 hours, 21 in all.
SPAN_MINUTES, LOOKS = 3_600, 24
ALPHA = 0.05
VARIANTS = ("control", "treatment")


def _visits(spark: SparkSession, prefix: str, experiments: int, visitors: int,
            lift: float = 0.0) -> DataFrame:
    """Visits of ``experiments`` experiments of ``visitors`` visitors each, split evenly at
    random; the treatment's order propensity is ``1 + lift`` times control's."""
    people = spark.range(experiments * visitors).select(
        F.concat(F.lit(prefix), F.col("id").cast("string")).alias("visitor_id"),
        F.concat(F.lit(prefix), (F.col("id") % experiments).cast("string")).alias("experiment"),
        F.when(F.rand(1) < 0.5, "control").otherwise("treatment").alias("variant"),
        (F.rand(2) * 0.4).alias("propensity"),
        (1 + F.floor(F.rand(3) * F.rand(4) * 6)).cast("int").alias("visit_count"),
    )
    visits = people.select("*", F.explode(F.sequence(F.lit(1), "visit_count")).alias("k"))
    boost = F.when(F.col("variant") == "treatment", 1 + lift).otherwise(1.0)
    ordered = F.rand(5) < F.col("propensity") * boost
    return visits.select(
        "visitor_id",
        (F.lit(START) + F.make_interval(mins=(F.rand(6) * SPAN_MINUTES).cast("int")))
        .alias("visit_start"),
        ordered.cast("long").alias("orders"),
        F.when(ordered, F.round(-F.log(F.rand(7)) * 60 * (1 + F.col("propensity")), 2))
        .otherwise(0).cast("decimal(28,2)").alias("revenue"),
        (F.rand(8) < 0.2 + F.col("propensity")).alias("is_bounce"),
        (F.rand(9) < 0.1).alias("is_error_visit"),
        F.lit(True).alias("final"),
        F.array(assigned_entry(F.col("experiment"), F.col("variant"))).alias("experiments"),
    ).withColumn("metric_values", F.lit(None).cast(EVENT_LISTS)) \
        .withColumn("metric_parts", F.create_map(
        F.lit("visits"), F.lit(1.0), F.lit("bounce_visits"), F.col("is_bounce").cast("double"),
        F.lit("error_visits"), F.col("is_error_visit").cast("double"),
        F.lit("count[order]"), F.col("orders").cast("double"),
        F.lit("sum_revenue[order]"), F.col("revenue").cast("double")))


@dataclass(frozen=True)
class Simulated:
    a_a: list[ExperimentReport]
    planted: list[ExperimentReport]


def _reports(series: dict[tuple[str, str, str], VariantSeries], times: list[datetime],
             prefix: str, experiments: int, settings: ReportSettings) -> list[ExperimentReport]:
    return [experiment_report(
        f"{prefix}{i}", "assigned", totals={},
        series={v: series[(f"{prefix}{i}", "assigned", v)] for v in VARIANTS},
        times=times, settings=settings, catalog=CATALOG) for i in range(experiments)]


@pytest.fixture(scope="module")
def simulated(spark) -> Simulated:
    visits = _visits(spark, "a", EXPERIMENTS, VISITORS).unionByName(
        _visits(spark, "p", PLANTED_EXPERIMENTS, PLANTED_VISITORS, PLANTED_LIFT)).cache()
    try:
        times, series = served_series(visits, LOOKS, CATALOG)
    finally:
        visits.unpersist()
    assert len(times) >= 20, "at least 20 looks"
    # The sequences are tuned to the sample each experiment reaches (both arms).
    return Simulated(
        _reports(series, times, "a", EXPERIMENTS, ReportSettings(sequential_tuning=VISITORS)),
        _reports(series, times, "p", PLANTED_EXPERIMENTS,
                 ReportSettings(sequential_tuning=PLANTED_VISITORS)))


def _looks(report: ExperimentReport, metric: str) -> list[Comparison]:
    return [r for r in report.comparisons_over_time[("treatment", metric)] if r is not None]


def _ever(report: ExperimentReport, metric: str, significant) -> bool:
    return any(significant(r) for r in _looks(report, metric))


def _fixed(r: Comparison) -> bool:
    return r.p_value < ALPHA


def _sequential(r: Comparison) -> bool:
    return r.sequential.excludes_zero()


def _family_rejects(results: list[Comparison], p_value, correction: str) -> bool:
    """Whether any of one look's comparisons is significant after ``correction``."""
    return any(p < ALPHA for p in adjusted_p_values([p_value(r) for r in results], correction))


def _rate(hits: int, total: int) -> float:
    return round(hits / total, 4)


def test_false_positive_rate_of_a_a_experiments_is_five_percent(simulated):
    significant = {metric.name: 0 for metric in METRICS}
    srm_flags = 0
    for report in simulated.a_a:
        srm_flags += report.srm_p_value < ALPHA
        for comparison in report.comparisons:
            significant[comparison.metric] += comparison.result.p_value < ALPHA
    rates = {metric: count / EXPERIMENTS for metric, count in significant.items()}
    for metric in ("conversion_rate", "revenue_per_visitor", "bounce_rate"):
        assert 0.03 <= rates[metric] <= 0.07, rates
    assert 0.03 <= srm_flags / EXPERIMENTS <= 0.07


def test_peeking_inflates_the_fixed_test_and_the_sequence_holds(simulated):
    comparisons = EXPERIMENTS * len(METRICS)
    fixed = sum(_ever(r, m.name, _fixed) for r in simulated.a_a for m in METRICS)
    sequential = sum(_ever(r, m.name, _sequential) for r in simulated.a_a for m in METRICS)
    log.warning("A/A, %d comparisons stopped at the first significant look of %d: fixed %.4f, "
                "sequential %.4f", comparisons, len(simulated.a_a[0].times),
                fixed / comparisons, sequential / comparisons)
    assert _rate(fixed, comparisons) > 0.10
    assert _rate(sequential, comparisons) <= ALPHA


def test_holm_keeps_the_family_wise_rate_of_an_experiments_comparisons(simulated):
    final_unadjusted = final_holm = sequential_holm = 0
    for report in simulated.a_a:
        # The family at a look: the comparisons made at it (a metric whose sample is
        # still too small has none).
        last = [c.result for c in report.comparisons]
        final_unadjusted += _family_rejects(last, lambda r: r.p_value, "none")
        final_holm += _family_rejects(last, lambda r: r.p_value, "holm")
        points = zip(*(report.comparisons_over_time[("treatment", m.name)] for m in METRICS),
                     strict=True)
        sequential_holm += any(
            _family_rejects([r for r in look if r is not None], lambda r: r.sequential_p_value,
                            "holm") for look in points)
    log.warning("A/A family-wise rates over %d metrics: fixed at the last look %.4f, with Holm "
                "%.4f; sequential with Holm at any look %.4f", len(METRICS),
                final_unadjusted / EXPERIMENTS, final_holm / EXPERIMENTS,
                sequential_holm / EXPERIMENTS)
    assert _rate(final_unadjusted, EXPERIMENTS) > 0.10
    assert _rate(final_holm, EXPERIMENTS) <= ALPHA
    assert _rate(sequential_holm, EXPERIMENTS) <= ALPHA


def test_a_planted_lift_is_still_found_by_the_sequence(simulated):
    def power(found) -> float:
        return sum(map(found, simulated.planted)) / PLANTED_EXPERIMENTS

    fixed_last = power(lambda r: _fixed(_looks(r, "conversion_rate")[-1]))
    sequential_last = power(lambda r: _sequential(_looks(r, "conversion_rate")[-1]))
    sequential_any = power(lambda r: _ever(r, "conversion_rate", _sequential))
    log.warning("planted +%.0f%% conversion, power: fixed at the last look %.3f, sequential at "
                "the last look %.3f, sequential stopped at the first significant look %.3f",
                PLANTED_LIFT * 100, fixed_last, sequential_last, sequential_any)
    assert fixed_last >= 0.8
    assert sequential_any >= 0.5
    assert sequential_last <= fixed_last
