"""``maintain`` on the deployment's own tables: what it keeps, what it removes, and that it
changes nothing a reader or the running pipeline sees."""

import threading
from datetime import timedelta
from pathlib import Path

import pytest
from delta.tables import DeltaTable

from abstream.config import MonitoredComponentSettings
from abstream.generator.write import GeneratorSettings, generate
from abstream.io.tables import EVENTS_TABLE, ensure_table
from abstream.maintain.run import maintain
from abstream.speed import COMPONENTS, pipeline_components
from abstream.speed.runner import run_continuously, run_once
from tests.helpers import (
    assert_speed_layer_matches_reference,
    beacon,
    dumps,
    landing_records,
    reconfigure,
    wait_until,
    write_lines,
)

pytestmark = pytest.mark.long_module

TS = "2026-01-05T10:00:00.000Z"


def _ingest(ctx, name: str, events: int) -> None:
    write_lines(Path(ctx.layout.landing), f"{name}.jsonl",
                [dumps(beacon(f"{name}-{i}", TS)) for i in range(events)])
    run_once(ctx, [COMPONENTS["ingest"]])


def _read_events(ctx, checkpoint: Path, copy: Path) -> int:
    """A downstream job: bronze to a copy of its own, all available input; rows copied."""
    ctx.spark.readStream.format("delta").load(ctx.layout.events).writeStream \
        .format("delta").option("checkpointLocation", str(checkpoint)) \
        .trigger(availableNow=True).start(str(copy)).awaitTermination()
    return ctx.spark.read.format("delta").load(str(copy)).count()


def _removed_files(ctx) -> set[Path]:
    """The data files bronze's log has removed (as OPTIMIZE leaves them, before VACUUM)."""
    live = {Path(p.removeprefix("file:")) for p in
            ctx.spark.read.format("delta").load(ctx.layout.events).inputFiles()}
    return {p for p in Path(ctx.layout.events).glob("event_date=*/*.parquet")} - live


def _events_report(reports):
    return next(r for r in reports if r.table == "events")


def test_files_a_lagging_reader_needs_are_kept_until_it_caught_up(ctx, tmp_path):
    checkpoint, copy = tmp_path / "downstream", tmp_path / "copy"
    ctx = reconfigure(ctx, "maintain", retention_margin=timedelta(0))
    ctx = reconfigure(ctx, "monitor", include_own=False, components=[
        MonitoredComponentSettings(name="downstream", checkpoint=str(checkpoint),
                                   source=ctx.layout.events)])
    ensure_table(ctx.spark, EVENTS_TABLE, ctx.layout)
    # The table's own retention lets VACUUM take removed files at once.
    ctx.spark.sql(f"ALTER TABLE delta.`{ctx.layout.events}` SET TBLPROPERTIES "
                  "('delta.deletedFileRetentionDuration' = 'interval 0 hours')")
    _ingest(ctx, "a", 30)
    assert _read_events(ctx, checkpoint, copy) == 30
    _ingest(ctx, "b", 20)
    _ingest(ctx, "c", 10)  # the downstream job has not read b and c yet
    history = DeltaTable.forPath(ctx.spark, ctx.layout.events).history().count()

    planned = _events_report(maintain(ctx.spark, ctx.config, dry_run=True))
    assert [(c.label, c.small_files) for c in planned.candidates] == [
        ("event_date=2026-01-05", 3)]
    assert not planned.compacted and planned.live_after is None
    assert DeltaTable.forPath(ctx.spark, ctx.layout.events).history().count() == history, \
        "a dry run commits nothing"

    done = _events_report(maintain(ctx.spark, ctx.config))
    (compaction,) = done.compacted
    assert (compaction.files_removed, compaction.files_added) == (3, 1)
    assert (done.live_before.files, done.live_after.files) == (3, 1)
    assert done.retention.bound_by == "downstream" and done.retention.hours is None
    assert done.vacuumed is None, "the downstream job still needs the compacted files"
    needed = _removed_files(ctx)
    assert len(needed) == 3
    assert done.stored_after.files == 4
    unsafe = ctx.spark.sql(f"VACUUM delta.`{ctx.layout.events}` RETAIN 0 HOURS DRY RUN").count()
    assert unsafe == 3, "the table's own retention alone would have taken them"

    assert _read_events(ctx, checkpoint, copy) == 60, "the reader still finds every file"
    caught_up = _events_report(maintain(ctx.spark, ctx.config))
    assert caught_up.retention.hours == 0 and caught_up.retention.bound_by is None
    assert caught_up.vacuumed.files == 3 and caught_up.vacuumed.bytes > 0
    assert not any(path.exists() for path in needed)
    assert caught_up.stored_after.files == caught_up.live_after.files == 1


def test_maintain_beside_the_running_pipeline_changes_no_result(ctx):
    ctx = reconfigure(ctx, "ingest", trigger=timedelta(milliseconds=300), max_files_per_trigger=1)
    ctx = reconfigure(ctx, "sessionize", trigger=timedelta(milliseconds=300))
    landing = Path(ctx.layout.landing)
    settings = GeneratorSettings(events=1_500, seed=11, late_rate=0.0, malformed_rate=0.01,
                                 file_events=250)
    staging = ctx.layout.local().parent / "staging"
    generate(settings, staging)
    files = sorted(staging.glob("beacons-*"))
    stop, errors, reports = threading.Event(), [], []

    def run() -> None:
        try:
            run_continuously(ctx, pipeline_components(ctx.config), stop)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    runner = threading.Thread(target=run)
    runner.start()
    try:
        for number, path in enumerate(files):
            write_lines(landing, path.name, path.read_text().splitlines())
            wait_until((Path(ctx.layout.checkpoint("ingest")) / "commits" / str(number)).exists,
                       f"ingest to take file {number}", timeout=300)
            if number == 3:
                reports.extend(maintain(ctx.spark, ctx.config))
    finally:
        stop.set()
        runner.join(timeout=300)
    assert not runner.is_alive() and not errors
    run_once(ctx, pipeline_components(ctx.config))

    compacted = [c for r in reports for c in r.compacted if not c.skipped]
    assert compacted and sum(c.files_removed for c in compacted) > len(compacted), \
        "maintain compacted while the pipeline wrote"
    assert_speed_layer_matches_reference(ctx, landing_records(landing))
