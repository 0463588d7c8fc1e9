"""Fuzzed records on a real broker through validate and archive: nothing is lost."""

from __future__ import annotations

import pytest

from abstream.io.kafka.topics import ensure_topics
from abstream.io.tables import EVENTS_TABLE, REJECTED_TABLE, read_table
from abstream.speed import COMPONENTS
from abstream.speed.runner import run_once
from tests.fuzz import fuzzed_records
from tests.helpers import reconfigure
from tests.io.kafka.kafka_helpers import kafka_context, produce_values

MAX_BYTES = 2_048
TOMBSTONES = 5


@pytest.mark.slow
def test_fuzzed_records_through_validate_and_archive_lose_nothing(ctx, kafka_broker):
    ctx = reconfigure(kafka_context(ctx, kafka_broker, "fuzz"), "ingest",
                      max_record_bytes=MAX_BYTES)
    kafka = ctx.config.kafka
    ensure_topics(kafka, [kafka.topic], 2)
    # Kafka values are not lines: line breaks inside them are part of the record.
    values: list[bytes | None] = [*fuzzed_records(11, 20_000, MAX_BYTES, line_breaks=True),
                                  *[None] * TOMBSTONES]
    produce_values(kafka.bootstrap_servers, kafka.topic, values)
    run_once(ctx, [COMPONENTS["validate"], COMPONENTS["archive"]])

    archive = ctx.stats.component("archive")
    bronze = read_table(ctx.spark, EVENTS_TABLE, ctx.layout).count()
    rejected = read_table(ctx.spark, REJECTED_TABLE, ctx.layout)
    assert archive.input_rows == len(values)
    assert len(values) == bronze + rejected.count() + archive.duplicates_dropped
    assert rejected.where("reason IS NULL").count() == 0
    assert rejected.where("raw IS NULL").count() == TOMBSTONES, "a tombstone has no text"
    assert archive.duplicates_dropped > 0 and bronze > 0
