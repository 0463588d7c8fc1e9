"""The Delta tables of a deployment: their schemas, partitioning, creation and reads."""

from __future__ import annotations

import logging
import posixpath
from dataclasses import dataclass

from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from abstream import topology
from abstream.errors import AbstreamError, UsageError
from abstream.io.hadoop import HadoopFiles
from abstream.layout import Layout
from abstream.schemas import (
    BATCH_COVERAGE,
    EVENTS,
    EXPERIMENT_METRICS,
    EXPERIMENT_RESULTS,
    REJECTED,
    SESSIONS,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TableSpec:
    name: str
    schema: StructType
    partition_by: tuple[str, ...] = ()
    #: The columns Delta keeps per-file minimum/maximum statistics of (it skips files by
    #: them): those the pipeline filters on. Statistics of every column cost each append
    #: (about a fifth of a bronze append of 500,000 events); empty keeps Delta's default.
    stats_columns: tuple[str, ...] = ()

    def path(self, layout: Layout) -> str:
        return layout.table(self.name)


#: Bronze is read by event time (the batch layer), ingestion time (de-duplication) and
#: arrival time (the lag monitor's system lag).
EVENTS_TABLE = TableSpec(topology.EVENTS, EVENTS, ("event_date",),
                         ("event_ts", "arrived_at", "ingested_at"))
REJECTED_TABLE = TableSpec(topology.REJECTED, REJECTED, ("ingest_date",),
                           ("arrived_at", "ingested_at"))
#: Sessions and gold are partitioned by layer first: the speed layer's appends and the batch
#: layer's range replacements touch different partitions, so they never conflict.
SESSIONS_TABLE = TableSpec(topology.SESSIONS, SESSIONS, ("layer", "visit_date"),
                           ("visit_start", "visit_end"))
METRICS_TABLE = TableSpec(topology.EXPERIMENT_METRICS, EXPERIMENT_METRICS, ("layer",),
                          ("window_start", "window_end"))
COVERAGE_TABLE = TableSpec(topology.BATCH_COVERAGE, BATCH_COVERAGE)
RESULTS_TABLE = TableSpec(topology.EXPERIMENT_RESULTS, EXPERIMENT_RESULTS)


def ensure_table(spark: SparkSession, spec: TableSpec, layout: Layout) -> str:
    """Create the table with its schema if it does not exist yet; return its path."""
    path = str(spec.path(layout))
    if DeltaTable.isDeltaTable(spark, path):
        _check_partitioning(spark, spec, path)
        return path
    log.debug("creating Delta table %s at %s", spec.name, path)
    builder = DeltaTable.createIfNotExists(spark).location(path).addColumns(spec.schema) \
        .partitionedBy(*spec.partition_by)
    if spec.stats_columns:
        builder = builder.property("delta.dataSkippingStatsColumns", ",".join(spec.stats_columns))
    try:
        builder.execute()
    except Exception:
        # Another process or query created it at the same moment: fine if it exists now.
        if not DeltaTable.isDeltaTable(spark, path):
            raise
    return path


def ensure_source_table(spark: SparkSession, spec: TableSpec, layout: Layout,
                        component: str) -> str:
    """The table ``component`` streams from: created while the component has never
    committed a micro-batch (it may start before its upstream writes), refused once its
    checkpoint has read from it, since an empty table in its place would not be the one the
    checkpoint points into."""
    path = str(spec.path(layout))
    commits = posixpath.join(layout.checkpoint(component), "commits")
    if not DeltaTable.isDeltaTable(spark, path) and any(
            name.isdigit() for name in HadoopFiles(spark, commits).names(commits)):
        raise UsageError(f"{component}: its source table {path} is gone, yet its checkpoint "
                         f"{layout.checkpoint(component)} has read from it; restore the table, "
                         f"or delete the checkpoint to read a new one from its start")
    return ensure_table(spark, spec, layout)


def _check_partitioning(spark: SparkSession, spec: TableSpec, path: str) -> None:
    """Refuse a table partitioned otherwise than this version writes it: Delta would reject
    every append with a page of Java."""
    found = tuple(DeltaTable.forPath(spark, path).detail().first()["partitionColumns"])
    if found != spec.partition_by:
        raise AbstreamError(
            f"the {spec.name} table at {path} is partitioned by {', '.join(found) or 'nothing'}, "
            f"this version of abstream partitions it by {', '.join(spec.partition_by)}: "
            "move it away to start it anew")


def read_table(spark: SparkSession, spec: TableSpec, layout: Layout) -> DataFrame:
    """The current snapshot of a table (created empty if it is not there yet)."""
    return spark.read.format("delta").load(ensure_table(spark, spec, layout))
