"""Events -> visits, and what each event and visit counts for (docs/design.md's contract).

A visit is a session_id's events split where two consecutive events (by event time) are
more than ``gap`` apart: exactly ``gap`` stays one visit. Spark's window functions find
the splits (the time since the session's previous event), one sort per micro-batch or
range, for the stream and the batch layer alike.

What a visit lists (its experiment entries) decides what all of its events count for:

- ``assigned``: every event of a visit that lists experiment E with variant V counts for
  E/V;
- ``qualified``: a visit is in E/V's qualified population when one of its events lists
  E/V with ``qualified = true`` (an exposure); its events count from its first exposure
  to E on (by event time, ties included).

Everything here is relational (aggregates, joins, ``explode``): no per-element lambdas,
which Spark interprets row by row.
"""

from __future__ import annotations

from datetime import timedelta

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, LongType

from abstream.config import EventsSettings
from abstream.metrics.definitions import Catalog
from abstream.schemas import (
    MONEY,
    MONEY_TOTAL,
    PROPERTY_TYPES,
    SESSIONS,
    VISIT_ENTRY,
)
from abstream.stages import parts
from abstream.stages.lineage import lineage_columns
from abstream.topology import POPULATIONS

ASSIGNED, QUALIFIED = POPULATIONS

#: The bronze columns sessions and metrics read: what the speed layer carries in state.
SESSION_INPUT = ("session_id", "visitor_id", "event_ts", "type", "revenue", "units",
                 "page_load_ms", "experiments")
VISIT = ("session_id", "visit_start")
#: What an event or a visit counts for, as columns of its rows.
TARGET = ("experiment_id", "variant", "population")


#: The properties the metrics read, and their types: NULL where the input mapping keeps
#: no such property.
MEASURED: dict[str, DataType] = {"revenue": MONEY, "units": LongType(),
                                 "page_load_ms": LongType()}


def catalog_properties(catalog: Catalog, events: EventsSettings) -> dict[str, DataType]:
    """The properties the metric catalog reads besides ``MEASURED``, with their types."""
    return {name: PROPERTY_TYPES[events.properties[name].type]
            for name in sorted(parts.properties(catalog) - MEASURED.keys())}


def session_columns(catalog: Catalog, events: EventsSettings) -> tuple[str, ...]:
    """The bronze columns sessions and the ``catalog``'s metrics read: ``SESSION_INPUT``
    with the further properties before ``experiments``."""
    return (*SESSION_INPUT[:-1], *catalog_properties(catalog, events), SESSION_INPUT[-1])


def with_measured_properties(events: DataFrame) -> DataFrame:
    """Bronze ``events`` with the properties the metrics read (``MEASURED``), of their
    types."""
    return events.withColumns({
        name: (F.col(name).try_cast(kind) if name in events.columns else F.lit(None).cast(kind))
        for name, kind in MEASURED.items()})


def _count(kind: str) -> Column:
    return F.count_if(F.col("type") == kind)


def with_visit_start(events: DataFrame, gap: timedelta, apart: tuple[str, ...] = ()
                     ) -> DataFrame:
    """``events`` with ``visit_start``, the time of the first event of their visit; events
    that differ in the ``apart`` columns are never in one visit."""
    by_time = Window.partitionBy("session_id", *apart).orderBy("event_ts")
    micros = F.unix_micros("event_ts")
    gap_micros = gap // timedelta(microseconds=1)
    starts = F.when(F.coalesce(micros - F.lag(micros).over(by_time) > gap_micros, F.lit(True)),
                    F.col("event_ts"))
    # Over the default frame (up to the current row and its ties) the latest start so far
    # is the start of the current visit.
    return events.withColumn("visit_start", F.max(starts).over(by_time))


