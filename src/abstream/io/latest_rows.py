"""A small Delta table's rows at its latest version, read without Spark from its log and
Parquet files (never files the log has removed), and read again only when the table has a
new version."""

from __future__ import annotations

from typing import Any

import pyarrow.parquet as pq

from abstream.io.deltalog import DeltaLogReader


class LatestRows:
    """The rows of the Delta table at ``location`` as of its latest version."""

    def __init__(self, location: str) -> None:
        self.reader = DeltaLogReader(location)
        self.version: int | None = None
        self._rows: list[dict[str, Any]] = []

    def rows(self) -> list[dict[str, Any]]:
        """The rows at the latest version (none before the table's first commit)."""
        self.reader.refresh()
        version = self.reader.latest_version
        if version is not None and version != self.version:
            storage = self.reader.storage
            rows: list[dict[str, Any]] = []
            for file in self.reader.snapshot_files(version):
                rows += pq.read_table(storage.path(file.path),
                                      filesystem=storage.fs).to_pylist()
            self.version, self._rows = version, rows
        return self._rows
