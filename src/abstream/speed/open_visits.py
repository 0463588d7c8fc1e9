"""The open visits sessionize carries from one micro-batch to the next, in its state
snapshots (``io.state``), and the events they hold.

Each micro-batch writes a snapshot (``DELTAS``, the layout this version writes) of

- ``events``: the events it sessionized, with their visit's start (late ones marked, in no
  visit);
- ``open_visits``: the visits it sessionized that stay open, and those it copied, whole
  (silver's columns), each with its generation: the snapshot that holds its events;
- ``carried_events``: the events of the visits it copied;
- ``superseded``: the sessions it sessionized again, and the visits it copied: the rows
  earlier snapshots hold of them are no longer those visits'.

The visits open after a micro-batch are the rows of the snapshots it refers to (their
generations) whose end + gap its watermark has not passed, less those a later one of these
snapshots superseded (``current``). An untouched visit is neither read whole nor written
again: a micro-batch reads the key, end and events of every row (to find the touched ones),
the rows of the snapshots that hold visits closing or settling in it (filtered by their
end), and the events of the touched ones; it writes the visits it sessionized. Which
snapshots hold visits that close or settle, and the earliest start still open, it finds
from the span of each snapshot's rows (earliest start, earliest and latest end), which
the snapshot before recorded (``Snapshot.spans``). Once the open visits would refer to more than
``sessionize.state_generations`` snapshots, the micro-batch copies those of the oldest into
its own (rows and events), so it copies what one snapshot holds at most.

A snapshot of an earlier layout (each listing every open visit: whole where it holds its
events and by key where another does, or whole in each) is carried on by the next
micro-batch copying every open visit it lists into its own snapshot, whole, with its events.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from pyspark.sql import Column, DataFrame, Observation
from pyspark.sql import functions as F

from abstream.io.state import SNAPSHOT, Snapshot, StateSnapshots
from abstream.schemas import OPEN_VISITS
from abstream.stages import constants, sessions

#: The parts of a snapshot: the events sessionized in the micro-batch, the open visits it
#: wrote, the events of the open visits it copied, and the rows it superseded.
EVENTS, OPEN, CARRIED, SUPERSEDED = "events", "open_visits", "carried_events", "superseded"
#: An open visit and the snapshot that holds its events.
HELD_VISIT = (*sessions.VISIT, "generation")
#: What a snapshot of the earlier layout keeps of an open visit another snapshot holds
#: whole: its other columns are NULL.
CARRIED_VISIT = (*HELD_VISIT, "visit_end", "events")
#: The layouts of the snapshots: every open visit listed in each, whole (0); whole in its
#: generation's snapshot only, the later ones listing its key (1); and ``DELTAS``.
WHOLE_IN_GENERATION, DELTAS = 1, 2


#: What a snapshot's open visits' rows span, as it wrote them (epoch microseconds): their
#: earliest start, and their earliest and latest end.
Span = tuple[int, int, int]


@dataclass(frozen=True)
class Held:
    """What the snapshot before a micro-batch left open: its ``visits`` (``CARRIED_VISIT``,
    and ``partial``: whether to sessionize them again), in the ``DELTAS`` layout with rows
    no longer theirs among them (``current``), the snapshots that hold them
    (``generations``), the rows ``superseded`` in those (None for the earlier layouts),
    how many events they hold (``rows``), and the ``Span`` of each snapshot's rows, where
    the snapshot before recorded them."""

    visits: DataFrame
    generations: tuple[int, ...]
    superseded: DataFrame | None
    rows: int
    deltas: bool
    spans: Mapping[int, Span] = field(default_factory=dict)

    def of_sessions(self, sessions: DataFrame) -> DataFrame:
        """The held visits of ``sessions`` less those superseded (``current_of``)."""
        return current_of(self.visits.join(sessions, "session_id", "left_semi"),
                          self.superseded, sessions)


def _held(state: StateSnapshots, previous: Snapshot | None, gap: timedelta
          ) -> tuple[DataFrame, tuple[int, ...], DataFrame | None]:
    """The visits ``previous`` left open (``CARRIED_VISIT``, and ``partial``: whether to
    sessionize them again), the snapshots that hold their events, and for the ``DELTAS``
    layout the visits superseded in them (``current``).

    In the ``DELTAS`` layout an open visit's row is in its generation's snapshot, with the
    rows of visits superseded since and of visits closed since (left out here): what is
    read of each is its key, end and events. A snapshot written before open visits kept
    their generation held the events of its open visits itself; one written before they
    were kept whole (NULL measures) kept them partial."""
    if previous is None:
        return (state.read(None, OPEN).select(*CARRIED_VISIT, F.lit(False).alias("partial")),
                (), None)
    generations = (previous.batch,) if previous.refers_to is None else previous.refers_to
    if previous.form >= DELTAS:
        rows = state.read_parts(generations, (OPEN,)).where(
            _open_at(previous.watermark, gap // timedelta(microseconds=1)))
        superseded = state.read_parts(generations, (SUPERSEDED,)).select(
            F.col("session_id").alias("superseded_session"),
            F.col("visit_start").alias("superseded_start"),
            F.col(SNAPSHOT).alias("superseded_in"))
        return (rows.select(*sessions.VISIT, F.col(SNAPSHOT).alias("generation"), "visit_end",
                            "events", F.lit(False).alias("partial")),
                generations, superseded)
    partial = F.lit(False) if previous.form >= WHOLE_IN_GENERATION \
        else F.col("pageviews").isNull()
    visits = state.read(previous, OPEN).select(
        *sessions.VISIT,
        F.coalesce("generation", constants.long_constant(previous.batch)).alias("generation"),
        "visit_end", "events", partial.alias("partial"))
    return visits, generations, None


def current(visits: DataFrame, superseded: DataFrame | None) -> DataFrame:
    """The held ``visits`` (each with the ``generation`` whose snapshot holds its row) whose
    rows no later snapshot ``superseded``: in the ``DELTAS`` layout the row of an open
    visit sessionized again, or copied, stays in the snapshot that wrote it, and the later
    one lists the session, or the visit, as superseded."""
    if superseded is None:
        return visits
    return visits.join(superseded, (F.col("session_id") == F.col("superseded_session"))
                       & (F.col("superseded_in") > F.col("generation"))
                       & (F.col("superseded_start").isNull()
                          | (F.col("superseded_start") == F.col("visit_start"))),
                       "left_anti")


def current_of(visits: DataFrame, superseded: DataFrame | None, sessions: DataFrame
               ) -> DataFrame:
    """The held ``visits`` of ``sessions`` (``session_id``, few: hinted broadcast, a hint
    its renaming keeps) that no later snapshot ``superseded`` (``current``), reading only
    the rows superseded in these sessions into the join, broadcast, instead of every
    superseded row shuffled."""
    if superseded is None:
        return visits
    return current(visits, F.broadcast(superseded.join(
        sessions.withColumnRenamed("session_id", "superseded_session"),
        "superseded_session", "left_semi")))


def _rows_of(state: StateSnapshots, batches: tuple[int, ...]) -> DataFrame:
    """The open visits' rows the snapshots of ``batches`` wrote whole, each with its
    snapshot as its ``generation``."""
    return state.read_parts(batches, (OPEN,)).drop("generation") \
        .withColumnRenamed(SNAPSHOT, "generation")


def _whole(state: StateSnapshots, visits: DataFrame, batches: tuple[int, ...]) -> DataFrame:
    """The held ``visits`` as the snapshots of their generations (``batches``) keep them,
    whole, each with its ``generation``.

    An open visit is whole in the snapshot that sessionized it (or copied it), whatever
    the layout: earlier layouts kept it whole in the later snapshots too, as they keep it
    in that one."""
    return _rows_of(state, batches).join(visits.select(*HELD_VISIT), list(HELD_VISIT),
                                         "left_semi")


def _carried(visits: DataFrame) -> DataFrame:
    """Held ``visits`` as a snapshot that carries them keeps them: ``CARRIED_VISIT``, and
    NULL for the other columns of an open visit."""
    return visits.select(*(
        F.col(field.name) if field.name in CARRIED_VISIT
        else F.lit(None).cast(field.dataType).alias(field.name)
        for field in OPEN_VISITS.fields))


def events_in(state: StateSnapshots, batches: tuple[int, ...], columns: tuple[str, ...]
              ) -> DataFrame:
    """The events the snapshots of ``batches`` hold, each with the start of the visit it was
    counted in (``counted_in``) and its snapshot (``generation``): those they sessionized
    (not late) and those they copied, including the events of visits closed or sessionized
    again since (join them to the visits)."""
    events = state.read_parts(batches, (EVENTS, CARRIED)).where(~F.col("late"))
    return events.select(*columns, "visit_start",
                         F.col("visit_start").alias("counted_in"), "late",
                         F.col(SNAPSHOT).alias("generation"))


@dataclass(frozen=True)
class HeldIn:
    """Where held visits are: the ``snapshots`` that hold their events, oldest first, and
    how many ``events`` they hold."""

    snapshots: tuple[int, ...] = ()
    events: int = 0


def snapshots_of(visits: DataFrame) -> HeldIn:
    """Where the held ``visits`` are, in one scan of them."""
    rows = visits.groupBy("generation").agg(F.sum("events").alias("events")).collect()
    return HeldIn(tuple(sorted(row["generation"] for row in rows)),
                  sum(row["events"] or 0 for row in rows))


def _open_at(closing_at: int | None, gap_micros: int) -> Column:
    """Whether a visit is still open when the watermark is ``closing_at``."""
    if closing_at is None:
        return F.lit(True)
    return constants.micros("visit_end") >= constants.micros_constant(closing_at - gap_micros)


def open_and_settling(watermark: int | None, closing_at: int | None, gap: timedelta
                      ) -> tuple[Column, Column]:
    """Whether a visit is still open after the micro-batch, and whether it settles in it:
    its last event falls between the micro-batch's ``watermark`` and the next
    (``closing_at``), so the watermark passed it, and with it every time a unit of the visit
    counts at (its start, its first exposures), in this micro-batch."""
    return (_open_at(closing_at, gap // timedelta(microseconds=1)),
            _ends_in(() if closing_at is None else ((watermark, closing_at),)))


def _closing_or_settling(state: StateSnapshots, held: DataFrame, held_in: tuple[int, ...],
                         on_disk: Callable[[DataFrame], DataFrame], visits: DataFrame
                         ) -> DataFrame:
    """The untouched ``held`` visits that close or settle, whole, from the snapshots they
    are ``held_in`` (their generations), read once onto local disk; none (``visits``'
    columns) where no generation holds one."""
    if not held_in:
        return visits.limit(0)
    return on_disk(_whole(state, held, tuple(sorted(set(held_in)))).drop("generation"))


def events_of(events: DataFrame, visits: DataFrame) -> DataFrame:
    """The held ``events`` of the held ``visits``."""
    return events.join(visits.select(*HELD_VISIT), list(HELD_VISIT), "left_semi") \
        .drop("generation")


def _leave_open(state: StateSnapshots, batch_id: int, sessionized: DataFrame,
                carried: DataFrame, still_open: Column, *, settling: Column,
                held_in: tuple[int, ...], limit: int, columns: tuple[str, ...]
                ) -> dict[str, Any]:
    """Write the visits still open: those ``sessionized`` in ``batch_id`` whole, the
    ``carried`` ones (held, untouched) as ``_carried`` keeps them. Return how many of them
    all close (``closing``), the generations the carried ones that close (``closing_in``)
    and those ``settling`` (``settling_in``) were held in, how many events the visits left
    open hold (``rows``), when the earliest of them started (``earliest``, epoch
    microseconds) and the snapshots their events are in (``generations``), observed while
    they are written.

    The open visits' events are ``held_in`` earlier snapshots (oldest first) and in
    ``batch_id``'s. Past ``limit`` snapshots, the events of the open visits held in the
    oldest are first copied into ``batch_id``'s, and they are kept whole in it, each visit
    then referring to it: a micro-batch copies what one snapshot holds at most, and the
    open visits are written once."""
    moved = held_in[:max(0, len(held_in) + 1 - limit)]
    generation = F.col("generation")
    # Where each carried visit was held before this snapshot (NULL: sessionized in it).
    held = F.col("held_in")
    sessionized = sessionized.withColumn("held_in", F.lit(None).cast("long"))
    if moved:
        moving = carried.where(still_open & generation.isin(*moved))
        state.write(batch_id, CARRIED, events_of(events_in(state, moved, columns), moving))
        sessionized = sessionized.unionByName(
            _whole(state, moving, moved).withColumn("held_in", generation)
            .withColumn("generation", constants.long_constant(batch_id)))
        carried = carried.where(~(still_open & generation.isin(*moved)))

    def held_where(condition: Column) -> Column:
        return F.array_sort(F.collect_set(F.when(condition, held)))

    kept = Observation()
    state.write(batch_id, OPEN, sessionized.unionByName(
        _carried(carried).withColumn("held_in", generation)).observe(
        kept,
        F.count_if(~still_open).alias("closing"),
        held_where(~still_open).alias("closing_in"),
        held_where(settling).alias("settling_in"),
        F.sum(F.when(still_open, F.col("events"))).alias("rows"),
        F.unix_micros(F.min(F.when(still_open, F.col("visit_start")))).alias("earliest"),
        F.array_sort(F.collect_set(F.when(still_open, generation))).alias("generations"),
    ).where(still_open))
    return dict(kept.get)


def _due(state: StateSnapshots, held_in: tuple[int, ...], due: Column, still_open: Column, *,
         touched: DataFrame, superseded: DataFrame | None,
         on_disk: Callable[[DataFrame], DataFrame]) -> tuple[DataFrame, dict[str, Any]]:
    """In the ``DELTAS`` layout, the untouched open visits that are ``due`` (closing or
    settling, by their end), whole, from the rows of the snapshots they are ``held_in``,
    read once onto local disk, and how many of them close (``visits``) and the events
    these hold (``events``), observed meanwhile. None where no snapshot holds one.

    The due rows go onto local disk first, so that only the rows superseded in their
    sessions are read into the join, broadcast (``current_of``)."""
    rows = _rows_of(state, held_in)
    if not held_in:
        return rows, {"visits": 0, "events": None}
    rows = on_disk(rows.where(due).join(touched, "session_id", "left_anti"))
    gone = Observation()
    return on_disk(current_of(rows, superseded, F.broadcast(rows.select("session_id"))).observe(
        gone, F.count_if(~still_open).alias("visits"),
        F.sum(F.when(~still_open, F.col("events"))).alias("events"))), gone.get


def _spans_of(state: StateSnapshots, batches: tuple[int, ...]) -> dict[int, Span]:
    """The ``Span`` of the open visits' rows each snapshot of ``batches`` wrote, read from
    them (for snapshots that did not record their spans)."""
    if not batches:
        return {}
    return {row["generation"]: (row["start"], row["first_end"], row["last_end"])
            for row in _rows_of(state, batches).groupBy("generation").agg(
                F.unix_micros(F.min("visit_start")).alias("start"),
                F.unix_micros(F.min("visit_end")).alias("first_end"),
                F.unix_micros(F.max("visit_end")).alias("last_end")).collect()}


def _due_windows(watermark: int | None, closing_at: int | None, gap_micros: int
                 ) -> tuple[tuple[int | None, int], ...]:
    """When a held visit ends if it is due in the micro-batch from ``watermark`` to
    ``closing_at``: as ``[since, before)`` (``since`` None: any time before), closing (its
    end + gap passed) or settling (its end passed). None before any watermark."""
    if closing_at is None:
        return ()
    return ((None if watermark is None else watermark - gap_micros, closing_at - gap_micros),
            (watermark, closing_at))


def _ends_in(windows: tuple[tuple[int | None, int], ...]) -> Column:
    """Whether a visit's end falls in one of ``windows`` (``_due_windows``)."""
    visit_end = constants.micros("visit_end")
    due = F.lit(False)
    for since, before in windows:
        ends = visit_end < constants.micros_constant(before)
        due = due | (ends if since is None
                     else ends & (visit_end >= constants.micros_constant(since)))
    return due


