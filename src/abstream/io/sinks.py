"""Idempotent writes into Delta tables from ``foreachBatch``.

Every write names its writer (the streaming query) and micro-batch in the same commit as the
data, so when Spark replays a micro-batch after a failure, a write that already committed is
skipped: a replay changes nothing.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager

from delta import exceptions as delta_errors
from delta.tables import DeltaTable
from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F

from abstream.errors import first_line
from abstream.io.spark import session_conf

REPLACE_WHERE_CHECK = "spark.databricks.delta.replaceWhere.constraintCheck.enabled"
#: Delta's conflicts between transactions: its Python classes do not share a base class.
CONFLICTS = (delta_errors.DeltaConcurrentModificationException,
             delta_errors.ConcurrentWriteException, delta_errors.MetadataChangedException,
             delta_errors.ProtocolChangedException, delta_errors.ConcurrentAppendException,
             delta_errors.ConcurrentDeleteReadException,
             delta_errors.ConcurrentDeleteDeleteException,
             delta_errors.ConcurrentTransactionException)
#: How many times a replacement is tried when concurrent commits win the race.
REPLACE_ATTEMPTS = 3
#: How many of a table's latest commits are searched first for a writer's last batch.
HISTORY_LOOKBACK = 100

log = logging.getLogger(__name__)


def writer_id(spark: SparkSession, component: str) -> str:
    """The transaction app id of the running query's writes: tied to its checkpoint.

    Called inside ``foreachBatch``: the query id is kept in the checkpoint and survives
    restarts, while a new checkpoint (say, one deleted to reprocess) gets a new id, so its
    batch ids, which start again at 0, are not mistaken for batches already written.
    """
    query_id = spark.sparkContext.getLocalProperty("sql.streaming.queryId")
    if not query_id:
        raise RuntimeError("writer_id() is for foreachBatch functions of a streaming query")
    return f"abstream-{component}-{query_id}"


class AppendOnce:
    """Appends the micro-batches of one run of a streaming query to a Delta table, each
    once, however often Spark replays it.

    Every commit carries ``{"writer": ..., "batch": N}`` as its ``userMetadata``. Spark
    replays at most one micro-batch, the first a query runs after it (re)starts, so only
    that one is looked up: in the table's history, the writer's latest commit. Delta's own
    ``txnAppId``/``txnVersion`` would check every write against the table's snapshot state,
    a Spark job over the whole log that took 1-2 s a micro-batch on 2 cores and grows with
    the table. An instance lives for one run of its query.
    """

    def __init__(self, path: str, partition_by: Sequence[str] = ()) -> None:
        self.path, self.partition_by = path, tuple(partition_by)
        self.checked_writer: str | None = None

    def __call__(self, batch: DataFrame, writer_id: str, batch_id: int) -> bool:
        """Append ``batch`` unless this micro-batch already is in the table; whether it
        wrote."""
        if self.checked_writer != writer_id:
            last = last_batch_written(batch.sparkSession, self.path, writer_id)
            self.checked_writer = writer_id
            if last is not None and last >= batch_id:
                log.info("%s: batch %d of %s is in the table already; not written again",
                         self.path, batch_id, writer_id)
                return False
        (
            batch.write.format("delta")
            .mode("append")
            .option("userMetadata", json.dumps({"writer": writer_id, "batch": batch_id}))
            .partitionBy(*self.partition_by)
            .save(self.path)
        )
        return True


def last_batch_written(spark: SparkSession, path: str, writer_id: str) -> int | None:
    """The latest micro-batch ``writer_id`` committed to the table, None if none."""
    found = _newest_marker(spark, path, lambda writer: writer == writer_id)
    return None if found is None else found[1]


def last_writer(spark: SparkSession, path: str, prefix: str) -> str | None:
    """The writer of the newest commit to the table by a writer named ``prefix...``."""
    found = _newest_marker(spark, path, lambda writer: writer.startswith(prefix))
    return None if found is None else found[0]


def _newest_marker(spark: SparkSession, path: str,
                   wanted: Callable[[str], bool]) -> tuple[str, int] | None:
    """(writer, batch) of the newest commit whose writer is ``wanted``, None if none."""
    if not DeltaTable.isDeltaTable(spark, path):
        return None
    table = DeltaTable.forPath(spark, path)
    history = table.history(HISTORY_LOOKBACK).select("userMetadata").collect()
    if len(history) == HISTORY_LOOKBACK:
        history = table.history().select("userMetadata").collect()
    for row in history:
        marker = _batch_marker(row["userMetadata"])
        if marker is not None and wanted(marker[0]):
            return marker
    return None


def _batch_marker(user_metadata: str | None) -> tuple[str, int] | None:
    """(writer, batch) from a commit's ``userMetadata`` written by AppendOnce."""
    if not user_metadata or not user_metadata.startswith("{"):
        return None
    try:
        value = json.loads(user_metadata)
    except ValueError:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("batch"), int):
        return None
    return str(value.get("writer")), value["batch"]


def replace_where(rows: DataFrame, path: str, condition: str,
                  partition_by: Sequence[str] = ()) -> int:
    """Atomically replace the table's rows matching ``condition`` with ``rows`` (which must
    all match it): a re-run of the same replacement leaves the same table. Returns the
    number of rows written.

    A replacement that loses a race with a commit that removed the files it replaces (a
    compaction by ``abstream maintain``) is tried again, up to ``REPLACE_ATTEMPTS`` times."""
    for attempt in range(1, REPLACE_ATTEMPTS):
        try:
            return _replace_once(rows, path, condition, partition_by)
        except CONFLICTS as exc:
            log.warning("replacing %s in %s lost a race with another commit (%s), attempt %d "
                        "of %d", condition, path, first_line(exc), attempt, REPLACE_ATTEMPTS)
    return _replace_once(rows, path, condition, partition_by)


def _replace_once(rows: DataFrame, path: str, condition: str,
                  partition_by: Sequence[str]) -> int:
    counted = Observation()
    (
        rows.observe(counted, F.count(F.lit(1)).alias("rows"))
        .write.format("delta")
        .mode("overwrite")
        .option("replaceWhere", condition)
        .partitionBy(*partition_by)
        .save(path)
    )
    return int(counted.get["rows"])


def rows_known_to_match(spark: SparkSession) -> AbstractContextManager[None]:
    """Skip Delta's check that replacement rows match their ``replaceWhere`` condition, for
    rows selected by that very condition: the check would compute them a second time."""
    return session_conf(spark, {REPLACE_WHERE_CHECK: "false"})


def _sql_string(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
