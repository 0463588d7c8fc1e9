"""A team's own event format and metrics through the whole pipeline.

The generator's beacons are rewritten in another shape (nested paths, epoch milliseconds,
experiments under other keys) and read through an input mapping that says so, with a
catalog of every kind of definition (a proportion, a count mean, a capped value mean, a
ratio, a quantile, a visit-unit metric, a window) and a dimension of its own. After
``run --once`` and ``batch --all``:

- bronze, quarantine, visits and gold, speed and batch layer alike, are those of the
  beacons read through the default mapping (but for the catalog's columns of silver);
- each definition's sums over the served visits, per experiment, variant and population
  and per value of the dimension, equal the plain-Python reference computed from the
  definitions (``tests/reference.py``);
- the speed layer's visits carry the same catalog parts as the batch layer's;
- gold's ``definition_metrics`` holds each definition's totals, overall and per dimension
  value, equal to the reference's, and the speed layer's increments add up to the batch
  layer's rows (their units where its watermark has passed); a changed definition's old
  rows stay out of the view until the batch layer backfills it.
"""

from __future__ import annotations

import json
import logging
import math
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
from bench.chaos import Comparison, batch_frames, comparable, compare, speed_frames
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from abstream.batch.layer import BatchRequest, run_batch
from abstream.config import EventsSettings
from abstream.layout import Layout
from abstream.metrics.definitions import Catalog
from abstream.report.moments import VariantSeries, served_series
from abstream.report.segments import segmented_visits, split
from abstream.report.statistics import Z_RANK
from abstream.schemas import DEFINITION_KEY
from abstream.serving.definition_totals import coverage_lines, definition_totals, versions
from abstream.serving.view import definitions_view, serving_visits
from abstream.speed import Context, pipeline_components
from abstream.speed.progress import RunStats
from abstream.speed.runner import run_once
from abstream.stages.definition_gold import served
from abstream.stages.gold import Windowing
from tests import reference
from tests.helpers import landing_records, make_config, write_lines

log = logging.getLogger(__name__)

#: Where the rewritten events keep each beacon field.
SHAPE = EventsSettings.model_validate({
    "fields": {"event_id": "id", "event_ts": "at", "session_id": "ctx.sid",
               "visitor_id": "user.anon", "type": "ev"},
    "timestamp": "epoch_millis",
    "experiments": {"path": "ab", "id": "key", "variant": "arm", "qualified": "exposed"},
    "properties": {
        "page": {"path": "ctx.page"},
        "device": {"path": "ctx.device"},
        "country": {"path": "ctx.country"},
        "revenue": {"path": "props.amount", "type": "decimal", "min": 0, "max": 1e15,
                    "types": ["order"]},
        "units": {"path": "props.qty", "type": "long", "min": 0, "types": ["order"]},
        "page_load_ms": {"path": "props.load", "type": "long", "min": 0,
                         "types": ["pageview"]}},
})
METRICS = {
    "definitions": [
        {"name": "buyers", "kind": "proportion", "events": "order", "role": "primary"},
        {"name": "pageviews", "kind": "mean", "events": "pageview"},
        {"name": "spend_capped", "kind": "mean", "events": "order", "value": "revenue",
         "cap": {"absolute": 80}},
        {"name": "basket_value", "kind": "ratio",
         "numerator": {"events": "order", "value": "revenue"},
         "denominator": {"events": "order"}},
        {"name": "load_p90", "kind": "quantile", "events": "pageview",
         "value": "page_load_ms", "quantile": 0.9, "role": "guardrail", "better": "lower"},
        {"name": "big_baskets_per_visit", "kind": "mean", "unit": "visit",
         "events": {"type": "order", "where": {"units": {"ge": 2}}}},
        {"name": "orders_first_hour", "kind": "ratio",
         "numerator": {"events": "order"}, "denominator": {"visits": "all"},
         "window": {"length": "1 hour"}},
    ],
    "dimensions": [{"name": "device", "property": "device", "max_values": 2}],
}
#: Silver's columns that the catalog decides.
CATALOG_COLUMNS = ("metric_parts", "metric_values", "dimensions")


