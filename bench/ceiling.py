"""What each piece of the speed layer's work costs as a plain batch job on this machine: the
floor a speed layer built of batch jobs can approach.

The speed layer runs every micro-batch as a batch job (ingest: parse, check, de-duplicate,
append bronze; sessionize: window functions over the new and the still-open events, then
gold's aggregation). Each piece here runs once over the whole benchmark dataset into Spark's
no-op sink (the bronze write into a Delta table), in one warm SparkSession, so its rows/s is
what that piece costs without any micro-batch around it: no trigger, no checkpoint, no
state carried, no idempotence check. A speed layer cannot do better than its pieces; how
close it comes is what its per-micro-batch overhead costs. The two fixed costs every
micro-batch pays at least, a small Delta append and a trivial Spark job, are measured too.

Landing pieces read the landing files (cumulative from ``read``, except ``json-source``,
Spark's JSON file source for comparison); ``write-bronze`` writes the valid, de-duplicated
events to a Delta table partitioned like bronze, which the bronze pieces then read. The
last piece is ``make bench``'s naive chain as one batch job in the same session: its time
over the floor's compares the work of the speed layer's stage functions with the naive
chain's, both as batch jobs (``make bench`` runs the naive chain as a stream, with Spark's
streaming defaults, which costs it more).

    python -m bench.ceiling [--events 1000000] [--seed 1]

Prints a table, then one JSON object as the last line; writes it to bench/results/.
"""

from __future__ import annotations

import logging
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from abstream.config import Config, load_config
from abstream.durations import spark_interval
from abstream.io.spark import spark_session
from abstream.io.tables import EVENTS_TABLE
from abstream.stages import beacons, gold, sessions
from bench.common import (
    BEACON,
    RESULTS,
    dataset,
    dataset_parser,
    log_progress,
    machine,
    rate,
    records_in,
    write_result,
)
from bench.throughput import naive_chain

log = logging.getLogger("bench.ceiling")
#: Beacons of the warm-up run (fewer when the measured dataset is smaller).
WARM_UP_EVENTS = 50_000
#: Repetitions of the fixed costs; their median is reported.
SMALL_APPENDS, TRIVIAL_JOBS = 5, 10


@dataclass(frozen=True)
class Inputs:
    """Where a piece reads from and writes to."""

    spark: SparkSession
    config: Config
    landing: Path
    bronze: Path

    def lines(self) -> DataFrame:
        """The landing files as lines, with the columns ``parse_beacons`` expects (as
        ``io.sources.landing_lines`` reads them, in one batch)."""
        return self.spark.read.format("text").load(str(self.landing)).select(
            "value",
            F.col("_metadata.file_path").alias("source_file"),
            F.col("_metadata.file_modification_time").alias("arrived_at"),
            F.current_timestamp().alias("ingested_at"),
        )

    def events(self) -> DataFrame:
        return self.spark.read.format("delta").load(str(self.bronze))


@dataclass(frozen=True)
class Piece:
    """One batch job: ``build`` returns what it computes; ``source`` is 'landing' or
    'bronze' (what its rows are counted in); ``sink`` 'noop' or 'bronze'."""

    name: str
    does: str
    source: str
    build: Callable[[Inputs], DataFrame]
    sink: str = "noop"


def _parse(i: Inputs) -> DataFrame:
    return i.lines().select(F.from_json("value", BEACON).alias("b")).select("b.*")


def _json_source(i: Inputs) -> DataFrame:
    return i.spark.read.schema(BEACON).json(str(i.landing))


def _checked(i: Inputs) -> DataFrame:
    settings = i.config.ingest
    return beacons.parse_beacons(i.lines(), i.config.events, settings.max_record_bytes,
                                  settings.future_tolerance)


def _unique(i: Inputs) -> DataFrame:
    # One pass, one shuffle of the wide rows: the cheapest job for it. The speed layer's
    # narrow-id form (``stages.dedupe``) reads its input more than once, from a cache.
    return beacons.valid_events(_checked(i)).dropDuplicates(["event_id"])


