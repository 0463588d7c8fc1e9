"""State snapshots: parts of several snapshots read as one, a missing one refused, and
parts written after a snapshot was first read."""

import pytest

from abstream.errors import AbstreamError
from abstream.io.state import SNAPSHOT, StateSnapshots

SCHEMAS = {"rows": "value long", "copied": "value long"}


def _snapshots(spark, tmp_path):
    return StateSnapshots(spark, str(tmp_path / "state"),
                          {part: spark.createDataFrame([], schema).schema
                           for part, schema in SCHEMAS.items()})


def test_parts_of_several_snapshots_are_read_with_their_batch(spark, tmp_path):
    state = _snapshots(spark, tmp_path)
    state.write(0, "rows", spark.range(2).withColumnRenamed("id", "value"))
    state.write(3, "rows", spark.range(10, 11).withColumnRenamed("id", "value"))
    state.write(3, "copied", spark.range(20, 21).withColumnRenamed("id", "value"))

    rows = state.read_parts((0, 3), ("rows", "copied")).collect()

    assert sorted((r["value"], r[SNAPSHOT]) for r in rows) == [(0, 0), (1, 0), (10, 3), (20, 3)]


def test_a_missing_snapshot_is_refused_with_one_line(spark, tmp_path):
    state = _snapshots(spark, tmp_path)
    state.write(0, "rows", spark.range(1).withColumnRenamed("id", "value"))

    with pytest.raises(AbstreamError, match="state of micro-batch 1 is missing"):
        state.read_parts((0, 1), ("rows", "copied"))


def test_a_part_written_after_its_snapshot_was_read_is_read_too(spark, tmp_path):
    """Which parts a snapshot has is listed once: a part written after, as a micro-batch
    writes its parts one by one (or a replay writes them again), is read nonetheless."""
    state = _snapshots(spark, tmp_path)
    state.write(0, "rows", spark.range(1).withColumnRenamed("id", "value"))
    assert state.read(0, "copied").count() == 0
    assert state.read_parts((0,), ("rows", "copied")).count() == 1

    state.write(0, "copied", spark.range(5, 7).withColumnRenamed("id", "value"))

    assert state.read(0, "copied").count() == 2
    assert state.read_parts((0,), ("rows", "copied")).count() == 3