def _rewritten(line: str) -> str:
    """A beacon in the other shape (a line that is no beacon, as it is)."""
    try:
        b = json.loads(line)
        millis = int(reference.parse_ts(b["event_ts"]).timestamp() * 1000)
    except (ValueError, TypeError, KeyError, AttributeError):
        return line
    return json.dumps({
        "id": b.get("event_id"), "at": millis, "ev": b.get("type"),
        "user": {"anon": b.get("visitor_id")},
        "ctx": {"sid": b.get("session_id"), "page": b.get("page"), "device": b.get("device"),
                "country": b.get("country")},
        "ab": [{"key": e.get("id"), "arm": e.get("variant"), "exposed": e.get("qualified")}
               for e in b.get("experiments") or []],
        "props": {"amount": b.get("revenue"), "qty": b.get("units"),
                  "load": b.get("page_load_ms")},
    })


@dataclass(frozen=True)
class Runs:
    beacons: Context
    shaped: Context
    #: The reference's visits of the valid beacons.
    visits: list[dict]


@pytest.fixture(scope="module")
def runs(spark, tmp_path_factory, beacons_run) -> Runs:
    """The shared run over generated beacons and a run over the same lines in ``SHAPE``
    with the catalog ``METRICS``."""
    data = tmp_path_factory.mktemp("mapping") / "shaped"
    shaped = Context(spark, make_config(data, events=SHAPE, metrics=METRICS), Layout.of(data),
                     RunStats())
    landing = Path(beacons_run.layout.landing)
    for path in sorted(landing.glob("beacons-*")):
        write_lines(Path(shaped.layout.landing), path.name,
                    map(_rewritten, path.read_text().splitlines()))
    run_once(shaped, pipeline_components(shaped.config))
    run_batch(shaped, BatchRequest("all"))
    lines = landing_records(landing)
    return Runs(beacons_run, shaped, reference.visits(reference.valid_unique_events(lines)))


def _without_catalog(frames: dict[str, DataFrame]) -> dict[str, DataFrame]:
    """The tables as compared across catalogs: silver without the catalog's columns, gold
    without each definition's totals."""
    sessions = frames["sessions"].drop(*CATALOG_COLUMNS).withColumn(
        "experiments", F.transform("experiments", lambda e: e.dropFields("exposed_parts")))
    return {**{k: f for k, f in frames.items() if k != "definition_metrics"},
            "sessions": sessions}


def test_events_of_another_shape_make_the_same_tables_as_the_beacons(runs):
    spark, expected, actual = runs.beacons.spark, runs.beacons.layout, runs.shaped.layout
    comparison = Comparison()
    compare(comparison, "speed", _without_catalog(speed_frames(spark, expected, "files")),
            _without_catalog(speed_frames(spark, actual, "files")))
    compare(comparison, "batch", _without_catalog(batch_frames(spark, expected)),
            _without_catalog(batch_frames(spark, actual)))
    assert comparison.tables["speed events"]["rows"] > 700
    assert comparison.summary() == {"lost_rows": 0, "duplicate_rows": 0,
                                    "mismatched_tables": 0}, comparison.tables


def _spec(definition) -> dict:
    return definition.model_dump(mode="json", by_alias=True, exclude_none=True)


def _assert_sums(series: dict[tuple[str, str, str], VariantSeries], visits: list[dict],
                 catalog: Catalog) -> int:
    """Every definition's sums in ``series`` equal the reference's over ``visits``; how
    many numbers were compared."""
    compared = 0
    for definition in catalog.definitions:
        name = definition.name
        if definition.kind == "quantile":
            expected = reference.quantile_sums(visits, _spec(definition), Z_RANK)
            found = {(e, v, p): {k: getattr(s.quantiles[name], k)
                                 for k in next(iter(expected.values()))}
                     for (e, p, v), s in series.items() if name in s.quantiles}
        else:
            expected = reference.unit_sums(visits, _spec(definition))
            found = {(e, v, p): {k: s.total.sums.get(f"{name}#{k}", 0.0)
                                 for k in next(iter(expected.values()))}
                     for (e, p, v), s in series.items()}
        assert set(found) == set(expected), name
        for key, sums in expected.items():
            assert found[key] == pytest.approx(sums, rel=1e-9, abs=1e-6), (name, key)
            compared += len(sums)
    return compared


