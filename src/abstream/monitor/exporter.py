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
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app, push_to_gateway
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import ThreadingWSGIServer
from prometheus_client.registry import Collector

from abstream import topology
from abstream.config import Config
from abstream.errors import AbstreamError
from abstream.lag.measure import CAUGHT_UP, ERROR, LagMonitor, LagRow, MonitoredSource, source_kind
from abstream.layout import Layout
from abstream.monitor.experiments import ExperimentCollector
from abstream.monitor.queries import QueryMetrics
from abstream.monitor.targets import monitored_sources, table_name, watched_tables
from abstream.times import epoch_from_iso

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

STATUSES = (CAUGHT_UP, "behind", "never_run", "source_missing", ERROR)
ARRIVAL_COLUMN = "arrived_at"


class LagCollector(Collector):
    """Computes every lag row and table version when Prometheus scrapes."""

    def __init__(self, config: Config, clock: Callable[[], float] = time.time) -> None:
        self.sources = monitored_sources(config)
        self.tables = watched_tables(config)
        self.layout = Layout.of_config(config)
        self.own = config.monitor.include_own
        self.clock = clock
        self.monitor = LagMonitor(self.sources, clock, config.kafka)
        self._objectives = {(s.component, s.source): s.slo_seconds for s in self.sources}
        self._lock = threading.Lock()
        # System lag: from arrival to gold, over the components up to bronze and the
        # bronze files gold's writer has not read yet.
        entry = topology.upstream_of(topology.EVENTS, config.source)
        self._entry = {(node.name, self.layout.place(name, config.kafka))
                       for node in entry for name in node.reads}
        gold = topology.writer_of(topology.EXPERIMENT_METRICS, config.source)
        self._gold_writer = MonitoredSource(gold.name, self.layout.checkpoint(gold.name),
                                            self.layout.events)
        if self.own:  # system lag reads each bronze file's earliest arrival from its stats
            self.monitor.watch_stats(self.layout.events, ARRIVAL_COLUMN)

    def rows(self) -> list[LagRow]:
        """Every lag row now (scrapes and readiness probes may ask at the same time)."""
        with self._lock:
            return self.monitor.rows()

    def objective(self, row: LagRow) -> float:
        return self._objectives[(row.component, row.source)]

    def collect(self) -> Iterator[Metric]:
        started = time.perf_counter()
        rows = self.rows()
        yield from _lag_families(rows, self.objective, self.clock())
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
        ingest = [r.lag_seconds for r in rows if (r.component, r.source) in self._entry]
        pending = self.monitor.pending_files(self._gold_writer) if self.monitor.table(
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


def _lag_families(rows: list[LagRow], objective: Callable[[LagRow], float],
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
    seen: set[str] = set()
    for row in rows:
        key = [row.component, row.source]
        lag.add_metric(key, row.lag_seconds)
        versions.add_metric(key, row.unprocessed_versions)
        size.add_metric(key, row.unprocessed_bytes)
        slo.add_metric(key, objective(row))
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


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes and probes every few seconds are not worth a log line."""


WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class Exporter:
    """The registry of all abstream metrics, served over HTTP (with health and readiness
    probes) or pushed to a Pushgateway.

    ``/healthz``: the process is alive and serving. ``/readyz``: every query this process
    should run is active (``expect_queries``) and no monitored component is behind its lag
    objective; otherwise 503 with one line per problem."""

    def __init__(self, config: Config, clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self._expected: tuple[SparkSession, tuple[str, ...]] | None = None
        self.registry = CollectorRegistry(auto_describe=False)
        self.lag = LagCollector(config, clock)
        self.registry.register(self.lag)
        self.registry.register(ExperimentCollector(self.lag.layout.experiment_results))
        self.queries = QueryMetrics(self.registry, {v: table_name(v) for v in
                                                   watched_tables(config).values()})
        self._server: Any = None

    def expect_queries(self, spark: SparkSession, names: Iterable[str]) -> None:
        """Readiness needs these streaming queries of ``spark`` active."""
        self._expected = (spark, tuple(names))

    def problems(self) -> list[str]:
        """Why this process is not ready, a line each; none when it is."""
        found = []
        if self._expected is not None:
            spark, names = self._expected
            active = {query.name for query in spark.streams.active}
            found += [f"{name}: its query is not running" for name in names
                      if name not in active]
        for row in self.lag.rows():
            objective = self.lag.objective(row)
            if row.lag_seconds > objective:
                found.append(f"{row.component} on {row.source}: {row.lag_seconds:.0f} s behind "
                             f"(objective {objective:.0f} s)")
        return found

    def _app(self) -> WsgiApp:
        metrics = make_wsgi_app(self.registry)

        def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
            path = environ.get("PATH_INFO", "/")
            if path not in ("/healthz", "/readyz"):
                return metrics(environ, start_response)
            problems = self.problems() if path == "/readyz" else []
            status = "503 Service Unavailable" if problems else "200 OK"
            body = ("\n".join(problems) if problems else "ok").encode() + b"\n"
            start_response(status, [("Content-Type", "text/plain; charset=utf-8")])
            return [body]

        return app

    def serve(self) -> tuple[str, int]:
        """Start the HTTP endpoint in a background thread; return where it listens."""
        settings = self.config.monitor.exporter
        try:
            self._server = make_server(settings.host, settings.port, self._app(),
                                       ThreadingWSGIServer, handler_class=_QuietHandler)
        except OSError as exc:
            raise AbstreamError(f"cannot serve metrics on {settings.host}:{settings.port}: "
                                f"{exc.strerror}") from None
        threading.Thread(target=self._server.serve_forever, name="exporter",
                         daemon=True).start()
        host, port = self._server.server_address[:2]
        log.info("metrics at http://%s:%d/metrics (probes: /healthz, /readyz)", host, port)
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
                            grouping_key={"data_dir": self.lag.layout.root})
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
