import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from pyspark.sql import functions as F

from abstream.generator.write import GeneratorSettings, generate
from abstream.stages.beacons import (
    parse_beacons,
    rejected_records,
    valid_events,
)
from abstream.stages.dedupe import drop_duplicate_events, recent_ids
from tests.helpers import BEACON, beacon, dumps
from tests.reference import valid_event

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
TS = "2026-11-22T10:15:30.123Z"


def _parse(spark, lines, max_bytes=65_536):
    raw = spark.createDataFrame(
        [(line, "file:/landing/f.jsonl", NOW, NOW) for line in lines],
        "value string, source_file string, arrived_at timestamp, ingested_at timestamp")
    return parse_beacons(raw, BEACON, max_bytes, timedelta(days=1))


def _reasons(spark, lines, max_bytes=65_536):
    """line -> reason; a refused line keeps its raw text, a valid one carries none."""
    rows = _parse(spark, lines, max_bytes).select("raw", "reason").collect()
    assert all(row["raw"] == (None if row["reason"] is None else line)
               for line, row in zip(lines, rows, strict=True))
    return {line: row["reason"] for line, row in zip(lines, rows, strict=True)}


def test_valid_beacons_become_normalised_bronze_rows(spark):
    order = beacon("e1", TS, kind="order", revenue=12.345, units=2, page_load_ms=5,
                   experiments=[{"id": "exp", "variant": "b"}])
    view = beacon("e2", "2026-11-22T11:15:30.5+01:00", page_load_ms=830, revenue=3)
    rows = {r["event_id"]: r for r in valid_events(_parse(spark, [dumps(order), dumps(view)]))
            .collect()}
    assert rows["e1"]["revenue"] == Decimal("12.35")
    assert rows["e1"]["units"] == 2
    assert rows["e1"]["page_load_ms"] is None, "page load belongs to pageviews"
    assert rows["e1"]["experiments"][0].asDict() == {"id": "exp", "variant": "b",
                                                     "qualified": None}, "as sent"
    assert rows["e2"]["event_ts"] == datetime(2026, 11, 22, 10, 15, 30, 500000)
    assert rows["e2"]["revenue"] is None and rows["e2"]["units"] is None, "orders only"
    assert rows["e2"]["page_load_ms"] == 830
    assert rows["e2"]["event_date"].isoformat() == "2026-11-22"
    assert rows["e2"]["source_file"] == "file:/landing/f.jsonl"


GOOD = beacon("e1", TS)
BAD = {
    "x" * 70_000: "oversized_record",
    "": "empty_record",
    "   ": "empty_record",
    '{"event_id": "e1", ': "malformed_json",
    "[1, 2]": "malformed_json",
    "null": "malformed_json",
    "42": "malformed_json",
    dumps({**GOOD, "revenue": "12.50", "type": "order", "units": 1}): "invalid_type:revenue",
    dumps({**GOOD, "units": 1.5}): "invalid_type:units",
    dumps({**GOOD, "page_load_ms": "fast"}): "invalid_type:page_load_ms",
    dumps({**GOOD, "experiments": {"id": "exp"}}): "invalid_type:experiments",
    dumps({**GOOD, "experiments": [{"id": "e", "variant": "v", "qualified": "yes"}]}):
        "invalid_type:experiments",
    dumps({k: v for k, v in GOOD.items() if k != "event_id"}): "missing_field:event_id",
    dumps({k: v for k, v in GOOD.items() if k != "event_ts"}): "missing_field:event_ts",
    dumps({k: v for k, v in GOOD.items() if k != "session_id"}): "missing_field:session_id",
    dumps({k: v for k, v in GOOD.items() if k != "visitor_id"}): "missing_field:visitor_id",
    dumps({k: v for k, v in GOOD.items() if k != "type"}): "missing_field:type",
    dumps({**GOOD, "visitor_id": None}): "missing_field:visitor_id",
    dumps({**GOOD, "type": "order", "units": 1}): "missing_field:revenue",
    dumps({**GOOD, "type": "order", "revenue": 1.0}): "missing_field:units",
    dumps({**GOOD, "event_id": ""}): "invalid_value:event_id",
    dumps({**GOOD, "session_id": "s" * 129}): "invalid_value:session_id",
    dumps({**GOOD, "visitor_id": {"id": 1}}): "invalid_value:visitor_id",
    dumps({**GOOD, "type": "click"}): "invalid_value:type",
    dumps({**GOOD, "experiments": [{"variant": "control"}]}): "invalid_value:experiments",
    dumps({**GOOD, "experiments": [{"id": "exp", "variant": ""}]}): "invalid_value:experiments",
    dumps({**GOOD, "experiments": [None]}): "invalid_value:experiments",
    dumps({**GOOD, "experiments": [{"id": "a", "variant": "b"}, None]}):
        "invalid_value:experiments",
    dumps({**GOOD, "experiments": [{"id": "e", "variant": "v"}, {"id": "f", "variant": None}]}):
        "invalid_value:experiments",
    dumps({**GOOD, "experiments": [{"id": "e" * 100, "variant": "v"},
                                   {"id": "f" * 129, "variant": "v"}]}):
        "invalid_value:experiments",
    dumps({**GOOD, "experiments": [{"id": "e", "variant": "v" * 129}]}):
        "invalid_value:experiments",
    dumps({**GOOD, "type": "order", "revenue": -1, "units": 1}): "invalid_value:revenue",
    '{"event_id":"e1","event_ts":"2026-11-22T10:15:30.123Z","session_id":"s","visitor_id":"v",'
    '"type":"order","revenue":1e400,"units":1}': "invalid_value:revenue",
    '{"event_id":"e1","event_ts":"2026-11-22T10:15:30.123Z","session_id":"s","visitor_id":"v",'
    '"type":"order","revenue":NaN,"units":1}': "invalid_value:revenue",
    dumps({**GOOD, "type": "order", "revenue": 1, "units": -2}): "invalid_value:units",
    dumps({**GOOD, "page_load_ms": -3}): "invalid_value:page_load_ms",
    dumps({**GOOD, "event_ts": "yesterday"}): "invalid_timestamp",
    dumps({**GOOD, "event_ts": "2026-11-22 10:15:30.123"}): "invalid_timestamp",
    dumps({**GOOD, "event_ts": "2026-11-22T10:15:30.123"}): "invalid_timestamp",
    dumps({**GOOD, "event_ts": "2026-02-30T10:15:30.123Z"}): "invalid_timestamp",
    dumps({**GOOD, "event_ts": "2026-11-23T12:00:00.001Z"}): "future_timestamp",
}


