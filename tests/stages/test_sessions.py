from datetime import datetime, timedelta
from decimal import Decimal

import pytest

from abstream.stages.sessions import (
    assemble_visits,
    event_targets,
    visit_entries,
    visit_targets,
    with_lineage,
    with_visit_start,
)
from tests.helpers import CATALOG, CATALOG_BY_DIMENSIONS, bronze_frame, bronze_row

T0 = datetime(2026, 1, 5, 10, 0)
GAP = timedelta(minutes=35)


def _events(spark, rows):
    """rows: (session, offset, type[, revenue, units, experiments, visitor])."""
    data = []
    for i, row in enumerate(rows):
        session, offset, kind, *rest = row
        revenue, units, experiments, visitor = ([*rest, None, None, None, None])[:4]
        chosen = {} if experiments is None else {"experiments": experiments}
        data.append(bronze_row(f"e{i}", T0 + offset, session_id=session,
                               visitor_id=visitor or "v1", type=kind, revenue=revenue,
                               units=units, **chosen))
    return bronze_frame(spark, data)


def _visits(spark, rows):
    return sorted(assemble_visits(with_visit_start(_events(spark, rows), GAP), CATALOG).collect(),
                  key=lambda r: (r["session_id"], r["visit_start"]))


def _targets(spark, rows):
    """event_id -> sorted (experiment, variant, population) it counts for."""
    events = _events(spark, rows)
    started = with_visit_start(events, GAP)
    targeted = event_targets(started, visit_entries(assemble_visits(started, CATALOG))).collect()
    found = {r["event_id"]: [] for r in events.collect()}
    for r in targeted:
        found[r["event_id"]].append((r["experiment_id"], r["variant"], r["population"]))
    return {event: sorted(targets) for event, targets in found.items()}


@pytest.mark.parametrize(("gap", "visits"), [
    (GAP, 1),
    (GAP - timedelta(milliseconds=1), 1),
    (GAP + timedelta(milliseconds=1), 2),
    (GAP + timedelta(microseconds=1), 2),
])
def test_a_visit_ends_only_when_the_gap_exceeds_35_minutes(spark, gap, visits):
    rows = _visits(spark, [("s", timedelta(0), "pageview"), ("s", gap, "pageview")])
    assert len(rows) == visits


def test_gaps_chain_and_sessions_are_separate(spark):
    rows = _visits(spark, [
        ("a", timedelta(0), "pageview"),
        ("a", GAP, "pageview"),
        ("a", 2 * GAP, "pageview"),
        ("a", 3 * GAP + timedelta(milliseconds=1), "pageview"),
        ("b", timedelta(minutes=1), "pageview"),
    ])
    assert [(r["session_id"], r["events"]) for r in rows] == [("a", 3), ("a", 1), ("b", 1)]
    assert rows[0]["visit_start"] == T0
    assert rows[0]["visit_end"] == T0 + 2 * GAP
    assert rows[0]["duration_ms"] == 70 * 60 * 1000


@pytest.mark.parametrize(("kinds", "bounce"), [
    (["pageview"], True),
    (["pageview", "error"], True),
    (["pageview", "pageview"], False),
    (["pageview", "add_to_cart"], False),
    (["pageview", "order"], False),
    (["error"], False),
])
def test_bounce_is_one_pageview_and_no_cart_or_order(spark, kinds, bounce):
    rows = [("s", timedelta(seconds=i), k, *(("5.00", 1) if k == "order" else ()))
            for i, k in enumerate(kinds)]
    (visit,) = _visits(spark, rows)
    assert visit["is_bounce"] is bounce


def test_visit_totals_error_visits_and_merged_experiments(spark):
    (visit,) = _visits(spark, [
        ("s", timedelta(0), "pageview", None, None, [("a", "control", False)]),
        ("s", timedelta(seconds=5), "error", None, None, [("a", "control", False)]),
        ("s", timedelta(seconds=9), "add_to_cart", None, None,
         [("a", "control", True), ("b", "treatment", False)]),
        ("s", timedelta(seconds=20), "order", "10.25", 2, [("a", "control", False)]),
        ("s", timedelta(seconds=30), "order", "4.75", 1, [("a", "control", False)]),
    ])
    assert (visit["events"], visit["pageviews"], visit["add_to_carts"], visit["orders"],
            visit["errors"], visit["units"]) == (5, 1, 1, 2, 1, 3)
    assert visit["revenue"] == Decimal("15.00")
    assert visit["is_error_visit"] is True
    assert visit["is_bounce"] is False
    assert [e.asDict() for e in visit["experiments"]] == [
        {"id": "a", "variant": "control", "qualified": True, "exposed_at": T0 +
         timedelta(seconds=9), "exposed_orders": 2, "exposed_revenue": Decimal("15.00"),
         "exposed_parts": {"count[order]": 2.0, "sum_revenue[order]": 15.0}},
        {"id": "b", "variant": "treatment", "qualified": False, "exposed_at": None,
         "exposed_orders": 0, "exposed_revenue": Decimal("0.00"), "exposed_parts": None},
    ]
    assert visit["metric_parts"] == {"visits": 1.0, "bounce_visits": 0.0, "error_visits": 1.0,
                                     "count[order]": 2.0, "sum_revenue[order]": 15.0}


