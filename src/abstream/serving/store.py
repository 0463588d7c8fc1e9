"""Writing the serving view into the PostgreSQL serving store (``serving.store: postgres``).

Each write brings the store from the Delta versions it holds (``store_progress``) to the
tables' latest versions, in one transaction that also records what it covers:

1. read the versions the store holds, without a lock, and the tables' latest versions
   from their Delta logs (no Spark); equal: nothing to do (but for a replica's first write
   with a new epoch, which records it);
2. which windows changed: the span of ``window_start`` over the files that the gold
   versions in between appended (from their statistics), or every window when a version
   removed data (the batch layer replacing a range), the batch coverage or the catalog
   changed, the store holds another replica's tables, or nothing yet;
3. the serving view at exactly those versions (Delta time travel), those windows only;
4. one transaction: with a replica's fence, hold the lease row and stop when the epoch is
   no longer the lease's (``io.lease.check_fence``); lock ``store_progress``; if it still
   holds the versions of step 1, delete the store's rows of those windows, copy the view's
   in, record the new versions, the writer and what it covers; if another writer got there
   first, start again (or stop, when it wrote these versions or later).

A write that is killed part way leaves the transaction uncommitted: the store keeps the
versions of the last write, and the next write covers the same versions again. A write
that is replayed finds its versions recorded and changes nothing.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

import psycopg
from psycopg import sql
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from abstream import topology
from abstream.config import Config
from abstream.io.checkpoint_log import CheckpointReader
from abstream.io.deltalog import DeltaLogReader
from abstream.io.input_position import InputPosition, PositionReader
from abstream.io.lease import Fence, check_fence, next_order
from abstream.io.postgres import (
    PROGRESS,
    PUBLICATION,
    PUBLISHED,
    SERVING,
    WRITES,
    Store,
    StoreError,
)
from abstream.io.tables import COVERAGE_TABLE, DEFINITIONS_TABLE, METRICS_TABLE, ensure_table
from abstream.layout import Layout
from abstream.schemas import EXPERIMENT_RESULTS
from abstream.serving.store_schema import EPOCH, VIEW_TABLES, ensure_schema
from abstream.serving.view import definitions_query, serving_query
from abstream.stages.definition_gold import served
from abstream.times import from_micros
from abstream.topology import writer_of

log = logging.getLogger(__name__)

GOLD = ("experiment_metrics", "definition_metrics")
COVERAGE = "batch_coverage"
#: Writes tried in a row when other writers keep getting there first.
ATTEMPTS = 5
#: Delta keeps a timestamp's statistics to the millisecond.
_STATS_STEP = timedelta(milliseconds=1)


@dataclass(frozen=True)
class Mark:
    """What the store's tables equal: Delta versions by table (-1: no commit yet) of the
    replica's tables (``""``: a single deployment's) and the served definitions (name and
    fingerprint)."""

    versions: Mapping[str, int]
    catalog: str
    replica: str

    def covers(self, other: Mark) -> bool:
        """Whether this state is ``other`` or later."""
        return self.catalog == other.catalog and self.replica == other.replica and all(
            self.versions.get(name, -1) >= version for name, version in other.versions.items())


#: The windows a write replaces: ``[start, end)`` of ``window_start``; None: all of them.
Windows = tuple[datetime, datetime] | None


@dataclass(frozen=True)
class Written:
    """One write: the state it brought the store to, the windows it replaced (empty: none
    changed), the rows it wrote and how long it took."""

    mark: Mark
    windows: Windows | tuple[()]
    rows: int
    seconds: float
    covers: dict[str, Any]


@dataclass(frozen=True)
class Prepared:
    """A write computed but not committed: the store's state it was computed against
    (``held``, and the input position of that state's last write), the tables' state it
    brings the store to, the windows it replaces and their rows; ``position`` the input
    position to record (None: read when it commits)."""

    held: Mark
    published: InputPosition | None
    target: Mark
    windows: Windows | tuple[()]
    rows: Mapping[str, list[tuple[Any, ...]]]
    described: dict[str, Any]
    began: float
    position: InputPosition | None = None


class StoreWriter:
    """Writes the serving view of the tables under ``layout`` into the store, as
    ``writer`` (``speed``: ``abstream run``; ``batch``: ``abstream batch``)."""

    def __init__(self, spark: SparkSession, layout: Layout, config: Config, writer: str) -> None:
        self.spark, self.layout, self.writer = spark, layout, writer
        self.store = Store(config.serving.postgres)
        self.catalog = config.metrics.catalog
        self.paths = {"experiment_metrics": layout.experiment_metrics,
                      "definition_metrics": layout.definition_metrics,
                      COVERAGE: layout.batch_coverage}
        self.readers = {name: DeltaLogReader(path, stats_column="window_start")
                        for name, path in self.paths.items()}
        self.source = config.source
        self.bronze = DeltaLogReader(layout.events)
        self.replica = config.replica or ""
        self.positions = PositionReader(layout, config)
        self._tables_ready = self._schema_ready = False
        #: Whether it has computed the serving view (its JVM has compiled the view's code).
        self.view_computed = False

    def write(self, covers: Mapping[str, Any] | None = None, fence: Fence | None = None,
              prepared: Prepared | None = None) -> Written | None:
        """Bring the store up to the Delta tables' latest versions (or to ``prepared``'s);
        None when it was (or ``prepared`` is stale). With ``fence`` (a replica's), only
        while its epoch is the lease's (``Fenced`` otherwise), and every row written
        carries its epoch."""
        with self._store_errors():
            return self._write(covers, fence, prepared)

    @contextmanager
    def _store_errors(self) -> Iterator[None]:
        """A store error makes the next call check the store's schema again (the store may
        have been restored or recreated meanwhile)."""
        try:
            yield
        except StoreError:
            self._schema_ready = False
            raise

    def prepare(self) -> Prepared | None:
        """A standby's next write, computed before it holds the lease (while the leader's
        lease runs out), to commit at once when it is granted (``write(fence=, prepared=)``). None
        when there is nothing to write, or this replica's input is behind the position of
        the store's last write (it could not take the lease on it)."""
        position = self.positions.read()
        with self._store_errors():
            prepared = self._prepare(None, None)
        if prepared is None or not position.at_or_past(prepared.published):
            return None
        log.info("serving store %s: a write for versions %s prepared in %.1f s",
                 self.store.where, dict(prepared.target.versions),
                 time.monotonic() - prepared.began)
        return replace(prepared, position=position, began=time.monotonic())

    def warm_up(self) -> None:
        """Compute the serving view of the tables' latest versions, every window, and
        drop it."""
        began = time.monotonic()
        self._view_rows(self._latest(), None)
        log.info("serving store %s: the serving view computed ahead of a failover in %.1f s",
                 self.store.where, time.monotonic() - began)

    def _write(self, covers: Mapping[str, Any] | None, fence: Fence | None,
               prepared: Prepared | None) -> Written | None:
        if prepared is not None:
            return self._finish(prepared, fence)
        for _ in range(ATTEMPTS):
            prepared = self._prepare(covers, fence)
            if prepared is None:
                return None
            written = self._finish(prepared, fence)
            if written is not None:
                return written
        log.info("serving store %s: other writers kept writing; this write waits for the "
                 "next round", self.store.where)
        return None

    def _prepare(self, covers: Mapping[str, Any] | None, fence: Fence | None
                 ) -> Prepared | None:
        """The write from what the store holds now to the tables' latest versions; None
        when it holds them (and, with ``fence``, was written with its epoch)."""
        began = time.monotonic()
        held, held_epoch, published = self._held()
        self._let_go(held)
        target = self._latest()
        if held.covers(target) and (fence is None or fence.epoch == held_epoch):
            return None
        windows = self.changed_windows(held, target)
        rows = self._view_rows(target, windows) if windows != () else {}
        batches = self._micro_batches(held, target)
        described = {**({"micro_batches": batches} if batches else {}),
                     **self._input_offsets(batches), **(covers or {})}
        return Prepared(held, published, target, windows, rows, described, began)

    def _finish(self, prepared: Prepared, fence: Fence | None) -> Written | None:
        count = self._commit(prepared, fence=fence)
        if count is None:
            return None
        written = Written(prepared.target, prepared.windows, count,
                          time.monotonic() - prepared.began, prepared.described)
        log.info("serving store %s: wrote %d rows (%s) for versions %s in %.1f s",
                 self.store.where, written.rows, _shown(written.windows),
                 dict(written.mark.versions), written.seconds)
        return written

    def _held(self) -> tuple[Mark, int | None, InputPosition | None]:
        """What the store holds, the epoch that wrote it and the input position of its
        last write."""
        with self.store.connect() as connection:
            if not self._schema_ready:
                ensure_schema(connection, self.store)
                self._schema_ready = True
            row = connection.execute(
                sql.SQL("SELECT versions, catalog, coalesce(replica, ''), epoch, position "
                        "FROM {} WHERE store = %s").format(self.store.table(PROGRESS)),
                (SERVING,)).fetchone()
        return Mark(*row[:3]), row[3], InputPosition.from_json(row[4])

    def _let_go(self, held: Mark) -> None:
        """Let each table's reader forget the commits the store's tables already hold (those
        a checkpoint covers): a write reads the commits after ``held`` only, and a writer
        that runs for days would otherwise hold every commit it has read. A store holding
        another replica's tables says nothing of this one's."""
        if held.replica != self.replica:
            return
        for name, version in held.versions.items():
            if name in self.readers:
                self.readers[name].forget_before(version + 1)

    def _latest(self) -> Mark:
        if not self._tables_ready:
            for spec in (METRICS_TABLE, DEFINITIONS_TABLE, COVERAGE_TABLE):
                ensure_table(self.spark, spec, self.layout)
            self._tables_ready = True
        versions = {}
        for name, reader in self.readers.items():
            reader.refresh()
            versions[name] = -1 if reader.latest_version is None else reader.latest_version
        catalog = ",".join(f"{d.name}={d.fingerprint}" for d in served(self.catalog))
        return Mark(versions, catalog, self.replica)

    def changed_windows(self, held: Mark, target: Mark) -> Windows | tuple[()]:
        """The windows whose rows can differ between the two states: ``()`` none, None all
        (also when the store holds another replica's tables)."""
        if held.catalog != target.catalog or held.replica != target.replica \
                or not held.versions \
                or held.versions.get(COVERAGE) != target.versions[COVERAGE]:
            return None
        spans: list[tuple[int, int]] = []
        for name in GOLD:
            reader, since = self.readers[name], held.versions.get(name, -1)
            for number in range(since + 1, target.versions[name] + 1):
                version = reader.versions.get(number)
                if version is None or version.data_removed:
                    return None
                if version.is_data_change:
                    if version.added_span is None:
                        return None
                    spans.append(version.added_span)
        if not spans:
            return ()
        return (from_micros(min(s[0] for s in spans) * 1000),
                from_micros(max(s[1] for s in spans) * 1000) + _STATS_STEP)

    def _view_rows(self, target: Mark, windows: Windows) -> dict[str, list[tuple[Any, ...]]]:
        self.spark.sparkContext.setJobDescription("serving store: the serving view")
        pinned = {self.paths[name]: version for name, version in target.versions.items()}
        views = {"experiment_metrics": self.spark.sql(serving_query(self.layout, pinned)),
                 "definition_metrics": self.spark.sql(
                     definitions_query(self.layout, self.catalog, pinned))}
        rows = {name: _rows(view, windows, list(VIEW_TABLES[name][0].fieldNames()))
                for name, view in views.items()}
        self.view_computed = True
        return rows

    def _micro_batches(self, held: Mark, target: Mark) -> dict[str, int]:
        """The streaming writers' micro-batches that the gold versions in between
        committed, the newest per writer."""
        batches: dict[str, int] = {}
        for name in GOLD:
            reader = self.readers[name]
            for number in range(held.versions.get(name, -1) + 1, target.versions[name] + 1):
                version = reader.versions.get(number)
                if version is not None and version.micro_batch is not None:
                    app, batch = version.micro_batch
                    batches[app] = max(batches.get(app, -1), batch)
        return batches

    def _input_offsets(self, batches: Mapping[str, int]) -> dict[str, Any]:
        """The offsets of the pipeline's input (Kafka's topic partitions, or the landing
        folder's file log) that the newest covered gold was computed through: the gold
        writer's micro-batch read bronze up to a version, whose commit names the bronze
        writer's micro-batch, whose planned offsets these are. Empty when a link is gone
        (an old checkpoint entry, a bronze commit without a marker)."""
        gold_writer = writer_of(topology.EXPERIMENT_METRICS, self.source).name
        bronze_writer = writer_of(topology.EVENTS, self.source).name
        batch = next((b for w, b in batches.items() if w.startswith(f"abstream-{gold_writer}-")),
                     None)
        read = None if batch is None else CheckpointReader(
            self.layout.checkpoint(gold_writer)).planned(batch)
        bronze = next((o for o in read or () if o and "reservoirVersion" in o), None)
        if bronze is None:
            return {}
        through = int(bronze["reservoirVersion"]) - (int(bronze.get("index", -1)) < 0)
        self.bronze.refresh()
        marked = next(((n, v.micro_batch) for n in range(through, -1, -1)
                       if (v := self.bronze.versions.get(n)) is not None
                       and v.micro_batch is not None
                       and v.micro_batch[0].startswith(f"abstream-{bronze_writer}-")), None)
        if marked is None:
            return {}
        # Later writes look from a later gold micro-batch, so from this marker on.
        version, marker = marked
        self.bronze.forget_before(version)
        offsets = CheckpointReader(self.layout.checkpoint(bronze_writer)).planned(marker[1])
        if offsets is None:
            return {}
        return {"input": {"component": bronze_writer, "micro_batch": marker[1],
                          "bronze_version": through, "offsets": list(offsets)}}

    def _commit(self, prepared: Prepared, *, fence: Fence | None = None) -> int | None:
        """Write in one transaction; the rows written, or None when another writer changed
        the store since ``prepared.held`` was read (and this write is stale, or must be
        computed again). ``Fenced`` when ``fence`` is no longer the lease's."""
        store = self.store
        held, target, windows, rows = (prepared.held, prepared.target, prepared.windows,
                                       prepared.rows)
        position = prepared.position or self.positions.read()
        epoch = None if fence is None else fence.epoch
        with store.connect() as connection, connection.transaction():
            staged = {name: _stage(connection, store.table(name),
                                   [*VIEW_TABLES[name][0].fieldNames(), EPOCH],
                                   [(*row, epoch) for row in table_rows])
                      for name, table_rows in rows.items()}
            if fence is not None:
                check_fence(connection, store, fence)
            locked = connection.execute(
                sql.SQL("SELECT versions, catalog, coalesce(replica, '') FROM {} "
                        "WHERE store = %s FOR UPDATE").format(store.table(PROGRESS)),
                (SERVING,)).fetchone()
            if Mark(*locked) != held:
                return None
            count = 0
            for name, stage in staged.items():
                _delete(connection, store.table(name), windows)
                count += stage.move(connection)
            start, end = windows if windows else (None, None)
            connection.execute(
                sql.SQL("UPDATE {} SET versions = %s, catalog = %s, replica = %s, epoch = %s, "
                        "position = %s, writer = %s, covers = %s, written_at = now() "
                        "WHERE store = %s").format(store.table(PROGRESS)),
                (_json(target.versions), target.catalog, target.replica or None, epoch,
                 _json(position.to_json()), self.writer, _json(prepared.described), SERVING))
            connection.execute(
                sql.SQL("INSERT INTO {} (seq, writer, replica, epoch, versions_before, "
                        "versions, covers, windows_from, windows_until, rows_written) "
                        "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)").format(
                    store.table(WRITES)),
                (next_order(connection, store), self.writer, target.replica or None, epoch,
                 _json(held.versions), _json(target.versions), _json(prepared.described),
                 start, end,
                 count))
            return count


