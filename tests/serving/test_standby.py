"""Active/standby replicas against a real PostgreSQL: the lease goes to one replica at a
time and its epoch only grows; a write carrying an old epoch (or an expired lease) writes
nothing; a replica behind the store's last write waits for it unless the takeover is
``available``; a handover ends the lease at once; a writer paused inside its transaction
does not hold a takeover up; a leader steps down on its own clock; a standby computes its
serving view once ahead of a failover; each replica has its own tables and topics, and the
store converges on a new leader's numbers in every window."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from psycopg import sql

from abstream.config import Config, StandbySettings
from abstream.errors import ConfigError
from abstream.io.input_position import FILES, InputPosition, PositionReader
from abstream.io.lease import (
    GRANTS,
    LEASE,
    Fence,
    Fenced,
    acquire,
    check_fence,
    read_lease,
    release,
    renew,
    report,
)
from abstream.io.postgres import PROGRESS, SERVING, Store
from abstream.io.postgres_local import LocalPostgres
from abstream.layout import Layout
from abstream.monitor.standby import StandbyCollector
from abstream.serving.standby import Leadership, Standby, holder_fence
from abstream.serving.store import StoreWriter
from abstream.serving.store_schema import ensure_schema
from abstream.serving.store_sync import StoreSync
from abstream.serving.view import serving_view
from tests.helpers import (
    WITHOUT_SPARK,
    comparable_view_row,
    make_config,
    store_environment,
    store_settings,
)

SHORT = StandbySettings(renew=timedelta(seconds=0.2), step_down=timedelta(seconds=0.5),
                        lease=timedelta(seconds=1))


def _store(postgres: LocalPostgres) -> Store:
    config = make_config(Path("unused"), serving=store_settings(
        postgres, "t_" + uuid.uuid4().hex[:12]))
    store = Store(config.serving.postgres)
    with store.connect() as connection:
        ensure_schema(connection, store)
    return store


NOTHING_READ = InputPosition({})


def _grant(store: Store, replica: str, settings: StandbySettings = SHORT,
           position: InputPosition = NOTHING_READ) -> tuple[int | None, str]:
    with store.connect() as connection:
        epoch, why, _ = acquire(connection, store, replica, settings, position)
    return epoch, why


def _fence_holds(store: Store, fence: Fence) -> bool:
    try:
        with store.connect() as connection, connection.transaction():
            check_fence(connection, store, fence)
    except Fenced:
        return False
    return True


def test_the_lease_goes_to_one_replica_and_an_old_epoch_writes_nothing(postgres) -> None:
    store = _store(postgres)
    assert _grant(store, "a") == (1, "granted")
    assert _grant(store, "b") == (None, "a holds epoch 1")
    with store.connect() as connection:
        assert renew(connection, store, Fence("a", 1), SHORT)
    assert _fence_holds(store, Fence("a", 1))
    assert not _fence_holds(store, Fence("b", 1)), "only the holder's writes go on"

    time.sleep(1.1)
    assert not _fence_holds(store, Fence("a", 1)), "a lease that ran out fences its holder"
    assert _grant(store, "b") == (2, "granted")
    with store.connect() as connection:
        assert not renew(connection, store, Fence("a", 1), SHORT), "a lost it"
        lease = read_lease(connection, store)
        grants = connection.execute(sql.SQL("SELECT epoch, holder, previous FROM {} "
                                            "ORDER BY seq").format(store.table(GRANTS)))
        assert grants.fetchall() == [(1, "a", None), (2, "b", "a")]
    assert (lease.holder, lease.epoch, lease.live) == ("b", 2, True)
    with pytest.raises(Fenced, match="replica a's epoch 1 is no longer the lease's "
                                     r"\(b holds epoch 2\)"), \
            store.connect() as connection, connection.transaction():
        check_fence(connection, store, Fence("a", 1))


def _published(store: Store, replica: str, position: dict[str, int]) -> None:
    with store.connect() as connection:
        connection.execute(sql.SQL("UPDATE {} SET replica = %s, position = %s "
                                   "WHERE store = %s").format(store.table(PROGRESS)),
                           (replica, json.dumps(position), SERVING))


def test_a_replica_behind_the_stores_last_write_waits_unless_takeover_is_available(
        postgres) -> None:
    store = _store(postgres)
    _published(store, "a", {"beacons/0": 120, "beacons/1": 80})
    behind = InputPosition({"beacons/0": 120, "beacons/1": 75})
    epoch, why = _grant(store, "b", position=behind)
    assert epoch is None
    assert why == ("its input position (beacons/0@120, beacons/1@75) is 5 behind the store's "
                   "last write (beacons/0@120, beacons/1@80)")
    assert _grant(store, "b", position=InputPosition({"beacons/0": 121, "beacons/1": 80}))[0] \
        == 1, "at or past the store's position: it takes over"

    store = _store(postgres)
    _published(store, "a", {FILES: 9})
    available = SHORT.model_copy(update={"takeover": "available"})
    assert _grant(store, "b", available, InputPosition({FILES: 4}))[0] == 1


def test_a_handover_ends_the_lease_at_once_and_the_other_replica_takes_it(postgres) -> None:
    store = _store(postgres)
    settings = SHORT.model_copy(update={"lease": timedelta(seconds=30)})
    assert _grant(store, "a", settings)[0] == 1
    with store.connect() as connection:
        assert release(connection, store).holder == "a"
        assert not renew(connection, store, Fence("a", 1), settings)
    assert not _fence_holds(store, Fence("a", 1)), "nothing more from the old leader"
    assert _grant(store, "a", settings) == (
        None, "it handed the lease over; the others have one lease to take it")
    assert _grant(store, "b", settings) == (2, "granted")
    with store.connect() as connection:
        release(connection, store, Fence("a", 1))  # a stopping replica that lost it
        lease = read_lease(connection, store)
    assert (lease.holder, lease.epoch, lease.live) == ("b", 2, True), "b's lease stays"


def test_a_writer_paused_inside_its_transaction_does_not_hold_a_takeover_up(postgres) -> None:
    store = _store(postgres)
    assert _grant(store, "a")[0] == 1
    paused = store.open()
    check_fence(paused, store, Fence("a", 1, timedelta(seconds=0.5)))  # FOR SHARE, then idle
    time.sleep(1.2)
    began = time.monotonic()
    assert _grant(store, "b") == (2, "granted")
    assert time.monotonic() - began < 0.5
    with pytest.raises(psycopg.errors.IdleInTransactionSessionTimeout):
        paused.execute("SELECT 1")
    paused.close()


def test_a_leader_steps_down_on_its_own_clock(caplog: pytest.LogCaptureFixture) -> None:
    now = [100.0]
    leadership = Leadership("a", StandbySettings(), clock=lambda: now[0])
    assert leadership.fence() is None
    leadership.granted(3, asked_at=100.0)
    now[0] = 105.9
    assert leadership.fence() == Fence("a", 3)
    leadership.renewed(asked_at=105.0)
    now[0] = 110.9
    assert leadership.leading
    now[0] = 111.0
    with caplog.at_level(logging.WARNING, "abstream"):
        assert leadership.fence() is None
    assert "replica a stepped down (epoch 3): the lease was not renewed for 6.0 s" \
        in caplog.text
    assert leadership.epoch_seen == 3

    leadership.granted(5, asked_at=now[0])
    leadership.lost("a write of epoch 3 was refused", Fence("a", 3))
    assert leadership.fence() == Fence("a", 5), "an older epoch's refusal leaves epoch 5 alone"
    leadership.lost("a write of epoch 5 was refused", Fence("a", 5))
    assert leadership.fence() is None


def _lease_runs_out_in(store: Store, seconds: float) -> None:
    with store.connect() as connection:
        connection.execute(sql.SQL("UPDATE {} SET expires_at = now() + %s WHERE store = %s")
                           .format(store.table(LEASE)), (timedelta(seconds=seconds), SERVING))


def test_a_standby_prepares_its_first_write_once_each_time_the_leader_is_late(
        postgres, tmp_path: Path) -> None:
    """More than one and a half renewals (3 s) without one: the lease has less than 7 s of
    its 10 left."""
    store = _store(postgres)
    config = make_config(tmp_path, serving=store_settings(postgres, store.schema),
                         replica="b")
    late: list[float] = []
    standby = Standby(store, Layout.of_config(config), config,
                      Leadership("b", config.standby), lag=lambda: None,
                      on_lead=lambda: None, on_leader_late=lambda: late.append(1))
    assert _grant(store, "a", config.standby)[0] == 1
    for seconds_left, calls in ((10, 0), (7.5, 0), (6.5, 1), (3, 1), (9.8, 1), (5, 2)):
        _lease_runs_out_in(store, seconds_left)
        standby.tick()
        assert len(late) == calls, f"{seconds_left} s left"
    assert not standby.leadership.leading
    standby.connection.close()


def test_a_replica_has_its_own_tables_checkpoints_and_topics(tmp_path: Path) -> None:
    config = make_config(tmp_path).for_replica("b")
    layout = Layout.of_config(config)
    assert layout.landing == str(tmp_path / "landing"), "the input is shared"
    assert layout.events == str(tmp_path / "replicas" / "b" / "tables" / "events")
    assert layout.checkpoint("ingest") == str(tmp_path / "replicas" / "b" / "checkpoints"
                                              / "ingest")
    assert (config.kafka.topic, config.kafka.valid_topic, config.kafka.rejected_topic) == \
        ("beacons", "beacons.valid.b", "beacons.rejected.b")
    with pytest.raises(ConfigError, match="replica 'B/1': lower-case letters"):
        Config().for_replica("B/1")


def test_run_as_a_replica_without_the_postgres_store_is_one_line(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "abstream", "run", "--replica", "a", "--data-dir",
                           str(tmp_path)], capture_output=True, text=True, check=False)
    assert done.returncode == 2
    assert done.stderr.strip() == ("abstream: error: replicas take turns writing the "
                                   "PostgreSQL serving store: set serving.store: postgres")


def _key(row: dict[str, Any]) -> tuple[Any, ...]:
    return row["experiment_id"], row["variant"], row["population"], row["window_start"]


def _values(row: dict[str, Any]) -> tuple[Any, ...]:
    """What a row says, not when or by whom it was written."""
    return comparable_view_row({k: v for k, v in row.items()
                                if k not in ("computed_at", "epoch")})


def _stored(store: Store) -> dict[tuple[Any, ...], tuple[Any, tuple[Any, ...]]]:
    """The store's ``experiment_metrics``: key -> (epoch, values)."""
    with store.connect() as connection:
        rows = connection.cursor(row_factory=psycopg.rows.dict_row).execute(
            sql.SQL("SELECT * FROM {}").format(store.table("experiment_metrics"))).fetchall()
    return {_key(r): (r["epoch"], _values(r)) for r in rows}


