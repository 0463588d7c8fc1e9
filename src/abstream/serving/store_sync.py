"""When the serving store is written: by ``abstream run`` every
``serving.postgres.write_every`` in a thread of the driver, beside the streaming queries;
by ``run --once`` and ``abstream batch`` once, at the end.

A write that fails (PostgreSQL down, a refused login, a statement that fails) is one line
in the log and is tried again after ``run.restart_backoff``, doubled with each failure in
a row up to ``run.restart_backoff_max``. The Delta tables are not held up meanwhile: the
next write that succeeds brings the store up to them at once. ``run`` keeps trying for as
long as it runs; ``run --once`` and ``batch`` as often as ``run.max_restarts`` allows, then
fail with that line (their Delta tables are written; the next write catches the store up).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from pyspark.sql import SparkSession

from abstream.config import Config
from abstream.errors import AbstreamError, Interrupted, first_line
from abstream.io.lease import Fenced
from abstream.io.spark import SPARK_ERRORS
from abstream.layout import Layout
from abstream.periodic import Periodic, backoff_seconds
from abstream.serving.standby import Leadership, fenced_store
from abstream.serving.store import Prepared, StoreWriter, Written

log = logging.getLogger(__name__)
T = TypeVar("T")

#: What a write can fail with and be tried again after.
WRITE_ERRORS = (AbstreamError, *SPARK_ERRORS)


class StoreSync:
    """``abstream run``'s writes of the store, until stopped."""

    def __init__(self, spark: SparkSession, layout: Layout, config: Config,
                 leadership: Leadership | None = None) -> None:
        self.writer = StoreWriter(spark, layout, config, "speed")
        self.leadership = leadership
        self.settings = config.run
        self.failures = 0
        self.writes = 0
        self._prepared: Prepared | None = None
        self._prepare_wanted = threading.Event()
        self._periodic = Periodic("serving-store", config.serving.postgres.write_every,
                                  self.write_once)

    def start(self) -> None:
        self._periodic.start()

    def stop(self) -> None:
        self._periodic.stop()

    def wake(self) -> None:
        """Write now (a replica that has just been granted the lease)."""
        self._periodic.wake()

    def prepare(self) -> None:
        """Compute the next write now, before this replica holds the lease (its leader has
        missed renewals): once granted, it commits that write at once instead of
        computing it then."""
        self._prepare_wanted.set()
        self._periodic.wake()

    def write_once(self) -> float | None:
        """One write (a replica's only while it leads; a write prepared before it was
        granted the lease is committed first); the pause before the next when it failed."""
        fence = None
        if self.leadership is not None:
            fence = self.leadership.fence()
            if fence is None:
                self._prepare_if_wanted()
                self._warm_up_if_wanted()
                return None
        prepared, self._prepared = self._prepared, None
        try:
            if prepared is not None:
                self.writes += self.writer.write(fence=fence, prepared=prepared) is not None
            written = self.writer.write(fence=fence)
        except Fenced as exc:
            assert self.leadership is not None
            self.leadership.lost(str(exc), exc.fence)
            return None
        except WRITE_ERRORS as exc:
            self.failures += 1
            delay = backoff_seconds(self.settings, self.failures)
            log.warning("%s; trying again in %.1f s", first_line(exc), delay)
            return delay
        if self.failures:
            log.info("serving store %s: caught up after %d failed write%s",
                     self.writer.store.where, self.failures, "" if self.failures == 1 else "s")
            self.failures = 0
        self.writes += written is not None
        return None

    def _warm_up_if_wanted(self) -> None:
        """A replica that has not computed its serving view yet computes it once in a round
        as a standby, and drops it: a failover's first write then runs on code its JVM has
        compiled already (a cold JVM's first computation of the view takes two to three
        times as long)."""
        if not self.writer.view_computed:
            _logged_if_failed(self.writer.warm_up, "the serving view could not be computed "
                              "ahead of a failover (tried again next round)")

    def _prepare_if_wanted(self) -> None:
        if not self._prepare_wanted.is_set():
            return
        self._prepare_wanted.clear()
        self._prepared = _logged_if_failed(
            self.writer.prepare, "the serving store's next write could not be prepared")


def _logged_if_failed(action: Callable[[], T], failed: str) -> T | None:
    """``action``'s result, or None and ``failed`` in the log when it fails as a write can."""
    try:
        return action()
    except WRITE_ERRORS as exc:
        log.info("%s: %s", failed, first_line(exc))
        return None


def write_store(spark: SparkSession, layout: Layout, config: Config, writer: str, *,
                covers: Mapping[str, Any] | None = None,
                stop: threading.Event | None = None) -> Written | None:
    """One write as ``writer``, tried again as ``run.max_restarts`` allows; a replica's
    only while it holds the lease."""
    store_writer = StoreWriter(spark, layout, config, writer)
    stop = stop if stop is not None else threading.Event()
    failures = 0
    while True:
        try:
            store, fence = fenced_store(config)
            if store is None:
                return None
            return store_writer.write(covers, fence)
        except Fenced as exc:
            log.info("%s", exc)
            return None
        except WRITE_ERRORS as exc:
            failures += 1
            if failures > config.run.max_restarts:
                raise
            delay = backoff_seconds(config.run, failures)
            log.warning("%s; trying again in %.1f s (%d of %d)", first_line(exc), delay,
                        failures, config.run.max_restarts)
            if stop.wait(delay):
                raise Interrupted("stopped before the serving store was written") from exc
