"""`abstream report` on generated data run through both layers: the numbers against the
plain-Python reference and scipy, provisional and final marking, SRM, JSON and HTML."""

from __future__ import annotations

import json
import re
import subprocess
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from prometheus_client import CollectorRegistry
from scipy import stats
from statsmodels.stats.multitest import multipletests

from abstream.config import Config, ReportSettings
from abstream.io.latest_rows import LatestRows
from abstream.layout import Layout
from abstream.metrics.definitions import Dimension
from abstream.monitor.experiments import ExperimentCollector
from abstream.report.build import Report, build_report, experiment_report
from abstream.report.html import COLORS, render_html
from abstream.report.moments import EMPTY, Moments, VariantSeries
from abstream.report.publish import publish
from abstream.report.schedule import PeriodicPublisher
from abstream.report.statistics import adjusted_p_values
from abstream.report.text import render_text
from abstream.speed import Context
from tests import reference
from tests.helpers import CATALOG, landing_records

EXPERIMENT = "checkout_button"
CONTRACT_VARIANT = {"variant", "visitors", "visits", "bounces", "orders", "revenue", "units",
                    "error_visits", "pageviews"}
CONTRACT_COMPARISON = {"variant", "metric", "control_value", "variant_value", "lift", "ci_low",
                       "ci_high", "p_value", "difference", "difference_ci_low",
                       "difference_ci_high", "p_value_adjusted", "sequential_difference_ci_low",
                       "sequential_difference_ci_high", "sequential_significant", "mde"}
METRIC_NAMES = {"conversion_rate", "revenue_per_visitor", "bounce_rate", "error_visit_rate",
                "average_order_value"}




def _experiment(report: Report, experiment_id: str = EXPERIMENT, population: str = "assigned"):
    return next(e for e in report.experiments
                if (e.experiment_id, e.population) == (experiment_id, population))


def _comparison(experiment, metric: str, variant: str = "treatment"):
    return next(c.result for c in experiment.comparisons
                if (c.variant, c.metric) == (variant, metric))


def _reference(ctx: Context):
    events = reference.valid_unique_events(landing_records(Path(ctx.layout.landing)))
    visits = reference.visits(events, ctx.config.sessionize.gap)
    return events, reference.totals(visits), reference.per_visitor(visits)


def _linearised_delta_p(control: np.ndarray, variant: np.ndarray, x: int, y: int) -> float:
    """The delta method's p-value computed from raw per-visitor values (Welch's t)."""
    def ratio_and_variance(values: np.ndarray) -> tuple[float, float]:
        ratio = values[:, x].sum() / values[:, y].sum()
        linear = (values[:, x] - ratio * values[:, y]) / values[:, y].mean()
        return ratio, linear.var(ddof=1) / len(values)

    (rc, vc), (rv, vv) = ratio_and_variance(control), ratio_and_variance(variant)
    df = (vc + vv) ** 2 / (vc ** 2 / (len(control) - 1) + vv ** 2 / (len(variant) - 1))
    return float(2 * stats.t.sf(abs(rv - rc) / np.sqrt(vc + vv), df))


def test_speed_layer_numbers_are_marked_provisional_until_the_batch_layer_covers_them(served):
    assert served.provisional.experiments
    assert not any(e.final for e in served.provisional.experiments)
    assert all(e.final for e in served.final.experiments)
    before, after = _experiment(served.provisional), _experiment(served.final)
    for early, late in zip(before.variants, after.variants, strict=True):
        assert 0 < early.visitors <= late.visitors


