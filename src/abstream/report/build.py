"""The experiment report: per experiment and population, the variants' numbers from the
serving view, every variant compared with control, the sample-ratio check, and the
cumulative comparisons over time for the plots.

Counts (visits, orders, revenue, ...) are the serving view's, so they include the speed
layer's freshest events. Comparisons and visitor counts come from served visits with the
visitor as the unit (:mod:`abstream.report.moments`): a visit counts once it has closed.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import datetime
from itertools import groupby
from typing import Any

from pyspark.sql import SparkSession

from abstream.config import Config, MetricRole, ReportSettings
from abstream.layout import Layout
from abstream.metrics.definitions import Catalog, Definition
from abstream.report.moments import (
    EMPTY,
    Coverage,
    Moments,
    VariantSeries,
    coverage,
    covered,
    lacking_parts,
    served_series,
)
from abstream.report.segments import computed_with, dimension_named, segmented_visits, split
from abstream.report.statistics import (
    Comparison,
    Inference,
    Interval,
    adjusted_p_values,
    delta_ratio,
    quantile_test,
    srm_p_value,
    welch,
)
from abstream.serving.totals import VariantTotals, newest_window_end, variant_totals
from abstream.serving.view import serving_view, serving_visits
from abstream.stages.gold import Windowing

log = logging.getLogger(__name__)

CONTROL = "control"


def _quantile_results(definition: Definition, control: VariantSeries | None,
                      variant: VariantSeries | None, points: int, inference: Inference
                      ) -> list[Comparison | None]:
    """A quantile's comparison over all visits, at the last point: the series has no
    quantile at the points before it."""
    if points == 0:
        return []
    found = [s.quantiles.get(definition.name) if s else None for s in (control, variant)]
    if definition.min_units is not None:
        inference = replace(inference, min_units=definition.min_units)
    last = quantile_test(found[0], found[1], inference) \
        if found[0] is not None and found[1] is not None else None
    return [None] * (points - 1) + [last]


def compare(definition: Definition, control: Moments, variant: Moments,
            inference: Inference) -> Comparison | None:
    """A variant against control on one definition: a ratio by the delta method, a mean or
    a proportion by Welch's t."""
    name = definition.name
    if definition.min_units is not None:
        inference = replace(inference, min_units=definition.min_units)
    if definition.kind == "ratio":
        return delta_ratio(control.ratio(name), variant.ratio(name), inference)
    binary = definition.kind == "proportion"
    return welch(control.mean(name, binary), variant.mean(name, binary), inference)


#: The serving view's counts a variant reports.
COUNTS = ("visits", "bounces", "orders", "revenue", "units", "error_visits", "pageviews")


def _rate(numerator: float, denominator: float) -> float | None:
    return numerator / denominator if denominator else None


@dataclass(frozen=True)
class VariantReport:
    """One variant's numbers: counts from the serving view, visitors exact."""

    variant: str
    visitors: int
    totals: VariantTotals | None

    def counts(self) -> dict[str, Any]:
        t = self.totals
        counts = {name: getattr(t, name) if t else 0 for name in COUNTS}
        return {"variant": self.variant, "visitors": self.visitors, **counts,
                "revenue": float(counts["revenue"])}

    def to_dict(self) -> dict[str, Any]:
        c = self.counts()
        t = self.totals
        return {
            **c,
            "bounce_rate": _rate(c["bounces"], c["visits"]),
            "conversion_rate": _rate(c["orders"], c["visits"]),
            "revenue_per_visitor": _rate(c["revenue"], c["visitors"]),
            "average_order_value": _rate(c["revenue"], c["orders"]),
            "error_visit_rate": _rate(c["error_visits"], c["visits"]),
            "page_load_mean_ms": _rate(t.page_load_ms_sum, t.page_load_count) if t else None,
            "visitors_1h": t.visitors_1h if t else 0,
            "visitors_24h": t.visitors_24h if t else 0,
        }


def _bounds(prefix: str, interval: Interval | None) -> dict[str, float | None]:
    return {f"{prefix}_low": interval.low if interval else None,
            f"{prefix}_high": interval.high if interval else None}


