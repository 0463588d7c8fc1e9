"""sessionize: bronze ``events`` -> silver ``sessions`` (closed visits)."""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql import DataFrame
from pyspark.sql.streaming import DataStreamWriter

from abstream.components.base import Component, Context, stream_writer
from abstream.durations import spark_interval
from abstream.io import sinks
from abstream.io.sources import delta_stream
from abstream.io.tables import EVENTS_TABLE, SESSIONS_TABLE, ensure_table
from abstream.stages import sessions

SPEED = "speed"


def build(ctx: Context) -> DataStreamWriter:
    settings = ctx.config.sessionize
    events_path = ensure_table(ctx.spark, EVENTS_TABLE, ctx.layout)
    append_visits = sinks.AppendOnce(ensure_table(ctx.spark, SESSIONS_TABLE, ctx.layout),
                                     SESSIONS_TABLE.partition_by)
    events = delta_stream(ctx.spark, events_path, settings.max_files_per_trigger) \
        .withWatermark("event_ts", spark_interval(settings.lateness))
    visits = sessions.with_lineage(sessions.assemble_visits(events, settings.gap), SPEED)

    def write(batch: DataFrame, batch_id: int, writer_id: str) -> Mapping[str, int]:
        batch.persist()
        try:
            visits = batch.count()
            if visits:
                append_visits(batch, writer_id, batch_id)
            return {"visits": visits}
        finally:
            batch.unpersist()

    return stream_writer(ctx, "sessionize", visits, write)


COMPONENT = Component(
    name="sessionize",
    reads=("events",),
    writes=("sessions",),
    build=build,
    trigger=lambda config: config.sessionize.trigger,
)
