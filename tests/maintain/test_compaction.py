"""Which partitions are compacted: closed ones with two or more small files."""

import contextlib
import threading
from datetime import date

import pytest
from delta.exceptions import ConcurrentAppendException
from delta.tables import DeltaTable

from abstream.errors import AbstreamError
from abstream.io.deltalog import DataFile
from abstream.io.tables import DEFINITIONS_TABLE, METRICS_TABLE
from abstream.maintain.compaction import Compaction, Partition, candidates, compact
from abstream.maintain.vacuum import snapshot
from tests.helpers import wait_until

SMALL = 1_000


def _file(path: str, size: int = 100) -> DataFile:
    return DataFile(path, size, 0, 1)


def test_closed_days_with_several_small_files_are_candidates():
    files = [_file("event_date=2026-01-04/a.parquet"), _file("event_date=2026-01-04/b.parquet"),
             _file("event_date=2026-01-04/big.parquet", SMALL),
             _file("event_date=2026-01-05/c.parquet"), _file("event_date=2026-01-05/d.parquet"),
             _file("event_date=2026-01-03/alone.parquet")]
    found = candidates(files, ("event_date",), "event_date", date(2026, 1, 5), SMALL)
    # 01-05 is still open; 01-03 has one small file only: nothing for OPTIMIZE to merge.
    assert found == [Partition((("event_date", "2026-01-04"),), 2, 200)]
    assert found[0].predicate == "event_date = '2026-01-04'"
    assert found[0].label == "event_date=2026-01-04"


def test_a_table_without_a_day_column_is_compacted_per_partition():
    files = [_file(f"layer={layer}/{n}.parquet") for layer in ("speed", "batch") for n in "ab"]
    found = candidates(files, ("layer",), None, date(2026, 1, 5), SMALL)
    assert [p.label for p in found] == ["layer=batch", "layer=speed"]


@pytest.mark.parametrize("spec", [METRICS_TABLE, DEFINITIONS_TABLE], ids=lambda s: s.name)
def test_gold_is_compacted_by_closed_window_day_each_once(spec):
    """A closed day of gold is compacted into one file, which the next runs leave alone:
    maintain never rewrites the days before."""
    files = [_file(f"layer={layer}/window_date={day}/{n}.parquet")
             for layer in ("speed", "batch") for day in ("2026-01-04", "2026-01-05")
             for n in "ab"]
    compacted = [_file("layer=speed/window_date=2026-01-03/compacted.parquet"),
                 _file("layer=batch/window_date=2026-01-03/compacted.parquet")]
    day = spec.day[0] if spec.day else None
    found = candidates([*files, *compacted], spec.partition_by, day, date(2026, 1, 5), SMALL)
    assert [p.label for p in found] == ["layer=batch/window_date=2026-01-04",
                                        "layer=speed/window_date=2026-01-04"]


def test_partition_values_come_from_the_folders_nested_and_quoted():
    files = [_file("layer=speed/visit_date=2026-01-01/a.parquet"),
             _file("layer=speed/visit_date=2026-01-01/b.parquet"),
             _file("layer=o%27brien/visit_date=__HIVE_DEFAULT_PARTITION__/c.parquet"),
             _file("layer=o%27brien/visit_date=__HIVE_DEFAULT_PARTITION__/d.parquet")]
    (found,) = candidates(files, ("layer", "visit_date"), "visit_date", date(2026, 1, 5), SMALL)
    assert found.predicate == "layer = 'speed' AND visit_date = '2026-01-01'"
    nulls = candidates(files, ("layer", "visit_date"), None, date(2026, 1, 5), SMALL)
    assert nulls[0].predicate == "layer = 'o''brien' AND visit_date IS NULL"
    with pytest.raises(AbstreamError, match="not in a folder per partition value"):
        candidates([_file("a.parquet")], ("layer",), None, date(2026, 1, 5), SMALL)


def _race(spark, path: str) -> Compaction:
    """OPTIMIZE of a partition with a DELETE of the same partition started while it runs."""
    spark.range(600).selectExpr("id", "'2026-01-05' AS day").repartition(60) \
        .write.format("delta").mode("overwrite").partitionBy("day").save(path)
    (partition,) = candidates(snapshot(path), ("day",), "day", date(2026, 1, 6), SMALL * 1000)
    DeltaTable.forPath(spark, path).detail().collect()  # the log read: no job of its own later
    tracker = spark.sparkContext.statusTracker()
    result: list[Compaction] = []
    racer = threading.Thread(target=lambda: result.append(compact(spark, path, partition, 2)))
    racer.start()
    # On a busy machine the compaction can run whole between two polls: it won the round.
    wait_until(lambda: tracker.getActiveJobsIds() or not racer.is_alive(),
               "OPTIMIZE to start rewriting")
    # The compaction may commit first: then the DELETE loses the round, not the compaction.
    with contextlib.suppress(ConcurrentAppendException):
        spark.sql(f"DELETE FROM delta.`{path}` WHERE day = '2026-01-05'")
    racer.join(timeout=300)
    return result[0]


def test_a_compaction_that_loses_a_race_is_tried_again(spark, tmp_path, caplog):
    """Which commits first is up to the scheduler: a compaction that won rewrote the files
    (and the DELETE removed its output); one that lost was tried again and found nothing
    left to compact. Rounds go on until one is lost."""
    path = str(tmp_path / "table")
    for _ in range(5):
        compaction = _race(spark, path)
        assert not compaction.skipped
        if compaction.retries:
            assert (compaction.retries, compaction.files_removed) == (1, 0)
            assert "lost a race with a writer" in caplog.text
            return
        assert compaction.files_removed == 60, "it won: all the small files were rewritten"
    pytest.skip("the DELETE never committed first in 5 rounds; the retry was not exercised")
