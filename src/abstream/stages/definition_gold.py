"""Events and visits -> each catalog definition's totals per experiment x variant x
population x event-time window, overall and per dimension value: gold's
``definition_metrics``, in long form (a row per definition).

A row holds additive parts only, so a window's increments and a range's windows merge:
the numerator's and the denominator's sums, an HLL sketch of the units (and, for a
proportion, of those with a matching event or visit), and for a quantile a KLL sketch of
the matching events' values. An event counts in its event-time window, a visit's facts in
the window of its start, as in ``experiment_metrics``; a unit counts in the window where
its visit starts (the qualified population: where the visit's first exposure is), so the
units of several windows merge into those of the visits that started in them.

A unit's square is not additive over increments (its total grows in several), so the
per-unit moments a comparison needs are the report's, over silver's visits; and a
definition with a ``window`` (from the unit's first exposure, which a window of event time
does not know) has no gold rows. A row's dimension value is its visit's (``dimensions``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import reduce

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from abstream.metrics.definitions import Catalog, Definition, Measure
from abstream.schemas import DEFINITION_METRICS
from abstream.stages.gold import Windowing
from abstream.stages.lineage import gold_columns
from abstream.stages.parts import matches, visit_fact
from abstream.stages.sessions import ASSIGNED, TARGET

_DIMENSION = ("dimension", "dimension_value")
#: The fewest tasks the sketches are built in, each a share of the windows and targets (no
#: partial aggregation): a task holds a sketch per window, target and combination of
#: dimension values, and past ``spark.sql.objectHashAggregate.sortBased.fallbackThreshold``
#: of them Spark sorts its input instead of hashing it. A micro-batch of 500,000 beacons
#: made 41,000 groups when each dimension value was sketched apart: in 2 tasks they were
#: sorted (8.2 s of task time), in 8 hashed (3.2 s). Without dimensions a combination is a
#: key (2,263 there), and ``spark.sql.shuffle.partitions`` tasks hash them.
SKETCH_TASKS = 8
#: What a row is the totals of.
_KEY = ("window", *TARGET, *_DIMENSION)


def served(catalog: Catalog) -> list[Definition]:
    """The definitions gold holds: those without a window."""
    return [d for d in catalog.definitions if d.window is None]


@dataclass(frozen=True)
class _Columns:
    """The per-row column names of one definition (by its place in the catalog)."""

    index: int

    @property
    def numerator(self) -> str:
        return f"n{self.index}"

    @property
    def denominator(self) -> str:
        return f"d{self.index}"

    def summed(self, definition: Definition) -> tuple[str, ...]:
        """The columns summed: the numerator, and a ratio's denominator."""
        if definition.denominator is None:
            return (self.numerator,)
        return (self.numerator, self.denominator)

    @property
    def converted(self) -> str:
        return f"c{self.index}"

    @property
    def value(self) -> str:
        return f"q{self.index}"


def _visit_id() -> Column:
    return F.concat_ws("@", "session_id", F.unix_micros("visit_start").cast("string"))


def _event_amount(measure: Measure) -> Column:
    """What an event adds to the measure's sum (NULL: nothing)."""
    if measure.events is None:
        return F.lit(None).cast("double")
    amount = F.lit(1.0) if measure.value is None else F.col(measure.value).cast("double")
    return F.when(matches(measure.events), amount)


def _visit_amount(measure: Measure) -> Column:
    """What a visit adds to the measure's sum (NULL: nothing)."""
    if measure.visits is None:
        return F.lit(None).cast("double")
    return visit_fact(measure.part())


def _read_by_any(definitions: list[Definition]) -> Column:
    """Whether an event adds to any definition's sums (none reads events: false). The
    others add nothing: an event row's units are its unit rows'."""
    return reduce(Column.__or__, (matches(m.events) for d in definitions
                                  for m in d.measures() if m.events is not None), F.lit(False))


def _unit_ids(counts_visits: bool) -> list[Column]:
    """A row's units: its visitor, and its visit where a definition counts visits."""
    visit = [_visit_id().alias("visit")] if counts_visits else []
    return [F.col("visitor_id"), *visit]


def _dimension_values(dimensions: list[str]) -> list[Column]:
    return [F.col("dimensions")[name].alias(f"dim{j}") for j, name in enumerate(dimensions)]


