"""Event-time ranges of the batch layer: alignment, chunking, union and difference.

Ranges are half-open, ``[start, end)``, in UTC, aligned to the gold windows' step (the
slide, or the window length when windows tumble) so a range holds whole windows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def floor_to(ts: datetime, step: timedelta) -> datetime:
    """The latest multiple of ``step`` (counted from the epoch) at or before ``ts``."""
    return ts - (ts - _EPOCH) % step


def ceil_to(ts: datetime, step: timedelta) -> datetime:
    """The earliest multiple of ``step`` at or after ``ts``."""
    floored = floor_to(ts, step)
    return floored if floored == ts else floored + step


@dataclass(frozen=True, order=True)
class TimeRange:
    start: datetime
    end: datetime

    def __post_init__(self) -> None:
        if self.start.tzinfo is None or self.end.tzinfo is None:
            raise ValueError("time ranges are in UTC: give timezone-aware datetimes")
        if self.end <= self.start:
            raise ValueError(f"empty range: {self}")

    @classmethod
    def aligned(cls, start: datetime, end: datetime, step: timedelta) -> TimeRange:
        """The smallest range of whole steps holding ``[start, end)``."""
        return cls(floor_to(start, step), ceil_to(end, step))

    def chunks(self, size: timedelta, events: Mapping[datetime, int] | None = None,
               most: int | None = None) -> list[TimeRange]:
        """The range cut at the multiples of ``size``, so that every run cuts the same way.

        Given ``events`` (how many events each multiple of ``size`` holds, by its start) and
        ``most``, adjacent pieces are joined again while together they hold at most
        ``most`` events: a quiet stretch is one chunk, not one per ``size``."""
        pieces: list[TimeRange] = []
        held = 0
        start = self.start
        while start < self.end:
            end = min(floor_to(start, size) + size, self.end)
            count = 0 if events is None else events.get(floor_to(start, size), 0)
            if pieces and most is not None and held + count <= most:
                pieces[-1] = TimeRange(pieces[-1].start, end)
                held += count
            else:
                pieces.append(TimeRange(start, end))
                held = count
            start = end
        return pieces

    def overlaps(self, start: datetime, end: datetime) -> bool:
        """Whether the closed interval ``[start, end]`` meets this range."""
        return start < self.end and end >= self.start

    def __str__(self) -> str:
        return f"[{_iso(self.start)}, {_iso(self.end)})"


def _iso(ts: datetime) -> str:
    return ts.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S").removesuffix(":00")


def union(ranges: Iterable[TimeRange]) -> list[TimeRange]:
    """Overlapping and adjacent ranges merged, in order."""
    merged: list[TimeRange] = []
    for piece in sorted(ranges):
        if merged and piece.start <= merged[-1].end:
            last = merged.pop()
            merged.append(TimeRange(last.start, max(last.end, piece.end)))
        else:
            merged.append(piece)
    return merged


def difference(whole: TimeRange, covered: Iterable[TimeRange]) -> list[TimeRange]:
    """The parts of ``whole`` that no range of ``covered`` holds."""
    gaps = []
    start = whole.start
    for piece in union(covered):
        if piece.end <= start or piece.start >= whole.end:
            continue
        if piece.start > start:
            gaps.append(TimeRange(start, piece.start))
        start = max(start, piece.end)
    if start < whole.end:
        gaps.append(TimeRange(start, whole.end))
    return gaps
