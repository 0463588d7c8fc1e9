"""ingest: landing JSON lines -> bronze ``events`` + quarantine ``rejected``."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial

from pyspark.sql import Column, DataFrame, Observation
from pyspark.sql import functions as F
from pyspark.sql.streaming import DataStreamWriter

from abstream.io import sinks
from abstream.io.sources import landing_lines
from abstream.io.tables import REJECTED_TABLE, ensure_table, events_table
from abstream.observed import DUPLICATES
from abstream.speed.component import BatchWrite, Component, Context, stream_writer
from abstream.speed.recent_ids import RecentIds
from abstream.stages import beacons, constants, dedupe
from abstream.times import now_micros
from abstream.topology import EVENTS, INGEST, REJECTED

NAME = INGEST.name


#: A micro-batch's input records and the time it took them in (``ingested_at``) ->
#: ``beacons.parse_beacons`` output.
Parse = Callable[[DataFrame, Column], DataFrame]


def bronze_write(ctx: Context, component: str, parse: Parse) -> BatchWrite:
    """Writes the records ``parse`` checks: valid events to bronze, each event_id once
    within ``ingest.dedupe_window`` of ingestion, refused ones to quarantine; the time of
    each step goes to ``component``'s steps.

    A micro-batch takes its records in at its start, a constant of the batch
    (``stages.constants``): each micro-batch parses with the code generated for the first."""
    timed = partial(ctx.stats.timed, component)
    bronze = events_table(ctx.config.events)
    events_path = ensure_table(ctx.spark, bronze, ctx.layout)
    append_events = timed("bronze append", sinks.AppendOnce(events_path, bronze.partition_by))
    append_rejected = timed("quarantine append", sinks.AppendOnce(
        ensure_table(ctx.spark, REJECTED_TABLE, ctx.layout), REJECTED_TABLE.partition_by))
    drop_duplicate_events = timed("find repeats", dedupe.drop_duplicate_events)
    recent = RecentIds(events_path, ctx.config.ingest.dedupe_window)
    ctx.releases.add(component, recent.forget)
    seen = timed("recent ids", recent.seen)
    keep_taken = timed("keep new ids", recent.taken)

    def write(records: DataFrame, batch_id: int, writer_id: str) -> Mapping[str, int]:
        ingested_at = now_micros()
        batch = parse(records, constants.instant(ingested_at)).persist()
        try:
            with ctx.stats.step(component, "parse and check"):
                counts = batch.agg(
                    F.count_if(F.col("reason").isNull()).alias("valid"),
                    F.count_if(F.col("reason").isNotNull()).alias("rejected")).first()
            events = duplicates = 0
            if counts["valid"]:
                written = Observation()
                deduplicated = drop_duplicate_events(beacons.valid_events(batch),
                                                     seen(batch.sparkSession, ingested_at))
                events = counts["valid"]
                # One file per event_date a micro-batch: sessionize reads bronze a number of
                # files at a time, and a micro-batch's events split over two of its
                # micro-batches would be late in the second (a backlog's micro-batch spans
                # hours of event time).
                if append_events(deduplicated.observe(written, F.count(F.lit(1)).alias("rows"))
                                 .coalesce(1), writer_id, batch_id):
                    keep_taken(deduplicated.select("event_id", "ingested_at"), ingested_at)
                    events = int(written.get["rows"])
                    duplicates = counts["valid"] - events
            if counts["rejected"]:
                append_rejected(beacons.rejected_records(batch), writer_id, batch_id)
        finally:
            batch.unpersist()
        return {EVENTS: events, REJECTED: counts["rejected"], DUPLICATES: duplicates}

    return write


def build(ctx: Context) -> DataStreamWriter:
    settings = ctx.config.ingest
    lines = landing_lines(ctx.spark, ctx.layout.landing, settings.max_files_per_trigger)

    def parse(batch: DataFrame, ingested_at: Column) -> DataFrame:
        return beacons.parse_beacons(batch.withColumn("ingested_at", ingested_at),
                                     ctx.config.events, settings.max_record_bytes,
                                     settings.future_tolerance)

    return stream_writer(ctx, NAME, lines, bronze_write(ctx, NAME, parse))


COMPONENT = Component(
    node=INGEST,
    build=build,
    trigger=lambda config: config.ingest.trigger,
)
