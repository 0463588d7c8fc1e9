"""The ``abstream`` command: a thin layer over the library."""

from __future__ import annotations

import argparse
import json
import logging
import math
import signal
import sys
import threading
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from abstream import __version__
from abstream.config import Config, load_config
from abstream.durations import parse_duration
from abstream.errors import AbstreamError, UsageError, first_line

if TYPE_CHECKING:
    from abstream.lag import LagRow
    from abstream.maintain import TableReport
    from abstream.maintain.vacuum import Files

log = logging.getLogger("abstream")



def _effect(text: str) -> tuple[str, float]:
    name, sep, value = text.partition("=")
    try:
        if not sep:
            raise ValueError
        return name.strip(), float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected METRIC=LIFT such as conversion=0.10, "
                                         f"got {text!r}") from None


def _start(text: str) -> datetime | None:
    if text == "now":
        return datetime.now(UTC).replace(microsecond=0)
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an ISO-8601 time or 'now', got {text!r}") \
            from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _duration(text: str) -> object:
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", metavar="FILE", type=Path,
                        help="YAML settings (ABSTREAM__SECTION__KEY variables override it)")
    common.add_argument("--data-dir", metavar="DIR",
                        help="where landing files, tables and checkpoints live: a folder or "
                             "a Hadoop URI such as s3a://bucket/abstream (default "
                             "./abstream-data)")
    verbosity = common.add_mutually_exclusive_group()
    verbosity.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    verbosity.add_argument("-q", "--quiet", action="store_true", help="warnings only")

    parser = argparse.ArgumentParser(
        prog="abstream",
        description="A/B-test experiment metrics from clickstream events on Spark and Delta.")
    parser.add_argument("--version", action="version", version=f"abstream {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    _generate_parser(commands, common)

    run = commands.add_parser("run", parents=[common],
                              help="run components until stopped (or once, with --once)")
    run.add_argument("components", nargs="*",
                     metavar="COMPONENT",
                     help="any of ingest, sessionize (source: files) or validate, archive, "
                          "sessionize (source: kafka); default all")
    run.add_argument("--once", action="store_true",
                     help="process all available input (AvailableNow) and exit")
    run.add_argument("--no-exporter", action="store_true",
                     help="do not serve the Prometheus metrics endpoint")

    exporter = commands.add_parser(
        "exporter", parents=[common],
        help="serve lag and table metrics for Prometheus (no Spark needed)")
    exporter.add_argument("--port", type=int, help="override monitor.exporter.port")

    demo = commands.add_parser("demo", parents=[common],
                               help="generate beacons, run the speed layer, show the results")
    demo.add_argument("--events", type=int, default=200_000, metavar="N")
    demo.add_argument("--seed", type=int, default=1, metavar="S")
    demo.add_argument("--effect", type=_effect, action="append", metavar="METRIC=LIFT",
                      help="planted lift (default conversion=0.10)")
    demo.add_argument("--json", action="store_true",
                      help="print the figures as one JSON object on the last line")

    batch = commands.add_parser(
        "batch", parents=[common],
        help="recompute closed event-time ranges from bronze (the final numbers)")
    scope = batch.add_mutually_exclusive_group(required=True)
    scope.add_argument("--from", dest="start", type=_start, metavar="TIME",
                       help="range start, ISO-8601 (UTC unless it names a zone); with --to")
    scope.add_argument("--since-last", action="store_true",
                       help="the closed ranges not computed yet, and computed ranges that "
                            "got new data since (for cron or any scheduler)")
    scope.add_argument("--all", action="store_true",
                       help="everything in bronze; still-open visits end at the data's end")
    batch.add_argument("--to", dest="end", type=_start, metavar="TIME",
                       help="range end (exclusive), with --from")

    serving = commands.add_parser(
        "serving", parents=[common],
        help="totals per experiment from the serving view (final or provisional)")
    serving.add_argument("--sql", action="store_true",
                         help="print the view's CREATE VIEW statement for a metastore instead")
    serving.add_argument("--name", default="abstream_serving", help="the view's name")

    _report_parser(commands, common)

    kafka = commands.add_parser(
        "kafka-local", parents=[common],
        help="a single-node Kafka broker on 127.0.0.1 for local use (KRaft, Maven Central JARs)")
    kafka.add_argument("action", choices=("start", "stop", "status"))

    lag = commands.add_parser("lag", parents=[common],
                              help="how far behind each component is (no Spark needed)")
    lag.add_argument("--json", action="store_true", help="print a JSON list of rows")

    maintain = commands.add_parser(
        "maintain", parents=[common],
        help="compact closed partitions and vacuum what no monitored reader still needs")
    maintain.add_argument("--dry-run", action="store_true",
                          help="change nothing; show what would be compacted and vacuumed")
    maintain.add_argument("--json", action="store_true",
                          help="print a JSON list of per-table reports on the last line")

    jars = commands.add_parser("jars", parents=[common],
                               help="fetch the JVM packages once and list the JAR files")
    jars.add_argument("--comma", action="store_true",
                      help="one comma-separated line (for spark-submit --jars)")
    return parser


def _generate_parser(commands: argparse._SubParsersAction, common: argparse.ArgumentParser
                     ) -> None:
    gen = commands.add_parser("generate", parents=[common],
                              help="write synthetic beacons into the landing folder")
    gen.add_argument("--events", type=int, required=True, metavar="N",
                     help="records to write (events + duplicates + malformed)")
    gen.add_argument("--seed", type=int, default=1, metavar="S")
    gen.add_argument("--rate", type=float, metavar="EV_PER_S",
                     help="write at this many records per second (default: as fast as possible)")
    gen.add_argument("--effect", type=_effect, action="append", default=[],
                     metavar="METRIC=LIFT",
                     help="planted relative lift of every treatment: conversion, revenue, "
                          "bounce, errors, page_load (repeatable)")
    gen.add_argument("--start", type=_start, metavar="TIME",
                     help="first event time, ISO-8601 or 'now' (default 2026-01-05T00:00Z, "
                          "or now with --rate)")
    gen.add_argument("--span", type=_duration, metavar="DURATION",
                     help="event-time span of new visits (default 1 day; N/rate with --rate)")
    gen.add_argument("--late-rate", type=float, default=0.01, metavar="P")
    gen.add_argument("--late-max", type=_duration, default=parse_duration("2 hours"),
                     metavar="DURATION")
    gen.add_argument("--duplicate-rate", type=float, default=0.01, metavar="P")
    gen.add_argument("--malformed-rate", type=float, default=0.002, metavar="P")
    gen.add_argument("--file-events", type=int, default=10_000, metavar="N",
                     help="records per file")
    gen.add_argument("--to", choices=("landing", "kafka"), default="landing",
                     help="landing files (default), or messages to Kafka (kafka.bootstrap_servers)")
    gen.add_argument("--topic", metavar="NAME", help="with --to kafka (default kafka.topic)")
    gen.add_argument("--json", action="store_true", help="print the summary as JSON")


def _report_parser(commands: argparse._SubParsersAction, common: argparse.ArgumentParser
                   ) -> None:
    report = commands.add_parser(
        "report", parents=[common],
        help="compare every variant with control: lifts, intervals, p-values, SRM")
    report.add_argument("--json", action="store_true",
                        help="print the report as one JSON object (the last line)")
    report.add_argument("--html", metavar="FILE", type=Path,
                        help="write a self-contained HTML report with plots (text is then "
                             "not printed; --json still is)")
    report.add_argument("--publish", action="store_true",
                        help="replace the experiment_results table, which the metrics "
                             "exporter serves, with this report (text is then not printed; "
                             "--json still is); run it from cron")


def _configure_logging(args: argparse.Namespace) -> None:
    level = logging.DEBUG if args.verbose else logging.WARNING if args.quiet else logging.INFO
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", "%H:%M:%S"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING)
    logging.getLogger("abstream").setLevel(level)
    logging.getLogger("py4j").setLevel(logging.ERROR)


def _stop_on_signals(what: str = "finishing the current micro-batch, then stopping"
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


def _log_written(records: int) -> None:
    log.info("%s records written", f"{records:,}")


def _cmd_generate(args: argparse.Namespace, config: Config) -> int:
    from abstream.generator import GeneratorSettings, generate, generate_to_kafka
    from abstream.kafka.topics import ensure_topics
    from abstream.layout import Layout

    settings = GeneratorSettings(
        events=args.events, seed=args.seed, start=args.start, effects=dict(args.effect),
        late_rate=args.late_rate, late_max=args.late_max, duplicate_rate=args.duplicate_rate,
        malformed_rate=args.malformed_rate, file_events=args.file_events, rate=args.rate,
        **({"span": args.span} if args.span else {}),
    )
    settings.validate()
    if args.to == "kafka":
        topic = args.topic or config.kafka.topic
        target = f"Kafka topic {topic} on {config.kafka.bootstrap_servers}"
    else:
        landing = Layout.of(config.data_dir).local(Layout.of(config.data_dir).landing)
        target = str(landing)
    log.info("writing %s records into %s%s", f"{args.events:,}", target,
             f" at {args.rate:,.0f}/s" if args.rate else "")
    if args.to == "kafka":
        ensure_topics(config.kafka, [topic], config.kafka.partitions)
        summary = generate_to_kafka(settings, config.kafka, topic, _log_written)
    else:
        summary = generate(settings, landing, _log_written)
    if args.json:
        print(json.dumps({k: v for k, v in summary.to_dict().items() if k != "files"}))
    else:
        files = f" in {len(summary.files)} files" if summary.files else ""
        print(f"{summary.records:,} records{files} "
              f"({summary.events:,} events, {summary.duplicates:,} duplicates, "
              f"{summary.malformed:,} malformed, {summary.late:,} late) "
              f"in {summary.seconds:.1f} s -> {target}")
    return 0


def _cmd_run(args: argparse.Namespace, config: Config) -> int:
    from abstream.components import select
    from abstream.monitor.exporter import Exporter
    from abstream.runner import pipeline, run_continuously, run_once

    components = select(args.components, config)
    stop = _stop_on_signals()
    exporter = Exporter(config)
    if not args.no_exporter:
        try:
            exporter.serve()
        except AbstreamError as exc:
            log.warning("%s; running without the metrics endpoint", exc)
    try:
        with pipeline(config, exporter) as ctx:
            if args.once:
                run_once(ctx, components, stop)
            else:
                exporter.expect_queries(ctx.spark, [c.name for c in components])
                run_continuously(ctx, components, stop)
    finally:
        exporter.push()
        exporter.stop()
    for name, stats in ctx.stats.as_dict().items():
        written = ", ".join(f"{v:,} {k}" for k, v in stats["written"].items()) or "nothing"
        steps = ", ".join(f"{step} {seconds:,.1f} s"
                          for step, seconds in stats["step_seconds"].items())
        log.info("%s: %d batches, %s rows in, wrote %s; %s duplicates and %s late rows "
                 "dropped%s", name, stats["batches"], f"{stats['input_rows']:,}", written,
                 f"{stats['duplicates_dropped']:,}", f"{stats['late_rows_dropped']:,}",
                 f"; time by step: {steps}" if steps else "")
    return 0


def _cmd_demo(args: argparse.Namespace, config: Config) -> int:
    from abstream.demo import DEFAULT_EFFECTS, run_demo
    from abstream.report.text import render_text

    if args.events <= 0:
        raise UsageError("--events must be positive")
    effects = dict(args.effect) if args.effect else dict(DEFAULT_EFFECTS)
    result = run_demo(config, events=args.events, seed=args.seed, effects=effects,
                      stop=_stop_on_signals())
    print()
    print(render_text(result.report))
    print()
    figures = result.figures()
    mark = "ok" if result.reconciled else "MISMATCH"
    print(f"reconciliation: generated {result.generated.records:,} = bronze "
          f"{result.bronze_rows:,} + rejected {result.rejected_rows:,} + duplicates "
          f"{result.duplicate_rows:,}  [{mark}]")
    print(f"speed layer: {result.visits:,} closed visits, {result.gold_rows:,} gold increments; "
          f"batch layer: {result.batch.visits:,} visits, {result.batch.metric_rows:,} gold rows "
          f"from {result.batch.events:,} events in {result.batch.seconds:.1f} s")
    print(f"{figures['elapsed_seconds']} s end to end "
          f"({figures['events_per_second']:,} events/s)")
    if args.json:
        print(json.dumps(figures))
    return 0 if result.reconciled else 1


def _cmd_batch(args: argparse.Namespace, config: Config) -> int:
    from abstream.batch import BatchRequest, run_batch
    from abstream.runner import pipeline

    if (args.start is None) != (args.end is None):
        raise UsageError("--from and --to go together")
    request = BatchRequest("range", args.start, args.end) if args.start else \
        BatchRequest("since_last" if args.since_last else "all")
    with pipeline(config) as ctx:
        result = run_batch(ctx, request, _stop_on_signals("finishing the current chunk"))
    ranges = ", ".join(map(str, result.ranges)) or "nothing new"
    print(f"batch: {ranges}: {result.chunks} chunks, {result.events:,} events, "
          f"{result.visits:,} visits, {result.metric_rows:,} gold rows in "
          f"{result.seconds:.1f} s ({result.events_per_second:,.0f} events/s)")
    return 0


def _cmd_serving(args: argparse.Namespace, config: Config) -> int:
    from abstream.layout import Layout

    layout = Layout.of(config.data_dir)
    if args.sql:
        from abstream.serving import create_view_statement

        print(create_view_statement(layout, args.name) + ";")
        return 0
    from abstream.serving import serving_view
    from abstream.spark import spark_session
    from abstream.stages.metrics import Windowing
    from abstream.summary import format_table, variant_totals

    spark = spark_session(config.spark)
    windowing = Windowing.of(config.metrics)
    print(format_table(variant_totals(serving_view(spark, layout, args.name), windowing)))
    return 0


def _cmd_report(args: argparse.Namespace, config: Config) -> int:
    from abstream.layout import Layout
    from abstream.report.build import build_report
    from abstream.report.text import render_text
    from abstream.spark import spark_session

    if args.html is not None and not args.html.parent.is_dir():
        raise UsageError(f"--html: folder {args.html.parent} does not exist")
    spark, layout = spark_session(config.spark), Layout.of(config.data_dir)
    report = build_report(spark, layout, config)
    if args.html is not None:
        from abstream.report.html import render_html

        args.html.write_text(render_html(report), encoding="utf-8")
        log.info("HTML report written to %s", args.html)
    if args.publish:
        from abstream.report.publish import publish

        publish(spark, layout, report, datetime.now(UTC))
    if args.json:
        print(json.dumps(report.to_dict()))
    elif args.html is None and not args.publish:
        print(render_text(report))
    return 0


def _cmd_kafka_local(args: argparse.Namespace, config: Config) -> int:
    from abstream.kafka.broker import local_broker

    broker = local_broker(config)
    if args.action == "start":
        broker.start()
    elif args.action == "stop":
        broker.stop()
    pid = broker.pid()
    print(f"Kafka on {broker.bootstrap_servers}: " +
          (f"running (pid {pid}), home {broker.home}" if pid else "stopped"))
    return 0 if args.action == "stop" or pid else 1


def _cmd_lag(args: argparse.Namespace, config: Config) -> int:
    from abstream.lag import LagMonitor
    from abstream.monitor.targets import monitored_sources

    monitor = LagMonitor(monitored_sources(config), kafka=config.kafka)
    try:
        rows = monitor.rows()
    finally:
        monitor.close()
    if args.json:
        print(json.dumps([row.to_dict() for row in rows]))
        return 0
    header = ("component", "source", "status", "lag", "oldest unprocessed", "unprocessed",
              "bytes", "last batch")
    lines = [header] + [(
        row.component, row.source, row.status, _seconds(row.lag_seconds),
        row.oldest_unprocessed_commit_ts or "-",
        _unprocessed(row),
        f"{row.unprocessed_bytes:,}",
        "-" if row.last_committed_batch is None else str(row.last_committed_batch),
    ) for row in rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    for line in lines:
        print("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip())
    for row in rows:
        if row.detail and row.status == "error":
            log.warning("%s on %s: %s", row.component, row.source, row.detail)
    return 0


def _unprocessed(row: LagRow) -> str:
    if row.offsets_behind is not None:
        return f"{row.offsets_behind:,} records"
    return f"{row.unprocessed_versions} {'files' if row.source_kind == 'files' else 'versions'}"


def _seconds(value: float) -> str:
    if value < 120:
        return f"{value:.1f} s"
    if value < 7200:
        return f"{value / 60:.1f} min"
    return f"{value / 3600:.1f} h"


def _cmd_maintain(args: argparse.Namespace, config: Config) -> int:
    from abstream.maintain import maintain
    from abstream.spark import spark_session

    reports = maintain(spark_session(config.spark), config, dry_run=args.dry_run)
    if args.json:
        print(json.dumps([report.to_dict() for report in reports]))
        return 0
    for report in reports:
        print("\n".join(_maintained(report)))
    return 0


def _maintained(report: TableReport) -> list[str]:
    if not report.exists:
        return [f"{report.table}: no table yet"]
    assert report.live_before and report.stored_before and report.retention
    before = f"{_files(report.live_before)} live, {_files(report.stored_before)} stored"
    retention = report.retention
    vacuumed = "would vacuum" if report.dry_run else "vacuumed"
    vacuum = f"  {retention.reason}" if report.vacuumed is None else \
        f"  {vacuumed} {_files(report.vacuumed)}; retention {retention.hours} h: " \
        f"{retention.reason}"
    if report.dry_run:
        return [f"{report.table} (dry run): {before}",
                f"  would compact {len(report.candidates)} closed partitions" +
                "".join(f"\n    {c.label}: {c.small_files} small files, "
                        f"{_size(c.small_bytes)}" for c in report.candidates), vacuum]
    assert report.live_after and report.stored_after
    merged = sum(c.files_removed for c in report.compacted)
    written = sum(c.files_added for c in report.compacted)
    skipped = [c.partition for c in report.compacted if c.skipped]
    return [f"{report.table}: {before} -> {_files(report.live_after)} live, "
            f"{_files(report.stored_after)} stored ({report.seconds:.1f} s)",
            f"  compacted {len(report.compacted) - len(skipped)} closed partitions: "
            f"{merged} files into {written}" +
            (f"; skipped after losing races: {', '.join(skipped)}" if skipped else ""),
            vacuum]


def _files(files: Files) -> str:
    return f"{files.files:,} files ({_size(files.bytes)})"


def _size(count: int) -> str:
    units = ("B", "KiB", "MiB", "GiB")
    power = min(len(units) - 1, int(math.log(count, 1024))) if count > 0 else 0
    return f"{count:,} B" if power == 0 else f"{count / 1024 ** power:,.1f} {units[power]}"


def _cmd_exporter(args: argparse.Namespace, config: Config) -> int:
    from abstream.monitor.exporter import serve_until_stopped

    if args.port is not None:
        exporter = config.monitor.exporter.model_copy(update={"port": args.port})
        config = config.model_copy(update={
            "monitor": config.monitor.model_copy(update={"exporter": exporter})})
    serve_until_stopped(config, _stop_on_signals("stopping"))
    return 0


def _cmd_jars(args: argparse.Namespace, config: Config) -> int:
    from abstream.jars import fetch

    found = fetch(config)
    print(",".join(found) if args.comma else "\n".join(found))
    return 0


COMMANDS = {"generate": _cmd_generate, "run": _cmd_run, "demo": _cmd_demo,
            "batch": _cmd_batch, "serving": _cmd_serving, "kafka-local": _cmd_kafka_local,
            "report": _cmd_report, "lag": _cmd_lag, "maintain": _cmd_maintain,
            "exporter": _cmd_exporter, "jars": _cmd_jars}


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    _configure_logging(args)
    try:
        config = load_config(args.config, data_dir=args.data_dir)
        return COMMANDS[args.command](args, config)
    except AbstreamError as exc:
        print(f"abstream: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("abstream: interrupted", file=sys.stderr)
        return 130
    except OSError as exc:
        print(f"abstream: error: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:
        if args.verbose or not _is_spark_error(exc):
            raise
        print(f"abstream: error: {first_line(exc)} (run with -v for details)", file=sys.stderr)
        return 1
    finally:
        _stop_spark()


def _is_spark_error(exc: BaseException) -> bool:
    from py4j.protocol import Py4JError
    from pyspark.errors import PySparkException

    return isinstance(exc, PySparkException | Py4JError)


def _stop_spark() -> None:
    if "pyspark" not in sys.modules:
        return
    from pyspark.sql import SparkSession

    session = SparkSession.getActiveSession()
    if session is not None:
        session.stop()
