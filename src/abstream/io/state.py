"""State a streaming component carries from one micro-batch to the next by itself.

Each micro-batch writes a snapshot: a folder ``batch=N`` with one Parquet folder per part
of the state, then, once the data is complete, a small JSON file in it with what else the
next micro-batch needs (the latest event time seen so far, what the watermark derives
from, and how many rows the snapshot holds). Micro-batch N reads the newest complete
snapshot of an earlier batch, so a replayed micro-batch reads what it read the first time
and writes the same snapshot again: the state is exactly-once like the tables. The two
newest snapshots are kept.
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from abstream.io.hadoop import HadoopFiles

_NAME = re.compile(r"^batch=(\d+)$")
_DONE = "_abstream_state.json"


@dataclass(frozen=True)
class Snapshot:
    """The state after micro-batch ``batch``; ``seen_until`` is the latest event time
    (epoch microseconds) the component has seen, None before any event; ``held_rows`` the
    rows it carries on to the next micro-batch (None where a snapshot did not record it)."""

    batch: int
    seen_until: int | None
    held_rows: int | None = None


class StateSnapshots:
    """The snapshots of one component's state under ``location`` (any Hadoop file system),
    each with the parts named in ``schemas``."""

    def __init__(self, spark: SparkSession, location: str,
                 schemas: Mapping[str, StructType]) -> None:
        self.spark, self.location, self.schemas = spark, location.rstrip("/"), schemas
        self._files = HadoopFiles(spark, self.location)

    def _batches(self) -> list[tuple[int, str]]:
        found = []
        for name in self._files.names(self.location):
            match = _NAME.match(name)
            if match:
                found.append((int(match.group(1)), posixpath.join(self.location, name)))
        return sorted(found)

    def _complete(self, batch: int, path: str) -> Snapshot | None:
        done = posixpath.join(path, _DONE)
        if not self._files.exists(done):
            return None
        info = json.loads(self._files.read_text(done))
        return Snapshot(batch, info.get("seen_until"), info.get("held_rows"))

    def before(self, batch_id: int) -> Snapshot | None:
        """The newest complete snapshot written by a micro-batch before ``batch_id``."""
        for batch, path in reversed(self._batches()):
            if batch < batch_id and (snapshot := self._complete(batch, path)) is not None:
                return snapshot
        return None

    def _folder(self, batch_id: int) -> str:
        return posixpath.join(self.location, f"batch={batch_id}")

    def read(self, snapshot: Snapshot | None, part: str) -> DataFrame:
        """The rows of ``part`` in ``snapshot`` (none for None, or for a snapshot written
        before the part existed)."""
        if snapshot is None or not self._files.exists(
                posixpath.join(self._folder(snapshot.batch), part)):
            return self.spark.createDataFrame([], self.schemas[part])
        return self.read_written(snapshot.batch, part)

    def read_written(self, batch_id: int, part: str) -> DataFrame:
        """The rows of ``part`` written for ``batch_id``, complete or not."""
        return self.spark.read.schema(self.schemas[part]).parquet(
            posixpath.join(self._folder(batch_id), part))

    def write(self, batch_id: int, part: str, rows: DataFrame) -> None:
        """Write ``part`` of the state after ``batch_id`` (again, when the batch is
        replayed); the snapshot is complete once ``complete`` has run."""
        rows.select(*self.schemas[part].fieldNames()).write.mode("overwrite") \
            .parquet(posixpath.join(self._folder(batch_id), part))

    def complete(self, batch_id: int, seen_until: int | None, held_rows: int) -> Snapshot:
        """Mark the snapshot complete and drop the snapshots before the previous one."""
        self._files.write_text(posixpath.join(self._folder(batch_id), _DONE),
                               json.dumps({"seen_until": seen_until, "held_rows": held_rows}))
        for batch, old in self._batches():
            if batch < batch_id - 1:
                self._files.delete(old)
        return Snapshot(batch_id, seen_until, held_rows)
