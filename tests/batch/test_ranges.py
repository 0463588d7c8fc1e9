from datetime import UTC, datetime, timedelta

import pytest

from abstream.batch import BatchRequest
from abstream.batch.ranges import TimeRange, ceil_to, difference, floor_to, union
from abstream.errors import UsageError


def t(hour: int, minute: int = 0) -> datetime:
    return datetime(2026, 1, 5, hour, minute, tzinfo=UTC)


FIVE = timedelta(minutes=5)


def test_alignment_to_the_window_step():
    assert floor_to(t(10, 7), FIVE) == t(10, 5)
    assert ceil_to(t(10, 7), FIVE) == t(10, 10)
    assert floor_to(t(10, 5), FIVE) == ceil_to(t(10, 5), FIVE) == t(10, 5)
    assert TimeRange.aligned(t(10, 7), t(10, 7) + timedelta(microseconds=1), FIVE) == \
        TimeRange(t(10, 5), t(10, 10))


def test_chunks_cover_the_range_cut_at_multiples_of_their_size():
    chunks = TimeRange(t(1, 5), t(13, 30)).chunks(timedelta(hours=6))
    assert chunks == [TimeRange(t(1, 5), t(6)), TimeRange(t(6), t(12)),
                      TimeRange(t(12), t(13, 30))]


def test_chunks_with_few_events_are_joined_up_to_the_most_events_a_chunk_holds():
    six = timedelta(hours=6)
    per_piece = {t(0): 50, t(6): 30, t(12): 100, t(18): 10}
    span = TimeRange(t(1, 5), t(23))
    assert span.chunks(six, per_piece, most=100) == [
        TimeRange(t(1, 5), t(12)), TimeRange(t(12), t(18)), TimeRange(t(18), t(23))]
    assert span.chunks(six, per_piece, most=1_000) == [span]
    assert span.chunks(six, per_piece, most=1) == span.chunks(six)


def test_union_merges_overlapping_and_adjacent_ranges():
    assert union([TimeRange(t(5), t(6)), TimeRange(t(1), t(2)), TimeRange(t(2), t(3)),
                  TimeRange(t(2, 30), t(4))]) == [TimeRange(t(1), t(4)), TimeRange(t(5), t(6))]


def test_difference_leaves_the_gaps():
    covered = [TimeRange(t(1), t(2)), TimeRange(t(3), t(4)), TimeRange(t(9), t(10))]
    assert difference(TimeRange(t(0), t(5)), covered) == [
        TimeRange(t(0), t(1)), TimeRange(t(2), t(3)), TimeRange(t(4), t(5))]
    assert difference(TimeRange(t(1), t(2)), covered) == []


def test_ranges_are_utc_and_not_empty():
    with pytest.raises(ValueError, match="UTC"):
        TimeRange(datetime(2026, 1, 5), datetime(2026, 1, 6))
    with pytest.raises(ValueError, match="empty"):
        TimeRange(t(2), t(2))


@pytest.mark.parametrize(("mode", "start", "end", "message"), [
    ("range", datetime(2026, 1, 5), None, "only a range, has a start and an end"),
    ("all", datetime(2026, 1, 5), datetime(2026, 1, 6), "only a range, has a start and an end"),
    ("range", datetime(2026, 1, 6), datetime(2026, 1, 5), "a start before its end"),
])
def test_a_batch_request_has_both_ends_in_order_exactly_when_it_is_a_range(mode, start, end,
                                                                           message):
    with pytest.raises(UsageError, match=message):
        BatchRequest(mode, start, end)
