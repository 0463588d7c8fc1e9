"""sessionize: bronze ``events`` -> silver ``sessions`` (closed visits) + gold
``experiment_metrics`` (fresh increments).

Every micro-batch is a small batch job over the new bronze events and the events of the
visits still open, which the component carries from one micro-batch to the next itself
(``io.state``): Spark's batch operators (one sort by session and time, aggregates, a join)
instead of its streaming state stores. Each micro-batch

1. drops the new events behind its input watermark (the latest event time seen before the
   batch, less ``sessionize.lateness``) and counts them;
2. sessionizes the open visits' events with the new ones, so what every event counts for
   follows from its whole visit as known now;
3. appends to gold what changed: each event's targets it had not been counted for yet (an
   event is counted as soon as it arrives, and again for a population it joins later, when
   its visit meets an experiment or an exposure), and the visit numbers of the visits that
   closed (their last event + ``gap`` behind the next watermark), which also go to silver;
4. carries the events of the still-open visits, with what each was counted for, to the
   next micro-batch.

The micro-batch's sessionized events are written once, as the state snapshot of the
micro-batch (``io.state``), and step 3 reads them back from there: one sort per
micro-batch, and no cache holds its events (a backlog's micro-batch may be millions of
events). The next micro-batch reads the events of the snapshot whose visits were left open.

Gold's speed rows are increments: the serving view adds them up per window. Each operator
has its own watermark (``abstream.watermarks``): the visits held open hold back the output
watermark, so the windows after them never see a visit as late.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta

from pyspark.sql import Column, DataFrame, Observation
from pyspark.sql import functions as F
from pyspark.sql.streaming import DataStreamWriter

from abstream.components.base import Component, Context, stream_writer
from abstream.io import sinks
from abstream.io.sources import delta_stream
from abstream.io.state import StateSnapshots
from abstream.io.tables import EVENTS_TABLE, METRICS_TABLE, SESSIONS_TABLE, ensure_table
from abstream.progress import LATE, OUTPUT_WATERMARK, STATE_ROWS, WATERMARK
from abstream.schemas import METRIC_TARGET, SESSION_STATE
from abstream.stages import metrics, sessions
from abstream.watermarks import input_watermark, output_watermark, source_watermark

SPEED = "speed"
NAME = "sessionize"


def _micros(value: int | None) -> Column:
    return F.timestamp_micros(F.lit(value))


def build(ctx: Context) -> DataStreamWriter:
    settings = ctx.config.sessionize
    spark = ctx.spark
    gap, lateness = settings.gap, settings.lateness
    gap_micros = gap // timedelta(microseconds=1)
    windowing = metrics.Windowing.of(ctx.config.metrics)
    events_path = ensure_table(spark, EVENTS_TABLE, ctx.layout)
    append_visits = sinks.AppendOnce(ensure_table(spark, SESSIONS_TABLE, ctx.layout),
                                     SESSIONS_TABLE.partition_by)
    append_gold = sinks.AppendOnce(ensure_table(spark, METRICS_TABLE, ctx.layout),
                                   METRICS_TABLE.partition_by)
    state = StateSnapshots(spark, ctx.layout.checkpoint(NAME) + "/state", SESSION_STATE)
    stream = metrics.observe_freshness(
        delta_stream(spark, events_path, settings.max_files_per_trigger))
    no_targets = F.array().cast(f"array<{METRIC_TARGET.simpleString()}>")

    def open_at(closing_at: int | None) -> Column:
        """Whether an event's visit is still open when the watermark is ``closing_at``."""
        if closing_at is None:
            return F.lit(True)
        return F.unix_micros("visit_end") + gap_micros >= closing_at

    def write(batch: DataFrame, batch_id: int, writer_id: str) -> Mapping[str, int]:
        previous = state.before(batch_id)
        seen_before = previous.seen_until if previous is not None else None
        watermark = source_watermark(seen_before, lateness)
        late = F.lit(False) if watermark is None else F.col("event_ts") < _micros(watermark)
        new = batch.select(*sessions.SESSION_INPUT, late.alias("late"))
        held = state.read(previous).where(~F.col("late") & open_at(watermark)) \
            .select(*sessions.SESSION_INPUT, F.col("targets").alias("counted"))
        events = held.unionByName(
            new.where(~F.col("late")).drop("late").withColumn("counted", no_targets))
        # The late events are kept in the snapshot, marked, so that the micro-batch reads
        # bronze once: they are counted there and go no further.
        behind = new.where("late").select(
            *sessions.SESSION_INPUT, F.col("event_ts").alias("visit_start"),
            F.col("event_ts").alias("visit_end"), no_targets.alias("targets"),
            no_targets.alias("counted"), "late")
        path = state.write_rows(batch_id, sessions.sessionize(events, gap)
                                .withColumn("late", F.lit(False))
                                .select(*SESSION_STATE.fieldNames()).unionByName(behind))
        sessionized = state.read_rows(path)
        counts = sessionized.agg(F.count_if("late").alias("late"),
                                 F.unix_micros(F.max("event_ts")).alias("newest")).first()
        seen_until = max((t for t in (seen_before, counts["newest"]) if t is not None),
                         default=None)
        state.complete(batch_id, path, seen_until)
        # Everything below reads the snapshot just written: the micro-batch is sessionized
        # once, and no cache holds its events.
        sessionized = sessionized.where(~F.col("late"))
        closing_at = source_watermark(seen_until, lateness)
        still_open = open_at(closing_at)
        kept = sessionized.agg(
            F.count_if(~still_open).alias("closing"), F.count_if(still_open).alias("rows"),
            F.unix_micros(F.min(F.when(still_open, F.col("event_ts")))).alias("earliest"),
        ).first()
        closed = sessions.assemble_visits(sessionized.where(~still_open))
        closed_visits = 0
        if kept["closing"]:
            written = Observation()
            appended = append_visits(sessions.with_lineage(closed, SPEED).observe(
                written, F.count(F.lit(1)).alias("visits")), writer_id, batch_id)
            closed_visits = int(written.get["visits"]) if appended else closed.count()
        fresh = sessionized.withColumn("targets", F.array_except("targets", "counted")) \
            .where(F.size("targets") > 0)
        append_gold(metrics.with_lineage(
            metrics.experiment_metrics(fresh, closed, windowing, ctx.config.metrics.hll_lg_k),
            SPEED), writer_id, batch_id)
        report = {"visits": closed_visits, LATE: counts["late"], STATE_ROWS: kept["rows"]}
        # Gold reads the events (not held) and the visits (held back to the earliest event
        # still open): its input watermark is the lower of the two.
        gold_watermark = input_watermark(
            closing_at, output_watermark(closing_at, kept["earliest"]))
        for key, micros in ((WATERMARK, closing_at), (OUTPUT_WATERMARK, gold_watermark)):
            if micros is not None:
                report[key] = micros // 1000
        return report

    return stream_writer(ctx, NAME, stream, write)


COMPONENT = Component(
    name=NAME,
    reads=("events",),
    writes=("sessions", "experiment_metrics"),
    build=build,
    trigger=lambda config: config.sessionize.trigger,
)