def _meets(span: Span, since: int | None, before: int) -> bool:
    """Whether a row of ``span`` may end at or after ``since`` (None: any time) and before
    ``before``."""
    return (since is None or span[2] >= since) and span[1] < before


def _untouched_facts(state: StateSnapshots, held: Held, *, watermark: int | None,
                     closing_at: int | None, gap: timedelta, still_open: Column
                     ) -> dict[str, Any]:
    """Of the held rows, from the spans of the snapshots that hold them (``held.spans``;
    read from those that did not record theirs): the snapshots with rows still open, with
    their spans (``spans``), those with rows that may close or settle
    in the micro-batch (``due_in``: ``_due`` reads their rows), and the earliest start of the
    rows still open (``earliest``, epoch microseconds; exact: the rows of a snapshot whose
    rows only partly stay open are read for it).

    The rows of a session sessionized again in the micro-batch count here too, though the
    visits it writes replace them: each one's events are in one of those visits, which
    starts no later and ends no earlier, so no figure moves for them but for keeping their
    snapshot a little longer, until its rows close."""
    gap_micros = gap // timedelta(microseconds=1)
    spans = {**_spans_of(state, tuple(g for g in held.generations if g not in held.spans)),
             **{g: span for g, span in held.spans.items() if g in held.generations}}
    open_from = None if closing_at is None else closing_at - gap_micros
    still = {g: span for g, span in spans.items() if open_from is None or span[2] >= open_from}
    windows = _due_windows(watermark, closing_at, gap_micros)
    due_in = tuple(sorted(g for g, span in spans.items()
                          if any(_meets(span, *window) for window in windows)))
    partly = tuple(sorted(g for g, span in still.items()
                          if open_from is not None and span[1] < open_from))
    starts = [span[0] for g, span in still.items() if g not in partly]
    if partly:
        starts.append(_rows_of(state, partly).where(still_open)
                      .agg(F.unix_micros(F.min("visit_start"))).first()[0])
    return {"earliest": min((t for t in starts if t is not None), default=None),
            "spans": still, "due_in": due_in}


