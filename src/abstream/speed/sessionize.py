"""sessionize: bronze ``events`` -> silver ``sessions`` (closed visits) + gold
``experiment_metrics`` and ``definition_metrics`` (fresh increments).

Every micro-batch is a small batch job over the new bronze events and the events of the
open visits they touch, which the component carries from one micro-batch to the next itself
(``io.state``): Spark's batch operators (one sort by session and time, aggregates, joins)
instead of its streaming state stores. Each micro-batch

1. drops the new events behind its input watermark and counts them: the latest event time
   of the bronze commits read whole, less ``sessionize.lateness``. Where the micro-batch
   before ended inside a commit (``maxFilesPerTrigger`` ended it there), or inside the
   snapshot a first start reads, what it read there moves the watermark too, but never
   past the earliest event of the files it left unread (Delta's file statistics): ingest
   writes a file per event date, and the later date's events must not make the earlier
   date's, read next, late;
2. finds the visits of the new events with the events of the open visits of the sessions
   they touch (``stages.sessions``) and writes them, once, as the micro-batch's state
   snapshot;
3. assembles their visits (cached: a row per visit) and appends to silver those that closed
   (their last event + ``gap`` behind the next watermark), with the untouched open visits
   that closed, as the snapshot that sessionized them wrote them;
4. appends to both gold tables what changed: each event's targets it had not been counted
   for yet (an event is counted as soon as it arrives, and again for a population it joins
   later, when its visit meets an experiment or an exposure: its visit's entries now against
   those of the visit it was counted in before), the visit numbers of the visits that
   closed, and the units whose time (their visit's start, its first exposure) the next
   watermark has passed, of the visits it sessionized and of the untouched ones whose last
   event it passed: no event accepted after can move that time, or give the visit another
   start and so its unit another id (a unit counted again, in the window it was counted in
   before, changes no merged sketch);
5. writes the visits it sessionized that stay open, whole, for the next micro-batch, and
   lists the sessions it sessionized again: the untouched open visits stay where earlier
   snapshots wrote them (``speed.open_visits``).

A micro-batch's work is its new events and the open visits they touch, and the untouched
ones that close: in a live stream, where a visit stays open for the gap after its last
event, most open visits are untouched in any one micro-batch, and their events and rows
stay where an earlier snapshot wrote them; of each, a micro-batch reads its key, end and
events. Once the visits left open would refer to more than ``sessionize.state_generations``
snapshots, the micro-batch copies the open visits of the oldest into its own snapshot. A
micro-batch reads the events of the snapshots that hold the visits it touches, no others.

Gold's speed rows are increments: the serving view adds them up per window. Each operator
has its own watermark (``abstream.speed.watermarks``): the visits held open hold back the output
watermark, so the windows after them never see a visit as late.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import timedelta
from functools import partial
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import DataFrame, Observation
from pyspark.sql import functions as F
from pyspark.sql.streaming import DataStreamWriter

from abstream.io import local_disk, sinks
from abstream.io.sources import BatchEnd, CommitsRead, delta_stream
from abstream.io.state import Snapshot, StateSnapshots
from abstream.io.tables import (
    DEFINITIONS_TABLE,
    METRICS_TABLE,
    SESSIONS_TABLE,
    ensure_source_table,
    ensure_table,
    events_table,
)
from abstream.observed import FRESHNESS_FACTS, LATE, OUTPUT_WATERMARK, STATE_ROWS, WATERMARK
from abstream.schemas import OPEN_VISITS, SUPERSEDED_VISITS, session_state
from abstream.speed.component import Component, Context, stream_writer
from abstream.speed.open_visits import (
    CARRIED,
    DELTAS,
    EVENTS,
    OPEN,
    SUPERSEDED,
    Held,
    HeldIn,
    OpenVisits,
    events_in,
    events_of,
    open_and_settling,
    snapshots_of,
)
from abstream.speed.watermarks import (
    held_source_watermark,
    input_watermark,
    output_watermark,
    source_watermark,
)
from abstream.stages import constants, definition_gold, gold, sessions
from abstream.times import now_micros
from abstream.topology import SESSIONIZE, SPEED

NAME = SESSIONIZE.name


def fresh_targets(events: DataFrame, entries: DataFrame, carried: DataFrame) -> DataFrame:
    """What each event counts for now (``sessions.event_targets``) and was not counted for
    before: what the ``carried`` events (with the visit they were counted in,
    ``counted_in``) list is what the visits they were counted in listed, as those visits
    held them all; targets only grow, so the difference is what is new."""
    before = sessions.listed_entries(carried, ("session_id", "counted_in")).select(
        "session_id", "counted_in", F.col("id").alias("experiment_id"), "variant",
        F.col("qualified").alias("was_qualified"), F.col("exposed_at").alias("was_exposed_at"))
    targets = sessions.event_targets(events, entries).join(
        F.broadcast(before), ["session_id", "counted_in", "experiment_id", "variant"], "left")
    already = F.col("was_qualified").isNotNull() & sessions.counts_for(
        F.col("was_qualified"), F.col("was_exposed_at"), F.col("population"),
        F.col("event_ts"))
    return targets.where(~already)


def _touched(new: DataFrame, held: Held, previous: Snapshot | None
             ) -> tuple[DataFrame, DataFrame]:
    """``new`` and the sessions sessionized again.

    The sessions sessionized again are those with new events in time, and those of open
    visits a snapshot did not keep whole (written before it did); the other open visits
    are carried over as they are. Where ``previous`` holds events, ``new`` and the
    sessions come back cached (unpersist them): ``new`` is read for the sessions it
    touches and then sessionized, and the micro-batch reads bronze once; the sessions,
    few, are joined to the held visits and events several times. Otherwise no session is
    touched.
    """
    if previous is None or previous.held_rows == 0:
        return new, new.select("session_id").limit(0)
    new = new.persist(StorageLevel.MEMORY_AND_DISK)
    touched = new.where(~F.col("late")).select("session_id").unionByName(
        held.visits.where("partial").select("session_id")).distinct()
    return new, F.broadcast(touched.persist(StorageLevel.MEMORY_AND_DISK))


def _arrived(batch: DataFrame, watermark: int | None, columns: tuple[str, ...]) -> DataFrame:
    """The micro-batch's events as sessionized (``columns``, not yet counted), each
    ``late`` when behind ``watermark`` (epoch microseconds)."""
    late = F.lit(False) if watermark is None \
        else constants.micros("event_ts") < constants.micros_constant(watermark)
    return batch.select(*columns, F.lit(None).cast("timestamp").alias("counted_in"),
                        late.alias("late"))


def _watermark_before(previous: Snapshot | None, lateness: timedelta) -> int | None:
    """The watermark the micro-batch after ``previous`` judges its events by (a snapshot
    that did not record one: its latest event time less the lateness)."""
    if previous is None:
        return None
    if previous.watermark is not None:
        return previous.watermark
    return source_watermark(previous.seen_until, lateness)


def _settled_targets(visits: DataFrame, closing_at: int | None) -> DataFrame:
    """The targets of ``visits`` whose unit counts at a time the watermark after the
    micro-batch (``closing_at``) has passed (none where there is none yet)."""
    settled = F.lit(False) if closing_at is None \
        else constants.micros(definition_gold.unit_time()) < constants.micros_constant(closing_at)
    return sessions.visit_targets(visits).where(settled)


def _read_and_seen(previous: Snapshot | None, newest: int | None, end: BatchEnd
                   ) -> tuple[int | None, int | None]:
    """The latest event time read after a micro-batch whose events go up to ``newest``, and
    the latest of the input read whole: all of it where the micro-batch ended between
    commits, else what it had before and the commits it finished (from their statistics)."""
    def latest(*times: int | None) -> int | None:
        return max((t for t in times if t is not None), default=None)

    before_seen = previous.seen_until if previous else None
    before_read = previous.read_until if previous and previous.read_until is not None \
        else before_seen
    read_until = latest(before_read, newest)
    if not end.inside:
        return read_until, read_until
    return read_until, latest(before_seen, end.finished_latest)


def _snapshot_events(state: StateSnapshots, batch_id: int, started: DataFrame, at: int
                     ) -> Observation:
    """Write the events of the micro-batch's visits (``started``) as its snapshot's events
    part, late ones with no visit; observed: how many were late, the newest event time
    (epoch microseconds), and the freshness of the new events (not counted yet) at ``at``,
    the micro-batch's start."""
    seen = Observation()
    state.write(batch_id, EVENTS, started
                .withColumn("visit_start", F.when(~F.col("late"), F.col("visit_start")))
                .observe(seen, F.count_if("late").alias("late"),
                         F.unix_micros(F.max("event_ts")).alias("newest"),
                         *gold.freshness(F.col("counted_in").isNull(), at)))
    return seen