@dataclass(frozen=True)
class MetricComparison:
    """One variant against control on one metric, judged by the report's rule: the
    configured inference's p-value, adjusted over the experiment and population's
    comparisons, below alpha."""

    variant: str
    definition: Definition
    role: MetricRole
    result: Comparison
    sequential: bool
    p_value_adjusted: float
    significant: bool

    @property
    def metric(self) -> str:
        return self.definition.name

    @property
    def interval(self) -> Interval | None:
        """The lift's interval of the configured inference."""
        r = self.result
        return r.sequential_lift if self.sequential else r.fixed_lift

    @property
    def p_value_raw(self) -> float:
        """The configured inference's p-value, before the adjustment."""
        r = self.result
        return r.sequential_p_value if self.sequential else r.p_value

    @property
    def mde(self) -> float:
        return self.result.sequential_mde if self.sequential else self.result.mde

    def to_dict(self) -> dict[str, Any]:
        r = self.result
        return {"variant": self.variant, "metric": self.metric, "role": self.role,
                "control_value": r.control_value, "variant_value": r.variant_value,
                "lift": r.lift, **_bounds("ci", r.fixed_lift), "p_value": r.p_value,
                "difference": r.difference, **_bounds("difference_ci", r.fixed),
                **_bounds("sequential_ci", r.sequential_lift),
                **_bounds("sequential_difference_ci", r.sequential),
                "sequential_p_value": r.sequential_p_value,
                "sequential_significant": r.sequential.excludes_zero(),
                "p_value_adjusted": self.p_value_adjusted, "significant": self.significant,
                "mde": self.mde}


@dataclass(frozen=True)
class ExperimentReport:
    experiment_id: str
    population: str
    final: bool
    weights: dict[str, float]
    srm_p_value: float | None
    srm_flagged: bool
    variants: list[VariantReport]
    comparisons: list[MetricComparison]
    #: The series' point ends, cumulative visitors per variant and comparisons per
    #: (variant, metric) at each point (None where there is too little data).
    times: list[datetime]
    visitors_over_time: dict[str, list[int]]
    comparisons_over_time: dict[tuple[str, str], list[Comparison | None]]
    #: The dimension value of a breakdown's report (``report --by``); its variants have
    #: visitors, not the serving view's counts.
    segment: str | None = None

    def to_dict(self) -> dict[str, Any]:
        segment = {} if self.segment is None else {"value": self.segment}
        variants = [{"variant": v.variant, "visitors": v.visitors} if self.segment is not None
                    else v.to_dict() for v in self.variants]
        return {
            "experiment_id": self.experiment_id, "population": self.population, **segment,
            "final": self.final, "srm_p_value": self.srm_p_value,
            "srm_flagged": self.srm_flagged, "allocation": self.weights,
            "variants": variants,
            "comparisons": [c.to_dict() for c in self.comparisons],
        }

    def series_dict(self) -> dict[str, Any]:
        """The series as JSON: the points' ends, cumulative visitors per variant, and per
        metric and variant the cumulative lift with its fixed interval and confidence
        sequence at each point (None where there was too little data)."""
        metrics: dict[str, dict[str, list[dict[str, float | None] | None]]] = {}
        for (variant, metric), results in self.comparisons_over_time.items():
            metrics.setdefault(metric, {})[variant] = [
                None if r is None else {"lift": r.lift, **_bounds("ci", r.fixed_lift),
                                        **_bounds("sequential_ci", r.sequential_lift)}
                for r in results]
        return {"times": [_iso(t) for t in self.times], "visitors": self.visitors_over_time,
                "metrics": metrics}


