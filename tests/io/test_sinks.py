"""Appends from foreachBatch land once per micro-batch, whatever Spark replays."""

import json

import pytest
from delta.tables import DeltaTable

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