def listed_entries(events: DataFrame, visit: tuple[str, ...] = VISIT) -> DataFrame:
    """One row per visit (its ``visit`` columns) and (experiment, variant) its ``events``
    list: ``id``, ``variant``, whether the visit was exposed to it (``qualified``) and,
    when it was, its first exposure to the experiment, any variant (``exposed_at``)."""
    listed = events.select(*visit, F.col("event_ts").alias("ts"),
                           F.explode("experiments").alias("e"))
    # ``qualified`` absent from a beacon (NULL) means false.
    per_variant = listed.groupBy(*visit, F.col("e.id").alias("id"),
                                 F.col("e.variant").alias("variant")).agg(
        F.min(F.when(F.col("e.qualified"), F.col("ts"))).alias("variant_exposed_at"))
    qualified = F.col("variant_exposed_at").isNotNull()
    return per_variant.select(
        *visit, "id", "variant", qualified.alias("qualified"),
        F.when(qualified, F.min("variant_exposed_at").over(
            Window.partitionBy(*visit, "id"))).alias("exposed_at"))


def _entries(started: DataFrame, catalog: Catalog) -> DataFrame:
    """One row per visit and (experiment, variant) its events list: whether the visit was
    exposed to it, the first exposure to the experiment (any variant) when it was, and the
    orders and, for an entry the visit was exposed to, the catalog's event parts from then
    on (NULL for the others: only the qualified population reads them)."""
    exposed = listed_entries(started)
    order = F.col("type") == "order"
    read = sorted(parts.properties(catalog) - {"revenue"})
    counted = started.where(order | parts.any_event_part(catalog)) \
        .select(*VISIT, "type", "event_ts", "revenue", *read)
    after = F.col("event_ts") >= F.col("exposed_at")
    order_after = F.coalesce(after & order, F.lit(False))
    return exposed.join(counted, list(VISIT), "left").groupBy(
        *VISIT, "id", "variant", "qualified", "exposed_at").agg(
        F.count_if(order_after).cast("long").alias("exposed_orders"),
        F.coalesce(F.sum(F.when(order_after, F.col("revenue"))), F.lit(0)).cast(MONEY_TOTAL)
        .alias("exposed_revenue"),
        F.when(F.col("qualified"), parts.event_parts(catalog, after)).alias("exposed_parts"))


def visit_counters(catalog: Catalog) -> list[Column]:
    """A visit's end, visitor and counts, as aggregates over its events."""
    return [
        F.max("event_ts").alias("visit_end"),
        F.max("visitor_id").alias("visitor_id"),
        F.count(F.lit(1)).alias("events"),
        _count("pageview").alias("pageviews"),
        _count("add_to_cart").alias("add_to_carts"),
        _count("order").alias("orders"),
        F.sum("revenue").alias("revenue"),
        F.sum("units").alias("units"),
        _count("error").alias("errors"),
        parts.event_parts(catalog).alias("event_parts"),
        parts.event_lists(catalog).alias("metric_values"),
        parts.dimension_values(catalog).alias("dimensions"),
    ]


def assemble_visits(started: DataFrame, catalog: Catalog) -> DataFrame:
    """One row per visit of events that have their ``visit_start``: silver's columns
    without the lineage; ``experiments`` sorted by experiment and variant, ``metric_parts``
    the ``catalog``'s parts."""
    entry = F.struct(*(F.col(name) for name in VISIT_ENTRY.fieldNames()))
    # Sorted by their keys only: a map cannot be compared.
    experiments = _entries(started, catalog).groupBy(*VISIT).agg(
        F.array_sort(F.collect_list(entry), _by_key).alias("experiments"))
    none = F.array().cast(f"array<{VISIT_ENTRY.simpleString()}>")
    visits = started.groupBy(*VISIT).agg(*visit_counters(catalog)) \
        .join(experiments, list(VISIT), "left")
    counted = visits.select(
        "session_id",
        "visit_start",
        "visit_end",
        ((F.unix_micros("visit_end") - F.unix_micros("visit_start")) / 1000).cast("long")
        .alias("duration_ms"),
        "visitor_id",
        "events",
        "pageviews",
        "add_to_carts",
        "orders",
        F.coalesce(F.col("revenue"), F.lit(0)).cast(MONEY_TOTAL).alias("revenue"),
        F.coalesce(F.col("units"), F.lit(0)).cast("long").alias("units"),
        "errors",
        ((F.col("pageviews") == 1) & (F.col("add_to_carts") == 0) & (F.col("orders") == 0))
        .alias("is_bounce"),
        (F.col("errors") > 0).alias("is_error_visit"),
        F.coalesce(F.col("experiments"), none).alias("experiments"),
        "event_parts",
        "metric_values",
        "dimensions",
    )
    return counted.withColumn(
        "metric_parts", F.map_concat(parts.visit_parts(catalog), F.col("event_parts"))) \
        .drop("event_parts")


