"""The ``abstream`` command: a thin layer over the library."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from abstream import __version__, commands
from abstream.config import load_config
from abstream.durations import parse_duration
from abstream.errors import AbstreamError, first_line

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("abstream")



def _effect(text: str) -> tuple[str, float]:
    """``METRIC=LIFT[@SEGMENT=VALUE]`` as (``METRIC[@SEGMENT=VALUE]``, lift)."""
    effect, _, segment = text.partition("@")
    name, sep, value = effect.partition("=")
    try:
        if not sep or (segment and "=" not in segment):
            raise ValueError
        return name.strip() + (f"@{segment.strip()}" if segment else ""), float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected METRIC=LIFT such as conversion=0.10, or one limited to a segment such "
            f"as conversion=0.10@device=mobile, got {text!r}") from None


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
    common.add_argument("--replica", metavar="NAME",
                        help="act as replica NAME of an active/standby pair: its own "
                             "checkpoints, tables and topics under DATA_DIR/replicas/NAME")
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

    serve = commands.add_parser(
        "serve", parents=[common],
        help="serve the published results: a results page and a JSON API (read-only; "
             "no Spark needed)")
    serve.add_argument("--host", help="override serve.host (default 127.0.0.1; another "
                                      "address needs serve.token)")
    serve.add_argument("--port", type=int, help="override serve.port")

    demo = commands.add_parser("demo", parents=[common],
                               help="generate beacons, run the speed layer, show the results")
    demo.add_argument("--events", type=int, default=200_000, metavar="N")
    demo.add_argument("--seed", type=int, default=1, metavar="S")
    demo.add_argument("--effect", type=_effect, action="append",
                      metavar="METRIC=LIFT[@SEGMENT=VALUE]",
                      help="planted lift (default conversion=0.10); @device=mobile limits it "
                           "to one segment")
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
                         help="print the views' CREATE VIEW statements for a metastore instead")
    serving.add_argument("--name", default="abstream_serving", help="the view's name")
    serving.add_argument("--by", metavar="DIMENSION",
                         help="each definition's totals per value of a catalog dimension")

    _report_parser(commands, common)
    _metrics_parser(commands, common)

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

    standby = commands.add_parser(
        "standby", parents=[common],
        help="the serving lease of active/standby replicas: who writes the store "
             "(no Spark needed)")
    standby.add_argument("action", choices=("status", "handover"),
                         help="status: the lease, the store's last write and each replica's "
                              "position and lag; handover: the leader steps down now and "
                              "another replica takes over once caught up")
    standby.add_argument("--json", action="store_true", help="status as one JSON object")
    standby.add_argument("--no-wait", action="store_true",
                         help="handover: return at once, without waiting for the new leader")

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
                     metavar="METRIC=LIFT[@SEGMENT=VALUE]",
                     help="planted relative lift of every treatment: conversion, revenue, "
                          "bounce, errors, page_load (repeatable); @device=mobile or "
                          "@country=DE limits it to the visitors of one segment")
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


def _metrics_parser(commands: argparse._SubParsersAction, common: argparse.ArgumentParser
                    ) -> None:
    metrics = commands.add_parser(
        "metrics", parents=[common],
        help="print the metric catalog in force, or check a file of definitions")
    shown = metrics.add_mutually_exclusive_group()
    shown.add_argument("--yaml", action="store_true",
                       help="print the catalog as YAML (a file for metrics.definitions)")
    shown.add_argument("--check", metavar="FILE", type=Path,
                       help="check the definitions in FILE (a catalog, or a config file) "
                            "against the input mapping in force: one line per problem")


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
    report.add_argument("--by", metavar="DIMENSION",
                        help="every comparison per value of a dimension of metrics.dimensions "
                             "(such as device), corrected over each experiment's values")
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


COMMANDS = {"generate": commands.generate, "run": commands.run, "demo": commands.demo,
            "batch": commands.batch, "serving": commands.serving,
            "kafka-local": commands.kafka_local, "report": commands.report, "lag": commands.lag,
            "maintain": commands.maintain, "exporter": commands.exporter,
            "serve": commands.serve,
            "jars": commands.jars, "metrics": commands.metrics,
            "standby": commands.standby}


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    _configure_logging(args)
    before = _active_spark()
    try:
        config = load_config(args.config, data_dir=args.data_dir, replica=args.replica)
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
        started = _active_spark()
        # A session the caller had (main called from Python) is the caller's to stop.
        if started is not None and started is not before:
            started.stop()


def _spark_loaded() -> bool:
    """Whether this process has imported pyspark (the Spark-free commands never do)."""
    return sys.modules.get("pyspark") is not None


def _is_spark_error(exc: BaseException) -> bool:
    if not _spark_loaded():
        return False
    from py4j.protocol import Py4JError
    from pyspark.errors import PySparkException

    return isinstance(exc, PySparkException | Py4JError)


def _active_spark() -> SparkSession | None:
    if not _spark_loaded():
        return None
    from pyspark.sql import SparkSession

    return SparkSession.getActiveSession()
