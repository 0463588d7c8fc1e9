"""What every component is: a streaming query with its own checkpoint and idempotent sink."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta

from pyspark.sql import DataFrame
from pyspark.sql.streaming import DataStreamWriter

from abstream.config import Config
from abstream.durations import spark_interval
from abstream.io.checkpoints import prepare_checkpoint
from abstream.io.deployment import Deployment
from abstream.io.sinks import writer_id
from abstream.layout import topic
from abstream.speed.progress import RunStats
from abstream.topology import Node, is_topic

#: Writes one micro-batch (batch, batch_id, writer_id) and returns row counts per output
#: and the facts it observed (``observed.FACTS``).
BatchWrite = Callable[[DataFrame, int, str], Mapping[str, float]]


class Releases:
    """What a component's query keeps between its micro-batches (blocks on local disk), let
    go of when the query ends: the runner releases a component's after each of its queries,
    and a restarted query keeps its own."""

    def __init__(self) -> None:
        self._releases: defaultdict[str, list[Callable[[], None]]] = defaultdict(list)

    def add(self, component: str, release: Callable[[], None]) -> None:
        """Call ``release`` when ``component``'s query ends."""
        self._releases[component].append(release)

    def release(self, component: str) -> None:
        """Let go of what ``component``'s ended query kept."""
        for release in self._releases.pop(component, []):
            release()


@dataclass(frozen=True)
class Context(Deployment):
    """A deployment running components: with the totals their progress adds to, and what
    their queries keep until they end."""

    stats: RunStats
    releases: Releases = field(default_factory=Releases)


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
    """A component of ``topology`` (what it reads and writes), how to build its query, and
    its trigger."""

    node: Node
    build: Callable[[Context], DataStreamWriter]
    trigger: Callable[[Config], timedelta]
    schedule: Schedule | None = None

    @property
    def name(self) -> str:
        return self.node.name

    def start(self, ctx: Context, once: bool) -> DataStreamWriter:
        prepare_checkpoint(ctx.spark, self.name, ctx.layout.checkpoint(self.name),
                           [ctx.layout.table(name) for name in self.node.writes
                            if not is_topic(name)])
        writer = self.build(ctx)
        if self.schedule is not None:
            return self.schedule(writer, ctx, once)
        return every_trigger(writer, self.trigger(ctx.config), once)

    def describe(self, config: Config) -> str:
        def label(names: tuple[str, ...]) -> str:
            return ", ".join(topic(name, config.kafka) if is_topic(name) else name
                             for name in names)
        return f"{label(self.node.reads)} -> {label(self.node.writes)}"


def stream_writer(ctx: Context, name: str, stream: DataFrame, write: BatchWrite,
                  output_mode: str = "append") -> DataStreamWriter:
    """``stream`` written batch by batch with ``write``, checkpointed under the data dir."""
    def for_each_batch(batch: DataFrame, batch_id: int) -> None:
        with ctx.stats.micro_batch(name):
            counts = write(batch, batch_id, writer_id(batch.sparkSession, name))
        ctx.stats.wrote(name, batch_id, **counts)

    return (
        stream.writeStream.queryName(name)
        .option("checkpointLocation", ctx.layout.checkpoint(name))
        .outputMode(output_mode)
        .foreachBatch(for_each_batch)
    )
