"""Progress of streaming components: one log line per micro-batch and run totals.

A ``StreamingQueryListener`` reads every query's progress (input rows, rate, duplicates and
late rows dropped); components add what their sinks wrote and how long each step of their
micro-batches took. Lag monitoring builds on the same listener.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar, ParamSpec, TypeVar

from pyspark import SparkContext
from pyspark.sql.streaming import StreamingQueryListener
from pyspark.sql.streaming.listener import (
    QueryIdleEvent,
    QueryProgressEvent,
    QueryStartedEvent,
    QueryTerminatedEvent,
)

from abstream.observed import (
    DUPLICATES,
    FACTS,
    LATE,
    REPORTED,
    STATE_ROWS,
    STEPS,
)

log = logging.getLogger(__name__)
#: The steps every component has: the seconds of its micro-batch function that none of its
#: named steps took, and those of each trigger outside the function (the streaming
#: engine's: offsets, planning, its logs).
OTHER, ENGINE = "other", "streaming engine"
P = ParamSpec("P")
R = TypeVar("R")



@dataclass
class ComponentStats:
    """Totals of one component over a run."""

    batches: int = 0
    input_rows: int = 0
    duplicates_dropped: int = 0
    late_rows_dropped: int = 0
    busy_seconds: float = 0.0
    written: Counter[str] = field(default_factory=Counter)
    #: Rows and memory of the query's state stores at its last micro-batch.
    state_rows: int = 0
    state_memory_bytes: int = 0
    #: The most state rows after any of its micro-batches.
    peak_state_rows: int = 0
    #: Seconds its micro-batches spent in each named step (the Spark jobs a step runs),
    #: over the run: where a component's time goes.
    step_seconds: Counter[str] = field(default_factory=Counter)

    @property
    def rows_per_second(self) -> float:
        return self.input_rows / self.busy_seconds if self.busy_seconds else 0.0


class RunStats:
    """Thread-safe totals per component, fed by sinks and by the progress listener."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._components: dict[str, ComponentStats] = {}
        self._pending: dict[tuple[str, int], Counter[str]] = {}
        self._last_batch: dict[str, int] = {}

    def component(self, name: str) -> ComponentStats:
        with self._lock:
            return self._components.setdefault(name, ComponentStats())

    def wrote(self, component: str, batch_id: int, **rows: float) -> None:
        """Called by a component's sink: what one micro-batch wrote and observed."""
        with self._lock:
            self._pending.setdefault((component, batch_id), Counter()).update(rows)

    @contextmanager
    def step(self, component: str, name: str) -> Iterator[None]:
        """Add the seconds the block takes to the component's ``name`` step."""
        stats = self.component(component)
        began = time.monotonic()
        try:
            yield
        finally:
            seconds = time.monotonic() - began
            with self._lock:
                stats.step_seconds[name] += seconds
            log.debug("%s: %s took %.2f s", component, name, seconds)

    @contextmanager
    def micro_batch(self, component: str) -> Iterator[None]:
        """Add the seconds of the block (a micro-batch's function) that none of the
        component's named steps took in it to its ``OTHER`` step."""
        stats = self.component(component)

        def named() -> float:
            # The engine's seconds are added by the listener's thread, meanwhile.
            return sum(seconds for step, seconds in stats.step_seconds.items()
                       if step not in {OTHER, ENGINE})

        with self._lock:
            before = named()
        try:
            with self.step(component, OTHER):
                yield
        finally:
            with self._lock:
                stats.step_seconds[OTHER] -= named() - before

    def timed(self, component: str, name: str, action: Callable[P, R]) -> Callable[P, R]:
        """``action``, its calls added to the component's ``name`` step."""
        def timed_action(*args: P.args, **kwargs: P.kwargs) -> R:
            with self.step(component, name):
                return action(*args, **kwargs)

        return timed_action

    def progressed(self, progress: dict[str, Any]) -> tuple[ComponentStats, Counter[str]]:
        name, batch_id = progress.get("name") or "query", int(progress["batchId"])
        operators = progress.get("stateOperators") or []
        with self._lock:
            stats = self._components.setdefault(name, ComponentStats())
            written = self._pending.pop((name, batch_id), Counter())
            # Sinks other than foreachBatch (Kafka) count their own output rows.
            sink_rows = int((progress.get("sink") or {}).get("numOutputRows") or -1)
            if not written and sink_rows > 0:
                written = Counter(records=sink_rows)
            facts = {key: written.pop(key) for key in FACTS
                     if key in written}
            durations = progress.get("durationMs") or {}
            if "triggerExecution" in durations and "addBatch" in durations:
                stats.step_seconds[ENGINE] += \
                    max(0, durations["triggerExecution"] - durations["addBatch"]) / 1000
            progress[REPORTED] = {**facts, STEPS: dict(stats.step_seconds)}
            stats.batches += 1
            stats.input_rows += int(progress.get("numInputRows") or 0)
            stats.busy_seconds += (progress.get("batchDuration") or 0) / 1000
            stats.written.update(written)
            run_id = str(progress.get("runId"))
            self._last_batch[run_id] = max(self._last_batch.get(run_id, -1), batch_id)
            stats.duplicates_dropped += facts.get(DUPLICATES, 0)
            stats.late_rows_dropped += facts.get(LATE, 0)
            if STATE_ROWS in facts:
                stats.state_rows = facts[STATE_ROWS]
            if operators:
                stats.state_rows = sum(int(op.get("numRowsTotal") or 0) for op in operators)
                stats.state_memory_bytes = sum(int(op.get("memoryUsedBytes") or 0)
                                               for op in operators)
            stats.peak_state_rows = max(stats.peak_state_rows, stats.state_rows)
            for op in operators:
                stats.late_rows_dropped += int(op.get("numRowsDroppedByWatermark") or 0)
                custom = op.get("customMetrics") or {}
                stats.duplicates_dropped += int(custom.get("numDroppedDuplicateRows") or 0)
        return stats, written

    def wait_for_batch(self, run_id: str, batch_id: int, timeout: float = 30.0) -> None:
        """Block until the listener has seen ``batch_id`` of query run ``run_id`` (progress
        events reach listeners asynchronously)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if self._last_batch.get(run_id, -1) >= batch_id:
                    return
            time.sleep(0.05)
        log.warning("no progress of micro-batch %d of query run %s after %.0f s",
                    batch_id, run_id, timeout)

    def lines(self) -> list[str]:
        """One line per component: batches, rows in, what it wrote and dropped, and the
        time of each step."""
        lines = []
        for name, stats in self.as_dict().items():
            written = ", ".join(f"{v:,} {k}" for k, v in stats["written"].items()) or "nothing"
            steps = ", ".join(f"{step} {seconds:,.1f} s"
                              for step, seconds in stats["step_seconds"].items())
            lines.append(
                f"{name}: {stats['batches']} batches, {stats['input_rows']:,} rows in, wrote "
                f"{written}; {stats['duplicates_dropped']:,} duplicates and "
                f"{stats['late_rows_dropped']:,} late rows dropped"
                + (f"; time by step: {steps}" if steps else ""))
        return lines

    def as_dict(self) -> dict[str, dict[str, Any]]:
        with self._lock:
            return {
                name: {
                    "batches": s.batches,
                    "input_rows": s.input_rows,
                    "duplicates_dropped": s.duplicates_dropped,
                    "late_rows_dropped": s.late_rows_dropped,
                    "busy_seconds": round(s.busy_seconds, 3),
                    "rows_per_second": round(s.rows_per_second),
                    "written": dict(s.written),
                    "state_rows": s.state_rows,
                    "peak_state_rows": s.peak_state_rows,
                    "state_memory_bytes": s.state_memory_bytes,
                    "step_seconds": {step: round(seconds, 3)
                                     for step, seconds in s.step_seconds.items()},
                }
                for name, s in self._components.items()
            }


Event = TypeVar("Event", QueryStartedEvent, QueryProgressEvent, QueryIdleEvent,
              QueryTerminatedEvent)


def _from_json(kind: type[Event], jevent: Any) -> Event:
    """PySpark's ``kind`` of event from the JVM's ``jevent``, by its JSON."""
    return kind.fromJson(json.loads(jevent.json()))


class _EventsAsJson:
    """The JVM's side of a listener: it hands the listener each event made from the event's
    JSON, one call into the JVM. PySpark's own copies every field across, a call each, and
    ends each map's iteration with an exception it converts by asking the JVM for a dozen
    classes by name: on 20-event micro-batches of both components, the listener's thread
    had 765 of the JVM's profile samples against sessionize's 1,849; this one, 73."""

    def __init__(self, listener: StreamingQueryListener) -> None:
        self.listener = listener

    def onQueryStarted(self, jevent: Any) -> None:
        self.listener.onQueryStarted(_from_json(QueryStartedEvent, jevent))

    def onQueryProgress(self, jevent: Any) -> None:
        self.listener.onQueryProgress(_from_json(QueryProgressEvent, jevent))

    def onQueryIdle(self, jevent: Any) -> None:
        self.listener.onQueryIdle(_from_json(QueryIdleEvent, jevent))

    def onQueryTerminated(self, jevent: Any) -> None:
        self.listener.onQueryTerminated(_from_json(QueryTerminatedEvent, jevent))

    class Java:
        implements: ClassVar[list[str]] = [
            "org.apache.spark.sql.streaming.PythonStreamingQueryListener"]


class ProgressListener(StreamingQueryListener):
    """Logs each micro-batch of every query, feeds ``RunStats`` and any other consumer of
    progress events (the exporter's query metrics)."""

    def __init__(self, stats: RunStats,
                 consumers: Sequence[Callable[[dict[str, Any]], None]] = ()) -> None:
        self.stats = stats
        self.consumers = list(consumers)
        self._registered: Any = None

    @property
    def _jlistener(self) -> Any:
        """What ``spark.streams.addListener`` registers in the JVM: ``_EventsAsJson``."""
        if self._registered is None:
            jvm = SparkContext._jvm
            assert jvm is not None, "a SparkContext runs"
            wrapper = getattr(
                jvm, "org.apache.spark.sql.streaming.PythonStreamingQueryListenerWrapper")
            self._registered = wrapper(_EventsAsJson(self))
        return self._registered

    def onQueryStarted(self, event: Any) -> None:
        log.debug("%s started (id %s)", event.name, event.id)

    def onQueryProgress(self, event: Any) -> None:
        progress = json.loads(event.progress.json)
        _, written = self.stats.progressed(progress)
        for consume in self.consumers:
            try:
                consume(progress)
            except Exception:
                log.exception("a progress consumer failed on %s", progress.get("name"))
        rows = int(progress.get("numInputRows") or 0)
        if rows == 0 and not written:
            return
        seconds = (progress.get("batchDuration") or 0) / 1000
        outputs = ", ".join(f"{count:,} {what}" for what, count in written.items())
        log.info("%-10s batch %-4d %9s rows in %5.1f s (%s rows/s)%s",
                 progress.get("name"), progress["batchId"], f"{rows:,}", seconds,
                 f"{rows / seconds:,.0f}" if seconds else "-",
                 f" -> {outputs}" if outputs else "")

    def onQueryIdle(self, event: Any) -> None:
        return

    def onQueryTerminated(self, event: Any) -> None:
        if event.exception:
            log.debug("query %s ended with an error", event.id)
