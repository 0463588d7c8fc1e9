"""The batch layer on real Delta tables: range edges, idempotency, --since-last."""

from datetime import UTC, datetime, timedelta

import pytest
from pyspark.sql import functions as F

from abstream.batch.coverage import latest_coverage
from abstream.batch.layer import BatchRequest, run_batch
from abstream.batch.ranges import TimeRange
from abstream.io.tables import (
    COVERAGE_TABLE,
    EVENTS_TABLE,
    METRICS_TABLE,
    SESSIONS_TABLE,
    read_table,
)
from abstream.serving.view import serving_view
from abstream.speed import COMPONENTS
from abstream.speed.runner import run_once
from tests.batch.timeline import at, ingest
from tests.helpers import blocks_held, reconfigure

pytestmark = pytest.mark.long_module


def batch_visits(ctx) -> dict[str, tuple[datetime, datetime, int]]:
    rows = read_table(ctx.spark, SESSIONS_TABLE, ctx.layout).where("layer = 'batch'").select(
        "session_id", F.unix_micros("visit_start").alias("start"),
        F.unix_micros("visit_end").alias("end"), "events").collect()
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    return {f"{r.session_id}@{(epoch + timedelta(microseconds=r.start)):%H:%M}":
            (epoch + timedelta(microseconds=r.start), epoch + timedelta(microseconds=r.end),
             r.events) for r in rows}


def test_visits_at_range_edges_are_whole_and_counted_once(ctx):
    long_visit = [("long", at(10, 30) + timedelta(minutes=30 * i)) for i in range(27)]
    ingest(ctx, "edges", [
        ("exact-gap", at(9, 25)), ("exact-gap", at(10, 0)), ("exact-gap", at(10, 10)),
        ("split", at(9, 58)), ("split", at(10, 40)),
        *long_visit,
    ])
    run_batch(ctx, BatchRequest("range", at(10), at(11)))
    after_first = batch_visits(ctx)
    # 35 minutes exactly is one visit, and it started before the range: not the range's.
    assert sorted(after_first) == ["long@10:30", "split@10:40"]
    # A 13-hour visit runs past the 12-hour look-ahead: the rest of bronze is read.
    assert after_first["long@10:30"] == (at(10, 30), at(23, 30), 27)

    run_batch(ctx, BatchRequest("range", at(9), at(10)))
    visits = batch_visits(ctx)
    assert sorted(visits) == ["exact-gap@09:25", "long@10:30", "split@09:58", "split@10:40"]
    assert visits["exact-gap@09:25"] == (at(9, 25), at(10, 10), 3)
    gold = read_table(ctx.spark, METRICS_TABLE, ctx.layout) \
        .where("layer = 'batch' AND population = 'assigned'")
    assert gold.agg(F.sum("visits")).first()[0] == 4
    assert gold.agg(F.sum("events")).first()[0] == 6, "the events in 09:00-11:00 only"


def _table_rows(ctx, spec):
    frame = read_table(ctx.spark, spec, ctx.layout)
    return sorted(frame.drop("computed_at").collect(), key=str)


def test_rerunning_a_range_leaves_identical_tables(ctx):
    ingest(ctx, "rerun", [("a", at(1)), ("a", at(1, 20)), ("b", at(1, 50)), ("c", at(2, 30))])
    request = BatchRequest("range", at(0), at(3))
    held = blocks_held(ctx.spark)
    run_batch(ctx, request)
    assert blocks_held(ctx.spark) == held, "a chunk's cached and on-disk frames are released"
    sessions, gold = _table_rows(ctx, SESSIONS_TABLE), _table_rows(ctx, METRICS_TABLE)
    assert len(sessions) == 3 and gold

    again = run_batch(ctx, request)
    assert again.visits == 3
    assert _table_rows(ctx, SESSIONS_TABLE) == sessions
    assert _table_rows(ctx, METRICS_TABLE) == gold
    assert len(latest_coverage(ctx.spark, ctx.layout)) == 1
    assert read_table(ctx.spark, COVERAGE_TABLE, ctx.layout).count() == 2, "both runs recorded"


