"""Standby chaos: two replicas (``abstream run --replica a`` and ``--replica b``) read one
steady stream and take turns writing the PostgreSQL serving store, while faults strike at
seeded random moments; then the store is checked against a crash-free single run.

The faults, in a seeded random order, each after the pair has settled (a leader, and a
store write since the last fault):

- ``kill_leader``: SIGKILL of the leader's process group (driver and JVM);
- ``pause_leader``: SIGSTOP of the leader's group for ``pause`` seconds (past its lease),
  then SIGCONT: the log must show it stepped down, and the store no write of its old epoch;
  every second one, while the input still comes, the moment one of its store writes has a
  transaction open;
- ``kill_standby``: SIGKILL of the replica that does not lead;
- ``restart_store``: PostgreSQL killed (SIGKILL) and started again ``store_down`` seconds
  later;
- ``kill_after_write``: SIGKILL of the leader the moment one of its store writes has
  committed, before its pipeline commits what comes next.

A killed replica is started again ``restart_after`` seconds later. A failover is timed from
the fault to the first store write of a new epoch (``max_failover_seconds``). After the
generator ends, the pair runs until both have read all input and the store holds the
leader's latest gold; then both stop (SIGTERM), and:

- ``lost_keys``/``extra_keys``/``mismatched_keys``: the store's serving tables against the
  serving view of a crash-free single run over the same records (``run --once``), key by
  key, every column but ``computed_at``, sketches by what they hold, doubles to 9
  significant digits;
- ``replica_speed_mismatched_keys``: each replica's own serving view at the drain against
  the same oracle (``mismatched_examples`` and ``replica_speed_examples`` show a few keys
  with what the oracle and the store or replica hold);
- ``replica_mismatched_keys``: each replica's own serving view after ``batch --all``
  against the crash-free run's after ``batch --all``;
- ``final_mismatched_keys``: after ``batch --all`` on both replicas (the leader's writes
  the store), and again after ``abstream standby handover`` made the other replica the
  leader (its first write rewrites every window from its own tables), the store's rows
  against the crash-free run's after ``batch --all``: the final numbers do not depend on
  which replica leads;
- ``stale_writes``: store writes (``store_writes``) whose epoch is older than a lease
  granted before them (``standby_grants``; one sequence orders both);
- ``epoch_went_back``: a grant whose epoch is not above the one before, or a write whose
  epoch is below the write before it.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import pairwise
from pathlib import Path
from typing import Any

from psycopg import sql
from psycopg.rows import dict_row
from pyspark.sql import SparkSession
from tests.helpers import comparable_view_row

from abstream.batch.layer import BatchRequest, run_batch
from abstream.io.deltalog import DeltaLogReader
from abstream.io.input_position import InputPosition
from abstream.io.lease import GRANTS, ReplicaReport, replica_reports
from abstream.io.postgres import PROGRESS, SERVING, WRITES, Store, StoreError
from abstream.io.postgres_local import LocalPostgres
from abstream.io.tables import COVERAGE_TABLE, DEFINITIONS_TABLE, METRICS_TABLE, ensure_table
from abstream.layout import Layout
from abstream.serving.store_schema import VIEW_TABLES
from abstream.serving.view import Pinned, definitions_query, serving_query
from abstream.speed import pipeline_components
from abstream.speed.runner import pipeline, run_once
from bench.chaos import (
    STORE_WRITE_WAIT,
    ChaosSettings,
    Side,
    feed_crash_free,
    kafka_broker,
    kill_group,
    postgres_server,
    start_generator,
    store_document,
)
from bench.common import RESULTS, log_progress, machine, write_result

log = logging.getLogger("bench.standby_chaos")

FAULTS = ("kill_leader", "pause_leader", "kill_standby", "restart_store", "kill_after_write")
REPLICAS = ("a", "b")
#: Columns of the serving rows that say when or by whom a row was written, not what it is.
WRITTEN = ("computed_at", "epoch")


@dataclass(frozen=True)
class StandbySettings:
    """One standby chaos run."""

    work: Path
    source: str = "files"
    faults: int = 20
    events: int = 15_000
    rate: float = 25.0
    seed: int = 1
    #: Seconds from a settled pair to the next fault, drawn uniformly.
    wait: tuple[float, float] = (2.0, 8.0)
    #: How long a paused leader stays stopped (past the 10 s lease).
    pause: float = 15.0
    #: How long PostgreSQL stays down in ``restart_store``.
    store_down: float = 5.0
    #: Seconds before a killed replica is started again.
    restart_after: float = 3.0
    #: The kinds of fault to draw from, in turn.
    kinds: tuple[str, ...] = FAULTS
    #: Strike them in the order of ``kinds`` (else in a seeded random order).
    ordered: bool = False
    store_write_every: str = "2 seconds"
    #: At the end, ``batch --all`` on both replicas, then a handover: the store's final
    #: rows as each leader wrote them, against a crash-free ``batch --all``.
    batch: bool = True


@dataclass(frozen=True)
class Written:
    """What the store was last written from: the replica, its gold versions, its input
    position."""

    replica: str | None
    versions: dict[str, int]
    position: InputPosition | None


@dataclass
class Pair:
    """The two replicas' processes, started again when killed."""

    side: Side
    processes: dict[str, subprocess.Popen[str]] = field(default_factory=dict)
    logs: dict[str, list[Path]] = field(default_factory=dict)
    starts: Counter[str] = field(default_factory=Counter)

    def start(self, replica: str) -> None:
        self.starts[replica] += 1
        label = f"run-{replica}-{self.starts[replica]:02d}"
        self.processes[replica] = self.side.start(label, "run", "--replica", replica,
                                                  "--no-exporter")
        self.logs.setdefault(replica, []).append(
            self.side.logs / f"{self.side.started:03d}-{label}.log")

    def kill(self, replica: str) -> None:
        """SIGKILL of the replica's process group; it is down until started again."""
        kill_group(self.processes.pop(replica))

    def check_running(self) -> None:
        for replica, process in self.processes.items():
            if process.poll() is not None:
                raise RuntimeError(f"replica {replica} ended by itself (exit "
                                   f"{process.returncode}); see {self.logs[replica][-1]}")

    def stop(self) -> None:
        """SIGTERM to each driver (as a service manager stops it): the leader hands the
        lease over."""
        for process in self.processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes.values():
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                kill_group(process)


