"""Hand-made event timelines for batch-layer tests: (session, time) pairs on 2026-01-05."""

from datetime import UTC, datetime, timedelta
from pathlib import Path

from abstream.speed import COMPONENTS
from abstream.speed.runner import run_once
from tests.helpers import beacon, dumps, write_lines

CLOCK = "clock"


def at(hour: int, minute: int = 0) -> datetime:
    return datetime(2026, 1, 5, tzinfo=UTC) + timedelta(hours=hour, minutes=minute)


def iso(moment: datetime) -> str:
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def land(ctx, name: str, events: list[tuple[str, datetime]]) -> None:
    """Write (session, time) events as one landing file of beacons. Sessions named
    ``clock...`` are in an experiment of their own: they move watermarks and nothing else."""
    clock = [{"id": CLOCK, "variant": "control", "qualified": False}]
    records = [beacon(f"{name}-{i}", iso(ts), session=session, visitor=f"v-{session}",
                      **({"experiments": clock} if session.startswith(CLOCK) else {}))
               for i, (session, ts) in enumerate(events)]
    write_lines(Path(ctx.layout.landing), f"beacons-{name}.jsonl", map(dumps, records))


def ingest(ctx, name: str, events: list[tuple[str, datetime]]) -> None:
    """Land the events and ingest them into bronze."""
    land(ctx, name, events)
    run_once(ctx, [COMPONENTS["ingest"]])
