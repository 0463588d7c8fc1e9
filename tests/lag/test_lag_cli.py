"""`abstream lag` as a user runs it, on another Spark job's checkpoint declared in config."""

import json
import os
import subprocess
import sys
import time

from tests.lag.test_delta_lag import STEP, T0, Table


def test_lag_json_for_any_spark_job(spark, tmp_path):
    table = Table(spark, tmp_path / "orders")
    table.commit(10, 1)
    checkpoint = tmp_path / "their-job-checkpoint"
    table.read(checkpoint)
    table.commit(10, 2)
    config = tmp_path / "abstream.yaml"
    config.write_text(
        "monitor:\n  include_own: false\n  components:\n"
        f"    - {{name: their_job, checkpoint: {checkpoint}, source: {table.path}, "
        "slo: 1 hour}\n")
    result = subprocess.run(
        [sys.executable, "-m", "abstream", "lag", "--config", str(config), "--json"],
        capture_output=True, text=True, timeout=60, check=False, env=dict(os.environ))
    assert result.returncode == 0, result.stderr
    (row,) = json.loads(result.stdout)
    assert row["component"] == "their_job"
    assert row["status"] == "behind"
    assert row["oldest_unprocessed_version"] == 1
    assert row["oldest_unprocessed_commit_ts"] == "2025-06-15T15:16:40.000Z"
    assert row["unprocessed_versions"] == 1
    assert row["unprocessed_bytes"] == sum(table.sizes[1])
    assert row["last_processed_version"] == 0 and row["latest_version"] == 1
    assert row["lag_seconds"] >= time.time() - (T0 + STEP) - 1

    text = subprocess.run(
        [sys.executable, "-m", "abstream", "lag", "--config", str(config)],
        capture_output=True, text=True, timeout=60, check=False)
    assert "their_job" in text.stdout and "behind" in text.stdout
