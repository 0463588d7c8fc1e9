"""archive: Kafka ``kafka.valid_topic`` + ``kafka.rejected_topic`` -> bronze ``events`` +
quarantine ``rejected``, de-duplicated as ``ingest`` does (the validation stage upstream
delivers at least once)."""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql.streaming import DataStreamWriter

from abstream.io.kafka.topics import ensure_topics
from abstream.io.sources import kafka_stream
from abstream.schemas import valid_event_schema
from abstream.speed.component import Component, Context, stream_writer
from abstream.speed.ingest import bronze_write
from abstream.stages import kafka_records
from abstream.topology import ARCHIVE

NAME = ARCHIVE.name


def build(ctx: Context) -> DataStreamWriter:
    kafka = ctx.config.kafka
    topics = [kafka.valid_topic, kafka.rejected_topic]
    ensure_topics(kafka, topics, kafka.partitions)
    records = kafka_stream(ctx.spark, kafka, topics,
                           ctx.config.archive.max_offsets_per_trigger)
    valid_schema = valid_event_schema(ctx.config.events)

    def parse(batch: DataFrame, ingested_at: Column) -> DataFrame:
        return kafka_records.parsed_beacons(batch, kafka.valid_topic, valid_schema, ingested_at)

    return stream_writer(ctx, NAME, records, bronze_write(ctx, NAME, parse))


COMPONENT = Component(
    node=ARCHIVE,
    build=build,
    trigger=lambda config: config.archive.trigger,
)
