"""How to sessionize a stream: Spark's session_window, abstream's sessionize per batch, Python.

Ways to find visits in a stream of events: Spark's streaming session_window,
abstream's window-function sessionize inside foreachBatch, and a Python stateful processor.

Builds a bronze table from generated beacons (one Delta commit per landing file), then
streams it with AvailableNow through each sessionizer and reports events/s. Every variant
reads the same table in the same run, after a warm-up run of its own, and emits closed
visits:

- native: ``session_window`` in Spark's streaming state store (RocksDB, changelog
  checkpoints, sessions merged in each partition first), into a no-op sink;
- wide: the same, carrying whole events in state;
- batch: abstream's sessions stage (``with_visit_start``'s window functions, then
  ``assemble_visits``' aggregates) inside ``foreachBatch`` over each micro-batch's events,
  visits into a no-op sink
  (the sessionize component also carries the open visits' events between micro-batches);
- python: ``transformWithStateInPandas`` with event-time timers.

    python -m bench.sessionize [--events 200000] [--variants native,batch,python]
                               [--max-files-per-trigger 8]
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import DataStreamWriter
from pyspark.sql.streaming.stateful_processor import (
    StatefulProcessor,
    StatefulProcessorHandle,
)
from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

from abstream.config import EventsSettings, load_config
from abstream.durations import spark_interval
from abstream.generator.write import GeneratorSettings, generate
from abstream.io.spark import spark_session
from abstream.metrics.catalog import default_catalog
from abstream.stages import sessions
from abstream.stages.beacons import parse_beacons, valid_events
from abstream.stages.dedupe import drop_duplicate_events
from bench.common import RESULTS, dataset_parser, log_progress, write_result

log = logging.getLogger("bench.sessionize")
GAP = timedelta(minutes=35)
LATENESS = timedelta(minutes=15)
#: The bronze columns sessionized: those of the default catalog.
COLUMNS = sessions.session_columns(default_catalog(), EventsSettings())
#: As abstream's sessionize reads bronze: a few commits per micro-batch.
MAX_FILES_PER_TRIGGER = 8
#: Spark's streaming state store as abstream configured it before its speed layer dropped
#: streaming state: RocksDB with changelog checkpoints, sessions merged in each partition
#: before the shuffle. For the variants that keep state in Spark's store.
STATE_STORE_CONF = {
    "spark.sql.streaming.stateStore.providerClass":
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
    "spark.sql.streaming.sessionWindow.merge.sessions.in.local.partition": "true",
}
#: What the batch variant carries between micro-batches: the open visits' events.

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


def _in_store(operator: Callable[[DataFrame], DataFrame]) -> Callable[[DataFrame, Path],
                                                                      DataStreamWriter]:
    """A variant whose state lives in Spark's state store: watermark, operator, no-op."""
    def variant(events: DataFrame, checkpoint: Path) -> DataStreamWriter:
        visits = operator(events.withWatermark("event_ts", spark_interval(LATENESS)))
        return visits.writeStream.format("noop").outputMode("append") \
            .option("checkpointLocation", str(checkpoint))
    return variant


@_in_store
def native(events: DataFrame) -> DataFrame:
    """session_window over the columns abstream sessionizes, with silver's counters and the
    experiment entries collected."""
    return events.select(*COLUMNS) \
        .groupBy("session_id", F.session_window("event_ts", spark_interval(GAP))).agg(
            F.min("event_ts").alias("visit_start"),
            *sessions.visit_counters(default_catalog()),
            F.collect_list("experiments").alias("entry_sets"),
        )


@_in_store
def wide(events: DataFrame) -> DataFrame:
    """session_window carrying whole events (every column, arrays and structs) in state."""
    return events.groupBy("session_id", F.session_window("event_ts", spark_interval(GAP))) \
        .agg(F.collect_list(F.struct(*events.columns)).alias("all_events"),
             F.first(F.struct(*events.columns)).alias("first_event"))


@_in_store
def python(events: DataFrame) -> DataFrame:
    """A transformWithStateInPandas sessionizer with event-time timers (RocksDB state)."""
    return events.select("session_id", "event_ts", "type").groupBy("session_id") \
        .transformWithStateInPandas(PythonSessionizer(), VISIT, "Append", "EventTime")


