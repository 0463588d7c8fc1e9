"""Helpers for tests: configs with a data dir of their own, beacons, landing files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import replace
from datetime import datetime
from decimal import Decimal
from pathlib import Path

import datasketches
import pytest
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from abstream.config import Config, EventsSettings
from abstream.io.postgres_local import LocalPostgres
from abstream.metrics.catalog import default_catalog
from abstream.metrics.definitions import Catalog
from abstream.schemas import EVENTS
from abstream.speed import Context

#: The default input mapping: the beacon.
BEACON = EventsSettings()
#: The default metric catalog.
CATALOG = default_catalog()
#: ``abstream`` in a Python where ``import pyspark`` fails.
WITHOUT_SPARK = [sys.executable, "-c", "import sys; sys.modules['pyspark'] = None; "
                 "from abstream.cli import main; sys.exit(main(sys.argv[1:]))"]

#: The dimensions of the generator's beacons (declared: the default catalog has none).
DIMENSIONS = [{"name": "device", "property": "device"}, {"name": "country", "property": "country"}]
#: The default definitions with ``DIMENSIONS``.
CATALOG_BY_DIMENSIONS = Catalog.model_validate(
    {"definitions": CATALOG.definitions, "dimensions": DIMENSIONS})

#: The password of the test PostgreSQL server's user.
POSTGRES_PASSWORD = "pg-s3cret-0x1F"

#: When the bronze rows that tests build arrived and were ingested.
T0_BRONZE = datetime(2026, 1, 5, 10, 0)

TEST_SPARK_CONF = {
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "2",
    # One JVM runs the whole suite: hundreds of streaming queries, Delta logs and caches.
    "spark.driver.memory": "3g",
}


def make_config(data_dir: Path, **sections: dict[str, object]) -> Config:
    """Defaults with a data dir of the test's own and small-data Spark settings."""
    return Config.model_validate({"data_dir": str(data_dir), "spark": {"conf": TEST_SPARK_CONF},
                                  **sections})


#: A bronze row's fields where a test does not set them (``event_ts`` and ``event_id`` it
#: must); ``event_date`` follows ``event_ts``.
BRONZE_DEFAULTS: dict[str, object] = {
    "session_id": "s1", "visitor_id": "v1", "type": "pageview", "page": "/", "device": None,
    "country": None,
    "experiments": [("exp", "control", False)], "revenue": None, "units": None,
    "page_load_ms": None, "source_file": "f", "arrived_at": T0_BRONZE, "ingested_at": T0_BRONZE,
}


def bronze_row(event_id: str, event_ts: datetime, **fields: object) -> tuple[object, ...]:
    """One row of bronze ``events``, by field name; money as ``Decimal``."""
    values = {**BRONZE_DEFAULTS, "event_id": event_id, "event_ts": event_ts,
              "event_date": event_ts.date(), **fields}
    if values["revenue"] is not None:
        values["revenue"] = Decimal(values["revenue"])
    unknown = set(values) - set(EVENTS.fieldNames())
    if unknown:
        raise TypeError(f"bronze has no field {sorted(unknown)}")
    return tuple(values[name] for name in EVENTS.fieldNames())


def assigned_entry(experiment: Column, variant: Column) -> Column:
    """A silver visit's entry (``VISIT_ENTRY``) of a visit never exposed to the experiment."""
    return F.struct(experiment.alias("id"), variant.alias("variant"),
                    F.lit(False).alias("qualified"),
                    F.lit(None).cast("timestamp").alias("exposed_at"),
                    F.lit(0).cast("long").alias("exposed_orders"),
                    F.lit(0).cast("decimal(28,2)").alias("exposed_revenue"),
                    F.create_map().cast("map<string,double>").alias("exposed_parts"))


def bronze_frame(spark: SparkSession, rows: Iterable[tuple[object, ...]]) -> DataFrame:
    """``bronze_row`` rows as a DataFrame of bronze's schema."""
    return spark.createDataFrame(list(rows), EVENTS)


