"""Malformed records of every kind the ingest stage must send to quarantine."""

from __future__ import annotations

import json
import random
from collections.abc import Callable

Beacon = dict[str, object]
Mutation = Callable[[Beacon, random.Random], str]

OVERSIZED_BYTES = 70_000


def _dump(beacon: Beacon) -> str:
    return json.dumps(beacon, separators=(",", ":"))


def _truncated(beacon: Beacon, rng: random.Random) -> str:
    line = _dump(beacon)
    return line[: rng.randint(1, len(line) - 2)]


def _not_an_object(beacon: Beacon, rng: random.Random) -> str:
    return rng.choice(["null", "[1,2,3]", '"pageview"', "42", json.dumps([beacon])])


def _empty(beacon: Beacon, rng: random.Random) -> str:
    return rng.choice(["", "   "])


def _missing_field(beacon: Beacon, rng: random.Random) -> str:
    broken = dict(beacon)
    del broken[rng.choice(["event_id", "event_ts", "session_id", "visitor_id", "type"])]
    return _dump(broken)


def _wrong_type(beacon: Beacon, rng: random.Random) -> str:
    broken = dict(beacon)
    field, value = rng.choice([
        ("revenue", "12.50"), ("units", 1.5), ("page_load_ms", "fast"),
        ("experiments", {"id": "checkout_button"}), ("event_id", {"id": 1}),
        ("experiments", [{"id": "checkout_button", "variant": "control", "qualified": "yes"}]),
    ])
    broken[field] = value
    return _dump(broken)


def _negative_amount(beacon: Beacon, rng: random.Random) -> str:
    broken = dict(beacon)
    field = rng.choice(["revenue", "units", "page_load_ms"])
    if field != "page_load_ms":
        broken.update(type="order", revenue=10.0, units=1)
    broken[field] = -rng.randint(1, 100)
    return _dump(broken)


def _future_timestamp(beacon: Beacon, rng: random.Random) -> str:
    broken = dict(beacon)
    broken["event_ts"] = f"{rng.randint(2100, 2999)}-01-01T00:00:00.000Z"
    return _dump(broken)


def _bad_timestamp(beacon: Beacon, rng: random.Random) -> str:
    broken = dict(beacon)
    broken["event_ts"] = rng.choice(
        ["2026-13-45T99:00:00.000Z", "yesterday", "2026-11-22 10:15:30", "1732270530"]
    )
    return _dump(broken)


def _unknown_type(beacon: Beacon, rng: random.Random) -> str:
    broken = dict(beacon)
    broken["type"] = rng.choice(["click", "PAGEVIEW", ""])
    return _dump(broken)


def _bad_experiment(beacon: Beacon, rng: random.Random) -> str:
    broken = dict(beacon)
    broken["experiments"] = [rng.choice([{"variant": "control"}, {"id": "search_ranking"},
                                         {"id": "", "variant": "control"}])]
    return _dump(broken)


def _oversized(beacon: Beacon, rng: random.Random) -> str:
    broken = dict(beacon)
    broken["page"] = "/search?q=" + "x" * OVERSIZED_BYTES
    return _dump(broken)


#: kind -> how to break a beacon; the stage names the reason for each (see stages.beacons).
MALFORMED_KINDS: dict[str, Mutation] = {
    "truncated_json": _truncated,
    "not_an_object": _not_an_object,
    "empty": _empty,
    "missing_field": _missing_field,
    "wrong_type": _wrong_type,
    "negative_amount": _negative_amount,
    "future_timestamp": _future_timestamp,
    "bad_timestamp": _bad_timestamp,
    "unknown_type": _unknown_type,
    "bad_experiment": _bad_experiment,
    "oversized": _oversized,
}