def unit_time() -> Column:
    """When a visit's unit counts for a target (``sessions.visit_targets``): at the visit's
    start for the assigned population, at its first exposure for the qualified one."""
    return F.when(F.col("population") == ASSIGNED, F.col("visit_start")) \
        .otherwise(F.col("exposed_at"))


def _unit_rows(units: DataFrame, dimensions: list[str], counts_visits: bool,
               windowing: Windowing) -> DataFrame:
    """A row per visit and target that counts its unit (``first``), in the window of its
    ``unit_time``."""
    return units.select(windowing.window(unit_time()).alias("window"), *TARGET,
                        *_unit_ids(counts_visits), F.lit(True).alias("first"),
                        *_dimension_values(dimensions))


def _facts(rows: DataFrame, time: str, definitions: list[Definition], dimensions: list[str],
           *, on_event: bool, windowing: Windowing) -> DataFrame:
    """A row per event or visit and target: its window (of ``time``), its dimension values
    (``dim0``, ...) and what it adds to each definition (no ``first``: beside the units'
    rows, it is NULL, and counts no unit)."""
    amount = _event_amount if on_event else _visit_amount
    columns: list[Column] = []
    for i, d in enumerate(definitions):
        names = _Columns(i)
        columns.append(amount(d.numerator or d.measure).alias(names.numerator))
        if d.denominator is not None:
            columns.append(amount(d.denominator).alias(names.denominator))
    return rows.select(windowing.window(F.col(time)).alias("window"), *TARGET,
                       *_unit_ids(_counts_visits(definitions)),
                       *_dimension_values(dimensions), *columns)


def _by_dimension(rows: DataFrame, dimensions: list[str]) -> DataFrame:
    """Each row once overall (``dimension`` NULL) and once per dimension with its value."""
    overall = F.struct(F.lit(None).cast("string").alias(_DIMENSION[0]),
                       F.lit(None).cast("string").alias(_DIMENSION[1]))
    values = [F.struct(F.lit(name).alias(_DIMENSION[0]), F.col(f"dim{j}").alias(_DIMENSION[1]))
              for j, name in enumerate(dimensions)]
    kept = [c for c in rows.columns if not c.startswith("dim")]
    return rows.select(*kept, F.inline(F.array(overall, *values)))


def _counts_visits(definitions: list[Definition]) -> bool:
    return any(d.unit == "visit" for d in definitions)


def _sketches(definitions: list[Definition], hll_lg_k: int
              ) -> tuple[list[Column], list[Column], Column | None]:
    """The sketch aggregates (units, converted units, quantile values) over rows, those
    that merge their sketches, and which event and visit rows they read besides the units'
    (None: none)."""
    built: list[Column] = []
    merged: list[Column] = []

    def sketch(name: str, aggregate: Column, merge: Callable[[str], Column]) -> None:
        built.append(aggregate.alias(name))
        merged.append(merge(name).alias(name))

    def units(name: str, column: str, when: Column) -> None:
        sketch(name, F.hll_sketch_agg(F.when(when, F.col(column)), hll_lg_k), F.hll_union_agg)

    units("visitor_units", "visitor_id", F.col("first"))
    if _counts_visits(definitions):
        units("visit_units", "visit", F.col("first"))
    read: list[Column] = []
    for i, d in enumerate(definitions):
        names = _Columns(i)
        if d.kind == "proportion":
            converted = F.col(names.numerator) > 0
            units(names.converted, "visit" if d.unit == "visit" else "visitor_id", converted)
            read.append(converted)
        if d.kind == "quantile":
            sketch(names.value, F.kll_sketch_agg_double(names.numerator),
                   F.kll_merge_agg_double)
            read.append(F.col(names.numerator).isNotNull())
    return built, merged, reduce(Column.__or__, read) if read else None


def _partial(name: str) -> str:
    """The name of a sum over part of a key's rows."""
    return f"sum_{name}"


