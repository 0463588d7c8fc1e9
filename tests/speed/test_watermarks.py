"""A source's watermark after a micro-batch: the latest event time read whole less the
lateness, moved further by what was read of the commit or snapshot the micro-batch ended
in, as far as the files it left unread there allow."""

from datetime import timedelta

from abstream.speed.watermarks import held_source_watermark

LATENESS = timedelta(microseconds=10)


def test_between_commits_it_is_the_latest_event_less_the_lateness():
    assert held_source_watermark(None, 100, 100, LATENESS, None, inside=False) == 90
    assert held_source_watermark(50, 100, 100, LATENESS, None, inside=False) == 90


def test_inside_a_commit_it_moves_with_what_was_read_up_to_the_earliest_unread_event():
    assert held_source_watermark(None, None, 100, LATENESS, 70, inside=True) == 70
    assert held_source_watermark(50, 60, 100, LATENESS, 95, inside=True) == 90


def test_it_never_falls_behind_the_input_read_whole():
    assert held_source_watermark(None, 100, 200, LATENESS, 20, inside=True) == 90


def test_unknown_unread_input_leaves_only_the_input_read_whole():
    assert held_source_watermark(50, 80, 100, LATENESS, None, inside=True) == 70
    assert held_source_watermark(None, None, 100, LATENESS, None, inside=True) is None


def test_it_never_moves_back():
    assert held_source_watermark(80, 60, 100, LATENESS, 60, inside=True) == 80
    assert held_source_watermark(80, None, None, LATENESS, None, inside=False) == 80
