import json
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from abstream.io.tables import (
    DEFINITIONS_TABLE,
    EVENTS_TABLE,
    METRICS_TABLE,
    SESSIONS_TABLE,
    ensure_table,
    read_table,
)
from abstream.schemas import EVENTS
from abstream.speed import COMPONENTS
from abstream.speed.progress import ENGINE, OTHER
from abstream.speed.runner import run_once
from tests.helpers import bronze_frame, bronze_row, reconfigure

pytestmark = pytest.mark.long_module

T0 = datetime(2026, 1, 5, 10, 0)
ENTRIES = [("exp", "control", False)]


def _bronze(rows):
    """Bronze rows of (id, session, ts)."""
    return [bronze_row(event_id, ts, session_id=session, visitor_id="v", experiments=ENTRIES,
                       page_load_ms=100) for event_id, session, ts in rows]


def _append(ctx, rows):
    """One bronze commit (one micro-batch with maxFilesPerTrigger=1): (id, session, ts)."""
    path = ensure_table(ctx.spark, EVENTS_TABLE, ctx.layout)
    bronze_frame(ctx.spark, _bronze(rows)).coalesce(1).write.format("delta") \
        .mode("append").save(path)


def _state(ctx) -> Path:
    """Sessionize's state snapshots."""
    return Path(ctx.layout.checkpoint("sessionize")) / "state"


def _visits(ctx):
    rows = read_table(ctx.spark, SESSIONS_TABLE, ctx.layout).collect()
    return sorted((r["session_id"], r["events"]) for r in rows)


def test_session_boundary_holds_across_micro_batches(ctx):
    ctx = reconfigure(ctx, "sessionize", max_files_per_trigger=1, lateness=timedelta(0))
    gap = timedelta(minutes=35)
    _append(ctx, [("a1", "exact", T0), ("b1", "over", T0)])
    _append(ctx, [("a2", "exact", T0 + gap), ("b2", "over", T0 + gap + timedelta(milliseconds=1))])
    _append(ctx, [("z", "later", T0 + timedelta(hours=5))])
    run_once(ctx, [COMPONENTS["sessionize"]])
    assert _visits(ctx) == [("exact", 2), ("over", 1), ("over", 1)]
    assert ctx.stats.component("sessionize").batches >= 3


def test_events_behind_the_watermark_are_dropped_and_counted(ctx):
    ctx = reconfigure(ctx, "sessionize", max_files_per_trigger=1)
    _append(ctx, [("a", "s1", T0 + timedelta(hours=3))])
    _append(ctx, [("b", "s2", T0 + timedelta(hours=6))])
    _append(ctx, [("late", "s3", T0)])
    run_once(ctx, [COMPONENTS["sessionize"]])
    assert ctx.stats.component("sessionize").late_rows_dropped == 1
    stats = ctx.stats.as_dict()["sessionize"]
    assert stats["state_rows"] == 1, "the event of s2 is held: its visit is still open"
    assert ("s3", 1) not in _visits(ctx)
    assert stats["input_rows"] == 3, "each micro-batch reads its bronze events once"


def test_a_commit_read_in_part_makes_none_of_its_events_late(ctx):
    """An ingest commit holds a file per event date; a micro-batch that ends between them
    (maxFilesPerTrigger) must not let the later date's events make the earlier's late."""
    ctx = reconfigure(ctx, "sessionize", max_files_per_trigger=1, lateness=timedelta(0))
    midnight = datetime(2026, 1, 6)
    _append(ctx, [("a", "s1", midnight - timedelta(hours=2))])
    # One commit of two files, written by one task each: the later date's first.
    later, earlier = (_bronze([row]) for row in (("c", "s3", midnight + timedelta(hours=1)),
                                                 ("b", "s2", midnight - timedelta(hours=1))))
    ctx.spark.createDataFrame(ctx.spark.sparkContext.parallelize(later + earlier, 2), EVENTS) \
        .write.format("delta").mode("append").save(ctx.layout.events)
    commit = max((Path(ctx.layout.events) / "_delta_log").glob("*.json"))
    adds = [json.loads(line)["add"] for line in commit.read_text().splitlines()
            if '"add"' in line]
    assert [add["partitionValues"]["event_date"] for add in adds] == ["2026-01-06", "2026-01-05"]
    run_once(ctx, [COMPONENTS["sessionize"]])
    assert ctx.stats.component("sessionize").batches == 3, "one file a micro-batch"
    assert ctx.stats.component("sessionize").late_rows_dropped == 0
    # Read whole, the commit moves the watermark to its latest event (1:00, no lateness):
    # the visits of 22:00 and 23:00 closed, the one of 1:00 is open.
    assert _visits(ctx) == [("s1", 1), ("s2", 1)]