def test_the_store_converges_on_a_new_leaders_numbers_and_each_row_carries_its_epoch(
        spark, beacons_run, postgres) -> None:
    """Two replicas' writers over equal tables (the shared beacons run's, read only)."""
    schema = "t_" + uuid.uuid4().hex[:12]
    config = make_config(Path(beacons_run.layout.root),
                         serving=store_settings(postgres, schema))
    writers = {name: StoreWriter(spark, beacons_run.layout, config.for_replica(name), "speed")
               for name in "ab"}
    # A lease that outlasts a slow write: nobody renews it here.
    store = writers["a"].store
    lease = config.standby.model_copy(update={"lease": timedelta(minutes=5)})
    position = PositionReader(beacons_run.layout, config).read()
    assert position == InputPosition({FILES: 2}), "the beacons run's two landing files"
    assert holder_fence(store, "a", lease) is None
    stale = writers["b"].prepare()
    assert stale is not None, "the store is empty: b can prepare its first write"
    assert _grant(store, "a", lease, position)[0] == 1
    assert holder_fence(store, "a", lease) == Fence("a", 1)
    assert writers["a"].write(fence=Fence("a", 1)).windows is None
    by_a = _stored(store)
    assert by_a and {epoch for epoch, _ in by_a.values()} == {1}

    with pytest.raises(Fenced):
        writers["b"].write(fence=Fence("b", 1))
    prepared = writers["b"].prepare()
    assert _stored(store) == by_a, "a refused write and a prepared one change nothing"

    with store.connect() as connection:
        release(connection, store)
    assert _grant(store, "b", lease, position)[0] == 2
    assert writers["b"].write(fence=Fence("b", 2), prepared=stale) is None, \
        "prepared before a wrote: stale, nothing written"
    assert _stored(store) == by_a
    written = writers["b"].write(fence=Fence("b", 2), prepared=prepared)
    assert written.windows is None, "another replica's tables: every window is rewritten"
    by_b = _stored(store)
    assert {epoch for epoch, _ in by_b.values()} == {2}
    assert {k: v for k, (_, v) in by_b.items()} == {k: v for k, (_, v) in by_a.items()}
    view = {_key(r): _values(r) for r in
            serving_view(spark, beacons_run.layout, None).toArrow().to_pylist()}
    assert {k: v for k, (_, v) in by_b.items()} == view
    assert writers["b"].write(fence=Fence("b", 2)) is None, "nothing new: nothing written"
    with pytest.raises(Fenced):
        writers["a"].write(fence=Fence("a", 1))
    assert writers["a"].prepare() is not None
    _published(store, "b", {FILES: 3})
    assert writers["a"].prepare() is None, "behind the store's last write: not prepared"


