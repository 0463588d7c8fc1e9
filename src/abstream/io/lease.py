"""The standby lease in the PostgreSQL serving store: which replica may write the store.

- ``standby_lease``: one row, ``serving``: the ``holder``, its ``epoch`` (it only grows: each
  grant counts it up) and ``expires_at`` by the database's clock; a handover's
  ``handover_from``/``released_at``.
- ``standby_grants``: one row per grant: epoch, holder, both replicas' input positions.
- ``standby_replicas``: each replica's last report: its input position, lag, whether it leads.

A grant, a renewal and a release update the lease row; every serving write reads it ``FOR
SHARE`` in its own transaction and goes on only while its epoch is the lease's and the lease
has not expired (``check_fence``). The row lock orders them: a write either commits before a
new grant or sees its epoch and writes nothing. Grants and writes take their ``seq`` from one
sequence (``standby_order``) after that lock, so ordering by it is the order they took effect.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import psycopg
from psycopg import sql

from abstream.config import StandbySettings
from abstream.errors import AbstreamError
from abstream.io.input_position import InputPosition
from abstream.io.postgres import PROGRESS, SERVING, Store

LEASE, GRANTS, REPLICAS, ORDER = ("standby_lease", "standby_grants", "standby_replicas",
                                  "standby_order")


class Fenced(AbstreamError):
    """A write by a replica whose epoch is no longer the lease's (or whose lease ran out):
    it wrote nothing."""

    def __init__(self, fence: Fence, lease: Lease) -> None:
        self.fence, self.lease = fence, lease
        now = f"{lease.holder} holds epoch {lease.epoch}" if lease.holder and lease.live \
            else f"the lease of epoch {lease.epoch} is not held"
        super().__init__(f"replica {fence.replica}'s epoch {fence.epoch} is no longer the "
                         f"lease's ({now}): the write was refused")


@dataclass(frozen=True)
class Fence:
    """What a leader's write carries: its replica and the epoch it was granted; how long
    its transaction may hold the lease row idle (``standby.step_down``)."""

    replica: str
    epoch: int
    pause_limit: timedelta = field(default=timedelta(seconds=6), compare=False)


@dataclass(frozen=True)
class Lease:
    """The lease row, and whether it is live by the database's clock now."""

    holder: str | None
    epoch: int
    expires_at: datetime | None
    live: bool
    handover_from: str | None
    handover_pending: bool
    #: Seconds until it runs out by the database's clock (None when it is not live).
    seconds_left: float | None = None

    def fences(self, fence: Fence) -> bool:
        """Whether a write carrying ``fence`` may go on."""
        return self.live and self.holder == fence.replica and self.epoch == fence.epoch


@dataclass(frozen=True)
class ReplicaReport:
    """A replica's last report to the store."""

    replica: str
    position: InputPosition | None
    lag_seconds: float | None
    leading: bool
    reported_at: datetime
    age_seconds: float


def ensure_lease_tables(connection: psycopg.Connection, store: Store) -> None:
    """The lease's tables (inside ``serving.store_schema.ensure_schema``'s transaction)."""
    connection.execute(sql.SQL("CREATE SEQUENCE IF NOT EXISTS {}").format(store.table(ORDER)))
    connection.execute(sql.SQL(
        "CREATE TABLE IF NOT EXISTS {} (store text PRIMARY KEY, holder text, "
        "epoch bigint NOT NULL DEFAULT 0, expires_at timestamptz, acquired_at timestamptz, "
        "renewed_at timestamptz, handover_from text, released_at timestamptz)").format(
        store.table(LEASE)))
    connection.execute(sql.SQL("INSERT INTO {} (store) VALUES (%s) ON CONFLICT DO NOTHING")
                       .format(store.table(LEASE)), (SERVING,))
    connection.execute(sql.SQL(
        "CREATE TABLE IF NOT EXISTS {} (seq bigint PRIMARY KEY, epoch bigint NOT NULL, "
        "holder text NOT NULL, granted_at timestamptz NOT NULL DEFAULT now(), "
        "position jsonb, published jsonb, previous text)").format(store.table(GRANTS)))
    connection.execute(sql.SQL(
        "CREATE TABLE IF NOT EXISTS {} (replica text PRIMARY KEY, position jsonb, "
        "lag_seconds double precision, leads boolean NOT NULL, "
        "reported_at timestamptz NOT NULL)").format(store.table(REPLICAS)))


def next_order(connection: psycopg.Connection, store: Store) -> int:
    return int(connection.execute(sql.SQL("SELECT nextval(%s)"),
                                  (f"{store.schema}.{ORDER}",)).fetchone()[0])


def _lease(connection: psycopg.Connection, store: Store, lock: str,
           exclude_window: timedelta = timedelta(0)) -> Lease:
    row = connection.execute(sql.SQL(
        "SELECT holder, epoch, expires_at, coalesce(expires_at > now(), false), "
        "handover_from, coalesce(released_at + %s > now(), false), "
        "CASE WHEN expires_at > now() THEN extract(epoch FROM expires_at - now()) END "
        "FROM {} WHERE store = %s " + lock).format(store.table(LEASE)),
        (exclude_window, SERVING)).fetchone()
    return Lease(*row[:6], None if row[6] is None else float(row[6]))


def read_lease(connection: psycopg.Connection, store: Store) -> Lease:
    return _lease(connection, store, "")


