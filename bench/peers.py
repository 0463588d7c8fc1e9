"""abstream's speed layer against its peers, Flink SQL and the idiomatic Structured Streaming
job, on the same generated beacons, on the same machine, in one run.

Every engine reads the dataset's JSON lines (``bench.common.dataset``) and does the same
work: the beacons that pass one set of checks, each ``event_id`` once, visits split by a
35-minute gap per ``session_id`` (event time, 15 minutes of lateness: abstream's
``sessionize.gap`` and ``sessionize.lateness``), then per experiment x variant x 5-minute
window: visitors (distinct visitor_ids), visits, orders and revenue.

- flink: Flink SQL through PyFlink on a local mini-cluster (one TaskManager, parallelism 2):
  the filesystem source in JSON format with the watermark in its DDL, deduplication by
  ``ROW_NUMBER() OVER (PARTITION BY event_id ORDER BY ts)``, the ``SESSION`` window TVF
  per session_id, then a ``TUMBLE`` of the visits; into Parquet files (``flink``: the
  filesystem connector; its flink-sql-parquet JAR is fetched from Maven Central once into
  abstream's JAR cache, and Hadoop's client, which Flink's Parquet writer needs, is
  PySpark's own), into Flink's no-op sink (``flink_noop``: ``blackhole``), and only
  reading, parsing and checking the beacons into the no-op sink (``flink_parse``: what
  Flink's work costs before any window). Flink's file source reads a folder's files in the
  order the file system lists them, not in the order they arrived, and its watermark runs
  ahead with the latest file read; so these runs read the dataset's lines dealt into one
  file per reader, each in arrival order (``deal_lines``, not timed), and ``flink_folder``
  runs the Parquet job on the dataset's folder as it is, to show what that costs;
- idiomatic: the Structured Streaming job a data engineer writes first, in the same PySpark
  with Spark's own defaults (``bench.throughput``'s baseline session): ``readStream`` of the
  JSON files with the schema, ``withWatermark``, ``dropDuplicatesWithinWatermark``,
  ``session_window``, a windowed aggregation into a Delta table, AvailableNow; it reads the
  files 50 a micro-batch, as abstream's ingest does (``ingest.max_files_per_trigger``): in
  one micro-batch, Spark's default, every event id and visit of 2,000,000 beacons would be
  in the state stores, in the driver's 1 GB heap, at once;
- abstream: the speed layer as ``bench.throughput`` runs it (ingest, then sessionize); its
  numbers are gold's ``assigned`` population.

Each engine runs in a process (and JVM) of its own, started cold, and its time runs from
submitting the job (starting the query) to all of its output written; the JVM's start is
not in it, Flink's job submission and Spark's query start are. The figures of where the
time goes are each engine's own: Flink's busy, idle and back-pressured time of each chain
of operators (its REST API, read once the job has ended: the mini-cluster is this run's own
and outlives the job), Spark's micro-batch phases and state operators (query progress),
abstream's steps (``RunStats``).

How the peers' numbers differ from abstream's definitions (docs/design.md's metric
contract), by design:

- checks: the peers keep the beacons whose ids are 1 to 128 characters not starting with
  ``{`` or ``[``, whose type is one of the four, whose amounts are not negative and whose
  ``event_ts`` is ``yyyy-MM-ddTHH:mm:ss.SSSZ`` no more than a day ahead (``VALID``); an
  experiment entry without id or variant is skipped, where abstream refuses the beacon;
  a line that does not parse into the schema is skipped (Flink) or has
  ``_corrupt_record`` set and is dropped (Spark);
- the experiments of a visit are those its events list, as in abstream (the assigned
  population); the peers have no qualified population;
- visits and their orders and revenue count in the 5-minute window of the visit's end
  (``window_time``: what either engine can window a visit by), abstream's visits in the
  window of their start and orders and revenue in the window of each order's time: the
  same totals, other windows;
- visitors: exact distinct count per window (Flink), ``approx_count_distinct`` (Spark: no
  exact distinct count in a streaming aggregation), abstream's HLL sketch;
- late events and the end of the input: each engine drops late events by its own rule
  (Flink: behind the watermark of its slowest reader at an operator; Spark: behind the
  watermark of the previous micro-batch; abstream: behind sessionize's input watermark),
  and at the end of the input Flink's final watermark closes every visit, while Spark and
  abstream keep the visits of the last 50 minutes (gap + lateness) open, waiting for more
  (abstream counts their orders already: its orders are event-level). ``agreement`` gives
  the differences of total visits and orders per experiment/variant from abstream's.

Flink runs without checkpoints and with its JVM's default heap (a quarter of the memory;
its defaults), Spark and abstream checkpoint every micro-batch and run in a 1 GB driver
(theirs); each engine's peak resident memory is reported. Flink's time from submitting the
job includes compiling the SQL and scheduling the job, a few seconds; its own job time
(``flink_job_seconds``) does not. ``make bench-peers`` installs PyFlink without its
dependencies (bench/flink-requirements.txt says why); a failed Flink run leaves its JVM's
log under bench/results/work-peers/<run>/flink-logs.

    python -m bench.peers [--events 2000000] [--seed 1]

Logs its progress and figures; prints one JSON object as the last line and writes it to
bench/results/.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import importlib.util
import json
import logging
import math
import os
import re
import shutil
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pyspark
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    DataType,
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from abstream.config import (
    BEACON_TYPES,
    IngestSettings,
    MetricsSettings,
    SessionizeSettings,
    SparkSettings,
    load_config,
)
from abstream.durations import spark_interval
from abstream.io.spark import LOCAL_GC, spark_session
from abstream.layout import Layout
from abstream.stages.beacons import CORRUPT_COLUMN, MAX_ID_LENGTH
from abstream.stages.sessions import ASSIGNED
from abstream.topology import SPEED
from bench.common import (
    BEACON,
    HERE,
    RESULTS,
    dataset,
    dataset_parser,
    log_progress,
    machine,
    rate,
    records_in,
    run_phase,
    run_to_end,
    speed_layer_rates,
    write_result,
)
from bench.throughput import SPARK_DEFAULTS, run_pipeline

log = logging.getLogger("bench.peers")

GAP = SessionizeSettings().gap
LATENESS = SessionizeSettings().lateness
WINDOW = MetricsSettings().window
FUTURE = IngestSettings().future_tolerance
PARALLELISM = 2
#: The event time as the beacon writes it, read as UTC by both peers; its shape is checked
#: first (Flink's ``TO_TIMESTAMP`` reads "2026-11-22 10:15:30" too).
TS_FORMAT = "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'"
TS_SHAPE = "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}[.][0-9]{3}Z$"
#: Flink's event time where a beacon has none (a rowtime cannot be NULL): before any
#: watermark, so it moves none, and ``VALID`` drops it.
NO_TIME = "TIMESTAMP '1970-01-01 00:00:00'"
#: What the peers read of a beacon (their JSON readers skip the rest): the experiment
#: entries without ``qualified``, which only abstream's qualified population reads.
PEER_FIELDS = ("event_id", "event_ts", "session_id", "visitor_id", "type", "revenue", "units",
               "page_load_ms", "experiments")
ASSIGNMENT = StructType([StructField("id", StringType()), StructField("variant", StringType())])
PEER_SCHEMA = StructType([
    *(StructField(name, ArrayType(ASSIGNMENT)) if name == "experiments" else BEACON[name]
      for name in PEER_FIELDS),
    BEACON[CORRUPT_COLUMN],
])
#: The measures whose totals per experiment/variant the engines are compared on.
MEASURES = ("visits", "orders")


@dataclass(frozen=True)
class FlinkRun:
    """One Flink run: the name of its figures, its sink (``parquet``, ``blackhole``, or
    ``parse``: the beacons read and checked into the no-op sink, no window), and whether it
    reads the dataset's folder as it is rather than its lines dealt to the readers."""

    name: str
    sink: str
    folder: bool = False