class Watch:
    """The store's lease and writes, as the harness sees them (None while it is down)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def _one(self, query: str) -> Any:
        try:
            with self.store.connect() as connection:
                row = connection.execute(query).fetchone()
        except StoreError:
            return None
        return row

    def lease(self) -> tuple[str | None, int] | None:
        """The live holder (None: none) and the epoch."""
        row = self._one(f"SELECT CASE WHEN expires_at > now() THEN holder END, epoch "
                        f"FROM {self.store.schema}.standby_lease")
        return None if row is None else (row[0], int(row[1]))

    def last_write(self) -> tuple[int, int | None] | None:
        """The newest store write's id and epoch."""
        row = self._one(f"SELECT coalesce(max(id), 0), (SELECT epoch FROM "
                        f"{self.store.schema}.{WRITES} ORDER BY id DESC LIMIT 1) "
                        f"FROM {self.store.schema}.{WRITES}")
        return None if row is None else (int(row[0]), row[1])

    def state(self) -> tuple[list[ReplicaReport], Written] | None:
        """Each replica's last report, and what the store was last written from."""
        try:
            with self.store.connect() as connection:
                reports = replica_reports(connection, self.store)
                row = connection.execute(sql.SQL(
                    "SELECT replica, versions, position FROM {} WHERE store = %s").format(
                    self.store.table(PROGRESS)), (SERVING,)).fetchone()
        except StoreError:
            return None
        return reports, Written(row[0], row[1], InputPosition.from_json(row[2]))

    def write_open(self) -> bool:
        """Whether a store write's transaction is open (its rows staged or being moved)."""
        row = self._one("SELECT count(*) FROM pg_stat_activity WHERE application_name = "
                        "'abstream' AND xact_start IS NOT NULL AND query LIKE '%staged_%' "
                        "AND pid <> pg_backend_pid()")
        return bool(row and row[0])

    def until(self, what: str, check: Any, timeout: float, pair: Pair | None = None,
              every: float = 0.1) -> Any:
        began = time.monotonic()
        while time.monotonic() - began < timeout:
            found = check()
            if found:
                return found
            if pair is not None:
                pair.check_running()
            time.sleep(every)
        raise RuntimeError(f"{what}: not within {timeout:.0f} s")