def _report(kept: Mapping[str, Any], seen: Mapping[str, Any], closing_at: int | None
            ) -> dict[str, float]:
    """A micro-batch's figures for its progress: visits closed, late events, the events
    held, the freshness of its new events, and its watermarks (epoch milliseconds)."""
    report = {"visits": kept["closing"], LATE: seen["late"], STATE_ROWS: kept["rows"] or 0,
              **{fact: seen[fact] for fact in FRESHNESS_FACTS}}
    # Gold reads the events (not held) and the visits (held back to the earliest event
    # still open): its input watermark is the lower of the two.
    gold_watermark = input_watermark(
        closing_at, output_watermark(closing_at, kept["earliest"]))
    for key, micros in ((WATERMARK, closing_at), (OUTPUT_WATERMARK, gold_watermark)):
        if micros is not None:
            report[key] = micros // 1000
    return report


GoldAppend = Callable[[DataFrame, DataFrame, DataFrame, str, int], None]


def _gold_append(ctx: Context, timed: Callable[[str, Any], Any]) -> GoldAppend:
    """What appends a micro-batch's gold increments, from its fresh event targets, the
    targets of the visits that closed and the settled targets (whose units count), to both
    gold tables."""
    spark, metrics = ctx.spark, ctx.config.metrics
    windowing = gold.Windowing.of(metrics)
    append_gold = timed("gold append", sinks.AppendOnce(
        ensure_table(spark, METRICS_TABLE, ctx.layout), METRICS_TABLE.partition_by))
    append_definitions = timed("definitions append", sinks.AppendOnce(
        ensure_table(spark, DEFINITIONS_TABLE, ctx.layout), DEFINITIONS_TABLE.partition_by))

    def append(fresh: DataFrame, closed: DataFrame, settled: DataFrame, writer_id: str,
               batch_id: int) -> None:
        append_gold(gold.with_lineage(gold.experiment_metrics(
            fresh, closed, windowing, metrics.hll_lg_k), SPEED), writer_id, batch_id)
        append_definitions(definition_gold.with_lineage(definition_gold.definition_metrics(
            fresh, closed, settled, metrics.catalog, windowing,
            hll_lg_k=metrics.hll_lg_k), SPEED), writer_id, batch_id)

    return append