def _session_window(i: Inputs) -> DataFrame:
    gap = spark_interval(i.config.sessionize.gap)
    return i.events().groupBy("session_id", F.session_window("event_ts", gap)).agg(
        F.first("visitor_id").alias("visitor_id"),
        F.count(F.lit(1)).alias("events"),
        F.count_if(F.col("type") == "pageview").alias("pageviews"),
        F.count_if(F.col("type") == "order").alias("orders"),
        F.sum("revenue").alias("revenue"),
    )


def _started(i: Inputs) -> DataFrame:
    columns = sessions.session_columns(i.config.metrics.catalog, i.config.events)
    return sessions.with_visit_start(i.events().select(*columns), i.config.sessionize.gap)


def _visits(i: Inputs) -> DataFrame:
    return sessions.assemble_visits(_started(i), i.config.metrics.catalog)


def _gold(i: Inputs) -> DataFrame:
    started = _started(i)
    visits = sessions.assemble_visits(started, i.config.metrics.catalog)
    return gold.experiment_metrics(
        sessions.event_targets(started, sessions.visit_entries(visits)),
        sessions.visit_targets(visits), gold.Windowing.of(i.config.metrics),
        i.config.metrics.hll_lg_k)


def _naive_chain(i: Inputs) -> DataFrame:
    return naive_chain(_json_source(i))


def _group_by_session(i: Inputs) -> DataFrame:
    return i.events().groupBy("session_id").agg(
        F.count(F.lit(1)).alias("events"), F.min("event_ts").alias("first"),
        F.max("event_ts").alias("last"))


#: What the floor is compared with: the naive chain's work as a batch job.
NAIVE = "naive-chain"


PIECES = (
    Piece("read", "landing files as lines (text source)", "landing", Inputs.lines),
    Piece("from-json", "+ from_json, beacon schema", "landing", _parse),
    Piece("json-source", "Spark's JSON file source, beacon schema", "landing", _json_source),
    Piece("parse-beacons", "lines + parse_beacons (every check)", "landing", _checked),
    Piece("dedupe", "+ dropDuplicates(event_id) of the valid", "landing", _unique),
    Piece("write-bronze", "+ write Delta (bronze)", "landing", _unique, sink="bronze"),
    Piece("session-window", "bronze -> session_window visits", "bronze", _session_window),
    Piece("sessionize", "bronze -> sessions.assemble_visits", "bronze", _visits),
    Piece("gold", "bronze -> sessionize + experiment_metrics", "bronze", _gold),
    Piece("group-session", "bronze -> groupBy(session_id)", "bronze", _group_by_session),
    Piece(NAIVE, "make bench's naive baseline, as one batch job", "landing", _naive_chain),
)
#: The pieces a speed layer of batch jobs runs over every event: ingest's, then
#: sessionize's; their summed time is its floor on this machine.
FLOOR = ("write-bronze", "gold")


def run(piece: Piece, inputs: Inputs) -> float:
    """Seconds the piece takes over its whole input, building its plan included (a
    micro-batch builds its plan again every time)."""
    began = time.monotonic()
    result = piece.build(inputs)
    if piece.sink == "bronze":
        result.write.format("delta").mode("overwrite") \
            .partitionBy(*EVENTS_TABLE.partition_by).save(str(inputs.bronze))
    else:
        result.write.format("noop").mode("overwrite").save()
    return round(time.monotonic() - began, 2)


def run_all(inputs: Inputs) -> dict[str, float]:
    seconds: dict[str, float] = {}
    for number, piece in enumerate(PIECES, 1):
        seconds[piece.name] = run(piece, inputs)
        log.info("piece %d of %d: %-15s %7.2f s  (%s)", number, len(PIECES), piece.name,
                 seconds[piece.name], piece.does)
    return seconds