def check_fence(connection: psycopg.Connection, store: Store, fence: Fence) -> None:
    """In a write's transaction, once the client has sent its rows: hold the lease row
    (``FOR SHARE``) until it commits, or raise ``Fenced`` when ``fence`` is no longer the
    lease's. A writer paused from here on must not keep the row from a new leader: its
    session ends once it has been idle in the transaction for ``fence.pause_limit``."""
    connection.execute("SELECT set_config('idle_in_transaction_session_timeout', %s, true)",
                        (f"{int(fence.pause_limit.total_seconds() * 1000)}ms",))
    lease = _lease(connection, store, "FOR SHARE")
    if not lease.fences(fence):
        raise Fenced(fence, lease)


def acquire(connection: psycopg.Connection, store: Store, replica: str,
            settings: StandbySettings, position: InputPosition
            ) -> tuple[int | None, str, Lease]:
    """Take the lease for ``replica`` when it is free (expired or released), ``replica``
    did not just hand it over, and (``takeover: caught_up``) ``position`` is at or past the
    position of the store's last write. The epoch granted, or None and why not; and the
    lease as it was found."""
    with connection.transaction():
        connection.execute("SELECT set_config('lock_timeout', %s, true)",
                           (f"{int(settings.renew.total_seconds() * 1000)}ms",))
        lease = _lease(connection, store, "FOR UPDATE", settings.lease)
        if lease.live:
            return None, f"{lease.holder} holds epoch {lease.epoch}", lease
        if lease.handover_from == replica and lease.handover_pending:
            return None, "it handed the lease over; the others have one lease to take it", lease
        row = connection.execute(sql.SQL("SELECT position, replica FROM {} WHERE store = %s")
                                 .format(store.table(PROGRESS)), (SERVING,)).fetchone()
        published = InputPosition.from_json(row[0])
        if settings.takeover == "caught_up" and row[1] != replica \
                and not position.at_or_past(published):
            return None, (f"its input position ({position}) is {position.behind(published):,} "
                          f"behind the store's last write ({published})"), lease
        epoch = connection.execute(sql.SQL(
            "UPDATE {} SET holder = %s, epoch = epoch + 1, expires_at = now() + %s, "
            "acquired_at = now(), renewed_at = now(), handover_from = NULL, "
            "released_at = NULL WHERE store = %s RETURNING epoch").format(store.table(LEASE)),
            (replica, settings.lease, SERVING)).fetchone()[0]
        connection.execute(sql.SQL(
            "INSERT INTO {} (seq, epoch, holder, position, published, previous) "
            "VALUES (%s, %s, %s, %s, %s, %s)").format(store.table(GRANTS)),
            (next_order(connection, store), epoch, replica, json.dumps(position.to_json()),
             None if published is None else json.dumps(published.to_json()), lease.holder))
    return int(epoch), "granted", lease


def renew(connection: psycopg.Connection, store: Store, fence: Fence,
          settings: StandbySettings) -> bool:
    """Extend the lease by ``settings.lease``; False when ``fence`` no longer holds it
    (another replica took it, it ran out, or it was handed over)."""
    with connection.transaction():
        row = connection.execute(sql.SQL(
            "UPDATE {} SET expires_at = now() + %s, renewed_at = now() WHERE store = %s "
            "AND holder = %s AND epoch = %s AND expires_at > now() RETURNING epoch").format(
            store.table(LEASE)), (settings.lease, SERVING, fence.replica, fence.epoch)
        ).fetchone()
    return row is not None


def release(connection: psycopg.Connection, store: Store, fence: Fence | None = None
            ) -> Lease:
    """End the live lease now, for its holder to hand over; with ``fence``, only when it
    is still that fence's. The lease before it ended."""
    with connection.transaction():
        lease = _lease(connection, store, "FOR UPDATE")
        if lease.live and (fence is None or lease.fences(fence)):
            connection.execute(sql.SQL(
                "UPDATE {} SET expires_at = now(), handover_from = holder, "
                "released_at = now() WHERE store = %s").format(store.table(LEASE)), (SERVING,))
    return lease


def report(connection: psycopg.Connection, store: Store, replica: str, *,
           position: InputPosition, lag_seconds: float | None, leading: bool) -> None:
    """Record ``replica``'s position, lag and whether it leads, for ``standby status``."""
    connection.execute(sql.SQL(
        "INSERT INTO {} (replica, position, lag_seconds, leads, reported_at) "
        "VALUES (%s, %s, %s, %s, now()) ON CONFLICT (replica) DO UPDATE SET "
        "position = EXCLUDED.position, lag_seconds = EXCLUDED.lag_seconds, "
        "leads = EXCLUDED.leads, reported_at = EXCLUDED.reported_at").format(
        store.table(REPLICAS)),
        (replica, json.dumps(position.to_json()), lag_seconds, leading))


def replica_reports(connection: psycopg.Connection, store: Store) -> list[ReplicaReport]:
    rows = connection.execute(sql.SQL(
        "SELECT replica, position, lag_seconds, leads, reported_at, "
        "extract(epoch FROM now() - reported_at) FROM {} ORDER BY replica").format(
        store.table(REPLICAS))).fetchall()
    return [ReplicaReport(r[0], InputPosition.from_json(r[1]), r[2], r[3], r[4], float(r[5]))
            for r in rows]
