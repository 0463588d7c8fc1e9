"""State a streaming component carries from one micro-batch to the next by itself.

Each micro-batch writes a snapshot: a folder ``batch=N`` with one Parquet folder per part
of the state, then, once the data is complete, a small JSON file in it with what else the
next micro-batch needs (the latest event time seen so far, what the watermark derives
from, and how many rows the snapshot holds). Micro-batch N reads the newest complete
snapshot of an earlier batch, so a replayed micro-batch reads what it read the first time
and writes the same snapshot again: the state is exactly-once like the tables. A snapshot
may go on reading parts of earlier ones instead of copying them (``refers_to``). The two
newest snapshots are kept, and the earlier ones either of them refers to.

A complete snapshot's parts never change: which parts a snapshot has is listed once, when
it is first read, and not asked of the file system again for each read (a micro-batch may
read the parts of hundreds of snapshots, several times).
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from abstream.errors import AbstreamError
from abstream.io.hadoop import HadoopFiles

_NAME = re.compile(r"^batch=(\d+)$")
_DONE = "_abstream_state.json"
#: The column ``read_parts`` names the snapshot of each row by.
SNAPSHOT = "snapshot"


@dataclass(frozen=True)
class Snapshot:
    """The state after micro-batch ``batch``; ``seen_until`` is the latest event time
    (epoch microseconds) the component has seen, None before any event; ``held_rows`` the
    rows it carries on to the next micro-batch (None where a snapshot did not record it);
    ``refers_to`` the snapshots whose parts it reads (None where it did not record them);
    ``form`` the component's own number for how its parts are laid out (0 where a
    snapshot did not record one); ``watermark`` the event time (epoch microseconds) before
    which the component takes later input as late (None for none yet, or where a snapshot
    did not record one); ``read_until`` the latest event time read, where the component
    counts part of its input as not yet seen (None: as ``seen_until``); ``spans`` the
    component's own figures of each snapshot it refers to (whole numbers), kept so that the
    next micro-batch need not read them from the parts (None where it did not record
    them)."""

    batch: int
    seen_until: int | None
    held_rows: int | None = None
    refers_to: tuple[int, ...] | None = None
    form: int = 0
    watermark: int | None = None
    read_until: int | None = None
    spans: Mapping[int, tuple[int, ...]] | None = None


def _empty(spark: SparkSession, schema: StructType) -> DataFrame:
    """No rows, in ``schema``'s columns, planned in the JVM: an empty DataFrame made from a
    Python list is a Python RDD, and every job that reads it starts Python workers."""
    return spark.range(0).select(
        *(F.lit(None).cast(field.dataType).alias(field.name) for field in schema.fields))


class StateSnapshots:
    """The snapshots of one component's state under ``location`` (any Hadoop file system),
    each with the parts named in ``schemas``."""

    def __init__(self, spark: SparkSession, location: str,
                 schemas: Mapping[str, StructType]) -> None:
        self.spark, self.location, self.schemas = spark, location.rstrip("/"), schemas
        self._files = HadoopFiles(spark, self.location)
        #: The parts of each snapshot read so far, by batch.
        self._parts: dict[int, frozenset[str]] = {}

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
        refers_to = info.get("refers_to")
        spans = info.get("spans")
        return Snapshot(batch, info.get("seen_until"), info.get("held_rows"),
                        None if refers_to is None else tuple(refers_to), info.get("form", 0),
                        info.get("watermark"), info.get("read_until"),
                        None if spans is None else {int(batch): tuple(figures)
                                                    for batch, figures in spans.items()})

    def before(self, batch_id: int) -> Snapshot | None:
        """The newest complete snapshot written by a micro-batch before ``batch_id``."""
        for batch, path in reversed(self._batches()):
            if batch < batch_id and (snapshot := self._complete(batch, path)) is not None:
                return snapshot
        return None

    def _folder(self, batch_id: int) -> str:
        return posixpath.join(self.location, f"batch={batch_id}")

    def _parts_of(self, batch: int) -> frozenset[str]:
        """The parts the snapshot of ``batch`` has, listed once."""
        if batch not in self._parts:
            self._parts[batch] = frozenset(self._files.names(self._folder(batch)))
        return self._parts[batch]

    def read(self, snapshot: Snapshot | int | None, part: str) -> DataFrame:
        """The rows of ``part`` in ``snapshot`` (or in the snapshot of that batch): none for
        None, or where the snapshot has no such part."""
        batch = snapshot.batch if isinstance(snapshot, Snapshot) else snapshot
        if batch is None or part not in self._parts_of(batch):
            return _empty(self.spark, self.schemas[part])
        return self.read_written(batch, part)

    def read_parts(self, batches: Sequence[int], parts: Sequence[str]) -> DataFrame:
        """The rows of ``parts`` (of one schema) in the snapshots of ``batches``, read as
        one scan, each with the batch of its snapshot (``SNAPSHOT``). A snapshot need not
        have every part, but at least one."""
        paths = []
        for batch in batches:
            found = [posixpath.join(self._folder(batch), part) for part in parts
                     if part in self._parts_of(batch)]
            if not found:
                raise AbstreamError(f"the state of micro-batch {batch} is missing from "
                                    f"{self.location}: the checkpoint is damaged")
            paths += found
        schema = self.schemas[parts[0]]
        if not paths:
            return _empty(self.spark, schema).withColumn(SNAPSHOT, F.lit(None).cast("long"))
        return self.spark.read.schema(schema).parquet(*paths).withColumn(
            SNAPSHOT, F.regexp_extract("_metadata.file_path", r"/batch=(\d+)/", 1).cast("long"))

    def read_written(self, batch_id: int, part: str) -> DataFrame:
        """The rows of ``part`` written for ``batch_id``, complete or not."""
        return self.spark.read.schema(self.schemas[part]).parquet(
            posixpath.join(self._folder(batch_id), part))

    def write(self, batch_id: int, part: str, rows: DataFrame) -> None:
        """Write ``part`` of the state after ``batch_id`` (again, when the batch is
        replayed); the snapshot is complete once ``complete`` has run."""
        self._parts.pop(batch_id, None)
        rows.select(*self.schemas[part].fieldNames()).write.mode("overwrite") \
            .parquet(posixpath.join(self._folder(batch_id), part))

    def complete(self, batch_id: int, seen_until: int | None, held_rows: int,
                 refers_to: tuple[int, ...] = (), form: int = 0, *,
                 watermark: int | None = None, read_until: int | None = None,
                 spans: Mapping[int, tuple[int, ...]] | None = None) -> Snapshot:
        """Mark the snapshot complete, and drop the snapshots before the previous one that
        neither refers to."""
        previous = self.before(batch_id)
        self._files.write_text(posixpath.join(self._folder(batch_id), _DONE), json.dumps(
            {"seen_until": seen_until, "held_rows": held_rows, "refers_to": list(refers_to),
             "form": form, "watermark": watermark, "read_until": read_until,
             "spans": None if spans is None else {str(batch): list(figures)
                                                  for batch, figures in spans.items()}}))
        kept = {batch_id, *refers_to}
        if previous is not None:
            kept |= {previous.batch, *(previous.refers_to or ())}
        for batch, old in self._batches():
            if batch < batch_id and batch not in kept:
                self._parts.pop(batch, None)
                self._files.delete(old)
        return Snapshot(batch_id, seen_until, held_rows, tuple(refers_to), form, watermark,
                        read_until, spans)
