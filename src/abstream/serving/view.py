"""The serving view: per gold window, the batch layer's final row where the batch layer
has covered the window's range, otherwise the speed layer's provisional row: the sum of
its increments (visitor sketches merged). Silver visits are served by the same rule on the
visit's start (``serving_visits``).

The view is plain Spark SQL over the Delta tables, so it is always current (no refresh
job) and any engine with a metastore can hold it as a permanent view
(``abstream serving --sql``).
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession

from abstream.io.tables import COVERAGE_TABLE, METRICS_TABLE, SESSIONS_TABLE, ensure_table
from abstream.layout import Layout
from abstream.schemas import EXPERIMENT_METRICS, METRIC_KEY
from abstream.topology import BATCH, SPEED

VIEW_NAME = "abstream_serving"


def _table(path: str) -> str:
    return "delta.`" + path.replace("`", "``") + "`"


def _layered_query(table: str, time_column: str, layout: Layout,
                   speed_columns: str = "g.*", speed_grouping: str = "") -> str:
    """Batch rows whose ``time_column`` the batch layer covers (final), speed rows
    elsewhere (provisional)."""
    rows, coverage = _table(table), _table(layout.batch_coverage)
    covered = f"g.{time_column} >= c.range_start AND g.{time_column} < c.range_end"
    return (
        f"SELECT g.*, true AS final FROM {rows} g\n"
        f"  LEFT SEMI JOIN {coverage} c ON {covered}\n"
        f"  WHERE g.layer = '{BATCH}'\n"
        f"UNION ALL\n"
        f"SELECT {speed_columns}, false AS final FROM {rows} g\n"
        f"  LEFT ANTI JOIN {coverage} c ON {covered}\n"
        f"  WHERE g.layer = '{SPEED}'{speed_grouping}"
    )


def _summed_increments() -> str:
    """Gold's columns for the sum of a key's speed increments."""
    sketch = "hll_union_agg(g.visitors_sketch, true)"
    columns = []
    for field in EXPERIMENT_METRICS.fields:
        name = field.name
        if name in METRIC_KEY:
            columns.append(f"g.{name}")
        elif name == "visitors_sketch":
            columns.append(f"{sketch} AS {name}")
        elif name == "visitors":
            columns.append(f"coalesce(hll_sketch_estimate({sketch}), 0) AS {name}")
        elif name == "computed_at":
            columns.append(f"max(g.{name}) AS {name}")
        else:
            columns.append(f"CAST(sum(g.{name}) AS {field.dataType.simpleString()}) AS {name}")
    return ", ".join(columns)


def serving_query(layout: Layout) -> str:
    """The view's SELECT: gold's columns plus ``final``."""
    grouping = "\n  GROUP BY " + ", ".join(f"g.{key}" for key in METRIC_KEY)
    return _layered_query(layout.experiment_metrics, "window_start", layout,
                          _summed_increments(), grouping)


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


def serving_visits(spark: SparkSession, layout: Layout) -> DataFrame:
    """Silver visits, one layer per visit: silver's columns plus ``final``."""
    ensure_table(spark, SESSIONS_TABLE, layout)
    ensure_table(spark, COVERAGE_TABLE, layout)
    return spark.sql(_layered_query(layout.sessions, "visit_start", layout))