def settled(watch: Watch, pair: Pair) -> tuple[str, int]:
    """Wait until a replica leads and has written the store, and the other runs and has
    read at least what the store was last written from (it could take over now): the
    leader and its epoch."""
    def check() -> tuple[str, int] | None:
        lease, state = watch.lease(), watch.state()
        if lease is None or lease[0] is None or state is None \
                or len(pair.processes) < len(REPLICAS):
            return None
        reports, written = state
        ready = {r.replica for r in reports if r.age_seconds < 5 and r.position is not None
                 and r.position.at_or_past(written.position)}
        return lease if ready == set(REPLICAS) and written.replica is not None else None
    return watch.until("a leader, and a standby caught up with the store", check, 300.0,
                       pair, every=0.5)


def failover(watch: Watch, pair: Pair, epoch: int, began: float) -> float:
    """Seconds from ``began`` to the first store write of an epoch after ``epoch``."""
    def check() -> bool:
        write = watch.last_write()
        return write is not None and write[1] is not None and write[1] > epoch
    watch.until(f"a store write of an epoch after {epoch}", check, 180.0, pair, every=0.05)
    return time.monotonic() - began


def stepped_down_after(log_file: Path, offset: int, timeout: float) -> float | None:
    """Seconds until the replica's log (past ``offset``) says it stepped down."""
    began = time.monotonic()
    while time.monotonic() - began < timeout:
        with log_file.open() as text:
            text.seek(offset)
            if "stepped down" in text.read():
                return time.monotonic() - began
        time.sleep(0.05)
    return None


def aim(watch: Watch, pair: Pair, moment: str, check: Callable[[], bool], *, every: float
        ) -> str:
    """Wait for the ``moment`` a fault is aimed at (``check``), ``STORE_WRITE_WAIT`` at most;
    what it was aimed at."""
    try:
        watch.until(moment, check, STORE_WRITE_WAIT, pair, every=every)
    except RuntimeError:
        return f"no {moment.removeprefix('a ')} within {STORE_WRITE_WAIT:.0f} s"
    return moment


