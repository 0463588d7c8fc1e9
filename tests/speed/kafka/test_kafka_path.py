"""The Kafka path on a real broker: validate -> archive -> sessionize."""

from __future__ import annotations

import json
import threading
import time

import pytest
from confluent_kafka import Producer
from pyspark.sql import functions as F

from abstream.config import ServingSettings
from abstream.errors import UsageError
from abstream.generator.write import GeneratorSettings, generate, generate_to_kafka
from abstream.io.kafka.topics import ensure_topics
from abstream.io.tables import (
    EVENTS_TABLE,
    read_table,
)
from abstream.serving.store import StoreWriter
from abstream.speed import COMPONENTS, pipeline_components
from abstream.speed.runner import run_continuously, run_once
from tests.helpers import (
    assert_speed_layer_matches_reference,
    beacon,
    dumps,
    landing_records,
    store_settings,
    wait_until,
)
from tests.io.kafka.kafka_helpers import header, kafka_context, produce_lines, read_topic

pytestmark = pytest.mark.long_module


def test_the_kafka_path_matches_the_reference_on_generated_data(ctx, kafka_broker, tmp_path,
                                                                 postgres):
    ctx = kafka_context(ctx, kafka_broker, "pipeline")
    kafka = ctx.config.kafka
    settings = GeneratorSettings(events=4_000, seed=12, late_rate=0.0, malformed_rate=0.01)
    ensure_topics(kafka, [kafka.topic], 1)
    generate_to_kafka(settings, kafka, kafka.topic)
    run_once(ctx, pipeline_components(ctx.config))

    generate(settings, tmp_path / "same")
    lines = landing_records(tmp_path / "same")
    bronze = read_table(ctx.spark, EVENTS_TABLE, ctx.layout)
    assert bronze.where(~F.col("source_file").startswith(f"kafka://{kafka.topic}/0/")).count() \
        == 0
    assert_speed_layer_matches_reference(ctx, lines)

    # The serving store's write records the Kafka offsets its gold was computed through:
    # archive's, which read the valid and refused topics to their ends.
    config = ctx.config.model_copy(update={"serving": ServingSettings.model_validate(
        store_settings(postgres, "kafka_path"))})
    written = StoreWriter(ctx.spark, ctx.layout, config, "speed").write()
    assert written is not None and written.covers["input"]["component"] == "archive"
    offsets = {topic: partitions for planned in written.covers["input"]["offsets"]
               if planned for topic, partitions in planned.items()}
    assert offsets[kafka.valid_topic] == {"0": len(read_topic(
        kafka.bootstrap_servers, kafka.valid_topic))}


@pytest.mark.parametrize("mode", ["microbatch", "async", "realtime"])
def test_each_validation_mode_splits_valid_and_refused_records(ctx, kafka_broker, mode):
    ctx = kafka_context(ctx, kafka_broker, f"mode-{mode}", mode=mode)
    kafka = ctx.config.kafka
    lines = [dumps(beacon(f"{mode}-{i}", "2026-11-20T10:00:00Z", session=f"s{i % 7}"))
             for i in range(300)] + ["{oops", dumps(beacon("bad", "yesterday"))]
    stop = threading.Event()
    runner = threading.Thread(target=run_continuously,
                              args=(ctx, [COMPONENTS["validate"]], stop))
    runner.start()
    try:
        wait_until(lambda: ctx.spark.streams.active, "the validate query", 120)
        produce_lines(kafka.bootstrap_servers, kafka.topic, lines)
        valid = read_topic(kafka.bootstrap_servers, kafka.valid_topic, 300, 120)
        rejected = read_topic(kafka.bootstrap_servers, kafka.rejected_topic, 2, 60)
    finally:
        stop.set()
        runner.join(timeout=120)
    assert sorted(json.loads(m.value())["event_id"] for m in valid) == \
        sorted(f"{mode}-{i}" for i in range(300))
    assert all(m.key().decode() == json.loads(m.value())["session_id"] for m in valid)
    assert {m.value().decode(): header(m, "reason") for m in rejected} == {
        "{oops": "malformed_json", lines[-1]: "invalid_timestamp"}


def test_realtime_mode_refuses_more_partitions_than_task_slots(ctx, kafka_broker):
    ctx = kafka_context(ctx, kafka_broker, "rtm-slots", mode="realtime")
    kafka = ctx.config.kafka
    ensure_topics(kafka, [kafka.topic], 3)
    with pytest.raises(UsageError, match=r"task slot per partition of t\w+ \(3\) but Spark "
                                         r"has 2"):
        run_continuously(ctx, [COMPONENTS["validate"]], threading.Event())


def test_kafka_lag_per_partition_from_the_checkpoint_and_the_broker(ctx, kafka_broker):
    from abstream.lag.measure import LagMonitor, MonitoredSource
    from abstream.monitor.exporter import Exporter
    from tests.monitor.test_exporter import scrape, value

    ctx = kafka_context(ctx, kafka_broker, "lag")
    kafka = ctx.config.kafka
    ensure_topics(kafka, [kafka.topic], 2)
    producer = Producer({"bootstrap.servers": kafka.bootstrap_servers})
    monitor = LagMonitor([MonitoredSource("validate", ctx.layout.checkpoint("validate"),
                                          f"kafka://{kafka.topic}")],
                         clock=lambda: now, kafka=kafka)

    def produce(partition: int, count: int, at_ms: int) -> None:
        for i in range(count):
            producer.produce(kafka.topic, value=b"{}", partition=partition,
                             timestamp=at_ms + i)
        assert producer.flush(30) == 0

    now = time.time()
    base = int(now * 1000) - 600_000
    produce(0, 3, base)
    never = monitor.rows()[0]
    assert (never.status, never.offsets_behind, never.lag_seconds) == ("never_run", 3, 600.0)

    run_once(ctx, [COMPONENTS["validate"]])
    produce(1, 4, base + 100_000)
    produce(0, 2, base + 300_000)
    row = monitor.rows()[0]
    assert row.status == "behind"
    assert [(p.partition, p.next_offset, p.end_offset, p.offsets_behind, p.lag_seconds)
            for p in row.partitions] == [(0, 3, 5, 2, 300.0), (1, 0, 4, 4, 500.0)]
    assert (row.lag_seconds, row.offsets_behind) == (500.0, 6)
    found = scrape(Exporter(ctx.config, clock=lambda: now))
    source = {"component": "validate", "source": f"kafka://{kafka.topic}"}
    assert value(found, "abstream_component_lag_seconds", **source) == 500.0
    assert value(found, "abstream_component_offsets_behind", **source) == 6
    assert value(found, "abstream_kafka_partition_lag_seconds", **source, partition="0") == 300.0
    assert value(found, "abstream_kafka_partition_offsets_behind", **source, partition="1") == 4
    assert value(found, "abstream_system_lag_seconds") == 500.0

    run_once(ctx, [COMPONENTS["validate"]])
    caught_up = monitor.rows()[0]
    monitor.close()
    assert (caught_up.status, caught_up.lag_seconds, caught_up.offsets_behind) == \
        ("caught_up", 0.0, 0)
