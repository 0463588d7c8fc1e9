"""Events and visits -> per experiment x variant x population x event-time window metrics.

What each event and visit counts for (its rows from ``stages.sessions.event_targets`` and
``visit_targets``, one per experiment, variant and population) is decided by its visit.
Event-level numbers are windowed by the event's time, visit numbers by the visit's start.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import DataType

from abstream.config import MetricsSettings
from abstream.durations import spark_interval
from abstream.observed import (
    FRESHNESS_BUCKETS,
    FRESHNESS_COUNT,
    FRESHNESS_SUM,
    freshness_bucket,
)
from abstream.schemas import EXPERIMENT_METRICS, MONEY_SQUARED, MONEY_TOTAL
from abstream.stages import constants
from abstream.stages.lineage import gold_columns
from abstream.stages.sessions import TARGET

_LONG_MEASURES = ("events", "pageviews", "add_to_carts", "orders", "units", "errors",
                  "page_load_ms_sum", "page_load_count", "visits", "bounces", "error_visits")
_MONEY_MEASURES = {"revenue": MONEY_TOTAL, "revenue_sq": MONEY_SQUARED}


def _kind(measure: str) -> DataType | str:
    return _MONEY_MEASURES.get(measure, "long")


def _none(measure: str) -> Column:
    return F.lit(None).cast(_kind(measure)).alias(measure)


def _total(measure: str) -> Column:
    return F.coalesce(F.sum(measure), F.lit(0)).cast(_kind(measure)).alias(measure)


@dataclass(frozen=True)
class Windowing:
    """Event-time windows: tumbling when ``slide`` is None, sliding otherwise."""

    length: timedelta
    slide: timedelta | None = None

    @classmethod
    def of(cls, settings: MetricsSettings) -> Windowing:
        return cls(settings.window, settings.slide)

    @property
    def step(self) -> timedelta:
        """The distance from one window's start to the next one's."""
        return self.slide or self.length

    def window(self, ts: Column) -> Column:
        if self.slide is None or self.slide == self.length:
            return F.window(ts, spark_interval(self.length))
        return F.window(ts, spark_interval(self.length), spark_interval(self.slide))


#: The event columns the metrics read, besides ``TARGET``.
EVENT_INPUT = ("event_ts", "visitor_id", "type", "revenue", "units", "page_load_ms")


def _event_facts(events: DataFrame) -> DataFrame:
    """A row per event and target. A measure an event does not have (no revenue, no
    units, no page load, no visit) is NULL, not 0: sums skip NULLs, so the wide decimal
    sums and the squares are only worked out for the events with revenue."""
    is_type = {kind: (F.col("type") == kind).cast("long")
               for kind in ("pageview", "add_to_cart", "order", "error")}
    revenue = F.col("revenue").cast(MONEY_TOTAL)
    return events.select(
        F.col("event_ts").alias("ts"),
        "visitor_id",
        *TARGET,
        F.lit(1).cast("long").alias("events"),
        is_type["pageview"].alias("pageviews"),
        is_type["add_to_cart"].alias("add_to_carts"),
        is_type["order"].alias("orders"),
        revenue.alias("revenue"),
        (revenue * revenue).cast(MONEY_SQUARED).alias("revenue_sq"),
        F.col("units").cast("long").alias("units"),
        is_type["error"].alias("errors"),
        F.col("page_load_ms").cast("long").alias("page_load_ms_sum"),
        F.col("page_load_ms").isNotNull().cast("long").alias("page_load_count"),
        *(_none(name) for name in ("visits", "bounces", "error_visits")),
    )


def _visit_facts(visits: DataFrame) -> DataFrame:
    """A row per visit and target: its visit measures, NULL for the event ones."""
    return visits.select(
        F.col("visit_start").alias("ts"),
        F.lit(None).cast("string").alias("visitor_id"),
        *TARGET,
        *(_none(name) for name in ("events", "pageviews", "add_to_carts", "orders",
                                   "revenue", "revenue_sq", "units", "errors",
                                   "page_load_ms_sum", "page_load_count")),
        F.lit(1).cast("long").alias("visits"),
        F.col("is_bounce").cast("long").alias("bounces"),
        F.col("is_error_visit").cast("long").alias("error_visits"),
    )


def experiment_metrics(
    events: DataFrame | None,
    visits: DataFrame | None,
    windowing: Windowing,
    hll_lg_k: int = 12,
    exact_visitors: bool = False,
) -> DataFrame:
    """Gold rows (without ``layer``/``computed_at``) from rows of events and/or visits, each
    counted for its ``TARGET`` (``stages.sessions.event_targets`` / ``visit_targets``).

    ``visitors`` is the HLL sketch's estimate, or with ``exact_visitors`` (batch only: a
    distinct count cannot be added up from increments) the exact distinct count; the sketch
    is kept either way, so windows and increments can be merged. The exact count sums each
    visitor's rows first and then counts the visitors, one row each: a distinct count next
    to the other aggregates would make Spark expand every row in two.
    """
    facts = []
    if events is not None:
        facts.append(_event_facts(events))
    if visits is not None:
        facts.append(_visit_facts(visits))
    if not facts:
        raise ValueError("experiment_metrics needs events, visits or both")
    union = facts[0] if len(facts) == 1 else facts[0].unionByName(facts[1])
    keys = [windowing.window(F.col("ts")).alias("window"), *TARGET]
    if exact_visitors:
        union = union.groupBy(*keys, "visitor_id").agg(
            *(F.sum(name).alias(name) for name in (*_LONG_MEASURES, *_MONEY_MEASURES)))
        keys = ["window", *TARGET]
    visitor = F.col("visitor_id")
    measures = [F.hll_sketch_agg(visitor, hll_lg_k).alias("visitors_sketch")]
    if exact_visitors:
        measures.append(F.count(visitor).alias("visitors"))
    measures += [_total(name) for name in (*_LONG_MEASURES, *_MONEY_MEASURES)]
    rows = union.groupBy(*keys).agg(*measures)
    return rows.select(
        "experiment_id", "variant", "population",
        F.col("window.start").alias("window_start"), F.col("window.end").alias("window_end"),
        "visitors_sketch",
        F.col("visitors") if exact_visitors else
        F.coalesce(F.hll_sketch_estimate("visitors_sketch"), F.lit(0)).alias("visitors"),
        *_LONG_MEASURES, *_MONEY_MEASURES,
    )


def freshness(taken_in: Column, at: int) -> list[Column]:
    """Aggregates of how old the events ``taken_in`` are at ``at`` (epoch microseconds, the
    micro-batch's start), named as the facts of gold freshness: their count, the sum of
    their ages and the cumulative count per bucket (``observed.FRESHNESS_BUCKETS``)."""
    age = F.when(taken_in, constants.micros_constant(at) - constants.micros("event_ts"))
    return [
        F.count(age).alias(FRESHNESS_COUNT),
        (F.coalesce(F.sum(age.cast("double")), F.lit(0.0)) / 1e6).alias(FRESHNESS_SUM),
        *(F.count_if(age <= bound * 1_000_000).alias(freshness_bucket(bound))
          for bound in FRESHNESS_BUCKETS),
    ]


def with_lineage(metrics: DataFrame, layer: str) -> DataFrame:
    """Add ``layer``, ``computed_at`` and ``window_date`` and fix the column order of the
    gold table."""
    return metrics.select(*gold_columns(EXPERIMENT_METRICS, layer))
