"""What each command does with its parsed arguments: the library call, and the text or
JSON of what it returns."""

from __future__ import annotations

import argparse
import json
import logging
import signal
import threading
from datetime import UTC, datetime
from types import FrameType
from typing import TYPE_CHECKING

from abstream.config import Config, catalog_problems
from abstream.errors import AbstreamError, ConfigError, UsageError

if TYPE_CHECKING:
    from abstream.batch import BatchRequest, BatchResult
    from abstream.io.deployment import Deployment
    from abstream.monitor.exporter import Exporter
    from abstream.speed.component import Component, Context

log = logging.getLogger("abstream")


def generate(args: argparse.Namespace, config: Config) -> int:
    from abstream import generator
    from abstream.io.kafka.topics import ensure_topics
    from abstream.layout import Layout

    settings = generator.GeneratorSettings(
        events=args.events, seed=args.seed, start=args.start, effects=dict(args.effect),
        late_rate=args.late_rate, late_max=args.late_max, duplicate_rate=args.duplicate_rate,
        malformed_rate=args.malformed_rate, file_events=args.file_events, rate=args.rate,
        **({"span": args.span} if args.span else {}),
    )
    settings.check()
    log.info("writing %s records%s", f"{args.events:,}",
             f" at {args.rate:,.0f}/s" if args.rate else "")
    if args.to == "kafka":
        topic = args.topic or config.kafka.topic
        ensure_topics(config.kafka, [topic], config.kafka.partitions)
        summary = generator.generate_to_kafka(settings, config.kafka, topic, _log_written)
    else:
        layout = Layout.of_config(config)
        summary = generator.generate(settings, layout.local(layout.landing), _log_written)
    print(json.dumps(summary.to_dict(files=False)) if args.json else summary.text())
    return 0


def _log_written(records: int) -> None:
    log.info("%s records written", f"{records:,}")


def run(args: argparse.Namespace, config: Config) -> int:
    from abstream.monitor.exporter import Exporter
    from abstream.speed import pipeline, select

    components = select(args.components, config)
    if config.replica is not None and config.serving.store != "postgres":
        raise UsageError("replicas take turns writing the PostgreSQL serving store: set "
                         "serving.store: postgres")
    stop = stop_on_signals()
    exporter = Exporter(config)
    if not args.no_exporter:
        try:
            exporter.serve()
        except AbstreamError as exc:
            log.warning("%s; running without the metrics endpoint", exc)
    try:
        with pipeline(config, [exporter.queries.observe]) as ctx:
            if args.once:
                run_once_and_store(ctx, components, stop)
            else:
                exporter.expect_queries(ctx.spark, [c.name for c in components])
                _run_continuously(ctx, components, stop, exporter)
    finally:
        exporter.push()
        exporter.stop()
    for line in ctx.stats.lines():
        log.info("%s", line)
    return 0


def run_once_and_store(ctx: Context, components: list[Component], stop: threading.Event
                       ) -> None:
    """``run --once``: all available input through ``components``, then, with a PostgreSQL
    serving store, one write of it."""
    from abstream.speed.runner import run_once

    run_once(ctx, components, stop)
    if ctx.config.serving.store == "postgres":
        from abstream.serving.store_sync import write_store

        write_store(ctx.spark, ctx.layout, ctx.config, "speed", stop=stop)


def _run_continuously(ctx: Context, components: list[Component], stop: threading.Event,
                      exporter: Exporter) -> None:
    """Run the components until stopped, publishing the report every
    ``report.publish_every`` and writing the serving store meanwhile (a replica: while it
    holds the lease)."""
    from abstream.durations import spark_interval
    from abstream.monitor.standby import StandbyCollector
    from abstream.report.schedule import PeriodicPublisher
    from abstream.serving.standby import Leadership, Standby
    from abstream.serving.store_sync import StoreSync
    from abstream.speed.runner import run_continuously

    config = ctx.config
    leadership = None if config.replica is None else Leadership(config.replica, config.standby)
    beside: list[PeriodicPublisher | StoreSync | Standby] = []
    every = config.report.publish_every
    if every is not None:
        beside.append(PeriodicPublisher(ctx.spark, ctx.layout, config, every, leadership))
        log.info("publishing the report every %s (report.publish_every)", spark_interval(every))
    if config.serving.store == "postgres":
        sync = StoreSync(ctx.spark, ctx.layout, config, leadership)
        beside.append(sync)
        log.info("writing the serving store %s every %s (serving.postgres.write_every)",
                 sync.writer.store.where, spark_interval(config.serving.postgres.write_every))
        if leadership is not None:
            def system_lag() -> float:
                return exporter.lag.system_lag(exporter.lag.rows())

            beside.append(Standby(sync.writer.store, ctx.layout, config, leadership,
                                  lag=system_lag, on_lead=sync.wake,
                                  on_leader_late=sync.prepare))
            exporter.registry.register(StandbyCollector(
                leadership.replica, lambda: (leadership.leading, leadership.epoch_seen),
                system_lag))
    for work in beside:
        work.start()
    try:
        run_continuously(ctx, components, stop)
    finally:
        for work in beside:
            work.stop()


