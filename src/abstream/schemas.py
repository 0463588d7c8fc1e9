"""Schemas of the bronze, quarantine, silver and gold tables."""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from abstream.config import EventsSettings

MONEY = DecimalType(18, 2)
MONEY_TOTAL = DecimalType(28, 2)
MONEY_SQUARED = DecimalType(38, 4)


EXPERIMENT_ENTRY = StructType(
    [
        StructField("id", StringType()),
        StructField("variant", StringType()),
        StructField("qualified", BooleanType()),
    ]
)

#: A map from a metric part's key to a visit's value of it (``stages.parts``).
PARTS = MapType(StringType(), DoubleType())
#: A map from an event list's key to the time and value of each of a visit's events in it.
EVENT_LISTS = MapType(StringType(), ArrayType(StructType([
    StructField("ts", TimestampType()), StructField("value", DoubleType())])))

#: An experiment entry of a visit: ``qualified`` when one of the visit's events listed it
#: with ``qualified = true``; then ``exposed_at`` is the visit's first exposure to the
#: experiment and ``exposed_orders``/``exposed_revenue`` count the orders from then on,
#: ``exposed_parts`` the metric catalog's event parts.
VISIT_ENTRY = StructType(
    [
        StructField("id", StringType()),
        StructField("variant", StringType()),
        StructField("qualified", BooleanType()),
        StructField("exposed_at", TimestampType()),
        StructField("exposed_orders", LongType()),
        StructField("exposed_revenue", MONEY_TOTAL),
        StructField("exposed_parts", PARTS),
    ]
)

#: Spark's type of each ``events.properties`` type in bronze.
PROPERTY_TYPES: dict[str, DataType] = {"string": StringType(), "long": LongType(),
                                       "double": DoubleType(), "decimal": MONEY,
                                       "boolean": BooleanType()}


def bronze_schema(events: EventsSettings) -> StructType:
    """bronze ``events`` for an input mapping: one row per valid, de-duplicated event; the
    event's own columns, its properties, then where and when it was read; partitioned by
    event_date."""
    return StructType([
        StructField("event_id", StringType(), False),
        StructField("event_ts", TimestampType(), False),
        StructField("session_id", StringType(), False),
        StructField("visitor_id", StringType(), False),
        StructField("type", StringType(), False),
        *(StructField(name, PROPERTY_TYPES[spec.type])
          for name, spec in events.properties.items()),
        StructField("experiments", ArrayType(EXPERIMENT_ENTRY), False),
        StructField("source_file", StringType()),
        StructField("arrived_at", TimestampType()),
        StructField("ingested_at", TimestampType(), False),
        StructField("event_date", DateType(), False),
    ])


#: bronze ``events`` of the default mapping (the beacon).
EVENTS = bronze_schema(EventsSettings())



def valid_event_schema(events: EventsSettings) -> StructType:
    """A valid event as the Kafka path writes it to ``kafka.valid_topic`` (JSON): the event
    columns of bronze, without where and when it was read."""
    bronze = bronze_schema(events)
    return StructType(bronze.fields[: bronze.fieldNames().index("source_file")])

#: quarantine ``rejected``: the raw record, why it was refused, where it came from.
REJECTED = StructType(
    [
        StructField("raw", StringType()),
        StructField("reason", StringType(), False),
        StructField("source_file", StringType()),
        StructField("arrived_at", TimestampType()),
        StructField("ingested_at", TimestampType(), False),
        StructField("ingest_date", DateType(), False),
    ]
)

#: silver ``sessions``: one row per closed visit.
SESSIONS = StructType(
    [
        StructField("session_id", StringType(), False),
        StructField("visit_start", TimestampType(), False),
        StructField("visit_end", TimestampType(), False),
        StructField("duration_ms", LongType(), False),
        StructField("visitor_id", StringType(), False),
        StructField("events", LongType(), False),
        StructField("pageviews", LongType(), False),
        StructField("add_to_carts", LongType(), False),
        StructField("orders", LongType(), False),
        StructField("revenue", MONEY_TOTAL, False),
        StructField("units", LongType(), False),
        StructField("errors", LongType(), False),
        StructField("is_bounce", BooleanType(), False),
        StructField("is_error_visit", BooleanType(), False),
        StructField("experiments", ArrayType(VISIT_ENTRY), False),
        StructField("metric_parts", PARTS),
        StructField("metric_values", EVENT_LISTS),
        StructField("dimensions", MapType(StringType(), StringType())),
        StructField("layer", StringType(), False),
        StructField("computed_at", TimestampType(), False),
        StructField("visit_date", DateType(), False),
    ]
)

