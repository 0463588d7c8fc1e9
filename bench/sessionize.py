"""How to sessionize: Spark's native session_window against a Python stateful processor.

Builds a bronze table from generated beacons (one Delta commit per landing file), then
streams it with AvailableNow through each sessionizer into a no-op sink and reports
events/s. Every variant reads the same table in the same run, after a warm-up.

    python bench/sessionize.py [--events 200000] [--variants native,wide,python]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import shutil
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.stateful_processor import (
    StatefulProcessor,
    StatefulProcessorHandle,
)
from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

from abstream.config import load_config
from abstream.durations import spark_interval
from abstream.generator import GeneratorSettings, generate
from abstream.spark import spark_session
from abstream.stages.sessions import assemble_visits
from abstream.stages.validate import drop_duplicate_events, parse_beacons, valid_events

log = logging.getLogger("bench.sessionize")
RESULTS = Path(__file__).parent / "results"
GAP = timedelta(minutes=35)
LATENESS = "15 minutes"
#: As abstream's sessionize reads bronze: a few commits per micro-batch.
MAX_FILES_PER_TRIGGER = 8

VISIT = StructType([
    StructField("session_id", StringType()),
    StructField("visit_start", TimestampType()),
    StructField("visit_end", TimestampType()),
    StructField("events", LongType()),
    StructField("pageviews", LongType()),
    StructField("orders", LongType()),
])
STATE = StructType([
    StructField("start_ms", LongType()),
    StructField("last_ms", LongType()),
    StructField("events", LongType()),
    StructField("pageviews", LongType()),
    StructField("orders", LongType()),
])


class PythonSessionizer(StatefulProcessor):
    """The open visit per session_id in a ValueState, closed by an event-time timer at
    last event + gap; events are merged with pandas (vectorised within each key)."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.state = handle.getValueState("visit", STATE)
        self.gap_ms = GAP // timedelta(milliseconds=1)

    def handleInputRows(self, key: tuple, rows: Iterator[pd.DataFrame],
                        timerValues: object) -> Iterator[pd.DataFrame]:
        events = pd.concat(list(rows), ignore_index=True)
        ms = (events["event_ts"].astype("int64") // 1_000_000).to_numpy()
        order = ms.argsort(kind="stable")
        ms = ms[order]
        kinds = events["type"].to_numpy()[order]
        visits = []
        current = list(self.state.get()) if self.state.exists() else None
        new_visit = pd.Series(ms).diff().fillna(self.gap_ms + 1).to_numpy() > self.gap_ms
        if current is not None and ms[0] - current[1] <= self.gap_ms:
            new_visit[0] = False
        for index in range(len(ms)):
            if new_visit[index] or current is None:
                if current is not None:
                    visits.append(self._row(key[0], current))
                current = [ms[index], ms[index], 0, 0, 0]
            current[1] = max(current[1], ms[index])
            current[2] += 1
            current[3] += kinds[index] == "pageview"
            current[4] += kinds[index] == "order"
        for timer in self.handle.listTimers():
            self.handle.deleteTimer(timer)
        self.state.update(tuple(int(v) for v in current))
        self.handle.registerTimer(int(current[1]) + self.gap_ms)
        if visits:
            yield pd.DataFrame(visits)

    def handleExpiredTimer(self, key: tuple, timerValues: object,
                           expiredTimerInfo: object) -> Iterator[pd.DataFrame]:
        if self.state.exists():
            yield pd.DataFrame([self._row(key[0], list(self.state.get()))])
            self.state.clear()

    def _row(self, session_id: str, visit: list) -> dict:
        return {"session_id": session_id,
                "visit_start": pd.Timestamp(int(visit[0]), unit="ms"),
                "visit_end": pd.Timestamp(int(visit[1]), unit="ms"),
                "events": int(visit[2]), "pageviews": int(visit[3]), "orders": int(visit[4])}

    def close(self) -> None:
        return


def native(events: DataFrame) -> DataFrame:
    """abstream's sessionize stage: session_window over the few columns it needs."""
    return assemble_visits(events, GAP)


def wide(events: DataFrame) -> DataFrame:
    """session_window carrying whole events (every column, arrays and structs) in state."""
    return events.groupBy("session_id", F.session_window("event_ts", spark_interval(GAP))) \
        .agg(F.collect_list(F.struct(*events.columns)).alias("all_events"),
             F.first(F.struct(*events.columns)).alias("first_event"))


def python(events: DataFrame) -> DataFrame:
    """A transformWithStateInPandas sessionizer with event-time timers (RocksDB state)."""
    return events.select("session_id", "event_ts", "type").groupBy("session_id") \
        .transformWithStateInPandas(PythonSessionizer(), VISIT, "Append", "EventTime")


VARIANTS = {"native": native, "wide": wide, "python": python}


def build_bronze(spark: SparkSession, work: Path, events: int, seed: int) -> tuple[str, int]:
    landing = work / "landing"
    log.info("generating %s beacons", f"{events:,}")
    generate(GeneratorSettings(events=events, seed=seed), landing)
    bronze = str(work / "bronze")
    files = sorted(landing.glob("beacons-*"))
    for number, path in enumerate(files, 1):
        raw = spark.read.text(str(path)).select(
            "value", F.lit(path.name).alias("source_file"),
            F.lit(datetime.now(UTC)).alias("arrived_at"),
            F.lit(datetime.now(UTC)).alias("ingested_at"))
        parsed = parse_beacons(raw, 65_536, timedelta(days=1))
        valid_events(drop_duplicate_events(parsed, timedelta(minutes=10))).write \
            .format("delta").mode("append").save(bronze)
        log.info("bronze commit %d/%d", number, len(files))
    return bronze, spark.read.format("delta").load(bronze).count()


def measure(spark: SparkSession, name: str, bronze: str, work: Path, rows: int) -> dict:
    checkpoint = work / f"checkpoint-{name}"
    shutil.rmtree(checkpoint, ignore_errors=True)
    events = spark.readStream.format("delta") \
        .option("maxFilesPerTrigger", MAX_FILES_PER_TRIGGER).load(bronze) \
        .withWatermark("event_ts", LATENESS)
    query = VARIANTS[name](events).writeStream.format("noop").outputMode("append") \
        .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True)
    began = time.monotonic()
    running = query.start()
    while not running.awaitTermination(5):
        progress = running.lastProgress
        log.info("%s: batch %s, %.0f s", name, progress and progress["batchId"],
                 time.monotonic() - began)
    seconds = time.monotonic() - began
    return {"variant": name, "events": rows, "seconds": round(seconds, 2),
            "events_per_s": round(rows / seconds)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--variants", default="native,wide,python")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    logging.getLogger("py4j").setLevel(logging.ERROR)

    work = RESULTS / "work-sessionize"
    shutil.rmtree(work, ignore_errors=True)
    spark = spark_session(load_config().spark)
    bronze, rows = build_bronze(spark, work, args.events, args.seed)
    log.info("warm-up")
    measure(spark, "native", bronze, work, rows)
    results = []
    for name in args.variants.split(","):
        log.info("measuring %s", name)
        results.append(measure(spark, name, bronze, work, rows))
    base = next((r for r in results if r["variant"] == "native"), results[0])
    for r in results:
        r["ratio_to_native"] = round(r["events_per_s"] / base["events_per_s"], 3)
    print(f"\n{'variant':<8} {'events':>10} {'seconds':>9} {'events/s':>10} {'vs native':>10}")
    for r in results:
        print(f"{r['variant']:<8} {r['events']:>10,} {r['seconds']:>9.1f} "
              f"{r['events_per_s']:>10,} {r['ratio_to_native']:>9.3f}x")
    report = {"benchmark": "sessionize", "machine": f"{platform.node()} "
              f"{os.cpu_count()} cores", "master": spark.sparkContext.master,
              "when": datetime.now(UTC).isoformat(timespec="seconds"), "results": results}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"sessionize-{report['when'][:19].replace(':', '')}.json").write_text(
        json.dumps(report, indent=2))
    shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(report))
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
