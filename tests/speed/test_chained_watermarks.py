"""The chained-aggregation example of docs/design.md through abstream: sessionize carries
its own input and output watermarks, so a visit held open keeps gold's watermark back and
nothing it counts is late.

``tests/spark_behaviour/test_chained_aggregations.py`` runs the same values through Spark's
own chained aggregations.
"""

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from pyspark.sql import functions as F

from abstream.io.tables import EVENTS_TABLE, METRICS_TABLE, ensure_table, read_table
from abstream.observed import OUTPUT_WATERMARK, REPORTED, WATERMARK
from abstream.speed import COMPONENTS
from abstream.speed.progress import ProgressListener, RunStats
from abstream.speed.runner import run_once
from tests.helpers import bronze_frame, bronze_row, reconfigure

T0 = datetime(2026, 1, 5, 0, 0, 0)


def test_the_chained_example_through_sessions_and_gold(ctx):
    """The same values as orders: 6, 4, 5 at 1, 2, 3 s in one visit (gap 1 s), then 7 at
    4 s in another, then an event at 40 s that closes both. The visit starting at 1 s
    closes when the input watermark is 40 s, long past its 3-second window: sessionize held
    the gold watermark back to its earliest open event, so gold counts it."""
    ctx = reconfigure(ctx, "sessionize", max_files_per_trigger=1, lateness=timedelta(0),
                      gap=timedelta(seconds=1))
    ctx = reconfigure(ctx, "metrics", window=timedelta(seconds=3))
    entries = [("exp", "control", False)]
    path = ensure_table(ctx.spark, EVENTS_TABLE, ctx.layout)
    for rows in ([("s", 1, 6), ("s", 2, 4), ("s", 3, 5)], [("t", 4, 7)], [("u", 40, 1)]):
        data = [bronze_row(f"{session}{t}", T0 + timedelta(seconds=t), session_id=session,
                           visitor_id="v", type="order", experiments=entries, revenue=value,
                           units=1, arrived_at=T0, ingested_at=T0)
                for session, t, value in rows]
        bronze_frame(ctx.spark, data).coalesce(1).write.format("delta").mode("append") \
            .save(path)
    reported = []
    ctx = replace(ctx, stats=RunStats())
    listener = ProgressListener(ctx.stats, [lambda p: reported.append(p[REPORTED])])
    ctx.spark.streams.addListener(listener)
    try:
        run_once(ctx, [COMPONENTS["sessionize"]])
    finally:
        ctx.spark.streams.removeListener(listener)

    def seconds(ms):
        return (ms - int(T0.replace(tzinfo=UTC).timestamp() * 1000)) / 1000

    assert [(seconds(r[WATERMARK]), seconds(r[OUTPUT_WATERMARK])) for r in reported] == [
        (3, 1), (4, 1), (40, 40)]
    gold = read_table(ctx.spark, METRICS_TABLE, ctx.layout).where("population = 'assigned'")
    windows = {r["start"].second: (r["visits"], int(r["revenue"])) for r in gold.groupBy(
        F.col("window_start").alias("start")).agg(F.sum("visits").alias("visits"),
                                                  F.sum("revenue").alias("revenue")).collect()}
    assert windows == {0: (1, 10), 3: (1, 12), 39: (0, 1)}
    assert ctx.stats.component("sessionize").late_rows_dropped == 0