def _by_key(a: Column, b: Column) -> Column:
    """Entries in the order of their experiment and variant."""
    def order(x: Column, y: Column) -> Column:
        return F.when(x < y, -1).when(x > y, 1).otherwise(0)

    by_id = order(a["id"], b["id"])
    return F.when(by_id != 0, by_id).otherwise(order(a["variant"], b["variant"]))


def visit_entries(visits: DataFrame) -> DataFrame:
    """The entries of ``visits`` (assembled), one row each: ``session_id``,
    ``visit_start``, ``id``, ``variant``, ``qualified``, ``exposed_at``, and the visit's
    ``dimensions``."""
    return visits.select(*VISIT, "dimensions", F.explode("experiments").alias("e")) \
        .select(*VISIT, "e.id", "e.variant", "e.qualified", "e.exposed_at", "dimensions")


def _populations(qualified: Column) -> Column:
    return F.when(qualified, F.array(F.lit(ASSIGNED), F.lit(QUALIFIED))) \
        .otherwise(F.array(F.lit(ASSIGNED)))


def _exposed(entry_qualified: Column, exposed_at: Column, ts: Column) -> Column:
    """Whether an event at ``ts`` counts for an entry's qualified population: the visit was
    exposed and the event is at or after the first exposure."""
    return entry_qualified & (exposed_at <= ts)


def counts_for(entry_qualified: Column, exposed_at: Column, population: Column,
               ts: Column) -> Column:
    """Whether an event at ``ts`` of a visit with an entry counts for the entry's
    ``population``: always for the assigned one, for the qualified one when exposed."""
    return (population == ASSIGNED) | _exposed(entry_qualified, exposed_at, ts)


def event_targets(started: DataFrame, entries: DataFrame) -> DataFrame:
    """One row per event of ``started`` and what it counts for (``TARGET``), from the
    ``entries`` of its visit (with the visit's ``dimensions``); an event of a visit that
    lists nothing has no row."""
    kept = [c for c in started.columns if c != "experiments"]
    joined = started.drop("experiments").join(
        entries.select(*VISIT, F.col("id").alias("experiment_id"), "variant", "qualified",
                       "exposed_at", "dimensions"), list(VISIT))
    exposed = _exposed(F.col("qualified"), F.col("exposed_at"), F.col("event_ts"))
    return joined.select(*kept, "experiment_id", "variant", "dimensions",
                         F.explode(_populations(exposed)).alias("population"))


def visit_targets(visits: DataFrame) -> DataFrame:
    """One row per visit and what it counts for (``TARGET``): each entry's assigned
    population, and the qualified one of the entries it was exposed to (from its first
    exposure, ``exposed_at``)."""
    kept = [c for c in visits.columns if c != "experiments"]
    return visits.select(*kept, F.explode("experiments").alias("e")).select(
        *kept, F.col("e.id").alias("experiment_id"), F.col("e.variant").alias("variant"),
        F.col("e.exposed_at").alias("exposed_at"),
        F.explode(_populations(F.col("e.qualified"))).alias("population"))


def with_lineage(visits: DataFrame, layer: str) -> DataFrame:
    """Add the silver bookkeeping columns and fix the column order."""
    return visits.select(*lineage_columns(
        SESSIONS, layer, visit_date=F.to_date("visit_start")))
