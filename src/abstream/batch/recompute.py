"""Recompute one event-time range from bronze, with the speed layer's own stage functions.

Visits starting in the range are assembled exactly at its edges:

* before: a chain of events with gaps of at most ``gap`` that crosses the range start has
  an event within ``gap`` before it, so reading from ``start - gap`` finds every visit that
  really starts in the range, and none that started earlier;
* after: a visit may last long after the range ends. Bronze is read ``lookahead`` past the
  range (12 hours by default, the speed layer's state horizon); if a visit still runs at
  the edge of what was read, the rest of bronze is read too, so no visit is ever cut.

Gold windows starting in the range are computed from events and visits up to the end of
the last such window (longer than the range when windows slide).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, Observation
from pyspark.sql import functions as F

from abstream.batch.ranges import TimeRange
from abstream.config import Config
from abstream.stages import metrics, sessions
from abstream.times import from_micros, micros_from

log = logging.getLogger(__name__)

BATCH = "batch"


@dataclass(frozen=True)
class Recomputed:
    """One range's batch-layer rows and what they depend on. The events read and the
    visits stay cached until ``release``; ``counts`` fills in (events, gold rows) once gold
    has been written."""

    visits: DataFrame
    gold: DataFrame
    counts: Observation
    depends_from: datetime
    depends_until: datetime
    cached: tuple[DataFrame, ...]

    def release(self) -> None:
        for frame in self.cached:
            frame.unpersist()


def micros(ts: datetime) -> Column:
    """A timestamp literal that means the same instant in any session time zone."""
    return F.timestamp_micros(F.lit(micros_from(ts)))


def between(column: str, start: datetime, end: datetime) -> Column:
    return (F.col(column) >= micros(start)) & (F.col(column) < micros(end))


#: The bronze columns sessions and metrics read (pruned before de-duplication).
_COLUMNS = tuple(dict.fromkeys(("event_id", *sessions.SESSION_INPUT, *metrics.EVENT_INPUT)))


def _read(bronze: DataFrame, start: datetime, end: datetime) -> DataFrame:
    """Bronze events in [start, end), each event_id once (cached): the stream drops repeats
    only within ``ingest.dedupe_window`` of each other; copies of one event share its time,
    so they fall in the same range."""
    # event_date is the partition column: naming it lets Delta skip whole partitions.
    return bronze.where(
        (F.col("event_date") >= F.lit(start.date())) & (F.col("event_date") <= F.lit(end.date()))
        & between("event_ts", start, end)).select(*_COLUMNS).dropDuplicates(["event_id"]) \
        .persist(StorageLevel.MEMORY_AND_DISK)


def recompute(bronze: DataFrame, span: TimeRange, data_end: datetime,
              config: Config) -> Recomputed:
    """The batch layer's visits (starting in ``span``) and gold rows (windows starting in
    ``span``) from ``bronze``, whose events all lie before ``data_end``."""
    gap = config.sessionize.gap
    windowing = metrics.Windowing.of(config.metrics)
    needed_end = span.end + windowing.length - windowing.step
    read_end = min(needed_end + config.batch.lookahead, data_end)
    while True:
        read = _read(bronze, span.start - gap, read_end)
        visits = sessions.assemble_visits(read, gap) \
            .where(between("visit_start", span.start, needed_end)) \
            .persist(StorageLevel.MEMORY_AND_DISK)
        last_end = visits.agg(F.unix_micros(F.max("visit_end"))).first()[0]
        last_end = span.start if last_end is None else from_micros(last_end)
        if read_end >= data_end or last_end + gap < read_end:
            break
        log.info("a visit runs on past %s: reading the rest of bronze", read_end)
        visits.unpersist()
        read.unpersist()
        read_end = data_end

    counts = Observation("batch")
    # needed_end <= read_end or past the data: the events are all in what was read.
    events = read.where(between("event_ts", span.start, needed_end)).observe(
        counts, F.count_if(F.col("event_ts") < micros(span.end)).alias("events"))
    gold = metrics.with_lineage(
        metrics.experiment_metrics(events, visits, windowing, config.metrics.hll_lg_k,
                                   exact_visitors=True)
        .where(between("window_start", span.start, span.end)),
        BATCH,
    )
    return Recomputed(
        visits=sessions.with_lineage(visits.where(between("visit_start", span.start, span.end)),
                                     BATCH),
        gold=gold,
        counts=counts,
        depends_from=span.start - gap,
        depends_until=max(needed_end, last_end + gap),
        cached=(visits, read),
    )
