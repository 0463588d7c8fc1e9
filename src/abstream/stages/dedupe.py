"""Duplicate events: one row per event_id, within a micro-batch and against the ids bronze
received shortly before.

The wide rows are shuffled once (``dropDuplicates``); the look-up of earlier copies joins
the narrow ids only, and what it finds (few rows, usually none) is broadcast back.
"""

from __future__ import annotations

from datetime import datetime

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from abstream.times import micros_from


def recent_ids(bronze: DataFrame, since: datetime) -> DataFrame:
    """The event_ids bronze took in at ``since`` or later (``ingested_at``): Delta skips
    the files of older micro-batches by their statistics."""
    cutoff = F.timestamp_micros(F.lit(micros_from(since)))
    return bronze.where(F.col("ingested_at") >= cutoff).select("event_id")


def drop_duplicate_events(events: DataFrame, seen: DataFrame | None = None) -> DataFrame:
    """``events`` with each event_id once, and none of the ids in ``seen``."""
    unique = events.dropDuplicates(["event_id"])
    if seen is None:
        return unique
    # An anti-join needs no distinct right side: the bronze ids are joined as read.
    repeated = events.select("event_id").distinct().join(seen, "event_id")
    return unique.join(F.broadcast(repeated), "event_id", "left_anti")
