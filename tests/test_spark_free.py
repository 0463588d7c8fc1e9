"""The commands that need no Spark run and exit cleanly in a process that cannot import
pyspark: ``lag`` and ``exporter`` read the pipeline's checkpoints, Delta logs and published
results themselves, and stopping the CLI never loads pyspark to look for a session."""

import json
import signal
import subprocess
import time
import urllib.request

from tests.helpers import WITHOUT_SPARK
from tests.servers import free_port


def test_lag_runs_without_pyspark(beacons_run):
    done = subprocess.run([*WITHOUT_SPARK, "lag", "--json", "--data-dir",
                           str(beacons_run.config.data_dir)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert {row["component"] for row in rows} == {"ingest", "sessionize"}


def test_the_exporter_serves_and_stops_without_pyspark(beacons_run):
    port = free_port()
    process = subprocess.Popen(
        [*WITHOUT_SPARK, "exporter", "--data-dir", str(beacons_run.config.data_dir),
         "--port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        metrics, deadline = "", time.monotonic() + 60
        while time.monotonic() < deadline and not metrics:
            assert process.poll() is None, process.communicate()
            try:
                metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics",
                                                 timeout=5).read().decode()
            except OSError:
                time.sleep(0.2)
    finally:
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=60)
    assert process.returncode == 0, stderr
    assert 'abstream_component_lag_seconds{component="sessionize"' in metrics
