"""archive: Kafka ``kafka.valid_topic`` + ``kafka.rejected_topic`` -> bronze ``events`` +
quarantine ``rejected``, de-duplicated as ``ingest`` does (the validation stage upstream
delivers at least once)."""

from __future__ import annotations

from pyspark.sql.streaming import DataStreamWriter

from abstream.components.base import Component, Context, stream_writer
from abstream.components.ingest import bronze_write
from abstream.io.sources import kafka_stream
from abstream.kafka.topics import ensure_topics
from abstream.stages import kafka_records

NAME = "archive"


def build(ctx: Context) -> DataStreamWriter:
    kafka = ctx.config.kafka
    topics = [kafka.valid_topic, kafka.rejected_topic]
    ensure_topics(kafka, topics, kafka.partitions)
    records = kafka_stream(ctx.spark, kafka, topics,
                           ctx.config.archive.max_offsets_per_trigger)
    parsed = kafka_records.parsed_beacons(records, kafka.valid_topic)
    return stream_writer(ctx, NAME, parsed, bronze_write(ctx, NAME))


COMPONENT = Component(
    name=NAME,
    reads=("kafka.valid_topic", "kafka.rejected_topic"),
    writes=("events", "rejected"),
    build=build,
    trigger=lambda config: config.archive.trigger,
)
