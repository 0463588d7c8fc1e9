"""ingest: landing JSON lines -> bronze ``events`` + quarantine ``rejected``."""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming import DataStreamWriter

from abstream.components.base import BatchWrite, Component, Context, stream_writer
from abstream.io import sinks
from abstream.io.sources import landing_lines
from abstream.io.tables import EVENTS_TABLE, REJECTED_TABLE, ensure_table
from abstream.stages import validate


def bronze_write(ctx: Context) -> BatchWrite:
    """Writes checked records: valid events to bronze, refused ones to quarantine."""
    append_events = sinks.AppendOnce(ensure_table(ctx.spark, EVENTS_TABLE, ctx.layout),
                                     EVENTS_TABLE.partition_by)
    append_rejected = sinks.AppendOnce(ensure_table(ctx.spark, REJECTED_TABLE, ctx.layout),
                                       REJECTED_TABLE.partition_by)

    def write(batch: DataFrame, batch_id: int, writer_id: str) -> Mapping[str, int]:
        batch.persist()
        try:
            counts = batch.agg(F.count_if(F.col("reason").isNull()).alias("events"),
                               F.count_if(F.col("reason").isNotNull()).alias("rejected")).first()
            if counts["events"]:
                append_events(validate.valid_events(batch), writer_id, batch_id)
            if counts["rejected"]:
                append_rejected(validate.rejected_records(batch), writer_id, batch_id)
        finally:
            batch.unpersist()
        return {"events": counts["events"], "rejected": counts["rejected"]}

    return write


def build(ctx: Context) -> DataStreamWriter:
    settings = ctx.config.ingest
    lines = landing_lines(ctx.spark, ctx.layout.landing, settings.max_files_per_trigger)
    parsed = validate.parse_beacons(lines, settings.max_record_bytes, settings.future_tolerance)
    deduped = validate.drop_duplicate_events(parsed, settings.dedupe_window)
    return stream_writer(ctx, "ingest", deduped, bronze_write(ctx))


COMPONENT = Component(
    name="ingest",
    reads=("landing",),
    writes=("events", "rejected"),
    build=build,
    trigger=lambda config: config.ingest.trigger,
)
