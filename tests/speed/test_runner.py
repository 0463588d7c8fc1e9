import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest

from abstream.config import load_config
from abstream.errors import UsageError
from abstream.io.tables import EVENTS_TABLE, read_table
from abstream.speed import COMPONENTS, select
from abstream.speed.runner import ADAPTIVE, continuous_conf, run_continuously, run_once
from tests.helpers import beacon, blocks_held, dumps, reconfigure, wait_until, write_lines

TS = "2026-01-05T10:00:00.000Z"


def _committed(checkpoint, kind):
    return {int(p.name) for p in (checkpoint / kind).iterdir() if p.name.isdigit()}


def test_runs_until_stopped_then_finishes_the_batch_in_flight(ctx):
    ctx = reconfigure(ctx, "ingest", trigger=timedelta(milliseconds=500))
    stop = threading.Event()
    errors = []

    def run():
        try:
            run_continuously(ctx, [COMPONENTS["ingest"]], stop)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    def bronze_rows():
        return read_table(ctx.spark, EVENTS_TABLE, ctx.layout).count()

    held = blocks_held(ctx.spark)
    runner = threading.Thread(target=run)
    runner.start()
    try:
        write_lines(Path(ctx.layout.landing), "small.jsonl",
                    [dumps(beacon(f"a{i}", TS)) for i in range(20)])
        wait_until(lambda: bronze_rows() == 20, "the first file to be ingested")
        assert ctx.spark.conf.get(ADAPTIVE) == "false", "a continuous run plans statically"
        write_lines(Path(ctx.layout.landing), "large.jsonl",
                    [dumps(beacon(f"b{i}", TS)) for i in range(60_000)])
        wait_until(lambda: any(q.status["isTriggerActive"] and q.status["isDataAvailable"]
                              for q in ctx.spark.streams.active), "a busy micro-batch")
    finally:
        stop.set()
        runner.join(timeout=180)
    assert not runner.is_alive()
    assert not errors
    assert not ctx.spark.streams.active
    assert bronze_rows() == 60_020, "the batch in flight was finished, not abandoned"
    assert ctx.spark.conf.get(ADAPTIVE) == "true", "and the session is as it was"
    assert blocks_held(ctx.spark) == held, "what the query kept is let go of"
    checkpoint = Path(ctx.layout.checkpoint("ingest"))
    assert _committed(checkpoint, "offsets") == _committed(checkpoint, "commits")


def test_a_run_whose_micro_batches_outlast_its_trigger_stops_after_the_one_in_flight(ctx):
    """With a trigger shorter than its micro-batches, a query starts the next one the
    moment one ends: stopping waits for the micro-batch in flight, not for the input to
    run out."""
    ctx = reconfigure(ctx, "ingest", trigger=timedelta(milliseconds=100),
                      max_files_per_trigger=1)
    files = 10
    for number in range(files):
        write_lines(Path(ctx.layout.landing), f"f{number:02d}.jsonl",
                    [dumps(beacon(f"f{number}-{i}", TS)) for i in range(200)])
    checkpoint = Path(ctx.layout.checkpoint("ingest"))
    stop = threading.Event()
    runner = threading.Thread(target=run_continuously,
                              args=(ctx, [COMPONENTS["ingest"]], stop))
    runner.start()
    try:
        wait_until(lambda: (checkpoint / "commits").is_dir()
                   and bool(_committed(checkpoint, "commits")), "the first micro-batch", 180)
    finally:
        done_when_asked = len(_committed(checkpoint, "commits"))
        stop.set()
        runner.join(timeout=180)
    assert not runner.is_alive()
    assert not ctx.spark.streams.active
    committed = len(_committed(checkpoint, "commits"))
    # The stop is seen within half a second; one more may have ended by then.
    assert done_when_asked <= committed <= done_when_asked + 2, \
        f"{committed} micro-batches committed, {done_when_asked} when asked to stop"
    assert read_table(ctx.spark, EVENTS_TABLE, ctx.layout).count() == 200 * committed < \
        200 * files


def test_components_are_chosen_by_name_in_pipeline_order():
    files = load_config(environ={})
    assert [c.name for c in select(["sessionize", "ingest"], files)] == ["ingest",
                                                                         "sessionize"]
    assert [c.name for c in select([], files)] == ["ingest", "sessionize"]
    with pytest.raises(UsageError, match="unknown component 'ingset'"):
        select(["ingset"], files)
    kafka = load_config(environ={"ABSTREAM__SOURCE": "kafka"})
    assert [c.name for c in select([], kafka)] == ["validate", "archive", "sessionize"]
    with pytest.raises(UsageError, match="'ingest' for source kafka; choose from validate"):
        select(["ingest"], kafka)


def test_a_run_with_nothing_new_returns_at_once(ctx):
    write_lines(Path(ctx.layout.landing), "one.jsonl", [dumps(beacon("once", TS))])
    run_once(ctx, [COMPONENTS["ingest"]])
    began = time.monotonic()
    run_once(ctx, [COMPONENTS["ingest"]])
    # A trigger that finds no new input runs no micro-batch: there is no progress to wait
    # for (the wait for a batch's progress gives up after 30 s).
    assert time.monotonic() - began < 10


def test_a_continuous_run_plans_statically_unless_the_user_says_otherwise():
    assert continuous_conf(load_config(environ={})) == {ADAPTIVE: "false"}
    chosen = load_config(environ={"ABSTREAM__SPARK__CONF": f'{{"{ADAPTIVE}": "true"}}'})
    assert continuous_conf(chosen) == {}