def _units_by_window(ctx):
    """The speed layer's units of a definition per window, assigned, overall."""
    rows = read_table(ctx.spark, DEFINITIONS_TABLE, ctx.layout) \
        .where("metric = 'conversion_rate' AND population = 'assigned' AND dimension IS NULL") \
        .groupBy("window_start") \
        .agg(F.hll_sketch_estimate(F.hll_union_agg("units_sketch")).alias("units"))
    return {r["window_start"]: r["units"] for r in rows.collect() if r["units"]}


def test_a_unit_counts_once_the_watermark_has_passed_where_its_visit_starts(ctx):
    """An event behind the latest but ahead of the watermark moves the start of a visit
    sessionized before into the window before: the visit's unit counts in that window
    alone, once the watermark has passed its start (no event accepted after can move it)."""
    ctx = reconfigure(ctx, "sessionize", max_files_per_trigger=1,
                      lateness=timedelta(minutes=15))
    minute = timedelta(minutes=1)
    _append(ctx, [("s2", "s", T0 + 22 * minute)])
    _append(ctx, [("x", "x", T0 + 31 * minute)])
    _append(ctx, [("s1", "s", T0 + 17 * minute)])
    run_once(ctx, [COMPONENTS["sessionize"]])
    assert ctx.stats.component("sessionize").late_rows_dropped == 0
    assert _units_by_window(ctx) == {}, "the watermark (10:16) has passed no visit's start"
    _append(ctx, [("z", "later", T0 + timedelta(hours=5))])
    run_once(ctx, [COMPONENTS["sessionize"]])
    assert _units_by_window(ctx) == {T0 + 15 * minute: 1, T0 + 30 * minute: 1}, \
        "s counts where it starts now (10:17), not where it started first (10:22); " \
        "the visit at 15:00 is ahead of the watermark (14:45)"


def test_a_visit_open_across_many_micro_batches_is_one_visit(ctx):
    ctx = reconfigure(ctx, "sessionize", max_files_per_trigger=1, lateness=timedelta(0))
    step = timedelta(minutes=30)
    for i in range(6):
        _append(ctx, [(f"long{i}", "long", T0 + i * step), (f"other{i}", f"o{i}", T0 + i * step)])
    _append(ctx, [("z", "later", T0 + timedelta(hours=9))])
    run_once(ctx, [COMPONENTS["sessionize"]])
    assert ("long", 6) in _visits(ctx)
    assert len(_visits(ctx)) == 7
    stats = ctx.stats.as_dict()["sessionize"]
    assert stats["peak_state_rows"] == 8, "long's six events and the two visits before it"
    assert stats["state_rows"] == 1, "only the visit at +9 h is still open"
    assert set(stats["step_seconds"]) == {"touched visits", "events snapshot", "visits",
                                          "open snapshot", "untouched facts",
                                          "untouched closing", "silver append", "gold append",
                                          "definitions append", OTHER, ENGINE}
    assert ctx.stats.component("sessionize").batches >= 7


def _assigned_events(ctx):
    """Gold's events of the assigned population, all windows and micro-batches together."""
    rows = read_table(ctx.spark, METRICS_TABLE, ctx.layout) \
        .where("population = 'assigned'").agg(F.sum("events"), F.sum("visits")).first()
    return rows[0], rows[1]


