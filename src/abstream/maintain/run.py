"""``abstream maintain``: safe upkeep of the Delta tables beside the running pipeline.

Per table: compact the small files of its closed partitions (OPTIMIZE, no data change),
then VACUUM, unless a monitored reader still needs files VACUUM would take (see
``retention``). A dry run changes nothing and reports what would be done.

A day partition is closed once its day ended ``maintain.closed_after`` ago: bronze's by event
date, quarantine's by ingestion date, silver's by visit date and gold's by window date, each
within its layer. A closed day is compacted once, and again only if files arrive in it
later (a late event's increments). Compaction never conflicts with the speed layer's
appends, and retries when it loses a race against the batch layer's replacements.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from delta.tables import DeltaTable
from pyspark.sql import SparkSession

from abstream.config import Config
from abstream.io.tables import (
    DEFINITIONS_TABLE,
    EVENTS_TABLE,
    METRICS_TABLE,
    REJECTED_TABLE,
    SESSIONS_TABLE,
    TableSpec,
)
from abstream.lag.measure import MonitoredSource
from abstream.layout import Layout
from abstream.maintain.compaction import Compaction, Partition, candidates, compact, min_file_size
from abstream.maintain.retention import Retention, readers_of, retention_for
from abstream.maintain.vacuum import Files, snapshot, stored_files, vacuum
from abstream.monitor.targets import monitored_sources
from abstream.rendering import size

log = logging.getLogger(__name__)


#: The tables maintain looks after.
TABLES = (EVENTS_TABLE, REJECTED_TABLE, SESSIONS_TABLE, METRICS_TABLE, DEFINITIONS_TABLE)


@dataclass(frozen=True)
class TableReport:
    """What maintain did (or, on a dry run, would do) to one table."""

    table: str
    location: str
    dry_run: bool
    exists: bool
    live_before: Files | None = None
    stored_before: Files | None = None
    candidates: tuple[Partition, ...] = ()
    compacted: tuple[Compaction, ...] = ()
    retention: Retention | None = None
    vacuumed: Files | None = None
    live_after: Files | None = None
    stored_after: Files | None = None
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        def plain(value: Any) -> Any:
            return value.to_dict() if hasattr(value, "to_dict") else value
        return {"table": self.table, "location": self.location, "dry_run": self.dry_run,
                "exists": self.exists,
                **{name: plain(getattr(self, name)) for name in (
                    "live_before", "stored_before", "retention", "vacuumed", "live_after",
                    "stored_after")},
                "candidates": [c.to_dict() for c in self.candidates],
                "compacted": [c.to_dict() for c in self.compacted],
                "seconds": round(self.seconds, 3)}

    def text(self) -> str:
        if not self.exists or self.live_before is None or self.stored_before is None:
            return f"{self.table}: no table yet"
        before = f"{self.live_before} live, {self.stored_before} stored"
        if self.dry_run or self.live_after is None or self.stored_after is None:
            return "\n".join([
                f"{self.table} (dry run): {before}",
                f"  would compact {len(self.candidates)} closed partitions" + "".join(
                    f"\n    {c.label}: {c.small_files} small files, {size(c.small_bytes)}"
                    for c in self.candidates),
                self._vacuum_line()])
        merged = sum(c.files_removed for c in self.compacted)
        written = sum(c.files_added for c in self.compacted)
        skipped = [c.partition for c in self.compacted if c.skipped]
        return "\n".join([
            f"{self.table}: {before} -> {self.live_after} live, {self.stored_after} stored "
            f"({self.seconds:.1f} s)",
            f"  compacted {len(self.compacted) - len(skipped)} closed partitions: "
            f"{merged} files into {written}"
            + (f"; skipped after losing races: {', '.join(skipped)}" if skipped else ""),
            self._vacuum_line()])

    def _vacuum_line(self) -> str:
        if self.retention is None:
            return "  not vacuumed"
        if self.vacuumed is None:
            return f"  {self.retention.reason}"
        verb = "would vacuum" if self.dry_run else "vacuumed"
        return f"  {verb} {self.vacuumed}; retention {self.retention.hours} h: " \
            f"{self.retention.reason}"


def maintain(spark: SparkSession, config: Config, dry_run: bool = False,
             clock: Callable[[], float] = time.time) -> list[TableReport]:
    """Compact and vacuum every table of the deployment, one after the other."""
    layout = Layout.of_config(config)
    sources = monitored_sources(config)
    reports = []
    for spec in TABLES:
        location = spec.path(layout)
        log.info("maintain: %s%s", spec.name, " (dry run)" if dry_run else "")
        if not DeltaTable.isDeltaTable(spark, location):
            log.info("maintain: %s does not exist yet, nothing to do", spec.name)
            reports.append(TableReport(spec.name, location, dry_run, exists=False))
            continue
        report = _maintain_table(spark, config, spec, location, readers_of(location, sources),
                                 dry_run=dry_run, clock=clock)
        log.info("maintain: %s done in %.1f s: %d partitions compacted, %s", spec.name,
                 report.seconds, len(report.compacted),
                 f"{report.vacuumed.files} files vacuumed" if report.vacuumed else
                 "vacuum skipped")
        reports.append(report)
    return reports


def _maintain_table(spark: SparkSession, config: Config, spec: TableSpec, location: str,
                    readers: list[MonitoredSource], *, dry_run: bool,
                    clock: Callable[[], float]) -> TableReport:
    began = time.monotonic()
    settings = config.maintain
    files, stored_before = snapshot(location), stored_files(location)
    closed_before = (datetime.fromtimestamp(clock(), UTC) - settings.closed_after).date()
    found = candidates(files, spec.partition_by, spec.day and spec.day[0], closed_before,
                       min_file_size(spark))
    compacted = () if dry_run else tuple(
        compact(spark, location, partition, settings.attempts) for partition in found)
    retention = retention_for(spark, location, readers, settings.retention_margin,
                              int(clock() * 1000))
    vacuumed = None if retention.hours is None else \
        vacuum(spark, location, retention.hours, dry_run)
    after = {} if dry_run else {"live_after": Files.of(snapshot(location)),
                                "stored_after": stored_files(location)}
    return TableReport(spec.name, location, dry_run, True, Files.of(files), stored_before,
                       tuple(found), compacted, retention, vacuumed,
                       seconds=time.monotonic() - began, **after)
