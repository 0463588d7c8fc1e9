"""Per-unit sufficient statistics of served visits, cumulative over time.

A comparison's unit is the visitor (or, for a definition with ``unit: visit``, the visit):
its totals of the parts a definition reads (``stages.parts``) in an experiment's variant.
A visitor's visits can fall in many gold windows, so these moments cannot be merged from
gold rows; they are computed here from silver visits in one native Spark pass per unit and
collected small: one row per experiment x population x variant x time point.

For the lift-over-time series every point is cumulative (all visits started before the
point's end). Per point only the visitors active in it change the sums of squares and
products, by ``A·B - A'·B'`` (their new and previous cumulative values), so no visitor is
repeated for points in which it had no visit.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import reduce
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from abstream.metrics.definitions import Catalog, Definition, MetricWindow, Unit
from abstream.report.statistics import Z_RANK, MeanMoments, QuantileMoments, RatioMoments
from abstream.times import from_micros, micros_from

log = logging.getLogger(__name__)

KEY = ("experiment_id", "population", "variant")


#: Candidate time steps of the series, smallest first.
_STEPS = tuple(timedelta(minutes=m) for m in (1, 5, 15, 30, 60, 180, 360, 720)) + tuple(
    timedelta(days=d) for d in (1, 2, 7, 14, 28))


@dataclass(frozen=True)
class Moments:
    """Sums over the units of one variant: ``n`` visitors, and per definition its units
    (``NAME#n``), the sums of its per-unit values (``NAME#x``, ``NAME#y``), of their
    squares and product (``NAME#xx``, ``NAME#yy``, ``NAME#xy``) and, for a ratio, the
    units with a denominator other than 0 (``NAME#with_y``)."""

    n: int
    sums: dict[str, float]

    def _get(self, name: str, what: str) -> float:
        return self.sums.get(f"{name}#{what}", 0.0)

    def units(self, name: str) -> int:
        return int(self._get(name, "n"))

    def mean(self, name: str, binary: bool = False) -> MeanMoments:
        return MeanMoments(self.units(name), self._get(name, "x"), self._get(name, "xx"),
                           binary)

    def ratio(self, name: str) -> RatioMoments:
        return RatioMoments(self.units(name), self._get(name, "x"), self._get(name, "y"),
                            self._get(name, "xx"), self._get(name, "yy"),
                            self._get(name, "xy"), int(self._get(name, "with_y")))

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


@dataclass(frozen=True)
class Coverage:
    """Of the served visits, how many have a definition's parts, and when the others
    (computed before it was defined, or changed) started."""

    visits: int
    without: int
    without_from: datetime | None
    without_to: datetime | None


def has_key(column: str, key: str) -> Column:
    """Whether a visit's map ``column`` has ``key`` (false where the visit has no map)."""
    return F.coalesce(F.map_contains_key(column, F.lit(key)), F.lit(False))


def lacking_parts(catalog: Catalog) -> dict[str, Column]:
    """Per definition, whether a visit lacks some of its parts (computed before it)."""
    def has(key: str) -> Column:
        return has_key("metric_values" if key.startswith("list:") else "metric_parts", key)

    return {d.name: ~reduce(Column.__and__, [has(k) for k in d.parts()])
            for d in catalog.definitions}


def coverage(visits: DataFrame, catalog: Catalog) -> dict[str, Coverage]:
    """Per definition, the served visits that have its parts and those that do not."""
    return covered(visits, lacking_parts(catalog))


def covered(visits: DataFrame, lacking: dict[str, Column]) -> dict[str, Coverage]:
    """Per name, the served visits and those for which its ``lacking`` column holds, with
    when the first and the last of those started."""
    row = visits.agg(F.count(F.lit(1)).alias("visits"), *(
        item for name, missing in lacking.items() for item in (
            F.count_if(missing).alias(f"{name}#without"),
            F.unix_micros(F.min(F.when(missing, F.col("visit_start")))).alias(f"{name}#from"),
            F.unix_micros(F.max(F.when(missing, F.col("visit_start")))).alias(f"{name}#to"))
    )).first()
    assert row is not None

    def moment(micros: int | None) -> datetime | None:
        return None if micros is None else from_micros(micros)

    return {name: Coverage(row["visits"], row[f"{name}#without"], moment(row[f"{name}#from"]),
                           moment(row[f"{name}#to"])) for name in lacking}


def _unit(unit: Unit) -> Column:
    if unit == "visitor":
        return F.col("visitor_id")
    return F.concat_ws("/", "session_id", F.col("visit_start").cast("string"))


#: What a definition reads of each visit: a part's key and, for an event list, the window
#: its events must fall in (None: a summed part, or every listed event).
Input = tuple[str, MetricWindow | None]


def _inputs(d: Definition) -> list[Input]:
    return [(key, d.window if key.startswith("list:") else None) for key in d.parts()]


def _summed(d: Definition) -> bool:
    """Whether the definition is compared from per-unit sums (not a quantile)."""
    return d.kind != "quantile"


def _entry_rows(visits: DataFrame, grid: TimeGrid, unit: Unit) -> DataFrame:
    """One row per visit, entry and population it counts for: the unit, the visit's point,
    its parts and event lists, and when the unit's window starts (``first_at``, epoch
    microseconds): its first exposure to the experiment (the assigned population: the
    start of its first visit in it)."""
    entries = visits.select(
        _unit(unit).alias("unit"), grid.point_of(F.col("visit_start")).alias("point"),
        "visit_start", "metric_parts", "metric_values",
        F.col("final").cast("int").alias("final"), F.explode("experiments").alias("entry"))
    populations = F.array(F.lit("assigned"), F.when(F.col("entry.qualified"), F.lit("qualified")))
    qualified = F.col("population") == "qualified"
    started = F.when(qualified, F.col("entry.exposed_at")).otherwise(F.col("visit_start"))
    return entries.select("*", F.explode(populations).alias("population")) \
        .where(F.col("population").isNotNull()) \
        .withColumn("first_at", F.min(F.unix_micros(started)).over(
            Window.partitionBy("entry.id", "population", "unit")))


def _listed(key: str, window: MetricWindow | None) -> Column:
    """The events of a visit's list that count for the row's population (from the visit's
    first exposure, for the qualified one) and fall in ``window`` of the unit's first
    exposure: an array of ``{ts, value}``, NULL where the visit has no such list."""
    qualified = F.col("population") == "qualified"
    exposed = F.unix_micros(F.col("entry.exposed_at"))

    def counts(event: Column) -> Column:
        ts = F.unix_micros(event["ts"])
        keep = ~qualified | (ts >= exposed)
        if window is not None:
            start = F.col("first_at") + window.delay // timedelta(microseconds=1)
            keep = keep & (ts >= start) & (ts < start + window.length // timedelta(microseconds=1))
        return keep

    return F.filter(F.col("metric_values")[key], counts)


def _part_values(visits: DataFrame, grid: TimeGrid, catalog: Catalog, unit: Unit
                 ) -> tuple[DataFrame, dict[Input, str]]:
    """One row per experiment x population x variant x unit x point with visits: the sums
    of what the ``unit``'s definitions read (columns named as the returned map says), and
    per definition the visits that have all of it (``NAME#covered``).

    The qualified population counts the event parts from a visit's first exposure on (the
    entry's ``exposed_parts``), the visit parts of the whole visit. A visit without a part
    (computed before the part was defined) counts for no definition that reads it."""
    definitions = [d for d in catalog.definitions if d.unit == unit and _summed(d)]
    inputs = sorted({i for d in definitions for i in _inputs(d)}, key=str)
    column = {i: f"p{n}" for n, i in enumerate(inputs)}
    event_parts = catalog.event_parts().keys()
    qualified = F.col("population") == "qualified"

    def value(key: str, window: MetricWindow | None) -> Column:
        if key.startswith("list:"):
            return F.aggregate(_listed(key, window), F.lit(0.0),
                               lambda total, event: total + event["value"])
        whole = F.col("metric_parts")[key]
        if key not in event_parts:
            return whole
        return F.when(qualified, F.col("entry.exposed_parts")[key]).otherwise(whole)

    rows = _entry_rows(visits, grid, unit).select(
        "entry", "population", "unit", "point", "final",
        *(value(*i).alias(column[i]) for i in inputs))
    covered = {d.name: reduce(Column.__and__,
                              [F.col(column[i]).isNotNull() for i in _inputs(d)])
               for d in definitions}
    values = rows.groupBy(F.col("entry.id").alias("experiment_id"), "population",
                          F.col("entry.variant").alias("variant"), "unit", "point").agg(
        *(F.sum(name).alias(name) for name in column.values()),
        *(F.count_if(c).cast("double").alias(f"{name}#covered") for name, c in covered.items()),
        F.min("final").alias("final"))
    return values, column


def _percentile_caps(values: DataFrame, catalog: Catalog, unit: Unit,
                     column: dict[Input, str]) -> DataFrame | None:
    """Per experiment and population, each percentile cap of the ``unit``'s definitions:
    that percentile of the units' totals (all variants together)."""
    capped = [d for d in catalog.definitions
              if d.unit == unit and d.cap is not None and d.cap.percentile is not None]
    if not capped:
        return None
    totals = values.groupBy("experiment_id", "population", "variant", "unit").agg(
        *(F.sum(column[_inputs(d)[0]]).alias(d.name) for d in capped))
    return totals.groupBy("experiment_id", "population").agg(
        *(F.percentile(d.name, d.cap.percentile).alias(f"{d.name}#cap")  # type: ignore[union-attr]
          for d in capped))


def _increments(d: Definition, column: dict[Input, str]) -> list[Column]:
    """What the definition's sums grow by at a unit's point: from its per-unit values
    before the point (``was``) to those after it (``now``)."""
    def total(part: Input, now: bool) -> Column:
        total = F.col(f"cum_{column[part]}")
        return total if now else total - F.col(column[part])

    def covered(now: bool) -> Column:
        total = F.col(f"cum_{d.name}#covered")
        return (total if now else total - F.col(f"{d.name}#covered")) > 0

    def capped(value: Column) -> Column:
        if d.cap is None:
            return value
        cap = F.lit(d.cap.absolute) if d.cap.absolute is not None else F.col(f"{d.name}#cap")
        return F.least(value, cap)

    def x(now: bool) -> Column:
        value = total(_inputs(d)[0], now)
        value = (value > 0).cast("double") if d.kind == "proportion" else capped(value)
        return F.when(covered(now), value).otherwise(F.lit(0.0))

    def y(now: bool) -> Column:
        return F.when(covered(now), total(_inputs(d)[1], now)).otherwise(F.lit(0.0))

    def grown(value: Callable[[bool], Column]) -> Column:
        return value(True) - value(False)

    def n(now: bool) -> Column:
        return covered(now).cast("double")

    sums = {"n": grown(n), "x": grown(x), "xx": grown(lambda now: x(now) * x(now))}
    if d.kind == "ratio":
        sums |= {"y": grown(y), "yy": grown(lambda now: y(now) * y(now)),
                 "xy": grown(lambda now: x(now) * y(now)),
                 "with_y": grown(lambda now: (y(now) != 0).cast("double"))}
    return [F.sum(value).alias(f"{d.name}#{what}") for what, value in sums.items()]


def moment_increments(visits: DataFrame, grid: TimeGrid, catalog: Catalog,
                      unit: Unit = "visitor") -> DataFrame:
    """Per experiment x population x variant x point: how the visitors (``n``, with the
    visitor as the unit, else 0) and the ``unit``'s definitions' sums grow at that point
    (add them up over points for cumulative moments)."""
    values, column = _part_values(visits, grid, catalog, unit)
    caps = _percentile_caps(values, catalog, unit, column)
    if caps is not None:
        values = values.join(F.broadcast(caps), ["experiment_id", "population"])
    per_unit = Window.partitionBy(*KEY, "unit").orderBy("point")
    counted = [c for c in values.columns if c.endswith("#covered")]
    cumulative = values.select(
        "*", *(F.sum(c).over(per_unit).alias(f"cum_{c}")
               for c in (*column.values(), *counted)),
        (F.row_number().over(per_unit) == 1).cast("long").alias("first"))
    first = F.col("first") if unit == "visitor" else F.lit(0)
    definitions = [d for d in catalog.definitions if d.unit == unit and _summed(d)]
    return cumulative.groupBy(*KEY, "point").agg(
        F.sum(first).alias("n"),
        *(s for d in definitions for s in _increments(d, column)),
        F.min("final").alias("final"),
    )


@dataclass(frozen=True)
class VariantSeries:
    """Cumulative moments of one variant at every point of the grid, whether all of its
    visits are final, and over all of them its quantiles' moments, by definition."""

    points: list[Moments]
    final: bool
    quantiles: dict[str, QuantileMoments] = field(default_factory=dict)

    @property
    def total(self) -> Moments:
        return self.points[-1]


def cumulative_series(increments: Iterable[Mapping[str, Any]], grid: TimeGrid
                      ) -> dict[tuple[str, str, str], VariantSeries]:
    """Add up collected increments into cumulative moments per point."""
    grouped: dict[tuple[str, str, str], dict[int, Moments]] = {}
    final: dict[tuple[str, str, str], bool] = {}
    for row in increments:
        key = (row["experiment_id"], row["population"], row["variant"])
        sums = {k: v for k, v in row.items() if "#" in k}
        at = grouped.setdefault(key, {})
        at[row["point"]] = at.get(row["point"], EMPTY).plus(Moments(row["n"], sums))
        final[key] = final.get(key, True) and bool(row["final"])
    series = {}
    for key, rows in grouped.items():
        running, points = EMPTY, []
        for point in range(grid.count):
            if point in rows:
                running = running.plus(rows[point])
            points.append(running)
        series[key] = VariantSeries(points, final[key])
    return series


def quantile_moments(visits: DataFrame, grid: TimeGrid, d: Definition
                     ) -> dict[tuple[str, str, str], QuantileMoments]:
    """Per experiment x population x variant, the moments of a quantile definition over
    all ``visits``: the estimate and the order statistics around it (exact: the values are
    ranked), and per unit the events at or below the estimate."""
    ((key, window),) = _inputs(d)
    nu = d.quantile
    assert nu is not None
    events = _entry_rows(visits, grid, d.unit).select(
        F.col("entry.id").alias("experiment_id"), "population",
        F.col("entry.variant").alias("variant"), "unit",
        F.explode(_listed(key, window)).alias("event")) \
        .select(*KEY, "unit", F.col("event.value").alias("value")) \
        .persist(StorageLevel.MEMORY_AND_DISK)
    try:
        variant = Window.partitionBy(*KEY)
        ranked = events.select(*KEY, "value",
                               F.row_number().over(variant.orderBy("value")).alias("rank"),
                               F.count(F.lit(1)).over(variant).alias("n"))
        half = Z_RANK * F.sqrt(F.lit(nu * (1 - nu)) / F.col("n"))

        def at(rank: Column) -> Column:
            """The smallest value whose rank reaches ``rank`` (a share of n)."""
            place = F.greatest(F.ceil(F.least(F.greatest(rank, F.lit(0.0)), F.lit(1.0))
                                      * F.col("n")), F.lit(1))
            return F.max(F.when(F.col("rank") == place, F.col("value")))

        bounds = ranked.groupBy(*KEY).agg(
            F.first("n").alias("n"), at(F.lit(nu)).alias("estimate"),
            at(nu - half).alias("lower"), at(nu + half).alias("upper"))
        per_unit = events.join(F.broadcast(bounds.select(*KEY, "estimate")), list(KEY)) \
            .groupBy(*KEY, "unit").agg(
                F.count_if(F.col("value") <= F.col("estimate")).cast("double").alias("s"),
                F.count("value").cast("double").alias("m"))
        sums = per_unit.groupBy(*KEY).agg(
            F.count("unit").alias("units"), F.sum("s").alias("sum_s"),
            F.sum("m").alias("sum_m"), F.sum(F.col("s") * F.col("s")).alias("sum_ss"),
            F.sum(F.col("m") * F.col("m")).alias("sum_mm"),
            F.sum(F.col("s") * F.col("m")).alias("sum_sm"))
        rows = bounds.join(sums, list(KEY)).collect()
    finally:
        events.unpersist()
    return {(r["experiment_id"], r["population"], r["variant"]): QuantileMoments(
        nu=nu, **{k: v for k, v in r.asDict().items() if k not in KEY}) for r in rows}


def served_series(visits: DataFrame, max_points: int, catalog: Catalog
                  ) -> tuple[list[datetime], dict[tuple[str, str, str], VariantSeries]]:
    """The series' point ends and, per experiment x population x variant, the cumulative
    moments of ``visits`` for the ``catalog`` on a grid of at most ``max_points``; empty
    without visits."""
    span = visit_span(visits)
    if span is None:
        return [], {}
    grid = TimeGrid.spanning(*span, max_points)
    log.info("per-unit moments over %d points of %s", grid.count, grid.step)
    units: list[Unit] = ["visitor"]
    if any(d.unit == "visit" for d in catalog.definitions):
        units.append("visit")
    rows = [r.asDict() for unit in units
            for r in moment_increments(visits, grid, catalog, unit).collect()]
    series = cumulative_series(rows, grid)
    for d in catalog.definitions:
        if d.kind == "quantile":
            for key, moments in quantile_moments(visits, grid, d).items():
                if key in series:
                    series[key].quantiles[d.name] = moments
    return [grid.end(k) for k in range(grid.count)], series
