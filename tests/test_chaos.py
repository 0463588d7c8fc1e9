"""kill -9 and pauses under a steady stream: `make chaos`'s harnesses, small (files source).

One module, so that `make test`'s processes run the two one after the other: each is timed
against its targets, and two such runs side by side on two cores miss them.

- A few kills, the first while bronze is being created. The speed layer's tables equal a
  crash-free run's, the batch layer killed mid-chunk and run again equals an uninterrupted
  one, and the PostgreSQL serving store, written while killed and through an outage of
  PostgreSQL, equals the serving view. (`make chaos` also runs `batch --all` on both sides
  and checks the serving views against the plain-Python reference; the suite leaves that to
  the tests of the layers.)
- Two replicas under two faults (`make chaos ARGS='--standby'`): the leader paused past its
  lease, then the new leader killed. Each failover comes within the target, the paused
  leader steps down the moment it wakes and writes nothing of its old epoch, and after the
  drain the serving store equals a crash-free single run key by key, every row carrying the
  epoch that wrote it."""

from pathlib import Path

import pytest
from bench.chaos import ChaosSettings, run_chaos
from bench.standby_chaos import StandbySettings, passed, run_standby_chaos
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


def test_failovers_lose_double_and_let_through_nothing(spark: SparkSession,
                                                       tmp_path: Path) -> None:
    result = run_standby_chaos(StandbySettings(
        work=tmp_path, faults=2, events=600, rate=25.0, wait=(0.5, 2.0),
        kinds=("pause_leader", "kill_leader"), ordered=True, batch=False))
    assert result["fault_counts"] == {"pause_leader": 1, "kill_leader": 1}
    assert result["failovers"] == 2, "the paused and the killed leader were replaced"
    assert result["max_failover_seconds"] <= 30.0, "the target with the default lease"
    assert result["grants"] >= 3, "the first leader, and one per failover at least"
    paused = next(f for f in result["fault_log"] if f["kind"] == "pause_leader")
    assert paused["stepped_down_after_cont_seconds"] <= 6.0
    assert result["keys"] > 1_000
    assert result["row_epochs"] and all(
        1 <= epoch <= result["drain_epoch"] for epoch in result["row_epochs"]), \
        "every row carries the epoch of the leader that wrote it"
    assert (result["stale_writes"], result["lost_keys"], result["extra_keys"],
            result["mismatched_keys"], result["epoch_went_back"]) == (0, 0, 0, 0, 0)
    assert result["replica_speed_mismatched_keys"] == {"a": 0, "b": 0}
    assert result["replica_mismatched_keys"] == {"a": 0, "b": 0}
    assert passed(result)
