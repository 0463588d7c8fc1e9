"""Streaming reads of Delta tables: a new query reads a young append-only table's commits,
any other table's snapshot, and gets the table's rows either way."""

import json
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession

from abstream.io.sources import delta_stream


def _read(spark: SparkSession, table: Path, checkpoint: Path) -> tuple[set[int], dict]:
    """The ids a new query over ``table`` reads (a file a micro-batch), and the end offset
    of its first micro-batch: an index into the snapshot (``isStartingVersion``) or into
    the first commit with data."""
    seen: set[int] = set()

    def collect(batch: DataFrame, _: int) -> None:
        seen.update(row["id"] for row in batch.collect())

    query = delta_stream(spark, str(table), 1).writeStream \
        .option("checkpointLocation", str(checkpoint)).foreachBatch(collect) \
        .trigger(availableNow=True).start()
    query.awaitTermination()
    offset = (checkpoint / "offsets" / "0").read_text().splitlines()[-1]
    return seen, json.loads(offset)


def _append(spark: SparkSession, table: Path, ids: range) -> None:
    spark.range(ids.start, ids.stop).write.format("delta").mode("append").save(str(table))


def test_a_young_append_only_table_is_read_from_its_commits(spark: SparkSession, tmp_path):
    table = tmp_path / "t"
    _append(spark, table, range(0, 5))
    _append(spark, table, range(5, 8))
    seen, offset = _read(spark, table, tmp_path / "cp")
    assert seen == set(range(8))
    assert offset["isStartingVersion"] is False


def test_a_table_with_deleted_rows_is_read_from_its_snapshot(spark: SparkSession, tmp_path):
    table = tmp_path / "t"
    _append(spark, table, range(0, 5))
    spark.sql(f"DELETE FROM delta.`{table}` WHERE id = 3")
    _append(spark, table, range(5, 8))
    seen, offset = _read(spark, table, tmp_path / "cp")
    assert seen == {0, 1, 2, 4, 5, 6, 7}
    assert offset["isStartingVersion"] is True


def test_a_table_whose_first_commits_are_gone_is_read_from_its_snapshot(
        spark: SparkSession, tmp_path):
    table = tmp_path / "t"
    _append(spark, table, range(0, 1))
    spark.sql(f"ALTER TABLE delta.`{table}` SET TBLPROPERTIES (delta.checkpointInterval = 2)")
    _append(spark, table, range(1, 3))
    (table / "_delta_log" / f"{0:020d}.json").unlink()
    seen, offset = _read(spark, table, tmp_path / "cp")
    assert seen == set(range(3))
    assert offset["isStartingVersion"] is True
