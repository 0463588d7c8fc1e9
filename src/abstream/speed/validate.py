"""validate: Kafka ``kafka.topic`` -> ``kafka.valid_topic`` + ``kafka.rejected_topic``.

Stateless (parse and check each record, nothing remembered), so it can run in any of the
three modes of ``validate.mode``: micro-batches, micro-batches with asynchronous progress
tracking, or Spark's real-time mode. Every mode delivers at least once: after a failure
the records since the last written offsets are validated and written again, and the
archive stage drops the repeats.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from pyspark.sql.streaming import DataStreamWriter

from abstream.errors import UsageError
from abstream.io.kafka.topics import TopicReader, ensure_topics
from abstream.io.sources import kafka_stream
from abstream.speed.component import Component, Context, every_trigger
from abstream.stages import beacons, kafka_records
from abstream.topology import VALIDATE

log = logging.getLogger(__name__)


def build(ctx: Context) -> DataStreamWriter:
    kafka, settings = ctx.config.kafka, ctx.config.validate_
    ensure_topics(kafka, [kafka.topic, kafka.valid_topic, kafka.rejected_topic],
                  kafka.partitions)
    limit = None if settings.mode == "realtime" else settings.max_offsets_per_trigger
    records = kafka_stream(ctx.spark, kafka, [kafka.topic], limit)
    parsed = beacons.parse_beacons(kafka_records.beacon_lines(records), ctx.config.events,
                                    ctx.config.ingest.max_record_bytes,
                                    ctx.config.ingest.future_tolerance)
    out = kafka_records.topic_records(parsed, kafka.valid_topic, kafka.rejected_topic)
    return (
        out.writeStream.queryName(VALIDATE.name)
        .format("kafka")
        .options(**kafka.spark_kafka_options())
        .option("checkpointLocation", ctx.layout.checkpoint(VALIDATE.name))
    )


def schedule(writer: DataStreamWriter, ctx: Context, once: bool) -> DataStreamWriter:
    settings = ctx.config.validate_
    if once:
        if settings.mode != "microbatch":
            log.info("validate: all available input as micro-batches (mode %s is for "
                     "continuous runs)", settings.mode)
        return every_trigger(writer, settings.trigger, once=True)
    if settings.mode == "async":
        interval_ms = int(settings.async_checkpoint_interval.total_seconds() * 1000)
        writer = writer.option("asyncProgressTrackingEnabled", "true") \
            .option("asyncProgressTrackingCheckpointIntervalMs", str(interval_ms))
    if settings.mode == "realtime":
        _require_task_slots(ctx)
        seconds = int(settings.realtime_checkpoint_interval.total_seconds())
        return writer.outputMode("update").trigger(realTime=f"{seconds} seconds")
    return every_trigger(writer, settings.trigger, once=False)


def _require_task_slots(ctx: Context) -> None:
    """Real-time mode runs one long task per input partition, all the time."""
    kafka = ctx.config.kafka
    reader = TopicReader(kafka)
    try:
        partitions = len(reader.partitions(kafka.topic) or [])
    finally:
        reader.close()
    slots = ctx.spark.sparkContext.defaultParallelism
    if partitions > slots:
        raise UsageError(
            f"validate.mode realtime needs a task slot per partition of {kafka.topic} "
            f"({partitions}) but Spark has {slots}; give Spark more cores or run validate "
            "in an application of its own")


COMPONENT = Component(
    node=VALIDATE,
    build=build,
    # Real-time batches follow each other without a pause, like a 0 trigger's.
    trigger=lambda config: timedelta(0) if config.validate_.mode == "realtime"
    else config.validate_.trigger,
    schedule=schedule,
)
