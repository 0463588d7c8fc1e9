"""Chaos: the speed layer killed with SIGKILL at random moments while a steady stream comes
in, restarted each time, and compared with a crash-free run over the same records.

A generator lands beacons at a fixed rate (``abstream generate --rate``: a file a second,
or records produced to a Kafka topic). ``abstream run`` (all components of the source, in a
process group of its own: the Python driver and its JVM) is killed with SIGKILL of the whole
group at seeded random moments and started again, ``--kills`` times; then ``run --once``
drains what is left, in this process (the command's own steps). Some kills fall in a run's
start-up (``--startup-kills``): the first ones the moment a table's creation is under way
(its log folder there, no commit yet), one table after the other, the others at a random
moment before the last component's first micro-batch of a restart. ``abstream batch
--since-last`` is killed the same way in the middle of a chunk and run again (in this
process, as the drain), then ``batch --all`` runs (unless ``ChaosSettings.batch_all`` is
off, as in the suite's short variant). The crash-free side reads the very same records (the
same landing files, hard-linked; for Kafka the same generated records produced to topics of
its own) with ``run_once`` and ``run_batch`` in this process, uninterrupted.

What is compared, and why (each a multiset of rows: a row the crash-free side holds more
often is lost, one the chaos side holds more often is a duplicate):

- bronze ``events``: every column the contract defines (event_id, time, session, visitor,
  type, page, experiments, amounts, event_date). Left out: ``ingested_at`` (when a run wrote
  it) and the provenance of the copy kept, ``source_file`` and ``arrived_at``: two
  deliveries of one event_id are the same record, and which one the de-duplication keeps
  depends on how the input was cut into micro-batches.
- quarantine ``rejected``: ``raw``, ``reason`` and ``source_file`` reduced to the file's
  name or the record's ``partition/offset`` (each side has its own folder and topic);
  ``arrived_at`` too for files (the hard-linked files share it). Left out: ``ingested_at``
  and ``ingest_date`` (the write's wall clock), and for Kafka ``arrived_at`` (each side's
  topic has its own broker append times).
- silver ``sessions`` of the speed layer: every column but ``computed_at``.
- gold ``experiment_metrics`` of the speed layer: its rows are increments (one per key and
  micro-batch that changed it), so the comparison is per key (experiment, variant,
  population, window) of the sums of every measure. Left out: the visitor sketches and
  their estimates (HLL; the batch layer's exact counts are compared below) and
  ``computed_at``. Gold ``definition_metrics`` the same way: per key, the sums of its
  numerators and denominators (to 6 decimals), without the sketches.
- the batch layer after ``batch --since-last`` (chaos: killed mid-chunk, then run again)
  and again after ``batch --all``: sessions and both gold tables' rows of
  ``layer = 'batch'`` (exact visitor counts included; ``computed_at`` and the sketch bytes
  left out, sums of doubles to 6 decimals) and the latest ``batch_coverage`` of each range
  (without ``run_id``, ``computed_at`` and ``bronze_version``, which count each side's own
  commits).
- the serving view of each side after ``batch --all``: its totals per experiment, variant
  and population equal the plain-Python reference of the metric contract
  (``tests/reference.py``) over the generated records.
- the PostgreSQL serving store (``serving.store: postgres``; a throwaway server of Debian's
  ``postgresql``), which the chaos side's runs write every second while they are killed
  and its batch runs at their end: after the drain and again after the last batch run, each of
  its two tables holds the chaos side's Delta serving view row for row, every column, each
  sketch by what it holds (an HLL sketch's estimate, a KLL sketch's count, minimum and
  maximum: the same increments merged in another order give other bytes). The result
  counts the kills that fell while a store transaction was open (``kills_mid_store_write``);
  ``--store-kills`` of them are aimed there: the harness holds the store's progress row, the
  run's next write waits on it inside its transaction, and the run is killed there.
  Once during the stream PostgreSQL itself is killed (SIGKILL) and started again some
  seconds later (``--store-outage``): the runs go on writing Delta meanwhile
  (``store_outage.gold_commits_during``) and the store catches up.

The stream is shaped so that the speed layer's results do not depend on where micro-batches
start and end, which is what makes a crash-free run the oracle: events arrive at most
``late_max`` (10 minutes) late, within ``sessionize.lateness`` (15 minutes), and
sessionize's watermark moves by bronze commits read whole (a micro-batch of its default 2
files can end between the files ingest wrote for two event dates in one commit), so the
watermark drops none: the crash-free run's ``late_rows_dropped`` is checked to be 0.
``ingest.dedupe_window`` is an hour, above the time the restarts take together, as the
README asks. Event times are a fixed day in the past, so
``--since-last``'s closed horizon follows the data, not the clock.

    python -m bench.chaos [--source files|kafka] [--kills 20] [--events N] [--rate R]

Progress goes to stderr, a line per kill and restart; the last line of stdout is one JSON
object (also written to bench/results/): ``kills``, ``lost_rows``, ``duplicate_rows``,
``mismatched_tables`` (all three 0 to pass, and no late row dropped by the crash-free run;
the exit code is 1 otherwise), ``seconds``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from psycopg import sql
from psycopg.rows import dict_row
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, DataType, MapType, StructType
from tests import reference
from tests.helpers import comparable_view_row, landing_records, totals
from tests.servers import free_port

from abstream import schemas, topology
from abstream.batch.coverage import latest_coverage
from abstream.batch.layer import BatchRequest, run_batch
from abstream.commands import batch_and_store, run_once_and_store
from abstream.config import Config, load_config
from abstream.generator.write import GeneratorSettings, generate, generate_to_kafka
from abstream.io.deployment import Deployment
from abstream.io.kafka.broker import LocalBroker
from abstream.io.kafka.topics import ensure_topics
from abstream.io.postgres import PROGRESS, SERVING, KeptConnection, Store, StoreError
from abstream.io.postgres_local import LocalPostgres
from abstream.io.tables import (
    DEFINITIONS_TABLE,
    EVENTS_TABLE,
    METRICS_TABLE,
    REJECTED_TABLE,
    SESSIONS_TABLE,
    TableSpec,
    read_table,
)
from abstream.layout import Layout
from abstream.serving.store_schema import VIEW_TABLES, ensure_schema
from abstream.serving.view import definitions_view, serving_view
from abstream.speed import pipeline_components
from abstream.speed.runner import pipeline, run_once
from bench.common import RESULTS, log_progress, machine, write_result

log = logging.getLogger("bench.chaos")
#: Seconds a restarted run may take to plan its first micro-batch: while input comes in,
#: and once it is complete (when the run may have nothing left to read).
STARTING, IDLE_START = 300.0, 60.0
#: Event time of the stream: one fixed day in the past (a single event_date).
START = datetime(2026, 1, 5, 1, tzinfo=UTC)
SPAN = timedelta(hours=20)
LATE_MAX = timedelta(minutes=10)
GOLD_KEY = ("experiment_id", "variant", "population", "window_start", "window_end")
GOLD_SUMS = ("events", "pageviews", "add_to_carts", "orders", "revenue", "revenue_sq", "units",
             "errors", "page_load_ms_sum", "page_load_count", "visits", "bounces",
             "error_visits")
#: ``definition_metrics``' key without its layer, and its sums.
DEFINITION_KEY = tuple(k for k in schemas.DEFINITION_KEY if k != "layer")
DEFINITION_SUMS = ("numerator", "denominator")
#: The sketches' bytes: the batch layer's rows are compared without them.
DEFINITION_SKETCHES = ("units_sketch", "converted_sketch", "values_sketch")
COVERAGE_COLUMNS = ("range_start", "range_end", "depends_from", "depends_until", "events",
                    "visits", "metric_rows")
CHUNK_DONE = re.compile(r"batch (\d+)/(\d+) .* in ([\d.]+) s")


@dataclass(frozen=True)
class ChaosSettings:
    """One chaos run: how much input, how fast, how many kills and when."""

    work: Path
    source: str = "files"
    kills: int = 20
    events: int = 15_000
    rate: float = 25.0
    seed: int = 1
    #: A kill comes this many seconds after the (re)started run plans its first
    #: micro-batch, drawn uniformly.
    wait: tuple[float, float] = (0.0, 15.0)
    #: Kills that fall in a run's start-up, before the pipeline's last component plans its
    #: first micro-batch: the first ones while the tables are being created (the run is
    #: killed the moment a table's log folder appears), the others at a random moment of a
    #: restart's start-up (checkpoints, state and topics being read or made).
    startup_kills: int = 6
    #: PostgreSQL is killed this many seconds into the stream, and started again this many
    #: seconds later.
    store_outage: tuple[float, float] = (60.0, 20.0)
    #: Kills aimed at a serving-store transaction: the run is killed the moment one of its
    #: store writes has a transaction open (after the kills in start-up).
    store_kills: int = 4
    #: How often the chaos side's runs write the serving store.
    store_write_every: str = "1 second"
    #: After ``batch --since-last``, also ``batch --all`` on both sides, compared again.
    batch_all: bool = True


@dataclass
class Comparison:
    """Rows lost and duplicated per compared table."""

    tables: dict[str, dict[str, int]] = field(default_factory=dict)

    def add(self, name: str, expected: int, actual: int, lost: int, extra: int) -> None:
        self.tables[name] = {"expected_rows": expected, "rows": actual, "lost": lost,
                             "duplicate": extra}
        mark = "ok" if lost == extra == 0 else "MISMATCH"
        log.info("compare %s: %d rows, %d expected, %d lost, %d duplicate [%s]", name, actual,
                 expected, lost, extra, mark)

    def frames(self, name: str, expected: DataFrame, actual: DataFrame) -> None:
        expected, actual = comparable(expected), comparable(actual)
        self.add(name, expected.count(), actual.count(), expected.exceptAll(actual).count(),
                 actual.exceptAll(expected).count())

    def rows(self, name: str, expected: Iterable[object], actual: Iterable[object]) -> None:
        want, have = Counter(expected), Counter(actual)
        self.add(name, want.total(), have.total(), (want - have).total(),
                 (have - want).total())

    def summary(self) -> dict[str, int]:
        return {
            "lost_rows": sum(t["lost"] for t in self.tables.values()),
            "duplicate_rows": sum(t["duplicate"] for t in self.tables.values()),
            "mismatched_tables": sum(t["lost"] + t["duplicate"] > 0
                                     for t in self.tables.values()),
        }


def config_document(source: str, data_dir: Path, topics: dict[str, str] | None,
                    bootstrap_servers: str | None, store: dict[str, Any] | None = None
                    ) -> dict[str, Any]:
    """The settings both sides run with (the chaos side's processes read them from a file)."""
    document: dict[str, Any] = {
        "data_dir": str(data_dir),
        "source": source,
        "spark": {"conf": {"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2"}},
        "ingest": {"trigger": "1 second", "dedupe_window": "1 hour"},
        "sessionize": {"trigger": "1 second", "lateness": "15 minutes"},
        "archive": {"trigger": "1 second"},
        "batch": {"chunk": "12 hours", "chunk_events": 1},
    }
    if topics is not None:
        document["kafka"] = {"bootstrap_servers": bootstrap_servers, **topics}
    if store is not None:
        document["serving"] = store
    return document


def generator_settings(settings: ChaosSettings, rate: float | None) -> GeneratorSettings:
    return GeneratorSettings(events=settings.events, seed=settings.seed, start=START,
                             span=SPAN, late_max=LATE_MAX, rate=rate)


def topics_of(side: str) -> dict[str, str]:
    return {"topic": f"chaos-{side}", "valid_topic": f"chaos-{side}.valid",
            "rejected_topic": f"chaos-{side}.rejected"}


class Side:
    """One data dir and its config file."""

    def __init__(self, name: str, work: Path, source: str, broker: LocalBroker | None,
                 store: dict[str, Any] | None = None) -> None:
        self.name = name
        self.data_dir = work / name
        self.data_dir.mkdir(parents=True)
        self.config_file = work / f"{name}.yaml"
        topics = topics_of(name) if broker is not None else None
        self.config_file.write_text(json.dumps(config_document(
            source, self.data_dir, topics, broker.bootstrap_servers if broker else None,
            store)))
        self.config: Config = load_config(self.config_file, environ={
            STORE_PASSWORD: os.environ.get(STORE_PASSWORD, "")})
        self.layout = Layout.of(self.data_dir)
        self.logs = work / "logs"
        self.logs.mkdir(exist_ok=True)
        self.started = 0

    def command(self, *arguments: str) -> list[str]:
        return [sys.executable, "-m", "abstream", *arguments, "--config", str(self.config_file)]

    def start(self, label: str, *arguments: str, stderr: int | None = None
              ) -> subprocess.Popen[str]:
        """An abstream command in a process group of its own, its output to a log file."""
        self.started += 1
        output = (self.logs / f"{self.started:03d}-{label}.log").open("w")
        return subprocess.Popen(self.command(*arguments), stdout=output,
                                stderr=subprocess.STDOUT if stderr is None else stderr,
                                text=True, start_new_session=True,
                                env={k: v for k, v in os.environ.items()
                                     if not k.startswith("ABSTREAM__")})

    def run(self, label: str, *arguments: str) -> None:
        process = self.start(label, *arguments)
        if process.wait() != 0:
            raise RuntimeError(f"abstream {' '.join(arguments)} failed (exit "
                               f"{process.returncode}); see {self.logs}")


def kill_group(process: subprocess.Popen[str]) -> None:
    """SIGKILL to the process's whole group (driver and JVM), then wait until none is left."""
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.killpg(process.pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    raise RuntimeError(f"process group {process.pid} outlived SIGKILL")


def _last(folder: Path) -> int:
    """The highest micro-batch number in a checkpoint's ``offsets`` or ``commits``."""
    return max((int(p.name) for p in folder.glob("*") if p.name.isdigit()), default=-1)


def planned(side: Side) -> dict[str, int]:
    """Each component's last planned micro-batch (-1 before its first)."""
    return {component.name: _last(Path(side.layout.checkpoint(component.name)) / "offsets")
            for component in pipeline_components(side.config)}


def in_flight(side: Side) -> list[str]:
    """The components whose checkpoint holds a planned micro-batch it has not committed."""
    return [name for name, last in planned(side).items()
            if last > _last(Path(side.layout.checkpoint(name)) / "commits")]


def running(side: Side, process: subprocess.Popen[str], timeout: float) -> float:
    """Wait until a component of ``process`` plans a micro-batch (its queries are running,
    not still starting), or ``timeout`` seconds; the seconds that took."""
    began, before = time.monotonic(), planned(side)
    while time.monotonic() - began < timeout and process.poll() is None:
        if any(last > before[name] for name, last in planned(side).items()):
            break
        time.sleep(0.2)
    return time.monotonic() - began


@dataclass
class Kills:
    """What the kills of the stream caught: components in the middle of a micro-batch, and
    the kills that fell in a run's start-up."""

    mid_batch: Counter[str] = field(default_factory=Counter)
    startup: list[dict[str, Any]] = field(default_factory=list)
    #: Kills that fell while one of the run's serving-store transactions was open.
    mid_store_write: int = 0
    #: The shortest start-up measured (process start to the last component's first plan).
    startup_seconds: float | None = None


def kill_stream(side: Side, settings: ChaosSettings, rng: random.Random,
                generating: Callable[[], bool], store: Store) -> Kills:
    """Start ``abstream run``, and kill its group at a random moment, again and again: in its
    start-up (``settings.startup_kills`` of them), in a write to ``store``
    (``settings.store_kills``), or once its queries run."""
    kills, caught = 0, Kills()
    while kills < settings.kills:
        began_at = time.time()
        before = planned(side)
        process = side.start(f"run-{kills + 1:02d}", "run", "--no-exporter")
        needed = settings.startup_kills - len(caught.startup)
        target = not_begun(side)
        if needed > 0 and (target is not None or kills % 3 == 0
                           or settings.kills - kills <= needed):
            delay = rng.uniform(0.0, 0.9 * (caught.startup_seconds or 10.0))
            landed = kill_in_startup(side, process, before, target, delay)
            caught.startup += [landed] if landed else []
            kills += 1
            continue
        # Once the input is complete and read, a run plans no micro-batch: it is killed idle.
        started = running(side, process, STARTING if generating() else IDLE_START)
        waiting_from = time.monotonic()
        storing = caught.mid_store_write < settings.store_kills \
            and kill_in_store_write(process, store)
        if not storing:
            try:
                process.wait(rng.uniform(*settings.wait))
            except subprocess.TimeoutExpired:
                kill_group(process)
            else:
                raise RuntimeError(f"abstream run ended by itself (exit {process.returncode}); "
                                   f"see {side.logs}")
        wait = time.monotonic() - waiting_from
        kills += 1
        caught.mid_store_write += storing
        busy = in_flight(side)
        caught.mid_batch.update(busy)
        startup = startup_seconds(side, before, began_at)
        if startup is not None:
            caught.startup_seconds = min(startup, caught.startup_seconds or startup)
        log.info("kill %d/%d: SIGKILL %.1f s after the first micro-batch (%.1f s after "
                 "the start; %s; mid-batch: %s%s); restarting", kills, settings.kills, wait,
                 started + wait, "input still coming" if generating() else
                 "input complete", ", ".join(busy) or "none",
                 "; in an open store transaction" if storing else "")
    return caught


def created_tables(side: Side) -> list[str]:
    """The speed layer's tables, in the order its components create them."""
    return [place for node in topology.PIPELINES[side.config.source] for place in node.writes
            if not topology.is_topic(place)]


def _commits(table: Path) -> list[Path]:
    return list((table / "_delta_log").glob("[0-9]*.json"))


def not_begun(side: Side) -> str | None:
    """The first table whose creation has not begun (no log folder yet); a table left
    half-created is the run's to mend, the next one is the kill's target."""
    return next((name for name in created_tables(side)
                 if not (Path(side.layout.table(name)) / "_delta_log").exists()), None)


def half_created(side: Side) -> list[str]:
    """The tables whose log folder is there without a commit: a creation under way."""
    return [name for name in created_tables(side)
            if (Path(side.layout.table(name)) / "_delta_log").is_dir()
            and not _commits(Path(side.layout.table(name)))]


def startup_seconds(side: Side, before: dict[str, int], began_at: float) -> float | None:
    """Seconds from a run's start to its last component's first planned micro-batch (from
    the plan's file time), None if it planned none."""
    last = pipeline_components(side.config)[-1].name
    plan = Path(side.layout.checkpoint(last)) / "offsets" / str(before[last] + 1)
    return plan.stat().st_mtime - began_at if plan.exists() else None


def kill_in_startup(side: Side, process: subprocess.Popen[str], before: dict[str, int],
                    target: str | None, delay: float) -> dict[str, Any] | None:
    """SIGKILL ``process`` in its start-up: the moment ``target``'s creation is under way
    (its log folder there, no commit yet), or, with no table left to create, ``delay``
    seconds after its start. What the kill hit if it fell before the pipeline's last
    component planned a micro-batch, None if it came too late."""
    last = pipeline_components(side.config)[-1].name
    began = time.monotonic()
    while process.poll() is None and time.monotonic() - began < STARTING:
        if target is None:
            if time.monotonic() - began >= delay:
                break
        elif target in half_created(side) or _commits(Path(side.layout.table(target))):
            break  # its creation under way, or (a moment missed) done
        time.sleep(0.01)
    if process.poll() is not None:
        raise RuntimeError(f"abstream run ended by itself (exit {process.returncode}); "
                           f"see {side.logs}")
    kill_group(process)
    seconds = time.monotonic() - began
    left = half_created(side)
    in_startup = planned(side)[last] == before[last]
    log.info("kill during start-up: SIGKILL %.1f s after the start (aimed at %s; %s; tables "
             "left half-created: %s); restarting", seconds,
             f"creating {target}" if target else "a restart",
             "before the last component's first micro-batch" if in_startup
             else "too late: the last component had planned a micro-batch",
             ", ".join(left) or "none")
    return {"seconds_after_start": round(seconds, 2),
            "aimed_at": f"creating {target}" if target else "a restart",
            "left_half_created": left} if in_startup else None


def kill_batch_mid_chunk(side: Side, rng: random.Random) -> bool:
    """``abstream batch --since-last`` killed part way into its second chunk (or its first,
    if it has only one); whether it was killed before it ended."""
    process = side.start("batch-killed", "batch", "--since-last", stderr=subprocess.PIPE)
    chunk_seconds: list[float] = []
    first_done = threading.Event()
    log_file = side.logs / f"{side.started:03d}-batch-killed.log"

    def read() -> None:
        assert process.stderr is not None
        with log_file.open("a") as output:
            for line in process.stderr:
                output.write(line)
                found = CHUNK_DONE.search(line)
                if found:
                    chunk_seconds.append(float(found[3]))
                    first_done.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    while not first_done.wait(0.2) and process.poll() is None:
        pass
    delay = rng.uniform(0.2, 0.8) * (chunk_seconds[0] if chunk_seconds else 5.0)
    try:
        process.wait(delay)
        killed = False
    except subprocess.TimeoutExpired:
        kill_group(process)
        killed = True
    reader.join()
    log.info("batch --since-last: %s after chunk %d + %.1f s", "SIGKILL" if killed
             else "ended before the kill", len(chunk_seconds), delay)
    return killed


def speed_frames(spark: SparkSession, layout: Layout, source: str) -> dict[str, DataFrame]:
    """The speed layer's tables as compared (see the module's docstring)."""
    run_specific = {"ingested_at", "ingest_date"} | ({"arrived_at"} if source == "kafka"
                                                     else set())
    rejected = read_table(spark, REJECTED_TABLE, layout)
    return {
        "events": read_table(spark, EVENTS_TABLE, layout).drop(
            "source_file", "arrived_at", "ingested_at"),
        "rejected": rejected.withColumn("source_file", _provenance(F.col("source_file")))
        .drop(*run_specific),
        "sessions": _layer(spark, SESSIONS_TABLE, layout, "speed").drop("computed_at"),
        "experiment_metrics": _layer(spark, METRICS_TABLE, layout, "speed")
        .groupBy(*GOLD_KEY).agg(*(F.sum(m).alias(m) for m in GOLD_SUMS)),
        # Sums of doubles, added in another order on each side: to 6 decimals.
        "definition_metrics": _layer(spark, DEFINITIONS_TABLE, layout, "speed")
        .groupBy(*DEFINITION_KEY).agg(*(F.round(F.sum(m), 6).alias(m)
                                        for m in DEFINITION_SUMS)),
    }


def batch_frames(spark: SparkSession, layout: Layout) -> dict[str, DataFrame]:
    """The batch layer's sessions and gold rows as compared."""
    return {
        "sessions": _layer(spark, SESSIONS_TABLE, layout, "batch").drop("computed_at"),
        "experiment_metrics": _layer(spark, METRICS_TABLE, layout, "batch")
        .drop("computed_at", "visitors_sketch"),
        "definition_metrics": _layer(spark, DEFINITIONS_TABLE, layout, "batch")
        .drop("computed_at", *DEFINITION_SKETCHES)
        .withColumns({m: F.round(m, 6) for m in DEFINITION_SUMS}),
    }


def compare_batch(comparison: Comparison, stage: str, spark: SparkSession, expected: Layout,
                  actual: Layout) -> None:
    """The batch layer's tables as compared: its sessions, its gold rows, the latest
    coverage of each range."""
    def coverage(layout: Layout) -> list[tuple[object, ...]]:
        return [tuple(getattr(c, name) for name in COVERAGE_COLUMNS)
                for c in latest_coverage(spark, layout)]

    compare(comparison, stage, batch_frames(spark, expected), batch_frames(spark, actual))
    comparison.rows(f"{stage} batch_coverage", coverage(expected), coverage(actual))


def _has_map(kind: DataType) -> bool:
    if isinstance(kind, MapType):
        return True
    if isinstance(kind, ArrayType):
        return _has_map(kind.elementType)
    return isinstance(kind, StructType) and any(_has_map(f.dataType) for f in kind.fields)


def _comparable_column(column: Column, kind: DataType) -> Column:
    """``column`` with each map as its entries in key order: maps cannot be compared."""
    if not _has_map(kind):
        return column
    if isinstance(kind, MapType):
        return F.array_sort(F.transform(F.map_entries(column), lambda e: F.struct(
            e["key"].alias("key"),
            _comparable_column(e["value"], kind.valueType).alias("value"))))
    if isinstance(kind, ArrayType):
        return F.transform(column, lambda e: _comparable_column(e, kind.elementType))
    assert isinstance(kind, StructType)
    return F.struct(*(_comparable_column(column[f.name], f.dataType).alias(f.name)
                      for f in kind.fields))


def comparable(frame: DataFrame) -> DataFrame:
    """``frame`` with its maps as sorted entries, so that set operations can compare it."""
    return frame.select(*(_comparable_column(F.col(f.name), f.dataType).alias(f.name)
                          for f in frame.schema.fields))


def _layer(spark: SparkSession, spec: TableSpec, layout: Layout, layer: str) -> DataFrame:
    return read_table(spark, spec, layout).where(F.col("layer") == layer)


def _provenance(column: Column) -> Column:
    """A file's name, or a Kafka record's ``partition/offset``, without the side's folder
    or topic."""
    return F.regexp_replace(column, r"^kafka://[^/]+/|^.*/", "")


def compare(comparison: Comparison, stage: str, expected: dict[str, DataFrame],
            actual: dict[str, DataFrame]) -> None:
    for name, frame in expected.items():
        comparison.frames(f"{stage} {name}", frame, actual[name])


def serving_totals(spark: SparkSession, layout: Layout) -> list[tuple[object, ...]]:
    return [(*key, *sorted(values.items())) for key, values in
            totals(serving_view(spark, layout, None)).items()]


def reference_totals(lines: list[str]) -> list[tuple[object, ...]]:
    events = reference.valid_unique_events(lines)
    return [(*key, *sorted(values.items())) for key, values in
            reference.totals(reference.visits(events)).items()]


@contextmanager
def kafka_broker(settings: ChaosSettings) -> Iterator[LocalBroker | None]:
    """A real single-node broker on free loopback ports for ``source: kafka``."""
    if settings.source != "kafka":
        yield None
        return
    jars = load_config(None, environ={}).kafka.local.jars_cache
    broker = LocalBroker(settings.work / "broker", jars, port=free_port(),
                         controller_port=free_port())
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


def run_chaos(settings: ChaosSettings) -> dict[str, Any]:
    """The whole chaos run; the result with every figure (see the module's docstring)."""
    began = time.monotonic()
    rng = random.Random(settings.seed)
    settings.work.mkdir(parents=True, exist_ok=True)
    with kafka_broker(settings) as broker, postgres_server() as postgres:
        chaos = Side("chaos", settings.work, settings.source, broker,
                     store_document(postgres, settings.store_write_every))
        crash_free = Side("crash-free", settings.work, settings.source, broker)
        store = Store(chaos.config.serving.postgres)
        generator = start_generator(chaos, settings, broker)
        log.info("%s: %s records at %.0f/s into abstream run, killed %d times",
                 settings.source, f"{settings.events:,}", settings.rate, settings.kills)
        outage, outage_seen = store_outage(postgres, chaos, *settings.store_outage)
        caught = kill_stream(chaos, settings, rng, lambda: generator.poll() is None, store)
        outage.join()
        if generator.wait() != 0:
            raise RuntimeError(f"the generator failed; see {chaos.logs}")
        log.info("draining: run --once in this process")
        with pipeline(chaos.config) as drain:
            run_once_and_store(drain, pipeline_components(drain.config), threading.Event())
        stream_seconds = round(time.monotonic() - began, 1)

        lines = feed_crash_free(chaos, crash_free, settings, broker)
        comparison = Comparison()
        with pipeline(crash_free.config) as ctx:
            log.info("crash-free run over the same records")
            run_once(ctx, pipeline_components(ctx.config))
            spark = ctx.spark
            compare(comparison, "speed", speed_frames(spark, crash_free.layout, settings.source),
                    speed_frames(spark, chaos.layout, settings.source))
            compare_store(comparison, "speed", spark, chaos, store)

            batch_killed = kill_batch_mid_chunk(chaos, rng)
            log.info("batch --since-last again, in this process")
            batch_and_store(Deployment.open(chaos.config), BatchRequest("since_last"),
                            threading.Event())
            run_batch(ctx, BatchRequest("since_last"))
            compare_batch(comparison, "batch --since-last", spark, crash_free.layout,
                          chaos.layout)
            if settings.batch_all:
                log.info("batch --all on both sides")
                batch_and_store(Deployment.open(chaos.config), BatchRequest("all"),
                                threading.Event())
                run_batch(ctx, BatchRequest("all"))
                compare_batch(comparison, "batch --all", spark, crash_free.layout,
                              chaos.layout)
                compare_store(comparison, "batch --all", spark, chaos, store)
                expected = reference_totals(lines)
                comparison.rows("serving view (chaos) vs reference", expected,
                                serving_totals(spark, chaos.layout))
                comparison.rows("serving view (crash-free) vs reference", expected,
                                serving_totals(spark, crash_free.layout))
            else:
                compare_store(comparison, "batch --since-last", spark, chaos, store)
            late = ctx.stats.as_dict()[topology.SESSIONIZE.name]["late_rows_dropped"]
    return {
        "benchmark": "chaos",
        "source": settings.source,
        "kills": settings.kills,
        **comparison.summary(),
        "seconds": round(time.monotonic() - began, 1),
        "stream_seconds": stream_seconds,
        "kills_mid_batch": dict(caught.mid_batch),
        "kills_during_startup": len(caught.startup),
        "kills_mid_store_write": caught.mid_store_write,
        "store_outage": outage_seen,
        "startup_kills": caught.startup,
        "batch_killed_mid_chunk": batch_killed,
        "records": len(lines),
        "rate": settings.rate,
        "seed": settings.seed,
        "kill_wait_seconds": list(settings.wait),
        "late_rows_dropped_crash_free": late,
        "tables": comparison.tables,
        "machine": machine(),
        "master": "local[2]",
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
    }


#: How long a kill aimed at a store transaction waits for one.
STORE_WRITE_WAIT = 90.0
#: The variable the chaos side's config takes the store's password from.
STORE_PASSWORD = "ABSTREAM_CHAOS_STORE_PASSWORD"


@contextmanager
def postgres_server() -> Iterator[LocalPostgres]:
    """A throwaway PostgreSQL server on a free loopback port; its password in
    ``STORE_PASSWORD``."""
    password = os.urandom(12).hex()
    os.environ[STORE_PASSWORD] = password
    server = LocalPostgres(password).start()
    try:
        yield server
    finally:
        server.remove()


def store_document(server: LocalPostgres, write_every: str) -> dict[str, Any]:
    """The chaos side's ``serving`` settings: the store written every ``write_every``."""
    return {"store": "postgres", "postgres": {
        "dsn": server.dsn, "password": "${" + STORE_PASSWORD + "}", "schema": "chaos",
        "write_every": write_every}}


def store_outage(server: LocalPostgres, side: Side, after: float, seconds: float
                 ) -> tuple[threading.Thread, dict[str, Any]]:
    """A thread that kills the store's server ``after`` seconds from now and starts it
    again ``seconds`` later, and what it saw: the gold commits made meanwhile."""
    seen: dict[str, Any] = {"after_seconds": after, "seconds": seconds}
    gold = Path(side.layout.experiment_metrics)

    def outage() -> None:
        time.sleep(after)
        before = len(_commits(gold))
        server.kill()
        log.info("the serving store's PostgreSQL killed (SIGKILL) for %.0f s", seconds)
        time.sleep(seconds)
        seen["gold_commits_during"] = len(_commits(gold)) - before
        server.start()
        log.info("the serving store's PostgreSQL started again; %d gold commits meanwhile",
                 seen["gold_commits_during"])

    thread = threading.Thread(target=outage, name="store-outage", daemon=True)
    thread.start()
    return thread, seen


def kill_in_store_write(process: subprocess.Popen[str], store: Store,
                        timeout: float = STORE_WRITE_WAIT) -> bool:
    """SIGKILL ``process``'s group while one of its serving-store writes is inside its
    transaction; whether it was, within ``timeout`` (False if the process ended first).

    A connection of the harness holds the store's progress row (``FOR UPDATE``), which
    every write locks after it staged its rows: the run's next write waits on it, its
    transaction open, and the kill falls there, however short a write is on this machine.
    The row is let go once the process is dead. A store that is down (``--store-outage``)
    is tried again until ``timeout``."""
    deadline, probe = time.monotonic() + timeout, KeptConnection(store)

    def going() -> bool:
        return process.poll() is None and time.monotonic() < deadline

    try:
        while going():
            try:
                with progress_row_held(store):
                    while going() and not _write_waiting(probe):
                        time.sleep(0.05)
                    if going():
                        kill_group(process)
                        return True
            except StoreError:
                time.sleep(0.5)
        return False
    finally:
        probe.close()


@contextmanager
def progress_row_held(store: Store) -> Iterator[None]:
    """The store's progress row locked (``FOR UPDATE``) by a connection of the harness."""
    with store.connect() as gate:
        ensure_schema(gate, store)
        with gate.transaction():
            gate.execute(sql.SQL("SELECT 1 FROM {} WHERE store = %s FOR UPDATE")
                         .format(store.table(PROGRESS)), (SERVING,))
            yield


def _write_waiting(probe: KeptConnection) -> bool:
    """Whether one of abstream's sessions waits on a row lock inside its transaction (read
    in a transaction of its own: a transaction sees one snapshot of ``pg_stat_activity``)."""
    with probe.use() as connection:
        return bool(connection.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'abstream' "
            "AND pid <> pg_backend_pid() AND xact_start IS NOT NULL "
            "AND wait_event_type = 'Lock' AND wait_event <> 'advisory'").fetchone()[0])


def compare_store(comparison: Comparison, stage: str, spark: SparkSession, side: Side,
                  store: Store) -> None:
    """The store's two tables against the side's Delta serving views, row for row."""
    views = {"experiment_metrics": serving_view(spark, side.layout, None),
             "definition_metrics": definitions_view(spark, side.layout,
                                                    side.config.metrics.catalog, None)}
    with store.connect() as connection:
        for name, view in views.items():
            columns = VIEW_TABLES[name][0].fieldNames()
            delta = view.select(*columns).toArrow().to_pylist()
            stored = connection.cursor(row_factory=dict_row).execute(
                sql.SQL("SELECT {} FROM {}").format(
                    sql.SQL(", ").join(map(sql.Identifier, columns)), store.table(name)))
            comparison.rows(f"{stage} serving store {name}", map(comparable_view_row, delta),
                            map(comparable_view_row, stored.fetchall()))


def start_generator(side: Side, settings: ChaosSettings, broker: LocalBroker | None
                    ) -> subprocess.Popen[str]:
    """``abstream generate --rate`` into the chaos side's landing folder or topic."""
    arguments = ["generate", "--events", str(settings.events), "--seed", str(settings.seed),
                 "--rate", str(settings.rate), "--start", START.isoformat(),
                 "--span", f"{SPAN // timedelta(seconds=1)} seconds",
                 "--late-max", f"{LATE_MAX // timedelta(seconds=1)} seconds"]
    if broker is not None:
        arguments += ["--to", "kafka"]
    return side.start("generate", *arguments)


def feed_crash_free(chaos: Side, crash_free: Side, settings: ChaosSettings,
                    broker: LocalBroker | None) -> list[str]:
    """The chaos side's records for the crash-free side; every record, in order."""
    if broker is None:
        landing = Path(chaos.layout.landing)
        target = Path(crash_free.layout.landing)
        target.mkdir(parents=True)
        for path in sorted(landing.glob("beacons-*")):
            os.link(path, target / path.name)
        return landing_records(landing)
    kafka = crash_free.config.kafka
    ensure_topics(kafka, [kafka.topic], kafka.partitions)
    generate_to_kafka(generator_settings(settings, None), kafka, kafka.topic)
    scratch = settings.work / "records"
    generate(generator_settings(settings, None), scratch)
    return landing_records(scratch)


def main() -> int:
    if "--standby" in sys.argv[1:]:
        from bench.standby_chaos import main as standby_main

        return standby_main(sys.argv[1:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", choices=("files", "kafka"), default="files")
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--events", type=int, default=ChaosSettings.events,
                        help="records generated (the stream lasts events / rate seconds)")
    parser.add_argument("--rate", type=float, default=ChaosSettings.rate,
                        help="records per second")
    parser.add_argument("--seed", type=int, default=1, help="of the records and the kills")
    parser.add_argument("--store-outage", type=float, nargs=2, default=ChaosSettings.store_outage,
                        metavar=("AFTER", "SECONDS"),
                        help="PostgreSQL killed AFTER seconds into the stream, for SECONDS")
    parser.add_argument("--store-kills", type=int, default=ChaosSettings.store_kills,
                        help="kills the moment a run's serving-store transaction is open")
    parser.add_argument("--startup-kills", type=int, default=ChaosSettings.startup_kills,
                        help="kills in a run's start-up, before its last component's first "
                             "micro-batch")
    parser.add_argument("--wait", type=float, nargs=2, default=ChaosSettings.wait,
                        metavar=("MIN", "MAX"),
                        help="seconds from a (re)started run's first micro-batch to its kill")
    parser.add_argument("--work", type=Path,
                        help="its data (default bench/results/work-chaos-SOURCE)")
    args = parser.parse_args()
    log_progress()
    work = args.work or RESULTS / f"work-chaos-{args.source}"
    shutil.rmtree(work, ignore_errors=True)
    settings = ChaosSettings(work=work, source=args.source, kills=args.kills,
                             events=args.events, rate=args.rate, seed=args.seed,
                             wait=tuple(args.wait), startup_kills=args.startup_kills,
                             store_outage=tuple(args.store_outage),
                             store_kills=args.store_kills)
    result = run_chaos(settings)
    write_result(result, f"chaos-{args.source}")
    passed = result["lost_rows"] == result["duplicate_rows"] == result["mismatched_tables"] \
        == result["late_rows_dropped_crash_free"] == 0 \
        and result["kills_during_startup"] >= min(settings.startup_kills, settings.kills)
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