def _rows(view: DataFrame, windows: Windows, columns: list[str]) -> list[tuple[Any, ...]]:
    if windows is not None:
        start, end = windows
        view = view.where((F.col("window_start") >= F.lit(start))
                          & (F.col("window_start") < F.lit(end)))
    table = view.select(*columns).toArrow()
    return list(zip(*(table.column(c).to_pylist() for c in columns), strict=True)) \
        if table.num_rows else []


def _delete(connection: psycopg.Connection, table: sql.Composed, windows: Windows) -> None:
    if windows is None:
        connection.execute(sql.SQL("DELETE FROM {}").format(table))
    else:
        connection.execute(sql.SQL("DELETE FROM {} WHERE window_start >= %s "
                                   "AND window_start < %s").format(table), windows)


@dataclass(frozen=True)
class _Stage:
    """Rows copied into a temporary table of the transaction, to move into ``table``."""

    temporary: sql.Identifier
    table: sql.Composed
    columns: sql.Composed

    def move(self, connection: psycopg.Connection) -> int:
        """Insert them into the table; how many."""
        return connection.execute(sql.SQL("INSERT INTO {} ({}) SELECT {} FROM {}").format(
            self.table, self.columns, self.columns, self.temporary)).rowcount


def _stage(connection: psycopg.Connection, table: sql.Composed, columns: list[str],
           rows: list[tuple[Any, ...]]) -> _Stage:
    """Copy ``rows`` into a temporary table shaped like ``table``, dropped at commit: the
    client's data is sent before the transaction takes its locks, so a writer paused in
    the middle of sending it holds nothing another writer waits for (a COPY waiting for its
    client is not ended by ``statement_timeout``)."""
    temporary = sql.Identifier(f"staged_{uuid.uuid4().hex[:12]}")
    connection.execute(sql.SQL("CREATE TEMPORARY TABLE {} (LIKE {}) ON COMMIT DROP").format(
        temporary, table))
    names = sql.SQL(", ").join(map(sql.Identifier, columns))
    with connection.cursor().copy(sql.SQL("COPY {} ({}) FROM STDIN").format(
            temporary, names)) as copy:
        for row in rows:
            copy.write_row(row)
    return _Stage(temporary, table, names)


