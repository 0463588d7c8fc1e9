"""Speed and batch layers together: agreement, late data, and the serving view against the
plain-Python reference of docs/design.md's definitions."""

import json
import logging
import re
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from delta.tables import DeltaTable
from pyspark.sql import functions as F

from abstream.batch.layer import BatchRequest, run_batch
from abstream.generator.write import GeneratorSettings, generate
from abstream.io.tables import METRICS_TABLE, read_table
from abstream.serving.view import serving_view
from abstream.speed import pipeline_components
from abstream.speed.runner import run_continuously, run_once
from tests import reference
from tests.batch.timeline import at, land
from tests.helpers import (
    beacon,
    dumps,
    landing_records,
    reconfigure,
    totals,
    wait_until,
    write_lines,
)

KEY = ("experiment_id", "variant", "population", "window_start", "window_end")
SUMS = ("events", "pageviews", "add_to_carts", "orders", "revenue", "revenue_sq", "units",
        "errors", "page_load_ms_sum", "page_load_count", "visits", "bounces", "error_visits")


def _expected(ctx):
    events = reference.valid_unique_events(landing_records(Path(ctx.layout.landing)))
    return reference.totals(reference.visits(events, ctx.config.sessionize.gap))


def _layer(ctx, layer):
    """A layer's gold rows per key: the speed layer's increments added up, its visitor
    sketches merged."""
    rows = read_table(ctx.spark, METRICS_TABLE, ctx.layout).where(F.col("layer") == layer) \
        .groupBy(*KEY).agg(
            *(F.sum(m).alias(m) for m in SUMS),
            (F.hll_sketch_estimate(F.hll_union_agg("visitors_sketch")) if layer == "speed"
             else F.sum("visitors")).alias("visitors")).collect()
    return {tuple(r[k] for k in KEY): r for r in rows}


def test_stream_and_batch_agree_on_in_order_data_without_duplicates(ctx):
    landing = Path(ctx.layout.landing)
    summary = generate(GeneratorSettings(events=4_000, seed=11, late_rate=0.0,
                                         duplicate_rate=0.0, malformed_rate=0.0,
                                         file_events=1_000), landing)
    # One last event, hours later and in no experiment, moves the stream's watermarks past
    # every visit, so the stream has closed them all.
    last = max(json.loads(line)["event_ts"] for line in landing_records(landing))
    clock = (reference.parse_ts(last) + timedelta(hours=3)).isoformat(timespec="milliseconds")
    write_lines(landing, "beacons-zz-clock.jsonl",
                [dumps(beacon("clock", clock.replace("+00:00", "Z"), experiments=[]))])
    run_once(ctx, pipeline_components(ctx.config))
    result = run_batch(ctx, BatchRequest("all"))
    assert result.events == summary.events + 1

    speed, batch = _layer(ctx, "speed"), _layer(ctx, "batch")
    assert speed.keys() == batch.keys() and len(speed) > 100
    worst = 0.0
    for key, fast in speed.items():
        final = batch[key]
        assert {m: fast[m] for m in SUMS} == {m: final[m] for m in SUMS}, key
        worst = max(worst, abs(fast["visitors"] - final["visitors"]) / max(final["visitors"], 1))
    # HLL with lg_k = 12: relative standard error 1.6 %; small counts are exact.
    assert worst <= 0.05


def test_late_events_are_dropped_by_the_stream_counted_and_included_by_the_batch(ctx):
    ctx = reconfigure(ctx, "sessionize", lateness=timedelta(minutes=30))
    land(ctx, "on-time", [("a", at(10)), ("a", at(10, 5)), ("b", at(10)),
                          ("clock-1", at(12)), ("clock-2", at(13))])
    run_once(ctx, pipeline_components(ctx.config))
    # Behind the watermark now (13:00 - 30 minutes).
    land(ctx, "late", [("a", at(10, 10)), ("c", at(10, 20))])
    run_once(ctx, pipeline_components(ctx.config))
    stats = ctx.stats.as_dict()
    assert stats["sessionize"]["late_rows_dropped"] == 2

    expected = _expected(ctx)
    provisional = totals(serving_view(ctx.spark, ctx.layout))
    assert provisional[("exp", "control", "assigned")]["events"] == 3, "late events dropped"
    assert provisional[("exp", "control", "assigned")]["visits"] == 2, "a and b, without c"
    assert expected[("exp", "control", "assigned")]["events"] == 5

    run_batch(ctx, BatchRequest("all"))
    view = serving_view(ctx.spark, ctx.layout)
    assert {r.final for r in view.select("final").distinct().collect()} == {True}
    assert totals(view) == expected


def test_serving_view_equals_the_definitions_after_run_once_and_batch_all(ctx, caplog):
    """Generated data with every kind of fault, as `run --once` and `batch --all` run it."""
    generate(GeneratorSettings(events=5_000, seed=21, late_rate=0.03, file_events=1_000),
             Path(ctx.layout.landing))
    run_once(ctx, pipeline_components(ctx.config))
    with caplog.at_level(logging.INFO, logger="abstream.batch"):
        run_batch(ctx, BatchRequest("all"))
    assert re.search(r"batch \d+/\d+ \[", caplog.text), "progress is shown"
    assert totals(serving_view(ctx.spark, ctx.layout)) == _expected(ctx)


@pytest.mark.slow
def test_the_batch_layer_runs_beside_the_stream_without_conflicts(ctx):
    for section in ("ingest", "sessionize"):
        ctx = reconfigure(ctx, section, trigger=timedelta(seconds=1))
    generate(GeneratorSettings(events=1_000, seed=31, file_events=500,
                               span=timedelta(hours=12)), Path(ctx.layout.landing))
    stop, feeding, failures = threading.Event(), threading.Event(), []

    def stream() -> None:
        try:
            run_continuously(ctx, pipeline_components(ctx.config), stop)
        except Exception as exc:  # reported by the assertion below
            failures.append(exc)

    def feed() -> None:
        """Once the batch layer starts, a new landing file every half second, each a visit
        two hours after the last (the generated events end on the first day, one batch
        chunk): every micro-batch's watermark closes the visits before it, so the stream
        keeps appending to gold. (Fed from the start, the stream's first, slow micro-batches
        would leave the batch layer weeks of event time to recompute.)"""
        number = 0
        while not stop.wait(0.5):
            if not feeding.is_set():
                continue
            number += 1
            land(ctx, f"feed-{number:04d}", [(f"feed-{number}", at(32 + 2 * number))])

    threads = [threading.Thread(target=stream), threading.Thread(target=feed)]
    for thread in threads:
        thread.start()
    try:
        # Past the stream's first (slowest) micro-batches, so it commits while the batch runs.
        wait_until(lambda: ctx.stats.component("sessionize").batches >= 2,
                   "the stream's first micro-batches", 180)
        started = datetime.now(UTC)
        feeding.set()
        run = run_batch(ctx, BatchRequest("all"))
        ended = datetime.now(UTC)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=300)
    assert not failures, failures
    assert run.metric_rows > 0
    speed_commits = DeltaTable.forPath(ctx.spark, METRICS_TABLE.path(ctx.layout)).history() \
        .where(F.col("userMetadata").contains('"writer"')
               & F.col("timestamp").between(started, ended)).count()
    assert speed_commits >= 1, "the stream wrote gold while the batch layer replaced its rows"
