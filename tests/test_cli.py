"""The command line as a user meets it: real processes, real output."""

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from abstream.io.latest_rows import LatestRows
from tests.servers import free_port, pushgateway

ABSTREAM = [sys.executable, "-m", "abstream"]


def _run(args, env=None, timeout=60, **kwargs):
    return subprocess.run([*ABSTREAM, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})}, check=False, **kwargs)


def test_help_lists_the_commands():
    result = _run(["--help"])
    assert result.returncode == 0
    for command in ("generate", "run", "demo", "batch", "serving", "report", "lag", "exporter",
                    "maintain", "jars"):
        assert command in result.stdout


@pytest.mark.parametrize(("args", "env", "message"), [
    (["run"], {"ABSTREAM__SESSIONIZE__GAP": "soon"}, "config: sessionize.gap:"),
    (["run", "--config", "/nonexistent.yaml"], {}, "cannot read config file"),
    (["run", "--once", "ingset"], {}, "unknown component 'ingset'"),
    (["generate", "--events", "10", "--effect", "happiness=0.1"], {}, "unknown effect"),
    (["batch", "--from", "2026-01-05T00:00Z"], {}, "--from and --to go together"),
    (["batch", "--from", "2026-01-06", "--to", "2026-01-05"], {}, "--from must come before --to"),
    (["batch", "--all"], {"ABSTREAM__BATCH__CHUNK": "0 hours"}, "config: batch:"),
    (["report", "--html", "/nonexistent/report.html"], {}, "folder /nonexistent does not"),
    (["report"], {"ABSTREAM__REPORT__ALLOCATION": "{exp: {control: 0}}"},
     "weights must be positive"),
    (["maintain", "--dry-run"], {"ABSTREAM__MAINTAIN__ATTEMPTS": "0"},
     "config: maintain.attempts:"),
    (["report", "--by", "device"], {}, "--by device: no such dimension in metrics.dimensions "
                                       "(none is declared)"),
    (["report", "--by", "planet"], {"ABSTREAM__METRICS__DIMENSIONS": "[{name: device, "
                                    "property: device}]"},
     "--by planet: no such dimension in metrics.dimensions (device)"),
    (["report", "--by", "device", "--publish"], {"ABSTREAM__METRICS__DIMENSIONS": "[{name: "
                                                "device, property: device}]"},
     "--by and --publish"),
    (["metrics"], {"ABSTREAM__METRICS__DEFINITIONS": "[{name: x, kind: mean}]"},
     "config: metrics.definitions.0: give events (a filter)"),
    (["generate", "--events", "10", "--effect", "conversion=0.1@device=watch"], {},
     "limited to device=watch: no such segment"),
])
def test_user_errors_are_one_line_without_a_stack_trace(tmp_path, args, env, message):
    result = _run([*args, "--data-dir", str(tmp_path)], env=env)
    assert result.returncode == 2
    assert message in result.stderr
    assert result.stderr.strip().count("\n") == 0, result.stderr
    assert "Traceback" not in result.stderr and "at org.apache" not in result.stderr


def test_serving_sql_defines_the_view_for_a_metastore(tmp_path):
    result = _run(["serving", "--sql", "--name", "ab.serving", "--data-dir", str(tmp_path)])
    assert result.returncode == 0, result.stderr
    sql = result.stdout
    assert sql.startswith("CREATE OR REPLACE VIEW ab.serving AS")
    assert f"delta.`{tmp_path}/tables/experiment_metrics`" in sql
    assert f"delta.`{tmp_path}/tables/batch_coverage`" in sql


def test_argument_errors_come_from_argparse(tmp_path):
    result = _run(["generate", "--events", "10", "--effect", "conversion"])
    assert result.returncode == 2
    assert "expected METRIC=LIFT" in result.stderr


def test_generate_writes_landing_files_and_reports_them(tmp_path):
    result = _run(["generate", "--events", "2500", "--seed", "3", "--file-events", "1000",
                   "--data-dir", str(tmp_path), "--json"])
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["records"] == 2500
    assert summary["records"] == summary["events"] + summary["duplicates"] + \
        summary["malformed"]
    files = sorted((tmp_path / "landing").glob("beacons-*.jsonl"))
    assert len(files) == 3
    assert sum(len(f.read_text().splitlines()) for f in files) == 2500


