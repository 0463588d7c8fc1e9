"""The metrics endpoint's probes: /healthz while the process serves, /readyz while every
query it should run is active and no component is behind its lag objective."""

from __future__ import annotations

import os
import threading
import time
import urllib.error
import urllib.request
from datetime import timedelta
from pathlib import Path

from abstream.errors import AbstreamError
from abstream.monitor.exporter import Exporter
from abstream.speed import COMPONENTS
from abstream.speed.runner import run_continuously
from tests.helpers import beacon, dumps, make_config, reconfigure, wait_until, write_lines
from tests.servers import free_port

TS = "2026-01-05T10:00:00.000Z"


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def _serving(config) -> tuple[Exporter, str]:
    exporter = Exporter(config.model_copy(update={"monitor": config.monitor.model_copy(
        update={"exporter": config.monitor.exporter.model_copy(update={"port": free_port()})})}))
    host, port = exporter.serve()
    return exporter, f"http://{host}:{port}"


def test_readiness_follows_the_queries_of_a_running_pipeline(ctx):
    ctx = reconfigure(ctx, "ingest", trigger=timedelta(milliseconds=500))
    exporter, base = _serving(ctx.config)
    exporter.expect_queries(ctx.spark, ["ingest"])
    stop, errors = threading.Event(), []

    def run() -> None:
        try:
            run_continuously(ctx, [COMPONENTS["ingest"]], stop)
        except AbstreamError as exc:
            errors.append(exc)

    runner = threading.Thread(target=run)
    try:
        assert _get(f"{base}/readyz") == (503, "ingest: its query is not running\n")
        runner.start()
        write_lines(Path(ctx.layout.landing), "a.jsonl", [dumps(beacon("a", TS))])
        wait_until(lambda: _get(f"{base}/readyz")[0] == 200, "the pipeline to be ready")
        assert _get(f"{base}/healthz") == (200, "ok\n")
        assert "abstream_component_lag_seconds" in _get(f"{base}/metrics")[1]

        # The ingest query fails: not ready, but the process still serves.
        next(q for q in ctx.spark.streams.active if q.name == "ingest").stop()
        assert _get(f"{base}/readyz") == (503, "ingest: its query is not running\n")
        assert _get(f"{base}/healthz") == (200, "ok\n")
        runner.join(timeout=120)
        assert [str(e) for e in errors] == ["ingest stopped"]
    finally:
        stop.set()
        if runner.is_alive():
            runner.join(timeout=120)
        exporter.stop()


def test_readiness_fails_while_a_component_is_behind_its_objective(tmp_path):
    config = make_config(tmp_path / "data", monitor={"slo": "1 minute"})
    landing = Path(config.data_dir) / "landing"
    waiting = write_lines(landing, "old.jsonl", [dumps(beacon("a", TS))])
    hour_ago = time.time() - 3_600
    os.utime(waiting, (hour_ago, hour_ago))
    exporter, base = _serving(config)
    try:
        status, body = _get(f"{base}/readyz")
        assert status == 503
        assert body.startswith(f"ingest on {landing}: 3") and "(objective 60 s)" in body
        assert _get(f"{base}/healthz") == (200, "ok\n")
        waiting.unlink()
        assert _get(f"{base}/readyz") == (200, "ok\n")
    finally:
        exporter.stop()
