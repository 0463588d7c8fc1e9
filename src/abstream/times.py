"""UTC timestamps as Prometheus, Delta and Spark write them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def iso_from_ms(ms: int | None) -> str | None:
    """Epoch milliseconds as ISO-8601 UTC with milliseconds (``2026-11-22T10:15:30.123Z``)."""
    if ms is None:
        return None
    text = datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")
    return text.replace("+00:00", "Z")


def epoch_from_iso(text: str) -> float:
    """ISO-8601 (``Z`` or an offset; no zone means UTC) as epoch seconds."""
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def micros_from(moment: datetime) -> int:
    """An aware datetime as epoch microseconds (Spark's ``unix_micros``)."""
    return (moment - _EPOCH) // timedelta(microseconds=1)


def now_micros() -> int:
    """The current time as epoch microseconds."""
    return micros_from(datetime.now(UTC))


def from_micros(micros: int) -> datetime:
    """Spark's ``unix_micros`` as an aware UTC datetime, whatever the local time zone."""
    return _EPOCH + timedelta(microseconds=micros)