def test_a_standby_computes_its_serving_view_once_ahead_of_a_failover_and_writes_nothing(
        spark, beacons_run, postgres, caplog: pytest.LogCaptureFixture) -> None:
    store = _store(postgres)
    config = make_config(Path(beacons_run.layout.root), replica="b",
                         serving=store_settings(postgres, store.schema))
    warmed = "the serving view computed ahead of a failover"
    sync = StoreSync(spark, beacons_run.layout, config, Leadership("b", config.standby))
    with caplog.at_level(logging.INFO, "abstream"):
        assert sync.write_once() is None
        assert sync.write_once() is None
    assert caplog.text.count(warmed) == 1, "the first round as a standby only"
    assert sync.writes == 0 and _stored(store) == {}

    caplog.clear()
    prepared = StoreSync(spark, beacons_run.layout, config, Leadership("b", config.standby))
    assert prepared.writer.prepare() is not None
    with caplog.at_level(logging.INFO, "abstream"):
        assert prepared.write_once() is None
    assert warmed not in caplog.text, "a replica that has computed its view already"


def _standby_cli(postgres: LocalPostgres, schema: str, *arguments: str
                 ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*WITHOUT_SPARK, "standby", *arguments], capture_output=True,
                          text=True, env=store_environment(postgres, schema), check=False,
                          timeout=60)


