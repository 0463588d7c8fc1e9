"""Fuzzed input on both ways in: landing lines (ingest) and Kafka record values (validate).

Whatever a line holds (arbitrary bytes and unicode, JSON of any shape, deep nesting, huge
and non-finite numbers, duplicate keys, a byte-order mark, CRLF line ends, lines around
``max_record_bytes``), it comes out as exactly one row: a valid event, or a refused record
that keeps its raw text and a reason. A seeded slow test pushes 100,000 such lines through
the real ingest component: no micro-batch fails and input = bronze + rejected + duplicates.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from abstream.io.tables import EVENTS_TABLE, REJECTED_TABLE, read_table
from abstream.speed import COMPONENTS
from abstream.speed.runner import run_once
from abstream.stages import beacons, kafka_records
from tests.fuzz import BEACON_FIELDS, TS, fuzzed_records
from tests.helpers import BEACON, beacon, dumps, reconfigure

MAX_BYTES = 2_048
FUTURE = timedelta(minutes=5)
REASON = re.compile(r"^(oversized_record|empty_record|malformed_json|invalid_timestamp|"
                    r"future_timestamp|(invalid_type|missing_field|invalid_value):[a-z_]+)$")

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.integers(-10**40, 10**40)
    | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12)


def _json(value: object) -> str:
    return json.dumps(value, allow_nan=True)


def _mutated_beacon(draw: st.DrawFn) -> str:
    record = beacon(draw(st.text(min_size=1, max_size=8)), TS,
                    kind=draw(st.sampled_from(["pageview", "order", "error", "zap"])),
                    revenue=12.5, units=1)
    for name in draw(st.lists(st.sampled_from(BEACON_FIELDS), max_size=3)):
        record[name] = draw(json_values)
    return _json(record)


@st.composite
def lines(draw: st.DrawFn) -> str:
    """One line of any kind (without a line break of its own)."""
    kind = draw(st.integers(0, 8))
    if kind == 0:
        line = _json(draw(json_values))
    elif kind == 1:
        line = _mutated_beacon(draw)
    elif kind == 2:  # a key twice: the last one wins in Spark's parser
        text = dumps(beacon(draw(st.text(min_size=1, max_size=8)), TS))
        line = text[:-1] + f',"event_id":{_json(draw(json_values))}}}'
    elif kind == 3:
        line = draw(st.text(max_size=60))
    elif kind == 4:
        line = draw(st.binary(max_size=60)).decode("utf-8", errors="surrogateescape")
    elif kind == 5:
        line = "\ufeff" + dumps(beacon("bom", TS))
    elif kind == 6:  # deep nesting, cut short or whole inside a beacon (Jackson stops at 1000)
        depth = draw(st.integers(1, 3_000))
        if draw(st.booleans()):
            line = draw(st.sampled_from(["[", '{"a":'])) * depth
        else:
            line = dumps(beacon("deep", TS))[:-1] + f',"page":{"[" * depth}{"]" * depth}}}'

    elif kind == 7:
        number = draw(st.sampled_from(["1e999", "-1e999", "NaN", "Infinity", "1" * 400,
                                       "1e-999", "-0"]))
        line = dumps(beacon("n", TS, kind="order", units=1))[:-1] + f',"revenue":{number}}}'
    else:  # around the size limit
        size = draw(st.integers(MAX_BYTES - 40, MAX_BYTES + 40))
        text = dumps(beacon("big", TS, page=""))
        line = text.replace('"page":""', '"page":"' + "x" * max(0, size - len(text)) + '"')
    return re.sub(r"[\r\n]", " ", line)


def _encode(line: str) -> bytes:
    return line.encode("utf-8", errors="surrogateescape")


def _check(parsed: DataFrame, count: int) -> None:
    rows = parsed.select("reason", "raw", "event_id", "event_ts", "session_id", "visitor_id",
                         "type").collect()
    assert len(rows) == count, "one row a line, none lost or split"
    for row in rows:
        if row["reason"] is None:
            assert row["raw"] is None
            assert None not in (row["event_id"], row["event_ts"], row["session_id"],
                                row["visitor_id"], row["type"])
        else:
            assert REASON.match(row["reason"]), row["reason"]
            assert row["raw"] is not None, "a refused line keeps its text"


def _landing(spark: SparkSession, folder: Path) -> DataFrame:
    return beacons.parse_beacons(spark.read.format("text").load(str(folder)).select(
        "value", F.col("_metadata.file_path").alias("source_file"),
        F.col("_metadata.file_modification_time").alias("arrived_at"),
        F.current_timestamp().alias("ingested_at")), BEACON, MAX_BYTES, FUTURE)


@settings(max_examples=25, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(st.lists(lines(), min_size=1, max_size=30), st.booleans())
def test_every_landing_line_is_an_event_or_a_refused_record(spark, tmp_path_factory, drawn,
                                                            crlf):
    folder = tmp_path_factory.mktemp("fuzz")
    end = b"\r\n" if crlf else b"\n"
    (folder / "lines.jsonl").write_bytes(end.join(map(_encode, drawn)) + end)
    parsed = _landing(spark, folder)
    _check(parsed, len(drawn))
    oversized = {row["raw"] for row in parsed.where("reason = 'oversized_record'").collect()}
    assert len(oversized) == len({line for line in drawn if len(_encode(line)) > MAX_BYTES})


@settings(max_examples=25, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(st.lists(lines() | st.binary(max_size=80).map(
    lambda b: b.decode("utf-8", errors="surrogateescape")), min_size=1, max_size=30))
def test_every_kafka_record_goes_to_exactly_one_topic(spark, drawn):
    """Kafka values are not split at line breaks: any bytes at all are one record."""
    records = spark.createDataFrame(
        [(bytearray(_encode(value)), "beacons", 0, offset, datetime(2026, 1, 5, tzinfo=UTC))
         for offset, value in enumerate(drawn)],
        "value binary, topic string, partition int, offset long, timestamp timestamp")
    parsed = beacons.parse_beacons(kafka_records.beacon_lines(records), BEACON, MAX_BYTES,
                                    FUTURE)
    _check(parsed, len(drawn))
    out = kafka_records.topic_records(parsed, "valid", "rejected").collect()
    assert len(out) == len(drawn)
    for row in out:
        assert row["topic"] in ("valid", "rejected")
        reasons = [h["value"] for h in row["headers"] if h["key"] == "reason"]
        assert (len(reasons) == 1) == (row["topic"] == "rejected")


@pytest.mark.slow
def test_100_000_fuzzed_lines_through_ingest_lose_nothing(ctx):
    ctx = reconfigure(ctx, "ingest", max_record_bytes=MAX_BYTES)
    landing = Path(ctx.layout.landing)
    landing.mkdir(parents=True, exist_ok=True)
    lines_in = fuzzed_records(7, 100_000, MAX_BYTES)
    for part in range(4):
        chunk = lines_in[part * 25_000:(part + 1) * 25_000]
        (landing / f"fuzz-{part}.jsonl").write_bytes(
            (b"\r\n" if part % 2 else b"\n").join(chunk) + b"\n")
    run_once(ctx, [COMPONENTS["ingest"]])

    stats = ctx.stats.component("ingest")
    bronze = read_table(ctx.spark, EVENTS_TABLE, ctx.layout).count()
    rejected = read_table(ctx.spark, REJECTED_TABLE, ctx.layout)
    assert stats.input_rows == len(lines_in)
    assert stats.input_rows == bronze + rejected.count() + stats.duplicates_dropped
    assert rejected.where("reason IS NULL OR raw IS NULL").count() == 0
    assert stats.duplicates_dropped > 0 and bronze > 0
