"""Events in a team's own format: the input mapping (``events:``) decides where each field
is, how time is written, how experiments are listed and which properties bronze keeps; a
line that does not fit is refused with a reason naming the path."""

import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from abstream.config import LINEAGE_COLUMNS, EventsSettings
from abstream.schemas import bronze_schema, valid_event_schema
from abstream.stages import kafka_records
from abstream.stages.beacons import parse_beacons, rejected_records, valid_events
from tests.stages.test_kafka_records import RECORD, _read_back

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
MILLIS = 1_795_342_530_123  # 2026-11-22T10:15:30.123Z

#: A clickstream of another shape: nested ids, epoch milliseconds, its own event names,
#: experiments under other keys, properties in an object of their own.
SHOP = EventsSettings.model_validate({
    "fields": {"event_id": "id", "event_ts": "at", "session_id": "ctx.session",
               "visitor_id": "user.anonymous_id", "type": "event"},
    "timestamp": "epoch_millis",
    "types": ["view", "checkout"],
    "experiments": {"path": "ab", "id": "key", "variant": "arm", "qualified": "exposed"},
    "properties": {"amount": {"path": "props.amount", "type": "decimal", "min": 0},
                   "items": {"path": "props.items", "type": "long", "min": 0,
                             "types": ["checkout"]},
                   "device": {"path": "ctx.device"},
                   "first_visit": {"path": "ctx.first", "type": "boolean"}},
    "require": {"checkout": ["amount"]},
})


def _event(**changes: object) -> dict:
    event = {"id": "e1", "at": MILLIS, "event": "checkout",
             "user": {"anonymous_id": "u1"}, "ctx": {"session": "s1", "device": "mobile",
                                                     "first": True},
             "ab": [{"key": "exp", "arm": "b", "exposed": True}],
             "props": {"amount": 12.345, "items": 2}}
    for path, value in changes.items():
        *parents, key = path.split("__")
        node = event
        for parent in parents:
            node = node[parent]
        if value is ...:
            del node[key]
        else:
            node[key] = value
    return event


def _parse(spark, mapping, records):
    lines = [r if isinstance(r, str) else json.dumps(r) for r in records]
    raw = spark.createDataFrame([(line, "f", NOW, NOW) for line in lines],
                                "value string, source_file string, arrived_at timestamp, "
                                "ingested_at timestamp")
    return parse_beacons(raw, mapping, 65_536, timedelta(days=1))


def _reason(spark, mapping, record):
    return _parse(spark, mapping, [record]).first()["reason"]


def test_an_event_of_another_shape_becomes_a_bronze_row_of_its_mapping(spark):
    view = _event(id="e2", event="view", props={"amount": 1.0, "items": 3})

    rows = valid_events(_parse(spark, SHOP, [_event(), view]))

    assert [(f.name, f.dataType.simpleString()) for f in rows.schema] == \
        [(f.name, f.dataType.simpleString()) for f in bronze_schema(SHOP)]
    got = {r["event_id"]: r.asDict(recursive=True) for r in rows.collect()}
    assert {k: v for k, v in got["e1"].items() if k not in ("arrived_at", "ingested_at")} == {
        "event_id": "e1", "event_ts": datetime(2026, 11, 22, 10, 15, 30, 123000),
        "session_id": "s1", "visitor_id": "u1", "type": "checkout",
        "amount": Decimal("12.35"), "items": 2, "device": "mobile", "first_visit": True,
        "experiments": [{"id": "exp", "variant": "b", "qualified": True}],
        "source_file": "f", "event_date": datetime(2026, 11, 22).date()}
    assert got["e2"]["items"] is None, "items is kept for checkouts only"
    assert got["e2"]["amount"] == Decimal("1.00")


def test_experiments_as_an_object_of_variants_are_exposures(spark):
    mapping = SHOP.model_copy(update={"experiments": SHOP.experiments.model_copy(
        update={"shape": "map"})})

    row = valid_events(_parse(spark, mapping, [_event(ab={"exp": "b", "other": "control"})])) \
        .first()

    assert sorted((e.asDict() for e in row["experiments"]), key=lambda e: e["id"]) == [
        {"id": "exp", "variant": "b", "qualified": True},
        {"id": "other", "variant": "control", "qualified": True}]


