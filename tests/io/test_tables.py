"""The Delta tables keep file statistics of the columns the pipeline filters on only."""

import json
from pathlib import Path

import pytest
from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import StructField

from abstream.errors import AbstreamError
from abstream.io.tables import EVENTS_TABLE, METRICS_TABLE, SESSIONS_TABLE, ensure_table
from abstream.layout import Layout


def _stats_of_first_file(path: str) -> dict:
    for commit in sorted(Path(path, "_delta_log").glob("*.json")):
        for line in commit.read_text().splitlines():
            action = json.loads(line)
            if "add" in action:
                return json.loads(action["add"]["stats"])
    raise AssertionError(f"no data file in {path}")


#: A SQL literal of each non-nullable type the tables have (numbers: 0).
_LITERALS = {"string": "'x'", "timestamp": "current_timestamp()", "date": "current_date()",
             "boolean": "false"}


def _any_value(field: StructField) -> Column:
    """A value of the field's type (NULL where the field allows it)."""
    kind = field.dataType.simpleString()
    if field.nullable:
        sql = "NULL"
    elif kind.startswith("array"):
        sql = "array()"
    else:
        sql = _LITERALS.get(kind, "0")
    return F.expr(sql).cast(field.dataType).alias(field.name)


@pytest.mark.parametrize("spec", [EVENTS_TABLE, METRICS_TABLE], ids=lambda s: s.name)
def test_an_append_keeps_statistics_of_the_filtered_columns_only(spark, tmp_path, spec):
    path = ensure_table(spark, spec, Layout.of(tmp_path))
    schema = spark.read.format("delta").load(path).schema
    spark.range(1).select(*(_any_value(f) for f in schema.fields)) \
        .write.format("delta").mode("append").save(path)

    stats = _stats_of_first_file(path)

    assert set(stats["nullCount"]) == set(spec.stats_columns)


def test_a_table_partitioned_otherwise_is_refused_with_one_line(spark, tmp_path):
    layout = Layout.of(tmp_path)
    spark.createDataFrame([], SESSIONS_TABLE.schema).write.format("delta") \
        .partitionBy("visit_date").save(SESSIONS_TABLE.path(layout))

    with pytest.raises(AbstreamError, match="partitioned by visit_date, this version of "
                                            "abstream partitions it by layer, visit_date"):
        ensure_table(spark, SESSIONS_TABLE, layout)
