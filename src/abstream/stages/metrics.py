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

from abstream.config import MetricsSettings
from abstream.durations import spark_interval
from abstream.schemas import EXPERIMENT_METRICS, MONEY_SQUARED, MONEY_TOTAL
from abstream.stages.sessions import TARGET

#: Name of the observed metrics of gold freshness, and its histogram buckets (seconds).
FRESHNESS = "freshness"
FRESHNESS_BUCKETS = (1, 5, 15, 30, 60, 300, 900, 3600, 21600, 86400)

_LONG_MEASURES = ("events", "pageviews", "add_to_carts", "orders", "units", "errors",
                  "page_load_ms_sum", "page_load_count", "visits", "bounces", "error_visits")
_MONEY_MEASURES = {"revenue": MONEY_TOTAL, "revenue_sq": MONEY_SQUARED}


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
    is_type = {kind: (F.col("type") == kind).cast("long")
               for kind in ("pageview", "add_to_cart", "order", "error")}
    revenue = F.coalesce(F.col("revenue"), F.lit(0)).cast(MONEY_TOTAL)
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
        F.coalesce(F.col("units"), F.lit(0)).cast("long").alias("units"),
        is_type["error"].alias("errors"),
        F.coalesce(F.col("page_load_ms"), F.lit(0)).cast("long").alias("page_load_ms_sum"),
        F.col("page_load_ms").isNotNull().cast("long").alias("page_load_count"),
        F.lit(0).cast("long").alias("visits"),
        F.lit(0).cast("long").alias("bounces"),
        F.lit(0).cast("long").alias("error_visits"),
    )


def _visit_facts(visits: DataFrame) -> DataFrame:
    zero = F.lit(0).cast("long")
    return visits.select(
        F.col("visit_start").alias("ts"),
        F.lit(None).cast("string").alias("visitor_id"),
        *TARGET,
        *(zero.alias(name) for name in ("events", "pageviews", "add_to_carts", "orders")),
        F.lit(0).cast(MONEY_TOTAL).alias("revenue"),
        F.lit(0).cast(MONEY_SQUARED).alias("revenue_sq"),
        *(zero.alias(name) for name in ("units", "errors", "page_load_ms_sum",
                                        "page_load_count")),
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
    is kept either way, so windows and increments can be merged.
    """
    facts = []
    if events is not None:
        facts.append(_event_facts(events))
    if visits is not None:
        facts.append(_visit_facts(visits))
    if not facts:
        raise ValueError("experiment_metrics needs events, visits or both")
    union = facts[0] if len(facts) == 1 else facts[0].unionByName(facts[1])
    visitor = F.col("visitor_id")
    measures = [F.hll_sketch_agg(visitor, hll_lg_k).alias("visitors_sketch")]
    if exact_visitors:
        measures.append(F.count_distinct(visitor).alias("visitors"))
    measures += [F.sum(name).cast("long").alias(name) for name in _LONG_MEASURES]
    measures += [F.sum(name).cast(kind).alias(name) for name, kind in _MONEY_MEASURES.items()]
    rows = (
        union.groupBy(windowing.window(F.col("ts")).alias("window"), *TARGET)
        .agg(*measures)
    )
    return rows.select(
        "experiment_id", "variant", "population",
        F.col("window.start").alias("window_start"), F.col("window.end").alias("window_end"),
        "visitors_sketch",
        F.col("visitors") if exact_visitors else
        F.coalesce(F.hll_sketch_estimate("visitors_sketch"), F.lit(0)).alias("visitors"),
        *_LONG_MEASURES, *_MONEY_MEASURES,
    )


def observe_freshness(events: DataFrame) -> DataFrame:
    """Observe, per micro-batch, how old each event is when it is aggregated: gold's
    ``computed_at`` (the batch time, ``current_timestamp()``) minus ``event_ts``, as
    cumulative bucket counts, their sum and count (Prometheus histogram parts)."""
    age = (F.unix_micros(F.current_timestamp()) - F.unix_micros(F.col("event_ts"))) / 1e6
    return events.observe(
        FRESHNESS,
        F.count(F.lit(1)).alias("count"),
        F.sum(age).alias("sum"),
        *(F.count_if(age <= bound).alias(f"le_{bound}") for bound in FRESHNESS_BUCKETS),
    )


def with_lineage(metrics: DataFrame, layer: str) -> DataFrame:
    """Add ``layer`` and ``computed_at`` and fix the column order of the gold table."""
    return metrics.select(
        "*", F.lit(layer).alias("layer"), F.current_timestamp().alias("computed_at"),
    ).select(*EXPERIMENT_METRICS.fieldNames())
