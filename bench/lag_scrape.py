"""How long a Prometheus scrape of the exporter takes on big Delta logs.

Builds N tables of V versions each (Delta log files written directly: protocol and
metadata, then one data file per commit, every tenth commit an OPTIMIZE-like rewrite) and
one streaming checkpoint per table, a few versions behind. Then scrapes the exporter's
registry: once cold, then repeatedly while producers add a version to every table between
scrapes. The baseline, in the same run, builds a fresh exporter for every scrape (no
incremental reading).

    python -m bench.lag_scrape [--tables 10] [--versions 10000] [--scrapes 30]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import shutil
import statistics
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

from prometheus_client import generate_latest

from abstream.config import Config
from abstream.monitor.exporter import Exporter
from bench.common import RESULTS, log_progress, write_result

log = logging.getLogger("bench.lag_scrape")


def write_commit(log_dir: Path, version: int, table_id: str) -> None:
    now = int(time.time() * 1000)
    actions: list[dict] = [{"commitInfo": {"timestamp": now, "operation": "WRITE"}}]
    if version == 0:
        actions += [{"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
                    {"metaData": {"id": table_id, "format": {"provider": "parquet"},
                                  "schemaString": '{"type":"struct","fields":[]}',
                                  "partitionColumns": [], "configuration": {}}}]
    elif version % 10 == 0:
        actions += [{"remove": {"path": f"part-{version - 1}.parquet", "dataChange": False}},
                    {"add": {"path": f"compact-{version}.parquet", "size": 4096,
                             "modificationTime": now, "dataChange": False}}]
    else:
        actions.append({"add": {"path": f"part-{version}.parquet", "size": 1024,
                                "modificationTime": now, "dataChange": True}})
    (log_dir / f"{version:020d}.json").write_text(
        "\n".join(json.dumps(a) for a in actions) + "\n")


def write_checkpoint(checkpoint: Path, batch: int, table_id: str, version: int) -> None:
    for kind in ("offsets", "commits"):
        (checkpoint / kind).mkdir(parents=True, exist_ok=True)
    offset = {"sourceVersion": 1, "reservoirId": table_id, "reservoirVersion": version,
              "index": -1, "isStartingVersion": False}
    (checkpoint / "offsets" / str(batch)).write_text(
        f'v1\n{{"batchWatermarkMs":0,"batchTimestampMs":0}}\n{json.dumps(offset)}\n')
    (checkpoint / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}\n')


def build(work: Path, tables: int, versions: int) -> tuple[Config, list[tuple[Path, str]]]:
    components = []
    made = []
    for number in range(tables):
        table, table_id = work / f"table{number}", str(uuid.uuid4())
        log_dir = table / "_delta_log"
        log_dir.mkdir(parents=True)
        for version in range(versions):
            write_commit(log_dir, version, table_id)
        checkpoint = work / f"checkpoint{number}"
        write_checkpoint(checkpoint, 0, table_id, versions - 5)
        components.append({"name": f"job{number}", "checkpoint": str(checkpoint),
                           "source": str(table)})
        made.append((table, table_id))
        log.info("table %d/%d: %s versions", number + 1, tables, f"{versions:,}")
    config = Config.model_validate({"data_dir": str(work / "unused"), "monitor": {
        "include_own": False, "components": components}})
    return config, made


def timed_scrape(exporter: Exporter) -> tuple[float, bytes]:
    began = time.perf_counter()
    body = generate_latest(exporter.registry)
    return (time.perf_counter() - began) * 1000, body


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=int, default=10)
    parser.add_argument("--versions", type=int, default=10_000)
    parser.add_argument("--scrapes", type=int, default=30)
    args = parser.parse_args()
    log_progress()

    work = RESULTS / "work-lag-scrape"
    shutil.rmtree(work, ignore_errors=True)
    config, tables = build(work, args.tables, args.versions)
    exporter = Exporter(config)
    cold_ms, body = timed_scrape(exporter)
    assert b"abstream_component_lag_seconds" in body
    log.info("first scrape: %.0f ms", cold_ms)
    incremental, baseline = [], []
    next_version = args.versions
    for scrape in range(args.scrapes):
        for table, table_id in tables:
            write_commit(table / "_delta_log", next_version, table_id)
        next_version += 1
        incremental.append(timed_scrape(exporter)[0])
        if scrape < 3:  # a full re-read takes long; three are enough for the baseline
            baseline.append(timed_scrape(Exporter(config))[0])
    report = {
        "benchmark": "lag_scrape",
        "tables": args.tables, "versions_per_table": args.versions,
        "first_scrape_ms": round(cold_ms, 1),
        "scrape_ms_median": round(statistics.median(incremental), 2),
        "scrape_ms_max": round(max(incremental), 2),
        "full_reread_ms_median": round(statistics.median(baseline), 1),
        "speedup_vs_full_reread": round(statistics.median(baseline)
                                        / statistics.median(incremental), 1),
        "machine": f"{platform.node()} {os.cpu_count()} cores, Python {platform.python_version()}",
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    print(f"\n{args.tables} components x {args.versions:,} versions, one new version per "
          f"table before each scrape")
    print(f"  first scrape (reads every log)   {report['first_scrape_ms']:>9.1f} ms")
    print(f"  later scrapes, median / max      {report['scrape_ms_median']:>9.2f} / "
          f"{report['scrape_ms_max']:.2f} ms")
    print(f"  baseline: full re-read per scrape {report['full_reread_ms_median']:>8.1f} ms "
          f"({report['speedup_vs_full_reread']}x slower)")
    shutil.rmtree(work, ignore_errors=True)
    write_result(report, "lag-scrape")
    return 0 if report["scrape_ms_max"] < 100 else 1


if __name__ == "__main__":
    sys.exit(main())
