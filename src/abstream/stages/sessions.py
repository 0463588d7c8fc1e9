"""Events -> visits, and what each event and visit counts for (DESIGN.md's contract).

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
"""

from __future__ import annotations

from datetime import timedelta

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from abstream.schemas import MONEY_TOTAL, POPULATIONS, SESSIONS

ASSIGNED, QUALIFIED = POPULATIONS

#: The bronze columns sessions and metrics read: what the speed layer carries in state.
SESSION_INPUT = ("session_id", "visitor_id", "event_ts", "type", "revenue", "units",
                 "page_load_ms", "experiments")

def _count(kind: str) -> Column:
    return F.count_if(F.col("type") == kind)


def with_visit_start(events: DataFrame, gap: timedelta) -> DataFrame:
    """``events`` with ``visit_start``, the time of the first event of their visit."""
    by_time = Window.partitionBy("session_id").orderBy("event_ts")
    micros = F.unix_micros("event_ts")
    gap_micros = gap // timedelta(microseconds=1)
    starts = F.when(F.coalesce(micros - F.lag(micros).over(by_time) > gap_micros, F.lit(True)),
                    F.col("event_ts"))
    # Over the default frame (up to the current row and its ties) the latest start so far
    # is the start of the current visit.
    return events.withColumn("visit_start", F.max(starts).over(by_time))


def _with_entries(visits: DataFrame, name: str) -> DataFrame:
    """``visits`` with ``name``: the visit's distinct (experiment, variant) entries, sorted,
    with the first exposure to the experiment and the orders from then on. Reads
    ``entry_sets`` (per event, its entries with the event's time ``ts``) and ``order_list``
    (``ts``, ``revenue`` of each order), and drops them.

    One projection per step: Spark does not inline a higher-order function's result into
    the next projection, so each array is built once per visit, not once per use.
    """
    flat, exposures = F.col("_flat"), F.col("_exposures")
    with_flat = visits.withColumn("_flat", F.flatten("entry_sets")).drop("entry_sets")
    # The exposures are few (usually one an experiment), so the per-entry look-ups below
    # scan them, not every entry of every event.
    pairs = with_flat.select(
        "*",
        F.array_distinct(F.transform(flat, lambda e: F.struct(
            e["id"].alias("id"), e["variant"].alias("variant")))).alias("_pairs"),
        F.filter(flat, lambda e: e["qualified"]).alias("_exposures"),
    ).drop("_flat")

    def exposure(experiment: Column) -> Column:
        return F.array_min(F.transform(
            F.filter(exposures, lambda e: e["id"] == experiment), lambda e: e["ts"]))

    listed = pairs.withColumn("_listed", F.transform("_pairs", lambda p: F.struct(
        p["id"].alias("id"),
        p["variant"].alias("variant"),
        F.exists(exposures, lambda e: (e["id"] == p["id"]) & (e["variant"] == p["variant"]))
        .alias("qualified"),
    ))).drop("_pairs")
    exposed = listed.withColumn("_exposed", F.transform("_listed", lambda e: F.struct(
        e["id"].alias("id"), e["variant"].alias("variant"), e["qualified"].alias("qualified"),
        F.when(e["qualified"], exposure(e["id"])).alias("exposed_at")))) \
        .drop("_listed", "_exposures")

    def after(entry: Column) -> Column:
        return F.filter("order_list", lambda o: o["ts"] >= entry["exposed_at"])

    return exposed.withColumn(name, F.array_sort(F.transform("_exposed", lambda e: F.struct(
        e["id"].alias("id"), e["variant"].alias("variant"), e["qualified"].alias("qualified"),
        e["exposed_at"].alias("exposed_at"),
        F.size(after(e)).cast("long").alias("exposed_orders"),
        F.aggregate(after(e), F.lit(0).cast(MONEY_TOTAL),
                    lambda total, o: (total + o["revenue"]).cast(MONEY_TOTAL))
        .alias("exposed_revenue"),
    )))).drop("_exposed", "order_list")


def _timed_entries(event: Column) -> Column:
    """An event's experiment entries, each with the event's time."""
    return F.transform(event["experiments"], lambda e: F.struct(
        e["id"].alias("id"), e["variant"].alias("variant"),
        e["qualified"].alias("qualified"), event["event_ts"].alias("ts")))


def _entry_aggregates() -> list[Column]:
    """What ``_with_entries`` reads, gathered per visit from its events."""
    return [
        F.collect_list(_timed_entries(F.struct("event_ts", "experiments"))).alias("entry_sets"),
        F.collect_list(F.when(F.col("type") == "order", F.struct(
            F.col("event_ts").alias("ts"), F.col("revenue").alias("revenue"))))
        .alias("order_list"),
    ]


def visit_counters() -> list[Column]:
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
    ]


def assemble_visits(events: DataFrame) -> DataFrame:
    """One row per visit of events that have their ``visit_start``: silver's columns
    without the lineage."""
    visits = events.groupBy("session_id", "visit_start").agg(
        *visit_counters(), *_entry_aggregates())
    return _with_entries(visits, "experiments").select(
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
        "experiments",
    )


def _target(entry: Column, population: str) -> Column:
    return F.struct(entry["id"].alias("id"), entry["variant"].alias("variant"),
                    F.lit(population).alias("population"))


def visit_targets(entries: Column) -> Column:
    """What a visit counts for: each entry's assigned population, and the qualified one of
    the entries it was exposed to."""
    return F.concat(F.transform(entries, lambda e: _target(e, ASSIGNED)),
                    F.transform(F.filter(entries, lambda e: e["qualified"]),
                                lambda e: _target(e, QUALIFIED)))


def event_targets(entries: Column, ts: Column) -> Column:
    """What an event of a visit with ``entries`` counts for: each entry's assigned
    population, and the qualified one where the event is at or after the exposure."""
    return F.concat(F.transform(entries, lambda e: _target(e, ASSIGNED)),
                    F.transform(F.filter(entries, lambda e: e["exposed_at"] <= ts),
                                lambda e: _target(e, QUALIFIED)))


def sessionize(events: DataFrame, gap: timedelta) -> DataFrame:
    """``events`` with their visit's ``visit_start`` and ``visit_end``, and ``targets``:
    what each counts for.

    One sort (the window functions of ``with_visit_start``), then one aggregation per visit
    that gathers its events, works out its entries and hands them back to every event: no
    join, so the events are read and sorted once.
    """
    started = with_visit_start(events, gap)
    carried = [c for c in started.columns if c not in ("session_id", "visit_start")]
    visits = started.groupBy("session_id", "visit_start").agg(
        F.max("event_ts").alias("visit_end"),
        F.collect_list(F.struct(*carried)).alias("visit_events"),
        *_entry_aggregates())
    return _with_entries(visits, "visit_entries").select(
        "session_id", "visit_start", "visit_end", "visit_entries",
        F.explode("visit_events").alias("event"),
    ).select(
        "session_id", "event.*", "visit_start", "visit_end",
        event_targets(F.col("visit_entries"), F.col("event.event_ts")).alias("targets"),
    )


def with_lineage(visits: DataFrame, layer: str) -> DataFrame:
    """Add the silver bookkeeping columns and fix the column order."""
    return visits.select(
        "*",
        F.lit(layer).alias("layer"),
        F.current_timestamp().alias("computed_at"),
        F.to_date("visit_start").alias("visit_date"),
    ).select(*SESSIONS.fieldNames())