def test_standby_status_and_handover_from_the_store_alone(postgres) -> None:
    empty = _standby_cli(postgres, "t_" + uuid.uuid4().hex[:12], "status")
    assert (empty.returncode, empty.stderr.strip()) == (2, (
        "abstream: error: the serving store holds no lease yet: start replicas with "
        "abstream run --replica NAME"))

    store = _store(postgres)
    settings = StandbySettings()
    assert _grant(store, "a", settings)[0] == 1
    with store.connect() as connection:
        report(connection, store, "a", position=InputPosition({"beacons/0": 40}),
               lag_seconds=1.5, leading=True)
        report(connection, store, "b", position=InputPosition({"beacons/0": 35}),
               lag_seconds=4.0, leading=False)
    _published(store, "a", {"beacons/0": 38})
    status = _standby_cli(postgres, store.schema, "status", "--json")
    assert status.returncode == 0, status.stderr
    shown = json.loads(status.stdout)
    assert (shown["holder"], shown["epoch"]) == ("a", 1)
    assert 0 < shown["expires_in_seconds"] <= 10, "a 10 s lease, granted before the command"
    assert shown["store"]["position"] == {"beacons/0": 38}
    assert [(r["replica"], r["leading"], r["behind_store"], r["lag_seconds"])
            for r in shown["replicas"]] == [("a", True, 0, 1.5), ("b", False, 3, 4.0)]
    text = _standby_cli(postgres, store.schema, "status").stdout
    assert text.startswith("lease: held by a, epoch 1, expires in ")
    assert "b        no     beacons/0@35" in text

    handed = _standby_cli(postgres, store.schema, "handover", "--no-wait")
    assert (handed.returncode, handed.stdout.strip()) == (
        0, "a handed over the lease of epoch 1; not waiting for another replica to take it "
        "(see abstream standby status); a may take it back after one lease")
    assert not _fence_holds(store, Fence("a", 1))
    again = _standby_cli(postgres, store.schema, "handover")
    assert (again.returncode, again.stderr.strip()) == (
        2, "abstream: error: no replica holds the serving lease: there is nothing to hand over")


def test_a_replica_exports_whether_it_leads_its_epoch_and_lag() -> None:
    registry = CollectorRegistry()
    registry.register(StandbyCollector("b", lambda: (True, 7), lambda: 3.5))
    text = generate_latest(registry).decode()
    assert 'abstream_standby_leader{replica="b"} 1.0' in text
    assert 'abstream_standby_epoch{replica="b"} 7.0' in text
    assert 'abstream_standby_lag_seconds{replica="b"} 3.5' in text
