"""Parse and validate raw input lines by the input mapping (``events:``); every refused line
gets a reason, nothing is lost.

Input: ``value`` (the raw line), ``source_file``, ``arrived_at``, ``ingested_at``. Output: the
bronze columns of the mapping, plus ``reason`` (NULL for a valid event) and ``raw``, the
line, kept for refused lines only (valid ones need not carry it through de-duplication and
the cache). Reasons are ``code`` or ``code:path``, with the path as the mapping names it:

- ``oversized_record``, ``empty_record``, ``malformed_json`` (not one JSON object)
- ``invalid_type:<path>``: a JSON value of the wrong type (``"revenue": "12"``), or an
  object expected where the input has something else
- ``missing_field:<path>``: a required field is absent or null, or a property the event's
  type requires (``events.require``)
- ``invalid_value:<path>``: an id that is empty, longer than 128 characters or a JSON
  object/array, an event type the mapping does not list, an experiment entry without id or
  variant, a number outside its property's bounds, or not finite
- ``invalid_timestamp``: not ISO-8601 with date, 'T', time and a zone (``Z`` or ``+hh:mm``),
  or epoch milliseconds or seconds out of the years 1970-9999
- ``future_timestamp``: later than ``future_tolerance`` after it was ingested
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from functools import reduce

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DataType,
    DoubleType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
)

from abstream.config import EventsSettings
from abstream.durations import spark_interval
from abstream.schemas import EXPERIMENT_ENTRY, MONEY, REJECTED

MAX_ID_LENGTH = 128
CORRUPT_COLUMN = "_corrupt_record"
#: The largest epoch time accepted, in milliseconds: the end of the year 9999.
_MAX_EPOCH_MILLIS = 253_402_300_799_999
#: How the JSON parser reads each property type (a decimal as a number, rounded after).
_JSON_TYPES: dict[str, DataType] = {"string": StringType(), "long": LongType(),
                                    "double": DoubleType(), "decimal": DoubleType(),
                                    "boolean": BooleanType()}
_JSON_TIMESTAMP: dict[str, DataType] = {"iso8601": StringType(), "epoch_millis": LongType(),
                                        "epoch_seconds": DoubleType()}


def _first(*cases: tuple[Column, str]) -> Column:
    """CASE WHEN ... THEN reason ...: the first matching case wins; later ones are not run."""
    expression = F.when(cases[0][0], F.lit(cases[0][1]))
    for condition, reason in cases[1:]:
        expression = expression.when(condition, F.lit(reason))
    return expression


def _bad_name(name: Column) -> Column:
    return name.isNull() | (F.length(name) == 0) | (F.length(name) > MAX_ID_LENGTH)


def _bad_id(name: Column) -> Column:
    return _bad_name(name) | F.substring(name, 1, 1).isin("{", "[")


def _entry_is_bad(entry: Column) -> Column:
    return entry.isNull() | _bad_name(entry["id"]) | _bad_name(entry["variant"])


def _bad_entries(entries: Column) -> Column:
    """Whether any experiment entry is null or has a bad id or variant.

    The per-entry check is a lambda that Spark interprets row by row; the common case is
    settled first with compiled array functions: no entry is null or empty (array_contains
    is NULL when an element is null), and the ids together, like the variants together,
    are no longer than one may be, so none of them is too long.
    """
    def settled(names: Column) -> Column:
        return ~F.coalesce(F.array_contains(names, ""), F.lit(True)) \
            & (F.length(F.array_join(names, "")) <= MAX_ID_LENGTH)

    listed = F.coalesce(entries, F.array())
    return F.when(settled(listed["id"]) & settled(listed["variant"]), F.lit(False)) \
        .otherwise(F.exists(listed, _entry_is_bad))


def parse_timestamp(text: Column) -> Column:
    """ISO-8601 with a zone, to a UTC timestamp; NULL when it is not one.

    Spark's cast parses fast but also accepts dates alone or times without a zone, so the
    shape is checked first: 'T' between date and time, 'Z' or an offset at the end.
    """
    has_zone = text.endswith("Z") | F.substring(text, -6, 1).isin("+", "-")
    shaped = (F.substring(text, 11, 1) == "T") & (F.length(text) >= 20) & has_zone
    return F.when(shaped, text.try_cast("timestamp"))


def _event_time(value: Column, kind: str) -> Column:
    """The event time from its JSON value as ``events.timestamp`` says; NULL when it is not
    one (an epoch time outside the years 1970-9999 included)."""
    if kind == "iso8601":
        return parse_timestamp(value)
    millis = value if kind == "epoch_millis" else value * 1000
    in_range = (millis >= 0) & (millis <= _MAX_EPOCH_MILLIS)
    return F.when(in_range, F.timestamp_micros((millis * 1000).cast("long")))


@dataclass(frozen=True)
class _Leaf:
    """A path the mapping reads, and the JSON type it is read as."""

    path: str
    json_type: DataType


def _leaves(mapping: EventsSettings) -> Iterator[_Leaf]:
    fields = mapping.fields
    for name in ("event_id", "session_id", "visitor_id", "type"):
        path = getattr(fields, name)
        if path is not None:
            yield _Leaf(path, StringType())
    yield _Leaf(fields.event_ts, _JSON_TIMESTAMP[mapping.timestamp])
    for spec in mapping.properties.values():
        yield _Leaf(spec.path, _JSON_TYPES[spec.type])
    experiments = mapping.experiments
    if experiments.shape == "map":
        yield _Leaf(experiments.path, MapType(StringType(), StringType()))
    else:
        keys = [StructField(experiments.id, StringType()),
                StructField(experiments.variant, StringType())]
        if experiments.qualified is not None:
            keys.append(StructField(experiments.qualified, BooleanType()))
        yield _Leaf(experiments.path, ArrayType(StructType(keys)))


#: The objects of the input, each a key's value or an object nested in it.
_Tree = dict[str, "_Tree | DataType"]


def _struct(tree: _Tree) -> StructType:
    return StructType([StructField(key, _struct(value) if isinstance(value, dict) else value)
                       for key, value in tree.items()])


def input_schema(mapping: EventsSettings) -> StructType:
    """The JSON object as the parser reads it: each path's keys nested as objects, and a
    column for the text of a line that does not fit."""
    tree: _Tree = {}
    for leaf in _leaves(mapping):
        *parents, key = leaf.path.split(".")
        node = tree
        for parent in parents:
            child = node.setdefault(parent, {})
            assert isinstance(child, dict), "the mapping's paths are checked: none is in another"
            node = child
        node[key] = leaf.json_type
    return _struct(tree).add(CORRUPT_COLUMN, StringType())


def _at(parsed: Column, path: str) -> Column:
    for key in path.split("."):
        parsed = parsed[key]
    return parsed


def _json_path(path: str) -> str:
    return "$" + "".join(f"['{key}']" for key in path.split("."))


def _objects(mapping: EventsSettings) -> list[str]:
    """The paths of the objects that hold mapped values (``user`` of ``user.id``)."""
    found: dict[str, None] = {}
    for leaf in _leaves(mapping):
        keys = leaf.path.split(".")
        for end in range(1, len(keys)):
            found[".".join(keys[:end])] = None
    return list(found)


def _experiment_entries(mapping: EventsSettings, parsed: Column) -> Column:
    """The experiments an event lists as bronze keeps them (``id``, ``variant``,
    ``qualified``); as sent: ``qualified`` absent (NULL) means false wherever it is read."""
    experiments = mapping.experiments
    listed = _at(parsed, experiments.path)
    if experiments.shape == "map":
        none = F.create_map().cast("map<string,string>")
        return F.transform(F.map_entries(F.coalesce(listed, none)),
                           lambda e: F.struct(e["key"].alias("id"),
                                              e["value"].alias("variant"),
                                              F.lit(True).alias("qualified")))
    if (experiments.id, experiments.variant, experiments.qualified) == \
            tuple(EXPERIMENT_ENTRY.fieldNames()):
        return F.coalesce(listed, F.array())

    def entry(e: Column) -> Column:
        flag = F.lit(None).cast("boolean") if experiments.qualified is None \
            else e[experiments.qualified]
        return F.struct(e[experiments.id].alias("id"), e[experiments.variant].alias("variant"),
                        flag.alias("qualified"))

    return F.transform(F.coalesce(listed, F.array()), entry)


def _property(mapping: EventsSettings, parsed: Column, kind: Column, name: str) -> Column:
    """A property's value as bronze keeps it: of its type, NULL for the event types
    (``kind``) that do not keep it."""
    spec = mapping.properties[name]
    value = _at(parsed, spec.path)
    if spec.type == "decimal":
        value = value.try_cast(MONEY)
    if spec.types is not None:
        value = F.when(kind.isin(*spec.types), value)
    return value.alias(name)


def _out_of_bounds(mapping: EventsSettings, parsed: Column) -> list[tuple[Column, str]]:
    """A number that is not finite, or outside its property's bounds."""
    cases = []
    for spec in mapping.properties.values():
        if spec.type not in ("long", "double", "decimal"):
            continue
        value = _at(parsed, spec.path)
        bad = [] if spec.type == "long" else [F.isnan(value), F.abs(value) == float("inf")]
        bad += [] if spec.min is None else [value < spec.min]
        bad += [] if spec.max is None else [value > spec.max]
        if bad:
            cases.append((reduce(Column.__or__, bad), f"invalid_value:{spec.path}"))
    return cases