def test_experiments_without_an_exposure_flag_are_never_exposures(spark):
    mapping = SHOP.model_copy(update={"experiments": SHOP.experiments.model_copy(
        update={"qualified": None})})

    row = valid_events(_parse(spark, mapping, [_event()])).first()

    assert [e.asDict() for e in row["experiments"]] == [
        {"id": "exp", "variant": "b", "qualified": None}]


def test_without_a_session_a_visitors_events_are_one_stream(spark):
    fields = SHOP.fields.model_copy(update={"session_id": None})
    mapping = SHOP.model_copy(update={"fields": fields})

    row = valid_events(_parse(spark, mapping, [_event(ctx__session=...)])).first()

    assert row["session_id"] == "u1"


def test_epoch_seconds_with_a_fraction(spark):
    mapping = SHOP.model_copy(update={"timestamp": "epoch_seconds"})

    row = valid_events(_parse(spark, mapping, [_event(at=MILLIS / 1000)])).first()

    assert row["event_ts"] == datetime(2026, 11, 22, 10, 15, 30, 123000)


@pytest.mark.parametrize(("record", "reason"), [
    (_event(user={"id": "u1"}), "missing_field:user.anonymous_id"),
    (_event(user="u1"), "invalid_type:user"),
    (_event(ctx__session=...), "missing_field:ctx.session"),
    (_event(props={"amount": "12", "items": 1}), "invalid_type:props.amount"),
    (_event(props={"amount": -1, "items": 1}), "invalid_value:props.amount"),
    (_event(props={"items": 1}), "missing_field:props.amount"),
    (_event(props={"amount": 1, "items": -1}), "invalid_value:props.items"),
    (_event(ctx__first="yes"), "invalid_type:ctx.first"),
    (_event(ab=[{"key": "exp", "arm": "b", "exposed": "yes"}]), "invalid_type:ab"),
    (_event(ab=[{"key": "exp"}]), "invalid_value:ab"),
    (_event(event="click"), "invalid_value:event"),
    (_event(at="2026-11-22T10:15:30Z"), "invalid_type:at"),
    (_event(at=-5), "invalid_timestamp"),
    (_event(at=10**18), "invalid_timestamp"),
    (_event(at=MILLIS + 3 * 86_400_000), "future_timestamp"),
    (_event(id=""), "invalid_value:id"),
])
def test_a_line_that_does_not_fit_the_mapping_is_refused_naming_the_path(spark, record,
                                                                          reason):
    assert _reason(spark, SHOP, record) == reason


def test_any_event_type_when_the_mapping_lists_none(spark):
    mapping = SHOP.model_copy(update={"types": None, "require": {}})

    assert _reason(spark, mapping, _event(event="click")) is None


def test_the_kafka_path_keeps_what_the_mapping_keeps(spark):
    lines = [json.dumps(_event()), json.dumps(_event(id="e2", event="view")),
             json.dumps(_event(id="e3", user="u3"))]
    records = spark.createDataFrame(
        [(None, line.encode(), "shop", 0, offset, NOW, []) for offset, line in enumerate(lines)],
        RECORD)

    validated = kafka_records.topic_records(
        parse_beacons(kafka_records.beacon_lines(records), SHOP, 65_536, timedelta(days=1)),
        "shop.valid", "shop.rejected")
    archived = kafka_records.parsed_beacons(_read_back(validated), "shop.valid",
                                            valid_event_schema(SHOP), F.current_timestamp())

    content = [c for c in bronze_schema(SHOP).fieldNames() if c not in LINEAGE_COLUMNS]
    assertDataFrameEqual(valid_events(archived).select(*content),
                         valid_events(_parse(spark, SHOP, lines)).select(*content))
    assert [r["reason"] for r in rejected_records(archived).collect()] == ["invalid_type:user"]
