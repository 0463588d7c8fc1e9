"""Per experiment / variant / population totals over the serving view, and their text table."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from abstream.rendering import render_table
from abstream.stages.gold import Windowing
from abstream.times import from_micros, micros_from

#: Rolling unique visitors: the periods before the report's time, by column name.
ROLLING = {"visitors_1h": timedelta(hours=1), "visitors_24h": timedelta(hours=24)}


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
    page_load_ms_sum: int
    page_load_count: int
    final: bool
    visitors_1h: int | None = None
    visitors_24h: int | None = None

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


def merged_estimate(sketches: Column | str) -> Column:
    """The distinct count of HLL ``sketches`` merged (0 where there are none)."""
    return F.coalesce(F.hll_sketch_estimate(F.hll_union_agg(sketches, True)), F.lit(0))


def newest_window_end(serving: DataFrame) -> datetime | None:
    """The end of the newest window in the serving view: the data's present."""
    micros = serving.agg(F.unix_micros(F.max("window_end"))).first()[0]
    return None if micros is None else from_micros(micros)


def variant_totals(serving: DataFrame, windowing: Windowing, as_of: datetime | None = None
                   ) -> list[VariantTotals]:
    """Totals over all windows of the serving view, visitors by merging the windows' HLL
    sketches; final when every window is. With ``as_of``, also the rolling unique visitors
    of the windows starting in the last hour and day before it."""
    rolling = [] if as_of is None else [
        merged_estimate(F.when(F.unix_micros("window_start") >= micros_from(as_of - period),
                               F.col("visitors_sketch"))).alias(name)
        for name, period in ROLLING.items()]
    rows = (
        tiling_windows(serving, windowing)
        .groupBy("experiment_id", "variant", "population")
        .agg(
            merged_estimate(F.col("visitors_sketch")).alias("visitors"),
            *(F.sum(c).alias(c) for c in ("visits", "bounces", "orders", "revenue", "units",
                                          "error_visits", "pageviews", "page_load_ms_sum",
                                          "page_load_count")),
            F.bool_and("final").alias("final"),
            *rolling,
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
    return render_table(lines, left=(0, 1, 2, len(header) - 1))

