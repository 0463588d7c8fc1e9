"""Appends from foreachBatch land once per micro-batch, whatever Spark replays."""

import json
import threading

import pytest
from delta.tables import DeltaTable
from pyspark.sql import functions as F

from abstream.io import sinks


@pytest.fixture
def rows(spark):
    return spark.range(3).selectExpr("id", "cast(id % 2 as string) AS part")


def _count(spark, path):
    return spark.read.format("delta").load(path).count()


def test_a_run_appends_every_batch_and_marks_its_commits(spark, rows, tmp_path):
    path = str(tmp_path / "t")
    append = sinks.AppendOnce(path, ["part"])
    assert [append(rows, "w1", batch) for batch in range(3)] == [True, True, True]
    assert _count(spark, path) == 9
    markers = [json.loads(r["userMetadata"])
               for r in DeltaTable.forPath(spark, path).history().collect()]
    assert markers == [{"writer": "w1", "batch": b} for b in (2, 1, 0)]


def test_the_first_batch_after_a_restart_is_skipped_when_it_committed(spark, rows, tmp_path):
    path = str(tmp_path / "t")
    before = sinks.AppendOnce(path)
    before(rows, "w1", 0)
    before(rows, "w1", 1)
    after = sinks.AppendOnce(path)
    assert after(rows, "w1", 1) is False, "batch 1 was replayed and written twice"
    assert after(rows, "w1", 2) is True
    assert _count(spark, path) == 9
    assert sinks.AppendOnce(path)(rows, "w1", 3) is True, "batch 3 is new after a restart"
    assert _count(spark, path) == 12


def test_other_writers_and_a_new_checkpoint_do_not_count(spark, rows, tmp_path, monkeypatch):
    path = str(tmp_path / "t")
    sinks.AppendOnce(path)(rows, "w1", 0)
    rows.write.format("delta").mode("append").option("userMetadata", "nightly fix").save(path)
    rows.write.format("delta").mode("append").save(path)
    sinks.AppendOnce(path)(rows, "w2", 7)
    monkeypatch.setattr(sinks, "HISTORY_LOOKBACK", 2)
    assert sinks.AppendOnce(path)(rows, "w1", 0) is False, "w1's commit is 4 versions back"
    assert sinks.AppendOnce(path)(rows, "w3", 0) is True, "a new writer starts afresh"
    assert sinks.last_batch_written(spark, path, "w2") == 7
    assert sinks.last_batch_written(spark, path, "w9") is None




def test_a_replacement_that_loses_a_race_is_tried_again(spark, tmp_path, caplog):
    """A compaction (``maintain``) commits while the batch layer replaces the same files:
    the replacement is tried again, and the table holds just the replacement's rows."""
    path = str(tmp_path / "t")
    for part in ("a", "a", "a", "b"):
        spark.range(2).selectExpr("id", f"'{part}' AS part").write.format("delta") \
            .mode("append").partitionBy("part").save(path)
    # Four rows in one task, each 1.5 s: the compaction commits while they are written.
    slow = spark.range(0, 4, 1, 1).where(
        F.expr("length(coalesce(reflect('java.lang.Thread', 'sleep', id * 0 + 1500L), '')) >= 0")) \
        .selectExpr("id + 10 AS id", "'a' AS part")
    compaction = threading.Timer(0.5, lambda: DeltaTable.forPath(spark, path).optimize()
                                 .where("part = 'a'").executeCompaction())
    compaction.start()
    try:
        with sinks.rows_known_to_match(spark):
            assert sinks.replace_where(slow, path, "part = 'a'", ["part"]) == 4
    finally:
        compaction.join()
    assert "lost a race with another commit" in caplog.text
    table = spark.read.format("delta").load(path)
    assert sorted((r.id, r.part) for r in table.collect()) == [
        (0, "b"), (1, "b"), (10, "a"), (11, "a"), (12, "a"), (13, "a")]
    operations = [r.operation for r in DeltaTable.forPath(spark, path).history().collect()]
    assert operations[:2] == ["WRITE", "OPTIMIZE"], "the compaction committed first"
