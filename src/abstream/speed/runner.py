"""Running components: to completion (AvailableNow, in pipeline order) or until stopped.

A continuous run stops gracefully: when asked to stop, each query finishes the micro-batch
it is in, then stops. A component whose query fails is started again (``supervision``).
Whatever happens, a restart resumes from the checkpoints, and the idempotent sinks make a
replayed micro-batch change nothing.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from pyspark.sql.streaming import StreamingQuery

from abstream.config import Config
from abstream.errors import AbstreamError, Interrupted
from abstream.io.deployment import Deployment
from abstream.io.spark import SPARK_ERRORS, session_conf
from abstream.speed.component import Component, Context
from abstream.speed.progress import ProgressListener, RunStats
from abstream.speed.supervision import Supervisor

log = logging.getLogger(__name__)

POLL_SECONDS = 0.5
GRACE_SECONDS = 300.0
ADAPTIVE = "spark.sql.adaptive.enabled"


def _start(ctx: Context, component: Component, once: bool) -> StreamingQuery:
    return component.start(ctx, once).start()


@contextmanager
def pipeline(config: Config, on_progress: Sequence[Callable[[dict[str, Any]], None]] = ()
             ) -> Iterator[Context]:
    """A context to run components in: the session, the data dir, progress reporting (each
    query's progress also goes to ``on_progress``, e.g. the exporter's query metrics)."""
    deployment = Deployment.open(config)
    ctx = Context(deployment.spark, config, deployment.layout, RunStats())
    listener = ProgressListener(ctx.stats, on_progress)
    ctx.spark.streams.addListener(listener)
    try:
        yield ctx
    finally:
        ctx.spark.streams.removeListener(listener)


def run_once(ctx: Context, components: Sequence[Component],
             stop: threading.Event | None = None) -> None:
    """Process all available input, component after component (so each sees the last's
    output), then return. A component that fails is started again as ``run.*`` allows."""
    stop = stop if stop is not None else threading.Event()
    supervisor = Supervisor(ctx.config.run)
    for component in components:
        began = time.monotonic()
        log.info("%s: %s, all available input", component.name,
                 component.describe(ctx.config))
        while isinstance(query := _until_done(ctx, component, stop), Exception):
            if stop.wait(supervisor.failed(component.name, query)):
                raise Interrupted(f"stopped during {component.name}; run again to resume")
        last = query.lastProgress
        # Only a trigger that ran a micro-batch posts its progress to the listener; one
        # that found no new input reports a batch id it never ran.
        if last is not None and "addBatch" in last["durationMs"]:
            ctx.stats.wait_for_batch(str(query.runId), int(last["batchId"]))
        log.info("%s: done in %.1f s", component.name, time.monotonic() - began)


def _until_done(ctx: Context, component: Component,
                stop: threading.Event) -> StreamingQuery | Exception:
    """Run ``component`` over all available input: its query when it ended, its error when
    it failed."""
    try:
        query = _start(ctx, component, once=True)
        while not query.awaitTermination(POLL_SECONDS):
            if stop.is_set():
                _stop_gracefully([query])
                raise Interrupted(f"stopped during {component.name}; run again to resume")
    except SPARK_ERRORS as exc:
        return exc
    finally:
        ctx.releases.release(component.name)
    return query


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
    supervisor = Supervisor(ctx.config.run)
    queries: dict[str, StreamingQuery] = {}
    starts = dict.fromkeys((c.name for c in components), time.monotonic())
    try:
        while not stop.is_set():
            for name, query in list(queries.items()):
                if not query.isActive:
                    error = query.exception()
                    if error is None:
                        raise AbstreamError(f"{name} stopped")
                    del queries[name]
                    ctx.releases.release(name)
                    starts[name] = time.monotonic() + supervisor.failed(name, error)
            for component in components:
                if starts.get(component.name, math.inf) <= time.monotonic():
                    del starts[component.name]
                    try:
                        queries[component.name] = _start(ctx, component, once=False)
                    except SPARK_ERRORS as exc:
                        ctx.releases.release(component.name)
                        starts[component.name] = (time.monotonic()
                                                  + supervisor.failed(component.name, exc))
                        continue
                    log.info("%s: %s", component.name, component.describe(ctx.config))
            stop.wait(POLL_SECONDS)
        log.info("stopping after the current micro-batches")
    finally:
        _stop_gracefully(list(queries.values()))
        for component in components:
            ctx.releases.release(component.name)


def _stop_gracefully(queries: Sequence[StreamingQuery]) -> None:
    """Stop each query once the batch it was in when asked has ended: when its trigger is
    idle, or when a later batch has reported progress. A query whose batches outlast its
    trigger interval (and one on trigger 0, or in real-time mode, whose batches last a
    checkpoint interval) starts the next at once, its trigger hardly ever idle: it stops
    as that one begins, which a restart runs again, instead of running until its input
    runs out."""
    deadline = time.monotonic() + GRACE_SECONDS
    running = {query.id: _last_batch(query) for query in queries}
    for query in queries:
        while (query.isActive and query.status.get("isTriggerActive")
               and _last_batch(query) == running[query.id]
               and time.monotonic() < deadline):
            time.sleep(0.05)
        query.stop()


def _last_batch(query: StreamingQuery) -> int:
    progress = query.lastProgress
    return -1 if progress is None else int(progress["batchId"])
