"""Two replicas under faults: `make chaos ARGS='--standby'`'s harness with two faults on a
small stream (files source): the leader paused past its lease, then the new leader killed.
Each failover comes within the target, the paused leader steps down the moment it wakes
and writes nothing of its old epoch, and after the drain the serving store equals a
crash-free single run key by key, every row carrying the epoch that wrote it."""

from pathlib import Path

import pytest
from bench.standby_chaos import StandbySettings, passed, run_standby_chaos
from pyspark.sql import SparkSession

pytestmark = pytest.mark.slow


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