def test_every_definition_over_the_served_visits_equals_the_reference(runs):
    ctx = runs.shaped
    served = serving_visits(ctx.spark, ctx.layout)
    assert served.where(~F.col("final")).count() == 0
    _, series = served_series(served, 4, ctx.config.metrics.catalog)

    compared = _assert_sums(series, runs.visits, ctx.config.metrics.catalog)
    log.info("served visits' sums: %d numbers equal the reference's", compared)
    assert compared > 400


def test_per_dimension_value_the_sums_equal_the_reference(runs):
    """Each unit in the value of its first visit in the experiment; the values beyond
    the 2 with the most units of an experiment are ``other``."""
    ctx, visits = runs.shaped, runs.visits
    catalog = ctx.config.metrics.catalog
    segmented = segmented_visits(serving_visits(ctx.spark, ctx.layout),
                                 catalog.dimension("device"))
    _, series = served_series(segmented, 4, catalog)

    first: dict[tuple[str, str], tuple] = {}
    for visit in visits:
        for experiment, _ in visit["entries"]:
            key = (experiment, visit["visitor"])
            value = next((e["device"] for e in visit["events"] if e.get("device")), None)
            if key not in first or visit["start"] < first[key][0]:
                first[key] = (visit["start"], value)
    units: dict[tuple[str, str], set] = {}
    for (experiment, visitor), (_, value) in first.items():
        units.setdefault((experiment, value), set()).add(visitor)
    kept = {}
    for experiment in {e for e, _ in units}:
        ranked = sorted(((len(u), v) for (e, v), u in units.items() if e == experiment),
                        key=lambda c: (-c[0], c[1]))
        kept[experiment] = {v for _, v in ranked[:2]}

    def value_of(experiment: str, visitor: str) -> str:
        value = first[(experiment, visitor)][1]
        return value if value in kept[experiment] else "other"

    compared = 0
    for value in ("desktop", "mobile", "tablet", "other"):
        in_value = {(split(e)[0], p, v): s for (e, p, v), s in series.items()
                    if split(e)[1] == value}
        if not in_value:
            continue
        chosen = [{**v, "entries": {k: q for k, q in v["entries"].items()
                                    if value_of(k[0], v["visitor"]) == value}}
                  for v in visits]
        compared += _assert_sums(in_value, [v for v in chosen if v["entries"]], catalog)
    assert any(split(e)[1] == "other" for e, _, _ in series), "some value is other"
    log.info("served visits' sums per device: %d numbers equal the reference's", compared)
    assert compared > 800


def test_the_speed_layers_visits_have_the_parts_of_the_batch_layers(runs):
    ctx = runs.shaped
    silver = ctx.spark.read.format("delta").load(ctx.layout.sessions)
    columns = ("session_id", "visit_start", *CATALOG_COLUMNS, "experiments")
    speed = comparable(silver.where("layer = 'speed'").select(*columns))
    batch = comparable(silver.where("layer = 'batch'").select(*columns))
    assert speed.count() > 100
    assert speed.exceptAll(batch).count() == 0


def _gold_checked(ctx: Context, visits: list[dict], dimension: str | None = None) -> int:
    """Every served definition's totals over the definitions view equal the reference's
    (units and converted units to the HLL sketch's error, a quantile to the KLL sketch's
    rank error); how many numbers were compared."""
    catalog = ctx.config.metrics.catalog
    view = definitions_view(ctx.spark, ctx.layout, catalog)
    found = {(t.metric, t.experiment_id, t.variant, t.population, t.dimension_value): t
             for t in definition_totals(view, catalog, Windowing.of(ctx.config.metrics),
                                        dimension)}
    prop = None if dimension is None else catalog.dimension(dimension).property
    compared = 0
    for definition in served(catalog):
        expected = reference.gold_totals(visits, _spec(definition), prop)
        mine = {key[1:]: t for key, t in found.items() if key[0] == definition.name}
        assert set(mine) == set(expected), definition.name
        for key, sums in expected.items():
            t = mine[key]
            assert t.final
            assert t.numerator == pytest.approx(sums["numerator"], rel=1e-9, abs=1e-6)
            assert t.units == pytest.approx(len(sums["units"]), rel=0.03, abs=1)
            compared += 2
            if definition.kind == "ratio":
                assert t.denominator == pytest.approx(sums["denominator"], rel=1e-9, abs=1e-6)
                compared += 1
            if definition.kind == "proportion":
                assert t.converted == pytest.approx(len(sums["converted"]), rel=0.03, abs=1)
                compared += 1
            if definition.kind == "quantile" and sums["values"]:
                ordered = sorted(sums["values"])
                n, q = len(ordered), definition.quantile
                low = ordered[max(0, math.floor((q - 0.02) * n) - 1)]
                high = ordered[min(n - 1, math.ceil((q + 0.02) * n) - 1)]
                assert low <= t.quantile <= high, (definition.name, key)
                compared += 1
    return compared


