"""The ceiling of the speed layer on this machine: abstream's stages alone, without the
per-micro-batch work around them (counts, idempotence checks, the quarantine write, gold's
MERGE), each streamed with AvailableNow over the same beacons in one warm SparkSession.

The ingest stages are cumulative (read, then + parse, + validate, + de-duplicate, + the
bronze append, whose table the next two read); sessionize and metrics each read that bronze
table into a no-op sink. The sum of the last ingest stage, sessionize and metrics is the
least time the speed layer's operators need for the dataset: the end-to-end rate no
configuration of these operators can beat here.

    python bench/ceiling.py [--events 2000000] [--seed 1]

Prints a table, then one JSON object as the last line; writes it to bench/results/.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import DataStreamWriter
from throughput import (
    RESULTS,
    dataset,
    log_progress,
    machine,
    rate,
    records_in,
    run_to_end,
    write_result,
)

from abstream.config import Config, load_config
from abstream.durations import spark_interval
from abstream.io.sources import delta_stream, landing_lines
from abstream.io.tables import EVENTS_TABLE
from abstream.schemas import BEACON
from abstream.spark import spark_session
from abstream.stages import metrics, sessions, validate

log = logging.getLogger("bench.ceiling")


@dataclass(frozen=True)
class Stage:
    """One measured query: ``build`` returns its stream (before the sink), ``source`` which
    input it reads, ``sink`` 'noop' or 'bronze'."""

    name: str
    does: str
    source: str
    build: Callable[[DataFrame, Config], DataFrame]
    sink: str = "noop"
    output_mode: str = "append"


def _parse_only(lines: DataFrame, _: Config) -> DataFrame:
    return lines.select(F.from_json("value", BEACON).alias("b")).select("b.*")


def _validate(lines: DataFrame, config: Config) -> DataFrame:
    return validate.parse_beacons(lines, config.ingest.max_record_bytes,
                                  config.ingest.future_tolerance)


def _deduplicate(lines: DataFrame, config: Config) -> DataFrame:
    return validate.drop_duplicate_events(_validate(lines, config), config.ingest.dedupe_window)


def _bronze(lines: DataFrame, config: Config) -> DataFrame:
    return validate.valid_events(_deduplicate(lines, config))


def _sessionize(events: DataFrame, config: Config) -> DataFrame:
    settings = config.sessionize
    return sessions.assemble_visits(
        events.withWatermark("event_ts", spark_interval(settings.lateness)), settings.gap)


def _metrics(events: DataFrame, config: Config) -> DataFrame:
    settings = config.metrics
    return metrics.experiment_metrics(
        events.withWatermark("event_ts", spark_interval(settings.lateness)), None,
        metrics.Windowing.of(settings), settings.hll_lg_k)


STAGES = (
    Stage("read", "landing files as lines", "landing", lambda lines, _: lines),
    Stage("parse", "+ from_json alone", "landing", _parse_only),
    Stage("validate", "+ abstream's checks (parse_beacons)", "landing", _validate),
    Stage("deduplicate", "+ dropDuplicatesWithinWatermark", "landing", _deduplicate),
    Stage("ingest", "+ bronze append (Delta)", "landing", _bronze, sink="bronze"),
    Stage("sessionize", "bronze -> session_window", "bronze", _sessionize),
    Stage("metrics", "bronze -> windowed aggregation, HLL", "bronze", _metrics,
          output_mode="update"),
)
#: The stages whose times add up to the speed layer's operators, end to end.
END_TO_END = ("ingest", "sessionize", "metrics")


def stream(spark: SparkSession, stage: Stage, config: Config, landing: Path,
           work: Path) -> DataStreamWriter:
    if stage.source == "landing":
        source = landing_lines(spark, str(landing), config.ingest.max_files_per_trigger)
    else:
        source = delta_stream(spark, str(work / "bronze"), config.sessionize.max_files_per_trigger)
    writer = (stage.build(source, config).writeStream.outputMode(stage.output_mode)
              .option("checkpointLocation", str(work / "checkpoints" / stage.name))
              .trigger(availableNow=True))
    if stage.sink == "bronze":
        return writer.format("delta").partitionBy(*EVENTS_TABLE.partition_by) \
            .option("path", str(work / "bronze"))
    return writer.format("noop")


def measure(spark: SparkSession, stage: Stage, config: Config, landing: Path,
            work: Path) -> float:
    """Seconds the stage takes over the whole input, logging progress as it goes."""
    began = time.monotonic()
    return run_to_end(stream(spark, stage, config, landing, work).start(), stage.name, began)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=2_000_000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    log_progress()
    landing = dataset(args.events, args.seed)
    records = records_in(landing)
    config = load_config()
    work = RESULTS / "work-ceiling"
    shutil.rmtree(work, ignore_errors=True)
    spark = spark_session(config.spark)
    warm_up = dataset(50_000, args.seed)
    log.info("warm-up on %s beacons", f"{records_in(warm_up):,}")
    for stage in STAGES:
        measure(spark, stage, config, warm_up, work / "warm-up")
    seconds: dict[str, float] = {}
    for number, stage in enumerate(STAGES, 1):
        log.info("stage %d of %d: %s (%s)", number, len(STAGES), stage.name, stage.does)
        seconds[stage.name] = measure(spark, stage, config, landing, work)
    spark.stop()
    shutil.rmtree(work, ignore_errors=True)
    operators = round(sum(seconds[name] for name in END_TO_END), 2)
    result = {
        "benchmark": "ceiling", "events": records,
        "stages": {stage.name: {"does": stage.does, "seconds": seconds[stage.name],
                                "events_per_s": rate(records, seconds[stage.name])}
                   for stage in STAGES},
        "operators_seconds": operators,
        "ceiling_events_per_s": rate(records, operators),
        "machine": machine(), "master": config.spark.master,
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    print(f"\n{'stage':<12} {'what it runs':<38} {'seconds':>8} {'events/s':>10}")
    for name, stage in result["stages"].items():
        print(f"{name:<12} {stage['does']:<38} {stage['seconds']:>8.1f} "
              f"{stage['events_per_s']:>10,}")
    print(f"{'end to end':<12} {' + '.join(END_TO_END):<38} {operators:>8.1f} "
          f"{result['ceiling_events_per_s']:>10,}")
    write_result(result, f"ceiling-{records}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
