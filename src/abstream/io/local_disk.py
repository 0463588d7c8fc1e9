"""Frames computed once into the local disk blocks of Spark's block manager, row by row.

Spark's columnar cache (``persist``) builds each batch of 10,000 rows on the heap before it
can spill it, whatever the storage level. Wide rows (the sessionized events' experiments
arrays; the visits' experiments and a catalog's parts) ran a 1 GB driver out of memory so:
on a day of 1,976,274 events in the batch layer, and in a speed-layer micro-batch of
988,179 events whose visits carried the parts of a 20-definition catalog."""

from __future__ import annotations

from pyspark import StorageLevel
from pyspark.sql import DataFrame


def on_disk(frame: DataFrame) -> DataFrame:
    """``frame`` computed now, once, into local disk blocks that later reads share."""
    return frame.localCheckpoint(eager=True, storageLevel=StorageLevel.DISK_ONLY)


def drop(*frames: DataFrame) -> None:
    """Drop the disk blocks of frames from ``on_disk`` (a local checkpoint has no Python
    handle of its own: its blocks are the RDD under its plan)."""
    for frame in frames:
        frame._jdf.queryExecution().logical().rdd().unpersist(False)


class DiskFrames:
    """Frames put on local disk (``on_disk``) for a while: their blocks are dropped when
    the ``with`` block ends."""

    def __init__(self) -> None:
        self._frames: list[DataFrame] = []

    def put(self, frame: DataFrame) -> DataFrame:
        """``frame`` on disk (``on_disk``) until the block ends."""
        kept = on_disk(frame)
        self._frames.append(kept)
        return kept

    def __enter__(self) -> DiskFrames:
        return self

    def __exit__(self, *_: object) -> None:
        drop(*self._frames)
        self._frames.clear()
