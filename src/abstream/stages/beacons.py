"""Parse and validate raw beacon lines; every refused line gets a reason, nothing is lost.

Input: ``value`` (the raw line), ``source_file``, ``arrived_at``, ``ingested_at``. Output: the
bronze columns, plus ``reason`` (NULL for a valid event) and ``raw``, the line, kept for
refused lines only (valid ones need not carry it through de-duplication and the cache).
Reasons are ``code`` or ``code:field``:

- ``oversized_record``, ``empty_record``, ``malformed_json`` (not one JSON object)
- ``invalid_type:<field>``: a JSON value of the wrong type (``"revenue": "12"``)
- ``missing_field:<field>``: a required field is absent or null
- ``invalid_value:<field>``: an id that is empty, longer than 128 characters or a JSON
  object/array, an unknown event type, an experiment entry without id or variant, a
  negative or non-finite amount
- ``invalid_timestamp``: not ISO-8601 with date, 'T', time and a zone (``Z`` or ``+hh:mm``)
- ``future_timestamp``: later than ``future_tolerance`` after it was ingested
"""

from __future__ import annotations

from datetime import timedelta

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from abstream.durations import spark_interval
from abstream.schemas import BEACON, CORRUPT_COLUMN, EVENT_TYPES, EVENTS, MONEY, REJECTED

MAX_ID_LENGTH = 128
MAX_REVENUE = 1e15
REQUIRED = ("event_id", "event_ts", "session_id", "visitor_id", "type")
IDS = ("event_id", "session_id", "visitor_id")
TYPED = ("revenue", "units", "page_load_ms", "experiments")
AMOUNTS = ("revenue", "units", "page_load_ms")


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


def parse_beacons(raw: DataFrame, max_record_bytes: int,
                  future_tolerance: timedelta) -> DataFrame:
    """Parse raw lines into bronze columns with a ``reason`` for every line that is refused."""
    value = F.col("value")
    j = F.from_json(value, BEACON, {"columnNameOfCorruptRecord": CORRUPT_COLUMN,
                                    "mode": "PERMISSIVE"})
    # Three projections, so that the JSON and the timestamp are each parsed once a line: the
    # optimizer does not inline an expression that several later ones read.
    parsed = raw.select("value", "source_file", "arrived_at", "ingested_at", j.alias("j")) \
        .select("*", parse_timestamp(F.col("j.event_ts")).alias("ts"))
    b = F.col("j")
    ts = F.col("ts")
    latest_allowed = F.col("ingested_at") + F.expr(f"INTERVAL {spark_interval(future_tolerance)}")
    is_order = b["type"] == "order"
    corrupt = b[CORRUPT_COLUMN].isNotNull()

    cases: list[tuple[Column, str]] = [
        (F.octet_length(value) > max_record_bytes, "oversized_record"),
        (F.trim(value) == "", "empty_record"),
        (b.isNull() | (corrupt & F.json_object_keys(value).isNull()), "malformed_json"),
    ]
    cases += [
        (corrupt & F.get_json_object(value, f"$.{name}").isNotNull() & b[name].isNull(),
         f"invalid_type:{name}")
        for name in TYPED
    ]
    cases.append((corrupt, "invalid_type:experiments"))
    cases += [(b[name].isNull(), f"missing_field:{name}") for name in REQUIRED]
    cases += [(is_order & b[name].isNull(), f"missing_field:{name}")
              for name in ("revenue", "units")]
    cases += [(_bad_id(b[name]), f"invalid_value:{name}") for name in IDS]
    cases += [
        (~b["type"].isin(*EVENT_TYPES), "invalid_value:type"),
        (_bad_entries(b["experiments"]), "invalid_value:experiments"),
        (F.isnan(b["revenue"]) | (b["revenue"] < 0) | (b["revenue"] > MAX_REVENUE),
         "invalid_value:revenue"),
        (b["units"] < 0, "invalid_value:units"),
        (b["page_load_ms"] < 0, "invalid_value:page_load_ms"),
        (ts.isNull(), "invalid_timestamp"),
        (ts > latest_allowed, "future_timestamp"),
    ]
    return parsed.select(
        b["event_id"].alias("event_id"),
        ts.alias("event_ts"),
        b["session_id"].alias("session_id"),
        b["visitor_id"].alias("visitor_id"),
        b["type"].alias("type"),
        b["page"].alias("page"),
        # Entries as sent: ``qualified`` absent (NULL) means false wherever it is read.
        F.coalesce(b["experiments"], F.array()).alias("experiments"),
        F.when(is_order, b["revenue"].try_cast(MONEY)).alias("revenue"),
        F.when(is_order, b["units"]).alias("units"),
        F.when(b["type"] == "pageview", b["page_load_ms"]).alias("page_load_ms"),
        F.col("source_file"),
        F.col("arrived_at"),
        F.col("ingested_at"),
        F.to_date(ts).alias("event_date"),
        value.alias("raw"),
        _first(*cases).alias("reason"),
    ).withColumn("raw", F.when(F.col("reason").isNotNull(), F.col("raw")))


def valid_events(parsed: DataFrame) -> DataFrame:
    """The bronze rows: lines that passed every check."""
    return parsed.where(F.col("reason").isNull()).select(*EVENTS.fieldNames())


def rejected_records(parsed: DataFrame) -> DataFrame:
    """The quarantine rows: the raw line, why it was refused, where it came from."""
    return parsed.where(F.col("reason").isNotNull()).select(
        "raw", "reason", "source_file", "arrived_at", "ingested_at",
        F.to_date("ingested_at").alias("ingest_date"),
    ).select(*REJECTED.fieldNames())
