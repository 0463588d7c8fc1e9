"""The batch layer's record of what it computed: the ``batch_coverage`` Delta table."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.window import Window

from abstream.batch.ranges import TimeRange
from abstream.io.tables import COVERAGE_TABLE, ensure_table, read_table
from abstream.layout import Layout
from abstream.schemas import BATCH_COVERAGE
from abstream.times import from_micros

_TIMES = {f.name for f in BATCH_COVERAGE.fields if f.dataType.typeName() == "timestamp"}


@dataclass(frozen=True)
class Covered:
    """One computed range, as its latest computation left it."""

    range_start: datetime
    range_end: datetime
    depends_from: datetime
    depends_until: datetime
    bronze_version: int
    events: int
    visits: int
    metric_rows: int
    run_id: str
    computed_at: datetime

    @property
    def range(self) -> TimeRange:
        return TimeRange(self.range_start, self.range_end)


def latest_coverage(spark: SparkSession, layout: Layout) -> list[Covered]:
    """Every range the batch layer has computed, each once (its latest computation)."""
    newest_first = Window.partitionBy("range_start", "range_end") \
        .orderBy(F.col("computed_at").desc(), F.col("bronze_version").desc())
    rows = (
        read_table(spark, COVERAGE_TABLE, layout)
        .withColumn("rank", F.row_number().over(newest_first))
        .where("rank = 1")
        .orderBy("range_start")
        .select(*(F.unix_micros(f.name).alias(f.name) if f.name in _TIMES else f.name
                  for f in BATCH_COVERAGE.fields))
        .collect()
    )
    return [Covered(**{name: from_micros(value) if name in _TIMES else value
                       for name, value in row.asDict().items()})
            for row in rows]


def record(spark: SparkSession, layout: Layout, covered: Covered) -> None:
    """Append one computed range."""
    path = ensure_table(spark, COVERAGE_TABLE, layout)
    spark.createDataFrame([tuple(asdict(covered).values())], BATCH_COVERAGE) \
        .write.format("delta").mode("append").save(path)