def _carried_then_touched(ctx):
    """Open visits untouched for micro-batches, one touched again, one closing untouched."""
    minutes = [timedelta(minutes=m) for m in range(0, 60, 10)]
    _append(ctx, [("i1", "idle", T0), ("i2", "idle", T0 + minutes[1]),
                  ("q1", "quiet", T0), ("b1", "busy", T0)])
    _append(ctx, [("b2", "busy", T0 + minutes[2])])
    _append(ctx, [("b3", "busy", T0 + minutes[3]), ("i3", "idle", T0 + minutes[4])])
    _append(ctx, [("b4", "busy", T0 + minutes[5])])


@pytest.mark.parametrize(("generations", "copied_into", "kept"), [
    # idle is open in 2, busy in 3; busy's row in 1, superseded, is kept until it would
    # close (+55 min), and 0 until the snapshot after the one that referred to it.
    (8, [], ["batch=0", "batch=1", "batch=2", "batch=3"]),
    # One snapshot at most: each micro-batch copies the open visits of the one before.
    (1, ["batch=2", "batch=3"], ["batch=2", "batch=3"]),
])
def test_open_visits_are_carried_untouched_and_touched_again(ctx, generations, copied_into,
                                                              kept):
    """Untouched visits stay in the snapshot that sessionized them (up to ``generations``
    snapshots), or those of the oldest snapshot are copied into the newest one."""
    ctx = reconfigure(ctx, "sessionize", max_files_per_trigger=1, lateness=timedelta(0),
                      state_generations=generations)
    _carried_then_touched(ctx)
    run_once(ctx, [COMPONENTS["sessionize"]])
    assert _visits(ctx) == [("quiet", 1)], "quiet closed at +50 min without a new event"
    state = _state(ctx)
    assert sorted(p.name for p in state.glob("batch=*")) == kept
    copied = sorted(p.parent.name for p in state.glob("batch=*/carried_events"))
    assert copied == copied_into
    _append(ctx, [("z", "later", T0 + timedelta(hours=5))])
    run_once(ctx, [COMPONENTS["sessionize"]])
    assert _visits(ctx) == [("busy", 4), ("idle", 3), ("quiet", 1)]
    assert _assigned_events(ctx) == (9, 3), "each event and each closed visit counted once"


def test_past_the_limit_only_the_oldest_snapshot_is_copied(ctx):
    ctx = reconfigure(ctx, "sessionize", max_files_per_trigger=1, lateness=timedelta(0),
                      state_generations=2)
    minute = timedelta(minutes=1)
    _append(ctx, [("a1", "A", T0), ("c1", "C", T0)])
    _append(ctx, [("b1", "B", T0 + minute)])
    _append(ctx, [("d1", "D", T0 + 2 * minute)])
    run_once(ctx, [COMPONENTS["sessionize"]])
    state = _state(ctx)
    carried = ctx.spark.read.parquet(str(state / "batch=2" / "carried_events"))
    assert sorted(r["session_id"] for r in carried.collect()) == ["A", "C"], \
        "the third snapshot takes in the first one's open visits, not the second one's"
    _append(ctx, [("a2", "A", T0 + 3 * minute)])
    _append(ctx, [("z", "later", T0 + timedelta(hours=5))])
    run_once(ctx, [COMPONENTS["sessionize"]])
    assert _visits(ctx) == [("A", 2), ("B", 1), ("C", 1), ("D", 1)]
    assert _assigned_events(ctx) == (6, 4), "each event and each closed visit counted once"


def test_a_visit_untouched_for_micro_batches_is_read_where_it_was_written(ctx):
    ctx = reconfigure(ctx, "sessionize", max_files_per_trigger=1, lateness=timedelta(0))
    _append(ctx, [("i1", "idle", T0), ("b1", "busy", T0)])
    for minutes in (5, 10, 15):
        _append(ctx, [(f"b{minutes}", "busy", T0 + timedelta(minutes=minutes))])
    run_once(ctx, [COMPONENTS["sessionize"]])
    state = _state(ctx)
    assert sorted(p.name for p in state.glob("batch=*")) == \
        ["batch=0", "batch=1", "batch=2", "batch=3"], "every row still open by its end"
    assert not list(state.glob("batch=*/carried_events")), "nothing copied"
    _append(ctx, [("i2", "idle", T0 + timedelta(minutes=20))])
    _append(ctx, [("z", "later", T0 + timedelta(hours=5))])
    run_once(ctx, [COMPONENTS["sessionize"]])
    assert _visits(ctx) == [("busy", 4), ("idle", 2)]
    assert _assigned_events(ctx) == (7, 2)


