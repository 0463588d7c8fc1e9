"""Per experiment / variant / population totals over the serving view, and their text table."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from abstream.stages.metrics import Windowing


@dataclass(frozen=True)
class VariantTotals:
    experiment_id: str
    variant: str
    population: str
    visitors: int
    visits: int
    bounces: int
    orders: int
    revenue: Decimal
    units: int
    error_visits: int
    pageviews: int
    final: bool

    @property
    def bounce_rate(self) -> float:
        return self.bounces / self.visits if self.visits else 0.0

    @property
    def conversion_rate(self) -> float:
        return self.orders / self.visits if self.visits else 0.0

    @property
    def revenue_per_visitor(self) -> float:
        return float(self.revenue) / self.visitors if self.visitors else 0.0


def tiling_windows(gold: DataFrame, windowing: Windowing) -> DataFrame:
    """Gold rows whose windows do not overlap: with sliding windows, the ones aligned to the
    window length (they tile the time axis), so totals count every event once."""
    if windowing.slide is None or windowing.slide == windowing.length:
        return gold
    length_us = windowing.length.total_seconds() * 1_000_000
    return gold.where(F.unix_micros("window_start") % int(length_us) == 0)


def variant_totals(serving: DataFrame, windowing: Windowing) -> list[VariantTotals]:
    """Totals over all windows of the serving view, visitors by merging the windows' HLL
    sketches; final when every window is."""
    rows = (
        tiling_windows(serving, windowing)
        .groupBy("experiment_id", "variant", "population")
        .agg(
            F.hll_sketch_estimate(F.hll_union_agg("visitors_sketch", True)).alias("visitors"),
            *(F.sum(c).alias(c) for c in ("visits", "bounces", "orders", "revenue", "units",
                                          "error_visits", "pageviews")),
            F.bool_and("final").alias("final"),
        )
        .orderBy("experiment_id", "population", "variant")
        .collect()
    )
    return [VariantTotals(**row.asDict()) for row in rows]


def format_table(totals: list[VariantTotals]) -> str:
    """A readable table; conversion lift is relative to the experiment's control."""
    control = {(t.experiment_id, t.population): t for t in totals if t.variant == "control"}
    header = ("experiment", "population", "variant", "visitors", "visits", "bounce",
              "orders", "conv.", "lift", "revenue", "rev/visitor", "numbers")
    lines = [header]
    for t in totals:
        base = control.get((t.experiment_id, t.population))
        lift = "" if base is None or t is base or not base.conversion_rate else \
            f"{t.conversion_rate / base.conversion_rate - 1:+.1%}"
        lines.append((t.experiment_id, t.population, t.variant, f"{t.visitors:,}",
                      f"{t.visits:,}", f"{t.bounce_rate:.1%}", f"{t.orders:,}",
                      f"{t.conversion_rate:.2%}", lift, f"{t.revenue:,.2f}",
                      f"{t.revenue_per_visitor:.2f}", "final" if t.final else "provisional"))
    widths = [max(len(row[i]) for row in lines) for i in range(len(header))]
    text = ["  ".join(cell.ljust(w) if i < 3 or i == len(header) - 1 else cell.rjust(w)
                      for i, (cell, w) in enumerate(zip(row, widths, strict=True)))
            for row in lines]
    text.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(text)
