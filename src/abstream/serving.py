"""The serving view: per gold window, the batch layer's final row where the batch layer
has covered the window's range, otherwise the speed layer's provisional row.

The view is plain Spark SQL over the Delta tables, so it is always current (no refresh
job) and any engine with a metastore can hold it as a permanent view
(``abstream serving --sql``).
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession

from abstream.io.tables import COVERAGE_TABLE, METRICS_TABLE, ensure_table
from abstream.layout import Layout

VIEW_NAME = "abstream_serving"


def _table(path: str) -> str:
    return "delta.`" + path.replace("`", "``") + "`"


def serving_query(layout: Layout) -> str:
    """The view's SELECT: gold's columns plus ``final``."""
    gold, coverage = _table(layout.experiment_metrics), _table(layout.batch_coverage)
    covered = "g.window_start >= c.range_start AND g.window_start < c.range_end"
    return (
        f"SELECT g.*, true AS final FROM {gold} g\n"
        f"  LEFT SEMI JOIN {coverage} c ON {covered}\n"
        f"  WHERE g.layer = 'batch'\n"
        f"UNION ALL\n"
        f"SELECT g.*, false AS final FROM {gold} g\n"
        f"  LEFT ANTI JOIN {coverage} c ON {covered}\n"
        f"  WHERE g.layer = 'speed'"
    )


def create_view_statement(layout: Layout, name: str = VIEW_NAME) -> str:
    """SQL that defines the serving view permanently in a metastore."""
    return f"CREATE OR REPLACE VIEW {name} AS\n{serving_query(layout)}"


def serving_view(spark: SparkSession, layout: Layout, name: str | None = VIEW_NAME
                 ) -> DataFrame:
    """The serving view as a DataFrame, also registered as a temporary view ``name``."""
    ensure_table(spark, METRICS_TABLE, layout)
    ensure_table(spark, COVERAGE_TABLE, layout)
    view = spark.sql(serving_query(layout))
    if name:
        view.createOrReplaceTempView(name)
    return view