#: The columns of silver ``sessions`` that are not the visit's own.
SESSION_LINEAGE = ("layer", "computed_at", "visit_date")

def session_state(properties: Mapping[str, DataType]) -> StructType:
    """``SESSION_STATE`` with the further ``properties`` the metric catalog reads."""
    return StructType([
        StructField("session_id", StringType(), False),
        StructField("visitor_id", StringType(), False),
        StructField("event_ts", TimestampType(), False),
        StructField("type", StringType(), False),
        StructField("revenue", MONEY),
        StructField("units", LongType()),
        StructField("page_load_ms", LongType()),
        *(StructField(name, kind) for name, kind in properties.items()),
        StructField("experiments", ArrayType(EXPERIMENT_ENTRY), False),
        StructField("visit_start", TimestampType()),
        StructField("counted_in", TimestampType()),
        StructField("late", BooleanType(), False),
    ])


#: What the sessionize component writes of each micro-batch, and reads back: the events it
#: sessionized (the bronze columns sessions and metrics read) with their visit's start and,
#: for the events it carried from the micro-batch before, the start of the visit they were
#: counted in then (``counted_in``). New events behind the watermark are kept as ``late``
#: rows, counted and not sessionized. The next micro-batch carries on the events of the
#: visits left open (``OPEN_VISITS``). The events of open visits a micro-batch did not
#: touch are carried over as they are, in the same columns.
SESSION_STATE = session_state({})

#: The visits a micro-batch of sessionize left open, each with the micro-batch whose
#: snapshot holds its events (its generation), as silver has it (without the lineage): a
#: micro-batch writes those it sessionized or copied, whole, in its own snapshot (their
#: generation), and leaves the others where earlier snapshots wrote them. Snapshots of
#: earlier layouts listed every open visit in each: those of other generations by key,
#: end, events and generation alone (NULL for the rest); before that whole; before they
#: kept the whole visit, with NULL measures (and, earlier still, NULL ends and events and no
#: generation: the snapshot itself held the events).
OPEN_VISITS = StructType(
    [
        *(StructField(field.name, field.dataType) for field in SESSIONS.fields
          if field.name not in SESSION_LINEAGE),
        StructField("generation", LongType()),
    ]
)

#: The open visits a micro-batch of sessionize wrote again, so that the rows earlier
#: snapshots hold of them are no longer theirs: a session it sessionized again
#: (``visit_start`` NULL: each of its visits), or a visit it copied.
SUPERSEDED_VISITS = StructType([
    StructField("session_id", StringType(), False),
    StructField("visit_start", TimestampType()),
])

#: gold ``experiment_metrics``: experiment x variant x population x window x layer.
METRIC_KEY = ("experiment_id", "variant", "population", "window_start", "window_end", "layer")
EXPERIMENT_METRICS = StructType(
    [
        StructField("experiment_id", StringType(), False),
        StructField("variant", StringType(), False),
        StructField("population", StringType(), False),
        StructField("window_start", TimestampType(), False),
        StructField("window_end", TimestampType(), False),
        StructField("visitors_sketch", BinaryType()),
        StructField("visitors", LongType(), False),
        StructField("events", LongType(), False),
        StructField("pageviews", LongType(), False),
        StructField("add_to_carts", LongType(), False),
        StructField("orders", LongType(), False),
        StructField("revenue", MONEY_TOTAL, False),
        StructField("revenue_sq", MONEY_SQUARED, False),
        StructField("units", LongType(), False),
        StructField("errors", LongType(), False),
        StructField("page_load_ms_sum", LongType(), False),
        StructField("page_load_count", LongType(), False),
        StructField("visits", LongType(), False),
        StructField("bounces", LongType(), False),
        StructField("error_visits", LongType(), False),
        StructField("layer", StringType(), False),
        StructField("computed_at", TimestampType(), False),
    ]
)

