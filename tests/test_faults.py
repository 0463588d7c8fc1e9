"""Faults of the machine and of its operators: each ends in one clear line or a recovery,
and once its cause is gone the tables equal a run that never met it."""

from __future__ import annotations

import os
import shutil
import threading
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from bench.chaos import Comparison, compare, compare_batch, speed_frames

from abstream.batch.layer import BatchRequest, run_batch
from abstream.errors import AbstreamError, ComponentFailed
from abstream.generator.write import GeneratorSettings, generate
from abstream.io.tables import RESULTS_TABLE, TABLES, read_table
from abstream.layout import Layout
from abstream.report.build import build_report
from abstream.report.publish import publish
from abstream.speed import COMPONENTS, pipeline_components
from abstream.speed.runner import run_continuously, run_once
from tests.helpers import (
    assert_speed_layer_matches_reference,
    landing_records,
    reconfigure,
    small_disk,
    wait_until,
)
from tests.io.test_tables import INTERRUPTED_CREATIONS, leave_half_created

pytestmark = pytest.mark.long_module

INGEST, SESSIONIZE = COMPONENTS["ingest"], COMPONENTS["sessionize"]
QUICK = timedelta(milliseconds=100)
FIRST_DAY = datetime(2026, 1, 5, tzinfo=UTC)


def _fill(disk: Path) -> Path:
    """A file that takes all the room left on ``disk``."""
    filler = disk / "filler"
    block = b"\0" * (1 << 16)
    with filler.open("wb") as out:
        try:
            while True:
                out.write(block)
                out.flush()
        except OSError:
            pass
    return filler


def _generated(ctx, events: int, seed: int, day: int = 0) -> list[str]:
    """Every record in the landing folder, once ``events`` more starting ``day`` days after
    the generator's first day are landed (visits run on for hours past their day's end: two
    days apart, no event of the later set is behind the watermark the earlier set left)."""
    landing = Path(ctx.layout.landing)
    generate(GeneratorSettings(events=events, seed=seed, late_rate=0.0, file_events=events // 2,
                               start=FIRST_DAY + timedelta(days=day)), landing)
    return landing_records(landing)


def test_a_full_disk_ends_the_run_in_one_line_and_once_freed_nothing_is_lost(ctx, tmp_path):
    with small_disk(tmp_path / "disk") as disk:
        ctx = replace(ctx, config=ctx.config.with_data_dir(disk / "data"),
                      layout=Layout.of(disk / "data"))
        ctx = reconfigure(ctx, "run", max_restarts=1, restart_backoff=QUICK)
        _generated(ctx, 1_500, seed=20)
        run_once(ctx, [INGEST])
        lines = _generated(ctx, 3_000, seed=21, day=2)
        filler = _fill(disk)
        with pytest.raises(ComponentFailed) as failed:
            run_once(ctx, [INGEST])
        assert failed.value.component == "ingest"
        assert str(failed.value).startswith("ingest failed 2 times in a row: ")
        assert str(failed.value).endswith("No space left on device")
        filler.unlink()
        run_once(ctx, pipeline_components(ctx.config))
        assert_speed_layer_matches_reference(ctx, lines)


def test_a_source_table_deleted_under_a_running_component_is_one_line_and_not_replaced(ctx):
    lines = _generated(ctx, 2_000, seed=22)
    run_once(ctx, [INGEST, SESSIONIZE])
    ctx = reconfigure(reconfigure(ctx, "run", max_restarts=1, restart_backoff=QUICK),
                      "sessionize", trigger=QUICK)
    bronze, away = Path(ctx.layout.events), Path(ctx.layout.root) / "events-moved-away"
    stop, ended = threading.Event(), []

    def run() -> None:
        try:
            run_continuously(ctx, [SESSIONIZE], stop)
        except AbstreamError as exc:
            ended.append(exc)

    runner = threading.Thread(target=run)
    runner.start()
    try:
        wait_until(lambda: any(q.name == "sessionize" for q in ctx.spark.streams.active),
                   "sessionize to run", timeout=300)
        bronze.rename(away)
        runner.join(timeout=300)
    finally:
        stop.set()
        runner.join(timeout=120)
    (error,) = ended
    assert str(error) == (f"sessionize: its source table {bronze} is gone, yet its checkpoint "
                          f"{ctx.layout.checkpoint('sessionize')} has read from it; restore "
                          f"the table, or delete the checkpoint to read a new one from its "
                          f"start")
    assert not bronze.exists(), "no empty table was made in its place"
    away.rename(bronze)
    run_once(ctx, [INGEST, SESSIONIZE])
    assert_speed_layer_matches_reference(ctx, lines)