def _rewrite_snapshot(snapshot: Path, rows, tmp_path: Path, info) -> None:
    """Replace the open visits of ``snapshot`` with ``rows``, and its completion file with
    what ``info`` makes of it, as an earlier layout wrote them."""
    rows.coalesce(1).write.parquet(str(tmp_path / "open_visits"))
    shutil.rmtree(snapshot / "open_visits")
    shutil.move(tmp_path / "open_visits", snapshot / "open_visits")
    done = snapshot / "_abstream_state.json"
    done.write_text(json.dumps(info(json.loads(done.read_text()))))
    (snapshot / f".{done.name}.crc").unlink()


@pytest.mark.parametrize("kept", [
    ("session_id", "visit_start", "experiments"),
    ("session_id", "visit_start", "visit_end", "events", "experiments", "generation"),
], ids=["entries only", "without measures"])
def test_state_of_partial_visits_is_sessionized_again(ctx, tmp_path, kept):
    """A snapshot written before open visits were kept whole (before they kept their end
    and events, and before the events of untouched visits were carried apart): its open
    visits are sessionized again."""
    ctx = reconfigure(ctx, "sessionize", max_files_per_trigger=1, lateness=timedelta(0))
    _append(ctx, [("i1", "idle", T0), ("i2", "idle", T0 + timedelta(minutes=10)),
                  ("b1", "busy", T0)])
    run_once(ctx, [COMPONENTS["sessionize"]])
    state = _state(ctx)
    (snapshot,) = state.glob("batch=*")
    old = ctx.spark.read.parquet(str(snapshot / "open_visits")).select(*kept)
    _rewrite_snapshot(snapshot, old, tmp_path, lambda info: {"seen_until": info["seen_until"]})
    shutil.rmtree(snapshot / "superseded")
    _append(ctx, [("b2", "busy", T0 + timedelta(minutes=20))])
    _append(ctx, [("z", "later", T0 + timedelta(hours=5))])
    run_once(ctx, [COMPONENTS["sessionize"]])
    assert _visits(ctx) == [("busy", 2), ("idle", 2)]
    assert _assigned_events(ctx) == (5, 2)


def test_a_snapshot_writes_only_the_visits_it_sessionized(ctx):
    """An open visit's row is written by the snapshot that sessionized it, whole, and read
    from there until its session is sessionized again (the later snapshot lists the session
    as superseded) or the visit closes."""
    ctx = reconfigure(ctx, "sessionize", max_files_per_trigger=1, lateness=timedelta(0))
    _carried_then_touched(ctx)
    run_once(ctx, [COMPONENTS["sessionize"]])
    state = _state(ctx)

    def rows(batch, part):
        return sorted(tuple(r) for r in ctx.spark.read.parquet(
            str(state / f"batch={batch}" / part)).select(
            "session_id", *(("generation", "events") if part == "open_visits"
                            else ("visit_start",))).collect())

    assert rows(3, "open_visits") == [("busy", 3, 4)], "idle is not written again"
    assert rows(2, "open_visits") == [("busy", 2, 3), ("idle", 2, 3)], \
        "busy's row of batch 2 stays, superseded"
    assert rows(3, "superseded") == [("busy", None)]
    done = state / "batch=3" / "_abstream_state.json"
    info = json.loads(done.read_text())
    assert info["held_rows"] == 7, "idle's three events and busy's four"

    def micros(minutes):
        return int((T0 + timedelta(minutes=minutes)).replace(tzinfo=UTC).timestamp() * 1e6)

    assert info["spans"] == {"1": [micros(0), micros(20), micros(20)],
                             "2": [micros(0), micros(30), micros(40)],
                             "3": [micros(0), micros(50), micros(50)]}, \
        "each snapshot's rows: their earliest start, earliest and latest end"
    # As the version before wrote it: the next micro-batch reads the spans from the rows.
    done.write_text(json.dumps({**info, "spans": None}))
    (state / "batch=3" / f".{done.name}.crc").unlink()
    _append(ctx, [("z", "later", T0 + timedelta(hours=5))])
    run_once(ctx, [COMPONENTS["sessionize"]])
    assert _visits(ctx) == [("busy", 4), ("idle", 3), ("quiet", 1)]
    assert _assigned_events(ctx) == (9, 3), "each event and each closed visit counted once"