def test_final_report_equals_the_reference_definitions_and_scipy(served):
    _, totals, visitors = _reference(served.ctx)
    for experiment in served.final.experiments:
        for variant in experiment.variants:
            key = (experiment.experiment_id, variant.variant, experiment.population)
            counts = variant.counts()
            expected = totals[key]
            assert counts["visitors"] == len(visitors[key])
            for name in ("visits", "bounces", "orders", "error_visits", "pageviews", "units"):
                assert counts[name] == expected[name], (key, name)
            assert round(counts["revenue"] * 100) == expected["revenue"]

    experiment = _experiment(served.final)
    control, treatment = (
        np.array(list(visitors[(EXPERIMENT, v, "assigned")].values()), dtype=float)
        for v in ("control", "treatment"))
    welch = stats.ttest_ind(treatment[:, 2] / 100, control[:, 2] / 100, equal_var=False)
    revenue = _comparison(experiment, "revenue_per_visitor")
    assert revenue.p_value == pytest.approx(welch.pvalue, rel=1e-9)
    interval = welch.confidence_interval(0.95)
    assert (revenue.fixed.low, revenue.fixed.high) == pytest.approx(
        (interval.low, interval.high), rel=1e-9)
    for metric, x, y in (("conversion_rate", 1, 0), ("bounce_rate", 3, 0),
                         ("error_visit_rate", 4, 0), ("average_order_value", 2, 1)):
        result = _comparison(experiment, metric)
        assert result.control_value == pytest.approx(control[:, x].sum() / control[:, y].sum()
                                                     / (100 if x == 2 else 1))
        assert result.p_value == pytest.approx(
            _linearised_delta_p(control, treatment, x, y), rel=1e-9), metric


def test_a_comparison_waits_for_enough_units_on_each_side(served):
    _, _, visitors = _reference(served.ctx)
    defaults = Config.model_validate({**served.ctx.config.model_dump(by_alias=True),
                                      "report": {}})
    assert defaults.report.min_units == 30
    experiment = _experiment(build_report(served.ctx.spark, served.ctx.layout, defaults))
    arms = [list(visitors[(EXPERIMENT, v, "assigned")].values())
            for v in ("control", "treatment")]
    shown = {c.metric for c in experiment.comparisons}
    assert ("conversion_rate" in shown) == (min(map(len, arms)) >= 30)
    buyers = min(sum(1 for values in arm if values[1] > 0) for arm in arms)
    assert buyers < 30 <= min(map(len, arms)), "the data has visitors enough, buyers not"
    assert "average_order_value" not in shown and "conversion_rate" in shown


def test_rolling_unique_visitors_count_the_last_hour_and_day(served):
    events, _, _ = _reference(served.ctx)
    as_of = served.final.as_of
    assert as_of is not None
    for experiment in served.final.experiments:
        for variant in experiment.variants:
            for name, period in (("visitors_1h", timedelta(hours=1)),
                                 ("visitors_24h", timedelta(hours=24))):
                exact = {e["visitor_id"] for e in events if e["ts"] >= as_of - period
                         for entry in e["experiments"]
                         if (entry["id"], entry["variant"]) == (experiment.experiment_id,
                                                               variant.variant)
                         and (experiment.population == "assigned" or entry["qualified"])}
                estimate = variant.to_dict()[name]
                assert abs(estimate - len(exact)) <= max(2, 0.05 * len(exact)), name


def test_the_series_is_cumulative_and_ends_at_the_totals(served):
    experiment = _experiment(served.final)
    for variant in experiment.variants:
        counts = experiment.visitors_over_time[variant.variant]
        assert counts == sorted(counts) and counts[-1] == variant.visitors
    conversion = experiment.comparisons_over_time[("treatment", "conversion_rate")]
    assert conversion[-1] == _comparison(experiment, "conversion_rate")
    assert len(experiment.times) == len(conversion) >= 2