def _leave_open_deltas(state: StateSnapshots, batch_id: int, sessionized: DataFrame,
                       rest: dict[str, Any], still_open: Column, *, touched: DataFrame,
                       touched_visits: DataFrame, rows_touched: int,
                       superseded: DataFrame | None, gone: dict[str, Any],
                       held_in: tuple[int, ...], held_rows: int, limit: int,
                       columns: tuple[str, ...], on_disk: Callable[[DataFrame], DataFrame]
                       ) -> dict[str, Any]:
    """In the ``DELTAS`` layout, write the open visits ``batch_id`` sessionized whole, and
    those it copies, and list the rows they supersede; the untouched ones stay where they
    are (``rest``: their ``_untouched_facts``). Return what ``_leave_open`` returns but the
    generations of the visits that close or settle.

    Past ``limit`` snapshots, the open visits of the oldest are copied into ``batch_id``'s
    (events and rows), as ``_leave_open`` does. The events held (``rows``) are those held
    before (``held_rows``) less those of the ``touched_visits`` (``rows_touched``) and of
    the untouched ones that close (``gone``: ``_due``'s figures), plus those of the visits
    sessionized that stay open; the earliest start and the generations are those of the
    held rows still open (``rest``), with the written ones, and so are the spans of the
    generations (``spans``)."""
    moved = held_in[:max(0, len(held_in) + 1 - limit)]
    written = sessionized.withColumn("copied", F.lit(False))
    replaced = touched_visits.select(
        "session_id", F.lit(None).cast("timestamp").alias("visit_start")).distinct()
    if moved:
        moving = on_disk(current(
            _rows_of(state, moved).where(still_open).join(touched, "session_id", "left_anti"),
            superseded))
        state.write(batch_id, CARRIED, events_of(events_in(state, moved, columns), moving))
        written = written.unionByName(moving.withColumn(
            "generation", constants.long_constant(batch_id)).withColumn("copied", F.lit(True)))
        replaced = replaced.unionByName(moving.select(*sessions.VISIT))
    kept = Observation()
    state.write(batch_id, OPEN, written.observe(
        kept,
        F.count_if(~still_open).alias("closing"),
        F.count_if(still_open).alias("left"),
        F.sum(F.when(still_open & ~F.col("copied"), F.col("events"))).alias("rows"),
        F.unix_micros(F.min(F.when(still_open, F.col("visit_start")))).alias("earliest"),
        F.unix_micros(F.min(F.when(still_open, F.col("visit_end")))).alias("first_end"),
        F.unix_micros(F.max(F.when(still_open, F.col("visit_end")))).alias("last_end"),
    ).where(still_open))
    state.write(batch_id, SUPERSEDED, replaced)
    written_facts = kept.get
    earliest = [t for t in (written_facts["earliest"], rest["earliest"]) if t is not None]
    spans = {g: span for g, span in rest["spans"].items() if g not in moved}
    if written_facts["left"]:
        spans[batch_id] = (written_facts["earliest"], written_facts["first_end"],
                           written_facts["last_end"])
    return {
        "closing": written_facts["closing"] + gone["visits"],
        "rows": held_rows - rows_touched - (gone["events"] or 0) + (written_facts["rows"] or 0),
        "earliest": min(earliest, default=None),
        "generations": sorted(spans),
        "spans": spans,
    }


