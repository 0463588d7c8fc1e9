"""The PostgreSQL serving store's tables, from the Delta tables' schemas.

- ``experiment_metrics`` and ``definition_metrics``: the serving view's rows (``serving.view``):
  gold's columns, visitor and unit sketches as ``bytea``, and ``final``; one row per window
  and key (the key's columns are unique, NULLs alike).
- ``store_progress``: one row, ``serving``: the Delta versions (and the catalog's
  definitions) the two tables equal; every write updates it in the transaction that writes
  the rows, after locking it, so a write computed from an older state is refused.
- ``store_writes``: one row per write: its writer, what it covers, the windows it replaced.
- ``published_results`` and ``publication``: the published report (``report --publish``)
  and its version, which ``abstream serve`` answers from.
"""

from __future__ import annotations

import psycopg
from psycopg import sql
from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    DataType,
    DecimalType,
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from abstream.io.lease import ensure_lease_tables
from abstream.io.postgres import PROGRESS, PUBLICATION, PUBLISHED, SERVING, WRITES, Store
from abstream.schemas import (
    DEFINITION_KEY,
    DEFINITION_METRICS,
    EXPERIMENT_METRICS,
    EXPERIMENT_RESULTS,
    METRIC_KEY,
)

#: The serving view's tables: their columns (the view's) and key.
VIEW_TABLES: dict[str, tuple[StructType, tuple[str, ...]]] = {
    "experiment_metrics": (
        StructType([*EXPERIMENT_METRICS.fields, StructField("final", BooleanType(), False)]),
        tuple(k for k in METRIC_KEY if k != "layer")),
    "definition_metrics": (
        StructType([*DEFINITION_METRICS.fields, StructField("final", BooleanType(), False)]),
        tuple(k for k in DEFINITION_KEY if k != "layer")),
}
#: The column of the served rows that holds the epoch of the replica that wrote them (NULL:
#: a single deployment's).
EPOCH = "epoch"
#: Columns of ``published_results`` held as ``jsonb``.
JSON_COLUMNS = ("document",)


def pg_type(data_type: DataType, name: str = "") -> str:
    """The PostgreSQL type holding a Spark column's values."""
    if name in JSON_COLUMNS:
        return "jsonb"
    if isinstance(data_type, DecimalType):
        return f"numeric({data_type.precision}, {data_type.scale})"
    types = {StringType: "text", LongType: "bigint", DoubleType: "double precision",
             TimestampType: "timestamptz", BinaryType: "bytea", BooleanType: "boolean"}
    return types[type(data_type)]


def _columns(schema: StructType) -> sql.Composed:
    return sql.SQL(", ").join(
        sql.SQL("{} {}{}").format(sql.Identifier(f.name), sql.SQL(pg_type(f.dataType, f.name)),
                                  sql.SQL("" if f.nullable else " NOT NULL"))
        for f in schema.fields)


def ensure_schema(connection: psycopg.Connection, store: Store) -> None:
    """Create the store's schema and tables where missing, in one transaction that holds a
    lock only concurrent creators wait for (a creation killed part way leaves nothing)."""
    with connection.transaction():
        connection.execute("SELECT pg_advisory_xact_lock(hashtext(%s))",
                           (f"abstream schema {store.schema}",))
        connection.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(
            sql.Identifier(store.schema)))
        for name, (schema, key) in VIEW_TABLES.items():
            connection.execute(sql.SQL(
                "CREATE TABLE IF NOT EXISTS {} ({}, UNIQUE NULLS NOT DISTINCT ({}))").format(
                store.table(name), _columns(schema),
                sql.SQL(", ").join(map(sql.Identifier, key))))
        connection.execute(sql.SQL(
            "CREATE TABLE IF NOT EXISTS {} (store text PRIMARY KEY, versions jsonb NOT NULL, "
            "catalog text NOT NULL, writer text, covers jsonb, written_at timestamptz)"
        ).format(store.table(PROGRESS)))
        connection.execute(sql.SQL(
            "INSERT INTO {} (store, versions, catalog) VALUES (%s, '{{}}', '') "
            "ON CONFLICT DO NOTHING").format(store.table(PROGRESS)), (SERVING,))
        connection.execute(sql.SQL(
            "CREATE TABLE IF NOT EXISTS {} (id bigserial PRIMARY KEY, writer text NOT NULL, "
            "versions_before jsonb NOT NULL, versions jsonb NOT NULL, covers jsonb NOT NULL, "
            "windows_from timestamptz, windows_until timestamptz, rows_written bigint NOT NULL, "
            "written_at timestamptz NOT NULL DEFAULT now())").format(store.table(WRITES)))
        connection.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} ({})").format(
            store.table(PUBLISHED), _columns(EXPERIMENT_RESULTS)))
        connection.execute(sql.SQL(
            "CREATE TABLE IF NOT EXISTS {} (store text PRIMARY KEY, version bigint NOT NULL, "
            "published_at timestamptz)").format(store.table(PUBLICATION)))
        connection.execute(sql.SQL(
            "INSERT INTO {} (store, version) VALUES (%s, 0) ON CONFLICT DO NOTHING").format(
            store.table(PUBLICATION)), (SERVING,))
        for name in (*VIEW_TABLES, PUBLISHED):
            _add_columns(connection, store.table(name), {EPOCH: "bigint"})
        _add_columns(connection, store.table(PROGRESS),
                     {"replica": "text", EPOCH: "bigint", "position": "jsonb"})
        _add_columns(connection, store.table(WRITES),
                     {"seq": "bigint", "replica": "text", EPOCH: "bigint"})
        ensure_lease_tables(connection, store)


def _add_columns(connection: psycopg.Connection, table: sql.Composed,
                 columns: dict[str, str]) -> None:
    """Columns a store made by an earlier abstream lacks (altered only then: ALTER TABLE
    waits for the table's readers)."""
    present = {row[0] for row in connection.execute(
        "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0 "
        "AND NOT attisdropped", (table.as_string(connection),)).fetchall()}
    missing = {name: kind for name, kind in columns.items() if name not in present}
    if missing:
        connection.execute(sql.SQL("ALTER TABLE {} {}").format(table, sql.SQL(", ").join(
            sql.SQL("ADD COLUMN IF NOT EXISTS {} {}").format(sql.Identifier(name),
                                                             sql.SQL(kind))
            for name, kind in missing.items())))
