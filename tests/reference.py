"""DESIGN.md's contract in plain Python, independent of Spark: the ground truth for tests."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta

EVENT_TYPES = {"pageview", "add_to_cart", "order", "error"}
REQUIRED = ("event_id", "event_ts", "session_id", "visitor_id", "type")


def parse_ts(text: object) -> datetime | None:
    if not isinstance(text, str) or len(text) < 20 or text[10] != "T":
        return None
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed.astimezone(UTC) if parsed.tzinfo else None


def _amount_ok(record: dict, name: str, integral: bool) -> bool:
    value = record.get(name)
    if value is None:
        return True
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    if integral and not isinstance(value, int):
        return False
    return math.isfinite(value) and value >= 0


def valid_event(line: str, ingested_at: datetime | None = None,
                max_bytes: int = 65_536) -> dict | None:
    """The beacon if DESIGN.md's rules accept it, else None."""
    if len(line.encode()) > max_bytes or not line.strip():
        return None
    try:
        record = json.loads(line)
    except ValueError:
        return None
    if not isinstance(record, dict):
        return None
    for name in REQUIRED:
        value = record.get(name)
        if not isinstance(value, str) or not value or len(value) > 128:
            return None
    if record["type"] not in EVENT_TYPES:
        return None
    experiments = record.get("experiments") or []
    if not isinstance(experiments, list):
        return None
    for entry in experiments:
        if not isinstance(entry, dict):
            return None
        if not all(isinstance(entry.get(k), str) and entry[k] for k in ("id", "variant")):
            return None
        if not isinstance(entry.get("qualified", False), bool):
            return None
    if not (_amount_ok(record, "revenue", False) and _amount_ok(record, "units", True)
            and _amount_ok(record, "page_load_ms", True)):
        return None
    if record["type"] == "order" and (record.get("revenue") is None
                                      or record.get("units") is None):
        return None
    ts = parse_ts(record["event_ts"])
    if ts is None:
        return None
    if ts > (ingested_at or datetime.now(UTC)) + timedelta(days=1):
        return None
    return {**record, "ts": ts}
