"""VACUUM with a given retention, and the files of a table as they are stored."""

from __future__ import annotations

import posixpath
from dataclasses import asdict, dataclass
from typing import Any

from delta.tables import DeltaTable
from pyspark.sql import SparkSession

from abstream.io.deltalog import DataFile, DeltaLogReader
from abstream.io.storage import Storage
from abstream.rendering import size


@dataclass(frozen=True)
class Files:
    files: int
    bytes: int

    @classmethod
    def of(cls, files: list[DataFile]) -> Files:
        return cls(len(files), sum(f.size for f in files))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def __str__(self) -> str:
        return f"{self.files:,} files ({size(self.bytes)})"


def snapshot(location: str) -> list[DataFile]:
    """The data files of the table's current snapshot, from its log."""
    reader = DeltaLogReader(location)
    reader.refresh()
    return reader.snapshot_files(reader.latest_version) \
        if reader.latest_version is not None else []


def stored_files(location: str) -> Files:
    """The data files in the table's folder: the snapshot's and the removed ones not
    vacuumed yet (the log and hidden files aside)."""
    storage = Storage(location)
    found = [e for e in storage.files_below(storage.root)
             if not any(part.startswith(("_", "."))
                        for part in posixpath.relpath(e.path, storage.root).split("/"))]
    return Files(len(found), sum(e.size for e in found))


def vacuum(spark: SparkSession, location: str, hours: int, dry_run: bool) -> Files:
    """The files VACUUM with this retention deletes (or would, on a dry run)."""
    listed = spark.sql(f"VACUUM delta.`{location}` RETAIN {hours} HOURS DRY RUN").collect()
    storage = Storage(location)
    table_uri = DeltaTable.forPath(spark, location).detail().first()["location"].rstrip("/")
    sizes = {}
    for row in listed:
        path = storage.path(row["path"].removeprefix(table_uri + "/"))
        if (entry := storage.entry(path)) is not None:
            sizes[path] = entry.size
    if not dry_run and sizes:
        spark.sql(f"VACUUM delta.`{location}` RETAIN {hours} HOURS").collect()
        sizes = {path: size for path, size in sizes.items() if storage.entry(path) is None}
    return Files(len(sizes), sum(sizes.values()))
