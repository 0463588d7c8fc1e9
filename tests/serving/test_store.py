"""The PostgreSQL serving store against a real server: what the speed and batch layers
write equals the Delta serving view, changed windows only, a stale or replayed write
changes nothing, a store that is down or refuses the login is one line, and a run's writes
catch the store up when it returns."""

from __future__ import annotations

import logging
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from abstream.batch.layer import BatchRequest, run_batch
from abstream.config import ServingSettings
from abstream.generator.write import DEFAULT_START, GeneratorSettings, generate
from abstream.io import deltalog
from abstream.io.postgres import PROGRESS, WRITES, Store, StoreError, configured_store
from abstream.io.postgres_local import LocalPostgres
from abstream.layout import Layout
from abstream.serving.store import StoreWriter
from abstream.serving.store_schema import VIEW_TABLES
from abstream.serving.store_sync import StoreSync, write_store
from abstream.serving.view import definitions_view, serving_view
from abstream.speed import Context, pipeline_components
from abstream.speed.progress import ProgressListener, RunStats
from abstream.speed.runner import run_once
from tests.helpers import comparable_view_row, make_config, store_settings, wait_until

pytestmark = pytest.mark.long_module


def _context(spark, tmp_path: Path, postgres, **serving: Any) -> Context:
    schema = "t_" + uuid.uuid4().hex[:12]
    config = make_config(tmp_path / "data", serving=store_settings(postgres, schema, **serving),
                         run={"restart_backoff": "0.2 s", "restart_backoff_max": "1 s"})
    return Context(spark, config, Layout.of(tmp_path / "data"), RunStats())


@pytest.fixture
def listening(spark):
    """A function that gives a context the progress listener ``run_once`` waits on."""
    attached = []

    def listen(ctx: Context) -> Context:
        listener = ProgressListener(ctx.stats)
        spark.streams.addListener(listener)
        attached.append(listener)
        return ctx
    yield listen
    for listener in attached:
        spark.streams.removeListener(listener)


def _land(ctx: Context, seed: int, days_later: int) -> None:
    """Generated beacons into the landing folder (file names carry the seed)."""
    generate(GeneratorSettings(events=600, seed=seed, file_events=300, late_rate=0.0,
                               start=DEFAULT_START + timedelta(days=days_later)),
             Path(ctx.layout.landing))


def _keyed(rows: list[dict[str, Any]], table: str) -> dict[tuple[Any, ...], dict[str, Any]]:
    key = VIEW_TABLES[table][1]
    return {tuple(row[k] for k in key): row for row in rows}


def _differences(ctx: Context, store: Store) -> list[str]:
    """How the store's tables differ from the Delta serving views now."""
    views = {"experiment_metrics": serving_view(ctx.spark, ctx.layout, name=None),
             "definition_metrics": definitions_view(ctx.spark, ctx.layout,
                                                    ctx.config.metrics.catalog, name=None)}
    found = []
    with store.connect() as connection:
        for table, view in views.items():
            delta = _keyed(view.toArrow().to_pylist(), table)
            cursor = connection.cursor(row_factory=psycopg.rows.dict_row)
            stored = _keyed(cursor.execute(sql.SQL("SELECT * FROM {}").format(
                store.table(table))).fetchall(), table)
            found += [f"{table}: missing {key}" for key in delta.keys() - stored.keys()]
            found += [f"{table}: extra {key}" for key in stored.keys() - delta.keys()]
            found += [f"{table}: {key} {row} != {stored[key]}"
                      for key, row in delta.items() if key in stored
                      if comparable_view_row(row) != comparable_view_row(stored[key])]
    return found


def _count(store: Store, table: str, where: str = "true") -> int:
    with store.connect() as connection:
        return connection.execute(sql.SQL("SELECT count(*) FROM {} WHERE " + where).format(
            store.table(table))).fetchone()[0]


def _progress(store: Store) -> dict[str, Any]:
    with store.connect() as connection:
        cursor = connection.cursor(row_factory=psycopg.rows.dict_row)
        return cursor.execute(sql.SQL("SELECT * FROM {}").format(
            store.table(PROGRESS))).fetchone()


def _checkpoint_every_commit(spark, *paths: str) -> None:
    for path in paths:
        spark.sql(f"ALTER TABLE delta.`{path}` "
                  "SET TBLPROPERTIES ('delta.checkpointInterval' = '1')")


