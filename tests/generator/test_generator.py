import json
import time
from collections import defaultdict
from datetime import datetime

import pytest

from abstream.errors import UsageError
from abstream.generator.faults import MALFORMED_KINDS
from abstream.generator.model import segment_of
from abstream.generator.write import GeneratorSettings, generate
from tests.reference import valid_event

GAP_MS = 35 * 60 * 1000


def _lines(folder):
    return [line for path in sorted(folder.glob("beacons-*.jsonl"))
            for line in path.read_text().splitlines()]


def _ms(ts):
    return int(datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp() * 1000)


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    folder = tmp_path_factory.mktemp("landing")
    summary = generate(GeneratorSettings(events=30_000, seed=11, file_events=4_000), folder)
    return folder, summary, _lines(folder)


def test_writes_exactly_the_records_asked_for_and_accounts_for_each(sample):
    folder, summary, lines = sample
    assert len(lines) == summary.records == 30_000
    assert summary.records == summary.events + summary.duplicates + summary.malformed
    assert len(summary.files) == 8
    assert not list(folder.glob(".*")), "no temporary files are left behind"
    valid = [json.loads(line) for line in lines if _is_event(line)]
    assert len({e["event_id"] for e in valid}) == summary.events
    assert len(valid) == summary.events + summary.duplicates


def _is_event(line):
    return valid_event(line) is not None


def test_same_settings_same_bytes_other_seed_other_bytes(tmp_path):
    one = generate(GeneratorSettings(events=3_000, seed=5), tmp_path / "a")
    two = generate(GeneratorSettings(events=3_000, seed=5), tmp_path / "b")
    other = generate(GeneratorSettings(events=3_000, seed=6), tmp_path / "c")
    assert one.files == two.files
    assert _lines(tmp_path / "a") == _lines(tmp_path / "b")
    assert _lines(tmp_path / "a") != _lines(tmp_path / "c")
    assert other.records == 3_000


def test_clickstream_has_what_sessionization_and_metrics_need(sample):
    _, summary, lines = sample
    events = [json.loads(line) for line in lines if _is_event(line)]
    by_session = defaultdict(list)
    sessions_by_visitor = defaultdict(set)
    for e in events:
        by_session[e["session_id"]].append(_ms(e["event_ts"]))
        sessions_by_visitor[e["visitor_id"]].add(e["session_id"])
    gaps = [b - a for times in by_session.values()
            for a, b in zip(sorted(times), sorted(times)[1:], strict=False)]
    assert any(g > GAP_MS for g in gaps), "some session_ids hold two visits"
    assert any(20 * 60_000 < g < GAP_MS for g in gaps), "long pauses inside a visit"
    assert any(g == GAP_MS for g in gaps), "a pause of exactly 35 minutes"
    assert sum(len(s) > 1 for s in sessions_by_visitor.values()) > 100, "returning visitors"
    assert set(summary.events_by_type) == {"pageview", "add_to_cart", "order", "error"}
    orders = [e for e in events if e["type"] == "order"]
    assert all(e["revenue"] > 0 and e["units"] >= 1 for e in orders)
    assert all(e["page_load_ms"] > 0 for e in events if e["type"] == "pageview")
    entries = {(x["id"], x["variant"]) for e in events for x in e["experiments"]}
    assert {("checkout_button", "control"), ("checkout_button", "treatment"),
            ("search_ranking", "treatment_b"), ("homepage_banner", "control")} <= entries
    qualified = [x["qualified"] for e in events for x in e["experiments"]]
    assert any(qualified) and not all(qualified)


def test_late_events_arrive_after_later_events_and_duplicates_repeat_lines(sample):
    _, summary, lines = sample
    events = [json.loads(line) for line in lines if _is_event(line)]
    times = [_ms(e["event_ts"]) for e in events]
    running_max, late = 0, 0
    for t in times:
        if t < running_max - 5 * 60_000:
            late += 1
        running_max = max(running_max, t)
    assert summary.late > 0 and late >= summary.late * 0.5
    valid_lines = [line for line in lines if _is_event(line)]
    assert len(valid_lines) - len(set(valid_lines)) == summary.duplicates