def strike(kind: str, pair: Pair, watch: Watch, server: LocalPostgres, *,
           settings: StandbySettings, leader: str, epoch: int,
           aim_at_write: bool = False) -> dict[str, Any]:
    """One fault; what it did and (for a fault on the leader) the failover it caused."""
    other = next(r for r in REPLICAS if r != leader)
    fault: dict[str, Any] = {"kind": kind, "leader": leader, "epoch": epoch}
    began = time.monotonic()
    if kind in ("kill_leader", "kill_after_write"):
        if kind == "kill_after_write":
            write = watch.last_write()
            assert write is not None
            fault["aimed_at"] = aim(watch, pair, "a store write just committed", lambda: (
                w := watch.last_write()) is not None and w[0] > write[0], every=0.005)
            began = time.monotonic()
        pair.kill(leader)
        fault["failover_seconds"] = round(failover(watch, pair, epoch, began), 2)
        time.sleep(settings.restart_after)
        pair.start(leader)
    elif kind == "pause_leader":
        process, log_file = pair.processes[leader], pair.logs[leader][-1]
        if aim_at_write:
            fault["aimed_at"] = aim(watch, pair, "a store transaction", watch.write_open,
                                    every=0.002)
            began = time.monotonic()
        os.killpg(process.pid, signal.SIGSTOP)
        fault["failover_seconds"] = round(failover(watch, pair, epoch, began), 2)
        time.sleep(max(0.0, settings.pause - (time.monotonic() - began)))
        offset = log_file.stat().st_size
        os.killpg(process.pid, signal.SIGCONT)
        fault["paused_seconds"] = round(time.monotonic() - began, 1)
        stepped = stepped_down_after(log_file, offset, 30.0)
        fault["stepped_down_after_cont_seconds"] = None if stepped is None else round(stepped, 2)
        time.sleep(settings.restart_after)
        with log_file.open() as text:
            text.seek(offset)
            woke = text.read()
        fault["writes_after_cont"] = woke.count(": wrote ")
        fault["writes_refused_after_cont"] = woke.count("is no longer the lease's")
        fault["writes_failed_after_cont"] = woke.count("trying again")
    elif kind == "kill_standby":
        pair.kill(other)
        time.sleep(settings.restart_after)
        pair.start(other)
    elif kind == "restart_store":
        server.kill()
        time.sleep(settings.store_down)
        server.start()
    log.info("fault %s: %s", kind, json.dumps({k: v for k, v in fault.items() if k != "kind"}))
    return fault


def strike_all(settings: StandbySettings, rng: random.Random, pair: Pair, watch: Watch, *,
               server: LocalPostgres, generator: subprocess.Popen[str]) -> list[dict[str, Any]]:
    """Every fault, each once the pair has settled and a random wait has passed."""
    faults: list[dict[str, Any]] = []
    kinds = [settings.kinds[i % len(settings.kinds)] for i in range(settings.faults)]
    if not settings.ordered:
        rng.shuffle(kinds)
    for number, drawn in enumerate(kinds, 1):
        settled(watch, pair)
        time.sleep(rng.uniform(*settings.wait))
        leader, epoch = settled(watch, pair)
        generating = generator.poll() is None
        # Once the input is complete, no write comes for a kill to follow.
        kind = "kill_leader" if drawn == "kill_after_write" and not generating else drawn
        log.info("fault %d/%d: %s (%s leads with epoch %d%s)", number, len(kinds), kind,
                 leader, epoch, "" if generating else "; input complete")
        pauses = sum(f["kind"] == "pause_leader" for f in faults)
        faults.append(strike(kind, pair, watch, server, settings=settings, leader=leader,
                             epoch=epoch, aim_at_write=generating and pauses % 2 == 1))
    return faults


def drained(watch: Watch, pair: Pair, total: int) -> None:
    """Wait until both replicas have read all ``total`` input units, have no lag, and the
    store holds the leader's latest gold."""
    def check() -> bool:
        state = watch.state()
        if state is None:
            return False
        reports, written = state
        done = {r.replica for r in reports if r.age_seconds < 10 and r.lag_seconds == 0
                and r.position is not None and sum(r.position.units.values()) >= total}
        if done != set(REPLICAS) or written.replica is None:
            return False
        layout = Layout.of(pair.side.data_dir, written.replica)
        for name in ("experiment_metrics", "definition_metrics"):
            reader = DeltaLogReader(layout.table(name))
            reader.refresh()
            if reader.latest_version != written.versions.get(name):
                return False
        return True
    watch.until("both replicas caught up and the store written", check, 300.0, pair, 1.0)


def input_units(side: Side, events: int) -> int:
    """The input position a replica that read everything reports: the landing files, or
    the records of every partition."""
    if side.config.source == "files":
        return len(list(Path(side.layout.landing).glob("beacons-*")))
    return events