def test_the_layers_writes_equal_the_view_a_stale_one_changes_nothing_and_run_catches_up(
        spark, tmp_path, postgres, listening, caplog, *, monkeypatch):
    monkeypatch.setattr(deltalog, "FORGET_AFTER", 1)
    ctx = listening(_context(spark, tmp_path, postgres))
    store = configured_store(ctx.config)
    components = pipeline_components(ctx.config)
    _land(ctx, 1, 0)
    run_once(ctx, components)
    writer = StoreWriter(spark, ctx.layout, ctx.config, "speed")

    first = writer.write()
    assert first is not None and first.windows is None and first.rows > 0
    assert _differences(ctx, store) == []
    assert writer.write() is None, "nothing new: nothing written"
    # From here on, a Delta checkpoint at every commit: the writer's log readers let go of
    # what the store holds, and of bronze before the marker it found.
    _checkpoint_every_commit(spark, ctx.layout.experiment_metrics, ctx.layout.events)

    # New windows two days later (and round 1's last visits, which they close): only the
    # windows the new gold increments touch are written again; the store equals the view.
    _land(ctx, 2, 2)
    run_once(ctx, components)
    stale = StoreWriter(spark, ctx.layout, ctx.config, "speed").prepare()
    assert stale is not None
    second = writer.write()
    assert second is not None and second.windows == stale.windows
    assert second.windows[0] > DEFAULT_START + timedelta(hours=12)
    total = _count(store, "experiment_metrics") + _count(store, "definition_metrics")
    assert 0 < second.rows < total
    assert second.covers["micro_batches"], "the speed layer's micro-batch ids are recorded"
    landed = second.covers["input"]
    assert landed["component"] == "ingest" and landed["offsets"][0]["logOffset"] >= 1
    assert _differences(ctx, store) == []

    # The same write again, computed before the other writer's committed: refused in its
    # transaction, the store keeps the rows it has.
    assert writer.write(prepared=stale) is None
    assert writer.write() is None, "the state it computed is the store's already"
    assert _differences(ctx, store) == []
    held = second.mark.versions["experiment_metrics"]
    assert writer.readers["experiment_metrics"].earliest_version == held + 1
    assert writer.bronze.earliest_version > 1
    assert min(writer.bronze.versions) == landed["bronze_version"], \
        "the commit that names the offsets is kept"

    # The batch layer's write replaces every window: its rows are final.
    result = run_batch(ctx, BatchRequest("all"))
    written = write_store(spark, ctx.layout, ctx.config, "batch",
                          covers={"batch_ranges": [str(r) for r in result.ranges]})
    assert written is not None and written.windows is None
    assert _differences(ctx, store) == []
    assert _count(store, "experiment_metrics", "final") > 0
    progress = _progress(store)
    assert progress["writer"] == "batch" and progress["covers"]["batch_ranges"]
    assert _count(store, WRITES) == 3

    # abstream run's writes while PostgreSQL is down: one line each, tried again after a
    # pause, and the store caught up once it is back.
    with caplog.at_level(logging.INFO):
        _catch_up(spark, ctx)
    refused = [r.getMessage() for r in caplog.records
               if r.levelno == logging.WARNING and r.name == "abstream.serving.store_sync"]
    # Refused while the server is down; once up, a write may come before its database is
    # created ("database ... does not exist"): each one line naming the store.
    assert len(refused) >= 2 and all("Connection refused" in line for line in refused[:2])
    assert all("\n" not in line and line.startswith("serving store abstream@127.0.0.1:")
               for line in refused)
    assert "caught up after" in caplog.text


def _catch_up(spark, ctx: Context) -> None:
    """A run's store writes into a server that is down, then started: the store (empty at
    first) ends equal to the view."""
    server = LocalPostgres("another-s3cret")
    try:
        config = ctx.config.model_copy(update={"serving": ServingSettings.model_validate(
            store_settings(server, "catching_up", write_every="0.5 s"))})
        sync = StoreSync(spark, ctx.layout, config)
        sync.start()
        try:
            wait_until(lambda: sync.failures >= 2, "two failed writes", timeout=60)
            server.start()
            wait_until(lambda: sync.writes >= 1, "a write", timeout=120)
        finally:
            sync.stop()
        assert _differences(ctx, configured_store(config)) == []
    finally:
        server.remove()


def test_a_store_that_is_down_or_refuses_the_password_is_one_line(spark, tmp_path, postgres,
                                                                    caplog):
    ctx = _context(spark, tmp_path, postgres, password="wrong-password")
    with pytest.raises(StoreError) as refused:
        StoreWriter(spark, ctx.layout, ctx.config, "speed").write()
    message = str(refused.value)
    assert "password authentication failed" in message and "\n" not in message
    assert "wrong-password" not in message and postgres.dsn.split("@")[1] in message

    ctx = _context(spark, tmp_path / "down", postgres,
                   dsn=f"postgresql://abstream@127.0.0.1:{postgres.port + 1}/abstream")
    with caplog.at_level(logging.WARNING), pytest.raises(StoreError) as down:
        write_store(spark, ctx.layout, ctx.config.model_copy(update={
            "run": ctx.config.run.model_copy(update={"max_restarts": 1})}), "speed")
    assert "Connection refused" in str(down.value) and "\n" not in str(down.value)
    assert "trying again in 0.2 s (1 of 1)" in caplog.text