def test_gold_holds_each_definitions_totals_overall_and_per_dimension_value(runs):
    """``definition_metrics`` through the definitions view: per definition without a
    window, experiment, variant and population, overall and per device (its visit's)."""
    ctx = runs.shaped
    overall, by_device = _gold_checked(ctx, runs.visits), _gold_checked(ctx, runs.visits, "device")
    log.info("gold's totals: %d numbers overall and %d per device equal the reference's",
             overall, by_device)
    assert overall > 150
    assert by_device > 400


def test_the_speed_layers_gold_increments_add_up_to_the_batch_layers_rows(runs):
    """Every row's sums; its units where the speed layer's watermark has passed its window
    (a unit counts once no event accepted after can move the time it counts at), and
    fewer after it."""
    ctx = runs.shaped
    gold = ctx.spark.read.format("delta").load(ctx.layout.definition_metrics)
    key = [k for k in DEFINITION_KEY if k != "layer"]
    latest = ctx.spark.read.format("delta").load(ctx.layout.events) \
        .agg(F.max("event_ts")).first()[0]
    passed = F.col("window_end") <= F.lit(latest - ctx.config.sessionize.lateness)

    def summed(layer: str) -> DataFrame:
        return gold.where(F.col("layer") == layer).groupBy(*key).agg(
            F.round(F.sum("numerator"), 6).alias("numerator"),
            F.round(F.sum("denominator"), 6).alias("denominator"),
            F.hll_sketch_estimate(F.hll_union_agg("units_sketch")).alias("units"),
            F.hll_sketch_estimate(F.hll_union_agg("converted_sketch")).alias("converted"))

    def differing(left: DataFrame, right: DataFrame) -> int:
        return left.exceptAll(right).count() + right.exceptAll(left).count()

    speed, batch = summed("speed"), summed("batch")
    assert batch.where(passed).count() > 500
    assert differing(speed.where(passed), batch.where(passed)) == 0
    assert differing(speed.drop("units"), batch.drop("units")) == 0
    ahead = batch.where(~passed).join(speed.select(*key, F.col("units").alias("speed_units")),
                                      key, "left")
    assert ahead.count() > 0
    assert ahead.where(F.coalesce("speed_units", F.lit(0)) > F.col("units")).count() == 0


def test_a_changed_definition_is_left_out_until_the_batch_layer_backfills_it(runs, tmp_path):
    """Gold rows of another version of a definition never reach the view; ``batch --all``
    recomputes the history of the current one from bronze."""
    data = tmp_path / "data"
    shutil.copytree(Path(runs.shaped.config.data_dir), data)
    changed = {**METRICS, "definitions": [
        {**d, "events": "add_to_cart"} if d["name"] == "buyers" else d
        for d in METRICS["definitions"]]}
    ctx = Context(runs.shaped.spark, make_config(data, events=SHAPE, metrics=changed),
                  Layout.of(data), RunStats())
    catalog = ctx.config.metrics.catalog
    old = runs.shaped.config.metrics.catalog.get("buyers")
    assert catalog.get("buyers").fingerprint != old.fingerprint
    view = definitions_view(ctx.spark, ctx.layout, catalog)
    assert view.where("metric = 'buyers'").count() == 0
    assert view.where("metric = 'pageviews'").count() > 0
    held = versions(ctx.spark.read.format("delta").load(ctx.layout.definition_metrics))
    lines = coverage_lines(catalog, held)
    assert lines[0].startswith(f"buyers ({catalog.get('buyers').fingerprint}): no windows yet;")
    assert "other version(s) left out" in lines[0]
    assert lines[-1].startswith("orders_first_hour: no gold rows")

    run_batch(ctx, BatchRequest("all"))

    assert "batch 2026" in coverage_lines(catalog, versions(
        ctx.spark.read.format("delta").load(ctx.layout.definition_metrics)))[0]
    assert _gold_checked(ctx, runs.visits) > 150
