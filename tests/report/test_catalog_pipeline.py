"""A team's own events and metrics through the whole pipeline, checked against plain Python.

The generator's beacons are rewritten in another format (nested paths, epoch
milliseconds, experiments under other keys, other event names and property names) and read
through a mapping that says so, with a catalog of every kind of definition (a proportion,
a count mean, a capped value mean, a ratio, a quantile, a visit-unit metric, a window) and a
dimension. After ``run --once`` and ``batch --all``, each definition's sums over the served
visits (per experiment, variant and population, and per value of the dimension) equal the
plain-Python reference computed from the definitions (``tests/reference.py``); the speed
layer's visits carry the same parts as the batch layer's.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench.chaos import comparable
from pyspark.sql import functions as F

from abstream.batch.layer import BatchRequest, run_batch
from abstream.generator.write import GeneratorSettings, generate
from abstream.layout import Layout
from abstream.report.moments import served_series
from abstream.report.segments import segmented_visits, split
from abstream.report.statistics import Z_RANK
from abstream.serving.view import serving_visits
from abstream.speed import Context, pipeline_components
from abstream.speed.progress import RunStats
from abstream.speed.runner import run_once
from tests import reference
from tests.helpers import landing_records, make_config, write_lines

#: The other format's names of the beacon's event types and properties.
TYPES = {"pageview": "view", "add_to_cart": "cart", "order": "purchase", "error": "error"}
PROPERTIES = {"revenue": "amount", "units": "qty", "page_load_ms": "load", "device": "dev"}

EVENTS = {
    "fields": {"event_id": "id", "event_ts": "at", "session_id": "ctx.sid",
               "visitor_id": "user.anon", "type": "ev"},
    "timestamp": "epoch_millis",
    "types": list(TYPES.values()),
    "experiments": {"path": "ab", "id": "key", "variant": "arm", "qualified": "exposed"},
    "properties": {
        "amount": {"path": "props.amount", "type": "decimal", "min": 0, "types": ["purchase"]},
        "qty": {"path": "props.qty", "type": "long", "min": 0, "types": ["purchase"]},
        "load": {"path": "props.load", "type": "long", "min": 0, "types": ["view"]},
        "dev": {"path": "ctx.device"},
    },
    "require": {"purchase": ["amount", "qty"]},
}
METRICS = {
    "definitions": [
        {"name": "buyers", "kind": "proportion", "events": "purchase", "role": "primary"},
        {"name": "views", "kind": "mean", "events": "view"},
        {"name": "spend_capped", "kind": "mean", "events": "purchase", "value": "amount",
         "cap": {"absolute": 80}},
        {"name": "basket_value", "kind": "ratio",
         "numerator": {"events": "purchase", "value": "amount"},
         "denominator": {"events": "purchase"}},
        {"name": "load_p90", "kind": "quantile", "events": "view", "value": "load",
         "quantile": 0.9, "role": "guardrail", "better": "lower"},
        {"name": "big_baskets_per_visit", "kind": "mean", "unit": "visit",
         "events": {"type": "purchase", "where": {"qty": {"ge": 2}}}},
        {"name": "purchases_first_hour", "kind": "ratio",
         "numerator": {"events": "purchase"}, "denominator": {"visits": "all"},
         "window": {"length": "1 hour"}},
    ],
    "dimensions": [{"name": "device", "property": "dev", "max_values": 2}],
}


def _rewritten(line: str) -> str:
    """A beacon in the other format (a line that is no beacon, as it is)."""
    try:
        b = json.loads(line)
        millis = int(reference.parse_ts(b["event_ts"]).timestamp() * 1000)
    except (ValueError, TypeError, KeyError, AttributeError):
        return line
    return json.dumps({
        "id": b.get("event_id"), "at": millis, "ev": TYPES.get(b.get("type"), b.get("type")),
        "user": {"anon": b.get("visitor_id")},
        "ctx": {"sid": b.get("session_id"), "device": b.get("device")},
        "ab": [{"key": e.get("id"), "arm": e.get("variant"), "exposed": e.get("qualified")}
               for e in b.get("experiments") or []],
        "props": {"amount": b.get("revenue"), "qty": b.get("units"),
                  "load": b.get("page_load_ms")},
    })


def _renamed(event: dict) -> dict:
    """A reference event with the other format's type and property names."""
    renamed = {**event, "type": TYPES[event["type"]]}
    for beacon_name, name in PROPERTIES.items():
        renamed[name] = event.get(beacon_name)
    return renamed