def test_since_last_takes_closed_ranges_then_only_what_changed(ctx):
    ctx = reconfigure(ctx, "batch", chunk=timedelta(hours=1), chunk_events=1,
                      closed_after=timedelta(hours=1))
    ingest(ctx, "hourly", [(f"s{hour}", at(hour)) for hour in range(7)])

    first = run_batch(ctx, BatchRequest("since_last"))
    # Data ends at 06:00; ranges closed an hour before that: up to 05:00.
    assert first.ranges == [TimeRange(at(0), at(5))]
    assert first.chunks == 5 and first.visits == 5

    assert run_batch(ctx, BatchRequest("since_last")).ranges == [], "nothing new"

    # A late event into a computed hour, and new data that closes one more hour.
    ingest(ctx, "late", [("late", at(2, 10)), ("s7", at(7))])
    third = run_batch(ctx, BatchRequest("since_last"))
    assert third.ranges == [TimeRange(at(2), at(3)), TimeRange(at(5), at(6))]
    assert third.visits == 2 + 1
    assert sorted(batch_visits(ctx)) == sorted(
        [f"s{hour}@{hour:02d}:00" for hour in range(6)] + ["late@02:10"])


def test_serving_view_serves_batch_rows_where_covered_and_speed_rows_elsewhere(ctx):
    ingest(ctx, "serving", [("a", at(1)), ("b", at(2)), ("c", at(3)), ("d", at(9))])
    run_once(ctx, [COMPONENTS["sessionize"]])
    assert {r.final for r in serving_view(ctx.spark, ctx.layout).collect()} == {False}

    run_batch(ctx, BatchRequest("range", at(0), at(2)))
    rows = serving_view(ctx.spark, ctx.layout).where("population = 'assigned'").collect()
    by_hour = {(r.window_start.hour, r.layer, r.final) for r in rows}
    assert {(1, "batch", True), (2, "speed", False), (3, "speed", False)} <= by_hour
    assert not any(r.window_start.hour < 2 and r.layer == "speed" for r in rows)
    assert not any(r.window_start.hour >= 2 and r.layer == "batch" for r in rows)
    assert ctx.spark.sql("SELECT count(*) FROM abstream_serving").first()[0] == len(
        serving_view(ctx.spark, ctx.layout).collect()), "registered as a temporary view"


def test_an_explicit_range_stops_at_the_end_of_the_data(ctx):
    ingest(ctx, "ends", [("a", at(8, 30)), ("b", at(9))])
    clamped = run_batch(ctx, BatchRequest("range", at(8), at(12)))
    assert clamped.ranges == [TimeRange(at(8), at(9, 5))], "not into hours with no data yet"
    assert run_batch(ctx, BatchRequest("range", at(10), at(12))).ranges == []


def test_a_range_with_no_event_in_its_windows_is_computed_and_covered(ctx):
    """Events around it, none in it: the chunk's gold query has nothing to join."""
    ingest(ctx, "quiet", [("a", at(8)), ("b", at(11))])
    result = run_batch(ctx, BatchRequest("range", at(9), at(9, 15)))
    assert (result.chunks, result.events, result.metric_rows) == (1, 0, 0)
    assert [c.range for c in latest_coverage(ctx.spark, ctx.layout)] == \
        [TimeRange(at(9), at(9, 15))]


def test_duplicates_that_passed_the_stream_are_counted_once(ctx):
    ingest(ctx, "dupes", [("a", at(1)), ("a", at(1, 10)), ("b", at(1, 20))])
    events = read_table(ctx.spark, EVENTS_TABLE, ctx.layout)
    # A repeat arriving after ingest.dedupe_window is in bronze twice.
    events.where("session_id = 'a'").write.format("delta").mode("append") \
        .save(ctx.layout.events)
    assert read_table(ctx.spark, EVENTS_TABLE, ctx.layout).count() == 5
    run_batch(ctx, BatchRequest("all"))
    assert batch_visits(ctx)["a@01:00"] == (at(1), at(1, 10), 2)
    gold = read_table(ctx.spark, METRICS_TABLE, ctx.layout) \
        .where("layer = 'batch' AND population = 'assigned'")
    assert gold.agg(F.sum("events"), F.sum("visits")).first() == (3, 2)
