"""Throughput of the speed layer (ingest -> sessionize) against a naive Spark
session_window chain and against a parse floor, on the same generated beacons, in the same
run.

The beacons are generated once per (events, seed) under bench/data/ and reused. Each side
runs in a JVM of its own, started cold, while this process samples the resident memory of
that process tree:

- pipeline: abstream's components as ``abstream run --once`` runs them (AvailableNow,
  one after the other, the default configuration plus ``--config`` / ABSTREAM__* settings),
  each timed on its own, with the time of each step of its micro-batches;
- baseline: the JSON files read with Spark's JSON source, a ``session_window`` per session,
  then a 5-minute windowed aggregation per experiment and variant into a Delta table, all
  with Spark's defaults (200 shuffle partitions, the HDFS-backed state store);
- parse floor: the landing files read as lines and parsed with the beacon schema
  (``from_json``), into Spark's no-op sink: what any job over these files costs at least;
- warm: the pipeline twice in one JVM, each time into fresh tables: the first pass is a
  second cold figure (``cold_again_events_per_s``: with the first, the run's noise), the
  second runs with every class loaded and compiled, as a service that has run a while
  does (``warm_end_to_end_events_per_s``).

    python -m bench.throughput [--events 2000000] [--seed 1] [--config FILE]

Prints a table, then one JSON object as the last line; writes it to bench/results/.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from abstream.config import SparkSettings, load_config
from abstream.io.spark import spark_session
from abstream.layout import Layout
from abstream.speed.runner import pipeline, run_once
from bench.common import (
    BEACON,
    COMPONENTS,
    RESULTS,
    dataset,
    dataset_parser,
    folder_bytes,
    link_landing,
    log_progress,
    machine,
    rate,
    records_in,
    run_phase,
    run_to_end,
    speed_layer_rates,
    write_result,
)

log = logging.getLogger("bench.throughput")
#: Spark's own defaults for the settings abstream changes, for the baseline.
SPARK_DEFAULTS = {
    "spark.sql.shuffle.partitions": "200",
    "spark.sql.streaming.stateStore.providerClass":
        "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "false",
    "spark.sql.streaming.sessionWindow.merge.sessions.in.local.partition": "false",
    "spark.sql.objectHashAggregate.sortBased.fallbackThreshold": "128",
    "spark.sql.inMemoryColumnarStorage.compressed": "true",
}


def run_pipeline(landing: Path, work: Path, config_file: str | None) -> dict[str, Any]:
    """The speed layer over ``landing`` into fresh tables under ``work``, in this process's
    SparkSession (the first pass starts it); its figures."""
    config = load_config(config_file, data_dir=work)
    layout = Layout.of_config(config)
    link_landing(landing, Path(layout.landing))
    seconds: dict[str, float] = {}
    with pipeline(config) as ctx:
        for component in COMPONENTS:
            began = time.monotonic()
            run_once(ctx, [component])
            seconds[component.name] = round(time.monotonic() - began, 2)
        stats = ctx.stats.as_dict()
    return {
        "seconds": seconds,
        "rows_in": {name: stats[name]["input_rows"] for name in seconds},
        "duplicates_dropped": {name: stats[name]["duplicates_dropped"] for name in seconds},
        "late_rows_dropped": {name: stats[name]["late_rows_dropped"] for name in seconds},
        "written": {name: stats[name]["written"] for name in seconds},
        "state_rows": {name: stats[name]["state_rows"] for name in seconds},
        "peak_state_rows": {name: stats[name]["peak_state_rows"] for name in seconds},
        "state_memory_bytes": {name: stats[name]["state_memory_bytes"] for name in seconds},
        "state_disk_bytes": {name: folder_bytes(Path(layout.checkpoint(name)) / "state")
                             for name in seconds},
        "step_seconds": {name: stats[name]["step_seconds"] for name in seconds},
    }


def run_passes(landing: Path, folders: list[Path], config_file: str | None
               ) -> list[dict[str, Any]]:
    """``run_pipeline`` into each of ``folders`` in turn, in one JVM."""
    results = [run_pipeline(landing, folder, config_file) for folder in folders]
    SparkSession.getActiveSession().stop()
    return results


def naive_chain(beacons: DataFrame) -> DataFrame:
    """Visits by session_window, then visits, bounces, orders, revenue and approximate
    visitors per experiment, variant and 5-minute window of the visit's start."""
    events = beacons.select(
        "session_id", "visitor_id", "type", "revenue", "experiments",
        F.try_to_timestamp("event_ts").alias("event_ts"),
    ).where(F.col("event_ts").isNotNull()).withWatermark("event_ts", "15 minutes")
    visits = events.groupBy("session_id", F.session_window("event_ts", "35 minutes")).agg(
        F.first("visitor_id").alias("visitor_id"),
        F.first("experiments").alias("experiments"),
        F.count_if(F.col("type") == "pageview").alias("pageviews"),
        F.count_if(F.col("type") == "order").alias("orders"),
        F.sum("revenue").alias("revenue"),
        F.count(F.lit(1)).alias("events"),
    )
    return visits.select(
        F.col("session_window.start").alias("visit_start"), "visitor_id", "pageviews",
        "orders", "revenue", "events", F.explode("experiments").alias("e"),
    ).withWatermark("visit_start", "15 minutes").groupBy(
        F.window("visit_start", "5 minutes"), F.col("e.id").alias("experiment_id"),
        F.col("e.variant").alias("variant"),
    ).agg(
        F.count(F.lit(1)).alias("visits"),
        F.count_if((F.col("pageviews") == 1) & (F.col("events") == 1)).alias("bounces"),
        F.sum("orders").alias("orders"),
        F.sum("revenue").alias("revenue"),
        F.approx_count_distinct("visitor_id").alias("visitors"),
    )


