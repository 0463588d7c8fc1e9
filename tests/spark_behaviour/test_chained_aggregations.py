"""Spark's own behaviour, which abstream relies on: the chained aggregations of
docs/design.md ("Watermarks per operator") under Spark's per-operator watermarks.

Values 6, 4 and 5 arrive at t = 1, 2 and 3 s. The first aggregation takes the maximum per
3-second window [1 s, 4 s): 6, stamped with event time 1 s's window. Under one global
watermark (3 s after the first batch) the second aggregation would see that row as late and
drop it. Spark propagates watermarks per operator, so the second aggregation keeps it.
"""

from datetime import datetime, timedelta

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
        second.writeStream.format("memory").queryName("chained").outputMode("append")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True).start()
    )
    query.awaitTermination()
    rows = spark.sql("SELECT * FROM chained").collect()
    assert len(rows) == 1
    assert rows[0]["window"]["start"] == T0
    assert sorted(rows[0]["maxima"]) == [6, 7]
    assert rows[0]["sum_of_maxima"] == 13
    dropped = sum(op["numRowsDroppedByWatermark"] for progress in query.recentProgress
                  for op in progress["stateOperators"])
    assert dropped == 0
