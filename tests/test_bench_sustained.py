"""`make bench-sustained`'s judgement of a steady state: the slopes it reports per hour, when
the state levelled off, and a live step landing the dataset round after round with new ids."""

import json
import random
from pathlib import Path

import numpy as np
import pytest
from bench.sustained import Feeder, Sample, Step, slope, steady_state, steps_by_window


def test_the_slope_per_hour_and_its_noise_are_a_least_squares_fit() -> None:
    rng = random.Random(7)
    points = [(t, 1_000.0 + 0.5 * t + rng.gauss(0, 40)) for t in range(0, 1800, 5)]
    fitted = slope(points)
    assert fitted is not None
    times, values = np.array(points).T
    (per_second, _), covariance = np.polyfit(times, values, 1, cov=True)
    assert fitted["per_hour"] == pytest.approx(per_second * 3600, rel=1e-6)
    assert fitted["noise_per_hour"] == pytest.approx(np.sqrt(covariance[0][0]) * 3600, rel=1e-3)
    assert fitted["per_hour"] == pytest.approx(1800, abs=4 * fitted["noise_per_hour"])
    assert slope(points[:2]) is None, "two points fit any line"


def _sample(at: float, rows: float) -> Sample:
    ended = {"sessionize": 4.0 if at % 30 else 10.0} if at % 10 == 0 else {}
    return Sample(at, 0, {"ingest": 5.0}, 10.0, {"sessionize": rows}, state_bytes=2**20,
                  rss_mb=1_500.0, batch_seconds=ended)


def test_a_state_that_grows_then_levels_off_is_flat_over_the_last_window() -> None:
    step = Step(5_000, passed=True, hold_seconds=3600.0)
    step.samples = [_sample(t, min(t, 1000.0) * 100) for t in range(0, 3605, 5)]
    found = steady_state(step, 1800.0)
    assert found["slope_window_seconds"] == 1800.0
    assert found["slopes_per_hour"]["state_rows"]["per_hour"] == 0.0
    assert found["slopes_per_hour"]["state_rows"]["mean"] == 100_000.0
    assert found["slopes_per_hour"]["batch_seconds"]["sessionize"]["points"] == 181
    assert found["slopes_per_hour"]["batch_seconds"]["ingest"] is None
    assert found["batch_seconds_median"] == {"ingest": None, "sessionize": 4.0}, \
        "the median: a third of the micro-batches took 10 s"
    assert found["levelled_at_seconds"] == 950, "95 % of the level"
    assert found["expected_state_rows"] == 5_000 * 3000


def test_a_live_step_lands_the_dataset_again_with_ids_of_its_round(tmp_path: Path) -> None:
    source, landing = tmp_path / "source", tmp_path / "landing"
    source.mkdir()
    landing.mkdir()
    line = {"event_id": "e1", "event_ts": "2026-01-05T00:00:00.000Z", "session_id": "s1",
            "visitor_id": "v1", "type": "pageview"}
    (source / "beacons-0.jsonl").write_text(json.dumps(line, separators=(",", ":")) + "\n")
    feeder = Feeder([source / "beacons-0.jsonl"], landing, rate=1000, live=True)
    for _ in range(3):
        feeder.land_one()
    assert not feeder.exhausted
    landed = {path.name: json.loads(path.read_text()) for path in landing.iterdir()}
    assert sorted(landed) == ["beacons-0-r1.jsonl", "beacons-0-r2.jsonl", "beacons-0.jsonl"]
    assert landed["beacons-0.jsonl"]["session_id"] == "s1"
    assert landed["beacons-0-r1.jsonl"]["session_id"] == "1-s1"
    assert landed["beacons-0-r2.jsonl"]["event_id"] == "2-e1"
    assert landed["beacons-0-r2.jsonl"]["visitor_id"] == "2-v1"
    replayed = Feeder([source / "beacons-0.jsonl"], tmp_path, rate=1000)
    replayed.land_one()
    assert replayed.exhausted, "replayed event times cannot come round again"


def test_each_step_s_seconds_a_micro_batch_are_split_by_window() -> None:
    samples = [Sample(float(t), 0, {}, 0.0, {}, batches={"sessionize": t / 10},
                      steps={"sessionize": {"visits": t / 10 * (1 if t <= 300 else 2),
                                            "gold append": t / 20}})
               for t in range(0, 601, 5)]
    windows = steps_by_window(samples, 300.0)
    assert [(w["from"], w["to"]) for w in windows] == [(0.0, 300.0), (300.0, 600.0)]
    assert windows[0]["components"] == {"sessionize": {
        "batches": 30.0, "seconds_per_batch": {"gold append": 0.5, "visits": 1.0}}}
    assert windows[1]["components"]["sessionize"]["seconds_per_batch"]["visits"] == 3.0, \
        "from 30 s of visits in 30 micro-batches to 120 s in 60"
    assert steps_by_window(samples[:1], 300.0) == []