def test_every_kind_of_malformed_record_is_produced(tmp_path):
    summary = generate(GeneratorSettings(events=5_000, seed=3, malformed_rate=0.2), tmp_path)
    assert set(summary.malformed_by_kind) == set(MALFORMED_KINDS)


def _orders_per_variant(effects, folder) -> dict[str | None, float]:
    """Treatment's orders over control's in checkout_button: of all visitors (None) and of
    each device's."""
    generate(GeneratorSettings(events=120_000, seed=21, effects=effects,
                               malformed_rate=0, duplicate_rate=0), folder)
    counts = defaultdict(int)
    for line in _lines(folder):
        e = json.loads(line)
        if e["type"] == "order":
            variant = next(x["variant"] for x in e["experiments"]
                           if x["id"] == "checkout_button")
            counts[(None, variant)] += 1
            counts[(e["device"], variant)] += 1
    return {device: counts[(device, "treatment")] / counts[(device, "control")]
            for device in (None, "desktop", "mobile", "tablet")}


def test_planted_conversion_effect_shows_in_the_treatment(tmp_path):
    plain = _orders_per_variant({}, tmp_path / "plain")[None]
    lifted = _orders_per_variant({"conversion": 0.3}, tmp_path / "lifted")[None]
    assert 0.85 < plain < 1.15
    assert 1.15 < lifted / plain < 1.5


def test_an_effect_limited_to_a_segment_shows_in_its_visitors_only(tmp_path):
    ratios = _orders_per_variant({"conversion@device=mobile": 0.6}, tmp_path)
    assert ratios["mobile"] > 1.3
    assert 0.8 < ratios["desktop"] < 1.2


def test_a_visitor_has_one_device_and_country_from_its_id_and_nothing_else_changes(sample):
    _, _, lines = sample
    segments: dict[str, set] = defaultdict(set)
    for line in lines:
        event = valid_event(line)
        if event is not None:
            segments[event["visitor_id"]].add((event["device"], event["country"]))
    assert all(len(values) == 1 for values in segments.values())
    devices = defaultdict(int)
    for values in segments.values():
        devices[next(iter(values))[0]] += 1
    assert set(devices) == {"desktop", "mobile", "tablet"}
    assert 0.45 < devices["desktop"] / len(segments) < 0.55
    visitor, (device, country) = next((v, next(iter(s))) for v, s in segments.items())
    assert (segment_of(visitor, "device"), segment_of(visitor, "country")) == (device, country)


def test_rate_paces_the_writing(tmp_path):
    began = time.monotonic()
    summary = generate(GeneratorSettings(events=600, seed=2, rate=300), tmp_path)
    elapsed = time.monotonic() - began
    assert summary.records == 600
    assert len(summary.files) == 2
    assert 1.7 < elapsed < 5


@pytest.mark.parametrize(("settings", "message"), [
    (GeneratorSettings(events=0), "generator: events must be a positive"),
    (GeneratorSettings(events=10, rate=0), "generator: rate must be"),
    (GeneratorSettings(events=10, duplicate_rate=1.5),
     r"generator: duplicate_rate must be in \[0, 1\)"),
    (GeneratorSettings(events=10, effects={"happiness": 0.1}), "unknown effect 'happiness'"),
    (GeneratorSettings(events=10, effects={"conversion": -1}), "greater than -1"),
    (GeneratorSettings(events=10, effects={"conversion@device=watch": 0.1}),
     r"limited to device=watch: no such segment \(device: desktop, mobile, tablet; "),
    (GeneratorSettings(events=10, effects={"conversion@planet=mars": 0.1}),
     "limited to planet=mars: no such segment"),
])
def test_bad_settings_are_one_clear_error(tmp_path, settings, message):
    with pytest.raises(UsageError, match=message):
        generate(settings, tmp_path)


def test_refuses_to_write_the_same_beacons_twice(tmp_path):
    generate(GeneratorSettings(events=100, seed=1), tmp_path)
    with pytest.raises(UsageError, match="already holds the beacons of these settings"):
        generate(GeneratorSettings(events=100, seed=1), tmp_path)
