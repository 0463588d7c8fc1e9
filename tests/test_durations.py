from datetime import timedelta

import pytest

from abstream.durations import parse_duration, parse_interval, spark_interval


@pytest.mark.parametrize(("text", "expected"), [
    ("35 minutes", timedelta(minutes=35)),
    ("35min", timedelta(minutes=35)),
    ("1.5h", timedelta(minutes=90)),
    ("500 ms", timedelta(milliseconds=500)),
    ("2 days", timedelta(days=2)),
    ("1 microsecond", timedelta(microseconds=1)),
    (" 10 Seconds ", timedelta(seconds=10)),
])
def test_parses_durations_as_people_write_them(text, expected):
    assert parse_duration(text) == expected


@pytest.mark.parametrize("text", ["", "35", "minutes", "35 parsecs", "-5 minutes", "5m5s"])
def test_refuses_what_is_not_a_duration(text):
    with pytest.raises(ValueError, match=r"duration|unit"):
        parse_duration(text)


@pytest.mark.parametrize(("duration", "text"), [
    (timedelta(minutes=35), "35 minutes"),
    (timedelta(hours=12), "12 hours"),
    (timedelta(days=1), "1 days"),
    (timedelta(minutes=35, microseconds=1), "2100000001 microseconds"),
    (timedelta(milliseconds=1500), "1500 milliseconds"),
])
def test_formats_intervals_spark_accepts(duration, text):
    assert spark_interval(duration) == text


@pytest.mark.parametrize(("text", "expected"), [
    ("interval 1 week", timedelta(days=7)),
    ("interval 7 days", timedelta(days=7)),
    ("INTERVAL 2 days 12 hours", timedelta(days=2, hours=12)),
    ("168 hours", timedelta(hours=168)),
    ("interval 0 seconds", timedelta(0)),
])
def test_parses_the_intervals_delta_table_properties_hold(text, expected):
    assert parse_interval(text) == expected


@pytest.mark.parametrize("text", ["interval", "interval 3 fortnights", "interval 1 day soon"])
def test_refuses_what_is_not_an_interval(text):
    with pytest.raises(ValueError, match=r"interval|unit"):
        parse_interval(text)
