"""The event_ids bronze took in within ``ingest.dedupe_window``, kept by ingest between its
micro-batches instead of read from bronze for each.

Reading them from bronze was the larger part of a small micro-batch's cost: planning a scan
of the Delta table and a task per file of the window. Ingest reads them from bronze once,
at its first micro-batch, and then keeps each micro-batch's new ids as a frame of their own
in the local disk blocks of Spark's block manager (``io.local_disk``); a frame older than
the window is let go whole (a micro-batch's rows share one ``ingested_at``). Each frame is
a leaf of the probe's plan: frames cached with ``persist`` keep the plan of the micro-batch
that made them, and planning a probe over 25 of them cost more than reading bronze.

What is kept stands for one version of bronze: the version read, then each of ingest's own
appends. Each micro-batch first checks that bronze has no commit past it (one file's
status), and the ids are read from bronze again when it has (another writer, a maintenance
run, a micro-batch that failed after its commit): the probe sees what bronze holds.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta
from functools import reduce

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from abstream.io import local_disk
from abstream.io.deltalog import CommitFiles
from abstream.stages import dedupe
from abstream.times import from_micros

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Kept:
    """Ids (``event_id``, ``ingested_at``) on local disk, none taken in after ``newest``."""

    ids: DataFrame
    newest: int


class RecentIds:
    """The ids of one bronze table's recent rows, for one ingest query's micro-batches."""

    def __init__(self, path: str, window: timedelta) -> None:
        self.path, self.window = path, window
        self.commits = CommitFiles(path)
        #: The bronze version the kept ids stand for; None: read bronze at the next use.
        self.version: int | None = None
        self.kept: list[_Kept] = []

    def seen(self, spark: SparkSession, ingested_at: int) -> DataFrame | None:
        """The ids bronze took in at ``ingested_at`` less the window or later (None when
        there are none): the ids a micro-batch taking its rows in at ``ingested_at`` drops."""
        cutoff = ingested_at - self.window // timedelta(microseconds=1)
        if self.version is None or self.commits.has(self.version + 1):
            self._read(spark, cutoff, ingested_at)
        expired = [kept for kept in self.kept if kept.newest < cutoff]
        self.kept = [kept for kept in self.kept if kept.newest >= cutoff]
        local_disk.drop(*(kept.ids for kept in expired))
        if not self.kept:
            return None
        return reduce(DataFrame.unionByName, (kept.ids for kept in self.kept)) \
            .where(F.col("ingested_at") >= F.timestamp_micros(F.lit(cutoff)))

    def taken(self, ids: DataFrame, ingested_at: int) -> None:
        """After a micro-batch appended rows with ``ids`` (``event_id``, ``ingested_at``)
        to bronze: keep them when that append is bronze's one commit since the version kept,
        or read bronze again at the next use."""
        version = self.version
        if version is not None and self.commits.has(version + 1) \
                and not self.commits.has(version + 2):
            self.kept.append(_Kept(local_disk.on_disk(ids.coalesce(1)), ingested_at))
            self.version = version + 1
        else:
            self.forget()

    def forget(self) -> None:
        """Let go of every id kept: the next use reads bronze."""
        local_disk.drop(*(kept.ids for kept in self.kept))
        self.kept, self.version = [], None

    def _read(self, spark: SparkSession, cutoff: int, ingested_at: int) -> None:
        self.forget()
        version = self.commits.latest()
        if version is None:
            return
        bronze = spark.read.format("delta").option("versionAsOf", version).load(self.path)
        ids = dedupe.recent_ids(bronze, from_micros(cutoff))
        self.kept = [_Kept(local_disk.on_disk(ids.coalesce(1)), ingested_at)]
        self.version = version
        log.info("%s: the ids of version %d taken in since %s read", self.path, version,
                 from_micros(cutoff).isoformat())

