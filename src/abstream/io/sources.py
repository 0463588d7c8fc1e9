"""Streaming reads: the landing folder of JSON-lines files, and Delta tables."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F


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
    jvm = spark._jvm
    path = jvm.org.apache.hadoop.fs.Path(location)
    path.getFileSystem(spark._jsc.hadoopConfiguration()).mkdirs(path)


def delta_stream(spark: SparkSession, path: str, max_files_per_trigger: int,
                 skip_change_commits: bool = False) -> DataFrame:
    """The appends to a Delta table, in commit order; with ``skip_change_commits``, commits
    that delete or rewrite rows are skipped instead of failing the query."""
    return (
        spark.readStream.format("delta")
        .option("maxFilesPerTrigger", max_files_per_trigger)
        .option("skipChangeCommits", skip_change_commits)
        .load(path)
    )


def kafka_stream(spark: SparkSession, bootstrap_servers: str, topics: list[str],
                 max_offsets_per_trigger: int | None = None) -> DataFrame:
    """The records of Kafka ``topics`` from their start (or the checkpoint's offsets):
    key, value, topic, partition, offset, timestamp, headers."""
    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap_servers)
        .option("subscribe", ",".join(topics))
        .option("startingOffsets", "earliest")
        .option("includeHeaders", "true")
    )
    if max_offsets_per_trigger is not None:
        reader = reader.option("maxOffsetsPerTrigger", max_offsets_per_trigger)
    return reader.load()