#: The Flink runs, by their phase.
FLINK_RUNS = {run.name.replace("_", "-"): run for run in (
    FlinkRun("flink", "parquet"), FlinkRun("flink_noop", "blackhole"),
    FlinkRun("flink_parse", "parse"), FlinkRun("flink_folder", "parquet", folder=True))}
FLINK_PARQUET_URL = ("https://repo1.maven.org/maven2/org/apache/flink/flink-sql-parquet/"
                     "{version}/flink-sql-parquet-{version}.jar")
Totals = dict[str, dict[str, float]]


def _minutes(interval: timedelta) -> str:
    """``interval`` as a SQL interval literal both engines read."""
    minutes, rest = divmod(interval, timedelta(minutes=1))
    assert not rest, f"{interval} is not whole minutes"
    return f"INTERVAL '{minutes}' MINUTE"


def _quoted(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


#: The latest event time accepted: ``ingest.future_tolerance`` ahead.
AHEAD = f"CURRENT_TIMESTAMP + INTERVAL '{FUTURE // timedelta(days=1)}' DAY"


def event_time(parse: str) -> str:
    """The event time in SQL: ``event_ts`` of ``TS_SHAPE`` parsed with ``TS_FORMAT`` by the
    engine's function ``parse`` (NULL where it does not parse), NULL for any other shape."""
    return (f"CASE WHEN REGEXP(event_ts, {_quoted(TS_SHAPE)}) "
            f"THEN {parse}(event_ts, {_quoted(TS_FORMAT)}) END")


def _valid_id(column: str) -> str:
    return (f"CHAR_LENGTH({column}) BETWEEN 1 AND {MAX_ID_LENGTH} "
            f"AND SUBSTRING({column} FROM 1 FOR 1) NOT IN ('{{', '[')")


#: The checks both peers apply to a parsed beacon, in SQL that both read (``ts``: the
#: event time parsed with ``TS_FORMAT``, NULL or ``NO_TIME`` when it is not one).
VALID = " AND ".join([
    *(_valid_id(column) for column in ("event_id", "session_id", "visitor_id")),
    f"`type` IN ({', '.join(_quoted(kind) for kind in BEACON_TYPES)})",
    *(f"({amount} IS NULL OR {amount} >= 0)" for amount in ("revenue", "units", "page_load_ms")),
    f"ts > {NO_TIME}",
    f"ts <= {AHEAD}",
])
#: An experiment entry the peers count a visit for (``e``: the entry).
LISTED = "e.id IS NOT NULL AND e.`variant` IS NOT NULL"


# -- the comparison ---------------------------------------------------------------------


def key(experiment: str, variant: str) -> str:
    return f"{experiment}/{variant}"


def agreement(totals: Mapping[str, Mapping[str, Mapping[str, float]]], reference: str
              ) -> dict[str, dict[str, Any]]:
    """How far each engine's totals per experiment/variant (``totals[engine][key]``) are
    from ``reference``'s, per measure of ``MEASURES``: its total, the difference from the
    reference's total (engine - reference) and that as a share of the reference's, and the
    experiment/variant that differs most (one that an engine lacks counts 0 there); with
    the experiment/variants only one of the two has."""
    theirs = totals[reference]
    found: dict[str, dict[str, Any]] = {}
    for engine, ours in totals.items():
        if engine == reference:
            continue
        keys = sorted(theirs.keys() | ours.keys())
        compared: dict[str, Any] = {}
        for measure in MEASURES:
            differences = {k: ours.get(k, {}).get(measure, 0) - theirs.get(k, {}).get(measure, 0)
                           for k in keys}
            expected = sum(row.get(measure, 0) for row in theirs.values())
            total = sum(row.get(measure, 0) for row in ours.values())
            largest = max(keys, key=lambda k: abs(differences[k]), default=None)
            compared[measure] = {
                "total": total,
                "difference": total - expected,
                "relative": round((total - expected) / expected, 6) if expected else None,
                "largest": None if largest is None or not differences[largest]
                else {"key": largest, "difference": differences[largest]},
            }
        compared["only_here"] = sorted(ours.keys() - theirs.keys())
        compared["missing"] = sorted(theirs.keys() - ours.keys())
        found[engine] = compared
    return found


def totals_of(rows: list[Mapping[str, Any]]) -> Totals:
    """Visits, orders and revenue per experiment/variant from rows of their sums."""
    return {key(row["experiment_id"], row["variant"]):
            {**{name: int(row[name] or 0) for name in MEASURES},
             "revenue": round(float(row["revenue"] or 0), 2)} for row in rows}


def spark_totals(metrics: DataFrame) -> Totals:
    """Visits, orders and revenue per experiment/variant of metric rows."""
    return totals_of([row.asDict() for row in metrics.groupBy("experiment_id", "variant").agg(
        *(F.sum(name).alias(name) for name in (*MEASURES, "revenue"))).collect()])


# -- abstream ----------------------------------------------------------------------------


def run_abstream(landing: Path, work: Path) -> dict[str, Any]:
    """The speed layer as ``bench.throughput`` runs it, then its gold totals (the assigned
    population, the speed layer's rows)."""
    measured = run_pipeline(landing, work, None)
    spark = SparkSession.getActiveSession()
    gold = spark.read.format("delta").load(Layout.of_config(load_config(None, data_dir=work))
                                           .experiment_metrics)
    measured["totals"] = spark_totals(
        gold.where((F.col("population") == ASSIGNED) & (F.col("layer") == SPEED)))
    spark.stop()
    return measured


# -- the idiomatic Structured Streaming job ----------------------------------------------


def idiomatic_metrics(beacons: DataFrame) -> DataFrame:
    """Visits by ``session_window`` over the checked, de-duplicated beacons, then visitors,
    visits, orders and revenue per experiment, variant and 5-minute window of the visit's
    end (its ``window_time``)."""
    events = beacons.withColumn("ts", F.expr(event_time("TRY_TO_TIMESTAMP"))) \
        .where(F.col(CORRUPT_COLUMN).isNull() & F.expr(VALID)) \
        .withWatermark("ts", spark_interval(LATENESS)) \
        .dropDuplicatesWithinWatermark(["event_id"])
    is_order = F.col("type") == "order"
    visits = events.groupBy("session_id", F.session_window("ts", spark_interval(GAP))).agg(
        F.max("visitor_id").alias("visitor_id"),
        F.count_if(is_order).alias("orders"),
        F.sum(F.when(is_order, F.col("revenue"))).alias("revenue"),
        F.array_distinct(F.flatten(F.collect_set("experiments"))).alias("experiments"),
    )
    entries = visits.select(F.window_time("session_window").alias("visit_time"), "visitor_id",
                            "orders", "revenue", F.explode("experiments").alias("e")) \
        .where(F.expr(LISTED))
    return entries.groupBy(F.window("visit_time", spark_interval(WINDOW)),
                           F.col("e.id").alias("experiment_id"),
                           F.col("e.variant").alias("variant")).agg(
        F.approx_count_distinct("visitor_id").alias("visitors"),
        F.count(F.lit(1)).alias("visits"),
        F.sum("orders").alias("orders"),
        F.sum("revenue").alias("revenue"),
    ).select("experiment_id", "variant", F.col("window.start").alias("window_start"),
             F.col("window.end").alias("window_end"), "visitors", "visits", "orders",
             "revenue")


def query_phases(progress: list[dict[str, Any]]) -> dict[str, Any]:
    """Where a query's time went, from its progress: the milliseconds of each phase of its
    micro-batches (``durationMs``), and per state operator its rows, times (summed over its
    tasks), rows dropped as late and state memory."""
    phases: dict[str, int] = {}
    operators: dict[str, dict[str, int]] = {}
    for batch in progress:
        for phase, ms in batch.get("durationMs", {}).items():
            phases[phase] = phases.get(phase, 0) + ms
        for number, operator in enumerate(batch.get("stateOperators", [])):
            name = f"{number}:{operator.get('operatorName', '?')}"
            seen = operators.setdefault(name, {})
            for field in ("numRowsUpdated", "numRowsRemoved", "numRowsDroppedByWatermark",
                          "allUpdatesTimeMs", "allRemovalsTimeMs", "commitTimeMs"):
                seen[field] = seen.get(field, 0) + operator.get(field, 0)
            seen["numRowsTotal"] = operator.get("numRowsTotal", 0)
            seen["peakMemoryUsedBytes"] = max(seen.get("peakMemoryUsedBytes", 0),
                                              operator.get("memoryUsedBytes", 0))
    return {"batches": len(progress),
            "input_rows": sum(batch.get("numInputRows", 0) for batch in progress),
            "phases_ms": phases, "state_operators": operators}


def run_idiomatic(landing: Path, work: Path) -> dict[str, Any]:
    spark: SparkSession = spark_session(SparkSettings(conf=SPARK_DEFAULTS))
    beacons = spark.readStream.schema(PEER_SCHEMA) \
        .option("maxFilesPerTrigger", IngestSettings().max_files_per_trigger).json(str(landing))
    began = time.monotonic()
    query = (idiomatic_metrics(beacons).writeStream.format("delta").outputMode("append")
             .option("checkpointLocation", str(work / "checkpoint"))
             .trigger(availableNow=True).start(str(work / "metrics")))
    seconds = run_to_end(query, "idiomatic", began)
    progress = [json.loads(batch.json) for batch in query.recentProgress]
    totals = spark_totals(spark.read.format("delta").load(str(work / "metrics")))
    spark.stop()
    return {"seconds": seconds, "totals": totals, **query_phases(progress)}


# -- Flink SQL ---------------------------------------------------------------------------


def flink_type(kind: DataType) -> str:
    """A Spark type of ``PEER_SCHEMA`` as Flink SQL writes it."""
    if isinstance(kind, ArrayType):
        return f"ARRAY<{flink_type(kind.elementType)}>"
    if isinstance(kind, StructType):
        return "ROW<" + ", ".join(f"`{f.name}` {flink_type(f.dataType)}"
                                  for f in kind.fields) + ">"
    for spark, flink in ((StringType, "STRING"), (DoubleType, "DOUBLE"), (LongType, "BIGINT")):
        if isinstance(kind, spark):
            return flink
    raise TypeError(f"no Flink type for {kind}")


def flink_statements(landing: Path, sink: str, output: Path) -> tuple[list[str], str]:
    """The DDL of the Flink job into ``sink`` (``FlinkRun.sink``), and its INSERT."""
    columns = ", ".join(f"`{f.name}` {flink_type(f.dataType)}"
                        for f in PEER_SCHEMA.fields if f.name != CORRUPT_COLUMN)
    parsed = event_time("TO_TIMESTAMP")
    ddl = [
        # The watermark is assigned as the files are read, before any WHERE: a time too far
        # ahead would move it past every other beacon, so it is NO_TIME, as none is.
        f"""CREATE TABLE beacons ({columns},
            ts AS COALESCE(CASE WHEN {parsed} <= {AHEAD} THEN {parsed} END, {NO_TIME}),
            WATERMARK FOR ts AS ts - {_minutes(LATENESS)}
        ) WITH ('connector' = 'filesystem', 'path' = {_quoted(str(landing))},
                'format' = 'json', 'json.ignore-parse-errors' = 'true')""",
    ]
    if sink == "parse":
        ddl.append("CREATE TABLE parsed WITH ('connector' = 'blackhole') "
                   "LIKE beacons (EXCLUDING ALL)")
        read = ", ".join(f"`{name}`" for name in PEER_FIELDS)
        return ddl, f"INSERT INTO parsed SELECT {read} FROM beacons WHERE {VALID}"
    ddl += [
        f"""CREATE TEMPORARY VIEW valid AS
            SELECT event_id, ts, session_id, visitor_id, `type`, revenue, experiments
            FROM beacons WHERE {VALID}""",
        """CREATE TEMPORARY VIEW deduplicated AS
            SELECT event_id, ts, session_id, visitor_id, `type`, revenue, experiments FROM (
                SELECT *, ROW_NUMBER() OVER (PARTITION BY event_id ORDER BY ts) AS copy
                FROM valid)
            WHERE copy = 1""",
        # A visit's experiments: the distinct lists of its events, flattened below.
        f"""CREATE TEMPORARY VIEW visits AS
            SELECT session_id, window_start AS visit_start, window_time AS visit_time,
                MAX(visitor_id) AS visitor_id,
                SUM(CASE WHEN `type` = 'order' THEN 1 ELSE 0 END) AS orders,
                SUM(CASE WHEN `type` = 'order' THEN revenue END) AS revenue,
                ARRAY_AGG(DISTINCT experiments) AS listed
            FROM SESSION(TABLE deduplicated PARTITION BY session_id, DESCRIPTOR(ts),
                         {_minutes(GAP)})
            GROUP BY window_start, window_end, window_time, session_id""",
        # One row per visit and experiment/variant, however many of its lists name it.
        f"""CREATE TEMPORARY VIEW visit_entries AS
            SELECT window_start, window_end, session_id, visit_start,
                e.id AS experiment_id, e.`variant` AS `variant`, MAX(visitor_id) AS visitor_id,
                MAX(orders) AS orders, MAX(revenue) AS revenue
            FROM TUMBLE(TABLE visits, DESCRIPTOR(visit_time), {_minutes(WINDOW)})
                CROSS JOIN UNNEST(listed) AS l(entries)
                CROSS JOIN UNNEST(entries) AS e(id, `variant`)
            WHERE {LISTED}
            GROUP BY window_start, window_end, session_id, visit_start, e.id, e.`variant`""",
        """CREATE TEMPORARY VIEW metrics AS
            SELECT experiment_id, `variant`, window_start, window_end,
                COUNT(DISTINCT visitor_id) AS visitors, COUNT(*) AS visits,
                CAST(SUM(orders) AS BIGINT) AS orders, SUM(revenue) AS revenue
            FROM visit_entries
            GROUP BY window_start, window_end, experiment_id, `variant`""",
    ]
    written = ("experiment_id STRING, `variant` STRING, window_start TIMESTAMP(3), "
               "window_end TIMESTAMP(3), visitors BIGINT, visits BIGINT, orders BIGINT, "
               "revenue DOUBLE")
    options = ("'connector' = 'blackhole'" if sink == "blackhole" else
               f"'connector' = 'filesystem', 'path' = {_quoted(str(output))}, "
               "'format' = 'parquet'")
    ddl.append(f"CREATE TABLE metrics_out ({written}) WITH ({options})")
    return ddl, "INSERT INTO metrics_out SELECT * FROM metrics"


def deal_lines(source: Path, folder: Path, readers: int) -> Path:
    """The dataset's lines in ``readers`` files, its files dealt to them in turn in their
    order (the order they arrived in), for Flink's file source: it reads a folder's files in
    the order the file system lists them (neither by name nor by time), and the watermark of
    each of its readers is the latest event time it has read, so read that way most beacons
    come behind the watermark (the ``flink_folder`` run shows how many)."""
    folder.mkdir(parents=True)
    files = sorted(source.glob("beacons-*"))
    for reader in range(readers):
        with (folder / f"beacons-{reader}.jsonl").open("wb") as dealt:
            for path in files[reader::readers]:
                with path.open("rb") as lines:
                    shutil.copyfileobj(lines, dealt)
    return folder


def flink_parquet_jar(version: str) -> Path:
    """flink-sql-parquet for Flink ``version``: fetched from Maven Central once (checked
    against its SHA-1) into abstream's JAR cache, as ``abstream jars`` caches Spark's."""
    jar = SparkSettings().jars_cache / "flink" / f"flink-sql-parquet-{version}.jar"
    if jar.is_file():
        return jar
    url = FLINK_PARQUET_URL.format(version=version)
    log.info("fetching %s (once; cached in %s)", url, jar.parent)
    with urllib.request.urlopen(url, timeout=300) as response:
        content = response.read()
    with urllib.request.urlopen(f"{url}.sha1", timeout=60) as response:
        expected = response.read().decode().split()[0]
    if hashlib.sha1(content).hexdigest() != expected:
        raise SystemExit(f"{url}: its SHA-1 is not Maven Central's {expected}")
    jar.parent.mkdir(parents=True, exist_ok=True)
    # Renamed into place: a crash mid-write leaves no JAR rather than a short one.
    temporary = jar.with_name(f".{jar.name}.{os.getpid()}.tmp")
    temporary.write_bytes(content)
    temporary.replace(jar)
    return jar


def hadoop_client_jars() -> list[Path]:
    """Hadoop's client, its API and shaded runtime, as PySpark ships them: Flink's Parquet
    writer needs Hadoop's ``Configuration``, which no Flink JAR holds."""
    folder = Path(pyspark.__file__).parent / "jars"
    found = [jar for part in ("api", "runtime")
             for jar in sorted(folder.glob(f"hadoop-client-{part}-*.jar"))]
    if len(found) != 2:
        raise SystemExit(f"Hadoop's client JARs are not in {folder}")
    return found


@contextmanager
def flink_environment(work: Path) -> Iterator[tuple[Any, str]]:
    """A TableEnvironment in streaming mode that submits to a mini-cluster of its own in
    PyFlink's JVM (one TaskManager, ``PARALLELISM`` slots), and the cluster's REST address:
    Flink's local executor ends its cluster with the job, this one outlives it, so the
    job's final figures can be read."""
    logs = work / "flink-logs"
    logs.mkdir(parents=True, exist_ok=True)
    jars = [*hadoop_client_jars(), flink_parquet_jar(importlib.metadata.version("apache-flink"))]
    os.environ.update({
        # A job without Python functions needs no Python worker (PyFlink's loopback
        # server would need Apache Beam, which is not installed).
        "_python_worker_execution_mode": "process",
        "HADOOP_CLASSPATH": os.pathsep.join(str(jar) for jar in jars),
        "FLINK_LOG_DIR": str(logs),
        # The JVM shares this process's stdout, whose last line is the result.
        "LOG4J_PROPERTIES": str(HERE / "flink-log4j2.properties"),
        # The collector abstream's local Spark runs with.
        "JVM_ARGS": LOCAL_GC,
    })
    from pyflink.common import Configuration
    from pyflink.java_gateway import get_gateway
    from pyflink.table import EnvironmentSettings, TableEnvironment

    def configuration(settings: Mapping[str, str]) -> Configuration:
        conf = Configuration()
        for name, value in settings.items():
            conf.set_string(name, value)
        return conf

    minicluster = get_gateway().jvm.org.apache.flink.runtime.minicluster
    cluster = minicluster.MiniCluster(
        minicluster.MiniClusterConfiguration.Builder()
        .setConfiguration(configuration({"rest.address": "127.0.0.1",
                                         "rest.bind-address": "127.0.0.1",
                                         "rest.bind-port": "0"})._j_configuration)
        .setNumTaskManagers(1).setNumSlotsPerTaskManager(PARALLELISM).build())
    cluster.start()
    try:
        rest = cluster.getRestAddress().get()
        settings = EnvironmentSettings.new_instance().in_streaming_mode().with_configuration(
            configuration({"execution.target": "remote", "rest.address": rest.getHost(),
                           "rest.port": str(rest.getPort()),
                           "parallelism.default": str(PARALLELISM),
                           "table.local-time-zone": "UTC"})).build()
        yield TableEnvironment.create(settings), rest.toString().rstrip("/")
    finally:
        cluster.close()


def _rest(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=60) as response:
        return json.load(response)


def _number(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(number) else number


def operator_times(job: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each chain of operators (job vertex) of a Flink job's REST details: its busy, idle
    and back-pressured seconds summed over its subtasks, and its records in and out. A
    source's busy time is not measured: it is the rest of its subtasks' time."""
    chains = []
    for vertex in job["vertices"]:
        metrics = vertex["metrics"]
        idle = metrics["accumulated-idle-time"]
        pressured = metrics["accumulated-backpressured-time"]
        busy = _number(metrics["accumulated-busy-time"])
        if busy is None:
            busy = max(0, vertex["duration"] * vertex["parallelism"] - idle - pressured)
        chains.append({
            "operators": re.sub(r"\[\d+\]", "", vertex["name"]),
            "parallelism": vertex["parallelism"],
            "busy_s": round(busy / 1000, 2),
            "idle_s": round(idle / 1000, 2),
            "backpressured_s": round(pressured / 1000, 2),
            "records_in": metrics["read-records"],
            "records_out": metrics["write-records"],
        })
    return chains


def parquet_totals(folder: Path) -> tuple[Totals, int]:
    """Visits, orders and revenue per experiment/variant of the Parquet files Flink wrote,
    and how many rows they hold."""
    table = pq.read_table(folder)
    summed = table.group_by(["experiment_id", "variant"]).aggregate(
        [(name, "sum") for name in (*MEASURES, "revenue")])
    return totals_of(summed.rename_columns(
        [name.removesuffix("_sum") for name in summed.column_names]).to_pylist()), \
        table.num_rows


def _await(result: Any, rest: str, job: str, name: str, began: float) -> float:
    """Wait for a Flink job's end, logging its progress every 10 s; the seconds since
    ``began`` at its end."""
    ended: list[float] = []
    failed: list[BaseException] = []

    def wait() -> None:
        try:
            result.wait()
        except Exception as exc:
            failed.append(exc)
        ended.append(time.monotonic())

    waiter = threading.Thread(target=wait, daemon=True)
    waiter.start()
    while waiter.join(10) is None and waiter.is_alive():
        details = _rest(f"{rest}/jobs/{job}")
        source = details["vertices"][0]["metrics"]["write-records"]
        log.info("%s: %s, %s records out of the source, %.0f s", name, details["state"],
                 f"{source:,}", time.monotonic() - began)
    if failed:
        raise failed[0]
    return round(ended[0] - began, 2)


def _final(rest: str, job: str) -> dict[str, Any]:
    """A Flink job's REST details once they show its end (the REST API caches them for a
    few seconds), with every subtask's final figures."""
    deadline = time.monotonic() + 60
    while (details := _rest(f"{rest}/jobs/{job}"))["state"] not in ("FINISHED", "FAILED",
                                                                    "CANCELED"):
        if time.monotonic() > deadline:
            raise SystemExit(f"Flink job {job} still {details['state']} after its end")
        time.sleep(0.5)
    return details


def run_flink(landing: Path, work: Path, run: FlinkRun) -> dict[str, Any]:
    output = work / "parquet"
    with flink_environment(work) as (env, rest):
        ddl, insert = flink_statements(landing, run.sink, output)
        for statement in ddl:
            env.execute_sql(statement)
        began = time.monotonic()
        result = env.execute_sql(insert)
        job = str(result.get_job_client().get_job_id())
        seconds = _await(result, rest, job, run.name, began)
        details = _final(rest, job)
    measured = {"seconds": seconds, "job_seconds": round(details["duration"] / 1000, 2),
                "state": details["state"], "operators": operator_times(details)}
    if run.sink == "parquet":
        measured["totals"], measured["rows"] = parquet_totals(output)
    return measured


# -- the run -----------------------------------------------------------------------------


def _ratio(a: int, b: int) -> float | None:
    return round(a / b, 3) if b else None


def _named(items: Mapping[str, Any] | list[dict[str, Any]], part: str) -> dict[str, Any]:
    """The first of ``items`` (state operators by name, or Flink's chains of operators) whose
    name holds ``part``."""
    if isinstance(items, Mapping):
        return next(value for name, value in items.items() if part in name)
    return next(chain for chain in items if part in chain["operators"])


def accounting(sides: Mapping[str, dict[str, Any]]) -> dict[str, dict[str, int]]:
    """What each engine dropped, or still held when its input ended, which explains most
    of the differences of its totals: beacons that passed its checks, repeated and late
    ones, and the visits (abstream: their events) left open."""
    ours = sides["abstream"]
    found = {"abstream": {
        "unique_valid_events": sum(written.get("events", 0)
                                   for written in ours["written"].values()),
        "duplicates": sum(ours["duplicates_dropped"].values()),
        "late": sum(ours["late_rows_dropped"].values()),
        "open_visit_events": sum(ours["state_rows"].values()),
    }}
    operators = sides["idiomatic"]["state_operators"]
    found["idiomatic"] = {
        "unique_valid_events": _named(operators, "dedupe")["numRowsUpdated"],
        "late": sum(op["numRowsDroppedByWatermark"] for op in operators.values()),
        "open_visits": _named(operators, "sessionWindow")["numRowsTotal"],
    }
    for run in FLINK_RUNS.values():
        if run.sink == "parse":
            continue
        deduplicate = _named(sides[run.name]["operators"], "Deduplicate")
        found[run.name] = {
            "valid_events": deduplicate["records_in"],
            "duplicates_or_late": deduplicate["records_in"] - deduplicate["records_out"],
            "open_visits": 0,
        }
    return found


def summarize(records: int, sides: Mapping[str, dict[str, Any]]) -> dict[str, Any]:
    """The run's figures from each side's: events/s, ratios, totals and their agreement,
    where the time went."""
    ours = sides["abstream"]
    rates = speed_layer_rates(records, ours["seconds"])
    per_s = {"abstream": rates["end_to_end_events_per_s"],
             **{name: rate(records, side["seconds"]) for name, side in sides.items()
                if name != "abstream"}}
    totals = {name: side["totals"] for name, side in sides.items() if "totals" in side}
    return {
        "benchmark": "peers",
        "events": records,
        **{f"{name}_events_per_s": value for name, value in per_s.items()},
        "abstream_over_flink": _ratio(per_s["abstream"], per_s["flink"]),
        "abstream_over_flink_noop": _ratio(per_s["abstream"], per_s["flink_noop"]),
        "abstream_over_idiomatic": _ratio(per_s["abstream"], per_s["idiomatic"]),
        "seconds": {**{name: side["seconds"] for name, side in sides.items()
                       if name != "abstream"}, "abstream": rates["seconds"]},
        "flink_job_seconds": {run.name: sides[run.name]["job_seconds"]
                              for run in FLINK_RUNS.values()},
        **{measure: {name: round(total(engine, measure), 2) for name, engine in totals.items()}
           for measure in (*MEASURES, "revenue")},
        "agreement": agreement(totals, "abstream"),
        "accounting": accounting(sides),
        "totals": totals,
        "flink_operators": {run.name: sides[run.name]["operators"]
                            for run in FLINK_RUNS.values()},
        "flink_output_rows": sides["flink"]["rows"],
        "idiomatic_phases": {name: sides["idiomatic"][name] for name in
                             ("batches", "input_rows", "phases_ms", "state_operators")},
        "abstream_step_seconds": ours["step_seconds"],
        "peak_rss_mb": {name: side["peak_rss_mb"] for name, side in sides.items()},
        "versions": {package: importlib.metadata.version(package)
                     for package in ("apache-flink", "pyspark", "delta-spark")},
        "flink_parallelism": PARALLELISM,
        "master": "local[2]",
        "machine": machine(),
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def total(totals: Totals, measure: str) -> float:
    return sum(row.get(measure, 0) for row in totals.values())


def log_figures(result: dict[str, Any]) -> None:
    seconds = result["seconds"]
    log.info("%-14s %9s %10s %8s %s", "engine", "seconds", "events/s", "RSS MB",
             "(Flink's own job time)")
    for name in ("abstream", "idiomatic", *(run.name for run in FLINK_RUNS.values())):
        taken = seconds[name]["end_to_end"] if name == "abstream" else seconds[name]
        job = result["flink_job_seconds"].get(name)
        log.info("%-14s %9.1f %10s %8s %s", name, taken, f"{result[f'{name}_events_per_s']:,}",
                 f"{result['peak_rss_mb'][name]:,}", "" if job is None else f"({job} s)")
    log.info("abstream / flink %s, / flink noop %s, / idiomatic %s",
             result["abstream_over_flink"], result["abstream_over_flink_noop"],
             result["abstream_over_idiomatic"])
    for sink, chains in result["flink_operators"].items():
        for chain in chains:
            log.info("%s: busy %6.1f s, idle %6.1f s, back-pressured %5.1f s, %s in, %s out: %s",
                     sink, chain["busy_s"], chain["idle_s"], chain["backpressured_s"],
                     f"{chain['records_in']:,}", f"{chain['records_out']:,}",
                     chain["operators"][:110])
    phases = result["idiomatic_phases"]
    log.info("idiomatic: %d micro-batches, phases (ms) %s", phases["batches"],
             phases["phases_ms"])
    for name, operator in phases["state_operators"].items():
        log.info("idiomatic state operator %s: %s", name, operator)
    for component, steps in result["abstream_step_seconds"].items():
        log.info("abstream %s steps (s): %s", component, steps)
    for measure in (*MEASURES, "revenue"):
        log.info("%s: %s", measure, result[measure])
    for engine, compared in result["agreement"].items():
        for measure in MEASURES:
            found = compared[measure]
            log.info("%s - abstream, %s: %s (%s), largest %s", engine, measure,
                     f"{found['difference']:+,.0f}", found["relative"], found["largest"])
        if compared["only_here"] or compared["missing"]:
            log.info("%s: experiment/variants only here %s, missing %s", engine,
                     compared["only_here"], compared["missing"])
    for engine, counted in result["accounting"].items():
        log.info("%s: %s", engine, ", ".join(f"{name.replace('_', ' ')} {value:,}"
                                             for name, value in counted.items()))


def main() -> int:
    parser = dataset_parser(__doc__, 2_000_000)
    parser.add_argument("--phase", choices=("abstream", "idiomatic", *FLINK_RUNS),
                        help=argparse.SUPPRESS)
    parser.add_argument("--landing", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    log_progress()

    if args.phase == "abstream":
        print(json.dumps(run_abstream(args.landing, args.work)))
        return 0
    if args.phase == "idiomatic":
        print(json.dumps(run_idiomatic(args.landing, args.work)))
        return 0
    if args.phase in FLINK_RUNS:
        print(json.dumps(run_flink(args.landing, args.work, FLINK_RUNS[args.phase])))
        return 0

    if importlib.util.find_spec("pyflink") is None:
        raise SystemExit("PyFlink is not installed: run `make bench-peers`, which installs it")
    landing = dataset(args.events, args.seed)
    records = records_in(landing)
    work = RESULTS / "work-peers"
    shutil.rmtree(work, ignore_errors=True)
    sides: dict[str, dict[str, Any]] = {}
    log.info("abstream's speed layer on %s beacons", f"{records:,}")
    sides["abstream"] = run_phase("abstream", landing, work / "abstream", None,
                                  module="bench.peers")
    log.info("the idiomatic Structured Streaming job on the same beacons")
    sides["idiomatic"] = run_phase("idiomatic", landing, work / "idiomatic", None,
                                   module="bench.peers")
    dealt = deal_lines(landing, work / "flink-landing", PARALLELISM)
    for phase, run in FLINK_RUNS.items():
        log.info("Flink SQL (%s) on the same beacons%s", run.sink,
                 ", the dataset's folder as it is" if run.folder else "")
        sides[run.name] = run_phase(phase, landing if run.folder else dealt, work / phase,
                                    None, module="bench.peers")
    shutil.rmtree(work, ignore_errors=True)
    result = summarize(records, sides)
    log_figures(result)
    write_result(result, f"peers-{records}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
