"""The batch layer: recompute closed event-time ranges from bronze, idempotently.

Each range is cut into chunks; a chunk replaces the batch layer's sessions and rows of both
gold tables of its range in one Delta commit each, then is recorded in ``batch_coverage``.
A re-run of a range replaces the same rows, so it leaves the same tables; an interrupted
run leaves whole chunks behind, and ``--since-last`` picks up the rest.
"""

from __future__ import annotations

import logging
import posixpath
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Literal
from urllib.parse import unquote

from delta.tables import DeltaTable
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from abstream.batch.coverage import Covered, latest_coverage, record
from abstream.batch.ranges import TimeRange, ceil_to, difference, floor_to, union
from abstream.batch.recompute import recompute
from abstream.config import Config
from abstream.errors import Interrupted, UsageError
from abstream.io import sinks
from abstream.io.deltalog import DeltaLogReader
from abstream.io.deployment import Deployment
from abstream.io.tables import (
    DEFINITIONS_TABLE,
    METRICS_TABLE,
    SESSIONS_TABLE,
    ensure_table,
    events_table,
)
from abstream.stages import sessions
from abstream.stages.gold import Windowing
from abstream.times import from_micros, micros_from
from abstream.topology import BATCH

log = logging.getLogger(__name__)

Mode = Literal["range", "all", "since_last"]


@dataclass(frozen=True)
class BatchRequest:
    """What to recompute: an explicit range, everything in bronze, or what is new."""

    mode: Mode
    start: datetime | None = None
    end: datetime | None = None

    def __post_init__(self) -> None:
        if (self.mode == "range") != (self.start is not None and self.end is not None):
            raise UsageError("a batch range, and only a range, has a start and an end")
        if self.start is not None and self.end is not None and self.end <= self.start:
            raise UsageError("a batch range needs a start before its end")


@dataclass
class BatchResult:
    ranges: list[TimeRange] = field(default_factory=list)
    chunks: int = 0
    events: int = 0
    visits: int = 0
    metric_rows: int = 0
    seconds: float = 0.0

    @property
    def events_per_second(self) -> float:
        return self.events / self.seconds if self.seconds else 0.0

    def text(self) -> str:
        ranges = ", ".join(map(str, self.ranges)) or "nothing new"
        return (f"batch: {ranges}: {self.chunks} chunks, {self.events:,} events, "
                f"{self.visits:,} visits, {self.metric_rows:,} gold rows in "
                f"{self.seconds:.1f} s ({self.events_per_second:,.0f} events/s)")


@dataclass(frozen=True)
class Bronze:
    """One snapshot of bronze: what every chunk of a run reads, and how many events each
    multiple of ``batch.chunk`` holds (by its start)."""

    frame: DataFrame
    version: int
    first: datetime | None
    last: datetime | None
    per_chunk: Mapping[datetime, int] = field(default_factory=dict)

    @property
    def end(self) -> datetime:
        """Just after the newest event: the end of the data at hand."""
        if self.last is None:
            raise ValueError("bronze is empty")
        return self.last + timedelta(microseconds=1)

    @property
    def span(self) -> TimeRange:
        """From the first event to just after the newest one."""
        if self.first is None:
            raise ValueError("bronze is empty")
        return TimeRange(self.first, self.end)


def read_bronze(ctx: Deployment) -> Bronze:
    path = ensure_table(ctx.spark, events_table(ctx.config.events), ctx.layout)
    version = DeltaTable.forPath(ctx.spark, path).history(1).first()["version"]
    frame = sessions.with_measured_properties(
        ctx.spark.read.format("delta").option("versionAsOf", version).load(path))
    micros = F.unix_micros("event_ts")
    size = _chunk_size(ctx.config) // timedelta(microseconds=1)
    rows = frame.groupBy((micros - F.pmod(micros, F.lit(size))).alias("chunk")).agg(
        F.min(micros).alias("first"), F.max(micros).alias("last"),
        F.count(F.lit(1)).alias("events")).collect()
    if not rows:
        return Bronze(frame, int(version), None, None)
    return Bronze(frame, int(version), from_micros(min(row["first"] for row in rows)),
                  from_micros(max(row["last"] for row in rows)),
                  {from_micros(row["chunk"]): row["events"] for row in rows})


def plan(ctx: Deployment, request: BatchRequest, bronze: Bronze,
         now: datetime | None = None) -> list[TimeRange]:
    """The ranges a request covers, aligned to whole windows."""
    unit = Windowing.of(ctx.config.metrics).step
    if bronze.first is None:
        return []
    everything = TimeRange.aligned(bronze.first, bronze.end, unit)
    if request.mode == "all":
        return [everything]
    if request.start is not None and request.end is not None:
        # Past the end of the data nothing is known yet: covering it would hide the speed
        # layer's rows there behind empty final ones.
        end = min(ceil_to(request.end, unit), everything.end)
        start = floor_to(request.start, unit)
        if end < ceil_to(request.end, unit):
            log.info("batch: the data ends at %s; the range stops there", end)
        return [TimeRange(start, end)] if start < end else []
    coverage = latest_coverage(ctx.spark, ctx.layout)
    clock = min(now or datetime.now(UTC), bronze.end)
    horizon = floor_to(clock - ctx.config.batch.closed_after, unit)
    start = floor_to(bronze.first, unit)
    missing = difference(TimeRange(start, horizon), [c.range for c in coverage]) \
        if horizon > start else []
    return union(missing + [c.range for c in changed_since_computed(ctx, coverage, bronze)])


