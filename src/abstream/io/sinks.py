"""Idempotent writes into Delta tables from ``foreachBatch``.

Every write carries a transaction id (``txnAppId``, ``txnVersion`` = the micro-batch id).
Delta records it in the same commit as the data, so when Spark replays a micro-batch after
a failure, a write that already committed is skipped: a replay changes nothing.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession

TXN_APP_ID = "spark.databricks.delta.write.txnAppId"
TXN_VERSION = "spark.databricks.delta.write.txnVersion"


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
def _transaction(spark: SparkSession, writer_id: str, batch_id: int) -> Iterator[None]:
    spark.conf.set(TXN_APP_ID, writer_id)
    spark.conf.set(TXN_VERSION, str(batch_id))
    try:
        yield
    finally:
        spark.conf.unset(TXN_APP_ID)
        spark.conf.unset(TXN_VERSION)


def upsert(batch: DataFrame, path: str, keys: Sequence[str], writer_id: str,
           batch_id: int) -> None:
    """MERGE ``batch`` into the table on ``keys``: replace matched rows, insert the others."""
    spark = batch.sparkSession
    condition = " AND ".join(f"t.`{key}` = s.`{key}`" for key in keys)
    with _transaction(spark, writer_id, batch_id):
        (
            DeltaTable.forPath(spark, path).alias("t")
            .merge(batch.alias("s"), condition)
            .whenMatchedUpdateAll()
            .whenNotMatchedInsertAll()
            .execute()
        )
