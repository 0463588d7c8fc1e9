import logging
from contextlib import ExitStack
from datetime import timedelta
from pathlib import Path

import pytest
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from abstream.io.tables import EVENTS_TABLE, ensure_table, events_table, read_table
from abstream.speed import COMPONENTS
from abstream.speed.recent_ids import RecentIds
from abstream.speed.runner import run_once
from abstream.times import now_micros
from tests.helpers import beacon, blocks_held, dumps, reconfigure, write_lines

TS = "2026-01-05T10:00:00.000Z"
HOUR = 3_600_000_000


def _ids(frame: DataFrame | None) -> set[str]:
    return set() if frame is None else {row["event_id"] for row in frame.collect()}


def _reads(caplog: pytest.LogCaptureFixture) -> int:
    return sum(record.name == "abstream.speed.recent_ids" for record in caplog.records)


def test_ingest_drops_repeats_across_its_micro_batches_reading_bronze_once_and_lets_go(ctx, caplog):
    ctx = reconfigure(ctx, "ingest", max_files_per_trigger=1)
    landing = Path(ctx.layout.landing)
    write_lines(landing, "a.jsonl", [dumps(beacon(e, TS)) for e in ("e1", "e2")])
    write_lines(landing, "b.jsonl", [dumps(beacon(e, TS)) for e in ("e1", "e3")])
    write_lines(landing, "c.jsonl", [dumps(beacon(e, TS)) for e in ("e2", "e3", "e4")])
    held = blocks_held(ctx.spark)
    with caplog.at_level(logging.INFO, logger="abstream.speed.recent_ids"):
        run_once(ctx, [COMPONENTS["ingest"]])
    assert blocks_held(ctx.spark) == held, "the ids kept let go of when the query ends"
    events = [r["event_id"] for r in read_table(ctx.spark, EVENTS_TABLE, ctx.layout).collect()]
    assert sorted(events) == ["e1", "e2", "e3", "e4"]
    stats = ctx.stats.component("ingest")
    assert stats.duplicates_dropped == 3
    assert _reads(caplog) == 1, "bronze read at the first of three micro-batches only"


def test_kept_ids_are_bronzes_and_read_again_after_a_commit_of_another_writer(ctx, caplog):
    write_lines(Path(ctx.layout.landing), "a.jsonl",
                [dumps(beacon(e, TS)) for e in ("e1", "e2")])
    run_once(ctx, [COMPONENTS["ingest"]])
    spark = ctx.spark
    path = ensure_table(spark, events_table(ctx.config.events), ctx.layout)
    recent = RecentIds(path, timedelta(hours=1))
    now = now_micros()

    def append(suffix: str, at: int) -> DataFrame:
        """Bronze's rows again under new ids, taken in ``at``: the ids appended."""
        bronze = spark.read.format("delta").load(path).where(~F.col("event_id").contains("-"))
        rows = bronze.withColumn("event_id", F.concat("event_id", F.lit(suffix))) \
            .withColumn("ingested_at", F.timestamp_micros(F.lit(at)))
        rows = spark.createDataFrame(rows.collect(), rows.schema)
        rows.write.format("delta").mode("append").save(path)
        return rows.select("event_id", "ingested_at")

    with caplog.at_level(logging.INFO, logger="abstream.speed.recent_ids"), ExitStack() as held:
        held.callback(recent.forget)
        caplog.clear()  # the ingest run's read, where logging was at INFO already
        assert _ids(recent.seen(spark, now)) == {"e1", "e2"}
        recent.taken(append("-ours", now), now)
        assert _ids(recent.seen(spark, now + 1)) == {"e1", "e2", "e1-ours", "e2-ours"}
        assert _reads(caplog) == 1, "its own append kept, not read"

        append("-theirs", now + 1)
        assert _ids(recent.seen(spark, now + 2)) == \
            {"e1", "e2", "e1-ours", "e2-ours", "e1-theirs", "e2-theirs"}
        assert _reads(caplog) == 2, "another writer's commit: bronze read again"

        recent.taken(append("-late", now + 3), now + 3)
        assert _ids(recent.seen(spark, now + 2 + HOUR)) == {"e1-late", "e2-late"}, \
            "older than the window: let go"
        assert _reads(caplog) == 2

        stale = append("-missed", now + 4)
        append("-other", now + 5)
        recent.taken(stale, now + 4)
        assert "e1-other" in _ids(recent.seen(spark, now + 6)), \
            "an append that is not bronze's one commit since is not kept: bronze read again"
        assert _reads(caplog) == 3