def test_json_document_follows_the_contract(served):
    document = json.loads(json.dumps(served.final.to_dict()))
    assert document["experiments"]
    for experiment in document["experiments"]:
        assert experiment.keys() >= {"experiment_id", "population", "final", "srm_p_value",
                                     "variants", "comparisons"}
        assert experiment["final"] is True
        for variant in experiment["variants"]:
            assert variant.keys() >= CONTRACT_VARIANT
        assert {c["metric"] for c in experiment["comparisons"]} == METRIC_NAMES
        for comparison in experiment["comparisons"]:
            assert comparison.keys() >= CONTRACT_COMPARISON
            assert comparison["ci_low"] <= comparison["lift"] <= comparison["ci_high"]
            assert 0 <= comparison["p_value"] <= 1
            # The sequence holds at every look, so it is wider than the one-look interval.
            assert comparison["sequential_difference_ci_low"] < comparison["difference_ci_low"]
            assert comparison["difference_ci_high"] < comparison["sequential_difference_ci_high"]
            assert comparison["sequential_significant"] == (
                comparison["sequential_difference_ci_low"] > 0
                or comparison["sequential_difference_ci_high"] < 0)
            assert comparison["p_value_adjusted"] >= comparison["sequential_p_value"]
            assert comparison["mde"] > 0
        raw = [c["sequential_p_value"] for c in experiment["comparisons"]]
        assert [c["p_value_adjusted"] for c in experiment["comparisons"]] == pytest.approx(
            list(multipletests(raw, method="holm")[1]), rel=1e-12)
    assert (document["inference"], document["correction"]) == ("sequential", "holm")


def test_text_shows_every_number_and_the_status(served):
    text = render_text(served.final)
    for header in ("visitors", "visits", "bounce", "orders", "units", "conv.", "revenue",
                   "rev/visitor", "AOV", "error visits", "load ms", "1h visitors",
                   "24h visitors", "lift", "CI", "p adj.", "MDE", "confidence sequences",
                   "Holm over each experiment"):
        assert header in text
    assert text.count(": final;") == len(served.final.experiments)
    assert ": provisional;" in render_text(served.provisional)


def test_srm_is_checked_against_the_configured_allocation(served):
    equal = _experiment(served.final)
    assert equal.srm_p_value > 0.001 and not equal.srm_flagged
    skewed = Config.model_validate({
        **served.ctx.config.model_dump(by_alias=True),
        "report": {"allocation": {EXPERIMENT: {"control": 0.7, "treatment": 0.3}}}})
    report = build_report(served.ctx.spark, served.ctx.layout, skewed)
    flagged = _experiment(report)
    counts = [v.visitors for v in flagged.variants]
    assert flagged.srm_p_value == pytest.approx(
        stats.chisquare(counts, [sum(counts) * 0.7, sum(counts) * 0.3]).pvalue, rel=1e-9)
    assert flagged.srm_flagged


def test_html_report_shows_the_plots_in_a_browser(served, tmp_path):
    page = tmp_path / "report.html"
    page.write_text(render_html(served.final), encoding="utf-8")
    text = page.read_text()
    assert not re.search(r"<script|<link|(?:src|href)=[\"']?https?:|url\((?!#)", text), \
        "nothing to load: readable offline"
    shot = tmp_path / "shot.png"
    subprocess.run(
        ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
         "--no-first-run", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}", "--hide-scrollbars",
         "--window-size=1280,1600", f"--screenshot={shot}", page.as_uri()],
        check=True, capture_output=True, timeout=120)
    image = np.asarray(Image.open(shot).convert("RGB"), dtype=int)
    assert image.shape[:2] == (1600, 1280)
    for color in COLORS[:2]:
        rgb = np.array([int(color[i:i + 2], 16) for i in (1, 3, 5)])
        close = (np.abs(image - rgb).sum(axis=2) < 40).sum()
        assert close > 500, f"the plotted {color} series is not on screen ({close} pixels)"


