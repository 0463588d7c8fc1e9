"""A team's own event format through the whole pipeline: the generator's beacons rewritten in
another shape (nested paths, epoch milliseconds, experiments under other keys), read
through an input mapping that says so, make the same bronze, visits and gold, speed and
batch layer alike, as the beacons read through the default mapping."""

import json
from pathlib import Path

from bench.chaos import Comparison, compare, compare_batch, speed_frames

from abstream.batch.layer import BatchRequest, run_batch
from abstream.config import EventsSettings
from abstream.generator.write import GeneratorSettings, generate
from abstream.layout import Layout
from abstream.speed import Context, pipeline_components
from abstream.speed.progress import RunStats
from abstream.speed.runner import run_once
from tests.helpers import make_config, write_lines
from tests.reference import parse_ts

#: Where the rewritten events keep each beacon field.
SHAPE = EventsSettings.model_validate({
    "fields": {"event_id": "id", "event_ts": "at", "session_id": "ctx.sid",
               "visitor_id": "user.anon", "type": "ev"},
    "timestamp": "epoch_millis",
    "experiments": {"path": "ab", "id": "key", "variant": "arm", "qualified": "exposed"},
    "properties": {
        "page": {"path": "ctx.page"},
        "device": {"path": "ctx.device"},
        "country": {"path": "ctx.country"},
        "revenue": {"path": "props.amount", "type": "decimal", "min": 0, "max": 1e15,
                    "types": ["order"]},
        "units": {"path": "props.qty", "type": "long", "min": 0, "types": ["order"]},
        "page_load_ms": {"path": "props.load", "type": "long", "min": 0,
                         "types": ["pageview"]}},
})


def _rewritten(line: str) -> str:
    """A beacon in the other shape (a line that is no beacon, as it is)."""
    try:
        b = json.loads(line)
        millis = int(parse_ts(b["event_ts"]).timestamp() * 1000)
    except (ValueError, TypeError, KeyError, AttributeError):
        return line
    return json.dumps({
        "id": b.get("event_id"), "at": millis, "ev": b.get("type"),
        "user": {"anon": b.get("visitor_id")},
        "ctx": {"sid": b.get("session_id"), "page": b.get("page"), "device": b.get("device"),
                "country": b.get("country")},
        "ab": [{"key": e.get("id"), "arm": e.get("variant"), "exposed": e.get("qualified")}
               for e in b.get("experiments") or []],
        "props": {"amount": b.get("revenue"), "qty": b.get("units"),
                  "load": b.get("page_load_ms")},
    })


def test_events_of_another_shape_make_the_same_tables_as_the_beacons(ctx, tmp_path):
    beacons = Path(ctx.layout.landing)
    generate(GeneratorSettings(events=800, seed=31, malformed_rate=0.0,
                               file_events=400), beacons)
    other = Layout.of(tmp_path / "other")
    shaped = Context(ctx.spark, make_config(tmp_path / "other").model_copy(
        update={"events": SHAPE}), other, RunStats())
    for path in sorted(beacons.glob("beacons-*")):
        write_lines(Path(other.landing), path.name,
                    map(_rewritten, path.read_text().splitlines()))

    for context in (ctx, shaped):
        run_once(context, pipeline_components(context.config))
        run_batch(context, BatchRequest("all"))

    comparison = Comparison()
    compare(comparison, "speed", speed_frames(ctx.spark, ctx.layout, "files"),
            speed_frames(ctx.spark, other, "files"))
    compare_batch(comparison, "batch", ctx.spark, ctx.layout, other)
    assert comparison.tables["speed events"]["rows"] > 700
    assert comparison.summary() == {"lost_rows": 0, "duplicate_rows": 0,
                                    "mismatched_tables": 0}, comparison.tables
