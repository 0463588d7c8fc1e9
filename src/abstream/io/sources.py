"""Streaming reads: the landing folder of JSON-lines files, and Delta tables."""

from __future__ import annotations

import json
import logging
import posixpath
import re
from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from abstream.config import KafkaSettings
from abstream.io.checkpoint_log import parse_offset
from abstream.io.deltalog import DeltaLogReader, stats_max_ms, stats_min_ms
from abstream.io.hadoop import HadoopFiles

log = logging.getLogger(__name__)

_COMMIT = re.compile(r"^\d{20}\.json$")
_CHECKPOINT_FILE = re.compile(r"^\d{20}\.checkpoint.*\.parquet$")


def landing_lines(spark: SparkSession, landing: str, max_files_per_trigger: int) -> DataFrame:
    """Every line of every file in ``landing`` as ``value``, with its file and when the file
    arrived (its modification time).

    Files whose names start with '.' or '_' are ignored, so writers can create a file under
    a hidden name and rename it when complete.
    """
    make_dirs(spark, landing)
    return (
        spark.readStream.format("text")
        .option("maxFilesPerTrigger", max_files_per_trigger)
        .load(landing)
        .select(
            "value",
            F.col("_metadata.file_path").alias("source_file"),
            F.col("_metadata.file_modification_time").alias("arrived_at"),
        )
    )


def make_dirs(spark: SparkSession, location: str) -> None:
    """Create a folder on whatever file system holds it (local, HDFS, S3, ...)."""
    HadoopFiles(spark, location).make_dirs(location)


#: Past this many commits without a Delta checkpoint, a new query reads the snapshot.
_MAX_COMMITS_READ = 100


def delta_stream(spark: SparkSession, path: str, max_files_per_trigger: int) -> DataFrame:
    """The appends to a Delta table, in commit order.

    A query's first micro-batch reads the table's commits from version 0 on where the log
    still holds all of them and none deletes or rewrites rows (a young append-only table,
    which is what a new pipeline's bronze is): the same rows as the table's snapshot,
    without the Spark jobs that list a snapshot's files (3 s of a fresh JVM's first
    sessionize micro-batch). Any other table is read from its snapshot. Once the query has
    a checkpoint, the checkpoint says where it goes on.
    """
    reader = spark.readStream.format("delta").option("maxFilesPerTrigger", max_files_per_trigger)
    if _only_appends_since_creation(spark, path):
        reader = reader.option("startingVersion", 0)
    return reader.load(path)


@dataclass(frozen=True)
class BatchEnd:
    """Where a micro-batch of a Delta stream ended: between commits, or ``inside`` a commit
    or the snapshot a first start reads. Inside, ``earliest_unread`` is the earliest value
    of the statistics column in the files it left unread there (epoch microseconds; None
    when some file's statistics lack it), and ``finished_latest`` the latest value in the
    commits it read to their end before the one it ended in (None for none, or not known
    from the log alone)."""

    inside: bool
    earliest_unread: int | None = None
    finished_latest: int | None = None


