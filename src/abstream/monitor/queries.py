"""Metrics of the streaming queries running in this process, from their progress events.

``spark_delta_last_read_start_version`` and ``spark_delta_last_read_end_version`` keep the
seed article's names and meaning: the ``reservoirVersion`` of a Delta source's start and end
offsets in the last micro-batch.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from abstream.observed import (
    DUPLICATES,
    FRESHNESS_BUCKETS,
    FRESHNESS_COUNT,
    FRESHNESS_SUM,
    LATE,
    OUTPUT_WATERMARK,
    REPORTED,
    STATE_ROWS,
    STEPS,
    WATERMARK,
    freshness_bucket,
)
from abstream.times import epoch_from_iso

_DELTA_SOURCE = re.compile(r"^DeltaSource\[(?:file:)?(.*)\]$")


class FreshnessHistogram(Collector):
    """The age of every event the sessionize component took in, at the start of its
    micro-batch, accumulated from the parts each micro-batch reports."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._buckets = [0] * len(FRESHNESS_BUCKETS)
        self._count = 0
        self._sum = 0.0

    def add(self, reported: Mapping[str, Any]) -> None:
        with self._lock:
            for i, bound in enumerate(FRESHNESS_BUCKETS):
                self._buckets[i] += int(reported.get(freshness_bucket(bound)) or 0)
            self._count += int(reported[FRESHNESS_COUNT])
            self._sum += float(reported.get(FRESHNESS_SUM) or 0.0)

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            buckets = [(str(float(b)), n) for b, n in zip(FRESHNESS_BUCKETS, self._buckets,
                                                          strict=True)]
            family = HistogramMetricFamily(
                "abstream_gold_freshness_seconds",
                "age of each event at the start of the micro-batch that takes it into gold",
                buckets=[*buckets, ("+Inf", self._count)], sum_value=self._sum)
        yield family


class QueryMetrics:
    """Prometheus metrics fed with the progress of every query in this process."""

    def __init__(self, registry: CollectorRegistry, table_names: Mapping[str, str]) -> None:
        self.table_names = dict(table_names)
        job = ["job"]
        self.start_version = Gauge("spark_delta_last_read_start_version",
                                   "reservoirVersion of a Delta source's start offset in the "
                                   "last micro-batch", ["job", "table"], registry=registry)
        self.end_version = Gauge("spark_delta_last_read_end_version",
                                 "reservoirVersion of a Delta source's end offset in the "
                                 "last micro-batch", ["job", "table"], registry=registry)
        self.input_rows = Counter("abstream_query_input_rows", "Rows read", job,
                                  registry=registry)
        self.batches = Counter("abstream_query_batches", "Micro-batches run", job,
                               registry=registry)
        self.rate = Gauge("abstream_query_processed_rows_per_second",
                          "Rows per second in the last micro-batch", job, registry=registry)
        self.duration = Gauge("abstream_query_batch_duration_seconds",
                              "Duration of the last micro-batch", job, registry=registry)
        self.state_rows = Gauge("abstream_query_state_rows",
                                "Rows in the query's state stores", job, registry=registry)
        self.dropped = Counter("abstream_query_rows_dropped_by_watermark",
                               "Rows dropped as later than the watermark", job,
                               registry=registry)
        self.duplicates = Counter("abstream_query_rows_dropped_as_duplicates",
                                  "Events dropped as repeats of an event_id", job,
                                  registry=registry)
        self.watermark = Gauge("abstream_query_watermark_timestamp_seconds",
                               "The query's event-time watermark", job, registry=registry)
        self.output_watermark = Gauge(
            "abstream_query_output_watermark_timestamp_seconds",
            "The event-time watermark of the operators after the query's own: the input "
            "watermark held back to the earliest event it still holds", job,
            registry=registry)
        self.last_progress = Gauge("abstream_query_last_progress_timestamp_seconds",
                                   "When the last micro-batch finished", job,
                                   registry=registry)
        self.steps = Counter("abstream_query_step_seconds",
                             "Seconds the query's micro-batches spent in each named step "
                             "(the Spark jobs it runs)", ["job", "step"], registry=registry)
        self._step_totals: dict[tuple[str, str], float] = {}
        self.freshness = FreshnessHistogram()
        registry.register(self.freshness)

    def observe(self, progress: Mapping[str, Any]) -> None:
        """Take in one progress event (the JSON of a StreamingQueryProgress)."""
        job = progress.get("name") or str(progress.get("id"))
        rows = int(progress.get("numInputRows") or 0)
        self.batches.labels(job).inc()
        self.input_rows.labels(job).inc(rows)
        self.rate.labels(job).set(float(progress.get("processedRowsPerSecond") or 0.0))
        self.duration.labels(job).set((progress.get("batchDuration") or 0) / 1000)
        operators = progress.get("stateOperators") or []
        reported = progress.get(REPORTED) or {}
        self.state_rows.labels(job).set(reported.get(STATE_ROWS, sum(
            int(op.get("numRowsTotal") or 0) for op in operators)))
        self.dropped.labels(job).inc(reported.get(LATE, 0) + sum(
            int(op.get("numRowsDroppedByWatermark") or 0) for op in operators))
        self.duplicates.labels(job).inc(reported.get(DUPLICATES, 0))
        watermark = (progress.get("eventTime") or {}).get("watermark")
        if watermark:
            self.watermark.labels(job).set(epoch_from_iso(watermark))
        if WATERMARK in reported:
            self.watermark.labels(job).set(reported[WATERMARK] / 1000)
        if OUTPUT_WATERMARK in reported:
            self.output_watermark.labels(job).set(reported[OUTPUT_WATERMARK] / 1000)
        self.last_progress.labels(job).set(epoch_from_iso(progress["timestamp"]))
        for source in progress.get("sources") or []:
            self._delta_versions(job, source)
        if FRESHNESS_COUNT in reported:
            self.freshness.add(reported)
        for step, total in (reported.get(STEPS) or {}).items():
            before = self._step_totals.get((job, step), 0.0)
            self._step_totals[job, step] = total
            self.steps.labels(job, step).inc(max(0.0, total - before))

    def _delta_versions(self, job: str, source: Mapping[str, Any]) -> None:
        match = _DELTA_SOURCE.match(source.get("description") or "")
        if not match:
            return
        path = "/" + match.group(1).lstrip("/") if "://" not in match.group(1) else \
            match.group(1)
        table = self.table_names.get(path, path.rstrip("/").rsplit("/", 1)[-1])
        for gauge, key in ((self.start_version, "startOffset"), (self.end_version, "endOffset")):
            offset = _offset(source.get(key))
            if offset is not None and "reservoirVersion" in offset:
                gauge.labels(job, table).set(offset["reservoirVersion"])


def _offset(value: Any) -> dict | None:
    if isinstance(value, dict):
        return value
    if isinstance(value, str) and value.startswith("{"):
        return json.loads(value)
    return None