@dataclass(frozen=True)
class Report:
    as_of: datetime | None
    settings: ReportSettings
    experiments: list[ExperimentReport]
    catalog: Catalog
    #: Per definition, the served visits that have its parts.
    coverage: dict[str, Coverage] = field(default_factory=dict)
    #: The dimension the experiments are broken down by (``report --by``).
    dimension: str | None = None
    #: Of the served visits, those computed with the dimension.
    dimension_coverage: Coverage | None = None

    def to_dict(self) -> dict[str, Any]:
        s = self.settings
        by = {} if self.dimension is None else {"dimension": self.dimension}
        if self.dimension_coverage is not None:
            c = self.dimension_coverage
            by |= {"visits_without_dimension": c.without,
                   "without_dimension_from": _iso(c.without_from),
                   "without_dimension_to": _iso(c.without_to)}
        return {"as_of": _iso(self.as_of), "confidence": s.confidence, "inference": s.inference,
                "sequential_tuning": s.sequential_tuning, "correction": s.correction, **by,
                "metrics": [self._metric(d) for d in self.catalog.definitions],
                "experiments": [e.to_dict() for e in self.experiments]}

    def _metric(self, d: Definition) -> dict[str, Any]:
        c = self.coverage.get(d.name)
        return {"metric": d.name, "kind": d.kind, "unit": d.unit,
                "role": self.settings.metrics.get(d.name, d.role), "better": d.better,
                "fingerprint": d.fingerprint, "visits": c.visits if c else None,
                "visits_without_parts": c.without if c else None,
                "without_parts_from": _iso(c.without_from) if c else None,
                "without_parts_to": _iso(c.without_to) if c else None}


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat().replace("+00:00", "Z") if moment else None


def _variant_order(variants: set[str]) -> list[str]:
    return sorted(variants, key=lambda v: (v != CONTROL, v))


def _weights(experiment_id: str, variants: list[str], settings: ReportSettings
             ) -> dict[str, float]:
    configured = settings.allocation.get(experiment_id)
    if configured is None:
        return {v: 1.0 for v in variants}
    unknown = sorted(set(variants) - configured.keys())
    if unknown:
        log.warning("report.allocation of %s has no weight for %s: no SRM check",
                    experiment_id, ", ".join(unknown))
        return {}
    return dict(configured)


def _inference(settings: ReportSettings) -> Inference:
    return Inference(settings.confidence, settings.sequential_tuning, settings.min_units)


def _judged(found: list[tuple[str, Definition, Comparison]], settings: ReportSettings
           ) -> list[MetricComparison]:
    """The comparisons of one experiment and population, each with its p-value adjusted
    over all of them and whether it is significant by the configured rule."""
    sequential = settings.inference == "sequential"
    raw = [r.sequential_p_value if sequential else r.p_value for _, _, r in found]
    adjusted = adjusted_p_values(raw, settings.correction)
    alpha = 1 - settings.confidence
    return [MetricComparison(variant, d, settings.metrics.get(d.name, d.role),
                             result, sequential, p, p < alpha)
            for (variant, d, result), p in zip(found, adjusted, strict=True)]


def experiment_report(
    experiment_id: str,
    population: str,
    *,
    totals: dict[str, VariantTotals],
    series: dict[str, VariantSeries],
    times: list[datetime],
    settings: ReportSettings,
    catalog: Catalog,
) -> ExperimentReport:
    """One experiment and population from its gold totals and visit moments."""
    names = _variant_order(totals.keys() | series.keys()
                           | settings.allocation.get(experiment_id, {}).keys())
    weights = _weights(experiment_id, names, settings)
    total = {v: series[v].total if v in series else EMPTY for v in names}
    srm = srm_p_value([total[v].n for v in weights], list(weights.values())) \
        if weights else None
    variants = [VariantReport(v, total[v].n, totals.get(v)) for v in names]
    final = all(t.final for t in totals.values()) and all(s.final for s in series.values())

    def points(name: str) -> list[Moments]:
        return series[name].points if name in series else [EMPTY] * len(times)

    inference = _inference(settings)
    found: list[tuple[str, Definition, Comparison]] = []
    over_time: dict[tuple[str, str], list[Comparison | None]] = {}
    if CONTROL in names:
        for name in names:
            if name == CONTROL:
                continue
            for definition in catalog.definitions:
                if definition.kind == "quantile":
                    results = _quantile_results(definition, series.get(CONTROL),
                                                series.get(name), len(times), inference)
                else:
                    results = [compare(definition, c, v, inference)
                               for c, v in zip(points(CONTROL), points(name), strict=True)]
                over_time[(name, definition.name)] = results
                # The last point is the totals: its comparison is the experiment's.
                if results and results[-1] is not None:
                    found.append((name, definition, results[-1]))
    return ExperimentReport(
        experiment_id=experiment_id, population=population, final=final, weights=weights,
        srm_p_value=srm, srm_flagged=srm is not None and srm < settings.srm_threshold,
        variants=variants, comparisons=_judged(found, settings), times=times,
        visitors_over_time={v: [m.n for m in points(v)] for v in names},
        comparisons_over_time=over_time,
    )


