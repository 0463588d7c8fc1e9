"""``abstream run`` publishes the report while it runs: every ``report.publish_every``, in
a thread of the driver beside the streaming queries, as ``abstream report --publish``
does. A publish that fails is one line in the log and is tried again at the next one."""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime, timedelta

from pyspark.sql import SparkSession

from abstream.config import Config
from abstream.durations import spark_interval
from abstream.errors import AbstreamError, first_line
from abstream.io.postgres import configured_store
from abstream.io.spark import SPARK_ERRORS
from abstream.layout import Layout
from abstream.periodic import Periodic
from abstream.report.build import build_report, dimension_reports
from abstream.report.publish import publish
from abstream.serving.standby import Leadership

log = logging.getLogger(__name__)


class PeriodicPublisher:
    """Publishes the report every ``every`` until stopped."""

    def __init__(self, spark: SparkSession, layout: Layout, config: Config,
                 every: timedelta, leadership: Leadership | None = None) -> None:
        self.spark, self.layout, self.config, self.every = spark, layout, config, every
        self.leadership = leadership
        self.published = 0
        self._periodic = Periodic("publish", every, self.publish_once)

    def start(self) -> None:
        self._periodic.start()

    def stop(self) -> None:
        """Stop after the publish under way, if any."""
        self._periodic.stop()

    def publish_once(self) -> float | None:
        began = time.monotonic()
        self.spark.sparkContext.setJobDescription("publish the report")
        try:
            report = build_report(self.spark, self.layout, self.config)
            breakdowns = dimension_reports(self.spark, self.layout, self.config)
            store, fence = configured_store(self.config), None
            if self.leadership is not None:
                fence = self.leadership.fence()
                store = store if fence is not None else None
            rows = publish(self.spark, self.layout, report, datetime.now(UTC), breakdowns,
                           store=store, fence=fence)
        except (AbstreamError, *SPARK_ERRORS) as exc:
            log.warning("publishing the report failed, trying again in %s: %s",
                        spark_interval(self.every), first_line(exc))
            return None
        self.published += 1
        log.info("published the report: %d rows in %.1f s", rows, time.monotonic() - began)
        return None
