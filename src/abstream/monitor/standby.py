"""Active/standby replicas from the outside: what each replica exports to Prometheus,
``abstream standby status`` and ``abstream standby handover``. The commands read from and
act on the serving store alone (no Spark, no data dir), so they work from any machine that
reaches the store."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from psycopg import sql

from abstream.config import StandbySettings
from abstream.errors import UsageError
from abstream.io.input_position import InputPosition
from abstream.io.lease import Lease, ReplicaReport, read_lease, release, replica_reports
from abstream.io.postgres import PROGRESS, SERVING, Store, StoreError
from abstream.rendering import render_table

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StandbyStatus:
    """The lease, the store's last write and every replica's last report."""

    lease: Lease
    expires_in: float | None
    written_by: str | None
    written_epoch: int | None
    written_position: InputPosition | None
    written_at: datetime | None
    replicas: list[ReplicaReport]

    def to_dict(self) -> dict[str, Any]:
        return {
            "holder": self.lease.holder if self.lease.live else None,
            "epoch": self.lease.epoch,
            "expires_at": _iso(self.lease.expires_at),
            "expires_in_seconds": self.expires_in,
            "store": {"replica": self.written_by, "epoch": self.written_epoch,
                      "position": _units(self.written_position),
                      "written_at": _iso(self.written_at)},
            "replicas": [{"replica": r.replica, "leading": r.leading,
                          "position": _units(r.position),
                          "behind_store": None if r.position is None
                          else r.position.behind(self.written_position),
                          "lag_seconds": r.lag_seconds,
                          "reported_seconds_ago": round(r.age_seconds, 3)}
                         for r in self.replicas],
        }

    def text(self) -> str:
        lease = self.lease
        if lease.live:
            head = (f"lease: held by {lease.holder}, epoch {lease.epoch}, expires in "
                    f"{self.expires_in:.1f} s")
        else:
            head = f"lease: not held (epoch {lease.epoch}" + (
                f", handed over by {lease.handover_from})" if lease.handover_from else ")")
        store = "store: not written yet" if self.written_at is None else (
            f"store: last written by {self.written_by or 'a single deployment'}"
            + (f" (epoch {self.written_epoch})" if self.written_epoch is not None else "")
            + f" at {self.written_at:%Y-%m-%d %H:%M:%S} UTC, input position "
            f"{self.written_position or 'unknown'}")
        rows = [[r.replica, "yes" if r.leading else "no", str(r.position or "-"),
                 "-" if r.position is None else f"{r.position.behind(self.written_position):,}",
                 "-" if r.lag_seconds is None else f"{r.lag_seconds:.1f} s",
                 f"{r.age_seconds:.1f} s ago"] for r in self.replicas]
        header = ["replica", "leads", "input position", "behind the store", "lag", "reported"]
        replicas = render_table([header, *rows], left=(0, 1, 2)) if rows \
            else "no replica has reported"
        return "\n".join([head, store, "", replicas])


NO_LEASE = "the serving store holds no lease yet: start replicas with abstream run --replica NAME"


@contextmanager
def _lease_connection(store: Store) -> Iterator[psycopg.Connection]:
    """A connection to the store; a store without the lease's tables is one line."""
    try:
        with store.connect() as connection:
            yield connection
    except StoreError as exc:
        if isinstance(exc.cause, psycopg.errors.UndefinedTable):
            raise UsageError(NO_LEASE) from None
        raise


def standby_status(store: Store) -> StandbyStatus:
    with _lease_connection(store) as connection:
        lease = read_lease(connection, store)
        written = connection.execute(sql.SQL(
            "SELECT replica, epoch, position, written_at FROM {} WHERE store = %s").format(
            store.table(PROGRESS)), (SERVING,)).fetchone()
        replicas = replica_reports(connection, store)
    return StandbyStatus(lease, lease.seconds_left,
                         written[0], written[1], InputPosition.from_json(written[2]),
                         written[3], replicas)


@dataclass(frozen=True)
class Handover:
    """A handover: who released the lease, who took it (None: nobody in time) and after
    how many seconds of waiting (None: nobody waited)."""

    released: Lease
    taken_by: str | None
    epoch: int | None
    seconds: float | None

    def text(self) -> str:
        first = f"{self.released.holder} handed over the lease of epoch {self.released.epoch}"
        if self.seconds is None:
            return (f"{first}; not waiting for another replica to take it (see abstream "
                    f"standby status); {self.released.holder} may take it back after one "
                    f"lease")
        if self.taken_by is None:
            return (f"{first}; no other replica took it within {self.seconds:.1f} s "
                    f"(is one caught up? see abstream standby status); "
                    f"{self.released.holder} may take it back after one lease")
        return f"{first}; {self.taken_by} took it with epoch {self.epoch} after " \
               f"{self.seconds:.1f} s"


def handover(store: Store, settings: StandbySettings, wait: bool = True) -> Handover:
    """Make the leader step down now (it writes nothing more from this moment); with
    ``wait``, wait up to one lease for another replica to take the lease."""
    with _lease_connection(store) as connection:
        released = release(connection, store)
    if not released.live:
        raise UsageError("no replica holds the serving lease: there is nothing to hand over")
    log.info("%s released the lease of epoch %d", released.holder, released.epoch)
    if not wait:
        return Handover(released, None, None, None)
    began = time.monotonic()
    while time.monotonic() - began < settings.lease.total_seconds():
        with store.connect() as connection:
            lease = read_lease(connection, store)
        if lease.live and lease.epoch > released.epoch:
            return Handover(released, lease.holder, lease.epoch, time.monotonic() - began)
        time.sleep(0.2)
    return Handover(released, None, None, time.monotonic() - began)


def _units(position: InputPosition | None) -> dict[str, int] | None:
    return None if position is None else position.to_json()


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


class StandbyCollector(Collector):
    """``abstream_standby_leader``, ``abstream_standby_epoch`` and
    ``abstream_standby_lag_seconds`` of ``replica``, from its lease loop's state (whether it
    leads, the newest epoch it saw) and its system lag, when scraped."""

    def __init__(self, replica: str, state: Callable[[], tuple[bool, int]],
                 lag: Callable[[], float]) -> None:
        self.replica, self.state, self.lag = replica, state, lag

    def collect(self) -> Iterator[Metric]:
        leading, epoch = self.state()
        families = (
            ("abstream_standby_leader", "1 while this replica holds the serving lease and "
             "writes the serving store, else 0", float(leading)),
            ("abstream_standby_epoch", "The newest epoch of the serving lease this replica "
             "has seen (it only grows)", float(epoch)),
            ("abstream_standby_lag_seconds", "This replica's system lag (as "
             "abstream_system_lag_seconds), to compare the replicas by", self.lag()),
        )
        for name, text, value in families:
            family = GaugeMetricFamily(name, text, labels=["replica"])
            family.add_metric([self.replica], value)
            yield family
