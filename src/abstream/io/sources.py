"""Streaming reads: the landing folder of JSON-lines files, and Delta tables."""

from __future__ import annotations

import json
import posixpath
import re
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from abstream.config import KafkaSettings
from abstream.io.checkpoint_log import parse_offset
from abstream.io.hadoop import HadoopFiles

_COMMIT = re.compile(r"^\d{20}\.json$")
_CHECKPOINT_FILE = re.compile(r"^\d{20}\.checkpoint.*\.parquet$")


def landing_lines(spark: SparkSession, landing: str, max_files_per_trigger: int) -> DataFrame:
    """Every line of every file in ``landing`` as ``value``, with its file, when the file
    arrived (its modification time) and when this micro-batch read it.

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
            F.current_timestamp().alias("ingested_at"),
        )
    )


def make_dirs(spark: SparkSession, location: str) -> None:
    """Create a folder on whatever file system holds it (local, HDFS, S3, ...)."""
    HadoopFiles(spark, location).make_dirs(location)


#: Past this many commits without a Delta checkpoint, a new query reads the snapshot.
_MAX_COMMITS_READ = 100


#: The column of a Delta stream's rows that names the data file each was read from.
READ_FROM = "read_from"


def delta_stream(spark: SparkSession, path: str, max_files_per_trigger: int) -> DataFrame:
    """The appends to a Delta table, in commit order, each row with the name of its data
    file (``READ_FROM``, for ``CommitsRead``).

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
    return reader.load(path).withColumn(READ_FROM, F.regexp_extract(F.input_file_name(),
                                                                    "[^/]*$", 0))


@dataclass(frozen=True)
class UnfinishedCommit:
    """The commit (``version``) of a Delta table a micro-batch read only part of, and the
    names of its data files (``READ_FROM``)."""

    version: int
    files: frozenset[str]

    def holds(self) -> Column:
        """Whether a row of the micro-batch is of this commit."""
        return F.col(READ_FROM).isin(*self.files)


class CommitsRead:
    """Which commits of the Delta table at ``path`` (read with ``delta_stream``) the
    micro-batches of the query checkpointed at ``checkpoint`` read whole; each file system
    is opened once, for every micro-batch."""

    def __init__(self, spark: SparkSession, checkpoint: str, path: str) -> None:
        self._offsets = posixpath.join(checkpoint, "offsets")
        self._log = posixpath.join(path, "_delta_log")
        self._checkpoint_files = HadoopFiles(spark, checkpoint)
        self._table_files = HadoopFiles(spark, path)

    def unfinished(self, batch_id: int) -> UnfinishedCommit | None:
        """The commit micro-batch ``batch_id`` read only part of; None where it read whole
        commits.

        ``maxFilesPerTrigger`` ends a micro-batch after a number of files, inside a commit
        when it falls there: the micro-batch's end offset (planned in the checkpoint before
        it runs) then points at a file of the commit (``index`` 0 or more), not before the
        next commit (-1). A query's first read of a table's snapshot (``isStartingVersion``)
        has no commits to go by: its files come in the order they were written, each on its
        own, so it is None there too.
        """
        planned = self._checkpoint_files.read_text(posixpath.join(self._offsets, str(batch_id)))
        end = parse_offset(planned.splitlines()[-1])
        if end is None or end["index"] < 0 or end["isStartingVersion"]:
            return None
        version = end["reservoirVersion"]
        commit = posixpath.join(self._log, f"{version:020d}.json")
        return UnfinishedCommit(version, frozenset(
            posixpath.basename(action["add"]["path"])
            for action in _actions(self._table_files, commit) if "add" in action))


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
