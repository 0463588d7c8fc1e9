"""What a metrics micro-batch's MERGE into gold costs as gold grows: abstream's MERGE (bounded
by the batch's earliest window) against an unbounded one, and against a table with deletion
vectors and auto compaction, in the same run.

Each micro-batch carries gold-sized rows (one per experiment x variant x population, with a
2.5 KB sketch as HLL sketches are) for the current and the previous 5-minute window, as the
metrics stream emits them; the windows move on by one every batch, so gold grows by one
window of rows a batch. The MERGE's seconds are recorded per batch.

    python bench/gold_merge.py [--batches 200] [--keys 40]

Prints a table, then one JSON object as the last line; writes it to bench/results/.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from throughput import RESULTS, log_progress, machine, write_result

from abstream.config import load_config
from abstream.io import sinks
from abstream.io.tables import METRICS_TABLE, TableSpec, ensure_table
from abstream.spark import spark_session

log = logging.getLogger("bench.gold_merge")
WINDOW = timedelta(minutes=5)
START = datetime(2026, 11, 1, tzinfo=UTC)
SKETCH_BYTES = 2_500
DELETION_VECTORS = (("delta.enableDeletionVectors", "true"),
                    ("delta.autoOptimize.autoCompact", "true"))
#: name -> (table properties, whether the MERGE is bounded by the batch's earliest window)
VARIANTS = {
    "abstream": ((), True),
    "unbounded": ((), False),
    "deletion-vectors": (DELETION_VECTORS, True),
}
KEY = ("k", "window_start", "layer")


def changes(spark: SparkSession, batch: int, keys: int) -> DataFrame:
    """The rows of windows ``batch - 1`` and ``batch``."""
    first = START + WINDOW * max(0, batch - 1)
    return (
        spark.range(keys).crossJoin(spark.range(2 if batch else 1).withColumnRenamed("id", "w"))
        .select(
            F.concat(F.lit("experiment-"), F.col("id").cast("string")).alias("k"),
            (F.lit(first) + F.col("w") * F.expr("INTERVAL 5 MINUTES")).alias("window_start"),
            F.expr(f"randstr({SKETCH_BYTES})").cast("binary").alias("sketch"),
            F.lit(batch).cast("long").alias("v"),
            F.lit("speed").alias("layer"),
        )
    )


def run_variant(spark: SparkSession, name: str, batches: int, keys: int) -> list[float]:
    properties, bounded = VARIANTS[name]
    work = RESULTS / "work-gold-merge" / name
    shutil.rmtree(work, ignore_errors=True)
    spec = TableSpec("gold", changes(spark, 0, 1).schema, METRICS_TABLE.partition_by)
    path = ensure_table(spark, spec, SimpleNamespace(gold=str(work)))
    if properties:
        listed = ", ".join(f"'{key}' = '{value}'" for key, value in properties)
        spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ({listed})")
    seconds = []
    for batch in range(batches):
        rows = changes(spark, batch, keys).persist()
        rows.count()
        since = {"window_start": START + WINDOW * max(0, batch - 1)} if bounded else None
        began = time.monotonic()
        sinks.upsert(rows, path, KEY, f"bench-{name}", batch, partition={"layer": "speed"},
                     since=since)
        seconds.append(round(time.monotonic() - began, 3))
        rows.unpersist()
        if batch % 20 == 19 or batch == batches - 1:
            log.info("%s: batch %d of %d, last MERGE %.2f s", name, batch + 1, batches,
                     seconds[-1])
    shutil.rmtree(work, ignore_errors=True)
    return seconds


def summary(seconds: list[float]) -> dict[str, float]:
    """Median MERGE seconds of the first and the last tenth of the batches, and their ratio."""
    tenth = max(1, len(seconds) // 10)
    first, last = statistics.median(seconds[:tenth]), statistics.median(seconds[-tenth:])
    return {"first_tenth_median_s": first, "last_tenth_median_s": last,
            "growth": round(last / first, 2), "total_s": round(sum(seconds), 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--keys", type=int, default=40)
    args = parser.parse_args()
    log_progress()
    config = load_config()
    spark = spark_session(config.spark)
    log.info("warm-up")
    run_variant(spark, "abstream", 5, args.keys)
    series = {}
    for name in VARIANTS:
        log.info("%s: %d micro-batches of %d keys", name, args.batches, args.keys)
        series[name] = run_variant(spark, name, args.batches, args.keys)
    spark.stop()
    result = {
        "benchmark": "gold-merge", "batches": args.batches, "keys": args.keys,
        "variants": {name: {"properties": dict(VARIANTS[name][0]), "bounded": VARIANTS[name][1],
                            **summary(seconds), "seconds": seconds}
                     for name, seconds in series.items()},
        "machine": machine(), "master": config.spark.master,
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    print(f"\n{'variant':<10} {'first tenth s':>14} {'last tenth s':>13} {'growth':>7} "
          f"{'total s':>8}")
    for name, variant in result["variants"].items():
        print(f"{name:<10} {variant['first_tenth_median_s']:>14.2f} "
              f"{variant['last_tenth_median_s']:>13.2f} {variant['growth']:>6.2f}x "
              f"{variant['total_s']:>8.1f}")
    write_result(result, "gold-merge")
    return 0


if __name__ == "__main__":
    sys.exit(main())