class CommitsRead:
    """Where each micro-batch of the query checkpointed at ``checkpoint`` ends in the Delta
    table at ``path`` (read with ``delta_stream``), with what Delta's file statistics say of
    the timestamp ``column`` around that end.

    ``maxFilesPerTrigger`` ends a micro-batch after a number of files, inside a commit when
    it falls there: the micro-batch's end offset (planned in the checkpoint before it runs)
    then points at a file of the commit (``index`` 0 or more, over the commit's data files
    in log order), not before the next commit (-1). A query's first read of a snapshot
    (``isStartingVersion``) goes through the snapshot's files sorted by modification time
    and path. Each file system is opened once, for every micro-batch, and each offset and
    commit file is read once: a micro-batch's end offset is the next one's start, and the
    commit it ends in is one the next finishes.
    """

    def __init__(self, spark: SparkSession, checkpoint: str, path: str, column: str) -> None:
        self._offsets = posixpath.join(checkpoint, "offsets")
        self._path = path
        self._log = posixpath.join(path, "_delta_log")
        self._column = column
        self._checkpoint_files = HadoopFiles(spark, checkpoint)
        self._table_files = HadoopFiles(spark, path)
        self._snapshot: DeltaLogReader | None = None
        self._ends: dict[int, dict | None] = {}
        self._commits: dict[int, list[dict]] = {}

    def after(self, batch_id: int) -> BatchEnd:
        """Where micro-batch ``batch_id`` ends."""
        # The micro-batch starts where the one before ended.
        self._ends = {n: e for n, e in self._ends.items() if n >= batch_id - 1}
        end = self._end_offset(batch_id)
        if end is None or end["index"] < 0:
            return BatchEnd(inside=False)
        version, index = end["reservoirVersion"], end["index"]
        if end["isStartingVersion"]:
            unread = self._snapshot_minima(version)[index + 1:]
            return BatchEnd(True, _earliest(unread)) if unread else BatchEnd(inside=False)
        unread = [stats_min_ms(add.get("stats"), self._column)
                  for add in self._data_files(version)][index + 1:]
        if not unread:
            return BatchEnd(inside=False)
        start = self._end_offset(batch_id - 1) if batch_id > 0 else None
        finished = None
        if start is not None and not start["isStartingVersion"]:
            maxima = [stats_max_ms(add.get("stats"), self._column)
                      for number in range(start["reservoirVersion"], version)
                      for add in self._data_files(number)]
            # A timestamp's maximum is kept to the millisecond: a millisecond less is never
            # above the true maximum.
            finished = None if not maxima or None in maxima else \
                (max(m for m in maxima if m is not None) - 1) * 1000
        # Later micro-batches start in this commit or after it.
        self._commits = {n: files for n, files in self._commits.items() if n >= version}
        return BatchEnd(True, _earliest(unread), finished)

    def _end_offset(self, batch_id: int) -> dict | None:
        if batch_id not in self._ends:
            planned = self._checkpoint_files.read_text(
                posixpath.join(self._offsets, str(batch_id)))
            self._ends[batch_id] = parse_offset(planned.splitlines()[-1])
        return self._ends[batch_id]

    def _data_files(self, version: int) -> list[dict]:
        """The ``add`` actions that change data in commit ``version``, in log order."""
        if version not in self._commits:
            commit = posixpath.join(self._log, f"{version:020d}.json")
            self._commits[version] = [
                action["add"] for action in _actions(self._table_files, commit)
                if "add" in action and action["add"].get("dataChange", True)]
        return self._commits[version]

    def _snapshot_minima(self, version: int) -> list[int | None]:
        """The statistics minima of the files of the snapshot at ``version``, in the order
        the streaming source reads them (one unknown where the log cannot be read without
        Spark)."""
        try:
            if self._snapshot is None:
                self._snapshot = DeltaLogReader(self._path, self._column)
            latest = self._snapshot.latest_version
            if latest is None or latest < version:
                self._snapshot.refresh()
            return [f.stats_min_ms for f in self._snapshot.snapshot_files(version)]
        except OSError as exc:
            log.warning("reading %s's log for its snapshot's statistics: %s; the watermark "
                        "waits for the snapshot to be read whole", self._path, exc)
            return [None]


def _earliest(minima: list[int | None]) -> int | None:
    """The earliest of files' minima (epoch ms) in microseconds; None if one is unknown."""
    if None in minima:
        return None
    return min(m for m in minima if m is not None) * 1000


def _actions(files: HadoopFiles, commit: str) -> list[dict]:
    """The actions of the Delta commit file ``commit``."""
    return [json.loads(line) for line in files.read_text(commit).splitlines() if line.strip()]


def _only_appends_since_creation(spark: SparkSession, path: str) -> bool:
    """Whether the table's log holds every commit since version 0, without a checkpoint,
    and none of them removes rows."""
    log_dir = posixpath.join(path, "_delta_log")
    files = HadoopFiles(spark, log_dir)
    # A table past its first Delta checkpoint is answered without listing its log, which
    # grows by a commit a micro-batch.
    if files.exists(posixpath.join(log_dir, "_last_checkpoint")):
        return False
    names = files.names(log_dir)
    commits = sorted(name for name in names if _COMMIT.match(name))
    if any(_CHECKPOINT_FILE.match(name) for name in names) or not commits \
            or len(commits) > _MAX_COMMITS_READ \
            or commits != [f"{version:020d}.json" for version in range(len(commits))]:
        return False
    return not any(action.get("remove", {}).get("dataChange", False) for name in commits
                   for action in _actions(files, posixpath.join(log_dir, name)))


def kafka_stream(spark: SparkSession, kafka: KafkaSettings, topics: list[str],
                 max_offsets_per_trigger: int | None = None) -> DataFrame:
    """The records of Kafka ``topics`` from their start (or the checkpoint's offsets):
    key, value, topic, partition, offset, timestamp, headers."""
    reader = (
        spark.readStream.format("kafka")
        .options(**kafka.spark_kafka_options())
        .option("subscribe", ",".join(topics))
        .option("startingOffsets", "earliest")
        .option("includeHeaders", "true")
    )
    if max_offsets_per_trigger is not None:
        reader = reader.option("maxOffsetsPerTrigger", max_offsets_per_trigger)
    return reader.load()