def changed_since_computed(ctx: Deployment, coverage: list[Covered], bronze: Bronze
                           ) -> list[Covered]:
    """Computed ranges whose input changed: bronze got events (late ones, typically) where
    the range's results depend on them, in versions after the one the range was read at.

    The bronze files added since are named by Delta's log; their events are read (only the
    partitions they are in) and matched against each range's dependency interval.
    """
    if not coverage:
        return []
    since = min(c.bronze_version for c in coverage) + 1
    reader = DeltaLogReader(ctx.layout.events, since=since)
    reader.refresh()
    if reader.earliest_version not in (None, since):
        log.warning("bronze's log no longer holds version %d: recomputing every range", since)
        return coverage
    added = [(unquote(posixpath.basename(path)), posixpath.dirname(path), version.version)
             for version in reader.data_versions_after(since - 1)
             if version.version <= bronze.version
             for path, _, _, _ in version.added]
    if not added:
        return []
    spark = ctx.spark
    files = spark.createDataFrame([(name, version) for name, _, version in added],
                                  "file_name string, version long")
    dates = sorted({unquote(folder).removeprefix("event_date=") for _, folder, _ in added})
    ranges = spark.createDataFrame(
        [(i, c.bronze_version, c.depends_from, c.depends_until) for i, c in enumerate(coverage)],
        "i int, bronze_version long, depends_from timestamp, depends_until timestamp")
    new_events = bronze.frame.where(F.col("event_date").cast("string").isin(dates)) \
        .select(F.col("_metadata.file_name").alias("file_name"), "event_ts") \
        .join(F.broadcast(files), "file_name")
    hits = new_events.join(
        F.broadcast(ranges),
        (F.col("version") > F.col("bronze_version"))
        & F.col("event_ts").between(F.col("depends_from"), F.col("depends_until")),
    ).select("i").distinct().collect()
    return [coverage[row.i] for row in sorted(hits)]


def run_batch(ctx: Deployment, request: BatchRequest, stop: threading.Event | None = None,
              now: datetime | None = None) -> BatchResult:
    """Recompute what ``request`` asks for; log progress chunk by chunk."""
    began = time.monotonic()
    bronze = read_bronze(ctx)
    result = BatchResult(ranges=plan(ctx, request, bronze, now))
    chunks = [chunk for span in result.ranges
              for chunk in span.chunks(_chunk_size(ctx.config), bronze.per_chunk,
                                       ctx.config.batch.chunk_events)]
    if not chunks or bronze.first is None:
        log.info("batch: nothing to compute (bronze %s)",
                 "is empty" if bronze.first is None else
                 f"up to {bronze.last:%Y-%m-%d %H:%M:%S} is covered")
        result.seconds = time.monotonic() - began
        return result
    log.info("batch: %s in %d chunk%s, from bronze version %d",
             ", ".join(map(str, result.ranges)), len(chunks), "" if len(chunks) == 1 else "s",
             bronze.version)
    run_id = uuid.uuid4().hex
    tables = Tables(ensure_table(ctx.spark, SESSIONS_TABLE, ctx.layout),
                    ensure_table(ctx.spark, METRICS_TABLE, ctx.layout),
                    ensure_table(ctx.spark, DEFINITIONS_TABLE, ctx.layout))
    for number, chunk in enumerate(chunks, 1):
        if stop is not None and stop.is_set():
            raise Interrupted(f"stopped after {number - 1} of {len(chunks)} chunks; "
                              "run `abstream batch --since-last` to finish")
        chunk_began = time.monotonic()
        covered = _compute_chunk(ctx, chunk, bronze, tables, run_id)
        result.chunks += 1
        result.events += covered.events
        result.visits += covered.visits
        result.metric_rows += covered.metric_rows
        seconds = time.monotonic() - chunk_began
        log.info("batch %d/%d %s: %s events, %s visits, %s gold rows in %.1f s (%s events/s)",
                 number, len(chunks), chunk, f"{covered.events:,}", f"{covered.visits:,}",
                 f"{covered.metric_rows:,}", seconds,
                 f"{covered.events / seconds:,.0f}" if seconds else "-")
    result.seconds = time.monotonic() - began
    return result


def _chunk_size(config: Config) -> timedelta:
    unit = Windowing.of(config.metrics).step
    return max(unit, config.batch.chunk // unit * unit)


@dataclass(frozen=True)
class Tables:
    """Where the batch layer writes: the sessions and both gold tables' paths."""

    sessions: str
    gold: str
    definitions: str


def _compute_chunk(ctx: Deployment, chunk: TimeRange, bronze: Bronze, tables: Tables,
                   run_id: str) -> Covered:
    result = recompute(bronze.frame, chunk, bronze.span, ctx.config)
    try:
        visits = result.visits.count()
        with sinks.rows_known_to_match(ctx.spark):
            sinks.replace_where(result.visits, tables.sessions,
                                _range_condition("visit_start", chunk),
                                SESSIONS_TABLE.partition_by)
            metric_rows = sinks.replace_where(result.gold, tables.gold,
                                              _range_condition("window_start", chunk),
                                              METRICS_TABLE.partition_by)
            sinks.replace_where(result.definitions, tables.definitions,
                                _range_condition("window_start", chunk),
                                DEFINITIONS_TABLE.partition_by)
    finally:
        result.release()
    covered = Covered(
        range_start=chunk.start, range_end=chunk.end, depends_from=result.depends_from,
        depends_until=result.depends_until, bronze_version=bronze.version,
        events=result.events, visits=visits, metric_rows=metric_rows,
        run_id=run_id, computed_at=datetime.now(UTC),
    )
    record(ctx.spark, ctx.layout, covered)
    return covered


def _range_condition(column: str, span: TimeRange) -> str:
    start, end = micros_from(span.start), micros_from(span.end)
    return (f"layer = '{BATCH}' AND {column} >= timestamp_micros({start}) "
            f"AND {column} < timestamp_micros({end})")