def _served_values(registry: CollectorRegistry, report: Report) -> None:
    """Every published number of ``report`` is what the registry serves."""
    better = {m.name: m.better for m in CATALOG.definitions}
    for e in report.experiments:
        key = {"experiment": e.experiment_id, "population": e.population}
        assert registry.get_sample_value("abstream_experiment_srm_p_value", key) == \
            pytest.approx(e.srm_p_value)
        for v in e.variants:
            assert registry.get_sample_value("abstream_experiment_visitors",
                                             {**key, "variant": v.variant}) == v.visitors
        for c in e.comparisons:
            labels = {**key, "variant": c.variant, "metric": c.metric, "role": c.role,
                      "better": better[c.metric]}
            interval = c.result.sequential_lift
            for name, value in (("lift", c.result.lift), ("lift_ci_low", interval.low),
                                ("lift_ci_high", interval.high),
                                ("p_value_adjusted", c.p_value_adjusted)):
                assert registry.get_sample_value(f"abstream_experiment_{name}", labels) == \
                    pytest.approx(value), (name, labels)
    assert registry.get_sample_value("abstream_experiment_srm_threshold") == \
        report.settings.srm_threshold


def test_published_results_are_what_the_exporter_serves(served):
    ctx = served.ctx
    registry = CollectorRegistry()
    registry.register(ExperimentCollector(ctx.layout.experiment_results))
    assert registry.get_sample_value("abstream_experiment_results_published_timestamp_seconds") \
        is None, "nothing published yet, nothing served"
    first = datetime(2026, 3, 1, 12, tzinfo=UTC)
    publish(ctx.spark, ctx.layout, served.provisional, first)
    _served_values(registry, served.provisional)
    later = first + timedelta(minutes=15)
    publish(ctx.spark, ctx.layout, served.final, later)
    _served_values(registry, served.final)
    assert registry.get_sample_value(
        "abstream_experiment_results_published_timestamp_seconds") == later.timestamp()


def test_run_publishes_the_report_every_publish_every(served, caplog):
    """``abstream run``'s publisher: each period the report again, a new version of the
    table the exporter and ``abstream serve`` read, with the final report's rows."""
    ctx = served.ctx
    results = LatestRows(ctx.layout.experiment_results)
    results.rows()
    before = results.version
    # Without the breakdowns (their publishing is the API's tests'): a publish is quicker.
    config = ctx.config.model_copy(update={"metrics": ctx.config.metrics.model_copy(
        update={"dimensions": []})})
    publisher = PeriodicPublisher(ctx.spark, ctx.layout, config, timedelta(seconds=1))
    publisher.start()
    try:
        deadline = time.monotonic() + 120
        while publisher.published < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        publisher.stop()
    assert publisher.published >= 2
    rows = results.rows()
    assert results.version >= (before or 0) + 2
    lifts = {(r["experiment_id"], r["population"], r["variant"], r["metric"]): r["lift"]
             for r in rows if r["kind"] == "comparison"}
    assert lifts == pytest.approx({
        (e.experiment_id, e.population, c.variant, c.metric): c.result.lift
        for e in served.final.experiments for c in e.comparisons})
    assert all(r["document"] for r in rows if r["kind"] == "experiment")


def test_a_publish_that_fails_is_one_line_and_the_publisher_goes_on(served, tmp_path, caplog):
    """A results folder holding something that is not the table: each publish is refused
    in one line of warning, nothing is raised, and the next one tries again."""
    ctx = served.ctx
    layout = Layout.of(str(tmp_path / "data"))
    stray = Path(layout.experiment_results) / "notes.txt"
    stray.parent.mkdir(parents=True)
    stray.write_text("not a Delta table")
    config = ctx.config.model_copy(update={"data_dir": str(tmp_path / "data")})
    publisher = PeriodicPublisher(ctx.spark, layout, config, timedelta(minutes=5))
    with caplog.at_level("WARNING", logger="abstream.report.schedule"):
        publisher.publish_once()
        publisher.publish_once()
    failed = [r.getMessage() for r in caplog.records if r.name == "abstream.report.schedule"]
    assert len(failed) == 2 and publisher.published == 0
    assert all(m.startswith("publishing the report failed, trying again in 5 minutes: ")
               and "\n" not in m for m in failed), failed
    assert stray.read_text() == "not a Delta table"


