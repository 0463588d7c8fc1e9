"""`make bench-peers`' comparison of the engines' totals per experiment/variant with
abstream's, and the SQL both peers read."""

from datetime import timedelta

import pytest
from bench.peers import _minutes, agreement, flink_statements, flink_type, totals_of
from pyspark.sql.types import ArrayType, LongType, StringType, StructField, StructType


def _totals(**rows: tuple[int, int]) -> dict[str, dict[str, float]]:
    return {name.replace("__", "/"): {"visits": visits, "orders": orders, "revenue": 0.0}
            for name, (visits, orders) in rows.items()}


def test_each_engine_is_compared_with_the_reference_per_measure() -> None:
    totals = {
        "abstream": _totals(a__control=(100, 10), a__treatment=(200, 20), b__control=(5, 3)),
        "flink": _totals(a__control=(103, 10), a__treatment=(190, 21), c__control=(2, 2)),
        "idiomatic": _totals(a__control=(100, 10), a__treatment=(200, 20), b__control=(5, 3)),
    }
    found = agreement(totals, "abstream")
    assert set(found) == {"flink", "idiomatic"}, "the reference is not compared with itself"
    flink = found["flink"]
    assert flink["visits"]["total"] == 295
    assert flink["visits"]["difference"] == 295 - 305
    assert flink["visits"]["relative"] == pytest.approx(-10 / 305, abs=1e-6)
    assert flink["visits"]["largest"] == {"key": "a/treatment", "difference": -10}
    assert flink["orders"]["difference"] == 0, "the totals agree although keys differ"
    assert flink["orders"]["largest"] == {"key": "b/control", "difference": -3}
    assert flink["only_here"] == ["c/control"]
    assert flink["missing"] == ["b/control"]
    same = found["idiomatic"]
    assert same["visits"]["difference"] == same["orders"]["difference"] == 0
    assert same["visits"]["largest"] is None, "no experiment/variant differs"
    assert same["only_here"] == same["missing"] == []


def test_an_empty_reference_has_no_relative_difference() -> None:
    found = agreement({"abstream": {}, "flink": _totals(a__control=(1, 0))}, "abstream")
    assert found["flink"]["visits"] == {
        "total": 1, "difference": 1, "relative": None,
        "largest": {"key": "a/control", "difference": 1}}


def test_sums_become_whole_counts_and_revenue_in_cents() -> None:
    rows = [{"experiment_id": "a", "variant": "control", "visits": 3.0, "orders": None,
             "revenue": 12.3456}]
    assert totals_of(rows) == {"a/control": {"visits": 3, "orders": 0, "revenue": 12.35}}


def test_flink_reads_the_peers_schema_and_windows_by_whole_minutes(tmp_path) -> None:
    entry = StructType([StructField("id", StringType()), StructField("variant", StringType())])
    assert flink_type(ArrayType(entry)) == "ARRAY<ROW<`id` STRING, `variant` STRING>>"
    assert flink_type(LongType()) == "BIGINT"
    assert _minutes(timedelta(minutes=35)) == "INTERVAL '35' MINUTE"
    with pytest.raises(AssertionError):
        _minutes(timedelta(seconds=90))
    ddl, insert = flink_statements(tmp_path / "in", "parquet", tmp_path / "out")
    assert "'format' = 'parquet'" in ddl[-1] and insert.startswith("INSERT INTO metrics_out")
    _, parse_only = flink_statements(tmp_path / "in", "parse", tmp_path / "out")
    assert parse_only.startswith("INSERT INTO parsed") and "SESSION" not in parse_only
