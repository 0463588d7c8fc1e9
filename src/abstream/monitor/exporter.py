"""The Prometheus exporter: component lag, table versions, system lag, query metrics, and
the experiments' published results.

Lag and table metrics are computed at scrape time from checkpoints and Delta logs, so they
are exact at that moment and keep growing while a component is down. Query metrics come
from the ``StreamingQueryListener`` of the components running in this process.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, push_to_gateway, start_http_server
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from abstream.config import Config
from abstream.errors import AbstreamError
from abstream.lag import CAUGHT_UP, ERROR, LagMonitor, LagRow, MonitoredSource, source_kind
from abstream.layout import Layout
from abstream.monitor.experiments import ExperimentCollector
from abstream.monitor.queries import QueryMetrics
from abstream.monitor.targets import monitored_sources, table_name, watched_tables
from abstream.times import epoch_from_iso

log = logging.getLogger(__name__)

STATUSES = (CAUGHT_UP, "behind", "never_run", "source_missing", ERROR)
ARRIVAL_COLUMN = "arrived_at"
ENTRY_COMPONENTS = ("validate", "archive")


class LagCollector(Collector):
    """Computes every lag row and table version when Prometheus scrapes."""

    def __init__(self, config: Config, clock: Callable[[], float] = time.time) -> None:
        self.sources = monitored_sources(config)
        self.tables = watched_tables(config)
        self.layout = Layout.of(config.data_dir)
        self.own = config.monitor.include_own
        self.clock = clock
        self.monitor = LagMonitor(self.sources, clock, config.kafka.bootstrap_servers)
        if self.own:  # system lag reads each bronze file's earliest arrival from its stats
            self.monitor.watch_stats(self.layout.events, ARRIVAL_COLUMN)

    def collect(self) -> Iterator[Metric]:
        started = time.perf_counter()
        rows = self.monitor.rows()
        yield from _lag_families(rows, self.sources, self.clock())
        yield from self._table_families()
        if self.own:
            system = GaugeMetricFamily(
                "abstream_system_lag_seconds",
                "Age of the oldest beacon that has landed but is not yet in gold, from its "
                "arrival (landing file time)")
            system.add_metric([], self.system_lag(rows))
            yield system
        duration = GaugeMetricFamily("abstream_lag_scrape_duration_seconds",
                                     "Time to compute every lag and table metric")
        duration.add_metric([], time.perf_counter() - started)
        yield duration

    def system_lag(self, rows: list[LagRow]) -> float:
        """max(the lag of the components before bronze — ingest on landing, or validate and
        archive on their topics —, now - earliest arrival in bronze files sessionize has not
        read): both sides measure from when a beacon arrived (for archive: from when it
        reached the valid topic, milliseconds after it arrived)."""
        now_ms = self.clock() * 1000
        ingest = [r.lag_seconds for r in rows
                  if (r.component == "ingest" and r.source == self.layout.landing)
                  or (r.component in ENTRY_COMPONENTS and r.source_kind == "kafka")]
        gold_writer = MonitoredSource("sessionize", self.layout.checkpoint("sessionize"),
                                      self.layout.events)
        pending = self.monitor.pending_files(gold_writer) if self.monitor.table(
            self.layout.events).exists else []
        arrivals = [f.stats_min_ms if f.stats_min_ms is not None else f.timestamp_ms
                    for f in pending]
        bronze = max(0.0, (now_ms - min(arrivals)) / 1000) if arrivals else 0.0
        return max([bronze, *ingest])

    def _table_families(self) -> Iterator[Metric]:
        version = GaugeMetricFamily("delta_version", "Latest version of a Delta table",
                                    labels=["table"])
        data_version = GaugeMetricFamily(
            "delta_data_version", "Latest version of a Delta table that added data",
            labels=["table"])
        stamp = GaugeMetricFamily("delta_version_timestamp_seconds",
                                  "Commit time of the table's latest version", labels=["table"])
        delta = {name: loc for name, loc in self.tables.items() if source_kind(loc) == "delta"}
        for reader, name in zip(self.monitor.refresh_tables(delta.values()), delta,
                                strict=True):
            if not reader.exists or reader.latest_version is None:
                continue
            latest = reader.versions[reader.latest_version]
            version.add_metric([name], reader.latest_version)
            stamp.add_metric([name], latest.timestamp_ms / 1000)
            if reader.latest_data_version is not None:
                data_version.add_metric([name], reader.latest_data_version)
        yield from (version, data_version, stamp)


def _lag_families(rows: list[LagRow], sources: list[MonitoredSource],
                  now: float) -> Iterator[Metric]:
    labels = ["component", "source"]

    def family(name: str, text: str, extra: list[str] | None = None) -> GaugeMetricFamily:
        return GaugeMetricFamily(name, text, labels=labels + (extra or []))

    lag = family("abstream_component_lag_seconds",
                 "Age of the oldest input the component has not processed (0 if none)")
    versions = family("abstream_component_unprocessed_versions",
                      "Data-changing versions (files, for a folder) not processed yet")
    size = family("abstream_component_unprocessed_bytes", "Bytes not processed yet")
    processed = family("abstream_component_last_processed_version",
                       "Every version up to this one is processed")
    status = family("abstream_component_status", "1 for the current status", ["status"])
    slo = family("abstream_component_lag_slo_seconds", "The lag objective from the config")
    batch = GaugeMetricFamily("abstream_component_last_committed_batch",
                              "Id of the last micro-batch committed in the checkpoint",
                              labels=["component"])
    committed = GaugeMetricFamily("abstream_component_last_commit_timestamp_seconds",
                                  "When the last micro-batch was committed",
                                  labels=["component"])
    age = GaugeMetricFamily("abstream_component_last_commit_age_seconds",
                            "Time since the last micro-batch was committed",
                            labels=["component"])
    behind = family("abstream_component_offsets_behind",
                    "Kafka sources: records not read yet, all partitions")
    partition_lag = family("abstream_kafka_partition_lag_seconds",
                           "Age of the first record not read yet in one partition (0 if none)",
                           ["partition"])
    partition_behind = family("abstream_kafka_partition_offsets_behind",
                              "Records not read yet in one partition", ["partition"])
    objectives = {(s.component, s.source): s.slo_seconds for s in sources}
    seen: set[str] = set()
    for row in rows:
        key = [row.component, row.source]
        lag.add_metric(key, row.lag_seconds)
        versions.add_metric(key, row.unprocessed_versions)
        size.add_metric(key, row.unprocessed_bytes)
        slo.add_metric(key, objectives[(row.component, row.source)])
        if row.last_processed_version is not None:
            processed.add_metric(key, row.last_processed_version)
        if row.offsets_behind is not None:
            behind.add_metric(key, row.offsets_behind)
        for part in row.partitions:
            partition_lag.add_metric([*key, str(part.partition)], part.lag_seconds)
            partition_behind.add_metric([*key, str(part.partition)], part.offsets_behind)
        for name in STATUSES:
            status.add_metric([*key, name], 1.0 if row.status == name else 0.0)
        if row.component not in seen and row.last_committed_batch is not None:
            seen.add(row.component)
            batch.add_metric([row.component], row.last_committed_batch)
            if row.last_commit_ts:
                moment = epoch_from_iso(row.last_commit_ts)
                committed.add_metric([row.component], moment)
                age.add_metric([row.component], max(0.0, now - moment))
    yield from (lag, versions, size, processed, status, slo, batch, committed, age, behind,
                partition_lag, partition_behind)


class Exporter:
    """The registry of all abstream metrics, served over HTTP or pushed to a Pushgateway."""

    def __init__(self, config: Config, clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self.registry = CollectorRegistry(auto_describe=False)
        self.lag = LagCollector(config, clock)
        self.registry.register(self.lag)
        self.registry.register(ExperimentCollector(Layout.of(config.data_dir).experiment_results))
        self.queries = QueryMetrics(self.registry, {v: table_name(v) for v in
                                                   watched_tables(config).values()})
        self._server: Any = None

    def serve(self) -> tuple[str, int]:
        """Start the HTTP endpoint in a background thread; return where it listens."""
        settings = self.config.monitor.exporter
        try:
            self._server, _ = start_http_server(settings.port, settings.host, self.registry)
        except OSError as exc:
            raise AbstreamError(f"cannot serve metrics on {settings.host}:{settings.port}: "
                                f"{exc.strerror}") from None
        host, port = self._server.server_address[:2]
        log.info("metrics at http://%s:%d/metrics", host, port)
        return host, port

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def push(self, job: str = "abstream") -> None:
        """Push everything to the configured Pushgateway (for AvailableNow runs)."""
        gateway = self.config.monitor.pushgateway
        if not gateway:
            return
        try:
            push_to_gateway(gateway, job=job, registry=self.registry,
                            grouping_key={"data_dir": Layout.of(self.config.data_dir).root})
            log.info("pushed metrics to %s", gateway)
        except OSError as exc:
            log.warning("could not push metrics to %s: %s", gateway, exc)


def serve_until_stopped(config: Config, stop: threading.Event) -> None:
    """``abstream exporter``: serve lag and table metrics until ``stop`` is set."""
    exporter = Exporter(config)
    exporter.serve()
    try:
        stop.wait()
    finally:
        exporter.stop()
