from datetime import datetime, timedelta
from decimal import Decimal

from abstream.schemas import EVENTS, EXPERIMENT_METRICS, SESSIONS
from abstream.stages.metrics import Windowing, experiment_metrics, with_lineage

T0 = datetime(2026, 1, 5, 10, 0)
FIVE = Windowing(timedelta(minutes=5))


def _events(spark, rows):
    """rows: (minute, visitor, type, entries[, revenue, units, page_load])."""
    data = []
    for i, (minute, visitor, kind, entries, *rest) in enumerate(rows):
        revenue, units, load = ([*rest, None, None, None])[:3]
        ts = T0 + timedelta(minutes=minute)
        data.append((f"e{i}", ts, "s", visitor, kind, "/", entries,
                     Decimal(revenue) if revenue else None, units, load, "f", T0, T0,
                     ts.date()))
    return spark.createDataFrame(data, EVENTS)


def _visits(spark, rows):
    """rows: (minute, bounce, error_visit, entries)."""
    data = [(f"s{i}", T0 + timedelta(minutes=m), T0 + timedelta(minutes=m), 0, "v", 1, 1, 0, 0,
             Decimal(0), 0, 0, bounce, error, entries, "speed", T0, T0.date())
            for i, (m, bounce, error, entries) in enumerate(rows)]
    return spark.createDataFrame(data, SESSIONS)


def _rows(df):
    return {(r["experiment_id"], r["variant"], r["population"], r["window_start"].minute): r
            for r in df.collect()}


def test_event_metrics_by_attribution_population_and_window(spark):
    a_ctl, a_ctl_q = ("a", "control", False), ("a", "control", True)
    a_trt_q, b_x = ("a", "treatment", True), ("b", "x", False)
    events = _events(spark, [
        (0, "v1", "pageview", [a_ctl, b_x], None, None, 800),
        (1, "v1", "pageview", [a_ctl_q, b_x], None, None, 1200),
        (2, "v1", "add_to_cart", [a_ctl_q]),
        (3, "v1", "order", [a_ctl_q], "20.00", 2),
        (4, "v2", "order", [a_ctl], "5.50", 1),
        (4, "v2", "error", [a_ctl]),
        (6, "v3", "order", [a_trt_q], "7.00", 3),
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
    assert rows[("b", "x", "assigned", 0)]["events"] == 2
    assert ("b", "x", "qualified", 0) not in rows, "no row for a population without activity"
    assert all(r["visits"] == 0 for r in rows.values())


def test_visit_metrics_count_each_visit_once_per_experiment_variant(spark):
    visits = _visits(spark, [
        (0, True, False, [("a", "control", True), ("b", "x", False)]),
        (1, False, True, [("a", "control", False)]),
        (7, True, True, [("a", "control", False)]),
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
    entries = [("a", "control", True)]
    both = experiment_metrics(_events(spark, [(1, "v1", "pageview", entries)]),
                              _visits(spark, [(1, True, False, entries)]), FIVE)
    row = _rows(both)[("a", "control", "qualified", 0)]
    assert (row["events"], row["visits"], row["bounces"], row["visitors"]) == (1, 1, 1, 1)


def test_sliding_windows_overlap(spark):
    events = _events(spark, [(6, "v1", "pageview", [("a", "control", False)])])
    sliding = experiment_metrics(events, None, Windowing(timedelta(minutes=10),
                                                         timedelta(minutes=5)))
    starts = sorted(r["window_start"] for r in sliding.collect()
                    if r["population"] == "assigned")
    assert starts == [T0, T0 + timedelta(minutes=5)]


def test_gold_rows_have_the_table_schema(spark):
    events = _events(spark, [(1, "v1", "pageview", [("a", "control", False)])])
    gold = with_lineage(experiment_metrics(events, None, FIVE), "speed")
    assert gold.columns == EXPERIMENT_METRICS.fieldNames()
    assert gold.first()["layer"] == "speed"
