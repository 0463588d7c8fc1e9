"""The Delta tables of a deployment: their schemas, partitioning, creation and reads."""

from __future__ import annotations

import logging
import posixpath
import re
import time
from dataclasses import dataclass, replace

from delta.tables import DeltaTable
from py4j.protocol import Py4JError
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, DataType, StructType

from abstream import topology
from abstream.config import EventsSettings
from abstream.errors import AbstreamError, UsageError, first_line
from abstream.io.hadoop import HadoopFiles
from abstream.io.sinks import CONFLICTS
from abstream.layout import Layout
from abstream.schemas import (
    BATCH_COVERAGE,
    DEFINITION_METRICS,
    EVENTS,
    EXPERIMENT_METRICS,
    EXPERIMENT_RESULTS,
    REJECTED,
    SESSIONS,
    WINDOW_DATE,
    WINDOW_DAY,
    bronze_schema,
    with_window_date,
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
    #: The partition column that is a day, and the timestamp column it is the date of: a
    #: day ended a while ago is closed (``abstream maintain`` compacts it once).
    day: tuple[str, str] | None = None

    def path(self, layout: Layout) -> str:
        return layout.table(self.name)


#: Bronze is read by event time (the batch layer), ingestion time (de-duplication) and
#: arrival time (the lag monitor's system lag).
EVENTS_TABLE = TableSpec(topology.EVENTS, EVENTS, ("event_date",),
                         ("event_ts", "arrived_at", "ingested_at"), ("event_date", "event_ts"))
REJECTED_TABLE = TableSpec(topology.REJECTED, REJECTED, ("ingest_date",),
                           ("arrived_at", "ingested_at"), ("ingest_date", "ingested_at"))
#: Sessions and gold are partitioned by layer first: the speed layer's appends and the batch
#: layer's range replacements touch different partitions, so they never conflict.
SESSIONS_TABLE = TableSpec(topology.SESSIONS, SESSIONS, ("layer", "visit_date"),
                           ("visit_start", "visit_end"), ("visit_date", "visit_start"))
METRICS_TABLE = TableSpec(topology.EXPERIMENT_METRICS, with_window_date(EXPERIMENT_METRICS),
                          ("layer", WINDOW_DATE), ("window_start", "window_end"), WINDOW_DAY)
DEFINITIONS_TABLE = TableSpec(topology.DEFINITION_METRICS, with_window_date(DEFINITION_METRICS),
                              ("layer", WINDOW_DATE),
                              ("window_start", "window_end", "metric", "fingerprint"),
                              WINDOW_DAY)
COVERAGE_TABLE = TableSpec(topology.BATCH_COVERAGE, BATCH_COVERAGE)
RESULTS_TABLE = TableSpec(topology.EXPERIMENT_RESULTS, EXPERIMENT_RESULTS)
#: Every table abstream creates.
TABLES = (EVENTS_TABLE, REJECTED_TABLE, SESSIONS_TABLE, METRICS_TABLE, DEFINITIONS_TABLE,
          COVERAGE_TABLE, RESULTS_TABLE)


#: What makes a Delta log a table's: a commit, or a checkpoint of commits.
_COMMIT = re.compile(r"^\d{20}\.(json|checkpoint\..*parquet)$|^_last_checkpoint$")
#: Where Delta stages commits before they are published in the log.
_STAGED = "_staged_commits"
#: How long a creation may take from Delta making the log folder to its first commit: a
#: log without a commit that changed more recently is a creation at work elsewhere.
CREATION_SECONDS = 30.0
#: How many times a table is rewritten by its day when concurrent commits win the race.
REPARTITION_ATTEMPTS = 3
#: Commits between two Delta checkpoints of a table abstream creates (Delta's default: 10).
#: A streaming writer commits every micro-batch, and each checkpoint rewrites the table's
#: whole file list: a 40-row append took 0.37 s on average at 100 against 0.58 s at 10 (a
#: checkpoint 1.7-3.0 s every tenth). A reader replays at most this many commits after the
#: latest checkpoint.
CHECKPOINT_INTERVAL = 100


def ensure_table(spark: SparkSession, spec: TableSpec, layout: Layout) -> str:
    """Create the table with its schema if it does not exist yet; return its path. A
    creation a crash interrupted is done again (see ``_clear_interrupted_creation``)."""
    path = str(spec.path(layout))
    if DeltaTable.isDeltaTable(spark, path):
        _check_partitioning(spark, spec, path)
        _add_new_columns(spark, spec, path)
        return path
    _clear_interrupted_creation(spark, spec, path)
    log.debug("creating Delta table %s at %s", spec.name, path)
    builder = DeltaTable.createIfNotExists(spark).location(path).addColumns(spec.schema) \
        .partitionedBy(*spec.partition_by) \
        .property("delta.checkpointInterval", str(CHECKPOINT_INTERVAL))
    if spec.stats_columns:
        builder = builder.property("delta.dataSkippingStatsColumns", ",".join(spec.stats_columns))
    try:
        builder.execute()
    except Exception:
        # Another query or process creating it at the same moment fails this creation: fine
        # once that one is done. Whether it is, the log's files tell: Delta can answer from
        # a log it cached before the other commit.
        _clear_interrupted_creation(spark, spec, path)
        if not _has_commit(HadoopFiles(spark, path), path):
            raise
    return path


def _clear_interrupted_creation(spark: SparkSession, spec: TableSpec, path: str) -> None:
    """Make way for the table at ``path``, which is no Delta table yet. A creation killed
    part way leaves a ``_delta_log`` folder without a commit (empty, or holding only an
    empty ``_staged_commits`` and temporary files), in which Delta neither opens nor
    creates a table: such a folder never held data, so it is removed once it is older than
    ``CREATION_SECONDS`` (younger, it is another query's or process's creation at work,
    which is waited for). Anything else in a folder without a commit is someone's data, and
    is refused, with nothing deleted."""
    files = HadoopFiles(spark, path)
    delta_log = posixpath.join(path, "_delta_log")
    if _has_commit(files, path):
        # A table, whatever Delta answered from the log it had cached (it can answer so
        # for a table moved away while a query read it, and moved back).
        return
    others = sorted(name for name in files.names(path) if name != "_delta_log")
    if others:
        raise UsageError(
            f"{path} holds files ({', '.join(others[:3])}{', ...' if len(others) > 3 else ''})"
            f" but no Delta table, so abstream cannot create its {spec.name} table there: "
            "move them away (nothing was deleted), or point data_dir elsewhere")
    while files.exists(delta_log):
        entries = files.names(delta_log)
        if _committed(entries):
            return  # created meanwhile (Delta's answer above may be one it had cached)
        if files.names(posixpath.join(delta_log, _STAGED)):
            raise UsageError(f"the {spec.name} table at {path} has commits staged but none "
                             "published, which abstream does not write: restore the table "
                             "from a backup, or move it away to start it anew")
        if time.time() * 1000 - files.last_change_ms(delta_log) >= CREATION_SECONDS * 1000:
            _remove_empty_log(files, spec, path, entries)
            return
        time.sleep(0.2)


def _committed(entries: list[str]) -> bool:
    """Whether a log's entries hold a commit."""
    return any(_COMMIT.match(name) for name in entries)


def _has_commit(files: HadoopFiles, path: str) -> bool:
    """Whether the table at ``path`` has a log holding a commit, on disk."""
    return _committed(files.names(posixpath.join(path, "_delta_log")))


def _remove_empty_log(files: HadoopFiles, spec: TableSpec, path: str,
                      entries: list[str]) -> None:
    delta_log = posixpath.join(path, "_delta_log")
    try:
        for name in entries:
            files.delete(posixpath.join(delta_log, name), recursive=False)
        files.delete(delta_log, recursive=False)
    except Py4JError:
        # A commit arrived meanwhile (the folder is no longer empty): the table is there.
        if _has_commit(files, path):
            return
        raise
    log.warning("the %s table at %s was left half-created (its log holds no commit, a crash "
                "during its creation): creating it again", spec.name, path)


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


def _partitioning(spark: SparkSession, path: str) -> tuple[str, ...]:
    return tuple(DeltaTable.forPath(spark, path).detail().first()["partitionColumns"])


def _check_partitioning(spark: SparkSession, spec: TableSpec, path: str) -> None:
    """Partition by its day a table an earlier version partitioned without it (gold, by
    layer only); refuse one partitioned otherwise than this version writes it: Delta would
    reject every append with a page of Java."""
    found = _partitioning(spark, path)
    for _ in range(REPARTITION_ATTEMPTS):
        if spec.day is None or found != tuple(c for c in spec.partition_by if c != spec.day[0]):
            break
        _partition_by_day(spark, spec, spec.day, path, found)
        found = _partitioning(spark, path)
    if found != spec.partition_by:
        raise AbstreamError(
            f"the {spec.name} table at {path} is partitioned by {', '.join(found) or 'nothing'}, "
            f"this version of abstream partitions it by {', '.join(spec.partition_by)}: "
            "move it away to start it anew")


def _partition_by_day(spark: SparkSession, spec: TableSpec, day: tuple[str, str], path: str,
                      found: tuple[str, ...]) -> None:
    """Rewrite the table at ``path``, partitioned by ``found``, by ``spec``'s partitioning
    with its day column, once, in one commit: its readers see the same rows, with the new
    column. Another process doing the same at that moment wins or loses the race; either
    way the table ends partitioned by its ``day`` (column, and the timestamp it is the
    date of)."""
    column, source = day
    log.warning("the %s table at %s is partitioned by %s; this version partitions it by %s: "
                "rewriting it once", spec.name, path, ", ".join(found),
                ", ".join(spec.partition_by))
    began = time.monotonic()
    rows = spark.read.format("delta").load(path).withColumn(column, F.to_date(source))
    try:
        rows.write.format("delta").mode("overwrite").option("overwriteSchema", "true") \
            .partitionBy(*spec.partition_by).save(path)
    except CONFLICTS as exc:
        log.info("the %s table at %s changed while it was rewritten (%s): checking its "
                 "partitioning again", spec.name, path, first_line(exc))
        return
    log.info("the %s table at %s is partitioned by %s (%.1f s)", spec.name, path,
             ", ".join(spec.partition_by), time.monotonic() - began)


def events_table(events: EventsSettings) -> TableSpec:
    """Bronze as the input mapping ``events`` has it: a column per property."""
    return replace(EVENTS_TABLE, schema=bronze_schema(events))


class _TypeChanged(Exception):
    def __init__(self, name: str, found: DataType, wanted: DataType) -> None:
        super().__init__(name)
        self.name, self.found, self.wanted = name, found, wanted


def _new_fields(found: DataType, wanted: DataType, prefix: str = "") -> list[str]:
    """The columns and struct fields ``wanted`` has and ``found`` lacks, as ``ADD COLUMNS``
    names them (``experiments.element.exposed_parts map<string,double>``); raises
    ``_TypeChanged`` where a type changed."""
    if found.simpleString() == wanted.simpleString():
        return []
    if isinstance(found, ArrayType) and isinstance(wanted, ArrayType):
        return _new_fields(found.elementType, wanted.elementType, f"{prefix}element.")
    if not (isinstance(found, StructType) and isinstance(wanted, StructType)):
        raise _TypeChanged(prefix.rstrip("."), found, wanted)
    have = {f.name: f.dataType for f in found.fields}
    added = []
    for field in wanted.fields:
        name = f"{prefix}`{field.name}`"
        if field.name in have:
            added += _new_fields(have[field.name], field.dataType, f"{name}.")
        else:
            added.append(f"{name} {field.dataType.simpleString()}")
    return added


def _add_new_columns(spark: SparkSession, spec: TableSpec, path: str) -> None:
    """Give the table at ``path`` the columns (and fields of its structs) of ``spec`` it
    lacks: a property added to the input mapping, a column a newer version writes; the rows
    written before read them as NULL. Refuse a column whose type changed, which Delta
    would refuse at every append. Columns ``spec`` no longer has stay, NULL from now on."""
    try:
        added = _new_fields(spark.read.format("delta").load(path).schema, spec.schema)
    except _TypeChanged as changed:
        raise AbstreamError(
            f"the {spec.name} table at {path} holds {changed.name.replace('`', '')} as "
            f"{changed.found.simpleString()}, this version and configuration make it "
            f"{changed.wanted.simpleString()}: keep its type, or give the property another "
            "name") from None
    if not added:
        return
    spark.sql(f"ALTER TABLE delta.`{path}` ADD COLUMNS ({', '.join(added)})")
    log.info("the %s table at %s has new columns: %s (the rows written before read them as "
             "NULL)", spec.name, path,
             ", ".join(column.split(" ")[0].replace("`", "") for column in added))


def read_table(spark: SparkSession, spec: TableSpec, layout: Layout) -> DataFrame:
    """The current snapshot of a table (created empty if it is not there yet)."""
    return spark.read.format("delta").load(ensure_table(spark, spec, layout))
