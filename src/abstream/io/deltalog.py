"""An incremental reader of a Delta table's transaction log, without Spark.

Only what lag and watermarks need is kept per version: when it was committed and the data
files it added (``add`` actions with ``dataChange = true``, in log order: the order Delta's
streaming source indexes them), with the minimum of one column from their statistics.
Versions without such files (OPTIMIZE, VACUUM, metadata changes) are not data. After the
first read, a refresh only probes for the next version files.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass

import pyarrow.parquet as pq

from abstream.io.storage import Storage
from abstream.times import epoch_from_iso

log = logging.getLogger(__name__)

_COMMIT = re.compile(r"^(\d{20})\.json$")
#: How many commits behind its slowest consumer a reader holds at most before it lets go
#: of those a checkpoint covers.
FORGET_AFTER = 1000
_CHECKPOINT = re.compile(r"^(\d{20})\.checkpoint(?:\.\d{10}\.\d{10})?\.parquet$")


@dataclass(frozen=True)
class DataFile:
    """A data file of the table; ``version`` is the commit that added it (None if unknown:
    added before the oldest commit file still in the log); ``stats_min_ms`` the minimum of
    the reader's ``stats_column`` in it, when its statistics have one."""

    path: str
    size: int
    modification_time_ms: int
    version: int | None
    stats_min_ms: int | None = None


FileAction = tuple[str, int, int, int | None]
"""(path, size, modification time, minimum of the ``stats_column`` in epoch ms) of a file an
``add`` action names."""


@dataclass(frozen=True)
class Version:
    version: int
    timestamp_ms: int
    #: Data files added (dataChange = true), in log order.
    added: tuple[FileAction, ...]
    #: Files added without changing data (OPTIMIZE and other rewrites).
    rewritten: tuple[FileAction, ...]
    removed: tuple[str, ...]
    #: Whether a removed file took data away (a DELETE, MERGE or overwrite, not OPTIMIZE).
    data_removed: bool = False
    #: The minimum and maximum of ``stats_column`` (epoch ms) over the data files added;
    #: None when one of them has no statistics for it.
    added_span: tuple[int, int] | None = None
    #: The streaming writer and micro-batch of the commit, from the marker in its
    #: ``userMetadata`` (``io.sinks.AppendOnce``), when it carries one.
    micro_batch: tuple[str, int] | None = None

    @property
    def is_data_change(self) -> bool:
        return bool(self.added)


def stats_min_ms(stats: str | None, column: str | None) -> int | None:
    """The minimum of the timestamp ``column`` (epoch ms) in an ``add`` action's statistics
    (JSON), None when they have none. Delta writes a timestamp's minimum truncated to the
    millisecond: never above the true minimum."""
    return _stats_ms(stats, column, "minValues")


def stats_max_ms(stats: str | None, column: str | None) -> int | None:
    """The maximum of the timestamp ``column`` (epoch ms) in an ``add`` action's statistics,
    to the millisecond, None when they have none."""
    return _stats_ms(stats, column, "maxValues")


def _stats_ms(stats: str | None, column: str | None, kind: str) -> int | None:
    if column is None or not stats:
        return None
    value = json.loads(stats).get(kind, {}).get(column)
    if not isinstance(value, str):
        return None
    try:
        return int(epoch_from_iso(value) * 1000)
    except ValueError:
        return None


def _micro_batch(metadata: str | None) -> tuple[str, int] | None:
    """(writer, micro-batch) of a commit's ``userMetadata`` marker, None without one."""
    try:
        marker = json.loads(metadata) if metadata else None
    except ValueError:
        return None
    if isinstance(marker, dict) and isinstance(marker.get("writer"), str) \
            and isinstance(marker.get("batch"), int):
        return marker["writer"], marker["batch"]
    return None


def commit_file(log_dir: str, version: int) -> str:
    """The path of a version's commit file in the log folder ``log_dir``."""
    return f"{log_dir}/{version:020d}.json"