def test_every_event_of_a_visit_counts_for_what_the_visit_lists(spark):
    seconds = timedelta(seconds=1)
    targets = _targets(spark, [
        ("s", 0 * seconds, "pageview", None, None, []),
        ("s", 5 * seconds, "pageview", None, None, [("a", "control", False)]),
        ("s", 9 * seconds, "error", None, None, []),
        ("t", 0 * seconds, "pageview", None, None, []),
    ])
    assert targets["e0"] == targets["e1"] == targets["e2"] == [("a", "control", "assigned")]
    assert targets["e3"] == []


def test_the_qualified_population_counts_from_the_first_exposure_on(spark):
    seconds = timedelta(seconds=1)
    # ``qualified`` absent from the beacon (NULL) is no exposure.
    listed, exposed = [("a", "control", None)], [("a", "control", True)]
    targets = _targets(spark, [
        ("s", 0 * seconds, "pageview", None, None, listed),
        ("s", 5 * seconds, "pageview", None, None, exposed),
        ("s", 5 * seconds, "add_to_cart", None, None, listed),
        ("s", 9 * seconds, "order", "3.00", 1, []),
        ("s", 20 * seconds, "pageview", None, None, exposed),
        ("s", GAP + 21 * seconds, "pageview", None, None, listed),
    ])
    both = [("a", "control", "assigned"), ("a", "control", "qualified")]
    assert targets["e0"] == [("a", "control", "assigned")], "before the exposure"
    assert targets["e1"] == targets["e2"] == both, "the exposure and its ties"
    assert targets["e3"] == targets["e4"] == both, "after it, listed or not"
    assert targets["e5"] == [("a", "control", "assigned")], "a new visit, not exposed"


def test_exposure_to_an_experiment_in_another_variant_counts_for_both(spark):
    visits = _visits(spark, [
        ("s", timedelta(0), "pageview", None, None, [("a", "treatment", True)]),
        ("s", timedelta(seconds=5), "order", "2.00", 1, [("a", "control", True)]),
    ])
    entries = {(e["id"], e["variant"]): e for e in visits[0]["experiments"]}
    assert entries[("a", "control")]["exposed_at"] == T0, "the first exposure to a"
    assert entries[("a", "treatment")]["exposed_orders"] == 1


def test_a_visit_counts_for_its_entries_and_the_qualified_population_it_was_exposed_to(spark):
    visits = assemble_visits(with_visit_start(_events(spark, [
        ("s", timedelta(0), "pageview", None, None, [("a", "control", False)]),
        ("s", timedelta(seconds=5), "pageview", None, None,
         [("a", "control", True), ("b", "x", None)]),
        ("t", timedelta(0), "pageview", None, None, []),
    ]), GAP), CATALOG)
    targets = sorted((r["session_id"], r["experiment_id"], r["variant"], r["population"])
                     for r in visit_targets(visits).collect())
    assert targets == [("s", "a", "control", "assigned"), ("s", "a", "control", "qualified"),
                       ("s", "b", "x", "assigned")]


def test_lineage_columns_make_a_silver_row(spark):
    visits = assemble_visits(with_visit_start(
        _events(spark, [("s", timedelta(0), "pageview")]), GAP), CATALOG)
    row = with_lineage(visits, "batch").first()
    assert row["layer"] == "batch"
    assert row["visit_date"] == T0.date()
    assert row["computed_at"] is not None


def test_a_visit_keeps_each_dimension_of_its_first_event_that_has_the_property(spark):
    rows = [bronze_row("e1", T0, device=None, country="DE"),
            bronze_row("e2", T0 + timedelta(seconds=5), device="mobile", country="FR"),
            bronze_row("e3", T0 + timedelta(seconds=9), device="desktop")]
    (visit,) = assemble_visits(with_visit_start(bronze_frame(spark, rows), GAP),
                               CATALOG_BY_DIMENSIONS).collect()
    assert visit["dimensions"] == {"device": "mobile", "country": "DE"}