@pytest.fixture(scope="module")
def pipeline(spark, tmp_path_factory):
    beacons = tmp_path_factory.mktemp("beacons")
    generate(GeneratorSettings(events=3_000, seed=41, malformed_rate=0.01, late_rate=0,
                               file_events=1_500), beacons)
    data = tmp_path_factory.mktemp("catalog") / "data"
    layout = Layout.of(data)
    config = make_config(data, events=EVENTS, metrics=METRICS)
    lines = landing_records(beacons)
    write_lines(Path(layout.landing), "beacons-000000.jsonl", map(_rewritten, lines))
    ctx = Context(spark, config, layout, RunStats())
    run_once(ctx, pipeline_components(config))
    run_batch(ctx, BatchRequest("all"))
    events = [_renamed(e) for e in reference.valid_unique_events(lines)]
    return ctx, reference.visits(events, config.sessionize.gap)


def _spec(definition) -> dict:
    return definition.model_dump(mode="json", by_alias=True, exclude_none=True)


def _assert_sums(series, visits, catalog, keyed=lambda key: key) -> int:
    """Every definition's sums in ``series`` equal the reference's over ``visits``; how
    many numbers were compared."""
    compared = 0
    for definition in catalog.definitions:
        if definition.kind == "quantile":
            expected = reference.quantile_sums(visits, _spec(definition), Z_RANK)
            found = {keyed((e, v, p)): {k: getattr(s.quantiles[definition.name], k)
                                        for k in next(iter(expected.values()))}
                     for (e, p, v), s in series.items() if definition.name in s.quantiles}
        else:
            expected = reference.unit_sums(visits, _spec(definition))
            found = {keyed((e, v, p)): {k: s.total.sums.get(f"{definition.name}#{k}", 0.0)
                                        for k in next(iter(expected.values()))}
                     for (e, p, v), s in series.items()}
        assert set(found) == set(expected), definition.name
        for key, sums in expected.items():
            assert found[key] == pytest.approx(sums, rel=1e-9, abs=1e-6), (definition.name, key)
            compared += len(sums)
    return compared


def test_every_definition_over_the_served_visits_equals_the_reference(pipeline):
    ctx, visits = pipeline
    catalog = ctx.config.metrics.catalog
    served = serving_visits(ctx.spark, ctx.layout)
    assert served.where(~F.col("final")).count() == 0
    _, series = served_series(served, 4, catalog)

    assert _assert_sums(series, visits, catalog) > 400


def test_per_dimension_value_the_sums_equal_the_reference(pipeline):
    """Each unit in the value of its first visit in the experiment; the values beyond
    the 2 with the most units of an experiment are ``other``."""
    ctx, visits = pipeline
    catalog = ctx.config.metrics.catalog
    segmented = segmented_visits(serving_visits(ctx.spark, ctx.layout),
                                 catalog.dimension("device"))
    _, series = served_series(segmented, 4, catalog)

    first: dict[tuple[str, str], tuple] = {}
    for visit in visits:
        for experiment, _ in visit["entries"]:
            key = (experiment, visit["visitor"])
            value = next((e["dev"] for e in visit["events"] if e.get("dev")), None)
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

    assert any(len(values) < len({v for e, v in units if e == experiment})
               for experiment, values in kept.items()), "some value is other"
    compared = 0
    for value in ("desktop", "mobile", "tablet", "other"):
        chosen = [{**v, "entries": {k: q for k, q in v["entries"].items()
                                    if value_of(k[0], v["visitor"]) == value}}
                  for v in visits]
        in_value = {key: s for key, s in series.items() if split(key[0])[1] == value}
        if not in_value:
            continue
        compared += _assert_sums(
            {(split(e)[0], p, v): s for (e, p, v), s in in_value.items()},
            [v for v in chosen if v["entries"]], catalog)
    assert compared > 800


def test_the_speed_layers_visits_have_the_parts_of_the_batch_layers(pipeline):
    ctx, _ = pipeline
    silver = ctx.spark.read.format("delta").load(ctx.layout.sessions)
    columns = ("session_id", "visit_start", "metric_parts", "metric_values", "dimensions",
               "experiments")
    speed = comparable(silver.where("layer = 'speed'").select(*columns))
    batch = comparable(silver.where("layer = 'batch'").select(*columns))
    assert speed.count() > 300
    assert speed.exceptAll(batch).count() == 0
