"""Results broken down by a dimension (``abstream report --by NAME``).

A unit's value of a dimension is the one its first visit in an experiment has (the visit's
first event with the property): fixed when it entered the experiment, whatever it does
later. Per experiment, the ``max_values`` values with the most units are kept and the others
are ``other``; a unit without the property is ``(none)``. Visits computed before the
dimension was declared have no value for it and are left out (the report says how many).

The breakdown reuses the report's whole computation: each visit's entries are given the
experiment id and the unit's value together (``SEPARATOR`` between them), so every
comparison is made per value, as if each value were an experiment of its own; the
multiple-comparison correction is then made again over each experiment and population's
family of values, metrics and variants (``report.build.judged_by_family``).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from abstream.errors import UsageError
from abstream.metrics.definitions import Catalog, Dimension
from abstream.report.moments import has_key

#: Between an experiment id and a dimension value in a segmented entry's id.
SEPARATOR = "\x1f"
OTHER, NONE = "other", "(none)"


def dimension_named(catalog: Catalog, name: str) -> Dimension:
    """The catalog's dimension ``name``; a ``UsageError`` naming the others without it."""
    dimension = catalog.dimension(name)
    if dimension is None:
        names = ", ".join(d.name for d in catalog.dimensions) or "none is declared"
        raise UsageError(f"--by {name}: no such dimension in metrics.dimensions ({names})")
    return dimension


def computed_with(dimension: Dimension) -> Column:
    """Whether a visit was computed with ``dimension`` declared (its value may be NULL):
    visits computed before have no value for it, not even ``(none)``."""
    return has_key("dimensions", dimension.name)


def segmented_visits(visits: DataFrame, dimension: Dimension) -> DataFrame:
    """``visits`` computed with ``dimension`` as one row per visit and experiment entry, the
    entry's id naming the experiment and the unit's (visitor's) value of ``dimension``."""
    kept = [c for c in visits.columns if c != "experiments"]
    entries = visits.where(computed_with(dimension)) \
        .select(*kept, F.explode("experiments").alias("entry"))
    first_visit = Window.partitionBy("entry.id", "visitor_id").orderBy("visit_start") \
        .rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing)
    valued = entries.withColumn("value", F.coalesce(
        F.first(F.col("dimensions")[dimension.name], ignorenulls=True).over(first_visit),
        F.lit(NONE)))
    units = valued.groupBy(F.col("entry.id").alias("id"), "value") \
        .agg(F.count_distinct("visitor_id").alias("units"))
    most = units.withColumn("rank", F.row_number().over(
        Window.partitionBy("id").orderBy(F.desc("units"), "value"))) \
        .where(F.col("rank") <= dimension.max_values) \
        .select("id", F.col("value").alias("kept"))
    joined = valued.join(F.broadcast(most), (F.col("entry.id") == F.col("id"))
                         & (F.col("value") == F.col("kept")), "left")
    value = F.when(F.col("kept").isNotNull(), F.col("value")).otherwise(F.lit(OTHER))
    entry = F.col("entry").withField("id", F.concat(F.col("entry.id"), F.lit(SEPARATOR), value))
    return joined.select(*kept, F.array(entry).alias("experiments"))


def split(segmented_id: str) -> tuple[str, str]:
    """A segmented entry's experiment id and dimension value."""
    experiment, _, value = segmented_id.partition(SEPARATOR)
    return experiment, value
