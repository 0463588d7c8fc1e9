"""Active/standby replicas: ``abstream run --replica NAME`` keeps every replica computing,
and lets only the lease's holder write the serving store (``io.lease``).

Every ``standby.renew`` the lease loop of each replica reports its input position and lag
to the store; the leader renews the lease; a standby takes it when it is free and (with
``standby.takeover: caught_up``) its input position is at or past the store's last write.
The leader stops writing when it has not renewed for ``standby.step_down`` by its own
monotonic clock (which runs on while the process is paused), before the lease runs out for
the others at ``standby.lease``; every write also checks its epoch in its own transaction,
so one that was under way when the process paused writes nothing.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import psycopg

from abstream.config import Config, StandbySettings
from abstream.durations import spark_interval
from abstream.errors import AbstreamError, first_line
from abstream.io.input_position import PositionReader
from abstream.io.lease import Fence, Lease, acquire, read_lease, release, renew, report
from abstream.io.postgres import KeptConnection, Store, configured_store
from abstream.layout import Layout
from abstream.periodic import Periodic
from abstream.serving.store_schema import ensure_schema

log = logging.getLogger(__name__)


class Leadership:
    """Whether this replica may write the serving store now, and with which epoch: it was
    granted the lease and renewed it less than ``standby.step_down`` ago by ``clock``.
    Shared by the lease loop and the writers."""

    def __init__(self, replica: str, settings: StandbySettings,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.replica, self.settings, self.clock = replica, settings, clock
        self.epoch_seen = 0
        self._fence: Fence | None = None
        self._renewed = 0.0
        self._lock = threading.Lock()

    def fence(self) -> Fence | None:
        """The fence to write with, or None when this replica is not the leader (it steps
        down first when its last renewal is ``standby.step_down`` old)."""
        with self._lock:
            if self._fence is not None:
                since = self.clock() - self._renewed
                if since >= self.settings.step_down.total_seconds():
                    self._step_down(f"the lease was not renewed for {since:.1f} s "
                                    f"(standby.step_down "
                                    f"{spark_interval(self.settings.step_down)})")
            return self._fence

    @property
    def leading(self) -> bool:
        return self.fence() is not None

    def granted(self, epoch: int, asked_at: float) -> None:
        with self._lock:
            self._fence = Fence(self.replica, epoch, self.settings.step_down)
            self._renewed = asked_at
            self.epoch_seen = max(self.epoch_seen, epoch)
        log.info("replica %s leads: granted the lease with epoch %d", self.replica, epoch)

    def renewed(self, asked_at: float) -> None:
        with self._lock:
            self._renewed = max(self._renewed, asked_at)

    def lost(self, why: str, fence: Fence | None = None) -> None:
        """Step down; with ``fence``, only while leading with it (a write of an older epoch
        refused after this replica took the lease again leaves the newer one alone)."""
        with self._lock:
            if self._fence is not None and (fence is None or fence == self._fence):
                self._step_down(why)

    def _step_down(self, why: str) -> None:
        assert self._fence is not None
        log.warning("replica %s stepped down (epoch %d): %s", self.replica, self._fence.epoch,
                    why)
        self._fence = None


class Standby:
    """The lease loop of one replica, in a thread of its driver."""

    def __init__(self, store: Store, layout: Layout, config: Config, leadership: Leadership, *,
                 lag: Callable[[], float | None], on_lead: Callable[[], None],
                 on_leader_late: Callable[[], None]) -> None:
        self.store, self.settings, self.replica = store, config.standby, leadership.replica
        self.leadership, self.lag, self.on_lead = leadership, lag, on_lead
        self.on_leader_late = on_leader_late
        self._leader_was_late = False
        self.positions = PositionReader(layout, config)
        self.connection = KeptConnection(store)
        self._schema_ready = False
        self._waiting = ""
        self._failing = False
        self._periodic = Periodic("standby", config.standby.renew, self.tick, first=0.0)

    def start(self) -> None:
        log.info("replica %s: lease in %s, renewed every %s (lease %s, step down after %s, "
                 "takeover %s)", self.replica, self.store.where,
                 spark_interval(self.settings.renew), spark_interval(self.settings.lease),
                 spark_interval(self.settings.step_down), self.settings.takeover)
        self._periodic.start()

    def stop(self) -> None:
        """Stop the loop; a leader hands the lease over, so a standby takes it at once."""
        self._periodic.stop()
        fence = self.leadership.fence()
        if fence is not None:
            try:
                with self.connection.use() as connection:
                    release(connection, self.store, fence)
                self.leadership.lost("it is stopping; the lease was handed over")
            except AbstreamError as exc:
                log.warning("replica %s could not hand the lease over: %s", self.replica, exc)
        self.connection.close()

    def tick(self) -> float | None:
        """One round: renew or try to take the lease, then report."""
        asked_at = self.leadership.clock()
        fence = self.leadership.fence()
        try:
            position = self.positions.read()
            with self.connection.use() as connection:
                if not self._schema_ready:
                    ensure_schema(connection, self.store)
                    self._schema_ready = True
                if fence is not None:
                    self._renew(connection, fence, asked_at)
                else:
                    epoch, why, lease = acquire(connection, self.store, self.replica,
                                                self.settings, position)
                    if epoch is not None:
                        self.leadership.granted(epoch, asked_at)
                        self.on_lead()
                    elif self._leader_late(lease):
                        self.on_leader_late()
                    elif why != self._waiting:
                        log.info("replica %s stands by: %s", self.replica, why)
                    self._waiting = "" if epoch is not None else why
                report(connection, self.store, self.replica, position=position,
                       lag_seconds=self.lag(), leading=self.leadership.fence() is not None)
        except (AbstreamError, OSError, ValueError) as exc:  # ValueError: a torn checkpoint file
            self._schema_ready = False
            if not self._failing:
                log.warning("replica %s: the lease cannot be renewed or taken: %s",
                            self.replica, first_line(exc))
            self._failing = True
            return None
        if self._failing:
            log.info("replica %s reaches the lease again", self.replica)
        self._failing = False
        return None

    def _leader_late(self, lease: Lease) -> bool:
        """Whether ``lease``'s holder has just become late: more than one and a half
        ``standby.renew`` without a renewal (once per lateness; a renewal re-arms it)."""
        settings = self.settings
        late = lease.seconds_left is not None and lease.holder != self.replica \
            and lease.seconds_left < (settings.lease - 1.5 * settings.renew).total_seconds()
        became, self._leader_was_late = late and not self._leader_was_late, late
        if became:
            log.info("replica %s: %s has not renewed the lease of epoch %d for %.1f s; "
                     "preparing the first write", self.replica, lease.holder, lease.epoch,
                     settings.lease.total_seconds() - (lease.seconds_left or 0.0))
        return became

    def _renew(self, connection: psycopg.Connection, fence: Fence, asked_at: float) -> None:
        if renew(connection, self.store, fence, self.settings):
            self.leadership.renewed(asked_at)
            return
        lease = read_lease(connection, self.store)
        self.leadership.epoch_seen = max(self.leadership.epoch_seen, lease.epoch)
        why = "it was handed over" if lease.handover_from == self.replica else \
            f"{lease.holder} holds epoch {lease.epoch}" if lease.live else "it ran out"
        self.leadership.lost(f"the lease could not be renewed: {why}")


def holder_fence(store: Store, replica: str, settings: StandbySettings) -> Fence | None:
    """``replica``'s fence when it holds the lease now, else None: for a replica's writes
    outside ``run`` (``batch``, ``report --publish``)."""
    with store.connect() as connection:
        ensure_schema(connection, store)
        lease = read_lease(connection, store)
    return Fence(replica, lease.epoch, settings.step_down) \
        if lease.live and lease.holder == replica else None


def fenced_store(config: Config) -> tuple[Store | None, Fence | None]:
    """The serving store a one-off command writes (``batch``, ``report --publish``) and the
    fence to write it with: no store when there is none, or when this replica does not
    hold the lease (its leader's writes are the store's)."""
    store = configured_store(config)
    if store is None or config.replica is None:
        return store, None
    fence = holder_fence(store, config.replica, config.standby)
    if fence is None:
        log.info("replica %s does not hold the serving lease: the store is its leader's to "
                 "write", config.replica)
        return None, None
    return store, fence
