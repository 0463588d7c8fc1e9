"""Deterministic clickstream generator: JSON-lines beacon files in the landing folder, or
messages to a Kafka topic.

Beacons are written in arrival order: late events arrive minutes to hours after their event
time, duplicates shortly after the original, malformed records among the rest. The same
settings (seed, start, counts, rates, effects) always give the same files.
"""

from __future__ import annotations

import hashlib
import heapq
import json
import logging
import random
import time
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from abstream.config import KafkaSettings
from abstream.errors import UsageError
from abstream.generator.faults import MALFORMED_KINDS
from abstream.generator.model import (
    EFFECT_METRICS,
    HOUR_MS,
    SEGMENTS,
    ClickstreamModel,
    Event,
    Visitor,
    effect_key,
)
from abstream.io.kafka.clients import ClientLog, producer

log = logging.getLogger(__name__)

#: Event times start here unless told otherwise (generation without --rate), so that a seed
#: alone fixes the output.
DEFAULT_START = datetime(2026, 1, 5, tzinfo=UTC)
LINES_PER_VISITOR = 12.0
FILE_PREFIX = "beacons-"


@dataclass(frozen=True)
class GeneratorSettings:
    events: int
    seed: int = 1
    start: datetime | None = None
    span: timedelta = timedelta(days=1)
    effects: Mapping[str, float] = field(default_factory=dict)
    late_rate: float = 0.01
    late_max: timedelta = timedelta(hours=2)
    duplicate_rate: float = 0.01
    malformed_rate: float = 0.002
    file_events: int = 10_000
    rate: float | None = None

    def check(self) -> None:
        if self.events <= 0:
            raise UsageError("generator: events must be a positive number of records")
        if self.rate is not None and self.rate <= 0:
            raise UsageError("generator: rate must be a positive number of events per second")
        if self.file_events <= 0:
            raise UsageError("generator: file_events must be positive")
        for name in ("late_rate", "duplicate_rate", "malformed_rate"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise UsageError(f"generator: {name} must be in [0, 1)")
        if self.late_max < timedelta(minutes=5):
            raise UsageError("generator: late_max must be at least 5 minutes")
        for key in self.effects:
            metric, segment = effect_key(key)
            if metric not in EFFECT_METRICS:
                raise UsageError(f"generator: unknown effect {metric!r}; "
                                 f"choose from {', '.join(EFFECT_METRICS)}")
            if segment is not None and segment[1] not in dict(SEGMENTS.get(segment[0], ())):
                known = "; ".join(f"{name}: {', '.join(v for v, _ in values)}"
                                  for name, values in SEGMENTS.items())
                raise UsageError(f"generator: an effect limited to {segment[0]}={segment[1]}: "
                                 f"no such segment ({known})")
        if any(lift <= -1.0 for lift in self.effects.values()):
            raise UsageError("generator: an effect is a relative lift and must be greater than -1")


@dataclass
class GenerationSummary:
    """What was written: every figure a reconciliation needs."""

    records: int = 0
    events: int = 0
    duplicates: int = 0
    malformed: int = 0
    late: int = 0
    visitors: int = 0
    malformed_by_kind: dict[str, int] = field(default_factory=dict)
    events_by_type: dict[str, int] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)
    first_event_ts: str | None = None
    last_event_ts: str | None = None
    seconds: float = 0.0
    #: Where the records went: the landing folder, or the Kafka topic and brokers.
    target: str = ""

    def to_dict(self, files: bool = True) -> dict[str, object]:
        figures = asdict(self)
        if not files:
            del figures["files"]
        return figures

    def text(self) -> str:
        files = f" in {len(self.files)} files" if self.files else ""
        return (f"{self.records:,} records{files} ({self.events:,} events, "
                f"{self.duplicates:,} duplicates, {self.malformed:,} malformed, "
                f"{self.late:,} late) in {self.seconds:.1f} s -> {self.target}")


