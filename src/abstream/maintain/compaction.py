"""Compaction of the small files of closed partitions with Delta's OPTIMIZE.

OPTIMIZE commits with ``dataChange = false``: streaming readers skip its commits and the lag
monitor does not count them as data. It never conflicts with a blind append, so the
streaming writers go on beside it; it can lose a race against a commit that removes files it
read (the batch layer replacing a range), and is then tried again, or the partition is left
for the next run; the batch layer's replacement, when it loses, is tried again likewise
(``io.sinks.replace_where``).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import asdict, dataclass
from datetime import date
from typing import Any
from urllib.parse import unquote

from delta.tables import DeltaTable
from pyspark.sql import SparkSession

from abstream.errors import AbstreamError, first_line
from abstream.io.deltalog import DataFile
from abstream.io.sinks import CONFLICTS

log = logging.getLogger(__name__)

#: Delta's setting of the size below which OPTIMIZE compacts a file, and its default.
MIN_FILE_SIZE_CONF = "spark.databricks.delta.optimize.minFileSize"
DEFAULT_MIN_FILE_SIZE = 1024 * 1024 * 1024
#: How Spark names the folder of a null partition value.
NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"


@dataclass(frozen=True)
class Partition:
    """A partition with small files to compact: its values and its small files."""

    values: tuple[tuple[str, str | None], ...]
    small_files: int
    small_bytes: int

    @property
    def label(self) -> str:
        return "/".join(f"{column}={value}" for column, value in self.values)

    @property
    def predicate(self) -> str:
        return " AND ".join(f"{column} IS NULL" if value is None else
                            f"{column} = '{value.replace(chr(39), chr(39) * 2)}'"
                            for column, value in self.values)

    def to_dict(self) -> dict[str, Any]:
        return {"partition": self.label, "small_files": self.small_files,
                "small_bytes": self.small_bytes}


@dataclass(frozen=True)
class Compaction:
    """What OPTIMIZE did to one partition (``skipped``: it lost every race)."""

    partition: str
    files_removed: int
    files_added: int
    bytes_removed: int
    bytes_added: int
    retries: int
    skipped: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def min_file_size(spark: SparkSession) -> int:
    return int(spark.conf.get(MIN_FILE_SIZE_CONF, None) or DEFAULT_MIN_FILE_SIZE)


def partition_values(path: str, columns: tuple[str, ...]) -> dict[str, str | None]:
    """A data file's partition values, from its folders (``event_date=2026-01-05/...``)."""
    found = dict(part.split("=", 1) for part in path.split("/")[:-1] if "=" in part)
    if set(columns) - found.keys():
        raise AbstreamError(f"data file {path} is not in a folder per partition value "
                            f"({', '.join(columns)}): this table cannot be compacted by "
                            "partition")
    return {c: None if found[c] == NULL_PARTITION else unquote(found[c]) for c in columns}


def candidates(files: list[DataFile], columns: tuple[str, ...], day_column: str | None,
               closed_before: date, small: int) -> list[Partition]:
    """The closed partitions (``day_column`` before ``closed_before``; every partition when
    the table has no day column) that hold two or more files smaller than ``small`` bytes:
    those OPTIMIZE would rewrite."""
    sizes: dict[tuple[tuple[str, str | None], ...], list[int]] = defaultdict(list)
    for file in files:
        values = partition_values(file.path, columns)
        if day_column is not None:
            day = values[day_column]
            if day is None or date.fromisoformat(day) >= closed_before:
                continue
        if file.size < small:
            sizes[tuple(values.items())].append(file.size)
    return [Partition(values, len(found), sum(found))
            for values, found in sorted(sizes.items(), key=lambda item: str(item[0]))
            if len(found) >= 2]


def compact(spark: SparkSession, location: str, partition: Partition,
            attempts: int) -> Compaction:
    """OPTIMIZE one partition; tried ``attempts`` times when a concurrent commit wins."""
    for attempt in range(1, attempts + 1):
        try:
            metrics = DeltaTable.forPath(spark, location).optimize() \
                .where(partition.predicate).executeCompaction().first()["metrics"]
        except CONFLICTS as exc:
            log.warning("compaction of %s in %s lost a race with a writer (%s), attempt %d "
                        "of %d", partition.label, location, first_line(exc), attempt, attempts)
            continue
        removed, added = metrics["filesRemoved"], metrics["filesAdded"]
        return Compaction(partition.label, metrics["numFilesRemoved"], metrics["numFilesAdded"],
                          removed["totalSize"] if removed else 0,
                          added["totalSize"] if added else 0, attempt - 1)
    log.warning("compaction of %s in %s skipped: it is left for the next run",
                partition.label, location)
    return Compaction(partition.label, 0, 0, 0, 0, attempts - 1, skipped=True)
