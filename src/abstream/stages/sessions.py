"""Events -> visits (DESIGN.md): a session_id's events, split where two consecutive events
are more than ``gap`` apart.

Spark's ``session_window`` merges an event into a session when it falls at or before the
session's end (last event + gap), so a gap of exactly ``gap`` stays one visit and anything
longer starts a new one: the contract, in native operators, for stream and batch alike.
"""

from __future__ import annotations

from datetime import timedelta

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from abstream.durations import spark_interval
from abstream.schemas import MONEY_TOTAL, SESSIONS

#: The few bronze columns sessionization needs: state stays narrow.
SESSION_INPUT = ("session_id", "visitor_id", "event_ts", "type", "revenue", "units",
                 "experiments")


def _count(kind: str) -> Column:
    return F.count_if(F.col("type") == kind)


def merged_experiments(entry_sets: Column) -> Column:
    """One entry per (experiment, variant) of the visit; qualified if any event said so."""
    flat = F.array_distinct(F.flatten(entry_sets))
    pairs = F.array_distinct(F.transform(
        flat, lambda e: F.struct(e["id"].alias("id"), e["variant"].alias("variant"))))
    merged = F.transform(pairs, lambda p: F.struct(
        p["id"].alias("id"),
        p["variant"].alias("variant"),
        F.exists(flat, lambda e: (e["id"] == p["id"]) & (e["variant"] == p["variant"])
                 & e["qualified"]).alias("qualified"),
    ))
    return F.array_sort(merged)


def assemble_visits(events: DataFrame, gap: timedelta) -> DataFrame:
    """Group events into visits; a streaming caller sets the watermark on ``event_ts``."""
    visits = (
        events.select(*SESSION_INPUT)
        .groupBy("session_id", F.session_window("event_ts", spark_interval(gap)))
        .agg(
            F.min("event_ts").alias("visit_start"),
            F.max("event_ts").alias("visit_end"),
            F.max("visitor_id").alias("visitor_id"),
            F.count(F.lit(1)).alias("events"),
            _count("pageview").alias("pageviews"),
            _count("add_to_cart").alias("add_to_carts"),
            _count("order").alias("orders"),
            F.sum("revenue").alias("revenue"),
            F.sum("units").alias("units"),
            _count("error").alias("errors"),
            F.collect_set("experiments").alias("entry_sets"),
        )
    )
    return visits.select(
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
        merged_experiments(F.col("entry_sets")).alias("experiments"),
    )


def with_lineage(visits: DataFrame, layer: str) -> DataFrame:
    """Add the silver bookkeeping columns and fix the column order."""
    return visits.select(
        "*",
        F.lit(layer).alias("layer"),
        F.current_timestamp().alias("computed_at"),
        F.to_date("visit_start").alias("visit_date"),
    ).select(*SESSIONS.fieldNames())
