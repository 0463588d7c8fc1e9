"""The demo: generate beacons, run the speed layer to completion, then the batch layer over
everything, and show the serving view."""

from __future__ import annotations

import logging
import shutil
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from abstream import topology
from abstream.batch.layer import BatchRequest, BatchResult, run_batch
from abstream.config import Config
from abstream.errors import UsageError
from abstream.generator.write import GenerationSummary, GeneratorSettings, generate
from abstream.io.postgres import configured_store
from abstream.io.tables import (
    EVENTS_TABLE,
    METRICS_TABLE,
    REJECTED_TABLE,
    SESSIONS_TABLE,
    read_table,
)
from abstream.layout import Layout
from abstream.report.build import Report, build_report, dimension_reports
from abstream.report.publish import publish
from abstream.report.text import render_text
from abstream.speed.component import Context
from abstream.speed.components import pipeline_components
from abstream.speed.runner import pipeline, run_once
from abstream.topology import SPEED

log = logging.getLogger(__name__)

MARKER = ".abstream-demo"
DEFAULT_EVENTS = 200_000
DEFAULT_EFFECTS: Mapping[str, float] = {"conversion": 0.10}


@dataclass
class DemoResult:
    generated: GenerationSummary
    bronze_rows: int
    rejected_rows: int
    duplicate_rows: int
    visits: int
    gold_rows: int
    elapsed_seconds: float
    report: Report
    batch: BatchResult
    components: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def reconciled(self) -> bool:
        return self.generated.records == self.bronze_rows + self.rejected_rows + \
            self.duplicate_rows

    @property
    def events_per_second(self) -> int:
        return round(self.generated.records / self.elapsed_seconds)

    def figures(self) -> dict[str, Any]:
        return {
            "events_generated": self.generated.records,
            "bronze_rows": self.bronze_rows,
            "rejected_rows": self.rejected_rows,
            "duplicate_rows": self.duplicate_rows,
            "reconciled": self.reconciled,
            "visits": self.visits,
            "gold_rows": self.gold_rows,
            topology.BATCH: {"events": self.batch.events, "visits": self.batch.visits,
                             "metric_rows": self.batch.metric_rows,
                             "seconds": round(self.batch.seconds, 1),
                             "events_per_second": round(self.batch.events_per_second)},
            "elapsed_seconds": round(self.elapsed_seconds, 1),
            "events_per_second": self.events_per_second,
            "generator": self.generated.to_dict(files=False),
            "components": self.components,
            "report": self.report.to_dict(),
        }

    def text(self) -> str:
        """The report, then how the run reconciles and what each layer made."""
        mark = "ok" if self.reconciled else "MISMATCH"
        return "\n".join([
            "", render_text(self.report), "",
            f"reconciliation: generated {self.generated.records:,} = bronze "
            f"{self.bronze_rows:,} + rejected {self.rejected_rows:,} + duplicates "
            f"{self.duplicate_rows:,}  [{mark}]",
            f"speed layer: {self.visits:,} closed visits, {self.gold_rows:,} gold increments; "
            f"batch layer: {self.batch.visits:,} visits, {self.batch.metric_rows:,} gold rows "
            f"from {self.batch.events:,} events in {self.batch.seconds:.1f} s",
            f"{self.elapsed_seconds:.1f} s end to end ({self.events_per_second:,} events/s)",
            "published: `abstream serve` answers with it at "
            "http://127.0.0.1:8765/api/v1/experiments"])


def prepare_data_dir(data_dir: Path) -> None:
    """Start from an empty data dir; only a previous demo's dir is ever wiped."""
    if data_dir.exists() and any(data_dir.iterdir()):
        if not (data_dir / MARKER).exists():
            raise UsageError(f"{data_dir} is not empty and was not made by a demo; "
                             "give the demo an empty data dir")
        shutil.rmtree(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    (data_dir / MARKER).write_text("made by `abstream demo`; safe to delete\n")


def run_demo(config: Config, events: int = DEFAULT_EVENTS, seed: int = 1,
             effects: Mapping[str, float] = DEFAULT_EFFECTS,
             stop: threading.Event | None = None) -> DemoResult:
    began = time.monotonic()
    config = config.model_copy(update={"source": topology.FILES})
    layout = Layout.of_config(config)
    prepare_data_dir(layout.local())
    landing = layout.local(layout.landing)

    log.info("generating %s beacons (seed %d, effects %s) into %s, starting Spark (%s) "
             "meanwhile", f"{events:,}", seed,
             ", ".join(f"{k}={v:+.0%}" for k, v in effects.items()) or "none", landing,
             config.spark.master)
    settings = GeneratorSettings(events=events, seed=seed, effects=effects)
    settings.check()
    # The generator is Python and the JVM starts in its own process: one runs during the
    # other's start-up instead of after it.
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="generator") as generator:
        generating = generator.submit(generate, settings, landing,
                                      lambda n: log.debug("generated %s records", f"{n:,}"))
        with pipeline(config) as ctx:
            generated = generating.result()
            log.info("generated %s records in %.1f s: %s events, %s duplicates, "
                     "%s malformed, %s late", f"{generated.records:,}", generated.seconds,
                     f"{generated.events:,}", f"{generated.duplicates:,}",
                     f"{generated.malformed:,}", f"{generated.late:,}")
            return _run(ctx, layout, generated, began, stop)


def _table_rows(spark: SparkSession, layout: Layout) -> dict[str, int]:
    """Rows of bronze and quarantine, and the speed layer's rows of silver and gold."""
    speed = F.col("layer") == SPEED
    return {
        EVENTS_TABLE.name: read_table(spark, EVENTS_TABLE, layout).count(),
        REJECTED_TABLE.name: read_table(spark, REJECTED_TABLE, layout).count(),
        SESSIONS_TABLE.name: read_table(spark, SESSIONS_TABLE, layout).where(speed).count(),
        METRICS_TABLE.name: read_table(spark, METRICS_TABLE, layout).where(speed).count(),
    }


def _run(ctx: Context, layout: Layout, generated: GenerationSummary, began: float,
         stop: threading.Event | None) -> DemoResult:
    """The speed layer, the batch layer and the report over the generated beacons; the
    report is published for ``abstream serve``."""
    run_once(ctx, pipeline_components(ctx.config), stop)
    log.info("batch layer: recomputing everything in bronze")
    batch = run_batch(ctx, BatchRequest("all"), stop)
    log.info("report: every variant against control")
    # The tables are counted while the report is built: both are short jobs, each filling
    # the cores the other leaves idle while the driver plans and commits.
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="counts") as beside:
        counting = beside.submit(_table_rows, ctx.spark, layout)
        report = build_report(ctx.spark, layout, ctx.config)
        rows = counting.result()
    publish(ctx.spark, layout, report, datetime.now(UTC),
            dimension_reports(ctx.spark, layout, ctx.config), store=configured_store(ctx.config))
    return DemoResult(
        generated=generated,
        bronze_rows=rows[EVENTS_TABLE.name],
        rejected_rows=rows[REJECTED_TABLE.name],
        duplicate_rows=ctx.stats.component(topology.INGEST.name).duplicates_dropped,
        visits=rows[SESSIONS_TABLE.name],
        gold_rows=rows[METRICS_TABLE.name],
        elapsed_seconds=time.monotonic() - began,
        report=report,
        batch=batch,
        components=ctx.stats.as_dict(),
    )