class OpenVisits:
    """The open visits of a sessionize component in its ``state``: what each micro-batch
    reads of them and writes, its steps ``timed``."""

    def __init__(self, state: StateSnapshots, columns: tuple[str, ...], gap: timedelta,
                 limit: int, timed: Callable[[str, Any], Any]) -> None:
        self.state, self.columns, self.gap, self.limit = state, columns, gap, limit
        self._leave_open = timed("open snapshot", _leave_open)
        self._leave_open_deltas = timed("open snapshot", _leave_open_deltas)
        self._closing_or_settling = timed("untouched closing", _closing_or_settling)
        self._due = timed("untouched closing", _due)
        self._untouched_facts = timed("untouched facts", _untouched_facts)

    def held(self, previous: Snapshot | None) -> Held:
        """What ``previous`` left open."""
        visits, generations, superseded = _held(self.state, previous, self.gap)
        return Held(visits, generations, superseded,
                    (previous.held_rows or 0) if previous else 0,
                    previous is None or previous.form >= DELTAS,
                    dict(previous.spans or {}) if previous else {})

    def leave_open(self, batch_id: int, held: Held, visits: DataFrame, touched: DataFrame,
                   touched_visits: DataFrame, *, touched_in: HeldIn, watermark: int | None,
                   closing_at: int | None, still_open: Column, settling: Column,
                   on_disk: Callable[[DataFrame], DataFrame]
                   ) -> tuple[dict[str, Any], DataFrame]:
        """Write the open visits after ``batch_id``, which sessionized ``visits`` (the
        ``touched`` sessions, whose held visits were ``touched_visits``, held as
        ``touched_in`` says), as its snapshot's parts; return ``_leave_open``'s figures and
        the untouched visits that close or settle (watermarks ``watermark`` and the next,
        ``closing_at``; ``open_and_settling``'s ``still_open`` and ``settling``), whole, on
        local disk."""
        sessionized = visits.withColumn(
            "generation", constants.long_constant(batch_id)).select(*OPEN_VISITS.fieldNames())
        if held.deltas:
            due = _ends_in(_due_windows(watermark, closing_at,
                                        self.gap // timedelta(microseconds=1)))
            rest = self._untouched_facts(self.state, held, watermark=watermark,
                                         closing_at=closing_at, gap=self.gap,
                                         still_open=still_open)
            due_visits, gone = self._due(self.state, tuple(rest["due_in"]), due, still_open,
                                         touched=touched, superseded=held.superseded,
                                         on_disk=on_disk)
            kept = self._leave_open_deltas(
                self.state, batch_id, sessionized, rest, still_open, touched=touched,
                touched_visits=touched_visits, rows_touched=touched_in.events,
                superseded=held.superseded, gone=gone,
                held_in=held.generations, held_rows=held.rows, limit=self.limit,
                columns=self.columns, on_disk=on_disk)
            return kept, due_visits.drop("generation")
        untouched = held.visits.join(touched, "session_id", "left_anti")
        kept = self._leave_open(self.state, batch_id, sessionized, untouched, still_open,
                                settling=settling, held_in=held.generations, limit=1,
                                columns=self.columns)
        self.state.write(batch_id, SUPERSEDED, self.state.read(None, SUPERSEDED))
        return kept, self._closing_or_settling(
            self.state, untouched.where(~still_open | settling),
            (*kept["closing_in"], *kept["settling_in"]), on_disk, visits)
