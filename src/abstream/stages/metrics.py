"""Events and visits -> per experiment x variant x population x event-time window metrics.

Attribution (DESIGN.md): an event counts for every (experiment, variant) its own
``experiments`` list names; a visit for every pair any of its events names. The
``qualified`` population counts an event whose entry is qualified, and a visit with any
qualified entry. Event-level numbers come straight from events, so they are fresh; visit
numbers come from closed visits, windowed by the visit's start.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from abstream.config import MetricsSettings
from abstream.durations import spark_interval
from abstream.schemas import EXPERIMENT_METRICS, MONEY_SQUARED, MONEY_TOTAL, POPULATIONS

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


#: The event columns the metrics read.
EVENT_INPUT = ("event_ts", "visitor_id", "experiments", "type", "revenue", "units",
               "page_load_ms")


def _event_facts(events: DataFrame) -> DataFrame:
    is_type = {kind: (F.col("type") == kind).cast("long")
               for kind in ("pageview", "add_to_cart", "order", "error")}
    revenue = F.coalesce(F.col("revenue"), F.lit(0)).cast(MONEY_TOTAL)
    return events.select(
        F.col("event_ts").alias("ts"),
        "visitor_id",
        "experiments",
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
        "experiments",
        *(zero.alias(name) for name in ("events", "pageviews", "add_to_carts", "orders")),
        F.lit(0).cast(MONEY_TOTAL).alias("revenue"),
        F.lit(0).cast(MONEY_SQUARED).alias("revenue_sq"),
        *(zero.alias(name) for name in ("units", "errors", "page_load_ms_sum",
                                        "page_load_count")),
        F.lit(1).cast("long").alias("visits"),
        F.col("is_bounce").cast("long").alias("bounces"),
        F.col("is_error_visit").cast("long").alias("error_visits"),
    )


def _measures(qualified_only: bool, lg_k: int, exact_visitors: bool) -> list[Column]:
    keep = F.col("entry.qualified") if qualified_only else F.lit(True)
    suffix = "_q" if qualified_only else "_a"
    visitor = F.when(keep, F.col("visitor_id"))
    columns = [F.hll_sketch_agg(visitor, lg_k).alias(f"visitors_sketch{suffix}")]
    if exact_visitors:
        # A set per group, not count_distinct: several distinct aggregates in one groupBy
        # make Spark expand every row once per aggregate.
        columns.append(F.size(F.collect_set(visitor)).cast("long").alias(f"visitors{suffix}"))
    for name in _LONG_MEASURES:
        columns.append(F.sum(F.when(keep, F.col(name)).otherwise(0)).alias(name + suffix))
    for name, kind in _MONEY_MEASURES.items():
        columns.append(F.sum(F.when(keep, F.col(name)).otherwise(F.lit(0).cast(kind)))
                       .cast(kind).alias(name + suffix))
    return columns


def experiment_metrics(
    events: DataFrame | None,
    visits: DataFrame | None,
    windowing: Windowing,
    hll_lg_k: int = 12,
    exact_visitors: bool = False,
) -> DataFrame:
    """Aggregate events and/or visits into gold rows (without ``layer``/``computed_at``).

    ``visitors`` is the HLL sketch's estimate, or with ``exact_visitors`` (batch only: a
    distinct count cannot be updated incrementally) the exact distinct count; the sketch is
    kept either way, so windows can be merged into longer ranges.
    """
    facts = []
    if events is not None:
        facts.append(_event_facts(events))
    if visits is not None:
        facts.append(_visit_facts(visits))
    if not facts:
        raise ValueError("experiment_metrics needs events, visits or both")
    union = facts[0] if len(facts) == 1 else facts[0].unionByName(facts[1])
    aggregated = (
        union.select("*", F.explode("experiments").alias("entry"))
        .groupBy(windowing.window(F.col("ts")).alias("window"),
                 F.col("entry.id").alias("experiment_id"),
                 F.col("entry.variant").alias("variant"))
        .agg(*_measures(False, hll_lg_k, exact_visitors),
             *_measures(True, hll_lg_k, exact_visitors))
    )
    names = ["visitors_sketch", *(["visitors"] if exact_visitors else []), *_LONG_MEASURES,
             *_MONEY_MEASURES]
    populations = F.array(*(
        F.struct(F.lit(population).alias("population"),
                 *(F.col(f"{name}_{population[0]}").alias(name) for name in names))
        for population in POPULATIONS
    ))
    rows = aggregated.select(
        "experiment_id", "variant",
        F.col("window.start").alias("window_start"), F.col("window.end").alias("window_end"),
        F.explode(populations).alias("p"),
    ).select("experiment_id", "variant", "window_start", "window_end", "p.*")
    return rows.where((F.col("events") > 0) | (F.col("visits") > 0)).select(
        "experiment_id", "variant", "population", "window_start", "window_end",
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
