"""What every component is: a streaming query with its own checkpoint and idempotent sink."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import DataStreamWriter

from abstream.config import Config
from abstream.durations import spark_interval
from abstream.io.checkpoints import prepare_checkpoint
from abstream.io.sinks import writer_id
from abstream.layout import Layout
from abstream.progress import RunStats

#: Writes one micro-batch (batch, batch_id, writer_id) and returns row counts per output.
BatchWrite = Callable[[DataFrame, int, str], Mapping[str, int]]

#: The prefix of the inputs and outputs that are Kafka topics named in ``kafka.*``.
TOPIC = "kafka."


@dataclass(frozen=True)
class Context:
    spark: SparkSession
    config: Config
    layout: Layout
    stats: RunStats


#: Sets the trigger of a component's query (and the options that go with it):
#: (writer, context, once) -> writer.
Schedule = Callable[[DataStreamWriter, Context, bool], DataStreamWriter]


def every_trigger(writer: DataStreamWriter, interval: timedelta,
                  once: bool) -> DataStreamWriter:
    """All available input then stop (``once``), else a micro-batch every ``interval``."""
    if once:
        return writer.trigger(availableNow=True)
    return writer.trigger(processingTime=spark_interval(interval))


@dataclass(frozen=True)
class Component:
    """A named streaming query: what it reads and writes, how to build it, its trigger.

    Inputs and outputs are folders and tables of the data dir (``landing``, ``events``...)
    or Kafka topics named by a ``kafka.*`` setting (``kafka.topic``...).
    """

    name: str
    reads: tuple[str, ...]
    writes: tuple[str, ...]
    build: Callable[[Context], DataStreamWriter]
    trigger: Callable[[Config], timedelta]
    schedule: Schedule | None = None

    def start(self, ctx: Context, once: bool) -> DataStreamWriter:
        prepare_checkpoint(ctx.spark, self.name, ctx.layout.checkpoint(self.name),
                           [getattr(ctx.layout, name) for name in self.writes
                            if not name.startswith(TOPIC)])
        writer = self.build(ctx)
        if self.schedule is not None:
            return self.schedule(writer, ctx, once)
        return every_trigger(writer, self.trigger(ctx.config), once)

    def sources(self, config: Config, layout: Layout) -> list[str]:
        """Where the inputs are: paths, and ``kafka://TOPIC`` for topics."""
        return [f"kafka://{topic}" if (topic := _topic(name, config)) else
                str(getattr(layout, name)) for name in self.reads]

    def describe(self, config: Config) -> str:
        def label(names: tuple[str, ...]) -> str:
            return ", ".join(_topic(name, config) or name for name in names)
        return f"{label(self.reads)} -> {label(self.writes)}"


def _topic(name: str, config: Config) -> str | None:
    """The topic an input or output named ``kafka.<setting>`` is, None for other names."""
    return getattr(config.kafka, name.removeprefix(TOPIC)) if name.startswith(TOPIC) else None


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
