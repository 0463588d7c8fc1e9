import time

import pytest

from abstream.speed.progress import ENGINE, OTHER, RunStats


def test_steps_add_up_per_component_and_count_a_failed_call_too():
    stats = RunStats()
    slow = stats.timed("ingest", "parse", lambda seconds: time.sleep(seconds) or seconds)
    assert slow(0.05) == 0.05
    slow(0.05)
    with stats.step("ingest", "append"):
        time.sleep(0.02)
    with pytest.raises(ZeroDivisionError), stats.step("sessionize", "gold"):
        time.sleep(0.02)
        _ = 1 / 0
    steps = {name: figures["step_seconds"] for name, figures in stats.as_dict().items()}
    assert set(steps) == {"ingest", "sessionize"}
    assert set(steps["ingest"]) == {"parse", "append"}
    assert 0.1 <= steps["ingest"]["parse"] < 1
    assert 0.02 <= steps["ingest"]["append"] < steps["ingest"]["parse"]
    assert steps["sessionize"]["gold"] >= 0.02


def test_every_second_of_a_micro_batch_is_in_a_step():
    stats = RunStats()
    with stats.micro_batch("sessionize"):
        with stats.step("sessionize", "gold"):
            time.sleep(0.05)
        time.sleep(0.1)
    # The listener adds the engine's seconds meanwhile: they are not the function's.
    with stats.micro_batch("sessionize"):
        stats.progressed({"name": "sessionize", "batchId": 0,
                          "durationMs": {"triggerExecution": 1500, "addBatch": 1200}})
    steps = stats.component("sessionize").step_seconds
    assert 0.1 <= steps[OTHER] < 0.2
    assert 0.05 <= steps["gold"] < 0.1
    assert steps[ENGINE] == 0.3