def judged_by_family(reports: list[ExperimentReport], settings: ReportSettings
                     ) -> list[ExperimentReport]:
    """A breakdown's reports (one per experiment, population and dimension value), each
    comparison's p-value adjusted again over its family: every value, metric and variant of
    its experiment and population, the guardrails a family apart."""
    result = []
    alpha = 1 - settings.confidence
    ordered = sorted(reports, key=lambda r: (r.experiment_id, r.population))
    for _, group in groupby(ordered, key=lambda r: (r.experiment_id, r.population)):
        members = list(group)
        adjusted: dict[tuple[int, int], float] = {}
        for guardrails in (False, True):
            places = [(i, j) for i, r in enumerate(members) for j, c in enumerate(r.comparisons)
                      if (c.role == "guardrail") == guardrails]
            raw = [members[i].comparisons[j].p_value_raw for i, j in places]
            adjusted |= dict(zip(places, adjusted_p_values(raw, settings.correction),
                                 strict=True))
        result += [replace(r, comparisons=[
            replace(c, p_value_adjusted=adjusted[(i, j)], significant=adjusted[(i, j)] < alpha)
            for j, c in enumerate(r.comparisons)]) for i, r in enumerate(members)]
    return result


def build_report(spark: SparkSession, layout: Layout, config: Config, by: str | None = None
                 ) -> Report:
    """Read the serving view and served visits, and compare every variant with control;
    ``by``: per value of that dimension (no serving view counts)."""
    if by is not None:
        return _breakdown(spark, layout, config, by)
    settings, catalog = config.report, config.metrics.catalog
    serving = serving_view(spark, layout, name=None)
    visits = serving_visits(spark, layout)

    def served_totals() -> tuple[datetime | None, list[VariantTotals]]:
        as_of = newest_window_end(serving)
        log.info("totals per variant from the serving view")
        return as_of, variant_totals(serving, Windowing.of(config.metrics), as_of)

    # Two independent reads: Spark runs their jobs side by side, each filling the cores
    # the other leaves idle while the driver plans and commits.
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="report") as beside:
        served = beside.submit(served_totals)
        times, series = served_series(visits, settings.points, catalog)
        as_of, totals = served.result()
    keys = {(t.experiment_id, t.population) for t in totals} | {k[:2] for k in series}
    experiments = [experiment_report(
        experiment_id, population,
        totals={t.variant: t for t in totals
                if (t.experiment_id, t.population) == (experiment_id, population)},
        series={k[2]: s for k, s in series.items() if k[:2] == (experiment_id, population)},
        times=times, settings=settings, catalog=catalog)
        for experiment_id, population in sorted(keys)]
    return Report(as_of, settings, experiments, catalog, coverage(visits, catalog))


def dimension_reports(spark: SparkSession, layout: Layout, config: Config) -> list[Report]:
    """The report broken down by each declared dimension (``report --by``), in order."""
    return [build_report(spark, layout, config, d.name) for d in config.metrics.catalog.dimensions]


def _breakdown(spark: SparkSession, layout: Layout, config: Config, by: str) -> Report:
    """The report per value of the dimension ``by``, corrected per family."""
    settings, catalog = config.report, config.metrics.catalog
    dimension = dimension_named(catalog, by)
    visits = serving_visits(spark, layout)
    times, series = served_series(segmented_visits(visits, dimension), settings.points,
                                  catalog)
    experiments = []
    for segmented_id, population in sorted({k[:2] for k in series}):
        experiment_id, value = split(segmented_id)
        experiments.append(replace(experiment_report(
            experiment_id, population, totals={},
            series={k[2]: s for k, s in series.items() if k[:2] == (segmented_id, population)},
            times=times, settings=settings, catalog=catalog), segment=value))
    as_of = newest_window_end(serving_view(spark, layout, name=None))
    # One pass over the visits for the definitions and the dimension; the dimension's key
    # has a space, which no definition's name has.
    dimension_key = f"--by {by}"
    found = covered(visits, {**lacking_parts(catalog), dimension_key: ~computed_with(dimension)})
    with_dimension = found.pop(dimension_key)
    return Report(as_of, settings, judged_by_family(experiments, settings), catalog, found, by,
                  with_dimension)
