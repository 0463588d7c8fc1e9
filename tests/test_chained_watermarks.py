"""Seed 003's example: chained aggregations under Spark's per-operator watermarks.

Values 6, 4 and 5 arrive at t = 1, 2 and 3 s. The first aggregation takes the maximum per
3-second window [1 s, 4 s): 6, stamped with event time 1 s's window. Under one global
watermark (3 s after the first batch) the second aggregation would see that row as late and
drop it. Spark propagates watermarks per operator, so the second aggregation keeps it.
"""

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from pyspark.sql import functions as F

T0 = datetime(2026, 1, 5, 0, 0, 0)


def _append(spark, path, rows):
    data = [(T0 + timedelta(seconds=t), v) for t, v in rows]
    spark.createDataFrame(data, "ts timestamp, value long").coalesce(1).write \
        .format("delta").mode("append").save(str(path))


def test_the_maximum_six_survives_the_second_aggregation(spark, tmp_path):
    table = tmp_path / "values"
    _append(spark, table, [(1, 6), (2, 4), (3, 5)])
    _append(spark, table, [(10, 7)])
    _append(spark, table, [(40, 1)])

    maxima = (
        spark.readStream.format("delta").option("maxFilesPerTrigger", 1).load(str(table))
        .withWatermark("ts", "0 seconds")
        .groupBy(F.window("ts", "3 seconds", startTime="1 second"))
        .agg(F.max("value").alias("max_value"))
    )
    second = (
        maxima.groupBy(F.window(F.window_time("window"), "30 seconds"))
        .agg(F.sum("max_value").alias("sum_of_maxima"),
             F.collect_list("max_value").alias("maxima"))
    )
    query = (
        second.writeStream.format("memory").queryName("seed003").outputMode("append")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True).start()
    )
    query.awaitTermination()
    rows = spark.sql("SELECT * FROM seed003").collect()
    assert len(rows) == 1
    assert rows[0]["window"]["start"] == T0
    assert sorted(rows[0]["maxima"]) == [6, 7]
    assert rows[0]["sum_of_maxima"] == 13
    dropped = sum(op["numRowsDroppedByWatermark"] for progress in query.recentProgress
                  for op in progress["stateOperators"])
    assert dropped == 0


def test_seed_003_through_abstream_sessions_and_gold(ctx):
    """The same values as orders: 6, 4, 5 at 1, 2, 3 s in one visit (gap 1 s), then 7 at
    4 s in another, then an event at 40 s that closes both. The visit starting at 1 s
    closes when the input watermark is 40 s, long past its 3-second window: sessionize held
    the gold watermark back to its earliest open event, so gold counts it."""
    from abstream.components import COMPONENTS
    from abstream.io.tables import EVENTS_TABLE, METRICS_TABLE, ensure_table, read_table
    from abstream.progress import (
        OUTPUT_WATERMARK,
        REPORTED,
        WATERMARK,
        ProgressListener,
        RunStats,
    )
    from abstream.runner import run_once
    from abstream.schemas import EVENTS
    from tests.helpers import reconfigure

    ctx = reconfigure(ctx, "sessionize", max_files_per_trigger=1, lateness=timedelta(0),
                      gap=timedelta(seconds=1))
    ctx = reconfigure(ctx, "metrics", window=timedelta(seconds=3))
    entries = [("exp", "control", False)]
    path = ensure_table(ctx.spark, EVENTS_TABLE, ctx.layout)
    for rows in ([("s", 1, 6), ("s", 2, 4), ("s", 3, 5)], [("t", 4, 7)], [("u", 40, 1)]):
        data = [(f"{session}{t}", T0 + timedelta(seconds=t), session, "v", "order", "/",
                 entries, Decimal(value), 1, None, "f", T0, T0, T0.date())
                for session, t, value in rows]
        ctx.spark.createDataFrame(data, EVENTS).coalesce(1).write.format("delta") \
            .mode("append").save(path)
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
