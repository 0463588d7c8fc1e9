"""Running components: to completion (AvailableNow, in pipeline order) or until stopped.

A continuous run stops gracefully: when asked to stop, each query finishes the micro-batch
it is in, then stops. Whatever happens, a restart resumes from the checkpoints, and the
idempotent sinks make a replayed micro-batch change nothing.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from pyspark.errors import StreamingQueryException
from pyspark.sql.streaming import StreamingQuery

from abstream.components import Component, Context
from abstream.config import Config
from abstream.errors import AbstreamError, Interrupted, first_line
from abstream.layout import Layout
from abstream.monitor.exporter import Exporter
from abstream.progress import ProgressListener, RunStats
from abstream.spark import session_conf, spark_session

log = logging.getLogger(__name__)

POLL_SECONDS = 0.5
GRACE_SECONDS = 300.0
ADAPTIVE = "spark.sql.adaptive.enabled"


def _start(ctx: Context, component: Component, once: bool) -> StreamingQuery:
    return component.start(ctx, once).start()


def _failure(component: str, exc: BaseException) -> AbstreamError:
    log.debug("%s failed", component, exc_info=exc)
    return AbstreamError(f"{component} failed: {first_line(exc)}")


@contextmanager
def pipeline(config: Config, exporter: Exporter | None = None) -> Iterator[Context]:
    """A context to run components in: the session, the data dir, progress reporting (and
    the exporter's query metrics, when there is one)."""
    spark = spark_session(config.spark)
    ctx = Context(spark, config, Layout.of(config.data_dir), RunStats())
    consumers = [exporter.queries.observe] if exporter is not None else []
    listener = ProgressListener(ctx.stats, consumers)
    spark.streams.addListener(listener)
    try:
        yield ctx
    finally:
        spark.streams.removeListener(listener)


def run_once(ctx: Context, components: Sequence[Component],
             stop: threading.Event | None = None) -> None:
    """Process all available input, component after component (so each sees the last's
    output), then return."""
    for component in components:
        began = time.monotonic()
        log.info("%s: %s, all available input", component.name,
                 component.describe(ctx.config))
        query = _start(ctx, component, once=True)
        try:
            while not query.awaitTermination(POLL_SECONDS):
                if stop is not None and stop.is_set():
                    _stop_gracefully([query])
                    raise Interrupted(f"stopped during {component.name}; run again to resume")
        except StreamingQueryException as exc:
            raise _failure(component.name, exc) from exc
        last = query.lastProgress
        # Only a trigger that ran a micro-batch posts its progress to the listener; one
        # that found no new input reports a batch id it never ran.
        if last is not None and "addBatch" in last["durationMs"]:
            ctx.stats.wait_for_batch(str(query.runId), int(last["batchId"]))
        log.info("%s: done in %.1f s", component.name, time.monotonic() - began)


def run_continuously(ctx: Context, components: Sequence[Component],
                     stop: threading.Event) -> None:
    """Run the components side by side until ``stop`` is set or one of them fails."""
    with session_conf(ctx.spark, continuous_conf(ctx.config)):
        _run_side_by_side(ctx, components, stop)


def continuous_conf(config: Config) -> dict[str, str]:
    """Adaptive query execution off for a continuous run, unless the user's Spark settings
    say otherwise: its micro-batches are a trigger's worth of events, and re-planning
    between their stages costs them more than it saves. A query keeps the settings it
    started with."""
    return {} if ADAPTIVE in config.spark.conf else {ADAPTIVE: "false"}


def _run_side_by_side(ctx: Context, components: Sequence[Component],
                      stop: threading.Event) -> None:
    queries: dict[str, StreamingQuery] = {}
    try:
        for component in components:
            queries[component.name] = _start(ctx, component, once=False)
            log.info("%s: %s", component.name, component.describe(ctx.config))
        while not stop.is_set():
            for name, query in queries.items():
                if not query.isActive:
                    error = query.exception()
                    raise _failure(name, error) if error else AbstreamError(f"{name} stopped")
            stop.wait(POLL_SECONDS)
        log.info("stopping after the current micro-batches")
    finally:
        _stop_gracefully(list(queries.values()), [
            queries[c.name] for c in components
            if c.name in queries and not c.trigger(ctx.config)])


def _stop_gracefully(queries: Sequence[StreamingQuery],
                     back_to_back: Sequence[StreamingQuery] = ()) -> None:
    """Stop each query once the batch it is in has ended: when its trigger is idle, or, for
    queries whose batches follow each other without a pause (trigger 0, real-time mode,
    whose batches last a checkpoint interval), when a later batch has reported progress."""
    deadline = time.monotonic() + GRACE_SECONDS
    running = {query.id: _last_batch(query) for query in back_to_back}
    for query in queries:
        while (query.isActive and query.status.get("isTriggerActive")
               and not (query.id in running and _last_batch(query) != running[query.id])
               and time.monotonic() < deadline):
            time.sleep(0.05)
        query.stop()


def _last_batch(query: StreamingQuery) -> int:
    progress = query.lastProgress
    return -1 if progress is None else int(progress["batchId"])