def median_ms(action: Callable[[], object], times: int) -> float:
    taken = []
    for _ in range(times):
        began = time.perf_counter()
        action()
        taken.append((time.perf_counter() - began) * 1000)
    return round(statistics.median(taken), 1)


def fixed_costs(inputs: Inputs, work: Path) -> dict[str, float]:
    """Milliseconds, median: a 10-row append to a Delta table partitioned like bronze (the
    table created beforehand), and ``spark.range(10).collect()``."""
    spark = inputs.spark
    rows = spark.createDataFrame(inputs.events().limit(10).collect(), inputs.events().schema)
    small = str(work / "small")

    def append() -> None:
        rows.write.format("delta").mode("append").partitionBy(*EVENTS_TABLE.partition_by) \
            .save(small)

    append()
    return {"delta_append_10_rows_ms": median_ms(append, SMALL_APPENDS),
            "range_10_collect_ms": median_ms(lambda: spark.range(10).collect(), TRIVIAL_JOBS)}


def main() -> int:
    parser = dataset_parser(__doc__, 1_000_000)
    args = parser.parse_args()
    log_progress()
    landing = dataset(args.events, args.seed)
    records = records_in(landing)
    config = load_config()
    work = RESULTS / "work-ceiling"
    shutil.rmtree(work, ignore_errors=True)
    spark = spark_session(config.spark)
    warm_up = dataset(min(WARM_UP_EVENTS, args.events), args.seed)
    log.info("warm-up on %s beacons", f"{records_in(warm_up):,}")
    run_all(Inputs(spark, config, warm_up, work / "warm-up" / "bronze"))
    log.info("measuring on %s beacons", f"{records:,}")
    inputs = Inputs(spark, config, landing, work / "bronze")
    seconds = run_all(inputs)
    bronze_rows = inputs.events().count()
    costs = fixed_costs(inputs, work)
    spark.stop()
    shutil.rmtree(work, ignore_errors=True)
    rows = {"landing": records, "bronze": bronze_rows}
    floor = round(sum(seconds[name] for name in FLOOR), 2)
    result: dict[str, Any] = {
        "benchmark": "ceiling", "events": records, "bronze_rows": bronze_rows,
        "pieces": {piece.name: {"does": piece.does, "reads": piece.source,
                                "rows": rows[piece.source], "seconds": seconds[piece.name],
                                "rows_per_s": rate(rows[piece.source], seconds[piece.name])}
                   for piece in PIECES},
        "floor": {"pieces": list(FLOOR), "seconds": floor,
                  "events_per_s": rate(records, floor),
                  "naive_over_floor": round(seconds[NAIVE] / floor, 3)},
        "fixed_costs": costs,
        "machine": machine(), "master": config.spark.master,
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    print_table(result)
    write_result(result, f"ceiling-{records}")
    return 0


def print_table(result: dict[str, Any]) -> None:
    print(f"\n{'piece':<15} {'what it runs':<42} {'rows':>10} {'seconds':>8} {'rows/s':>10}")
    for name, piece in result["pieces"].items():
        print(f"{name:<15} {piece['does']:<42} {piece['rows']:>10,} {piece['seconds']:>8.2f} "
              f"{piece['rows_per_s']:>10,}")
    floor = result["floor"]
    print(f"{'floor':<15} {' + '.join(floor['pieces']) + ' (events/s)':<42} "
          f"{result['events']:>10,} {floor['seconds']:>8.2f} {floor['events_per_s']:>10,}")
    print(f"naive chain / floor = {floor['naive_over_floor']:.3f}x: the naive chain's time "
          "over the floor's, both as batch jobs")
    costs = result["fixed_costs"]
    print(f"\nfixed costs (median): Delta append of 10 rows {costs['delta_append_10_rows_ms']:,.0f}"
          f" ms; spark.range(10).collect() {costs['range_10_collect_ms']:,.1f} ms")


if __name__ == "__main__":
    sys.exit(main())
