from datetime import datetime, timedelta

from pyspark.sql import functions as F

from abstream.metrics.definitions import Catalog
from abstream.stages.definition_gold import definition_metrics
from abstream.stages.gold import Windowing
from abstream.stages.sessions import (
    assemble_visits,
    event_targets,
    visit_entries,
    visit_targets,
    with_visit_start,
)
from tests.helpers import bronze_frame, bronze_row

T0 = datetime(2026, 1, 5, 10, 0)
FIVE = Windowing(timedelta(minutes=5))
CATALOG = Catalog.model_validate({
    "definitions": [
        {"name": "orders", "kind": "mean", "events": "order"},
        {"name": "buyers", "kind": "proportion", "events": "order"},
        {"name": "orders_first_hour", "kind": "mean", "events": "order",
         "window": {"length": "1 hour"}},
    ],
    "dimensions": [{"name": "device", "property": "device"}],
})


def _targets(spark, catalog):
    """Visitor v1: a visit from 10:00 (mobile) with an order at 10:07, exposed at 10:01;
    visitor v2: a visit at 10:08 (desktop) with nothing but a pageview."""
    entry = [("exp", "control", False)]
    exposed = [("exp", "control", True)]
    rows = [
        bronze_row("a", T0, session_id="s1", visitor_id="v1", type="pageview",
                   experiments=entry, device="mobile"),
        bronze_row("b", T0 + timedelta(minutes=1), session_id="s1", visitor_id="v1",
                   type="pageview", experiments=exposed),
        bronze_row("c", T0 + timedelta(minutes=7), session_id="s1", visitor_id="v1",
                   type="order", revenue="10.00", units=1),
        bronze_row("d", T0 + timedelta(minutes=8), session_id="s2", visitor_id="v2",
                   type="pageview", experiments=entry, device="desktop"),
    ]
    started = with_visit_start(bronze_frame(spark, rows), timedelta(minutes=35))
    visits = assemble_visits(started, catalog)
    return event_targets(started, visit_entries(visits)), visit_targets(visits)


def test_units_count_where_their_visit_starts_and_each_dimension_value_apart(spark):
    events, visits = _targets(spark, CATALOG)
    rows = definition_metrics(events, visits, visits, CATALOG, FIVE).withColumns({
        "units": F.hll_sketch_estimate("units_sketch"),
        "converted": F.hll_sketch_estimate("converted_sketch"),
        "minute": F.minute("window_start")}).collect()
    got = {(r["metric"], r["population"], r["minute"], r["dimension_value"]):
           (r["numerator"], r["units"], r["converted"]) for r in rows}

    assert {r["metric"] for r in rows} == {"orders", "buyers"}, "a window has no gold rows"
    # v1's visit starts at 10:00: its unit is in that window, its order in the 10:05 one.
    assert got[("orders", "assigned", 0, None)] == (0.0, 1, None)
    assert got[("orders", "assigned", 5, None)] == (1.0, 1, None), "v2's visit starts there"
    assert got[("buyers", "assigned", 5, None)] == (1.0, 1, 1)
    assert got[("orders", "assigned", 5, "mobile")] == (1.0, 0, None)
    assert got[("orders", "assigned", 5, "desktop")] == (0.0, 1, None)
    # Exposed at 10:01: the qualified unit counts in the window of its exposure.
    assert got[("orders", "qualified", 0, None)] == (0.0, 1, None)
    assert got[("buyers", "qualified", 5, "mobile")] == (1.0, 0, 1)


def _estimated(frame):
    """Rows of ``frame`` as sorted tuples, the sketches as their estimates."""
    return sorted(map(tuple, frame.select(
        "metric", "population", "window_start", "dimension", "dimension_value", "numerator",
        F.hll_sketch_estimate("units_sketch").alias("units"),
        F.hll_sketch_estimate("converted_sketch").alias("converted")).collect()), key=repr)


def test_without_dimensions_the_rows_are_those_overall_with_them(spark):
    plain = Catalog(definitions=CATALOG.definitions)
    events, visits = _targets(spark, plain)
    rows = _estimated(definition_metrics(events, visits, visits, plain, FIVE))
    events, visits = _targets(spark, CATALOG)
    overall = _estimated(definition_metrics(events, visits, visits, CATALOG, FIVE)
                         .where(F.col("dimension").isNull()))
    assert rows == overall
    assert len(rows) == 8


def test_a_catalog_of_windows_only_has_no_gold_rows(spark):
    catalog = Catalog.model_validate({"definitions": [
        {"name": "orders_first_hour", "kind": "mean", "events": "order",
         "window": {"length": "1 hour"}}]})
    events, visits = _targets(spark, catalog)
    assert definition_metrics(events, visits, visits, catalog, FIVE).count() == 0


def test_a_unit_counted_again_changes_no_row(spark):
    """The speed layer adds the units of every visit a micro-batch sessionizes, again for a
    visit an earlier micro-batch counted: the same rows, with the same estimates."""
    events, visits = _targets(spark, CATALOG)

    def rows(units):
        return _estimated(definition_metrics(events, visits, units, CATALOG, FIVE))

    once = rows(visits)
    assert once == rows(visits.unionByName(visits))
    assert len(once) == 18
