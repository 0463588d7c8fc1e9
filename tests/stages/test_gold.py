from datetime import datetime, timedelta
from decimal import Decimal

from abstream.schemas import EXPERIMENT_METRICS, with_window_date
from abstream.stages.gold import Windowing, experiment_metrics, with_lineage
from abstream.stages.sessions import (
    assemble_visits,
    event_targets,
    visit_entries,
    visit_targets,
    with_visit_start,
)
from tests.helpers import CATALOG, bronze_frame, bronze_row

T0 = datetime(2026, 1, 5, 10, 0)
FIVE = Windowing(timedelta(minutes=5))


def _events(spark, rows):
    """rows: (minute, session, type, entries[, revenue, units, page_load]), sessionized:
    the rows of the events and of the visits, each with what it counts for."""
    data = []
    for i, (minute, session, kind, entries, *rest) in enumerate(rows):
        revenue, units, load = ([*rest, None, None, None])[:3]
        ts = T0 + timedelta(minutes=minute)
        data.append(bronze_row(f"e{i}", ts, session_id=session, visitor_id=f"v-{session}",
                               type=kind, experiments=entries, revenue=revenue or None,
                               units=units, page_load_ms=load))
    started = with_visit_start(bronze_frame(spark, data), timedelta(minutes=35))
    visits = assemble_visits(started, CATALOG)
    return event_targets(started, visit_entries(visits)), visit_targets(visits)


def _rows(df):
    return {(r["experiment_id"], r["variant"], r["population"], r["window_start"].minute): r
            for r in df.collect()}


def test_event_metrics_by_population_and_window(spark):
    a_ctl, a_ctl_q = ("a", "control", False), ("a", "control", True)
    a_trt_q, b_x = ("a", "treatment", True), ("b", "x", False)
    events, _ = _events(spark, [
        (0, "s1", "pageview", [a_ctl, b_x], None, None, 800),
        (1, "s1", "pageview", [a_ctl_q], None, None, 1200),
        (2, "s1", "add_to_cart", []),
        (3, "s1", "order", [a_ctl], "20.00", 2),
        (4, "s2", "order", [a_ctl], "5.50", 1),
        (4, "s2", "error", []),
        (6, "s3", "order", [a_trt_q], "7.00", 3),
    ])
    rows = _rows(experiment_metrics(events, None, FIVE))
    assigned = rows[("a", "control", "assigned", 0)]
    assert (assigned["events"], assigned["pageviews"], assigned["add_to_carts"],
            assigned["orders"], assigned["units"], assigned["errors"]) == (6, 2, 1, 2, 3, 1)
    assert assigned["revenue"] == Decimal("25.50")
    assert assigned["revenue_sq"] == Decimal("430.2500")
    assert (assigned["page_load_ms_sum"], assigned["page_load_count"]) == (2000, 2)
    assert assigned["visitors"] == 2
    qualified = rows[("a", "control", "qualified", 0)]
    assert (qualified["events"], qualified["pageviews"], qualified["orders"],
            qualified["revenue"], qualified["visitors"]) == (3, 1, 1, Decimal("20.00"), 1)
    assert rows[("a", "treatment", "qualified", 5)]["orders"] == 1
    assert rows[("b", "x", "assigned", 0)]["events"] == 4, "every event of the visit"
    assert ("b", "x", "qualified", 0) not in rows, "no row for a population without activity"
    assert all(r["visits"] == 0 for r in rows.values())


def test_visit_metrics_count_each_visit_once_per_experiment_variant(spark):
    _, visits = _events(spark, [
        (0, "s1", "pageview", [("a", "control", True), ("b", "x", False)]),
        (1, "s2", "error", [("a", "control", False)]),
        (7, "s3", "error", [("a", "control", False)]),
    ])
    rows = _rows(experiment_metrics(None, visits, FIVE))
    first = rows[("a", "control", "assigned", 0)]
    assert (first["visits"], first["bounces"], first["error_visits"]) == (2, 1, 1)
    assert (first["events"], first["orders"], first["visitors"]) == (0, 0, 0)
    qualified = rows[("a", "control", "qualified", 0)]
    assert (qualified["visits"], qualified["bounces"], qualified["error_visits"]) == (1, 1, 0)
    assert rows[("a", "control", "assigned", 5)]["visits"] == 1
    assert rows[("b", "x", "assigned", 0)]["visits"] == 1


def test_events_and_visits_meet_in_one_row(spark):
    events, visits = _events(spark, [(1, "s1", "pageview", [("a", "control", True)])])
    row = _rows(experiment_metrics(events, visits, FIVE))[("a", "control", "qualified", 0)]
    assert (row["events"], row["visits"], row["bounces"], row["visitors"]) == (1, 1, 1, 1)


def test_sliding_windows_overlap(spark):
    events, _ = _events(spark, [(6, "s1", "pageview", [("a", "control", False)])])
    sliding = experiment_metrics(events, None, Windowing(timedelta(minutes=10),
                                                         timedelta(minutes=5)))
    starts = sorted(r["window_start"] for r in sliding.collect()
                    if r["population"] == "assigned")
    assert starts == [T0, T0 + timedelta(minutes=5)]


def test_gold_rows_have_the_table_schema(spark):
    events, _ = _events(spark, [(1, "s1", "pageview", [("a", "control", False)])])
    gold = with_lineage(experiment_metrics(events, None, FIVE), "speed")
    assert gold.columns == with_window_date(EXPERIMENT_METRICS).fieldNames()
    row = gold.first()
    assert row["layer"] == "speed"
    assert row["window_date"] == row["window_start"].date()
