"""kill -9 under a steady stream: `make chaos`'s harness with a few kills on a small stream
(files source), the first while bronze is being created. The speed layer's tables equal a
crash-free run's, the batch layer killed mid-chunk and run again equals an uninterrupted
one, and the PostgreSQL serving store, written while killed and through an outage of
PostgreSQL, equals the serving view. (`make chaos` also runs `batch --all` on both sides and
checks the serving views against the plain-Python reference; the suite leaves that to the
tests of the layers.)"""

from pathlib import Path

import pytest
from bench.chaos import ChaosSettings, run_chaos
from pyspark.sql import SparkSession

pytestmark = pytest.mark.slow


def test_kill_9_of_the_speed_and_batch_layers_loses_and_duplicates_nothing(
        spark: SparkSession, tmp_path: Path) -> None:
    result = run_chaos(ChaosSettings(work=tmp_path, kills=2, events=800, rate=25.0,
                                     wait=(0.0, 6.0), startup_kills=1, store_outage=(5.0, 8.0),
                                     store_write_every="3 seconds", store_kills=1,
                                     batch_all=False))
    assert result["kills"] == 2
    assert result["kills_during_startup"] == 1, "the first start is killed creating bronze"
    assert result["startup_kills"][0]["aimed_at"] == "creating events"
    assert result["batch_killed_mid_chunk"]
    assert result["late_rows_dropped_crash_free"] == 0, "the stream is shaped for no drops"
    assert len(result["tables"]) == 13, "every table of both layers, the serving view and store"
    assert "gold_commits_during" in result["store_outage"], "PostgreSQL was down a while"
    assert result["kills_mid_store_write"] >= 1, "a kill aimed at an open store transaction"
    failed = {name: table for name, table in result["tables"].items()
              if table["lost"] or table["duplicate"]}
    assert not failed
    assert (result["lost_rows"], result["duplicate_rows"], result["mismatched_tables"]) == \
        (0, 0, 0)
