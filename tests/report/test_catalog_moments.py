"""Every kind of definition, computed by the report's Spark moments from visits the
sessions stage assembled, equals the plain-Python reference of docs/metrics.md: per
experiment, variant and population, each definition's units and sums."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from gbstats.models.statistics import ProportionStatistic, SampleMeanStatistic
from pyspark.sql import functions as F

from abstream.config import ReportSettings
from abstream.generator.write import GeneratorSettings, generate
from abstream.metrics.definitions import Catalog
from abstream.report.build import Report, experiment_report
from abstream.report.moments import VariantSeries, coverage, served_series
from abstream.report.statistics import Z_RANK
from abstream.report.text import coverage_lines
from abstream.stages.sessions import assemble_visits, with_visit_start
from tests import reference
from tests.helpers import CATALOG as DEFAULT
from tests.helpers import bronze_frame, bronze_row, landing_records
from tests.report.test_gbstats import assert_equal_to_growthbook

CATALOG = Catalog.model_validate({"definitions": [
    {"name": "buyers", "kind": "proportion", "events": "order"},
    {"name": "pageviews", "kind": "mean", "events": "pageview"},
    {"name": "bulk_orders", "kind": "mean",
     "events": {"type": "order", "where": {"units": {"ge": 2}}}},
    {"name": "revenue_capped", "kind": "mean", "events": "order", "value": "revenue",
     "cap": {"absolute": 40}},
    {"name": "revenue_p90", "kind": "mean", "events": "order", "value": "revenue",
     "cap": {"percentile": 0.9}},
    {"name": "orders_per_visit", "kind": "mean", "events": "order", "unit": "visit"},
    {"name": "slow_pageviews", "kind": "ratio",
     "numerator": {"events": {"type": "pageview", "where": {"page_load_ms": {"gt": 1500}}}},
     "denominator": {"events": "pageview"}},
    {"name": "order_value", "kind": "ratio", "numerator": {"events": "order", "value": "revenue"},
     "denominator": {"events": "order"}, "cap": {"absolute": 60}},
    {"name": "bounce_rate", "kind": "ratio", "numerator": {"visits": "bounce"},
     "denominator": {"visits": "all"}},
    {"name": "home_or_cart", "kind": "proportion",
     "events": {"where": {"page": {"in": ["/", "/cart"]}}}},
    {"name": "buyers_first_hour", "kind": "proportion", "events": "order",
     "window": {"length": "1 hour"}},
    {"name": "revenue_day_after", "kind": "mean", "events": "order", "value": "revenue",
     "window": {"delay": "30 minutes", "length": "1 day"}},
    {"name": "orders_per_visit_2h", "kind": "ratio", "numerator": {"events": "order"},
     "denominator": {"visits": "all"}, "window": {"length": "2 hours"}},
    {"name": "load_p90", "kind": "quantile", "events": "pageview", "value": "page_load_ms",
     "quantile": 0.9},
    {"name": "order_median_per_visit", "kind": "quantile", "events": "order",
     "value": "revenue", "quantile": 0.5, "unit": "visit", "window": {"length": "1 day"}},
]})


@dataclass(frozen=True)
class Served:
    """The reference's visits, and the series the report's moments make of the visits the
    sessions stage assembled from the same events."""

    visits: list[dict]
    times: list[datetime]
    series: dict[tuple[str, str, str], VariantSeries]


@pytest.fixture(scope="module")
def served(spark, tmp_path_factory) -> Served:
    landing = tmp_path_factory.mktemp("catalog") / "landing"
    generate(GeneratorSettings(events=6_000, seed=5, late_rate=0, duplicate_rate=0,
                               malformed_rate=0, file_events=6_000,
                               start=datetime(2026, 1, 5, tzinfo=UTC)), landing)
    events = [{**e, "ts": reference.parse_ts(e["event_ts"])}
              for e in reference.valid_unique_events(landing_records(landing))]
    started = with_visit_start(_bronze(spark, events), timedelta(minutes=35))
    visits = assemble_visits(started, CATALOG).withColumn("final", F.lit(True))
    times, series = served_series(visits, 3, CATALOG)
    return Served(reference.visits(events), times, series)


def _bronze(spark, events):
    return bronze_frame(spark, [bronze_row(
        e["event_id"], e["ts"].replace(tzinfo=None), session_id=e["session_id"],
        visitor_id=e["visitor_id"], type=e["type"], page=e.get("page"),
        revenue=None if e.get("revenue") is None else str(e["revenue"]),
        units=e.get("units"), page_load_ms=e.get("page_load_ms"),
        experiments=[(x["id"], x["variant"], x.get("qualified"))
                     for x in e.get("experiments") or []]) for e in events])


def test_each_kind_of_definition_has_the_units_and_sums_of_the_reference(served):
    compared = 0
    for definition in CATALOG.definitions:
        if definition.kind == "quantile":
            continue
        expected = reference.unit_sums(
            served.visits, definition.model_dump(mode="json", by_alias=True, exclude_none=True))
        assert {(e, p, v) for e, v, p in expected} == set(served.series), definition.name
        for (experiment, variant, population), sums in expected.items():
            key = (experiment, variant, population)
            moments = served.series[(experiment, population, variant)].total
            found = {what: moments.sums.get(f"{definition.name}#{what}", 0.0) for what in sums}
            assert found == pytest.approx(sums, rel=1e-9, abs=1e-6), (definition.name, key)
            compared += len(sums)
    assert compared > 500


def _per_unit(visit_list, definition, experiment, population, variant):
    """Each unit's value of a mean or a proportion, as the reference counts it."""
    spec = definition.model_dump(by_alias=True, exclude_none=True)
    values: dict[str, float] = {}
    for visit in visit_list:
        for e, v, p in reference.visit_targets(visit):
            if (e, v, p) == (experiment, variant, population):
                since = visit["exposure"][e] if p == "qualified" else None
                values[visit["visitor"]] = values.get(visit["visitor"], 0.0) + \
                    reference.measure(visit, spec, since)
    return np.array(list(values.values()))


