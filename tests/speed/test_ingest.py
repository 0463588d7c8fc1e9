from datetime import timedelta
from pathlib import Path

from abstream.io.tables import EVENTS_TABLE, REJECTED_TABLE, read_table
from abstream.speed import COMPONENTS
from abstream.speed.progress import ENGINE, OTHER
from abstream.speed.runner import run_once
from tests.helpers import beacon, dumps, forget_commits_after, reconfigure, write_lines

TS = "2026-01-05T10:00:00.000Z"


def _ingest(ctx):
    run_once(ctx, [COMPONENTS["ingest"]])


def _count(ctx, spec):
    return read_table(ctx.spark, spec, ctx.layout).count()


def test_ingest_splits_valid_rejected_and_duplicates_and_loses_nothing(ctx):
    good = [dumps(beacon(f"e{i}", TS, session=f"s{i % 3}")) for i in range(10)]
    bad = ["{not json", "", dumps(beacon("x1", "tomorrow")), dumps(beacon("x2", TS, kind="zap"))]
    write_lines(Path(ctx.layout.landing), "a.jsonl", [*good[:6], good[0], *bad[:2]])
    write_lines(Path(ctx.layout.landing), "b.jsonl", [*good[6:], good[1], good[7], *bad[2:]])
    _ingest(ctx)

    events = read_table(ctx.spark, EVENTS_TABLE, ctx.layout)
    assert sorted(r["event_id"] for r in events.collect()) == sorted(f"e{i}" for i in range(10))
    rejected = {(r["raw"], r["reason"], Path(r["source_file"]).name)
                for r in read_table(ctx.spark, REJECTED_TABLE, ctx.layout).collect()}
    assert rejected == {
        ("{not json", "malformed_json", "a.jsonl"),
        ("", "empty_record", "a.jsonl"),
        (bad[2], "invalid_timestamp", "b.jsonl"),
        (bad[3], "invalid_value:type", "b.jsonl"),
    }
    stats = ctx.stats.component("ingest")
    assert stats.input_rows == 17
    assert stats.duplicates_dropped == 3
    assert stats.input_rows == events.count() + len(rejected) + stats.duplicates_dropped
    assert stats.written == {"events": 10, "rejected": 4}
    assert set(stats.step_seconds) == {"parse and check", "recent ids", "find repeats",
                                       "bronze append", "keep new ids", "quarantine append",
                                       OTHER, ENGINE}


def test_later_files_are_picked_up_and_old_duplicates_still_dropped(ctx):
    write_lines(Path(ctx.layout.landing), "a.jsonl", [dumps(beacon("e1", TS))])
    _ingest(ctx)
    write_lines(Path(ctx.layout.landing), "b.jsonl", [dumps(beacon("e1", TS)),
                                                 dumps(beacon("e2", TS))])
    _ingest(ctx)
    assert _count(ctx, EVENTS_TABLE) == 2
    assert ctx.stats.component("ingest").duplicates_dropped == 1


def test_a_replayed_micro_batch_writes_nothing_twice(ctx):
    write_lines(Path(ctx.layout.landing), "a.jsonl",
                [dumps(beacon(f"e{i}", TS)) for i in range(5)] + ["{bad"])
    _ingest(ctx)
    forget_commits_after(Path(ctx.layout.checkpoint("ingest")), -1)
    _ingest(ctx)
    assert _count(ctx, EVENTS_TABLE) == 5
    assert _count(ctx, REJECTED_TABLE) == 1
    assert ctx.stats.component("ingest").written["events"] == 10, "the batch did run twice"


def test_a_repeat_read_after_the_dedupe_window_passes_to_bronze(ctx):
    ctx = reconfigure(ctx, "ingest", dedupe_window=timedelta(0))
    write_lines(Path(ctx.layout.landing), "a.jsonl", [dumps(beacon("e1", TS))] * 2)
    _ingest(ctx)
    write_lines(Path(ctx.layout.landing), "b.jsonl", [dumps(beacon("e1", TS))])
    _ingest(ctx)
    assert _count(ctx, EVENTS_TABLE) == 2, "once per micro-batch: the first copy is too old"
    assert ctx.stats.component("ingest").duplicates_dropped == 1