@pytest.mark.slow
def test_demo_prints_a_table_a_reconciliation_and_json_figures(tmp_path):
    result = _run(["demo", "--events", "4000", "--data-dir", str(tmp_path / "demo"), "--json"],
                  timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.strip().splitlines()
    figures = json.loads(lines[-1])
    for key in ("events_generated", "bronze_rows", "rejected_rows", "duplicate_rows", "visits",
                "gold_rows", "elapsed_seconds"):
        assert key in figures
    assert figures["events_generated"] == 4000
    assert figures["reconciled"] is True
    assert figures["events_generated"] == figures["bronze_rows"] + figures["rejected_rows"] + \
        figures["duplicate_rows"]
    assert figures["visits"] > 0 and figures["gold_rows"] > 0
    assert figures["batch"]["events"] == figures["bronze_rows"], "the batch layer saw it all"
    headers = [line for line in lines
               if line.startswith(("checkout_button /", "search_ranking /", "homepage_banner /"))]
    assert len(headers) == 6 and all(": final;" in line for line in headers), headers
    assert {e["experiment_id"] for e in figures["report"]["experiments"]} == {
        "checkout_button", "search_ranking", "homepage_banner"}
    assert any(line.startswith("reconciliation:") and "[ok]" in line for line in lines)
    assert "ingest     batch 0" in result.stderr, "progress is shown"
    published = LatestRows(str(tmp_path / "demo" / "tables" / "experiment_results")).rows()
    assert sorted((r["experiment_id"], r["population"]) for r in published
                  if r["kind"] == "experiment" and r["document"]) == sorted(
        (e["experiment_id"], e["population"]) for e in figures["report"]["experiments"])
    assert any(line.startswith("published: `abstream serve`") for line in lines)


@pytest.mark.slow
def test_maintain_reports_per_table_and_as_json(spark, tmp_path):
    from abstream.io.tables import EVENTS_TABLE, ensure_table
    from abstream.layout import Layout
    from abstream.maintain.run import maintain
    from tests.helpers import make_config

    ensure_table(spark, EVENTS_TABLE, Layout.of(tmp_path))
    json_run = _run(["maintain", "--json", "--data-dir", str(tmp_path)], timeout=300)
    assert json_run.returncode == 0, json_run.stderr[-3000:]
    assert "maintain: events done in" in json_run.stderr, "progress is shown per table"
    reports = json.loads(json_run.stdout.strip().splitlines()[-1])
    assert [(r["table"], r["exists"]) for r in reports] == [
        ("events", True), ("rejected", False), ("sessions", False),
        ("experiment_metrics", False), ("definition_metrics", False)]
    assert reports[0]["vacuumed"] == {"files": 0, "bytes": 0}
    assert "never run" in reports[0]["retention"]["reason"]
    text = "\n".join(report.text()
                     for report in maintain(spark, make_config(tmp_path), dry_run=True))
    assert "events (dry run): 0 files (0 B) live, 0 files (0 B) stored" in text
    assert "would compact 0 closed partitions" in text
    assert "retention 168 h: the table's own delta.deletedFileRetentionDuration" in text
    assert "sessions: no table yet" in text


def test_demo_never_wipes_a_folder_it_did_not_make(tmp_path):
    (tmp_path / "precious.txt").write_text("keep")
    refused = _run(["demo", "--data-dir", str(tmp_path)])
    assert refused.returncode == 2 and "not made by a demo" in refused.stderr
    assert (tmp_path / "precious.txt").read_text() == "keep"


@pytest.mark.slow
def test_run_serves_metrics_pushes_them_and_stops_cleanly_on_sigterm(tmp_path):
    data = tmp_path / "data"
    generated = _run(["generate", "--events", "300", "--data-dir", str(data)])
    assert generated.returncode == 0
    port = free_port()
    with pushgateway(tmp_path) as gateway:
        process = subprocess.Popen(
            [*ABSTREAM, "run", "ingest", "--data-dir", str(data)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "ABSTREAM__INGEST__TRIGGER": "1 second",
                 "ABSTREAM__MONITOR__EXPORTER__PORT": str(port),
                 "ABSTREAM__MONITOR__PUSHGATEWAY": gateway})
        log = data / "tables" / "events" / "_delta_log"
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not any(log.glob("*0001.json")):
            assert process.poll() is None, process.communicate()
            time.sleep(0.5)
        metrics, expected = "", 'abstream_query_input_rows_total{job="ingest"} 300.0'
        while time.monotonic() < deadline and expected not in metrics:
            metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics",
                                             timeout=5).read().decode()
            time.sleep(0.5)
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=120)
        pushed = urllib.request.urlopen(f"http://{gateway}/metrics", timeout=5).read().decode()
    assert process.returncode == 0, stderr[-3000:]
    assert "finishing the current micro-batch" in stderr
    assert re.search(r"ingest: \d+ batches, 300 rows in", stderr), stderr[-2000:]
    assert re.search(r"ingest: .*; time by step: parse and check [\d.]+ s, "
                     r"recent ids [\d.]+ s, find repeats", stderr)
    assert Path(data / "checkpoints" / "ingest" / "commits" / "0").exists()
    assert 'abstream_component_lag_seconds{component="ingest"' in metrics
    assert expected in metrics
    assert 'abstream_query_input_rows_total{data_dir=' in pushed
