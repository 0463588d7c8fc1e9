"""Faults on the Kafka path: the validation process killed in async mode, the broker
restarted mid-stream. Nothing is lost; the archive stage removes what was sent twice."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path

import pytest

from abstream.generator.write import GeneratorSettings, generate
from abstream.io.kafka.broker import LocalBroker
from abstream.io.kafka.topics import ensure_topics
from abstream.io.tables import EVENTS_TABLE, read_table
from abstream.speed import COMPONENTS, pipeline_components
from abstream.speed.runner import run_continuously, run_once
from tests.helpers import (
    assert_speed_layer_matches_reference,
    landing_records,
    reconfigure,
    wait_until,
)
from tests.io.kafka.kafka_helpers import kafka_context, produce_lines, read_topic
from tests.servers import free_port

pytestmark = pytest.mark.slow


def _validate_process(ctx, log: Path) -> subprocess.Popen:
    """`abstream run validate` in a process group of its own (the driver and its JVM)."""
    kafka, settings = ctx.config.kafka, ctx.config.validate_
    env = {**os.environ,
           "ABSTREAM__SOURCE": "kafka",
           "ABSTREAM__KAFKA__BOOTSTRAP_SERVERS": kafka.bootstrap_servers,
           "ABSTREAM__KAFKA__TOPIC": kafka.topic,
           "ABSTREAM__KAFKA__VALID_TOPIC": kafka.valid_topic,
           "ABSTREAM__KAFKA__REJECTED_TOPIC": kafka.rejected_topic,
           "ABSTREAM__VALIDATE__MODE": settings.mode,
           "ABSTREAM__VALIDATE__ASYNC_CHECKPOINT_INTERVAL": "1 hour",
           "ABSTREAM__SPARK__CONF__spark.sql.shuffle.partitions": "2"}
    return subprocess.Popen(
        [sys.executable, "-m", "abstream", "run", "validate", "--no-exporter",
         "--data-dir", ctx.config.data_dir],
        env=env, stdout=log.open("a"), stderr=subprocess.STDOUT, start_new_session=True)


def _valid_ids(ctx) -> Counter[str]:
    kafka = ctx.config.kafka
    return Counter(json.loads(m.value())["event_id"] for m in
                   read_topic(kafka.bootstrap_servers, kafka.valid_topic))


def test_kill_9_in_async_mode_loses_nothing_and_gold_stays_exact(ctx, kafka_broker, tmp_path):
    ctx = kafka_context(ctx, kafka_broker, "kill-9", mode="async")
    kafka = ctx.config.kafka
    generate(GeneratorSettings(events=3_000, seed=21, late_rate=0.0, duplicate_rate=0.0,
                               malformed_rate=0.0), tmp_path / "lines")
    lines = landing_records(tmp_path / "lines")
    ensure_topics(kafka, [kafka.topic, kafka.valid_topic,
                                            kafka.rejected_topic], 1)
    log = tmp_path / "validate.log"

    # Batch 0's offsets are written when it starts; with an interval of an hour, no later
    # batch's are. Records keep coming in chunks, and the last is in flight at the kill.
    process = _validate_process(ctx, log)
    try:
        produce_lines(kafka.bootstrap_servers, kafka.topic, lines[:500])
        wait_until(lambda: sum(_valid_ids(ctx).values()) >= 500, "batch 0 validated", 240)
        for start in (500, 1_000, 1_500):
            produce_lines(kafka.bootstrap_servers, kafka.topic, lines[start:start + 500])
            wait_until(lambda end=start + 500: sum(_valid_ids(ctx).values()) >= end,
                       "a later batch validated", 120)
        produce_lines(kafka.bootstrap_servers, kafka.topic, lines[2_000:2_400])
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(30)
    before_kill = sum(_valid_ids(ctx).values())

    process = _validate_process(ctx, log)
    try:
        produce_lines(kafka.bootstrap_servers, kafka.topic, lines[2_400:])
        wait_until(lambda: set(_valid_ids(ctx)) >= {json.loads(x)["event_id"] for x in lines},
                   "every record validated after the restart", 240)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(120)
    delivered = _valid_ids(ctx)
    repeated = sum(count - 1 for count in delivered.values())
    print(f"kill -9 in async mode: {before_kill} records out before the kill, "
          f"{sum(delivered.values())} in all for {len(lines)} in, {repeated} sent twice")
    assert set(delivered) == {json.loads(x)["event_id"] for x in lines}, "nothing lost"
    assert repeated >= 1_500, "no offsets were written after batch 0: later batches replay"

    run_once(ctx, [COMPONENTS["archive"], COMPONENTS["sessionize"]])
    assert_speed_layer_matches_reference(ctx, lines)


def test_the_pipeline_rides_out_a_broker_restart(ctx, tmp_path):
    broker = LocalBroker(tmp_path / "broker", ctx.config.kafka.local.jars_cache,
                         port=free_port(), controller_port=free_port())
    broker.start()
    try:
        ctx = kafka_context(ctx, broker, "restart")
        ctx = _fast(ctx)
        kafka = ctx.config.kafka
        generate(GeneratorSettings(events=1_200, seed=22, late_rate=0.0, duplicate_rate=0.0,
                                   malformed_rate=0.0), tmp_path / "lines")
        lines = landing_records(tmp_path / "lines")
        ids = {json.loads(x)["event_id"] for x in lines}
        stop = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            try:
                run_continuously(ctx, pipeline_components(ctx.config)[:2], stop)
            except BaseException as exc:
                failure.append(exc)

        runner = threading.Thread(target=run)
        runner.start()
        try:
            produce_lines(kafka.bootstrap_servers, kafka.topic, lines[:600])
            wait_until(lambda: _bronze_ids(ctx) >= 1, "the first events in bronze", 240)
            broker.stop()
            time.sleep(10)
            broker.start()
            produce_lines(kafka.bootstrap_servers, kafka.topic, lines[600:])
            wait_until(lambda: _bronze_ids(ctx) == len(ids) or failure,
                       "every event in bronze after the restart", 300)
        finally:
            stop.set()
            runner.join(timeout=180)
        assert not failure, failure
        assert _bronze_ids(ctx) == len(ids)
    finally:
        broker.stop()


def _fast(ctx):
    return reconfigure(ctx, "archive", trigger=timedelta(seconds=1))


def _bronze_ids(ctx) -> int:
    return read_table(ctx.spark, EVENTS_TABLE, ctx.layout).select("event_id").distinct().count()