class CommitFiles:
    """A table's versions from its log's file names alone, without reading a commit."""

    def __init__(self, location: str) -> None:
        self.storage = Storage(location)
        self.log_dir = self.storage.path("_delta_log")

    def latest(self) -> int | None:
        """The newest version (a listing of the log), None before the first commit."""
        return max((int(m.group(1)) for e in self.storage.list(self.log_dir)
                    if (m := _COMMIT.match(e.name))), default=None)

    def has(self, version: int) -> bool:
        """Whether ``version`` is committed (one file's status)."""
        return self.storage.entry(commit_file(self.log_dir, version)) is not None


class DeltaLogReader:
    """Follows one table's ``_delta_log``; call ``refresh()`` before reading state.

    ``stats_column`` names a timestamp column whose per-file minimum (from Delta's file
    statistics) is kept with each data file. ``since`` skips the commits before that version.
    """

    def __init__(self, location: str, stats_column: str | None = None, since: int = 0) -> None:
        self.location = location
        self.stats_column = stats_column
        self.since = since
        self.storage = Storage(location)
        self.log_dir = self.storage.path("_delta_log")
        self.versions: dict[int, Version] = {}
        self.table_id: str | None = None
        self.latest_version: int | None = None
        self.latest_data_version: int | None = None
        self.earliest_version: int | None = None
        self._snapshots: dict[int, list[DataFile]] = {}

    @property
    def exists(self) -> bool:
        return self.latest_version is not None

    def refresh(self) -> None:
        """Read the commits added since the last call (all of them the first time)."""
        if self.latest_version is None:
            self._read_from_listing()
            return
        version = self.latest_version + 1
        while (entry := self.storage.entry(self._commit_path(version))) is not None:
            self._read_commit(version, entry.mtime_ms)
            version += 1

    def _commit_path(self, version: int) -> str:
        return commit_file(self.log_dir, version)

    def _read_from_listing(self) -> None:
        commits = sorted((int(m.group(1)), e.mtime_ms)
                         for e in self.storage.list(self.log_dir)
                         if (m := _COMMIT.match(e.name)) and int(m.group(1)) >= self.since)
        for version, mtime_ms in commits:
            self._read_commit(version, mtime_ms)

    def _read_commit(self, version: int, mtime_ms: int) -> None:
        timestamp_ms = mtime_ms
        added: list[FileAction] = []
        rewritten: list[FileAction] = []
        removed: list[str] = []
        maxima: list[int | None] = []
        data_removed = False
        micro_batch: tuple[str, int] | None = None
        for line in self.storage.read_text(self._commit_path(version)).splitlines():
            if not line.strip():
                continue
            action = json.loads(line)
            if "add" in action:
                add = action["add"]
                file = (add["path"], int(add.get("size", 0)), int(add.get("modificationTime", 0)),
                        stats_min_ms(add.get("stats"), self.stats_column))
                if add.get("dataChange", True):
                    added.append(file)
                    maxima.append(stats_max_ms(add.get("stats"), self.stats_column))
                else:
                    rewritten.append(file)
            elif "remove" in action:
                removed.append(action["remove"]["path"])
                data_removed |= bool(action["remove"].get("dataChange", True))
            elif "metaData" in action:
                self.table_id = action["metaData"].get("id", self.table_id)
            elif "commitInfo" in action:
                ict = action["commitInfo"].get("inCommitTimestamp")
                if ict is not None:
                    timestamp_ms = int(ict)
                micro_batch = _micro_batch(action["commitInfo"].get("userMetadata"))
        minima = [file[3] for file in added]
        span = (min(minima), max(maxima)) if added and None not in minima + maxima else None
        self.versions[version] = Version(version, timestamp_ms, tuple(added), tuple(rewritten),
                                         tuple(removed), data_removed, span, micro_batch)
        self.latest_version = version
        if added:
            self.latest_data_version = version
        if self.earliest_version is None:
            self.earliest_version = version

    def data_versions_after(self, version: int) -> list[Version]:
        """Versions later than ``version`` that added data, oldest first."""
        if self.latest_version is None:
            return []
        return [v for n in range(version + 1, self.latest_version + 1)
                if (v := self.versions.get(n)) is not None and v.is_data_change]

    def snapshot_files(self, version: int) -> list[DataFile]:
        """The table's data files at ``version`` in the order Delta's streaming source reads an
        initial snapshot (modification time, then path)."""
        cached = self._snapshots.get(version)
        if cached is None:
            cached = sorted(self._replay(version),
                            key=lambda f: (f.modification_time_ms, f.path))
            self._snapshots = {version: cached}
        return cached

    def _replay(self, version: int) -> list[DataFile]:
        files: dict[str, DataFile] = {}
        start = self.earliest_version or 0
        if start > 0:
            files, start = self._from_checkpoint(version)
        for number in range(start, version + 1):
            commit = self.versions.get(number)
            if commit is None:
                continue
            gone = [files.pop(path) for path in commit.removed if path in files]
            for path, size, mtime, minimum in commit.added:
                files[path] = DataFile(path, size, mtime, number, minimum)
            # A rewritten file holds records of the files it replaced: the oldest of them
            # is at most as old as the oldest replaced file.
            known = [f.version for f in gone if f.version is not None]
            origin = min(known) if known else (None if gone else number)
            for path, size, mtime, minimum in commit.rewritten:
                files[path] = DataFile(path, size, mtime, origin, minimum)
        return list(files.values())

    def _checkpoints(self, version: int) -> list[int]:
        """The versions of the log's checkpoints at or before ``version``, oldest first."""
        return sorted({int(m.group(1)) for e in self.storage.list(self.log_dir)
                       if (m := _CHECKPOINT.match(e.name)) and int(m.group(1)) <= version})

    def forget_before(self, version: int) -> None:
        """Let go of the commits neither ``version`` nor any snapshot from it on needs:
        those up to the newest checkpoint before it, which rebuilds any later snapshot with
        the commits after it. A reader that follows a table for days holds the commits since
        its slowest consumer's position, not every commit it has read. The files of a
        snapshot rebuilt from a checkpoint have no known adding version."""
        if self.latest_version is None or version - (self.earliest_version or 0) < FORGET_AFTER:
            return
        checkpoints = self._checkpoints(version - 1)
        if not checkpoints:
            return
        newest = checkpoints[-1]
        self.versions = {n: v for n, v in self.versions.items() if n > newest}
        self._snapshots = {n: f for n, f in self._snapshots.items() if n > newest}
        self.earliest_version = newest + 1
        log.debug("%s: commits up to version %d let go", self.location, newest)

    def _from_checkpoint(self, version: int) -> tuple[dict[str, DataFile], int]:
        """Files of the newest checkpoint at or before ``version`` (their adding versions are
        unknown), and the first version to replay after it."""
        checkpoints = self._checkpoints(version)
        if not checkpoints:
            log.warning("%s: commits before version %d are gone and no checkpoint covers them",
                        self.location, self.earliest_version)
            return {}, self.earliest_version or 0
        number = checkpoints[-1]
        files: dict[str, DataFile] = {}
        for entry in self.storage.list(self.log_dir):
            match = _CHECKPOINT.match(entry.name)
            if not match or int(match.group(1)) != number:
                continue
            table = pq.read_table(entry.path, columns=["add"],
                                  filesystem=self.storage.fs).column("add").to_pylist()
            for add in table:
                if add is not None:
                    files[add["path"]] = DataFile(add["path"], int(add.get("size") or 0),
                                                  int(add.get("modificationTime") or 0), None,
                                                  stats_min_ms(add.get("stats"), self.stats_column))
        return files, number + 1