def test_a_snapshot_of_the_earlier_layout_is_copied_whole_and_goes_on(ctx, tmp_path):
    """A snapshot of the layout before (every open visit listed in each, by key where
    another snapshot holds it whole) is carried on: the next micro-batch copies its open
    visits into its own snapshot, whole, with their events."""
    ctx = reconfigure(ctx, "sessionize", max_files_per_trigger=1, lateness=timedelta(0))
    _carried_then_touched(ctx)
    run_once(ctx, [COMPONENTS["sessionize"]])
    state = _state(ctx)
    latest = state / "batch=3"
    kept = ctx.spark.read.parquet(str(latest / "open_visits"))
    idle = ctx.spark.read.parquet(str(state / "batch=2" / "open_visits")) \
        .where("session_id = 'idle'")
    narrow = idle.select(*(F.col(c) if c in ("session_id", "visit_start", "visit_end",
                                             "events", "generation")
                           else F.lit(None).cast(kept.schema[c].dataType).alias(c)
                           for c in kept.columns))
    _rewrite_snapshot(latest, kept.unionByName(narrow), tmp_path,
                      lambda info: {**info, "form": 1})
    shutil.rmtree(latest / "superseded")
    _append(ctx, [("i4", "idle", T0 + timedelta(minutes=55))])
    run_once(ctx, [COMPONENTS["sessionize"]])
    assert sorted(p.name for p in (state / "batch=4").iterdir() if p.is_dir()) == \
        ["carried_events", "events", "open_visits", "superseded"]
    copied = ctx.spark.read.parquet(str(state / "batch=4" / "open_visits"))
    assert sorted((r["session_id"], r["generation"], r["events"]) for r in copied.collect()) \
        == [("busy", 4, 4), ("idle", 4, 4)], "both whole in batch 4, idle touched again"
    _append(ctx, [("z", "later", T0 + timedelta(hours=5))])
    run_once(ctx, [COMPONENTS["sessionize"]])
    assert _visits(ctx) == [("busy", 4), ("idle", 4), ("quiet", 1)]
    assert _assigned_events(ctx) == (10, 3), "each event and each closed visit counted once"


def test_a_first_start_on_a_snapshot_makes_none_of_its_events_late(ctx):
    """A bronze with a Delta checkpoint is read from its snapshot, file by file in order of
    modification time: a later date's file written first must not make the earlier date's
    events, in a file written after it, late."""
    ctx = reconfigure(ctx, "sessionize", max_files_per_trigger=1, lateness=timedelta(0))
    midnight = datetime(2026, 1, 6)
    path = ensure_table(ctx.spark, EVENTS_TABLE, ctx.layout)
    ctx.spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES "
                  "('delta.checkpointInterval' = '1')")
    _append(ctx, [("c", "s3", midnight + timedelta(hours=1))])
    _append(ctx, [("b", "s2", midnight - timedelta(hours=1))])
    assert (Path(path) / "_delta_log" / "_last_checkpoint").exists()
    run_once(ctx, [COMPONENTS["sessionize"]])
    assert ctx.stats.component("sessionize").batches == 2, "one file a micro-batch"
    assert ctx.stats.component("sessionize").late_rows_dropped == 0
    # Read whole, the snapshot moves the watermark to its latest event (1:00): the visit of
    # 23:00 closed, the one of 1:00 is open.
    assert _visits(ctx) == [("s2", 1)]
