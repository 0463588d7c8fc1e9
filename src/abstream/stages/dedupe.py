"""Duplicate events: one row per event_id, within a micro-batch and against the ids bronze
received shortly before.

Only the narrow ids are shuffled: one small job counts the batch's ids and probes bronze's
recent ids with them, and brings back the repeats it finds (few, usually a handful). The
probe broadcasts the 64-bit hashes of the batch's ids, not the ids: a long key is cheaper to
broadcast, build and look up than a string, and the bronze ids it brings back are only
candidates, matched exactly when the batch is filtered. The wide rows are then filtered
against those, and only the copies of an id the batch holds more than once are shuffled.

The repeats found go back to Spark as an Arrow table, a local relation in the plan: a
DataFrame made from a Python list is a Python RDD, and broadcasting it ran a Spark job with
Python workers, two per micro-batch (0.3-0.8 s each beside sessionize on 2 cores).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from abstream.times import micros_from


def recent_ids(bronze: DataFrame, since: datetime) -> DataFrame:
    """The event_ids bronze took in at ``since`` or later, with when (``ingested_at``):
    Delta skips the files of older micro-batches by their statistics."""
    cutoff = F.timestamp_micros(F.lit(micros_from(since)))
    return bronze.where(F.col("ingested_at") >= cutoff).select("event_id", "ingested_at")


@dataclass(frozen=True)
class _Repeats:
    """The event_ids of a batch that are not new: held by bronze already (``earlier``), or
    held more than once by the batch alone (``within``)."""

    earlier: frozenset[str]
    within: frozenset[str]


def _find_repeats(events: DataFrame, seen: DataFrame | None) -> _Repeats:
    """The repeated ids of ``events``, against ``seen`` (ids taken in before) if given."""
    copies = events.groupBy("event_id").agg(F.count(F.lit(1)).alias("copies"))
    found = copies.where(F.col("copies") > 1).select("event_id", F.lit(False).alias("earlier"))
    if seen is not None:
        # The hashes of the batch's ids are broadcast and bronze's ids probed as read: no
        # shuffle of them. A bronze id whose hash is the batch's is a candidate; a candidate
        # that no batch id equals (another id with the same hash) drops nothing.
        hashed = F.xxhash64("event_id").alias("hash")
        found = found.unionByName(
            F.broadcast(events.select(hashed)).join(seen.select("event_id", hashed), "hash")
            .select("event_id", F.lit(True).alias("earlier")).distinct())
    earlier, within = set(), set()
    for row in found.collect():
        (earlier if row["earlier"] else within).add(row["event_id"])
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


def drop_duplicate_events(events: DataFrame, seen: DataFrame | None = None) -> DataFrame:
    """``events`` with each event_id once, and none of the ids in ``seen``."""
    return _drop_repeats(events, _find_repeats(events, seen))