def build(ctx: Context) -> DataStreamWriter:
    settings = ctx.config.sessionize
    spark = ctx.spark
    gap, lateness = settings.gap, settings.lateness
    state_schema = session_state(
        sessions.catalog_properties(ctx.config.metrics.catalog, ctx.config.events))
    columns = sessions.session_columns(ctx.config.metrics.catalog, ctx.config.events)
    events_path = ensure_source_table(spark, events_table(ctx.config.events), ctx.layout, NAME)
    timed = partial(ctx.stats.timed, NAME)
    append_visits = timed("silver append", sinks.AppendOnce(
        ensure_table(spark, SESSIONS_TABLE, ctx.layout), SESSIONS_TABLE.partition_by))
    append_gold = _gold_append(ctx, timed)
    snapshot_events = timed("events snapshot", _snapshot_events)
    visits_on_disk = timed("visits", local_disk.DiskFrames.put)
    touched_in_snapshots = timed("touched visits", snapshots_of)
    checkpoint = ctx.layout.checkpoint(NAME)
    commits_read = CommitsRead(spark, checkpoint, events_path, "event_ts")
    state = StateSnapshots(spark, checkpoint + "/state",
                           {EVENTS: state_schema, OPEN: OPEN_VISITS, CARRIED: state_schema,
                            SUPERSEDED: SUPERSEDED_VISITS})
    open_visits = OpenVisits(state, columns, gap, settings.state_generations, timed)

    def write(batch: DataFrame, batch_id: int, writer_id: str) -> Mapping[str, float]:
        started_at = now_micros()
        previous = state.before(batch_id)
        watermark = _watermark_before(previous, lateness)
        end = commits_read.after(batch_id)
        new = _arrived(batch, watermark, columns)
        held = open_visits.held(previous)
        new, touched = _touched(new, held, previous)
        # Read three times (its snapshots, their events, its rows): cached, it scans the
        # open visits' rows once.
        touched_visits = held.of_sessions(touched).persist(StorageLevel.MEMORY_AND_DISK)
        try:
            # Only the snapshots that hold the touched visits are read: no open visit, none.
            touched_in = touched_in_snapshots(touched_visits) if held.generations \
                else HeldIn()
            held_touched = events_of(
                events_in(state, touched_in.snapshots, columns)
                .join(touched, "session_id", "left_semi"),
                touched_visits).drop("visit_start")
            # The late events are kept in the snapshot, marked and in no visit, so that the
            # micro-batch reads bronze once: they are counted there and go no further.
            started = sessions.with_visit_start(held_touched.unionByName(new), gap,
                                                apart=("late",))
            seen = snapshot_events(state, batch_id, started, started_at)
            read_until, seen_until = _read_and_seen(previous, seen.get["newest"], end)
            # Everything below reads the snapshot just written: the micro-batch is sessionized
            # once.
            sessionized = state.read_written(batch_id, EVENTS).where(~F.col("late"))
            # Assembled once, row by row on local disk: read for the open snapshot, silver
            # and both gold tables.
            with local_disk.DiskFrames() as disk:
                visits = visits_on_disk(
                    disk, sessions.assemble_visits(sessionized, ctx.config.metrics.catalog))
                closing_at = held_source_watermark(
                    watermark, seen_until, read_until, lateness, end.earliest_unread,
                    inside=end.inside)
                still_open, settling = open_and_settling(watermark, closing_at, gap)
                kept, untouched = open_visits.leave_open(
                    batch_id, held, visits, touched, touched_visits, touched_in=touched_in,
                    watermark=watermark, closing_at=closing_at, still_open=still_open,
                    settling=settling, on_disk=disk.put)
                closed = visits.where(~still_open).unionByName(untouched.where(~still_open))
                if kept["closing"]:
                    append_visits(sessions.with_lineage(closed, SPEED), writer_id, batch_id)
                append_gold(
                    fresh_targets(sessionized, sessions.visit_entries(visits),
                                  sessionized.where(F.col("counted_in").isNotNull())),
                    sessions.visit_targets(closed),
                    _settled_targets(visits.unionByName(untouched.where(settling)), closing_at),
                    writer_id, batch_id)
        finally:
            new.unpersist()
            touched.unpersist()
            touched_visits.unpersist()
        state.complete(batch_id, seen_until, kept["rows"] or 0, tuple(kept["generations"]),
                       DELTAS, watermark=closing_at, read_until=read_until,
                       spans=kept.get("spans"))
        return _report(kept, seen.get, closing_at)

    return stream_writer(ctx, NAME, sessions.with_measured_properties(
        delta_stream(spark, events_path, settings.max_files_per_trigger)), write)


COMPONENT = Component(
    node=SESSIONIZE,
    build=build,
    trigger=lambda config: config.sessionize.trigger,
)