#: The partition column of both gold tables beside ``layer``: the day of a row's window
#: (``window_start``'s date), so that ``abstream maintain`` compacts a day once it has closed
#: and never rewrites the days before. Not part of the serving view.
WINDOW_DATE = "window_date"
#: The day partition of both gold tables and the timestamp column it is the date of.
WINDOW_DAY = (WINDOW_DATE, "window_start")


def with_window_date(schema: StructType) -> StructType:
    """A gold table's columns as stored: ``schema``'s and ``WINDOW_DATE``."""
    return StructType([*schema.fields, StructField(WINDOW_DATE, DateType(), False)])


#: gold ``definition_metrics``: one row per catalog definition (by name and fingerprint),
#: experiment, variant, population, window, layer and dimension value (``dimension`` NULL:
#: every unit); its additive totals and sketches.
DEFINITION_KEY = ("metric", "fingerprint", "experiment_id", "variant", "population",
                  "window_start", "window_end", "dimension", "dimension_value", "layer")
DEFINITION_METRICS = StructType(
    [
        StructField("metric", StringType(), False),
        StructField("fingerprint", StringType(), False),
        StructField("experiment_id", StringType(), False),
        StructField("variant", StringType(), False),
        StructField("population", StringType(), False),
        StructField("window_start", TimestampType(), False),
        StructField("window_end", TimestampType(), False),
        StructField("dimension", StringType()),
        StructField("dimension_value", StringType()),
        StructField("units_sketch", BinaryType()),
        StructField("numerator", DoubleType(), False),
        StructField("denominator", DoubleType()),
        StructField("converted_sketch", BinaryType()),
        StructField("values_sketch", BinaryType()),
        StructField("layer", StringType(), False),
        StructField("computed_at", TimestampType(), False),
    ]
)

#: ``batch_coverage``: one row per event-time range the batch layer computed. Gold windows
#: starting in ``[range_start, range_end)`` are final. The batch read bronze as of
#: ``bronze_version``; new bronze data with event time in ``[depends_from, depends_until]``
#: changes the range's results, so ``batch --since-last`` computes it again.
BATCH_COVERAGE = StructType(
    [
        StructField("range_start", TimestampType(), False),
        StructField("range_end", TimestampType(), False),
        StructField("depends_from", TimestampType(), False),
        StructField("depends_until", TimestampType(), False),
        StructField("bronze_version", LongType(), False),
        StructField("events", LongType(), False),
        StructField("visits", LongType(), False),
        StructField("metric_rows", LongType(), False),
        StructField("run_id", StringType(), False),
        StructField("computed_at", TimestampType(), False),
    ]
)

#: ``experiment_results``: the latest published report, replaced at each ``report
#: --publish``, for the exporter. ``kind`` says which columns a row fills: ``experiment``
#: (the SRM check), ``variant`` (visitors) or ``comparison`` (a variant against control on
#: a metric: the lift, its confidence sequence and the adjusted p-value). An ``experiment``
#: row's ``document`` is the experiment and population as JSON, for ``abstream serve``:
#: ``results`` (its entry in ``report --json``) and ``series`` (its lift over time); a
#: ``breakdown`` row's is its results per value of a ``dimension`` (``report --by``).
EXPERIMENT_RESULTS = StructType(
    [
        StructField("published_at", TimestampType(), False),
        StructField("as_of", TimestampType()),
        StructField("kind", StringType(), False),
        StructField("experiment_id", StringType(), False),
        StructField("population", StringType(), False),
        StructField("variant", StringType()),
        StructField("metric", StringType()),
        StructField("role", StringType()),
        StructField("higher_is_better", BooleanType()),
        StructField("srm_p_value", DoubleType()),
        StructField("srm_threshold", DoubleType()),
        StructField("visitors", LongType()),
        StructField("lift", DoubleType()),
        StructField("lift_ci_low", DoubleType()),
        StructField("lift_ci_high", DoubleType()),
        StructField("p_value_adjusted", DoubleType()),
        StructField("document", StringType()),
        StructField("dimension", StringType()),
    ]
)
