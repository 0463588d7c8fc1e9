"""The exporter on a real pipeline: lag, table versions, query metrics, freshness, push."""

import json
import os
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from abstream.generator.write import GeneratorSettings, generate
from abstream.monitor.exporter import Exporter
from abstream.speed import COMPONENTS, pipeline_components
from abstream.speed.runner import pipeline, run_once
from tests.helpers import make_config
from tests.servers import pushgateway


def samples(text: str) -> dict[tuple, float]:
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def scrape(exporter: Exporter) -> dict[tuple, float]:
    return samples(generate_latest(exporter.registry).decode())


def value(found, name, **labels):
    return found[(name, tuple(sorted(labels.items())))]


@pytest.fixture
def config(tmp_path):
    return make_config(tmp_path / "data")


def test_exporter_on_a_real_pipeline(spark, config, tmp_path):
    landing = Path(config.data_dir) / "landing"
    summary = generate(GeneratorSettings(events=1_500, seed=3, file_events=500), landing)
    exporter = Exporter(config)
    with pipeline(config, [exporter.queries.observe]) as ctx:
        run_once(ctx, pipeline_components(ctx.config))
        layout = ctx.layout
        found = scrape(exporter)
        for component, source in [("ingest", layout.landing), ("sessionize", layout.events)]:
            key = {"component": component, "source": source}
            assert value(found, "abstream_component_lag_seconds", **key) == 0.0
            assert value(found, "abstream_component_status", status="caught_up", **key) == 1.0
        assert value(found, "abstream_query_input_rows_total", job="ingest") == summary.records
        assert value(found, "abstream_query_rows_dropped_as_duplicates_total",
                     job="ingest") == summary.duplicates
        watermark = value(found, "abstream_query_watermark_timestamp_seconds", job="sessionize")
        assert value(found, "abstream_query_output_watermark_timestamp_seconds",
                     job="sessionize") <= watermark
        events = spark.read.format("delta").load(layout.events)
        bronze = events.count()
        assert value(found, "abstream_gold_freshness_seconds_count") == bronze
        assert value(found, "abstream_gold_freshness_seconds_bucket", le="+Inf") == bronze
        assert value(found, "abstream_gold_freshness_seconds_sum") > 0
        latest = max(int(p.name[:20]) for p in Path(layout.events, "_delta_log").glob("*.json"))
        assert value(found, "delta_version", table="events") == latest
        # The seed's metric: the reservoirVersion of the last batch's end offset.
        last_commit = max(int(p.name) for p in
                          Path(layout.checkpoint("sessionize"), "commits").iterdir()
                          if p.name.isdigit())
        offsets = Path(layout.checkpoint("sessionize"), "offsets", str(last_commit))
        end = json.loads(offsets.read_text().splitlines()[2])["reservoirVersion"]
        assert value(found, "spark_delta_last_read_end_version", job="sessionize",
                     table="events") == end
        assert value(found, "abstream_system_lag_seconds") == 0.0
        steps = {labels: seconds for (name, labels), seconds in found.items()
                 if name == "abstream_query_step_seconds_total"
                 and ("job", "sessionize") in labels}
        assert len(steps) >= 7, "sessionize's steps, each with its seconds"
        assert all(seconds > 0 for seconds in steps.values())
        assert sum(steps.values()) == pytest.approx(
            sum(ctx.stats.component("sessionize").step_seconds.values()))

        # A file lands 100 s "ago": ingest is behind by its age, and so is the system.
        late = landing / "late.jsonl"
        first = json.loads((landing / summary.files[0]).read_text().splitlines()[0])
        late.write_text(json.dumps({**first, "event_id": "late-1"}) + "\n")
        landed = time.time() - 100
        os.utime(late, (landed, landed))
        found = scrape(exporter)
        ingest_lag = value(found, "abstream_component_lag_seconds", component="ingest",
                           source=layout.landing)
        assert 100 <= ingest_lag < 103
        assert value(found, "abstream_system_lag_seconds") >= ingest_lag

        # Ingest it: now sessionize is behind on bronze, and the system lag still counts from
        # when the beacon landed (bronze keeps arrived_at; Delta's stats carry its minimum).
        run_once(ctx, [COMPONENTS["ingest"]])
        found = scrape(exporter)
        assert value(found, "abstream_component_lag_seconds", component="ingest",
                     source=layout.landing) == 0.0
        behind = value(found, "abstream_component_lag_seconds", component="sessionize",
                       source=layout.events)
        assert 0 < behind < 60
        assert value(found, "abstream_component_status", component="sessionize",
                     source=layout.events, status="behind") == 1.0
        system = value(found, "abstream_system_lag_seconds")
        assert system >= 100 and abs(system - (time.time() - landed)) < 3


def test_push_to_a_real_pushgateway(config, tmp_path):
    with pushgateway(tmp_path) as address:
        pushing = config.model_copy(update={"monitor": config.monitor.model_copy(
            update={"pushgateway": address})})
        Exporter(pushing).push()
        text = urllib.request.urlopen(f"http://{address}/metrics", timeout=5).read().decode()
    found = samples(text)
    keys = [k for k in found if k[0] == "abstream_component_lag_seconds"]
    assert len(keys) == 2
    assert all(dict(k[1])["job"] == "abstream" for k in keys)
