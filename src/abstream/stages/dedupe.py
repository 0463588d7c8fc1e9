"""Duplicate events: one row per event_id, within a micro-batch and against the ids bronze
received shortly before.

Only the narrow ids are shuffled: one small job counts the batch's ids and probes bronze's
recent ids with them, and brings back the repeats it finds (few, usually a handful). The
probe broadcasts the 64-bit hashes of the batch's ids, not the ids: a long key is cheaper to
broadcast, build and look up than a string, and the bronze ids it brings back are only
candidates, matched exactly when the batch is filtered. The wide rows are then filtered
against those, and only the copies of an id the batch holds more than once are shuffled.

Bronze's recent ids are read from a cutoff on a grid (``recent_ids``), and only the
repeats found are held to the exact one. The cutoff is a literal in the code Spark
generates for the probe's scan and for Delta's file filtering: an exact cutoff differs
every micro-batch, and Spark compiled both anew each time (47 KB of Java for Delta's
filtering alone), where consecutive micro-batches on the grid share them.

The repeats found go back to Spark as an Arrow table, a local relation in the plan: a
DataFrame made from a Python list is a Python RDD, and broadcasting it ran a Spark job with
Python workers, two per micro-batch (0.3-0.8 s each beside sessionize on 2 cores).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from abstream.times import micros_from

_MICROSECOND = timedelta(microseconds=1)


def probe_grid(window: timedelta) -> timedelta:
    """The grid ``recent_ids`` rounds its cutoff down to: half the de-duplication window,
    between a second and a minute (at most a quarter more ids read on average)."""
    return min(timedelta(minutes=1), max(window / 2, timedelta(seconds=1)))


def recent_ids(bronze: DataFrame, since: datetime, window: timedelta) -> DataFrame:
    """The event_ids bronze took in from ``since`` rounded down to ``probe_grid(window)``
    on, each with ``ingested_at``: with a few taken in before ``since``, which
    ``drop_duplicate_events`` given ``since`` does not count. Delta skips the files of older
    micro-batches by their statistics."""
    grid = micros_from(since) - micros_from(since) % (probe_grid(window) // _MICROSECOND)
    return bronze.where(F.col("ingested_at") >= F.timestamp_micros(F.lit(grid))) \
        .select("event_id", "ingested_at")


@dataclass(frozen=True)
class _Repeats:
    """The event_ids of a batch that are not new: held by bronze already (``earlier``), or
    held more than once by the batch alone (``within``)."""

    earlier: frozenset[str]
    within: frozenset[str]


def _find_repeats(events: DataFrame, seen: DataFrame | None, since: datetime | None
                  ) -> _Repeats:
    """The repeated ids of ``events``, against ``seen`` (ids taken in before, at ``since``
    or later if given) if given."""
    copies = events.groupBy("event_id").agg(F.count(F.lit(1)).alias("copies"))
    found = copies.where(F.col("copies") > 1) \
        .select("event_id", F.lit(None).cast("long").alias("taken_in"))
    if seen is not None:
        # The hashes of the batch's ids are broadcast and bronze's ids probed as read: no
        # shuffle of them. A bronze id whose hash is the batch's is a candidate; a candidate
        # that no batch id equals (another id with the same hash) drops nothing.
        hashed = F.xxhash64("event_id").alias("hash")
        found = found.unionByName(
            F.broadcast(events.select(hashed))
            .join(seen.select("event_id", "ingested_at", hashed), "hash")
            .groupBy("event_id").agg(F.unix_micros(F.max("ingested_at")).alias("taken_in")))
    cutoff = None if since is None else micros_from(since)
    earlier, within = set(), set()
    for row in found.collect():
        if row["taken_in"] is None:
            within.add(row["event_id"])
        elif cutoff is None or row["taken_in"] >= cutoff:
            earlier.add(row["event_id"])
    return _Repeats(frozenset(earlier), frozenset(within - earlier))


def _ids(events: DataFrame, ids: frozenset[str]) -> DataFrame:
    return F.broadcast(events.sparkSession.createDataFrame(
        pa.table({"event_id": pa.array(sorted(ids), pa.string())})))


def _drop_repeats(events: DataFrame, repeats: _Repeats) -> DataFrame:
    """``events`` with each event_id once and none of those bronze holds already."""
    dropped = repeats.earlier | repeats.within
    if not dropped:
        return events
    once = events.join(_ids(events, dropped), "event_id", "left_anti")
    if not repeats.within:
        return once
    first_copies = events.join(_ids(events, repeats.within), "event_id", "left_semi") \
        .dropDuplicates(["event_id"])
    return once.unionByName(first_copies)


def drop_duplicate_events(events: DataFrame, seen: DataFrame | None = None,
                          since: datetime | None = None) -> DataFrame:
    """``events`` with each event_id once, and none of the ids in ``seen`` (``event_id``,
    ``ingested_at``) taken in at ``since`` or later (any, without ``since``)."""
    return _drop_repeats(events, _find_repeats(events, seen, since))
