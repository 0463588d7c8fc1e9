"""A failed component is restarted with backoff until its budget of restarts runs out."""

from __future__ import annotations

import logging
import threading
from datetime import timedelta
from pathlib import Path

import pytest
from pyspark.errors import StreamingQueryException

from abstream.config import RunSettings
from abstream.errors import ComponentFailed, UsageError, root_cause
from abstream.io.tables import EVENTS_TABLE, read_table
from abstream.speed import COMPONENTS
from abstream.speed.runner import run_continuously, run_once
from abstream.speed.supervision import Supervisor
from tests.helpers import beacon, dumps, immutable, reconfigure, wait_until, write_lines

TS = "2026-01-05T10:00:00.000Z"


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def _settings(**values: object) -> RunSettings:
    return RunSettings.model_validate(values)


def test_the_pause_doubles_up_to_its_ceiling_and_the_budget_is_per_window():
    clock = Clock()
    supervisor = Supervisor(_settings(max_restarts=4, restart_window="10 minutes",
                                      restart_backoff="1 s", restart_backoff_max="5 s"),
                            clock)
    cause = RuntimeError("java.io.IOException: No space left on device")
    assert [supervisor.failed("ingest", cause) for _ in range(4)] == [1.0, 2.0, 4.0, 5.0]
    assert supervisor.failed("sessionize", cause) == 1.0, "each component has its own"
    with pytest.raises(ComponentFailed) as failed:
        supervisor.failed("ingest", cause)
    assert failed.value.component == "ingest" and failed.value.cause is cause
    assert str(failed.value) == "ingest failed 5 times in a row: IOException: No space left " \
                                "on device"
    clock.now += 601
    assert supervisor.failed("ingest", cause) == 1.0, "failures out of the window are forgiven"


def test_a_usage_error_is_not_restarted():
    supervisor = Supervisor(_settings(max_restarts=5))
    cause = RuntimeError("Traceback ...\nabstream.errors.UsageError: the state of micro-batch "
                         "3 is missing")
    with pytest.raises(ComponentFailed, match=r"^sessionize failed: UsageError: the state of "
                                              r"micro-batch 3 is missing$"):
        supervisor.failed("sessionize", cause)


def test_restart_settings_are_checked():
    with pytest.raises(ValueError, match="restart_backoff_max must not be below"):
        _settings(restart_backoff="10 s", restart_backoff_max="1 s")
    with pytest.raises(ValueError, match="greater than or equal to 0"):
        _settings(max_restarts=-1)


def _supervised(ctx, **run: object):
    ctx = reconfigure(ctx, "ingest", trigger=timedelta(milliseconds=200))
    return reconfigure(ctx, "run", **run)


def _events_log(ctx) -> Path:
    return Path(ctx.layout.events) / "_delta_log"


def test_a_component_that_fails_while_a_table_is_read_only_resumes_once_it_is_writable(
        ctx, caplog):
    ctx = _supervised(ctx, max_restarts=6, restart_backoff=timedelta(milliseconds=300))
    write_lines(Path(ctx.layout.landing), "a.jsonl", [dumps(beacon("a", TS))])
    run_once(ctx, [COMPONENTS["ingest"]])
    write_lines(Path(ctx.layout.landing), "b.jsonl", [dumps(beacon(f"b{i}", TS))
                                                      for i in range(5)])
    stop, errors = threading.Event(), []

    def run() -> None:
        try:
            run_continuously(ctx, [COMPONENTS["ingest"]], stop)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    runner = threading.Thread(target=run)
    with caplog.at_level(logging.WARNING, logger="abstream"):
        with immutable(_events_log(ctx)):
            runner.start()
            wait_until(lambda: "restart 1 of 6" in caplog.text, "a failure and a restart",
                       timeout=300)
        try:
            wait_until(lambda: read_table(ctx.spark, EVENTS_TABLE, ctx.layout).count() == 6,
                       "the restarted query to write bronze", timeout=300)
        finally:
            stop.set()
            runner.join(timeout=120)
    assert not errors
    assert "ingest failed: FileNotFoundException: " in caplog.text
    assert "(Operation not permitted); restart 1 of 6 in 0.3 s" in caplog.text


def test_past_its_restarts_a_run_ends_with_the_component_and_the_cause(ctx):
    ctx = _supervised(ctx, max_restarts=1, restart_backoff=timedelta(milliseconds=100))
    write_lines(Path(ctx.layout.landing), "a.jsonl", [dumps(beacon("a", TS))])
    run_once(ctx, [COMPONENTS["ingest"]])
    write_lines(Path(ctx.layout.landing), "b.jsonl", [dumps(beacon("b", TS))])
    with immutable(_events_log(ctx)), pytest.raises(ComponentFailed) as continuous:
        run_continuously(ctx, [COMPONENTS["ingest"]], threading.Event())
    with immutable(_events_log(ctx)), pytest.raises(ComponentFailed) as once:
        run_once(ctx, [COMPONENTS["ingest"]])
    for failed in (continuous.value, once.value):
        assert failed.component == "ingest" and failed.failures == 2
        assert isinstance(failed.cause, StreamingQueryException)
        assert str(failed).startswith("ingest failed 2 times in a row: FileNotFoundException: ")
        assert str(failed).endswith("(Operation not permitted)")
        assert root_cause(failed.cause) in str(failed)
    assert not ctx.spark.streams.active
    run_once(ctx, [COMPONENTS["ingest"]])
    assert read_table(ctx.spark, EVENTS_TABLE, ctx.layout).count() == 2, "nothing was lost"


def test_root_cause_names_what_went_wrong_not_what_wrapped_it():
    assert root_cause(UsageError("plain")) == "plain"
    wrapped = RuntimeError("[STREAM_FAILED] Query terminated with exception: boom\n"
                           "py4j.protocol.Py4JJavaError: An error occurred while calling o1\n"
                           "Caused by: org.apache.spark.SparkException: Job aborted\n"
                           "Caused by: java.io.IOException: No space left on device\n")
    assert root_cause(wrapped) == "IOException: No space left on device"
    terminated = "[STREAM_FAILED] Query [id = 1, runId = 2] terminated with exception: "
    assert root_cause(RuntimeError(f"{terminated}java.io.IOException: No space left on "
                                   f"device SQLSTATE: XXKST")) == \
        "IOException: No space left on device"
    assert root_cause(RuntimeError(f"{terminated}[DELTA_X] odd SQLSTATE: XXKST")) == \
        "[DELTA_X] odd"
