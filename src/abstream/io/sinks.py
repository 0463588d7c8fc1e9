"""Idempotent writes into Delta tables from ``foreachBatch``.

Every write carries a transaction id (``txnAppId``, ``txnVersion`` = the micro-batch id).
Delta records it in the same commit as the data, so when Spark replays a micro-batch after
a failure, a write that already committed is skipped: a replay changes nothing.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager

from delta.tables import DeltaTable
from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F

TXN_APP_ID = "spark.databricks.delta.write.txnAppId"
TXN_VERSION = "spark.databricks.delta.write.txnVersion"
REPLACE_WHERE_CHECK = "spark.databricks.delta.replaceWhere.constraintCheck.enabled"


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


def append(batch: DataFrame, path: str, writer_id: str, batch_id: int,
           partition_by: Sequence[str] = ()) -> None:
    """Append ``batch`` once, however often this micro-batch is replayed."""
    (
        batch.write.format("delta")
        .mode("append")
        .option("txnAppId", writer_id)
        .option("txnVersion", batch_id)
        .partitionBy(*partition_by)
        .save(path)
    )


@contextmanager
def _session_conf(spark: SparkSession, settings: Mapping[str, str]) -> Iterator[None]:
    """Spark session settings for the duration of a block, then back as they were."""
    previous = {key: spark.conf.get(key, None) for key in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in previous.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


def upsert(batch: DataFrame, path: str, keys: Sequence[str], writer_id: str,
           batch_id: int, *, partition: Mapping[str, str] | None = None) -> None:
    """MERGE ``batch`` into the table on ``keys``: replace matched rows, insert the others.

    ``partition`` names the one partition all of ``batch`` belongs to: the MERGE then reads
    only that partition, and writers of other partitions never conflict with it.
    """
    spark = batch.sparkSession
    condition = " AND ".join(
        [f"t.`{key}` = {_sql_string(value)}" for key, value in (partition or {}).items()]
        + [f"t.`{key}` = s.`{key}`" for key in keys])
    with _session_conf(spark, {TXN_APP_ID: writer_id, TXN_VERSION: str(batch_id)}):
        (
            DeltaTable.forPath(spark, path).alias("t")
            .merge(batch.alias("s"), condition)
            .whenMatchedUpdateAll()
            .whenNotMatchedInsertAll()
            .execute()
        )


def replace_where(rows: DataFrame, path: str, condition: str,
                  partition_by: Sequence[str] = ()) -> int:
    """Atomically replace the table's rows matching ``condition`` with ``rows`` (which must
    all match it): a re-run of the same replacement leaves the same table. Returns the
    number of rows written."""
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
    return _session_conf(spark, {REPLACE_WHERE_CHECK: "false"})


def _sql_string(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