def parse_beacons(raw: DataFrame, mapping: EventsSettings, max_record_bytes: int,
                  future_tolerance: timedelta) -> DataFrame:
    """Parse raw lines into bronze columns with a ``reason`` for every line that is refused."""
    value = F.col("value")
    fields = mapping.fields
    j = F.from_json(value, input_schema(mapping),
                    {"columnNameOfCorruptRecord": CORRUPT_COLUMN, "mode": "PERMISSIVE"})
    # Three projections, so that the JSON and the timestamp are each parsed once a line: the
    # optimizer does not inline an expression that several later ones read.
    parsed = raw.select("value", "source_file", "arrived_at", "ingested_at", j.alias("j")) \
        .select("*", _event_time(_at(F.col("j"), fields.event_ts), mapping.timestamp)
                .alias("ts"))
    b = F.col("j")
    ts = F.col("ts")
    kind = _at(b, fields.type)
    latest_allowed = F.col("ingested_at") + F.expr(f"INTERVAL {spark_interval(future_tolerance)}")
    corrupt = b[CORRUPT_COLUMN].isNotNull()

    def mistyped(path: str) -> Column:
        return corrupt & F.get_json_object(value, _json_path(path)).isNotNull() \
            & _at(b, path).isNull()

    typed = [leaf.path for leaf in _leaves(mapping) if leaf.json_type != StringType()]
    required = [p for p in (fields.event_id, fields.event_ts, fields.session_id,
                            fields.visitor_id, fields.type) if p is not None]
    ids = [p for p in (fields.event_id, fields.session_id, fields.visitor_id) if p is not None]
    cases: list[tuple[Column, str]] = [
        (F.octet_length(value) > max_record_bytes, "oversized_record"),
        (F.trim(value) == "", "empty_record"),
        (b.isNull() | (corrupt & F.json_object_keys(value).isNull()), "malformed_json"),
        *((mistyped(path), f"invalid_type:{path}") for path in typed),
        *((mistyped(path), f"invalid_type:{path}") for path in _objects(mapping)),
        # What is left of a line that does not fit: a mistyped key of an experiment entry.
        (corrupt, f"invalid_type:{mapping.experiments.path}"),
        *((_at(b, path).isNull(), f"missing_field:{path}") for path in required),
        *(((kind == event_type) & _at(b, mapping.properties[name].path).isNull(),
           f"missing_field:{mapping.properties[name].path}")
          for event_type, names in mapping.require.items() for name in names),
        *((_bad_id(_at(b, path)), f"invalid_value:{path}") for path in ids),
    ]
    if mapping.types is not None:
        cases.append((~kind.isin(*mapping.types), f"invalid_value:{fields.type}"))
    entries = _experiment_entries(mapping, b)
    cases += [
        (_bad_entries(entries), f"invalid_value:{mapping.experiments.path}"),
        *_out_of_bounds(mapping, b),
        (ts.isNull(), "invalid_timestamp"),
        (ts > latest_allowed, "future_timestamp"),
    ]
    visitor = _at(b, fields.visitor_id)
    return parsed.select(
        _at(b, fields.event_id).alias("event_id"),
        ts.alias("event_ts"),
        (visitor if fields.session_id is None else _at(b, fields.session_id))
        .alias("session_id"),
        visitor.alias("visitor_id"),
        kind.alias("type"),
        *(_property(mapping, b, kind, name) for name in mapping.properties),
        entries.alias("experiments"),
        F.col("source_file"),
        F.col("arrived_at"),
        F.col("ingested_at"),
        F.to_date(ts).alias("event_date"),
        value.alias("raw"),
        _first(*cases).alias("reason"),
    ).withColumn("raw", F.when(F.col("reason").isNotNull(), F.col("raw")))


def valid_events(parsed: DataFrame) -> DataFrame:
    """The bronze rows: lines that passed every check."""
    return parsed.where(F.col("reason").isNull()).drop("raw", "reason")


def rejected_records(parsed: DataFrame) -> DataFrame:
    """The quarantine rows: the raw line, why it was refused, where it came from."""
    return parsed.where(F.col("reason").isNotNull()).select(
        "raw", "reason", "source_file", "arrived_at", "ingested_at",
        F.to_date("ingested_at").alias("ingest_date"),
    ).select(*REJECTED.fieldNames())

