"""Durations written the way people write them ("35 minutes", "500ms", "1 day")."""

from __future__ import annotations

import re
from datetime import timedelta

_UNITS_US = {
    "us": 1,
    "microsecond": 1,
    "ms": 1_000,
    "millisecond": 1_000,
    "s": 1_000_000,
    "sec": 1_000_000,
    "second": 1_000_000,
    "m": 60_000_000,
    "min": 60_000_000,
    "minute": 60_000_000,
    "h": 3_600_000_000,
    "hr": 3_600_000_000,
    "hour": 3_600_000_000,
    "d": 86_400_000_000,
    "day": 86_400_000_000,
}
_PATTERN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]+)\s*$")


def parse_duration(text: str) -> timedelta:
    """Parse "35 minutes", "35min", "1.5h", "500 ms" into a timedelta; ValueError otherwise."""
    match = _PATTERN.match(text)
    if not match:
        raise ValueError(f"expected a duration like '35 minutes' or '500ms', got {text!r}")
    amount, unit = match.groups()
    unit = unit.lower()
    if unit not in _UNITS_US and unit.endswith("s"):
        unit = unit[:-1]
    if unit not in _UNITS_US:
        raise ValueError(f"unknown time unit {match.group(2)!r} in {text!r}")
    return timedelta(microseconds=round(float(amount) * _UNITS_US[unit]))


_INTERVAL_PART = re.compile(r"(\d+(?:\.\d+)?)\s*([a-zA-Z]+)")
_WEEK = re.compile(r"^weeks?$", re.IGNORECASE)


def parse_interval(text: str) -> timedelta:
    """Parse an interval as Delta's table properties hold it ("interval 1 week",
    "interval 2 days 12 hours", "168 hours"); ValueError otherwise."""
    body = text.strip().lower().removeprefix("interval").strip()
    parts = _INTERVAL_PART.findall(body)
    if not parts or _INTERVAL_PART.sub("", body).strip():
        raise ValueError(f"expected an interval like 'interval 7 days', got {text!r}")
    return sum((timedelta(weeks=float(amount)) if _WEEK.match(unit)
                else parse_duration(f"{amount} {unit}") for amount, unit in parts), timedelta())


def spark_interval(duration: timedelta) -> str:
    """Format a timedelta as an interval string Spark accepts (windows, watermarks, triggers)."""
    micros = duration // timedelta(microseconds=1)
    for unit, size in (("days", 86_400_000_000), ("hours", 3_600_000_000),
                       ("minutes", 60_000_000), ("seconds", 1_000_000),
                       ("milliseconds", 1_000)):
        if micros % size == 0:
            return f"{micros // size} {unit}"
    return f"{micros} microseconds"