def definition_metrics(events: DataFrame | None, visits: DataFrame | None, units: DataFrame,
                       catalog: Catalog, windowing: Windowing, *, hll_lg_k: int = 12
                       ) -> DataFrame:
    """Gold's ``definition_metrics`` rows (without ``layer``/``computed_at``) from rows of
    events (``sessions.event_targets``) and/or closed visits (``sessions.visit_targets``),
    both with their visit's ``dimensions``, and the targets of the visits whose ``units``
    count (``sessions.visit_targets``: a unit counts in the window of its ``unit_time``;
    counted again, as in the next micro-batch, it changes no merged sketch).

    The sums are taken over the visit rows and the event rows some definition reads (most
    events of a micro-batch are read by none: a pageview adds nothing to orders), first
    per window, target and combination of dimension values in Spark's fast hash
    aggregate. Those partial sums, the units' rows and the event and visit rows the
    sketches read (a conversion, a quantile's value) are then aggregated per combination,
    the sketches built from rows (in ``SKETCH_TASKS`` tasks: Spark aggregates sketches in
    a hash map that falls back to sorting its input beyond
    ``spark.sql.objectHashAggregate.sortBased.fallbackThreshold`` keys), and last each
    combination overall and per dimension, the sketches merged: a row is sketched once,
    not once per dimension (without dimensions, a combination is a row's key)."""
    definitions = served(catalog)
    given = [rows for rows in (events, visits) if rows is not None]
    if not given:
        raise ValueError("definition_metrics needs events, visits or both")
    if not definitions:
        return given[0].sparkSession.createDataFrame([], StructType(
            [f for f in DEFINITION_METRICS.fields if f.name not in ("layer", "computed_at")]))
    dimensions = [d.name for d in catalog.dimensions]
    combination = ["window", *TARGET, *(f"dim{j}" for j in range(len(dimensions)))]
    if events is not None:
        events = events.where(_read_by_any(definitions))
    facts = [_facts(rows, time, definitions, dimensions, on_event=on_event, windowing=windowing)
             for rows, time, on_event in ((events, "event_ts", True),
                                          (visits, "visit_start", False))
             if rows is not None]
    union = facts[0] if len(facts) == 1 else facts[0].unionByName(facts[1])
    summed = [name for i, d in enumerate(definitions) for name in _Columns(i).summed(d)]
    built, merged, read = _sketches(definitions, hll_lg_k)
    rows = _unit_rows(units, dimensions, _counts_visits(definitions), windowing)
    if read is not None:
        rows = rows.unionByName(union.where(read), allowMissingColumns=True)
    rows = rows.unionByName(union.groupBy(*combination).agg(
        *(F.sum(name).alias(_partial(name)) for name in summed)), allowMissingColumns=True)
    tasks = max(SKETCH_TASKS if dimensions else 1, int(str(union.sparkSession.conf.get(
        "spark.sql.shuffle.partitions"))))
    # Partitioned by window and target, every aggregate after this one runs in its tasks.
    combinations = rows.repartition(tasks, "window", *TARGET).groupBy(*combination).agg(
        *built, *(F.sum(_partial(name)).alias(name) for name in summed))
    totals = _by_dimension(combinations, dimensions)
    if dimensions:
        totals = totals.groupBy(*_KEY).agg(*merged, *(F.sum(name).alias(name) for name in summed))
    return totals.select(*TARGET, F.col("window.start").alias("window_start"),
                         F.col("window.end").alias("window_end"), *_DIMENSION,
                         F.inline(F.array(*(_row(i, d) for i, d in enumerate(definitions)))))


def _row(i: int, d: Definition) -> Column:
    """One definition's gold row, as a struct of the aggregated row's columns."""
    names = _Columns(i)

    def present(name: str, kind: str, given: bool) -> Column:
        return (F.col(name) if given else F.lit(None)).cast(kind)

    def summed(name: str) -> Column:
        return F.coalesce(F.col(name), F.lit(0.0))

    return F.struct(
        F.lit(d.name).alias("metric"), F.lit(d.fingerprint).alias("fingerprint"),
        F.col("visit_units" if d.unit == "visit" else "visitor_units")
        .alias("units_sketch"),
        summed(names.numerator).alias("numerator"),
        (summed(names.denominator) if d.denominator is not None
         else F.lit(None).cast("double")).alias("denominator"),
        present(names.converted, "binary", d.kind == "proportion")
        .alias("converted_sketch"),
        present(names.value, "binary", d.kind == "quantile").alias("values_sketch"),
    )


def with_lineage(rows: DataFrame, layer: str) -> DataFrame:
    """Add ``layer``, ``computed_at`` and ``window_date`` and fix the column order of the
    table."""
    return rows.select(*gold_columns(DEFINITION_METRICS, layer))