def keyed_rows(rows: list[dict[str, Any]], table: str) -> dict[tuple[Any, ...], tuple[Any, ...]]:
    key = VIEW_TABLES[table][1]

    def value(item: Any) -> Any:
        return float(f"{item:.9g}") if isinstance(item, float) else item
    return {tuple(row[k] for k in key): tuple(
        value(v) for v in comparable_view_row({c: row[c] for c in row if c not in WRITTEN}))
        for row in rows}


def view_rows(spark: SparkSession, layout: Layout, side: Side, pinned: Pinned | None = None
              ) -> dict[str, list[dict]]:
    """The serving views' rows, at the tables' latest versions or at ``pinned`` (tables
    never written, such as the coverage of a run without the batch layer, are created)."""
    for spec in (METRICS_TABLE, DEFINITIONS_TABLE, COVERAGE_TABLE):
        ensure_table(spark, spec, layout)
    views = {"experiment_metrics": spark.sql(serving_query(layout, pinned)),
             "definition_metrics": spark.sql(definitions_query(
                 layout, side.config.metrics.catalog, pinned))}
    return {name: view.select(*VIEW_TABLES[name][0].fieldNames()).toArrow().to_pylist()
            for name, view in views.items()}


def store_rows(store: Store) -> dict[str, list[dict]]:
    with store.connect() as connection:
        return {name: connection.cursor(row_factory=dict_row).execute(
            sql.SQL("SELECT * FROM {}").format(store.table(name))).fetchall()
            for name in VIEW_TABLES}


#: Mismatched keys shown per table (what the oracle has, and what was found).
EXAMPLES = 3


def key_differences(expected: dict[str, list[dict]], actual: dict[str, list[dict]]
                    ) -> dict[str, Any]:
    lost = extra = mismatched = 0
    examples: list[dict[str, str]] = []
    for table in VIEW_TABLES:
        want, have = keyed_rows(expected[table], table), keyed_rows(actual[table], table)
        lost += len(want.keys() - have.keys())
        extra += len(have.keys() - want.keys())
        differing = sorted((k for k in want.keys() & have.keys() if want[k] != have[k]), key=str)
        mismatched += len(differing)
        examples += [{"table": table, "key": str(k), "oracle": str(want[k]), "found": str(have[k])}
                     for k in differing[:EXAMPLES]]
    return {"lost_keys": lost, "extra_keys": extra, "mismatched_keys": mismatched,
            "keys": sum(len(rows) for rows in expected.values()), "examples": examples}


def pinned_versions(side: Side) -> dict[str, Pinned]:
    """Each replica's gold and coverage tables' latest versions (the view's inputs)."""
    pinned: dict[str, Pinned] = {}
    for replica in REPLICAS:
        layout = Layout.of(side.data_dir, replica)
        versions = {}
        for path in (layout.experiment_metrics, layout.definition_metrics,
                     layout.batch_coverage):
            reader = DeltaLogReader(path)
            reader.refresh()
            if reader.latest_version is not None:
                versions[path] = reader.latest_version
        pinned[replica] = versions
    return pinned


def fencing_record(store: Store) -> dict[str, Any]:
    """Stale writes and epochs that went back, from the store's own record."""
    schema = sql.Identifier(store.schema)
    with store.connect() as connection:
        stale = connection.execute(sql.SQL(
            "SELECT count(*) FROM {s}.{w} w WHERE w.epoch < (SELECT max(g.epoch) FROM "
            "{s}.{g} g WHERE g.seq < w.seq)").format(
            s=schema, w=sql.Identifier(WRITES), g=sql.Identifier(GRANTS))).fetchone()[0]
        grants = [r[0] for r in connection.execute(sql.SQL(
            "SELECT epoch FROM {}.{} ORDER BY seq").format(schema, sql.Identifier(GRANTS)))]
        writes = [r[0] for r in connection.execute(sql.SQL(
            "SELECT epoch FROM {}.{} WHERE seq IS NOT NULL ORDER BY seq").format(
            schema, sql.Identifier(WRITES)))]
    back = sum(b <= a for a, b in pairwise(grants)) + \
        sum(b < a for a, b in pairwise(writes))
    return {"stale_writes": int(stale), "epoch_went_back": back, "grants": len(grants),
            "writes": len(writes), "last_epoch": grants[-1] if grants else None}