def format_ts(ts_ms: int) -> str:
    seconds, millis = divmod(ts_ms, 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{millis:03d}Z"


def beacon_line(event: Event, session_id: str, visitor: Visitor) -> str:
    """One event as a JSON line (docs/design.md's beacon); ids and pages need no escaping."""
    entries = ",".join(pair[q] for pair, q in zip(visitor.entries_json, event.qualified,
                                                   strict=True))
    tail = ""
    if event.type == "order":
        tail = f',"revenue":{event.revenue!r},"units":{event.units}'
    elif event.page_load_ms is not None:
        tail = f',"page_load_ms":{event.page_load_ms}'
    segments = visitor.segments
    return (f'{{"event_id":"{event.event_id}","event_ts":"{format_ts(event.ts_ms)}",'
            f'"session_id":"{session_id}","visitor_id":"{visitor.visitor_id}",'
            f'"type":"{event.type}","page":"{event.page}","device":"{segments["device"]}",'
            f'"country":"{segments["country"]}","experiments":[{entries}]{tail}}}')


class _Paced(ABC):
    """Collects lines and hands them on in batches, optionally paced to a rate."""

    def __init__(self, per_batch: int, rate: float | None,
                 progress: Callable[[int], None] | None) -> None:
        self.per_batch, self.rate, self.progress = per_batch, rate, progress
        self.buffer: list[str] = []
        self.written = 0
        self.started = time.monotonic()

    def add(self, line: str) -> None:
        self.buffer.append(line)
        if len(self.buffer) >= self.per_batch:
            self.flush()

    def flush(self) -> None:
        if not self.buffer:
            return
        if self.rate is not None:
            due = self.started + (self.written + len(self.buffer)) / self.rate
            time.sleep(max(0.0, due - time.monotonic()))
        self.emit(self.buffer)
        self.written += len(self.buffer)
        self.buffer = []
        if self.progress is not None:
            self.progress(self.written)

    @abstractmethod
    def emit(self, lines: list[str]) -> None:
        """Hand on one batch of lines."""

    def close(self) -> None:
        self.flush()


class _Files(_Paced):
    """Writes each batch as a numbered file, atomically (hidden name, then renamed)."""

    def __init__(self, landing: Path, prefix: str, per_file: int, rate: float | None,
                 progress: Callable[[int], None] | None) -> None:
        super().__init__(per_file, rate, progress)
        self.landing, self.prefix = landing, prefix
        self.names: list[str] = []

    def emit(self, lines: list[str]) -> None:
        name = f"{self.prefix}{len(self.names):06d}.jsonl"
        temporary = self.landing / f".{name}.tmp"
        temporary.write_text("\n".join(lines) + "\n", encoding="utf-8")
        temporary.replace(self.landing / name)
        self.names.append(name)


class _Topic(_Paced):
    """Produces each line as one Kafka message (the value; no key) to a topic."""

    def __init__(self, kafka: KafkaSettings, topic: str, per_batch: int,
                 rate: float | None, progress: Callable[[int], None] | None) -> None:
        super().__init__(per_batch, rate, progress)
        self.topic = topic
        self.producer = producer(kafka, ClientLog(), **{"linger.ms": 5,
                                                        "enable.idempotence": True})

    def emit(self, lines: list[str]) -> None:
        for line in lines:
            while True:
                try:
                    self.producer.produce(self.topic, value=line.encode())
                    break
                except BufferError:
                    self.producer.poll(0.1)
        self.producer.poll(0)

    def close(self) -> None:
        super().close()
        if self.producer.flush(60) > 0:
            raise UsageError(f"could not deliver every beacon to Kafka topic {self.topic!r}")


def generate(settings: GeneratorSettings, landing: Path,
             progress: Callable[[int], None] | None = None) -> GenerationSummary:
    """Write ``settings.events`` records into ``landing`` and say what they hold."""
    settings.check()
    start = _start(settings)
    landing.mkdir(parents=True, exist_ok=True)
    prefix = _file_prefix(settings, start)
    if any(landing.glob(f"{prefix}*")):
        raise UsageError(f"{landing} already holds the beacons of these settings "
                         f"({prefix}*); use another seed or data dir")
    per_file = settings.file_events if settings.rate is None else max(1, int(settings.rate))
    files = _Files(landing, prefix, per_file, settings.rate, progress)
    summary = _run(settings, start, files)
    summary.files = files.names
    summary.target = str(landing)
    return summary


def generate_to_kafka(settings: GeneratorSettings, kafka: KafkaSettings, topic: str,
                      progress: Callable[[int], None] | None = None) -> GenerationSummary:
    """Produce ``settings.events`` records, one message each, to a Kafka topic."""
    settings.check()
    per_batch = settings.file_events if settings.rate is None else \
        max(1, int(settings.rate / 100))
    summary = _run(settings, _start(settings),
                   _Topic(kafka, topic, per_batch, settings.rate, progress))
    summary.target = f"Kafka topic {topic} on {kafka.bootstrap_servers}"
    return summary


def _start(settings: GeneratorSettings) -> datetime:
    return settings.start or (datetime.now(UTC).replace(microsecond=0) if settings.rate
                              else DEFAULT_START)


def _run(settings: GeneratorSettings, start: datetime, sink: _Paced) -> GenerationSummary:
    began = time.monotonic()
    span = settings.span
    if settings.rate is not None and settings.start is None:
        span = timedelta(seconds=settings.events / settings.rate)
    summary = _Simulation(settings, int(start.timestamp() * 1000), span, sink).run()
    sink.close()
    summary.seconds = round(time.monotonic() - began, 3)
    return summary


def _file_prefix(settings: GeneratorSettings, start: datetime) -> str:
    identity = json.dumps({**asdict(settings), "start": start.isoformat(),
                           "effects": dict(sorted(settings.effects.items()))},
                          default=str, sort_keys=True)
    return f"{FILE_PREFIX}s{settings.seed}-{hashlib.sha256(identity.encode()).hexdigest()[:8]}-"


class _Simulation:
    """Visitors arrive as a Poisson process; each brings sessions; lines leave in arrival
    order (a line is written once no later visit can produce an earlier arrival)."""

    def __init__(self, settings: GeneratorSettings, start_ms: int, span: timedelta,
                 sink: _Paced) -> None:
        self.settings, self.sink = settings, sink
        self.rng = random.Random(settings.seed)
        self.model = ClickstreamModel(self.rng, settings.effects)
        self.summary = GenerationSummary()
        self.types: Counter[str] = Counter()
        self.malformed: Counter[str] = Counter()
        self.kinds = sorted(MALFORMED_KINDS)
        self.arrival_gap_ms = (span // timedelta(milliseconds=1)) * LINES_PER_VISITOR \
            / settings.events
        self.late_max_ms = settings.late_max // timedelta(milliseconds=1)
        self.starts: list[tuple[int, int, Visitor | None]] = [(start_ms, 0, None)]
        self.pending: list[tuple[int, int, str]] = []
        self.sequence = 1
        self.planned = 0
        self.first_ts: int | None = None
        self.last_ts = start_ms

    def _next(self) -> int:
        self.sequence += 1
        return self.sequence

    def _push(self, arrival: int, line: str) -> None:
        heapq.heappush(self.pending, (arrival, self._next(), line))
        self.planned += 1

    def _room(self) -> bool:
        return self.planned < self.settings.events

    def run(self) -> GenerationSummary:
        while self._room() and self.starts:
            at, _, visitor = heapq.heappop(self.starts)
            if visitor is None:
                visitor = self.model.new_visitor()
                self.summary.visitors += 1
                gap = max(1, int(self.rng.expovariate(1 / self.arrival_gap_ms)))
                heapq.heappush(self.starts, (at + gap, self._next(), None))
            while self.pending and self.pending[0][0] <= at:
                self.sink.add(heapq.heappop(self.pending)[2])
            visit_end = self._session(visitor, at)
            visitor.sessions_left -= 1
            if visitor.sessions_left > 0:
                later = visit_end + self.rng.randint(HOUR_MS, 12 * HOUR_MS)
                heapq.heappush(self.starts, (later, self._next(), visitor))
        while self.pending:
            self.sink.add(heapq.heappop(self.pending)[2])
        return self._summary()

    def _session(self, visitor: Visitor, at: int) -> int:
        visit_end = at
        for visit in self.model.session(visitor, at):
            for event in visit.events:
                if not self._room():
                    return visit_end
                self._emit(event, beacon_line(event, visit.session_id, visitor))
                visit_end = max(visit_end, event.ts_ms)
        return visit_end

    def _emit(self, event: Event, line: str) -> None:
        rng, settings = self.rng, self.settings
        if rng.random() < settings.late_rate:
            arrival = event.ts_ms + rng.randint(5 * 60_000, self.late_max_ms)
            self.summary.late += 1
        else:
            arrival = event.ts_ms + rng.randint(0, 2_000)
        self._push(arrival, line)
        self.summary.events += 1
        self.types[event.type] += 1
        self.first_ts = event.ts_ms if self.first_ts is None else min(self.first_ts, event.ts_ms)
        self.last_ts = max(self.last_ts, event.ts_ms)
        if self._room() and rng.random() < settings.duplicate_rate:
            self._push(arrival + rng.randint(0, 120_000), line)
            self.summary.duplicates += 1
        if self._room() and rng.random() < settings.malformed_rate:
            kind = rng.choice(self.kinds)
            # Broken from the beacon without its segments: the draws (some depend on the
            # line's length), and so every other record of a seed, do not depend on them.
            beacon = {k: v for k, v in json.loads(line).items() if k not in SEGMENTS}
            broken = MALFORMED_KINDS[kind](beacon, rng)
            self._push(arrival + rng.randint(0, 1_000), broken)
            self.malformed[kind] += 1

    def _summary(self) -> GenerationSummary:
        summary = self.summary
        summary.records = self.planned
        summary.malformed = sum(self.malformed.values())
        summary.malformed_by_kind = dict(sorted(self.malformed.items()))
        summary.events_by_type = dict(sorted(self.types.items()))
        summary.first_event_ts = format_ts(self.first_ts) if self.first_ts is not None else None
        summary.last_event_ts = format_ts(self.last_ts)
        return summary
