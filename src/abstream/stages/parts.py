"""A catalog's parts as Spark columns: what each visit adds to its units' totals.

An event part is an aggregate over a visit's events (the count of those that match its
filter, or the sum of a property over them); a visit part is one value per visit (1 for
every visit, for a bounce, for an error visit). A visit keeps them as a map from part key
to value (``metric_parts``), and each experiment entry the event parts counted from the
visit's first exposure to the experiment on (``exposed_parts``).
"""

from __future__ import annotations

from functools import reduce

from pyspark.sql import Column
from pyspark.sql import functions as F

from abstream.metrics.definitions import Catalog, Condition, EventFilter, Measure

#: The Spark type of a part map, and of a map of event lists.
PARTS_TYPE = "map<string,double>"
LISTS_TYPE = "map<string,array<struct<ts:timestamp,value:double>>>"
#: The visit-level fact behind each visit part: a boolean column of silver (None: every
#: visit).
_VISIT_FACTS = {"visits": None, "bounce_visits": "is_bounce", "error_visits": "is_error_visit"}


def _holds(column: Column, condition: Condition) -> Column:
    checks = []
    if condition.exists is not None:
        checks.append(column.isNotNull() if condition.exists else column.isNull())
    if condition.equals is not None:
        checks.append(column == F.lit(condition.equals))
    if condition.in_ is not None:
        checks.append(column.isin(*condition.in_))
    for bound, compare in ((condition.lt, column.__lt__), (condition.le, column.__le__),
                           (condition.gt, column.__gt__), (condition.ge, column.__ge__)):
        if bound is not None:
            checks.append(compare(F.lit(bound)))
    return reduce(Column.__and__, checks)


def matches(events: EventFilter) -> Column:
    """Whether an event meets the filter (false, never NULL, where a property is NULL)."""
    checks = [_holds(F.col(name), c) for name, c in sorted(events.where.items())]
    if events.type:
        checks.insert(0, F.col("type").isin(*events.type))
    if not checks:
        return F.lit(True)
    return F.coalesce(reduce(Column.__and__, checks), F.lit(False))


def _aggregate(measure: Measure, counted: Column) -> Column:
    assert measure.events is not None
    hit = matches(measure.events) & counted
    if measure.value is None:
        return F.count_if(hit).cast("double")
    # Summed in the property's own type (exact for decimals), then made a double.
    return F.coalesce(F.sum(F.when(hit, F.col(measure.value))).cast("double"), F.lit(0.0))


def event_parts(catalog: Catalog, counted: Column | None = None) -> Column:
    """An aggregate over a visit's events: the map of the catalog's event parts, over the
    events for which ``counted`` holds (all when None)."""
    when = F.coalesce(counted, F.lit(False)) if counted is not None else F.lit(True)
    pairs = [item for key, measure in sorted(catalog.event_parts().items())
             for item in (F.lit(key), _aggregate(measure, when))]
    return F.create_map(*pairs).cast(PARTS_TYPE)


def event_lists(catalog: Catalog) -> Column:
    """An aggregate over a visit's events: per event list of the catalog, the time and
    value (1 for a count) of each matching event that has the value."""
    def listed(measure: Measure) -> Column:
        assert measure.events is not None
        value = F.lit(1.0) if measure.value is None else F.col(measure.value).cast("double")
        event = F.struct(F.col("event_ts").alias("ts"), value.alias("value"))
        return F.collect_list(F.when(matches(measure.events) & value.isNotNull(), event))

    pairs = [item for key, measure in sorted(catalog.listed_parts().items())
             for item in (F.lit(key), listed(measure))]
    return F.create_map(*pairs).cast(LISTS_TYPE)


def any_event_part(catalog: Catalog) -> Column:
    """Whether an event counts for any event part."""
    filters = [matches(m.events) for m in catalog.event_parts().values()
               if m.events is not None]
    return reduce(Column.__or__, filters, F.lit(False))


def visit_fact(key: str) -> Column:
    """A visit part's value for a visit row: 1, or its fact (``is_bounce``, ...) as 1 or 0."""
    column = _VISIT_FACTS[key]
    return F.lit(1.0) if column is None else F.col(column).cast("double")


def visit_parts(catalog: Catalog) -> Column:
    """The map of the catalog's visit parts, from a visit row's ``is_bounce`` and
    ``is_error_visit``."""
    keys = set(catalog.parts()) & _VISIT_FACTS.keys()
    pairs = [item for key in sorted(keys) for item in (F.lit(key), visit_fact(key))]
    return F.create_map(*pairs).cast(PARTS_TYPE)


def properties(catalog: Catalog) -> set[str]:
    """The event properties the catalog reads (its definitions and dimensions)."""
    return {name for d in catalog.definitions for m in d.measures()
            for name in m.properties()} | {d.property for d in catalog.dimensions}


def dimension_values(catalog: Catalog) -> Column:
    """An aggregate over a visit's events: per dimension, the value (as a string) of its
    property on the visit's first event that has it."""
    def first(column: Column) -> Column:
        return F.min_by(column.cast("string"), F.when(column.isNotNull(), F.col("event_ts")))

    pairs = [item for d in catalog.dimensions
             for item in (F.lit(d.name), first(F.col(d.property)))]
    return F.create_map(*pairs).cast("map<string,string>")
