"""Component lag: the age of the oldest input a component has not processed yet.

For a component C reading a Delta table S::

    lag = now - commit time of the oldest data-changing version of S that C has not
          processed (committed in its checkpoint), or 0 when there is none

For a component reading a folder of files (Spark's file source) a file plays the part of a
version and its modification time that of the commit time. For a component reading a Kafka
topic (``kafka://TOPIC``), per partition::

    lag = now - broker timestamp of the record at the checkpoint's next offset, or 0 when
          the partition is read to its end

and the topic's lag is the largest of its partitions'. Everything is read from the
checkpoint and the table's log when asked, so the lag keeps growing from the wall clock
while a component is stopped, and survives restarts and scheduled (AvailableNow) runs.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import Any

from confluent_kafka import KafkaException

from abstream.config import KafkaSettings
from abstream.io.checkpoint_log import CheckpointReader, Committed, normalise_path
from abstream.io.deltalog import DeltaLogReader, Version
from abstream.io.kafka.topics import TopicReader
from abstream.io.storage import Storage
from abstream.layout import KAFKA_SCHEME
from abstream.times import iso_from_ms

log = logging.getLogger(__name__)

CAUGHT_UP = "caught_up"
BEHIND = "behind"
NEVER_RUN = "never_run"
SOURCE_MISSING = "source_missing"
ERROR = "error"


#: The index of a Delta source offset that points before a version's first file.
BASE_INDEX = -1


@dataclass(frozen=True)
class MonitoredSource:
    """One input of one component: the query's checkpoint and the table or folder it reads."""

    component: str
    checkpoint: str
    source: str
    slo_seconds: float = 900.0


@dataclass(frozen=True)
class PartitionLag:
    """One partition of a Kafka source."""

    partition: int
    next_offset: int
    end_offset: int
    offsets_behind: int
    lag_seconds: float


