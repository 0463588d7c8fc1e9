"""`make bench-days`: a base day's lines replayed as later days, cut into pieces, and the
verdict on how each series grows against its data."""

import json
from pathlib import Path

import pytest
from bench.days import judge, replayed, slices


def _line(event_ts: str, **more: object) -> str:
    return json.dumps({"event_id": "e1", "event_ts": event_ts, "session_id": "s1",
                       "visitor_id": "v1", "type": "pageview", **more},
                      separators=(",", ":"))


def test_a_replayed_day_has_its_own_ids_and_its_event_times_whole_days_later() -> None:
    text = "\n".join([_line("2026-01-05T23:59:59.999Z"), _line("yesterday"),
                      _line("2100-01-01T00:00:00.000Z"), "{truncated"]) + "\n"
    assert replayed(text, 0) == text
    valid, bad, future, broken = (json.loads(line) if line.startswith("{\"") else line
                                  for line in replayed(text, 3).splitlines())
    assert valid["event_ts"] == "2026-01-08T23:59:59.999Z", "to the millisecond"
    assert (valid["event_id"], valid["session_id"], valid["visitor_id"]) == ("3-e1", "3-s1",
                                                                             "3-v1")
    assert bad["event_ts"] == "yesterday", "what is not a time stays malformed"
    assert future["event_ts"] == "2100-01-04T00:00:00.000Z"
    assert broken == "{truncated"


def test_a_day_is_cut_into_pieces_of_about_equal_size_in_order(tmp_path: Path) -> None:
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    first.write_text("".join(f"{n}\n" for n in range(5)))
    second.write_text("".join(f"{n}\n" for n in range(5, 9)))
    pieces = list(slices([first, second], 9, 4))
    assert [piece.count("\n") for piece in pieces] == [3, 3, 3]
    assert "".join(pieces) == first.read_text() + second.read_text()
    assert len(list(slices([first], 5, 24))) == 5, "never an empty piece"


def test_bytes_that_track_rows_pass_and_what_outgrows_its_data_fails() -> None:
    rows = [100.0, 200.0, 300.0, 400.0, 500.0, 600.0, 700.0]
    tracking = judge([r * 90 + 1_000 for r in rows], rows, "proportional")
    assert tracking["verdict"] == "tracks its data" and tracking["ok"]
    assert tracking["data_growth"][0] == 2.0 and tracking["growth"][0] == pytest.approx(
        19_000 / 10_000, abs=1e-3)
    # From the middle day (400) to the last (700): the exponent of the growth.
    quadratic = judge([r * r for r in rows], rows, "proportional")
    assert quadratic["exponent"] == pytest.approx(2.0) and not quadratic["ok"]
    assert quadratic["verdict"] == "grows faster than its data"
    levelled = judge([10.0, 50.0, 95.0, 100.0, 100.0, 98.0, 100.0], rows, "bounded")
    assert levelled["verdict"] == "bounded" and levelled["ok"]
    linear = judge(rows, rows, "bounded")
    assert linear["verdict"] == "grows with its data" and not linear["ok"]
    assert judge([0.0] * 7, rows, "bounded")["ok"]
    assert judge([5.0], [100.0], "bounded")["verdict"] == "not judged: its data did not grow"