def test_points_before_a_variant_has_visits_have_no_comparison():
    """An experiment that starts after others has empty points at the start of the shared
    time grid; a variant may be configured but not have visits yet."""
    visited = Moments(3, {f"conversion_rate#{k}": v for k, v in {
        "n": 3.0, "x": 1.0, "y": 4.0, "xx": 1.0, "yy": 6.0, "xy": 2.0, "with_y": 3.0}.items()})
    series = {v: VariantSeries([EMPTY, visited], final=False) for v in ("control", "treatment")}
    times = [datetime(2026, 1, 5, tzinfo=UTC), datetime(2026, 1, 6, tzinfo=UTC)]
    report = experiment_report(
        "late_start", "assigned", totals={}, series=series, times=times,
        settings=ReportSettings(min_units=2, allocation={
            "late_start": {"control": 1, "treatment": 1, "unseen": 1}}), catalog=CATALOG)
    over_time = report.comparisons_over_time[("treatment", "conversion_rate")]
    assert over_time[0] is None and over_time[1] is not None
    assert report.comparisons_over_time[("unseen", "conversion_rate")] == [None, None]
    assert [v.visitors for v in report.variants] == [3, 3, 0]


def test_a_breakdown_by_device_has_each_values_visitors_and_corrects_per_family(served):
    """``report --by device``: per value, the visitors of the reference whose first visit's
    device it is; the p-values adjusted over each experiment and population's values,
    metrics and variants, the guardrails apart."""
    events, _, visitors = _reference(served.ctx)
    device = {e["visitor_id"]: e["device"] for e in events}
    report = build_report(served.ctx.spark, served.ctx.layout, served.ctx.config, by="device")
    assert report.dimension == "device"
    values = {e.segment for e in report.experiments}
    assert values == {"desktop", "mobile", "tablet"}
    for e in report.experiments:
        for v in e.variants:
            expected = [u for u in visitors.get((e.experiment_id, v.variant, e.population), {})
                        if device[u] == e.segment]
            assert v.visitors == len(expected), (e.experiment_id, e.population, e.segment)
    family = [c for e in report.experiments
              if (e.experiment_id, e.population) == (EXPERIMENT, "assigned")
              for c in e.comparisons if c.role != "guardrail"]
    assert len(family) > 5
    assert [c.p_value_adjusted for c in family] == pytest.approx(
        adjusted_p_values([c.p_value_raw for c in family], "holm"))
    document = report.to_dict()
    assert document["dimension"] == "device"
    assert {e["value"] for e in document["experiments"]} == values
    assert set(document["experiments"][0]["variants"][0]) == {"variant", "visitors"}


def test_a_breakdown_leaves_out_the_visits_computed_before_its_dimension_and_says_so(served):
    """Visits computed before a dimension was declared have no value for it (not even
    ``(none)``): left out, counted, and the fix named."""
    config = served.ctx.config
    page = Dimension(name="page", property="page")
    later = config.model_copy(update={"metrics": config.metrics.model_copy(
        update={"dimensions": [*config.metrics.dimensions, page]})})
    report = build_report(served.ctx.spark, served.ctx.layout, later, by="page")
    assert report.experiments == []
    covered = report.dimension_coverage
    assert covered is not None and covered.without == covered.visits > 0
    text = render_text(report)
    assert f"page: {covered.visits:,} of {covered.visits:,} visits (started " in text
    assert "were computed before this dimension was declared: left out; `abstream batch " \
        "--all`" in text
    assert report.to_dict()["visits_without_dimension"] == covered.visits
    by_device = build_report(served.ctx.spark, served.ctx.layout, config, by="device")
    assert by_device.dimension_coverage is not None
    assert by_device.dimension_coverage.without == 0