@dataclass(frozen=True)
class LagRow:
    """The lag of one component on one source, and what it is made of."""

    component: str
    source: str
    status: str
    lag_seconds: float
    last_processed_version: int | None
    latest_version: int | None
    oldest_unprocessed_version: int | None
    oldest_unprocessed_commit_ts: str | None
    unprocessed_versions: int
    unprocessed_bytes: int
    last_committed_batch: int | None
    last_commit_ts: str | None
    source_kind: str
    detail: str | None = None
    #: Kafka sources: records not read yet, in all partitions and per partition.
    offsets_behind: int | None = None
    partitions: tuple[PartitionLag, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class PendingFile:
    """A data file (or a file-source input file) not processed yet."""

    version: int | None
    timestamp_ms: int
    size: int
    #: The minimum of the table's stats column in the file (epoch ms), when known.
    stats_min_ms: int | None = None


class LagMonitor:
    """Computes lag rows; keeps its readers, so every call after the first is incremental."""

    def __init__(self, sources: Iterable[MonitoredSource],
                 clock: Callable[[], float] = time.time,
                 kafka: KafkaSettings | None = None) -> None:
        self.sources = list(sources)
        self.clock = clock
        self.kafka = kafka
        self._tables: dict[str, DeltaLogReader] = {}
        self._checkpoints: dict[str, CheckpointReader] = {}
        self._topics: TopicReader | None = None

    def table(self, location: str) -> DeltaLogReader:
        if location not in self._tables:
            self._tables[location] = DeltaLogReader(location)
        return self._tables[location]

    def watch_stats(self, location: str, column: str) -> None:
        """Keep the per-file minimum of ``column`` for this table's pending files."""
        self._tables[location] = DeltaLogReader(location, stats_column=column)

    def checkpoint(self, location: str) -> CheckpointReader:
        if location not in self._checkpoints:
            self._checkpoints[location] = CheckpointReader(location)
        return self._checkpoints[location]

    def refresh_tables(self, locations: Iterable[str]) -> list[DeltaLogReader]:
        """Bring these Delta tables' readers up to date, each once."""
        readers = [self.table(location) for location in dict.fromkeys(locations)]
        for reader in readers:
            reader.refresh()
        return readers

    def rows(self) -> list[LagRow]:
        kinds = {s.source: source_kind(s.source) for s in self.sources}
        self.refresh_tables(src for src, kind in kinds.items() if kind == "delta")
        now_ms = int(self.clock() * 1000)
        positions: dict[MonitoredSource, int | None] = {}
        rows = [self._row(s, kinds[s.source], now_ms, positions) for s in self.sources]
        self._let_go((src for src, kind in kinds.items() if kind == "delta"), positions)
        return rows

    def _let_go(self, locations: Iterable[str],
                positions: dict[MonitoredSource, int | None]) -> None:
        """Let each table's reader forget the commits before its slowest consumer's
        position, as ``rows`` found them (none while a consumer has none yet)."""
        for location in locations:
            found = [positions.get(s) for s in self.sources if s.source == location]
            known = [p for p in found if p is not None]
            if known and len(known) == len(found):
                self.table(location).forget_before(min(known))

    def _row(self, monitored: MonitoredSource, kind: str | None, now_ms: int,
             positions: dict[MonitoredSource, int | None]) -> LagRow:
        committed = None
        try:
            committed = self.checkpoint(monitored.checkpoint).committed()
            if kind is None:
                return _build(monitored, SOURCE_MISSING, kind="unknown", table=None, files=[],
                              committed=committed, now_ms=now_ms)
            if kind == "delta":
                table = self.table(monitored.source)
                positions[monitored] = committed_version(table, committed)
                return self._delta_row(monitored, committed, now_ms)
            if kind == "kafka":
                return self._kafka_row(monitored, committed, now_ms)
            return self._files_row(monitored, committed, now_ms)
        except (OSError, ValueError, KeyError, KafkaException) as exc:
            log.warning("lag of %s on %s: %s", monitored.component, monitored.source, exc)
            return _build(monitored, ERROR, kind=kind or "unknown", table=None, files=[],
                          committed=committed, now_ms=now_ms, detail=str(exc))

    def _delta_row(self, monitored: MonitoredSource, committed: Committed | None,
                   now_ms: int) -> LagRow:
        table = self.table(monitored.source)
        status, files = delta_state(table, committed)
        detail = f"the checkpoint reads no table with id {table.table_id}" \
            if status == ERROR else None
        return _build(monitored, status, kind="delta", table=table, files=files,
                      committed=committed, now_ms=now_ms, detail=detail)

    def pending_files(self, monitored: MonitoredSource) -> list[PendingFile]:
        """The unprocessed files of a Delta source (after ``rows()`` refreshed its reader)."""
        committed = self.checkpoint(monitored.checkpoint).committed()
        return delta_state(self.table(monitored.source), committed)[1]

    def topics(self) -> TopicReader:
        if self._topics is None:
            if self.kafka is None:
                raise ValueError("a kafka:// source needs the kafka settings")
            self._topics = TopicReader(self.kafka)
        return self._topics

    def _kafka_row(self, monitored: MonitoredSource, committed: Committed | None,
                   now_ms: int) -> LagRow:
        topic = monitored.source.removeprefix(KAFKA_SCHEME)
        offsets = next((o[topic] for o in (committed.offsets if committed else ())
                        if o is not None and isinstance(o.get(topic), dict)), None)
        next_offsets = {int(p): int(o) for p, o in (offsets or {}).items()}
        positions = self.topics().positions(topic, next_offsets)
        if positions is None:
            status, positions = SOURCE_MISSING, []
        else:
            status = NEVER_RUN if offsets is None else \
                BEHIND if any(p.behind for p in positions) else CAUGHT_UP
        partitions = tuple(PartitionLag(
            p.partition, p.next_offset, p.end_offset, p.behind,
            round(max(0.0, (now_ms - p.next_timestamp_ms) / 1000), 3)
            if p.next_timestamp_ms is not None else 0.0) for p in positions)
        oldest = min((p.next_timestamp_ms for p in positions
                      if p.next_timestamp_ms is not None), default=None)
        behind = sum(p.offsets_behind for p in partitions)
        return LagRow(
            component=monitored.component, source=monitored.source, status=status,
            lag_seconds=max((p.lag_seconds for p in partitions), default=0.0),
            last_processed_version=None, latest_version=None,
            oldest_unprocessed_version=None,
            oldest_unprocessed_commit_ts=iso_from_ms(oldest) if oldest is not None else None,
            unprocessed_versions=0, unprocessed_bytes=0,
            last_committed_batch=committed.batch_id if committed else None,
            last_commit_ts=iso_from_ms(committed.committed_ms) if committed else None,
            source_kind="kafka", detail=f"{behind:,} records in {len(partitions)} partitions "
            "not read", offsets_behind=behind, partitions=partitions)

    def close(self) -> None:
        if self._topics is not None:
            self._topics.close()
            self._topics = None

    def _files_row(self, monitored: MonitoredSource, committed: Committed | None,
                   now_ms: int) -> LagRow:
        storage = Storage(monitored.source)
        files = sorted((e for e in storage.list(storage.root)
                        if not e.is_dir and not e.name.startswith((".", "_"))),
                       key=lambda e: (e.mtime_ms, e.path))
        checkpoint = self.checkpoint(monitored.checkpoint)
        index = checkpoint.file_source_index(monitored.source) if committed else None
        processed: dict[str, tuple[int, int]] = {}
        if committed is not None and index is not None and index < len(committed.offsets):
            offset = committed.offsets[index] or {}
            if "logOffset" in offset:
                processed = checkpoint.processed_files(index, int(offset["logOffset"]))
        units = [PendingFile(None, e.mtime_ms, e.size) for e in files
                 if normalise_path(e.path) not in processed]
        status = NEVER_RUN if committed is None or index is None else \
            BEHIND if units else CAUGHT_UP
        return _build(monitored, status, kind="files", table=None, files=units,
                      committed=committed, now_ms=now_ms,
                      detail=f"{len(files)} files, {len(units)} not processed")


def source_kind(location: str) -> str | None:
    """'kafka' for ``kafka://TOPIC``, 'delta' for a Delta table, 'files' for a plain folder,
    None when neither exists."""
    if location.startswith(KAFKA_SCHEME):
        return "kafka"
    storage = Storage(location)
    if storage.entry(storage.path("_delta_log")) is not None:
        return "delta"
    return "files" if storage.entry(storage.root) is not None else None


def _offset(table: DeltaLogReader, committed: Committed | None) -> dict[str, Any] | None:
    """The committed end offset of a Delta source on ``table`` (None: none yet)."""
    if committed is None:
        return None
    return next((o for o in committed.offsets
                 if o is not None and o.get("reservoirId") == table.table_id), None)


def committed_version(table: DeltaLogReader, committed: Committed | None) -> int | None:
    """The table version of a Delta source's committed end offset (None: none yet)."""
    offset = _offset(table, committed)
    return None if offset is None else int(offset["reservoirVersion"])


def delta_state(table: DeltaLogReader, committed: Committed | None
                ) -> tuple[str, list[PendingFile]]:
    """Status and unprocessed files of a Delta source, given the last committed batch."""
    if not table.exists:
        return SOURCE_MISSING, []
    offset = _offset(table, committed)
    if committed is not None and offset is None and None not in committed.offsets:
        return ERROR, []
    if offset is None:  # never ran, or this source has produced no offset yet
        return NEVER_RUN, snapshot_pending(table, table.latest_version, BASE_INDEX)
    files = delta_pending(table, int(offset["reservoirVersion"]), int(offset["index"]),
                          bool(offset.get("isStartingVersion", False)))
    return (BEHIND if files else CAUGHT_UP), files


def delta_pending(table: DeltaLogReader, version: int, index: int,
                  initial_snapshot: bool) -> list[PendingFile]:
    """What a Delta source whose last committed end offset is (version, index,
    isStartingVersion) has not processed yet.

    The end offset is inclusive: (v, i) means every data file of v up to index i (in log
    order), and all earlier versions, are done. (v, -1) means nothing of v is: a batch that
    read a version to its end records the *next* version with index -1 — so the seed
    article's rule "versions above the end offset's version are unprocessed" misses a whole
    version. In an initial snapshot the index runs over the snapshot's files (sorted by
    modification time and path), each of which came from some earlier version.
    """
    if initial_snapshot:
        return snapshot_pending(table, version, index) + [
            f for v in table.data_versions_after(version) for f in _files(v)]
    files = []
    current = table.versions.get(version)
    if current is not None and index > BASE_INDEX:
        files = _files(current)[index + 1:]
    first_unread = version + 1 if index > BASE_INDEX else version
    files.extend(f for v in table.data_versions_after(first_unread - 1) for f in _files(v))
    return files


def _files(version: Version) -> list[PendingFile]:
    return [PendingFile(version.version, version.timestamp_ms, size, minimum)
            for _, size, _, minimum in version.added]


def snapshot_pending(table: DeltaLogReader, version: int | None,
                     index: int) -> list[PendingFile]:
    """The files of the snapshot at ``version`` after position ``index``, each at the commit
    time of the version that added it (files older than the log's first commit: at their own
    modification time)."""
    if version is None:
        return []
    pending = []
    for position, file in enumerate(table.snapshot_files(version)):
        if position <= index:
            continue
        if file.version is not None and file.version in table.versions:
            pending.append(PendingFile(file.version, table.versions[file.version].timestamp_ms,
                                       file.size, file.stats_min_ms))
        else:
            pending.append(PendingFile(None, file.modification_time_ms, file.size,
                                       file.stats_min_ms))
    return pending


def _build(monitored: MonitoredSource, status: str, *, kind: str,
           table: DeltaLogReader | None, files: list[PendingFile], committed: Committed | None,
           now_ms: int, detail: str | None = None) -> LagRow:
    oldest = min(files, key=lambda f: f.timestamp_ms) if files else None
    latest = table.latest_version if table is not None else None
    versions = {f.version for f in files if f.version is not None}
    unknown = sum(1 for f in files if f.version is None)
    last_processed = None
    if status in (CAUGHT_UP, BEHIND) and latest is not None and not unknown:
        last_processed = min(versions) - 1 if versions else latest
    return LagRow(
        component=monitored.component,
        source=monitored.source,
        status=status,
        lag_seconds=round(max(0.0, (now_ms - oldest.timestamp_ms) / 1000), 3) if oldest
        else 0.0,
        last_processed_version=last_processed,
        latest_version=latest,
        oldest_unprocessed_version=oldest.version if oldest else None,
        oldest_unprocessed_commit_ts=iso_from_ms(oldest.timestamp_ms) if oldest else None,
        unprocessed_versions=len(versions) + (unknown if kind == "files" else min(unknown, 1)),
        unprocessed_bytes=sum(f.size for f in files),
        last_committed_batch=committed.batch_id if committed else None,
        last_commit_ts=iso_from_ms(committed.committed_ms) if committed else None,
        source_kind=kind,
        detail=detail,
    )
