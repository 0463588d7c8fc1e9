"""Each catalog definition's value per experiment / variant / population over the
definitions view (``serving.view.definitions_view``), which versions gold holds, and their
text.

A value is a total over every window: a proportion's converting units over its units, a
mean's numerator over its units, a ratio's numerator over its denominator, a quantile's
quantile of the merged sketches. Units are HLL estimates (the report's are exact), and a
cap is not applied (it applies to each unit's total, which the report computes).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from abstream.metrics.definitions import Catalog, Definition
from abstream.rendering import render_table
from abstream.serving.totals import merged_estimate, tiling_windows
from abstream.stages.definition_gold import served
from abstream.stages.gold import Windowing
from abstream.times import from_micros


@dataclass(frozen=True)
class DefinitionTotals:
    metric: str
    experiment_id: str
    variant: str
    population: str
    dimension_value: str | None
    units: int
    numerator: float
    denominator: float | None
    converted: int | None
    quantile: float | None
    final: bool

    def value(self, definition: Definition) -> float | None:
        """The definition's value over these totals (None: no units, or no denominator)."""
        if definition.kind == "quantile":
            return self.quantile
        if definition.kind == "ratio":
            return self.numerator / self.denominator if self.denominator else None
        if not self.units:
            return None
        return (self.converted or 0) / self.units if definition.kind == "proportion" \
            else self.numerator / self.units


def definition_totals(view: DataFrame, catalog: Catalog, windowing: Windowing,
                      dimension: str | None = None) -> list[DefinitionTotals]:
    """Totals over every window of the definitions view, overall or per value of
    ``dimension``."""
    quantiles = {d.name: d.quantile for d in served(catalog) if d.quantile is not None}
    rows = tiling_windows(view, windowing).where(
        F.col("dimension").isNull() if dimension is None else F.col("dimension") == dimension)
    merged = F.kll_merge_agg_double("values_sketch")
    quantile = F.lit(None).cast("double")
    for name, q in quantiles.items():
        quantile = F.when(F.col("metric") == name,
                          F.kll_sketch_get_quantile_double("values", F.lit(q))
                          ).otherwise(quantile)
    keys = ["metric", "experiment_id", "variant", "population", "dimension_value"]
    totals = rows.groupBy(*keys).agg(
        merged_estimate("units_sketch").alias("units"),
        F.sum("numerator").alias("numerator"),
        F.sum("denominator").alias("denominator"),
        F.hll_sketch_estimate(F.hll_union_agg("converted_sketch", True)).alias("converted"),
        (merged if quantiles else F.lit(None).cast("binary")).alias("values"),
        F.bool_and("final").alias("final"),
    ).select(*keys, "units", "numerator", "denominator", "converted",
             quantile.alias("quantile"), "final")
    order = {d.name: i for i, d in enumerate(catalog.definitions)}
    found = [DefinitionTotals(**row.asDict()) for row in totals.collect()]
    return sorted(found, key=lambda t: (order[t.metric], t.experiment_id, t.population,
                                        t.dimension_value or "", t.variant != "control",
                                        t.variant))


@dataclass(frozen=True)
class Version:
    """The windows of one layer's gold rows of one version of a definition."""

    metric: str
    fingerprint: str
    layer: str
    rows: int
    first: datetime
    last: datetime


def versions(gold: DataFrame) -> list[Version]:
    """What ``definition_metrics`` holds of each definition's versions, per layer."""
    rows = gold.groupBy("metric", "fingerprint", "layer").agg(
        F.count(F.lit(1)).alias("rows"), F.unix_micros(F.min("window_start")).alias("first"),
        F.unix_micros(F.max("window_end")).alias("last")).collect()
    return sorted((Version(r["metric"], r["fingerprint"], r["layer"], r["rows"],
                           from_micros(r["first"]), from_micros(r["last"])) for r in rows),
                  key=lambda v: (v.metric, v.fingerprint, v.layer))


def coverage_lines(catalog: Catalog, held: list[Version]) -> list[str]:
    """Per definition: the windows its current version covers in each layer, the rows of
    other versions the view leaves out, or why gold has none."""
    lines = []
    for definition in catalog.definitions:
        if definition.window is not None:
            lines.append(f"{definition.name}: no gold rows (a window from each unit's first "
                         "exposure): in the report only")
            continue
        mine = [v for v in held if v.metric == definition.name]
        current = [v for v in mine if v.fingerprint == definition.fingerprint]
        covered = "; ".join(f"{v.layer} {v.first:%Y-%m-%d %H:%M} to {v.last:%Y-%m-%d %H:%M}"
                            for v in current) or "no windows yet"
        line = f"{definition.name} ({definition.fingerprint}): {covered}"
        others = [v for v in mine if v.fingerprint != definition.fingerprint]
        if others:
            line += (f"; {sum(v.rows for v in others):,} rows of "
                     f"{len({v.fingerprint for v in others})} other version(s) left out: "
                     f"`abstream batch --all` recomputes them")
        lines.append(line)
    return lines


def _shown(value: float | None, definition: Definition) -> str:
    if value is None:
        return "-"
    return f"{value:.2%}" if definition.is_rate else f"{value:,.4g}"


def format_definitions(catalog: Catalog, totals: list[DefinitionTotals]) -> str:
    """A readable table: each definition's value per variant, its lift on the control's."""
    control = {(t.metric, t.experiment_id, t.population, t.dimension_value): t
               for t in totals if t.variant == "control"}
    by_dimension = any(t.dimension_value is not None for t in totals)
    header = ("metric", "experiment", "population", *(("value of",) if by_dimension else ()),
              "variant", "units", "value", "lift", "numbers")
    lines = [header]
    for t in totals:
        definition = catalog.get(t.metric)
        assert definition is not None
        value = t.value(definition)
        base = control.get((t.metric, t.experiment_id, t.population, t.dimension_value))
        base_value = None if base is None else base.value(definition)
        lift = "" if base is None or base is t or value is None or not base_value else \
            f"{value / base_value - 1:+.1%}"
        lines.append((t.metric, t.experiment_id, t.population,
                      *((t.dimension_value or "(none)",) if by_dimension else ()),
                      t.variant, f"{t.units:,}", _shown(value, definition), lift,
                      "final" if t.final else "provisional"))
    return render_table(lines, left=(*range(len(header) - 4), len(header) - 1))