def blocks_held(spark: SparkSession) -> int:
    """How many RDDs the session holds blocks of (caches and local checkpoints), besides
    Delta's own cache of each table's state."""
    held = spark.sparkContext._jsc.getPersistentRDDs().values()
    return sum(1 for rdd in held if not (rdd.name() or "").startswith("Delta Table State"))


def write_lines(folder: Path, name: str, lines: Iterable[str]) -> Path:
    """A landing file written the way writers should: hidden name first, then renamed."""
    folder.mkdir(parents=True, exist_ok=True)
    temporary = folder / f".{name}.tmp"
    temporary.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    final = folder / name
    temporary.replace(final)
    return final


def beacon(event_id: str, ts: str, *, session: str = "s1", visitor: str = "v1",
           kind: str = "pageview", experiments: list[dict[str, object]] | None = None,
           **fields: object) -> dict[str, object]:
    record: dict[str, object] = {
        "event_id": event_id, "event_ts": ts, "session_id": session, "visitor_id": visitor,
        "type": kind, "page": "/",
        "experiments": experiments if experiments is not None else
        [{"id": "exp", "variant": "control", "qualified": True}],
    }
    record.update(fields)
    return record


def dumps(record: dict[str, object]) -> str:
    return json.dumps(record, separators=(",", ":"))


def forget_commits_after(checkpoint: Path, batch_id: int) -> None:
    """Simulate a crash after micro-batch ``batch_id + 1`` wrote its output but before Spark
    committed it: drop the commit records from there on and the plans of later batches."""
    for kind, keep_through in (("commits", batch_id), ("offsets", batch_id + 1)):
        for entry in (checkpoint / kind).iterdir():
            number = entry.name.lstrip(".").split(".")[0]
            if number.isdigit() and int(number) > keep_through:
                entry.unlink()


def reconfigure(ctx: Context, section: str, **values: object) -> Context:
    """The same context with some settings of one config section changed."""
    settings = getattr(ctx.config, section).model_copy(update=values)
    return replace(ctx, config=ctx.config.model_copy(update={section: settings}))


def wait_until(condition: Callable[[], object], what: str, timeout: float = 90.0) -> None:
    """Poll ``condition`` until it is true; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    pytest.fail(f"timed out waiting for {what}")


#: The measures docs/design.md defines per experiment / variant / population.
MEASURES = ("events", "pageviews", "orders", "revenue", "units", "visits", "bounces",
            "error_visits")


def landing_records(folder: Path) -> list[str]:
    """Every line the generator wrote, in file order."""
    return [line for path in sorted(folder.glob("beacons-*"))
            for line in path.read_text().splitlines()]


def totals(gold: DataFrame) -> dict[tuple[str, str, str], dict[str, int]]:
    """Gold rows summed per (experiment, variant, population); revenue in cents, as the
    plain-Python reference counts it."""
    rows = gold.groupBy("experiment_id", "variant", "population").agg(
        *(F.sum(m).alias(m) for m in MEASURES)).collect()
    return {(r["experiment_id"], r["variant"], r["population"]):
            {m: (round(r[m] * 100) if m == "revenue" else r[m]) for m in MEASURES}
            for r in rows}


def assert_speed_layer_matches_reference(ctx: Context, lines: list[str]) -> None:
    """Bronze, quarantine, closed visits and gold after a run to completion over ``lines``
    equal docs/design.md's rules computed in plain Python."""
    from abstream.io.tables import (
        EVENTS_TABLE,
        METRICS_TABLE,
        REJECTED_TABLE,
        SESSIONS_TABLE,
        read_table,
    )
    from tests import reference

    events = reference.valid_unique_events(lines)
    assert read_table(ctx.spark, EVENTS_TABLE, ctx.layout).count() == len(events)
    rejected = sum(reference.valid_event(line) is None for line in lines)
    assert read_table(ctx.spark, REJECTED_TABLE, ctx.layout).count() == rejected
    # Visits the stream has closed: the last event + gap is behind the final watermark.
    # Every event counts at once, for what its visit lists so far.
    watermark = max(e["ts"] for e in events) - ctx.config.sessionize.lateness
    gap = ctx.config.sessionize.gap
    visits = reference.visits(events, gap)
    closed = [v for v in visits if v["end"] + gap < watermark]
    assert read_table(ctx.spark, SESSIONS_TABLE, ctx.layout).count() == len(closed)
    expected = reference.totals(visits, closed)
    actual = totals(read_table(ctx.spark, METRICS_TABLE, ctx.layout))
    assert actual.keys() == expected.keys()
    for key, values in expected.items():
        assert actual[key] == values, key