def demo(args: argparse.Namespace, config: Config) -> int:
    from abstream.demo import DEFAULT_EFFECTS, run_demo

    if args.events <= 0:
        raise UsageError("--events must be positive")
    effects = dict(args.effect) if args.effect else dict(DEFAULT_EFFECTS)
    result = run_demo(config, events=args.events, seed=args.seed, effects=effects,
                      stop=stop_on_signals())
    print(result.text())
    if args.json:
        print(json.dumps(result.figures()))
    return 0 if result.reconciled else 1


def batch(args: argparse.Namespace, config: Config) -> int:
    from abstream.batch import BatchRequest
    from abstream.io.deployment import Deployment

    if (args.start is None) != (args.end is None):
        raise UsageError("--from and --to go together")
    if args.start is not None and args.end <= args.start:
        raise UsageError("--from must come before --to")
    request = BatchRequest("range", args.start, args.end) if args.start else \
        BatchRequest("since_last" if args.since_last else "all")
    result = batch_and_store(Deployment.open(config), request,
                             stop_on_signals("finishing the current chunk"))
    print(result.text())
    return 0


def batch_and_store(deployment: Deployment, request: BatchRequest, stop: threading.Event
                    ) -> BatchResult:
    """``batch``: the ranges ``request`` asks for recomputed, then, with a PostgreSQL
    serving store, one write of it covering them."""
    from abstream.batch import run_batch

    result = run_batch(deployment, request, stop)
    if deployment.config.serving.store == "postgres":
        from abstream.serving.store_sync import write_store

        write_store(deployment.spark, deployment.layout, deployment.config, "batch",
                    stop=stop, covers={"batch_ranges": [str(r) for r in result.ranges]})
    return result


def _check_dimension(name: str | None, config: Config) -> None:
    """A ``--by`` that names no dimension of the catalog fails before Spark starts."""
    if name is not None:
        from abstream.report.segments import dimension_named

        dimension_named(config.metrics.catalog, name)


def serving(args: argparse.Namespace, config: Config) -> int:
    from abstream.layout import Layout
    from abstream.serving import create_view_statement
    from abstream.serving.view import DEFINITIONS_VIEW, definitions_query

    layout = Layout.of_config(config)
    if args.sql:
        print(create_view_statement(layout, args.name) + ";\n")
        print(f"CREATE OR REPLACE VIEW {DEFINITIONS_VIEW} AS\n"
              f"{definitions_query(layout, config.metrics.catalog)};")
        return 0
    _check_dimension(args.by, config)
    from abstream.io.deployment import Deployment
    from abstream.serving import definitions_view, serving_view
    from abstream.serving.definition_totals import (
        coverage_lines,
        definition_totals,
        format_definitions,
        versions,
    )
    from abstream.serving.totals import format_table, variant_totals
    from abstream.stages.gold import Windowing

    deployment = Deployment.open(config)
    spark, catalog = deployment.spark, config.metrics.catalog
    windowing = Windowing.of(config.metrics)
    view = serving_view(spark, layout, args.name)
    print(format_table(variant_totals(view, windowing)))
    definitions = definitions_view(spark, layout, catalog)
    print()
    print(format_definitions(catalog, definition_totals(definitions, catalog, windowing,
                                                        args.by)))
    print()
    print("\n".join(coverage_lines(catalog, versions(
        spark.read.format("delta").load(layout.definition_metrics)))))
    return 0


def report(args: argparse.Namespace, config: Config) -> int:
    from abstream.io.deployment import Deployment
    from abstream.report.build import build_report
    from abstream.report.text import render_text

    if args.html is not None and not args.html.parent.is_dir():
        raise UsageError(f"--html: folder {args.html.parent} does not exist")
    _check_dimension(args.by, config)
    if args.by is not None and args.publish:
        raise UsageError("--by and --publish: --publish publishes the overall results "
                         "and a breakdown by every declared dimension; run them apart")
    deployment = Deployment.open(config)
    report = build_report(deployment.spark, deployment.layout, config, args.by)
    if args.html is not None:
        from abstream.report.html import render_html

        args.html.write_text(render_html(report), encoding="utf-8")
        log.info("HTML report written to %s", args.html)
    if args.publish:
        from abstream.report.build import dimension_reports
        from abstream.report.publish import publish
        from abstream.serving.standby import fenced_store

        store, fence = fenced_store(config)
        publish(deployment.spark, deployment.layout, report, datetime.now(UTC),
                dimension_reports(deployment.spark, deployment.layout, config),
                store=store, fence=fence)
    if args.json:
        print(json.dumps(report.to_dict()))
    elif args.html is None and not args.publish:
        print(render_text(report))
    return 0


