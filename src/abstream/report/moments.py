"""Per-visitor sufficient statistics of served visits, cumulative over time.

A comparison's unit is the visitor: its visits, orders, revenue, bounces and error visits
in an experiment's variant. A visitor's visits can fall in many gold windows, so these
moments cannot be merged from gold rows; they are computed here from silver visits in one
native Spark pass and collected small: one row per experiment x population x variant x
time point.

For the lift-over-time series every point is cumulative (all visits started before the
point's end). Per point only the visitors active in it change the sums of squares and
products, by ``A·B - A'·B'`` (their new and previous cumulative values), so no visitor is
repeated for points in which it had no visit.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from abstream.report.statistics import MeanMoments, RatioMoments
from abstream.times import from_micros, micros_from

log = logging.getLogger(__name__)

#: Per-visitor values; ``visits`` is the denominator of the per-visit rates.
VALUES = ("visits", "orders", "revenue", "bounces", "error_visits")
#: The products whose sums the statistics need (x·y of each ratio, squares of all).
PRODUCTS = (*((v, v) for v in VALUES), ("orders", "visits"), ("bounces", "visits"),
            ("error_visits", "visits"), ("revenue", "orders"))
KEY = ("experiment_id", "population", "variant")
#: Per denominator that a visitor may not have (a ratio per order), the count of visitors
#: that have it: the units that carry the ratio.
HAVING = {"orders": "buyers"}

#: Candidate time steps of the series, smallest first.
_STEPS = tuple(timedelta(minutes=m) for m in (1, 5, 15, 30, 60, 180, 360, 720)) + tuple(
    timedelta(days=d) for d in (1, 2, 7, 14, 28))


@dataclass(frozen=True)
class Moments:
    """Sums over the visitors of one variant: n, the values and the needed products."""

    n: int
    sums: dict[str, float]

    def total(self, name: str) -> float:
        return self.sums.get(name, 0.0)

    def product(self, a: str, b: str) -> float:
        return self.sums.get(_name(a, b), self.total(_name(b, a)))

    def mean(self, name: str) -> MeanMoments:
        return MeanMoments(self.n, self.total(name), self.product(name, name))

    def ratio(self, x: str, y: str) -> RatioMoments:
        having = HAVING.get(y)
        return RatioMoments(self.n, self.total(x), self.total(y), self.product(x, x),
                            self.product(y, y), self.product(x, y),
                            None if having is None else int(self.total(having)))

    def plus(self, other: Moments) -> Moments:
        return Moments(self.n + other.n,
                       {k: self.sums.get(k, 0.0) + other.sums.get(k, 0.0)
                        for k in self.sums.keys() | other.sums.keys()})


EMPTY = Moments(0, {})


@dataclass(frozen=True)
class TimeGrid:
    """Points ``origin + (k + 1)·step`` for k = 0 .. count - 1 (each point's end)."""

    origin: datetime
    step: timedelta
    count: int

    @classmethod
    def spanning(cls, first: datetime, last: datetime, max_points: int) -> TimeGrid:
        """The smallest listed step that covers [first, last] in ``max_points`` points."""
        span = last - first
        step = next((s for s in _STEPS if span < s * max_points), None)
        if step is None:
            step = _STEPS[-1] * math.ceil(span / (_STEPS[-1] * max_points) + 1e-9)
        origin = from_micros(micros_from(first) // _micros(step) * _micros(step))
        count = int((last - origin) // step) + 1
        return cls(origin, step, count)

    def end(self, point: int) -> datetime:
        return self.origin + self.step * (point + 1)

    def point_of(self, ts: Column) -> Column:
        return F.floor((F.unix_micros(ts) - micros_from(self.origin)) / _micros(self.step)) \
            .cast("int")


def _micros(step: timedelta) -> int:
    return step // timedelta(microseconds=1)


def visit_span(visits: DataFrame) -> tuple[datetime, datetime] | None:
    """The first and last visit start, or None without visits."""
    row = visits.agg(F.unix_micros(F.min("visit_start")).alias("first"),
                     F.unix_micros(F.max("visit_start")).alias("last")).first()
    if row is None or row["first"] is None:
        return None
    return from_micros(row["first"]), from_micros(row["last"])


def _visitor_values(visits: DataFrame, grid: TimeGrid) -> DataFrame:
    """One row per experiment x population x variant x visitor x point with visits."""
    entries = visits.select(
        "visitor_id",
        grid.point_of(F.col("visit_start")).alias("point"),
        F.lit(1).cast("long").alias("visits"),
        "orders",
        F.col("revenue").cast("double").alias("revenue"),
        F.col("is_bounce").cast("long").alias("bounces"),
        F.col("is_error_visit").cast("long").alias("error_visits"),
        F.col("final").cast("int").alias("final"),
        F.explode("experiments").alias("entry"),
    )
    populations = F.array(F.lit("assigned"),
                          F.when(F.col("entry.qualified"), F.lit("qualified")))
    qualified = F.col("population") == "qualified"
    return (
        entries.select("*", F.explode(populations).alias("population"))
        .where(F.col("population").isNotNull())
        # The qualified population counts the orders from the visit's first exposure on.
        .withColumn("orders", F.when(qualified, F.col("entry.exposed_orders"))
                    .otherwise(F.col("orders")))
        .withColumn("revenue", F.when(qualified, F.col("entry.exposed_revenue").cast("double"))
                    .otherwise(F.col("revenue")))
        .groupBy(F.col("entry.id").alias("experiment_id"), "population",
                 F.col("entry.variant").alias("variant"), "visitor_id", "point")
        .agg(*(F.sum(v).alias(v) for v in VALUES), F.min("final").alias("final"))
    )


def _name(a: str, b: str) -> str:
    return f"{a}*{b}"


def moment_increments(visits: DataFrame, grid: TimeGrid) -> DataFrame:
    """Per experiment x population x variant x point: how n, the sums and the sums of
    products grow at that point (add them up over points for cumulative moments)."""
    per_visitor = Window.partitionBy(*KEY, "visitor_id").orderBy("point")
    values = _visitor_values(visits, grid)
    cumulative = values.select(
        *KEY, "point", "final",
        (F.row_number().over(per_visitor) == 1).cast("long").alias("n"),
        *(F.col(v).alias(f"d_{v}") for v in VALUES),
        *(F.sum(v).over(per_visitor).alias(v) for v in VALUES),
    )

    def grown(a: str, b: str) -> Column:
        before_a, before_b = F.col(a) - F.col(f"d_{a}"), F.col(b) - F.col(f"d_{b}")
        return F.col(a) * F.col(b) - before_a * before_b

    def became_nonzero(v: str) -> Column:
        return ((F.col(v) != 0) & (F.col(v) == F.col(f"d_{v}"))).cast("long")

    return cumulative.groupBy(*KEY, "point").agg(
        F.sum("n").alias("n"),
        *(F.sum(f"d_{v}").cast("double").alias(v) for v in VALUES),
        *(F.sum(became_nonzero(v)).cast("double").alias(name) for v, name in HAVING.items()),
        *(F.sum(grown(a, b)).cast("double").alias(_name(a, b)) for a, b in PRODUCTS),
        F.min("final").alias("final"),
    )


@dataclass(frozen=True)
class VariantSeries:
    """Cumulative moments of one variant at every point of the grid, and whether all of
    its visits are final."""

    points: list[Moments]
    final: bool

    @property
    def total(self) -> Moments:
        return self.points[-1]


def cumulative_series(increments: Iterable[Mapping[str, Any]], grid: TimeGrid
                      ) -> dict[tuple[str, str, str], VariantSeries]:
    """Add up collected increments into cumulative moments per point."""
    grouped: dict[tuple[str, str, str], dict[int, Mapping[str, Any]]] = {}
    for row in increments:
        key = (row["experiment_id"], row["population"], row["variant"])
        grouped.setdefault(key, {})[row["point"]] = row
    names = [*VALUES, *HAVING.values(), *(_name(a, b) for a, b in PRODUCTS)]
    series = {}
    for key, rows in grouped.items():
        running, points = EMPTY, []
        for point in range(grid.count):
            row = rows.get(point)
            if row is not None:
                running = running.plus(Moments(row["n"], {n: row[n] for n in names}))
            points.append(running)
        series[key] = VariantSeries(points, all(r["final"] for r in rows.values()))
    return series


def served_series(visits: DataFrame, max_points: int
                  ) -> tuple[list[datetime], dict[tuple[str, str, str], VariantSeries]]:
    """The series' point ends and, per experiment x population x variant, the cumulative
    moments of ``visits`` on a grid of at most ``max_points``; empty without visits."""
    span = visit_span(visits)
    if span is None:
        return [], {}
    grid = TimeGrid.spanning(*span, max_points)
    log.info("per-visitor moments over %d points of %s", grid.count, grid.step)
    rows = moment_increments(visits, grid).collect()
    return ([grid.end(k) for k in range(grid.count)],
            cumulative_series((r.asDict() for r in rows), grid))
