"""What every component is: a streaming query with its own checkpoint and idempotent sink."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import DataStreamWriter

from abstream.config import Config
from abstream.io.sinks import writer_id
from abstream.layout import Layout
from abstream.progress import RunStats

#: Writes one micro-batch (batch, batch_id, writer_id) and returns row counts per output.
BatchWrite = Callable[[DataFrame, int, str], Mapping[str, int]]


@dataclass(frozen=True)
class Context:
    spark: SparkSession
    config: Config
    layout: Layout
    stats: RunStats


@dataclass(frozen=True)
class Component:
    """A named streaming query: what it reads and writes, how to build it, its trigger."""

    name: str
    reads: tuple[str, ...]
    writes: tuple[str, ...]
    build: Callable[[Context], DataStreamWriter]
    trigger: Callable[[Config], timedelta]


def stream_writer(ctx: Context, name: str, stream: DataFrame, write: BatchWrite,
                  output_mode: str = "append") -> DataStreamWriter:
    """``stream`` written batch by batch with ``write``, checkpointed under the data dir."""
    def for_each_batch(batch: DataFrame, batch_id: int) -> None:
        counts = write(batch, batch_id, writer_id(batch.sparkSession, name))
        ctx.stats.wrote(name, batch_id, **counts)

    return (
        stream.writeStream.queryName(name)
        .option("checkpointLocation", ctx.layout.checkpoint(name))
        .outputMode(output_mode)
        .foreachBatch(for_each_batch)
    )