@pytest.mark.parametrize(("name", "population"), [
    ("buyers", "assigned"), ("revenue_p90", "assigned"), ("revenue_capped", "qualified")])
def test_a_proportion_and_capped_means_equal_growthbook_on_the_units_values(
        served, name, population):
    """The comparison of a proportion (GrowthBook's ``ProportionStatistic``) and of means
    capped at an absolute value and at a percentile of the units' totals (capped here in
    numpy), fixed and sequential, equals gbstats' ``TwoSidedTTest`` and
    ``SequentialTwoSidedTTest``."""
    definition = CATALOG.get(name)
    experiment = "checkout_button"
    report = experiment_report(
        experiment, population, totals={},
        series={v: served.series[(experiment, population, v)] for v in ("control", "treatment")},
        times=served.times, settings=ReportSettings(min_units=2), catalog=CATALOG)
    (result,) = [c.result for c in report.comparisons if c.metric == name]

    control, treatment = (_per_unit(served.visits, definition, experiment, population, v)
                          for v in ("control", "treatment"))
    if definition.kind == "proportion":
        control, treatment = (control > 0).astype(float), (treatment > 0).astype(float)
        statistic = [ProportionStatistic(n=len(a), sum=float(a.sum()))
                     for a in (control, treatment)]
    else:
        cap = definition.cap.absolute if definition.cap.absolute is not None else \
            float(np.percentile(np.concatenate([control, treatment]),
                                definition.cap.percentile * 100))
        statistic = [SampleMeanStatistic(n=len(a), sum=float(np.minimum(a, cap).sum()),
                                         sum_squares=float((np.minimum(a, cap) ** 2).sum()))
                     for a in (control, treatment)]
    assert_equal_to_growthbook(result, *statistic)


@pytest.mark.parametrize("name", ["load_p90", "order_median_per_visit"])
def test_a_quantile_has_the_order_statistics_and_unit_sums_of_the_reference(served, name):
    """Fewer events per variant than the sketch keeps: its quantiles are the exact order
    statistics."""
    definition = CATALOG.get(name)
    expected = reference.quantile_sums(
        served.visits, definition.model_dump(mode="json", by_alias=True, exclude_none=True),
        Z_RANK)
    found = {(e, v, p): s.quantiles[name] for (e, p, v), s in served.series.items()
             if name in s.quantiles}
    assert set(found) == set(expected)
    for key, sums in expected.items():
        moments = found[key]
        assert {k: getattr(moments, k) for k in sums} == pytest.approx(sums), (name, key)
    assert sum(s["n"] for s in expected.values()) > 200


def test_a_window_counts_fewer_events_than_no_window(served):
    """The windows of this catalog cut: the reference they are checked against is not
    the unwindowed one."""
    def sums(name: str) -> float:
        spec = CATALOG.get(name).model_dump(mode="json", by_alias=True, exclude_none=True)
        return sum(s["x"] for s in reference.unit_sums(served.visits, spec).values())

    assert 0 < sums("buyers_first_hour") < sums("buyers")
    whole = CATALOG.get("revenue_day_after").model_copy(update={"window": None})
    spec = whole.model_dump(mode="json", by_alias=True, exclude_none=True)
    assert sums("revenue_day_after") < sum(
        s["x"] for s in reference.unit_sums(served.visits, spec).values())


def test_visits_computed_before_a_definition_are_counted_and_named(spark):
    """Visits assembled with the default catalog lack the parts of a new definition: the
    report counts them, says when they started, and how to compute them again."""
    t0 = datetime(2026, 1, 5, 10, 0)
    rows = [bronze_row(f"e{i}", t0 + timedelta(hours=i), session_id=f"s{i}", type="order",
                       revenue="5.00", units=1) for i in range(3)]
    visits = assemble_visits(with_visit_start(bronze_frame(spark, rows), timedelta(minutes=35)),
                             DEFAULT)
    newer = Catalog(definitions=[*DEFAULT.definitions, CATALOG.get("bulk_orders")])
    found = coverage(visits, newer)
    assert found["conversion_rate"].without == 0
    bulk = found["bulk_orders"]
    assert (bulk.visits, bulk.without) == (3, 3)
    assert (bulk.without_from, bulk.without_to) == (t0.replace(tzinfo=UTC),
                                                    (t0 + timedelta(hours=2)).replace(tzinfo=UTC))
    report = Report(None, ReportSettings(), [], newer, found)
    assert coverage_lines(report) == [
        "bulk_orders: 3 of 3 visits (started 2026-01-05 10:00 to 2026-01-05 12:00 UTC) were "
        "computed before this definition: left out; `abstream batch --all` (or --from/--to "
        "over them) computes them again"]
    assert report.to_dict()["metrics"][-1]["visits_without_parts"] == 3