def batch(events: DataFrame, checkpoint: Path) -> DataStreamWriter:
    """abstream's sessions stage (window functions, then aggregates) as a batch job inside
    foreachBatch, over each micro-batch's events (the sessionize component adds the open
    visits' events, read from its state snapshot)."""
    def write(new: DataFrame, batch_id: int) -> None:
        visits = sessions.assemble_visits(
            sessions.with_visit_start(new.select(*COLUMNS), GAP),
            default_catalog())
        visits.write.format("noop").mode("overwrite").save()

    return events.writeStream.foreachBatch(write).option("checkpointLocation", str(checkpoint))


VARIANTS: dict[str, Callable[[DataFrame, Path], DataStreamWriter]] = {
    "native": native, "wide": wide, "batch": batch, "python": python}


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
        parsed = parse_beacons(raw, EventsSettings(), 65_536, timedelta(days=1))
        drop_duplicate_events(valid_events(parsed)).write \
            .format("delta").mode("append").save(bronze)
        log.info("bronze commit %d/%d", number, len(files))
    return bronze, spark.read.format("delta").load(bronze).count()


def measure(spark: SparkSession, name: str, bronze: str, work: Path, rows: int, *,
            max_files: int) -> dict:
    checkpoint = work / f"checkpoint-{name}"
    shutil.rmtree(checkpoint, ignore_errors=True)
    events = spark.readStream.format("delta").option("maxFilesPerTrigger", max_files) \
        .load(bronze)
    query = VARIANTS[name](events, checkpoint).trigger(availableNow=True)
    began = time.monotonic()
    running = query.start()
    while not running.awaitTermination(5):
        progress = running.lastProgress
        log.info("%s: batch %s, %.0f s", name, progress and progress["batchId"],
                 time.monotonic() - began)
    seconds = time.monotonic() - began
    return {"variant": name, "events": rows, "seconds": round(seconds, 2),
            "events_per_s": round(rows / seconds),
            "micro_batches": last["batchId"] + 1 if (last := running.lastProgress) else 0}


def variant_list(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in VARIANTS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown variant {unknown[0] if unknown else ''!r};"
                                         f" choose from {', '.join(VARIANTS)}")
    return names


def main() -> int:
    parser = dataset_parser(__doc__, 200_000)
    parser.add_argument("--variants", type=variant_list, default=["native", "batch", "python"],
                        help=f"comma-separated, of {', '.join(VARIANTS)} "
                             "(default: native,batch,python)")
    parser.add_argument("--max-files-per-trigger", type=int, default=MAX_FILES_PER_TRIGGER,
                        help="bronze files per micro-batch")
    args = parser.parse_args()
    log_progress()

    work = RESULTS / "work-sessionize"
    shutil.rmtree(work, ignore_errors=True)
    settings = load_config().spark
    spark = spark_session(settings.model_copy(
        update={"conf": {**STATE_STORE_CONF, **settings.conf}}))
    bronze, rows = build_bronze(spark, work, args.events, args.seed)
    for name in args.variants:
        log.info("warming up %s", name)
        measure(spark, name, bronze, work, rows, max_files=args.max_files_per_trigger)
    results = []
    for name in args.variants:
        log.info("measuring %s", name)
        results.append(measure(spark, name, bronze, work, rows,
                               max_files=args.max_files_per_trigger))
    base = next((r for r in results if r["variant"] == "native"), results[0])
    for r in results:
        r["ratio_to_native"] = round(r["events_per_s"] / base["events_per_s"], 3)
    print(f"\n{'variant':<8} {'events':>10} {'batches':>8} {'seconds':>9} {'events/s':>10} "
          f"{'vs native':>10}")
    for r in results:
        print(f"{r['variant']:<8} {r['events']:>10,} {r['micro_batches']:>8} "
              f"{r['seconds']:>9.1f} {r['events_per_s']:>10,} {r['ratio_to_native']:>9.3f}x")
    report = {"benchmark": "sessionize", "machine": f"{platform.node()} "
              f"{os.cpu_count()} cores", "master": spark.sparkContext.master,
              "when": datetime.now(UTC).isoformat(timespec="seconds"), "results": results}
    shutil.rmtree(work, ignore_errors=True)
    write_result(report, "sessionize")
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
