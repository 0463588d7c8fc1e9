"""End-to-end latency of the Kafka validation stage in each mode, measured in one run.

A real local broker, one SparkSession (local[2]), warmed up by a throw-away query. For
each mode (microbatch, async,
realtime) the validate component runs alone on topics of its own; generated beacons are
produced at a fixed rate, first to warm up, then for the measured window. Latency of a
record = broker append time of its output record (the output topics use LogAppendTime) -
the producer's timestamp of its input record (CreateTime, carried in the ``source_ts``
header). Broker, Spark and producer share this machine's clock.

    python -m bench.latency [--rate 5000] [--warmup 20] [--seconds 30] [--modes ...]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import shutil
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from tests.servers import free_port

from abstream import topology
from abstream.config import Config
from abstream.generator.write import GeneratorSettings, generate
from abstream.io.kafka.broker import LocalBroker
from abstream.io.spark import spark_session
from abstream.layout import Layout
from abstream.speed import COMPONENTS, Context
from abstream.speed.progress import RunStats
from abstream.speed.runner import run_continuously
from bench.common import RESULTS, write_result

log = logging.getLogger("bench.latency")
MODES = ("microbatch", "async", "realtime")
STEP_SECONDS = 0.01


def beacon_lines(work: Path, count: int) -> list[bytes]:
    generate(GeneratorSettings(events=count, seed=7, late_rate=0.0, duplicate_rate=0.0,
                               malformed_rate=0.0), work / "lines")
    return [line.encode() for path in sorted((work / "lines").glob("beacons-*"))
            for line in path.read_text().splitlines()]


def create_topics(bootstrap: str, mode: str) -> dict[str, str]:
    names = {"topic": f"lat-{mode}", "valid_topic": f"lat-{mode}.valid",
             "rejected_topic": f"lat-{mode}.rejected"}
    append_time = {"message.timestamp.type": "LogAppendTime"}
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([
        NewTopic(names["topic"], 1, 1),
        NewTopic(names["valid_topic"], 1, 1, config=append_time),
        NewTopic(names["rejected_topic"], 1, 1, config=append_time)])
    for future in futures.values():
        future.result()
    return names


def produce(bootstrap: str, topic: str, lines: list[bytes], *, rate: float,
            seconds: float, start: int) -> int:
    """``rate`` records a second for ``seconds``, sent in 10-ms steps; returns the position
    of the next line."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    began = time.monotonic()
    sent, step = 0, 0
    while step * STEP_SECONDS < seconds:
        step += 1
        due = int(step * STEP_SECONDS * rate)
        while sent < due:
            producer.produce(topic, value=lines[(start + sent) % len(lines)])
            sent += 1
        producer.poll(0)
        time.sleep(max(0.0, began + step * STEP_SECONDS - time.monotonic()))
    producer.flush(60)
    return start + sent