def run_baseline(landing: Path, work: Path) -> dict[str, Any]:
    spark: SparkSession = spark_session(SparkSettings(conf=SPARK_DEFAULTS))
    beacons = spark.readStream.schema(BEACON).json(str(landing))
    began = time.monotonic()
    query = (naive_chain(beacons).writeStream.format("delta").outputMode("append")
             .option("checkpointLocation", str(work / "checkpoint"))
             .trigger(availableNow=True).start(str(work / "metrics")))
    seconds = run_to_end(query, "baseline", began)
    rows = spark.read.format("delta").load(str(work / "metrics")).count()
    spark.stop()
    return {"seconds": seconds, "metric_rows": rows}


def machine_pace(seed: int) -> dict[str, Any]:
    """The naive baseline of ``make bench`` on its 2,000,000 beacons (``seed``), cold, in a
    JVM of its own: the machine's pace that day. A long benchmark records it beside its own
    figures, and their ratio to it compares across days, which a 2-core VM's absolute
    figures do not (its pace has varied several-fold between days, see docs/benchmarks.md)."""
    landing = dataset(2_000_000, seed)
    work = RESULTS / "work-pace"
    shutil.rmtree(work, ignore_errors=True)
    log.info("the machine's pace: the naive baseline on %s beacons, cold", "2,000,000")
    result = run_phase("baseline", landing, work, None)
    shutil.rmtree(work, ignore_errors=True)
    records = records_in(landing)
    return {"benchmark": "naive baseline", "records": records,
            "seconds": round(result["seconds"], 1),
            "events_per_s": rate(records, result["seconds"])}


def run_parse_floor(landing: Path, work: Path) -> dict[str, Any]:
    spark: SparkSession = spark_session(SparkSettings())
    lines = spark.readStream.format("text").load(str(landing))
    parsed = lines.select(F.from_json("value", BEACON).alias("b")).select("b.*")
    began = time.monotonic()
    query = (parsed.writeStream.format("noop")
             .option("checkpointLocation", str(work / "checkpoint"))
             .trigger(availableNow=True).start())
    seconds = run_to_end(query, "parse floor", began)
    spark.stop()
    return {"seconds": seconds}


