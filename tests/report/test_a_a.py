"""A/A experiments through the report's own Spark moments and statistics: with no
difference between the arms, 5 % of comparisons (and of SRM checks) come out significant at
5 %. Visitors differ in propensity and have several visits, so treating visits as
independent units would not hold; the visitor is the unit here."""

from __future__ import annotations

from datetime import UTC, datetime

from pyspark.sql import functions as F

from abstream.config import ReportSettings
from abstream.report.build import experiment_report
from abstream.report.moments import served_series

EXPERIMENTS = 1_000
VISITORS = 300 * EXPERIMENTS
START = datetime(2026, 3, 1, tzinfo=UTC)


def _a_a_visits(spark):
    visitors = spark.range(VISITORS).select(
        F.col("id").cast("string").alias("visitor_id"),
        F.concat(F.lit("e"), (F.col("id") % EXPERIMENTS).cast("string")).alias("experiment"),
        F.when(F.rand(1) < 0.5, "control").otherwise("treatment").alias("variant"),
        (F.rand(2) * 0.4).alias("propensity"),
        (1 + F.floor(F.rand(3) * F.rand(4) * 6)).cast("int").alias("visit_count"),
    )
    visits = visitors.select("*", F.explode(F.sequence(F.lit(1), "visit_count")).alias("k"))
    ordered = F.rand(5) < F.col("propensity")
    return visits.select(
        "visitor_id",
        (F.lit(START) + F.make_interval(mins=(F.rand(6) * 2_880).cast("int")))
        .alias("visit_start"),
        ordered.cast("long").alias("orders"),
        F.when(ordered, F.round(-F.log(F.rand(7)) * 60 * (1 + F.col("propensity")), 2))
        .otherwise(0).cast("decimal(28,2)").alias("revenue"),
        (F.rand(8) < 0.2 + F.col("propensity")).alias("is_bounce"),
        (F.rand(9) < 0.1).alias("is_error_visit"),
        F.lit(True).alias("final"),
        F.array(F.struct(F.col("experiment").alias("id"), F.col("variant").alias("variant"),
                         F.lit(False).alias("qualified"),
                         F.lit(None).cast("timestamp").alias("exposed_at"),
                         F.lit(0).cast("long").alias("exposed_orders"),
                         F.lit(0).cast("decimal(28,2)").alias("exposed_revenue")))
        .alias("experiments"),
    )


def test_false_positive_rate_of_a_a_experiments_is_five_percent(spark):
    visits = _a_a_visits(spark).cache()
    try:
        times, series = served_series(visits, 2)
    finally:
        visits.unpersist()
    settings = ReportSettings()
    significant: dict[str, int] = {}
    srm_flags = 0
    for i in range(EXPERIMENTS):
        experiment = f"e{i}"
        report = experiment_report(
            experiment, "assigned", totals={},
            series={variant: series[(experiment, "assigned", variant)]
                    for variant in ("control", "treatment")},
            times=times, settings=settings)
        srm_flags += report.srm_p_value < 0.05
        for comparison in report.comparisons:
            significant[comparison.metric] = significant.get(comparison.metric, 0) + \
                (comparison.result.p_value < 0.05)
    rates = {metric: count / EXPERIMENTS for metric, count in significant.items()}
    for metric in ("conversion_rate", "revenue_per_visitor", "bounce_rate"):
        assert 0.03 <= rates[metric] <= 0.07, rates
    assert 0.03 <= srm_flags / EXPERIMENTS <= 0.07
