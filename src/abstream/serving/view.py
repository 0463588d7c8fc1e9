"""The serving view: per gold window, the batch layer's final row where the batch layer
has covered the window's range, otherwise the speed layer's provisional row: the sum of
its increments (visitor sketches merged). Silver visits are served by the same rule on the
visit's start (``serving_visits``). The catalog's definitions are served by the same rule
from ``definition_metrics``, each by its current version only (``definitions_view``).

The view is plain Spark SQL over the Delta tables, so it is always current (no refresh
job) and any engine with a metastore can hold it as a permanent view
(``abstream serving --sql``).
"""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from abstream.io.tables import (
    COVERAGE_TABLE,
    DEFINITIONS_TABLE,
    METRICS_TABLE,
    SESSIONS_TABLE,
    ensure_table,
)
from abstream.layout import Layout
from abstream.metrics.definitions import Catalog
from abstream.schemas import DEFINITION_KEY, DEFINITION_METRICS, EXPERIMENT_METRICS, METRIC_KEY
from abstream.stages.definition_gold import served
from abstream.topology import BATCH, SPEED

VIEW_NAME = "abstream_serving"
DEFINITIONS_VIEW = "abstream_serving_definitions"


#: Table paths and the versions to read them at (time travel); a table not named is read
#: at its latest version.
Pinned = Mapping[str, int]


def _table(path: str, pinned: Pinned | None = None) -> str:
    version = (pinned or {}).get(path)
    return "delta.`" + path.replace("`", "``") + "`" + \
        ("" if version is None else f" VERSION AS OF {version}")


def _layered_query(table: str, time_column: str, layout: Layout,
                   speed_columns: str = "g.*", speed_grouping: str = "", *,
                   columns: StructType | None = None, pinned: Pinned | None = None) -> str:
    """Batch rows whose ``time_column`` the batch layer covers (final), speed rows
    elsewhere (provisional); the table's ``columns`` (None: all)."""
    rows, coverage = _table(table, pinned), _table(layout.batch_coverage, pinned)
    covered = f"g.{time_column} >= c.range_start AND g.{time_column} < c.range_end"
    batch_columns = "g.*" if columns is None else \
        ", ".join(f"g.{name}" for name in columns.fieldNames())
    return (
        f"SELECT {batch_columns}, true AS final FROM {rows} g\n"
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


def _definitions_increments() -> str:
    """``definition_metrics``' columns for the sum of a key's speed increments."""
    merged = {"units_sketch": "hll_union_agg(g.units_sketch, true)",
              "converted_sketch": "hll_union_agg(g.converted_sketch, true)",
              "values_sketch": "kll_merge_agg_double(g.values_sketch)",
              "numerator": "sum(g.numerator)", "denominator": "sum(g.denominator)",
              "computed_at": "max(g.computed_at)"}
    return ", ".join(f"{merged[name]} AS {name}" if name in merged else f"g.{name}"
                     for name in DEFINITION_METRICS.fieldNames())


def definitions_query(layout: Layout, catalog: Catalog, pinned: Pinned | None = None) -> str:
    """The definitions view's SELECT: ``definition_metrics``' columns plus ``final``, only
    the rows of each definition's current version (its fingerprint)."""
    grouping = "\n  GROUP BY " + ", ".join(f"g.{key}" for key in DEFINITION_KEY)
    current = ", ".join(f"({_quoted(d.name)}, {_quoted(d.fingerprint)})"
                        for d in served(catalog)) or "(NULL, NULL)"
    layered = _layered_query(layout.definition_metrics, "window_start", layout,
                             _definitions_increments(), grouping,
                             columns=DEFINITION_METRICS, pinned=pinned)
    return f"SELECT * FROM (\n{layered}\n) WHERE (metric, fingerprint) IN ({current})"


def _quoted(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def definitions_view(spark: SparkSession, layout: Layout, catalog: Catalog,
                     name: str | None = DEFINITIONS_VIEW) -> DataFrame:
    """The definitions view as a DataFrame, also registered as a temporary view ``name``."""
    ensure_table(spark, DEFINITIONS_TABLE, layout)
    ensure_table(spark, COVERAGE_TABLE, layout)
    view = spark.sql(definitions_query(layout, catalog))
    if name:
        view.createOrReplaceTempView(name)
    return view


def serving_query(layout: Layout, pinned: Pinned | None = None) -> str:
    """The view's SELECT: gold's columns plus ``final``."""
    grouping = "\n  GROUP BY " + ", ".join(f"g.{key}" for key in METRIC_KEY)
    return _layered_query(layout.experiment_metrics, "window_start", layout,
                          _summed_increments(), grouping, columns=EXPERIMENT_METRICS,
                          pinned=pinned)


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