#: Valid lines near the limits: ids that are long together but not one by one.
LONG_BUT_GOOD = [
    dumps({**GOOD, "experiments": [{"id": "e" * 128, "variant": "v" * 128}]}),
    dumps({**GOOD, "experiments": [{"id": "e" * 100, "variant": "v"},
                                   {"id": "f" * 100, "variant": "w" * 128}]}),
]


def test_every_kind_of_bad_input_gets_its_reason(spark):
    good = [dumps(GOOD), *LONG_BUT_GOOD]
    assert _reasons(spark, [*BAD, *good]) == {**BAD, **dict.fromkeys(good)}


def test_a_day_ahead_is_still_accepted(spark):
    ahead = dumps({**GOOD, "event_ts": "2026-11-23T12:00:00.000Z"})
    assert _reasons(spark, [ahead]) == {ahead: None}


def test_quarantine_rows_keep_raw_text_reason_and_file(spark):
    rows = rejected_records(_parse(spark, ["{oops", dumps(GOOD)])).collect()
    assert [(r["raw"], r["reason"], r["source_file"]) for r in rows] == [
        ("{oops", "malformed_json", "file:/landing/f.jsonl")]
    assert rows[0]["ingest_date"].isoformat() == "2026-11-22"


def test_agrees_with_the_reference_rules_on_generated_input(spark, tmp_path):
    generate(GeneratorSettings(events=4_000, seed=9, malformed_rate=0.1), tmp_path)
    lines = [line for path in sorted(tmp_path.iterdir())
             for line in path.read_text().splitlines()]
    reasons = _reasons(spark, lines)
    for line in set(lines):
        expected_valid = valid_event(line, NOW) is not None
        assert (reasons[line] is None) == expected_valid, (line[:200], reasons[line])


def test_duplicates_are_dropped_within_the_batch_and_against_ids_seen_before(spark):
    lines = [dumps(GOOD), dumps(GOOD), dumps(beacon("e2", TS)), dumps(beacon("e3", TS))]
    events = valid_events(_parse(spark, lines))
    assert sorted(r["event_id"] for r in drop_duplicate_events(events).collect()) == \
        ["e1", "e2", "e3"]
    seen = spark.createDataFrame([("e2",), ("e2",), ("old",)], "event_id string")
    assert sorted(r["event_id"] for r in drop_duplicate_events(events, seen).collect()) == \
        ["e1", "e3"]
    seen_too = spark.createDataFrame([("e1",)], "event_id string")
    assert [r["event_id"] for r in drop_duplicate_events(events, seen_too).collect()
            if r["event_id"] == "e1"] == [], "repeated in the batch and seen before"


def test_recent_ids_are_those_ingested_since_the_cutoff(spark):
    cutoff = datetime(2026, 1, 5, 10, 0, tzinfo=UTC)
    rows = [("old", cutoff - timedelta(microseconds=1)), ("new", cutoff)]
    bronze = spark.createDataFrame(rows, "event_id string, ingested_at timestamp")
    assert [r["event_id"] for r in recent_ids(bronze, cutoff).collect()] == ["new"]


def test_raw_text_of_any_record_survives_parsing(spark):
    weird = json.dumps({"event_id": "é\u2028", "x": "\\n"})
    assert _parse(spark, [weird]).select(F.col("raw")).first()["raw"] == weird
