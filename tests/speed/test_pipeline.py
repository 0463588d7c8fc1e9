"""The whole speed layer on generated data, checked against the plain-Python reference."""

from pathlib import Path

from abstream.generator.write import GeneratorSettings, generate
from abstream.io.tables import (
    METRICS_TABLE,
    SESSIONS_TABLE,
    read_table,
)
from abstream.speed import COMPONENTS, pipeline_components
from abstream.speed.runner import run_once
from tests.helpers import (
    assert_speed_layer_matches_reference,
    forget_commits_after,
    landing_records,
    totals,
)


def _gold_totals(ctx):
    return totals(read_table(ctx.spark, METRICS_TABLE, ctx.layout))


def test_speed_layer_matches_the_reference_on_generated_data(ctx):
    generate(GeneratorSettings(events=6_000, seed=4, late_rate=0.0, malformed_rate=0.01,
                               file_events=1_500), Path(ctx.layout.landing))
    run_once(ctx, pipeline_components(ctx.config))

    assert_speed_layer_matches_reference(ctx, landing_records(Path(ctx.layout.landing)))


def test_metrics_replay_leaves_gold_unchanged(ctx):
    generate(GeneratorSettings(events=1_500, seed=8, file_events=500), Path(ctx.layout.landing))
    run_once(ctx, pipeline_components(ctx.config))
    before = _gold_totals(ctx)
    gold_versions = ctx.spark.sql(
        f"DESCRIBE HISTORY delta.`{ctx.layout.experiment_metrics}`").count()
    forget_commits_after(Path(ctx.layout.checkpoint("sessionize")), -1)
    run_once(ctx, [COMPONENTS["sessionize"]])
    assert _gold_totals(ctx) == before
    assert ctx.spark.sql(
        f"DESCRIBE HISTORY delta.`{ctx.layout.experiment_metrics}`").count() == gold_versions
    visits_written = ctx.stats.component("sessionize").written["visits"]
    assert read_table(ctx.spark, SESSIONS_TABLE, ctx.layout).count() * 2 == visits_written, \
        "sessionize re-ran its batches and its sink skipped them"
