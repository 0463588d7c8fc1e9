"""Whether VACUUM may run on a table without taking a file a monitored reader still needs.

A streaming reader whose checkpoint stands at version v of a table reads, when it goes on,
the data files of v and later versions, including those a later commit removed (OPTIMIZE,
an overwrite). Such a file was removed after the oldest file the reader has not processed
was committed, so a reader needs every file removed since that commit time::

    needed = now - commit time of the oldest file some reader has not processed + margin

VACUUM keeps a removed file only while the table's snapshot still lists it, and the
snapshot drops removed files once the table's own ``delta.deletedFileRetentionDuration``
has passed, whatever retention VACUUM is given. So VACUUM runs with the table's own
retention (in whole hours, rounded up: VACUUM rounds the hours it is given) when ``needed``
is within it, and not at all when it is not. A reader that has never run, or whose position
cannot be read, may start from the table's first commit still in the log: it needs every
file removed since that commit.
"""

from __future__ import annotations

import logging
import math
from dataclasses import asdict, dataclass
from datetime import timedelta
from typing import Any

from delta.tables import DeltaTable
from pyspark.sql import SparkSession

from abstream.durations import parse_interval, spark_interval
from abstream.errors import AbstreamError
from abstream.io.checkpoint_log import normalise_path
from abstream.lag.measure import BEHIND, CAUGHT_UP, NEVER_RUN, LagMonitor, MonitoredSource
from abstream.times import iso_from_ms

log = logging.getLogger(__name__)

RETENTION_PROPERTY = "delta.deletedFileRetentionDuration"
#: Delta's retention when the table does not set its own.
DELTA_DEFAULT_RETENTION = "interval 1 week"
HOUR = timedelta(hours=1)


@dataclass(frozen=True)
class Need:
    """The oldest file one reader still needs, by the commit time that bounds it."""

    reader: str
    since_ms: int
    why: str


@dataclass(frozen=True)
class Retention:
    """What VACUUM keeps for one table, and why."""

    #: The hours VACUUM retains; None when it must not run.
    hours: int | None
    #: The table's own retention (``delta.deletedFileRetentionDuration``), in hours.
    table_hours: float
    #: The reader whose position kept VACUUM from running.
    bound_by: str | None
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def readers_of(location: str, sources: list[MonitoredSource]) -> list[MonitoredSource]:
    """The monitored readers of the table at ``location``."""
    wanted = normalise_path(location).rstrip("/")
    return [s for s in sources if normalise_path(s.source).rstrip("/") == wanted]


def oldest_need(location: str, readers: list[MonitoredSource], now_ms: int) -> Need | None:
    """The reader that needs the oldest files of the table, or None when all are caught up."""
    monitor = LagMonitor(readers, clock=lambda: now_ms / 1000)
    table = monitor.table(location)
    needs = []
    for source, row in zip(readers, monitor.rows(), strict=True):
        if row.status == CAUGHT_UP:
            continue
        if row.status == BEHIND:
            pending = monitor.pending_files(source)
            since = min(f.timestamp_ms for f in pending)
            needs.append(Need(row.component, since,
                              f"{row.component} has not processed the table since version "
                              f"{row.oldest_unprocessed_version}, committed {iso_from_ms(since)}"))
            continue
        if table.earliest_version is None:  # no version left to read: nothing to keep
            continue
        since = table.versions[table.earliest_version].timestamp_ms
        state = "has never run" if row.status == NEVER_RUN else \
            f"has a position that cannot be read ({row.detail or row.status})"
        needs.append(Need(row.component, since,
                          f"{row.component} {state}: it may read from version "
                          f"{table.earliest_version}, committed {iso_from_ms(since)}"))
    return min(needs, key=lambda n: n.since_ms, default=None)


def table_retention(spark: SparkSession, location: str) -> tuple[timedelta, str]:
    """The table's own retention of removed files, and the property's text."""
    properties = DeltaTable.forPath(spark, location).detail().first()["properties"]
    text = properties.get(RETENTION_PROPERTY, DELTA_DEFAULT_RETENTION)
    try:
        return parse_interval(text), text
    except ValueError:
        raise AbstreamError(f"the table at {location} has {RETENTION_PROPERTY} = {text!r}, "
                            "which is not an interval abstream can read") from None


def retention_for(spark: SparkSession, location: str, readers: list[MonitoredSource],
                  margin: timedelta, now_ms: int) -> Retention:
    """The retention VACUUM may use on the table without taking a file from any reader
    (``hours`` is None when there is none)."""
    own, text = table_retention(spark, location)
    need = oldest_need(location, readers, now_ms) if readers else None
    needed = margin + (timedelta(milliseconds=now_ms - need.since_ms) if need else timedelta(0))
    readers_state = "no monitored reader" if not readers else \
        "every reader caught up" if need is None else need.why
    own_text = f"the table's own {RETENTION_PROPERTY} ({text})"
    if needed > own:
        return Retention(None, own / HOUR, need.reader if need else None,
                         f"vacuum skipped: {readers_state}; with the "
                         f"{spark_interval(margin)} margin that is {needed / HOUR:,.1f} h "
                         f"ago, beyond {own_text}, past which VACUUM keeps no removed file")
    return Retention(math.ceil(own / HOUR), own / HOUR, None, f"{own_text}; {readers_state}")
