"""The Kafka path's record mapping: input records -> validation output -> bronze columns,
equal to what the landing-file path makes of the same lines (no broker needed)."""

from datetime import UTC, datetime, timedelta

from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)
from pyspark.testing import assertDataFrameEqual

from abstream.schemas import EVENTS, valid_event_schema
from abstream.stages import beacons, kafka_records
from tests.helpers import BEACON, beacon, dumps

HEADER = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
RECORD = StructType([
    StructField("key", BinaryType()), StructField("value", BinaryType()),
    StructField("topic", StringType()), StructField("partition", IntegerType()),
    StructField("offset", LongType()), StructField("timestamp", TimestampType()),
    StructField("headers", ArrayType(HEADER)),
])
ARRIVED = datetime(2026, 11, 20, 12, 0, 0, 250_000, tzinfo=UTC)
LINES = [
    dumps(beacon("e1", "2026-11-20T10:00:00.123456Z", session="s1")),
    dumps(beacon("e2", "2026-11-20T10:01:00Z", session="s2", kind="order", revenue=12.5,
                 units=2)),
    "{not json",
    dumps(beacon("e3", "2026-11-20T10:02:00Z", kind="teleport")),
    dumps(beacon("e4", "2030-01-01T00:00:00Z")),
]
CONTENT = [f for f in EVENTS.fieldNames()
           if f not in ("source_file", "arrived_at", "ingested_at")]


def _input(spark):
    rows = [(None, line.encode(), "beacons", 0, offset, ARRIVED, [])
            for offset, line in enumerate(LINES)]
    return spark.createDataFrame(rows, RECORD)


def _validated(spark):
    parsed = beacons.parse_beacons(kafka_records.beacon_lines(_input(spark)), BEACON, 65_536,
                                    timedelta(days=1))
    return kafka_records.topic_records(parsed, "beacons.valid", "beacons.rejected")


def _read_back(out):
    """The sink rows as a consumer of the two topics reads them (offsets per topic)."""
    return out.select("key", "value", "topic", F.lit(0).alias("partition"),
                      F.monotonically_increasing_id().alias("offset"),
                      F.lit(ARRIVED).alias("timestamp"), "headers")


def _header(row, name):
    return next((h["value"].decode() for h in row["headers"] if h["key"] == name), None)


def test_valid_beacons_go_to_the_valid_topic_as_json_keyed_by_session(spark):
    out = {r["value"]: r for r in _validated(spark).collect()}
    valid = [r for r in out.values() if r["topic"] == "beacons.valid"]
    assert sorted(r["key"].decode() for r in valid) == ["s1", "s2"]
    first = next(r for r in valid if r["key"] == b"s1")
    assert b'"event_ts":"2026-11-20T10:00:00.123456Z"' in first["value"]
    assert _header(first, "source") == "kafka://beacons/0/0"
    assert _header(first, "source_ts") == str(int(ARRIVED.timestamp() * 1000))
    assert _header(first, "reason") is None


def test_refused_records_keep_their_bytes_and_carry_the_reason_in_a_header(spark):
    rejected = [r for r in _validated(spark).collect() if r["topic"] == "beacons.rejected"]
    reasons = {r["value"].decode(): _header(r, "reason") for r in rejected}
    assert reasons == {LINES[2]: "malformed_json", LINES[3]: "invalid_value:type",
                       LINES[4]: "future_timestamp"}
    assert {_header(r, "source") for r in rejected} == {
        "kafka://beacons/0/2", "kafka://beacons/0/3", "kafka://beacons/0/4"}


def test_archive_reads_back_exactly_what_the_file_path_puts_in_bronze(spark):
    archived = kafka_records.parsed_beacons(_read_back(_validated(spark)), "beacons.valid",
                                            valid_event_schema(BEACON), F.current_timestamp())
    from_files = beacons.parse_beacons(
        spark.createDataFrame([(line, "f", ARRIVED, ARRIVED) for line in LINES],
                              "value string, source_file string, arrived_at timestamp, "
                              "ingested_at timestamp"),
        BEACON, 65_536, timedelta(days=1))
    assertDataFrameEqual(beacons.valid_events(archived).select(*CONTENT),
                         beacons.valid_events(from_files).select(*CONTENT))
    bronze = beacons.valid_events(archived).collect()
    assert {r["source_file"] for r in bronze} == {"kafka://beacons/0/0", "kafka://beacons/0/1"}
    assert {r["arrived_at"] for r in bronze} == {ARRIVED.replace(tzinfo=None)}
    quarantine = beacons.rejected_records(archived)
    assertDataFrameEqual(quarantine.select("raw", "reason"),
                         beacons.rejected_records(from_files).select("raw", "reason"))
    assert {r["source_file"] for r in quarantine.collect()} == {
        "kafka://beacons/0/2", "kafka://beacons/0/3", "kafka://beacons/0/4"}


def test_foreign_records_on_the_valid_topic_are_quarantined_not_lost(spark):
    rows = [(None, b'{"hello": 1}', "beacons.valid", 0, 7, ARRIVED, [])]
    archived = kafka_records.parsed_beacons(spark.createDataFrame(rows, RECORD),
                                            "beacons.valid", valid_event_schema(BEACON),
                                            F.current_timestamp())
    row = beacons.rejected_records(archived).first()
    assert (row["raw"], row["reason"], row["source_file"]) == (
        '{"hello": 1}', "malformed_json", "kafka://beacons.valid/0/7")