def _json(value: Mapping[str, Any]) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _shown(windows: Windows | tuple[()]) -> str:
    if windows is None:
        return "every window"
    if windows == ():
        return "no window changed"
    return f"windows from {windows[0]:%Y-%m-%d %H:%M} to {windows[1]:%Y-%m-%d %H:%M}"


def publish_results(store: Store, rows: list[dict[str, Any]], published_at: datetime,
                    fence: Fence | None = None) -> int:
    """Replace the store's published results with ``rows`` (``report.publish.result_rows``)
    and count its publication's version up, in one transaction; the new version. With
    ``fence``, only while its epoch is the lease's (``Fenced`` otherwise)."""
    columns = EXPERIMENT_RESULTS.fieldNames()
    epoch = None if fence is None else fence.epoch
    with store.connect() as connection:
        ensure_schema(connection, store)
        with connection.transaction():
            stage = _stage(connection, store.table(PUBLISHED), [*columns, EPOCH],
                           [(*(row.get(c) for c in columns), epoch) for row in rows])
            if fence is not None:
                check_fence(connection, store, fence)
            connection.execute(sql.SQL("SELECT version FROM {} WHERE store = %s FOR UPDATE")
                               .format(store.table(PUBLICATION)), (SERVING,))
            connection.execute(sql.SQL("DELETE FROM {}").format(store.table(PUBLISHED)))
            stage.move(connection)
            version = connection.execute(
                sql.SQL("UPDATE {} SET version = version + 1, published_at = %s "
                        "WHERE store = %s RETURNING version").format(store.table(PUBLICATION)),
                (published_at, SERVING)).fetchone()[0]
    log.info("published %d result rows to the serving store %s (version %d)", len(rows),
             store.where, version)
    return int(version)