def summarize(records: int, pipeline_result: dict, baseline: dict, floor: dict,
              config_file: str | None, *, warm: dict[str, Any]) -> dict[str, Any]:
    rates = speed_layer_rates(records, pipeline_result["seconds"])
    end_to_end = rates["end_to_end_events_per_s"]
    base = rate(records, baseline["seconds"])
    parse_floor = rate(records, floor["seconds"])
    again, warmed = (speed_layer_rates(records, side["seconds"]) for side in warm["passes"])
    return {
        "benchmark": "throughput",
        "events": records,
        "end_to_end_events_per_s": end_to_end,
        "baseline_events_per_s": base,
        "ratio": round(end_to_end / base, 3) if base else None,
        "parse_floor_events_per_s": parse_floor,
        "end_to_end_over_parse_floor": round(end_to_end / parse_floor, 3) if parse_floor
        else None,
        "per_component_events_per_s": rates["per_component_events_per_s"],
        "cold_again_events_per_s": again["end_to_end_events_per_s"],
        "warm_end_to_end_events_per_s": warmed["end_to_end_events_per_s"],
        "warm_ratio": round(warmed["end_to_end_events_per_s"] / base, 3) if base else None,
        "warm_per_component_events_per_s": warmed["per_component_events_per_s"],
        "warm_step_seconds": warm["passes"][1]["step_seconds"],
        "peak_rss_mb": pipeline_result["peak_rss_mb"],
        "warm_peak_rss_mb": warm["peak_rss_mb"],
        "baseline_peak_rss_mb": baseline["peak_rss_mb"],
        "seconds": {**rates["seconds"], "baseline": baseline["seconds"],
                    "parse_floor": floor["seconds"],
                    "cold_again": again["seconds"]["end_to_end"],
                    "warm": warmed["seconds"]["end_to_end"]},
        "rows_in": pipeline_result["rows_in"],
        "written": pipeline_result["written"],
        "state_rows": pipeline_result["state_rows"],
        "state_memory_bytes": pipeline_result["state_memory_bytes"],
        "state_disk_bytes": pipeline_result["state_disk_bytes"],
        "step_seconds": pipeline_result["step_seconds"],
        "baseline_metric_rows": baseline["metric_rows"],
        "config": config_file,
        "settings": {name: value for name, value in sorted(os.environ.items())
                     if name.startswith("ABSTREAM__")},
        "machine": machine(),
        "master": "local[2]",
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def print_table(result: dict[str, Any]) -> None:
    seconds = result["seconds"]
    print(f"\n{'stage':<22} {'seconds':>9} {'events/s':>10}")
    for name, per_s in result["per_component_events_per_s"].items():
        print(f"{name:<22} {seconds[name]:>9.1f} {per_s:>10,}")
    print(f"{'speed layer, end to end':<22} {seconds['end_to_end']:>9.1f} "
          f"{result['end_to_end_events_per_s']:>10,}")
    print(f"{'naive baseline':<22} {seconds['baseline']:>9.1f} "
          f"{result['baseline_events_per_s']:>10,}")
    print(f"{'parse floor':<22} {seconds['parse_floor']:>9.1f} "
          f"{result['parse_floor_events_per_s']:>10,}")
    print(f"{'speed layer, cold again':<22} {seconds['cold_again']:>9.1f} "
          f"{result['cold_again_events_per_s']:>10,}")
    print(f"{'speed layer, warm':<22} {seconds['warm']:>9.1f} "
          f"{result['warm_end_to_end_events_per_s']:>10,}")
    print_steps(result)
    print(f"\n{result['events']:,} beacons; end to end / baseline = {result['ratio']}x; "
          f"end to end / parse floor = {result['end_to_end_over_parse_floor']}x; "
          f"warm / baseline = {result['warm_ratio']}x; "
          f"peak RSS {result['peak_rss_mb']:,} MB (baseline {result['baseline_peak_rss_mb']:,} MB)"
          f"; {result['machine']}")


def print_steps(result: dict[str, Any]) -> None:
    """Where each component's time went: its steps (``RunStats.step``), and the rest (query
    start, planning, reading its source, the steps' Python)."""
    print(f"\n{'component':<11} {'step':<26} {'seconds':>8} {'share':>6}")
    for name, steps in result["step_seconds"].items():
        total = result["seconds"][name]
        rest = total - sum(steps.values())
        for step, seconds in [*steps.items(), ("other", rest)]:
            print(f"{name:<11} {step:<26} {seconds:>8.1f} {seconds / total:>6.0%}")


def main() -> int:
    parser = dataset_parser(__doc__, 2_000_000)
    parser.add_argument("--config", help="an abstream YAML config for the pipeline side")
    parser.add_argument("--phase", choices=("pipeline", "baseline", "parse-floor", "warm"),
                        help=argparse.SUPPRESS)
    parser.add_argument("--landing", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    log_progress()

    if args.phase == "pipeline":
        # The other benchmarks read the tables this phase leaves in ``--work``.
        print(json.dumps(run_passes(args.landing, [args.work], args.config)[0]))
        return 0
    if args.phase == "warm":
        print(json.dumps({"passes": run_passes(
            args.landing, [args.work / "cold-again", args.work / "warm"], args.config)}))
        return 0
    if args.phase == "baseline":
        print(json.dumps(run_baseline(args.landing, args.work)))
        return 0
    if args.phase == "parse-floor":
        print(json.dumps(run_parse_floor(args.landing, args.work)))
        return 0

    landing = dataset(args.events, args.seed)
    records = records_in(landing)
    work = RESULTS / "work-throughput"
    shutil.rmtree(work, ignore_errors=True)
    log.info("speed layer on %s beacons", f"{records:,}")
    pipeline_result = run_phase("pipeline", landing, work / "pipeline", args.config)
    log.info("naive baseline on the same beacons")
    baseline = run_phase("baseline", landing, work / "baseline", None)
    log.info("parse floor on the same beacons")
    floor = run_phase("parse-floor", landing, work / "parse-floor", None)
    log.info("the speed layer twice in one JVM: cold again, then warm")
    warm = run_phase("warm", landing, work / "warm", args.config)
    shutil.rmtree(work, ignore_errors=True)
    result = summarize(records, pipeline_result, baseline, floor, args.config, warm=warm)
    print_table(result)
    write_result(result, f"throughput-{records}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
