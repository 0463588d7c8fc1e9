"""Recompute one event-time range from bronze, with the speed layer's own stage functions.

An event counts for what its whole visit lists, so every visit with events in the range's
windows is assembled whole: bronze is read ``lookahead`` before and after the range (12
hours by default); if such a visit reaches the edge of what was read (an event within
``gap`` of it), the rest of bronze on that side is read too, so no visit is ever cut.

Gold windows starting in the range are computed from events and visits up to the end of
the last such window (longer than the range when windows slide).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from abstream.batch.ranges import TimeRange
from abstream.config import Config
from abstream.io import local_disk
from abstream.stages import dedupe, definition_gold, gold, sessions
from abstream.times import from_micros, micros_from
from abstream.topology import BATCH

log = logging.getLogger(__name__)



@dataclass(frozen=True)
class Recomputed:
    """One range's batch-layer rows and what they depend on. The sessionized events and the
    assembled visits (on local disk) stay until ``release``."""

    visits: DataFrame
    gold: DataFrame
    definitions: DataFrame
    #: Events in the range.
    events: int
    depends_from: datetime
    depends_until: datetime
    events_on_disk: DataFrame
    visits_on_disk: DataFrame

    def release(self) -> None:
        local_disk.drop(self.events_on_disk, self.visits_on_disk)


def micros(ts: datetime) -> Column:
    """A timestamp literal that means the same instant in any session time zone."""
    return F.timestamp_micros(F.lit(micros_from(ts)))


def between(column: str, start: datetime, end: datetime) -> Column:
    return (F.col(column) >= micros(start)) & (F.col(column) < micros(end))


def _read(bronze: DataFrame, start: datetime, end: datetime, columns: tuple[str, ...]
          ) -> DataFrame:
    """Bronze events in [start, end), each event_id once: the stream drops repeats only
    within ``ingest.dedupe_window`` of each other; copies of one event share its time, so
    they fall in the same range. Only the ids are shuffled to find the repeats (few), not
    the wide rows."""
    # event_date is the partition column: naming it lets Delta skip whole partitions.
    return dedupe.drop_duplicate_events(bronze.where(
        (F.col("event_date") >= F.lit(start.date())) & (F.col("event_date") <= F.lit(end.date()))
        & between("event_ts", start, end)).select("event_id", *columns))


def recompute(bronze: DataFrame, span: TimeRange, data: TimeRange,
              config: Config) -> Recomputed:
    """The batch layer's visits (starting in ``span``) and rows of both gold tables (windows
    starting in ``span``) from ``bronze``, whose events all lie in ``data``."""
    gap = config.sessionize.gap
    catalog = config.metrics.catalog
    # The bronze columns sessions and metrics read (pruned before de-duplication).
    columns = sessions.session_columns(catalog, config.events)
    windowing = gold.Windowing.of(config.metrics)
    needed_end = span.end + windowing.length - windowing.step
    read = TimeRange(max(span.start - config.batch.lookahead, data.start),
                     min(needed_end + config.batch.lookahead, data.end))
    while True:
        # Sessionized once for the visits and the gold rows.
        started = local_disk.on_disk(sessions.with_visit_start(
            _read(bronze, read.start, read.end, columns), gap))
        visits = local_disk.on_disk(sessions.assemble_visits(started, catalog))
        # The visits with events in the windows: they must be whole.
        overlapping = (F.col("visit_start") < micros(needed_end)) \
            & (F.col("visit_end") >= micros(span.start))
        edges = visits.where(overlapping).agg(
            F.unix_micros(F.min("visit_start")).alias("first"),
            F.unix_micros(F.max("visit_end")).alias("last")).first()
        first = span.start if edges["first"] is None else from_micros(edges["first"])
        last = span.start if edges["last"] is None else from_micros(edges["last"])
        cut_before = read.start > data.start and first < read.start + gap
        cut_after = read.end < data.end and last + gap >= read.end
        if not (cut_before or cut_after):
            break
        log.info("a visit runs on past %s: reading the rest of bronze",
                 read.start if cut_before else read.end)
        local_disk.drop(started, visits)
        read = TimeRange(data.start if cut_before else read.start,
                         data.end if cut_after else read.end)

    # Counted from the events on disk, not observed on the way to gold: where no event is
    # in the range's windows, Spark answers the gold query without running that branch,
    # and an observation there would never be filled in.
    events = started.where(between("event_ts", span.start, span.end)).count()
    event_targets = sessions.event_targets(
        started.where(between("event_ts", span.start, needed_end)),
        sessions.visit_entries(visits))
    visit_targets = sessions.visit_targets(
        visits.where(between("visit_start", span.start, needed_end)))
    metrics = gold.experiment_metrics(event_targets, visit_targets, windowing,
                                      config.metrics.hll_lg_k, exact_visitors=True)
    definitions = definition_gold.definition_metrics(
        event_targets, visit_targets,
        sessions.visit_targets(visits.where(F.col("visit_start") < micros(needed_end))),
        catalog, windowing, hll_lg_k=config.metrics.hll_lg_k)
    in_span = between("window_start", span.start, span.end)
    return Recomputed(
        visits=sessions.with_lineage(visits.where(between("visit_start", span.start, span.end)),
                                     BATCH),
        gold=gold.with_lineage(metrics.where(in_span), BATCH),
        definitions=definition_gold.with_lineage(definitions.where(in_span), BATCH),
        events=events,
        depends_from=min(first, span.start) - gap,
        depends_until=max(needed_end, last + gap),
        events_on_disk=started,
        visits_on_disk=visits,
    )
