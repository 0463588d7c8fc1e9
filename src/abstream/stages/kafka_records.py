"""Beacons as Kafka records: from the input topic to the validation stage, from the
validation stage to its output topics, and from those back to bronze columns.

The validation stage writes each valid event as its normalised JSON (its bronze columns,
``schemas.valid_event_schema``)
keyed by session (so a visit's events stay in one partition, in order), and each refused
record unchanged, with its reason in the ``reason`` header. Both carry two more headers:
``source`` (``kafka://topic/partition/offset`` of the input record) and ``source_ts`` (its
timestamp, epoch milliseconds).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from abstream.config import LINEAGE_COLUMNS

#: Microseconds survive the trip through JSON.
JSON_OPTIONS = {"timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX"}
REASON_HEADER = "reason"
SOURCE_HEADER = "source"
SOURCE_TS_HEADER = "source_ts"


def _location() -> Column:
    return F.concat(F.lit("kafka://"), "topic", F.lit("/"), "partition", F.lit("/"), "offset")


def beacon_lines(records: DataFrame) -> DataFrame:
    """Input records as the columns ``validate.parse_beacons`` reads. The record's broker
    timestamp serves as arrival and ingestion time, so a replayed record is judged exactly
    as the first time (the future-timestamp check included)."""
    return records.select(
        F.col("value").cast("string").alias("value"),
        _location().alias("source_file"),
        F.col("timestamp").alias("arrived_at"),
        F.col("timestamp").alias("ingested_at"),
    )


def _header(key: str, value: Column) -> Column:
    return F.struct(F.lit(key).alias("key"), value.cast("binary").alias("value"))


def topic_records(parsed: DataFrame, valid_topic: str, rejected_topic: str) -> DataFrame:
    """``parse_beacons`` output as Kafka sink rows: topic, key, value, headers."""
    valid = F.col("reason").isNull()
    columns = [c for c in parsed.columns if c not in (*LINEAGE_COLUMNS, "raw", "reason")]
    event = F.to_json(F.struct(*columns), JSON_OPTIONS)
    lineage = [_header(SOURCE_HEADER, F.col("source_file")),
               _header(SOURCE_TS_HEADER, F.unix_millis("arrived_at").cast("string"))]
    return parsed.select(
        F.when(valid, F.lit(valid_topic)).otherwise(F.lit(rejected_topic)).alias("topic"),
        F.when(valid, F.col("session_id")).cast("binary").alias("key"),
        F.when(valid, event).otherwise(F.col("raw")).cast("binary").alias("value"),
        F.when(valid, F.array(*lineage))
        .otherwise(F.array(_header(REASON_HEADER, F.col("reason")), *lineage))
        .alias("headers"),
    )


def header(name: str) -> Column:
    """The first header called ``name`` of a Kafka record, as a string (NULL if absent)."""
    return F.get(F.filter("headers", lambda h: h["key"] == name), 0)["value"].cast("string")


def parsed_beacons(records: DataFrame, valid_topic: str, valid_schema: StructType,
                   ingested_at: Column) -> DataFrame:
    """Records of the validation stage's two topics as ``parse_beacons`` output: bronze
    columns, ``raw`` and ``reason``, taken in at ``ingested_at``; ``valid_schema`` is the
    valid topic's JSON (``schemas.valid_event_schema``). A record on the valid topic that
    is not a valid event's JSON (written by something else) is refused as
    ``malformed_json``."""
    event = F.from_json(F.col("value").cast("string"), valid_schema, JSON_OPTIONS)
    from_valid = F.col("topic") == valid_topic
    complete = F.col("e.event_id").isNotNull() & F.col("e.event_ts").isNotNull() \
        & F.col("e.session_id").isNotNull() & F.col("e.visitor_id").isNotNull() \
        & F.col("e.type").isNotNull()
    reason = F.when(from_valid, F.when(~complete, F.lit("malformed_json"))) \
        .otherwise(F.coalesce(header(REASON_HEADER), F.lit("unknown")))
    source_ts = header(SOURCE_TS_HEADER).try_cast("long")
    return records.select(event.alias("e"), "value", "headers", "timestamp", "topic",
                          "partition", "offset").select(
        *[F.coalesce("e.experiments", F.array()).alias(name) if name == "experiments"
          else F.col(f"e.{name}").alias(name) for name in valid_schema.fieldNames()],
        F.coalesce(header(SOURCE_HEADER), _location()).alias("source_file"),
        F.coalesce(F.timestamp_millis(source_ts), "timestamp").alias("arrived_at"),
        ingested_at.alias("ingested_at"),
        F.to_date("e.event_ts").alias("event_date"),
        F.col("value").cast("string").alias("raw"),
        reason.alias("reason"),
    )
