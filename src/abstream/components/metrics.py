"""metrics: bronze ``events`` + silver ``sessions`` -> gold ``experiment_metrics``.

One query over both sources, so one writer owns the gold rows (no concurrent MERGE
conflicts). Windows are emitted in update mode as they change and merged into gold; the
MERGE reads only gold's files that reach the batch's earliest window.
"""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming import DataStreamWriter

from abstream.components.base import Component, Context, stream_writer
from abstream.components.sessionize import SPEED
from abstream.durations import spark_interval
from abstream.io import sinks
from abstream.io.sources import delta_stream
from abstream.io.tables import EVENTS_TABLE, METRICS_TABLE, SESSIONS_TABLE, ensure_table
from abstream.schemas import METRIC_KEY
from abstream.stages import metrics
from abstream.times import from_micros


def build(ctx: Context) -> DataStreamWriter:
    settings = ctx.config.metrics
    lateness = spark_interval(settings.lateness)
    events_path = ensure_table(ctx.spark, EVENTS_TABLE, ctx.layout)
    sessions_path = ensure_table(ctx.spark, SESSIONS_TABLE, ctx.layout)
    gold_path = ensure_table(ctx.spark, METRICS_TABLE, ctx.layout)
    events = metrics.observe_freshness(
        delta_stream(ctx.spark, events_path, settings.max_files_per_trigger)
        .withWatermark("event_ts", lateness))
    # The batch layer replaces its own rows in ``sessions``: those commits are skipped.
    visits = delta_stream(ctx.spark, sessions_path, settings.max_files_per_trigger,
                          skip_change_commits=True) \
        .where(F.col("layer") == SPEED).withWatermark("visit_start", lateness)
    windowing = metrics.Windowing.of(settings)
    gold = metrics.with_lineage(
        metrics.experiment_metrics(events, visits, windowing, settings.hll_lg_k), SPEED)

    def write(batch: DataFrame, batch_id: int, writer_id: str) -> Mapping[str, int]:
        batch.persist()
        try:
            stats = batch.agg(F.count(F.lit(1)).alias("rows"),
                              F.min(F.unix_micros("window_start")).alias("first")).first()
            if stats["rows"]:
                sinks.upsert(batch, gold_path, METRIC_KEY, writer_id, batch_id,
                             partition={"layer": SPEED},
                             since={"window_start": from_micros(stats["first"])})
            return {"metric rows": stats["rows"]}
        finally:
            batch.unpersist()

    return stream_writer(ctx, "metrics", gold, write, output_mode="update")


COMPONENT = Component(
    name="metrics",
    reads=("events", "sessions"),
    writes=("experiment_metrics",),
    build=build,
    trigger=lambda config: config.metrics.trigger,
)