def metrics(args: argparse.Namespace, config: Config) -> int:
    from abstream.metrics.catalog import problems, read_catalog_file, render_catalog
    from abstream.metrics.definitions import Catalog

    if args.check is None:
        print(render_catalog(config.metrics.catalog, as_yaml=args.yaml))
        return 0
    raw = read_catalog_file(args.check)
    found = problems(raw)
    if not found:
        found = catalog_problems(Catalog.model_validate(raw), config.events)
    for line in found:
        print(f"{args.check}: {line}")
    if found:
        return 2
    count = len(raw["definitions"])
    print(f"{args.check}: {count} definition{'s' * (count != 1)}, no problem")
    return 0


def kafka_local(args: argparse.Namespace, config: Config) -> int:
    from abstream.io.kafka.broker import local_broker

    broker = local_broker(config)
    if args.action == "start":
        broker.start()
    elif args.action == "stop":
        broker.stop()
    print(broker.status())
    return 0 if args.action == "stop" or broker.pid() else 1


def lag(args: argparse.Namespace, config: Config) -> int:
    from abstream.lag import LagMonitor
    from abstream.lag.table import lag_table
    from abstream.monitor.targets import monitored_sources

    monitor = LagMonitor(monitored_sources(config), kafka=config.kafka)
    try:
        rows = monitor.rows()
    finally:
        monitor.close()
    print(json.dumps([row.to_dict() for row in rows]) if args.json else lag_table(rows))
    return 0


def maintain(args: argparse.Namespace, config: Config) -> int:
    from abstream.io.deployment import Deployment
    from abstream.maintain import maintain

    reports = maintain(Deployment.open(config).spark, config, dry_run=args.dry_run)
    print(json.dumps([report.to_dict() for report in reports]) if args.json
          else "\n".join(report.text() for report in reports))
    return 0


def exporter(args: argparse.Namespace, config: Config) -> int:
    from abstream.monitor.exporter import serve_until_stopped

    if args.port is not None:
        exporter = config.monitor.exporter.model_copy(update={"port": args.port})
        config = config.model_copy(update={
            "monitor": config.monitor.model_copy(update={"exporter": exporter})})
    serve_until_stopped(config, stop_on_signals("stopping"))
    return 0


def serve(args: argparse.Namespace, config: Config) -> int:
    import uvicorn

    from abstream.api.app import create_app, reachable_from_elsewhere
    from abstream.api.published import PublishedResults, Source, StoredResults
    from abstream.io.postgres import configured_store
    from abstream.layout import Layout

    settings = config.serve
    host = args.host or settings.host
    port = settings.port if args.port is None else args.port
    token = settings.token.get_secret_value() if settings.token is not None else None
    if reachable_from_elsewhere(host) and token is None:
        raise ConfigError(f"serve.host {host} can be reached from other machines: set a "
                          "bearer token in serve.token (ABSTREAM__SERVE__TOKEN)")
    store = configured_store(config)
    published: Source = PublishedResults(Layout.of_config(config).experiment_results) \
        if store is None else StoredResults(store)
    log.info("results API at http://%s:%d/api/v1/experiments (OpenAPI at "
             "/api/v1/openapi.json)%s", host, port, "; bearer token required" if token else "")
    # uvicorn stops on SIGINT/SIGTERM, then raises the signal again for the handlers it
    # found: these, so that a stop is an exit 0.
    stop_on_signals("stopped")
    uvicorn.run(create_app(published, token), host=host, port=port, log_level="warning")
    return 0


def standby(args: argparse.Namespace, config: Config) -> int:
    from abstream.io.postgres import configured_store
    from abstream.monitor.standby import handover, standby_status

    store = configured_store(config)
    if store is None:
        raise UsageError("the serving lease is in the PostgreSQL serving store: set "
                         "serving.store: postgres")
    if args.action == "status":
        status = standby_status(store)
        print(json.dumps(status.to_dict()) if args.json else status.text())
        return 0
    done = handover(store, config.standby, wait=not args.no_wait)
    print(done.text())
    return 0 if args.no_wait or done.taken_by is not None else 1


def jars(args: argparse.Namespace, config: Config) -> int:
    from abstream.io.spark import fetch_jars

    found = fetch_jars(config)
    print(",".join(found) if args.comma else "\n".join(found))
    return 0


def stop_on_signals(what: str = "finishing the current micro-batch, then stopping"
                     ) -> threading.Event:
    stop = threading.Event()

    def handle(signum: int, frame: FrameType | None) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        log.warning("received %s: %s (again to abort)", signal.Signals(signum).name, what)
        stop.set()

    signal.signal(signal.SIGINT, handle)
    signal.signal(signal.SIGTERM, handle)
    return stop