def run_standby_chaos(settings: StandbySettings) -> dict[str, Any]:
    """The whole run; its result (see the module's docstring)."""
    began = time.monotonic()
    rng = random.Random(settings.seed)
    settings.work.mkdir(parents=True, exist_ok=True)
    chaos = ChaosSettings(work=settings.work, source=settings.source, events=settings.events,
                          rate=settings.rate, seed=settings.seed)
    with kafka_broker(chaos) as broker, postgres_server() as server:
        store_section = store_document(server, settings.store_write_every)
        side = Side("replicas", settings.work, settings.source, broker, store_section)
        store = Store(side.config.serving.postgres)
        watch = Watch(store)
        pair = Pair(side)
        generator = start_generator(side, chaos, broker)
        for replica in REPLICAS:
            pair.start(replica)
        faults = strike_all(settings, rng, pair, watch, server=server, generator=generator)
        if generator.wait() != 0:
            raise RuntimeError(f"the generator failed; see {side.logs}")
        log.info("input complete: waiting for both replicas and the store to catch up")
        drained(watch, pair, input_units(side, settings.events))
        served_speed = store_rows(store)
        at_drain = pinned_versions(side)
        epochs = sorted({row["epoch"] for rows in served_speed.values() for row in rows})
        drain_epoch = (watch.lease() or (None, None))[1]
        finals = batch_and_handover(side, pair, watch) if settings.batch else None
        pair.stop()
        stream_seconds = round(time.monotonic() - began, 1)
        crash_free = Side("crash-free", settings.work, settings.source, broker)
        feed_crash_free(side, crash_free, chaos, broker)
        with pipeline(crash_free.config) as ctx:
            log.info("crash-free single run over the same records")
            run_once(ctx, pipeline_components(ctx.config))
            oracle = view_rows(ctx.spark, crash_free.layout, crash_free)
            served = key_differences(oracle, served_speed)
            speed = {replica: key_differences(oracle, view_rows(
                ctx.spark, Layout.of(side.data_dir, replica), side, at_drain[replica]))
                for replica in REPLICAS}
            if finals is not None:
                log.info("crash-free batch --all")
                run_batch(ctx, BatchRequest("all"))
                oracle = view_rows(ctx.spark, crash_free.layout, crash_free)
                final = {leader: key_differences(oracle, rows)
                         for leader, rows in finals.rows.items()}
            replicas = {replica: key_differences(oracle, view_rows(
                ctx.spark, Layout.of(side.data_dir, replica), side)) for replica in REPLICAS}
        fencing = fencing_record(store)
    failovers = [f["failover_seconds"] for f in faults if "failover_seconds" in f]
    paused = [f["stepped_down_after_cont_seconds"] for f in faults
              if f["kind"] == "pause_leader"]
    return {
        "benchmark": "standby-chaos",
        "source": settings.source,
        "faults": len(faults),
        "failovers": len(failovers),
        "max_failover_seconds": max(failovers, default=None),
        "failover_seconds": sorted(failovers),
        "stale_writes": fencing["stale_writes"],
        **{k: served[k] for k in ("lost_keys", "mismatched_keys")},
        "extra_keys": served["extra_keys"],
        "keys": served["keys"],
        "epoch_went_back": fencing["epoch_went_back"],
        "paused_leader_stepped_down_after_cont_seconds": paused,
        "mismatched_examples": served["examples"],
        "replica_speed_mismatched_keys": {r: _differing(d) for r, d in speed.items()},
        "replica_speed_examples": {r: d["examples"] for r, d in speed.items()},
        "replica_mismatched_keys": {r: _differing(d) for r, d in replicas.items()},
        "grants": fencing["grants"],
        "last_epoch": fencing["last_epoch"],
        "row_epochs": epochs,
        "drain_epoch": drain_epoch,
        "store_writes": fencing["writes"],
        **({} if finals is None else {
            "final_mismatched_keys": {leader: _differing(d) for leader, d in final.items()},
            "final_keys": next(iter(final.values()))["keys"],
            "handover": finals.handover}),
        "fault_counts": dict(Counter(f["kind"] for f in faults)),
        "fault_log": faults,
        "seconds": round(time.monotonic() - began, 1),
        "stream_seconds": stream_seconds,
        "records": settings.events,
        "rate": settings.rate,
        "seed": settings.seed,
        "machine": machine(),
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def _differing(differences: dict[str, Any]) -> int:
    return differences["lost_keys"] + differences["extra_keys"] + differences["mismatched_keys"]


@dataclass(frozen=True)
class Finals:
    """The store's rows after the batch layer ran on both replicas, as each leader wrote
    them (the leader then, and the other after a handover), and the handover's figures."""

    rows: dict[str, dict[str, list[dict]]]
    handover: dict[str, Any]


def batch_and_handover(side: Side, pair: Pair, watch: Watch) -> Finals:
    """``batch --all`` on each replica (the leader's also writes the store), then
    ``standby handover``: the store's rows as written by each leader."""
    rows: dict[str, dict[str, list[dict]]] = {}
    lease = watch.lease()
    assert lease is not None and lease[0] is not None
    leader, epoch = lease
    for replica in (leader, *(r for r in REPLICAS if r != leader)):
        log.info("batch --all on replica %s", replica)
        side.run(f"batch-{replica}", "batch", "--all", "--replica", replica)
    rows[leader] = store_rows(watch.store)
    began = time.monotonic()
    side.run("handover", "standby", "handover")
    seconds = failover(watch, pair, epoch, began)
    lease = watch.lease()
    assert lease is not None and lease[0] is not None and lease[0] != leader
    rows[lease[0]] = store_rows(watch.store)
    log.info("handover from %s to %s: first write of epoch %d after %.1f s", leader, lease[0],
             lease[1], seconds)
    return Finals(rows, {"from": leader, "to": lease[0], "first_write_seconds": round(seconds, 2)})


def passed(result: dict[str, Any], step_down: float = 6.0) -> bool:
    """Nothing lost, doubled or stale; every paused leader stepped down in time."""
    return (result["stale_writes"] == result["lost_keys"] == result["mismatched_keys"]
            == result["extra_keys"] == result["epoch_went_back"] == 0
            and not any(result["replica_mismatched_keys"].values())
            and not any(result["replica_speed_mismatched_keys"].values())
            and not any(result.get("final_mismatched_keys", {}).values())
            and all(s is not None and s <= step_down
                    for s in result["paused_leader_stepped_down_after_cont_seconds"]))


def summary_line(result: dict[str, Any]) -> str:
    return json.dumps({k: result[k] for k in (
        "faults", "failovers", "max_failover_seconds", "stale_writes", "lost_keys",
        "mismatched_keys", "seconds")})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--standby", action="store_true", help="(this harness)")
    parser.add_argument("--source", choices=("files", "kafka"), default="files")
    parser.add_argument("--faults", type=int, default=StandbySettings.faults)
    parser.add_argument("--events", type=int, default=StandbySettings.events)
    parser.add_argument("--rate", type=float, default=StandbySettings.rate)
    parser.add_argument("--seed", type=int, default=StandbySettings.seed)
    parser.add_argument("--work", type=Path)
    args = parser.parse_args(argv)
    log_progress()
    work = args.work or RESULTS / f"work-standby-{args.source}"
    shutil.rmtree(work, ignore_errors=True)
    result = run_standby_chaos(StandbySettings(
        work=work, source=args.source, faults=args.faults, events=args.events,
        rate=args.rate, seed=args.seed))
    write_result(result, f"standby-chaos-{args.source}")
    print(summary_line(result))
    return 0 if passed(result) else 1


if __name__ == "__main__":
    sys.exit(main())