def latencies(bootstrap: str, topic: str, since_ms: int, until_ms: int,
              expected: int) -> list[int]:
    """Latency (ms) of every output record whose input was produced in [since, until)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{topic}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    found: list[int] = []
    deadline = time.monotonic() + 120
    while len(found) < expected and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is None or message.error():
            continue
        source = next(int(v) for k, v in message.headers() if k == "source_ts")
        if since_ms <= source < until_ms:
            found.append(message.timestamp()[1] - source)
    consumer.close()
    return found


def _epoch_ms(iso: str) -> int:
    return int(datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000)


def percentile(values: list[int], fraction: float) -> float:
    ordered = sorted(values)
    return float(ordered[min(len(ordered) - 1, int(fraction * len(ordered)))])


def mode_context(ctx: Context, mode: str, names: dict[str, str], bootstrap: str,
                 label: str) -> Context:
    kafka = ctx.config.kafka.model_copy(update={"bootstrap_servers": bootstrap, **names})
    validate = ctx.config.validate_.model_copy(update={"mode": mode})
    layout = Layout.of(Path(ctx.layout.root) / label)
    return replace(ctx, layout=layout, config=ctx.config.model_copy(
        update={"kafka": kafka, "validate_": validate, "data_dir": layout.root}))


@contextmanager
def validating(ctx: Context) -> Iterator[None]:
    """The validate component running in the background of the block."""
    stop = threading.Event()
    runner = threading.Thread(target=run_continuously,
                              args=(ctx, [COMPONENTS[topology.VALIDATE.name]], stop))
    runner.start()
    try:
        while not ctx.spark.streams.active:
            if not runner.is_alive():
                raise SystemExit("the validate query did not start (see the log above)")
            time.sleep(0.1)
        yield
    finally:
        stop.set()
        runner.join(timeout=300)


def warm_jvm(ctx: Context, lines: list[bytes], args: argparse.Namespace,
             bootstrap: str) -> None:
    """The first query of a JVM pays for class loading and JIT compilation: let a
    throw-away query pay it, so the first mode measured is not at a disadvantage."""
    names = create_topics(bootstrap, "jvm")
    with validating(mode_context(ctx, "microbatch", names, bootstrap, "jvm")):
        log.info("warming the JVM up for %.0f s", args.warmup)
        produce(bootstrap, names["topic"], lines, rate=args.rate, seconds=args.warmup,
                start=0)


def measure(ctx: Context, mode: str, lines: list[bytes], args: argparse.Namespace,
            bootstrap: str) -> dict[str, float]:
    names = create_topics(bootstrap, mode)
    with validating(mode_context(ctx, mode, names, bootstrap, mode)):
        log.info("%s: warming up for %.0f s at %s records/s", mode, args.warmup,
                 f"{args.rate:,.0f}")
        position = produce(bootstrap, names["topic"], lines, rate=args.rate, seconds=args.warmup,
                           start=0)
        since = int(time.time() * 1000)
        log.info("%s: measuring for %.0f s", mode, args.seconds)
        end = produce(bootstrap, names["topic"], lines, rate=args.rate, seconds=args.seconds,
                      start=position)
        until = int(time.time() * 1000)
        measured = latencies(bootstrap, names["valid_topic"], since, until, end - position)
        batches = [p for query in ctx.spark.streams.active for p in query.recentProgress
                   if p.batchDuration and since <= _epoch_ms(p.timestamp) < until]
    if len(measured) < (end - position) * 0.99:
        raise SystemExit(f"{mode}: only {len(measured)} of {end - position} records came out")
    result = {"p50_ms": percentile(measured, 0.50), "p99_ms": percentile(measured, 0.99),
              "max_ms": float(max(measured)), "records": len(measured),
              "batches": len(batches),
              "batch_ms_median": percentile([p.batchDuration for p in batches], 0.5)
              if batches else None,
              "rows_per_batch_median": percentile([p.numInputRows for p in batches], 0.5)
              if batches else None}
    log.info("%s: p50 %.0f ms, p99 %.0f ms over %s records; %d batches started in the "
             "window, median %s ms and %s rows each", mode, result["p50_ms"],
             result["p99_ms"], f"{len(measured):,}", len(batches), result["batch_ms_median"],
             result["rows_per_batch_median"])
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=5_000, help="records per second")
    parser.add_argument("--warmup", type=float, default=20, help="seconds before measuring")
    parser.add_argument("--seconds", type=float, default=30, help="measured window")
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    logging.getLogger("abstream").setLevel(logging.WARNING)
    logging.getLogger("py4j").setLevel(logging.WARNING)

    work = RESULTS / "work-latency"
    shutil.rmtree(work, ignore_errors=True)
    lines = beacon_lines(work, 50_000)
    config = Config.model_validate({"data_dir": str(work / "data"), "source": "kafka"})
    broker = LocalBroker(work / "broker", config.kafka.local.jars_cache,
                         port=free_port(), controller_port=free_port())
    broker.start()
    spark = spark_session(config.spark)
    ctx = Context(spark, config, Layout.of_config(config), RunStats())
    try:
        warm_jvm(ctx, lines, args, broker.bootstrap_servers)
        results = {mode: measure(ctx, mode, lines, args, broker.bootstrap_servers)
                   for mode in args.modes}
    finally:
        spark.stop()
        broker.stop()
    print(f"\nvalidate stage, {args.rate:,.0f} records/s, {args.seconds:.0f} s measured after "
          f"{args.warmup:.0f} s warm-up, local[2]")
    print(f"  {'mode':<11} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'records':>9}")
    for mode, r in results.items():
        print(f"  {mode:<11} {r['p50_ms']:>8.0f} {r['p99_ms']:>8.0f} {r['max_ms']:>8.0f} "
              f"{r['records']:>9,}")
    report = {
        **results,
        "rate_per_s": args.rate, "seconds": args.seconds, "warmup_seconds": args.warmup,
        "machine": f"{platform.node()} {os.cpu_count()} cores, Python {platform.python_version()}",
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    write_result(report, "latency", final=False)
    shutil.rmtree(work, ignore_errors=True)
    print(json.dumps({mode: {"p50_ms": r["p50_ms"], "p99_ms": r["p99_ms"]}
                      for mode, r in results.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