@contextmanager
def system_change(folder: Path, apply: list[str], undo: list[str], what: str) -> Iterator[Path]:
    """``folder`` changed by the command ``apply`` for the block and restored by ``undo``;
    skips the test where this machine does not allow ``what``."""
    done = subprocess.run([*apply, str(folder)], capture_output=True, text=True, check=False)
    if done.returncode:
        pytest.skip(f"cannot {what} here: {done.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run([*undo, str(folder)], check=True)


def immutable(folder: Path) -> AbstractContextManager[Path]:
    """``folder`` made immutable (``chattr +i``: nothing can be created, renamed or deleted
    in it, even by root) for the block."""
    folder.mkdir(parents=True, exist_ok=True)
    return system_change(folder, ["chattr", "+i"], ["chattr", "-i"],
                         f"make {folder} immutable")


def small_disk(folder: Path, size: str = "16m") -> AbstractContextManager[Path]:
    """A file system of ``size`` (tmpfs) mounted at ``folder`` for the block."""
    folder.mkdir(parents=True)
    return system_change(folder, ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs"],
                         ["umount", "-l"], "mount a small file system")


def store_settings(server: LocalPostgres, schema: str, **settings: object) -> dict[str, object]:
    """The ``serving`` section of a config writing the store of ``server`` into ``schema``."""
    return {"store": "postgres", "postgres": {"dsn": server.dsn, "password": server.password,
                                              "schema": schema, **settings}}


def store_environment(server: LocalPostgres, schema: str) -> dict[str, str]:
    """The environment of a ``serve`` that reads the store of ``server``."""
    return {**os.environ, "ABSTREAM__SERVING__STORE": "postgres",
            "ABSTREAM__SERVING__POSTGRES__DSN": server.dsn,
            "ABSTREAM__SERVING__POSTGRES__PASSWORD": server.password,
            "ABSTREAM__SERVING__POSTGRES__SCHEMA": schema}


#: The sketch columns of the serving views, by kind.
HLL_SKETCHES = ("visitors_sketch", "units_sketch", "converted_sketch")
KLL_SKETCHES = ("values_sketch",)


def comparable_view_row(row: dict[str, object]) -> tuple[object, ...]:
    """A serving view row (from Delta or the serving store) with each sketch as what it
    holds: an HLL sketch's estimate, a KLL sketch's count, minimum and maximum. Merging the
    same increments in another order gives other bytes for the same sketch."""
    def held(column: str, value: object) -> object:
        if not isinstance(value, bytes | memoryview) or not value:
            return value
        if column in HLL_SKETCHES:
            return round(datasketches.hll_sketch.deserialize(bytes(value)).get_estimate(), 6)
        if column in KLL_SKETCHES:
            sketch = datasketches.kll_doubles_sketch.deserialize(bytes(value))
            return (0,) if sketch.is_empty() else \
                (sketch.n, sketch.get_min_value(), sketch.get_max_value())
        return value
    return tuple(held(column, value) for column, value in row.items() if column != "epoch")
