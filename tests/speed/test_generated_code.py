"""A micro-batch runs on the classes Spark generated for the micro-batches before it: no
generated code of sessionize depends on what changes from one micro-batch to the next
(watermarks, batch ids, the batch's time), so its hot loops stay compiled.

The same beacons three hours later, into tables of their own, are sessionized with other
watermarks, other times and the same plans: in the same JVM, they compile nothing new."""

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from abstream.generator.write import GeneratorSettings, generate
from abstream.layout import Layout
from abstream.speed import COMPONENTS, Context
from abstream.speed.runner import run_once
from tests.helpers import reconfigure

DAY = datetime(2026, 1, 5, tzinfo=UTC)


def _compilations(ctx: Context) -> int:
    """Classes Spark's code generator has compiled in this JVM (its code cache's misses)."""
    metrics = ctx.spark._jvm.org.apache.spark.metrics.source.CodegenMetrics
    return metrics.METRIC_COMPILATION_TIME().getCount()


def _sessionize_compilations(ctx: Context, data_dir: Path, start: datetime) -> int:
    """Classes compiled while sessionize takes in, a file a micro-batch (three), the same
    beacons from ``start`` on, in ``data_dir``."""
    layout = Layout.of(data_dir)
    ctx = replace(ctx, layout=layout,
                  config=ctx.config.model_copy(update={"data_dir": str(data_dir)}))
    generate(GeneratorSettings(events=240, seed=5, start=start, span=timedelta(hours=2),
                               file_events=80), Path(layout.landing))
    run_once(ctx, [COMPONENTS["ingest"]])
    batches = ctx.stats.component("sessionize").batches
    before = _compilations(ctx)
    run_once(ctx, [COMPONENTS["sessionize"]])
    assert ctx.stats.component("sessionize").batches == batches + 3
    return _compilations(ctx) - before


@pytest.mark.slow
def test_sessionize_compiles_its_micro_batches_once(ctx, tmp_path):
    for section in ("ingest", "sessionize"):
        ctx = reconfigure(ctx, section, max_files_per_trigger=1)
    assert _sessionize_compilations(ctx, tmp_path / "first", DAY) > 0
    # The count is the JVM's: a thread an earlier test left may compile meanwhile. A second
    # try tells that apart from sessionize's own code, which would compile on every try.
    later = (_sessionize_compilations(ctx, tmp_path / f"later-{n}", DAY + timedelta(hours=3 * n))
             for n in (1, 2))
    assert any(compiled == 0 for compiled in later)