def test_a_removed_landing_folder_is_made_again_and_later_files_are_ingested(ctx):
    ctx = reconfigure(reconfigure(ctx, "run", restart_backoff=QUICK), "ingest", trigger=QUICK)
    landing = Path(ctx.layout.landing)
    first = _generated(ctx, 1_000, seed=23)
    stop, errors = threading.Event(), []

    def run() -> None:
        try:
            run_continuously(ctx, [INGEST], stop)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    runner = threading.Thread(target=run)
    runner.start()
    try:
        ingested = ctx.stats.component("ingest")
        wait_until(lambda: ingested.input_rows >= len(first), "the first files", timeout=300)
        shutil.rmtree(landing)
        later = _generated(ctx, 1_000, seed=24, day=2)
        wait_until(lambda: ingested.input_rows >= len(first) + len(later),
                   "the files landed in the new folder", timeout=300)
    finally:
        stop.set()
        runner.join(timeout=120)
    assert not errors
    run_once(ctx, [SESSIONIZE])
    assert_speed_layer_matches_reference(ctx, first + later)


PUBLISHED = datetime(2026, 1, 9, tzinfo=UTC)


def _report_and_results(ctx, published: Layout) -> tuple[dict, list]:
    """``report --publish`` of ``ctx``'s tables into the ``published`` layout's results
    table: the report, and the rows published."""
    report = build_report(ctx.spark, ctx.layout, ctx.config)
    publish(ctx.spark, published, report, PUBLISHED)
    results = read_table(ctx.spark, RESULTS_TABLE, published).collect()
    return report.to_dict(), sorted(map(tuple, results), key=repr)


@pytest.fixture(scope="module")
def clean_run(beacons_run, tmp_path_factory):
    """The shared run over generated beacons, which no crash interrupted: its layout, report
    and the rows it publishes (into a data dir of its own: the shared one is read only)."""
    published = Layout.of(tmp_path_factory.mktemp("clean") / "data")
    return beacons_run.layout, *_report_and_results(beacons_run, published)


def test_tables_left_half_created_by_a_kill_are_created_again_by_run_batch_and_report(
        ctx, clean_run):
    """Every table as a kill during its creation leaves it (an empty log and staged commits
    only, alternating over the tables), then the whole pipeline: the same tables as a run
    that never met it."""
    layout, clean_report, clean_results = clean_run
    landing = Path(ctx.layout.landing)
    landing.mkdir(parents=True)
    for path in Path(layout.landing).iterdir():  # the same files, arrival times and all
        os.link(path, landing / path.name)
    states = list(INTERRUPTED_CREATIONS)[:2]
    for i, spec in enumerate(TABLES):
        leave_half_created(spec.path(ctx.layout), states[i % 2])

    run_once(ctx, pipeline_components(ctx.config))
    run_batch(ctx, BatchRequest("all"))
    report, results = _report_and_results(ctx, ctx.layout)

    comparison = Comparison()
    compare(comparison, "speed", speed_frames(ctx.spark, layout, "files"),
            speed_frames(ctx.spark, ctx.layout, "files"))
    compare_batch(comparison, "batch", ctx.spark, layout, ctx.layout)
    assert comparison.summary() == {"lost_rows": 0, "duplicate_rows": 0,
                                    "mismatched_tables": 0}, comparison.tables
    assert report == clean_report
    assert results == clean_results
