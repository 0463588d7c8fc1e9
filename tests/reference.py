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


def valid_unique_events(lines: list[str], ingested_at: datetime | None = None) -> list[dict]:
    """Valid beacons, each event_id once (the first seen)."""
    seen: set[str] = set()
    events = []
    for line in lines:
        event = valid_event(line, ingested_at)
        if event is not None and event["event_id"] not in seen:
            seen.add(event["event_id"])
            events.append(event)
    return events


def visits(events: list[dict], gap: timedelta = timedelta(minutes=35)) -> list[dict]:
    """DESIGN.md's visits: a session's events split where consecutive ones are > gap apart."""
    by_session: dict[str, list[dict]] = {}
    for event in events:
        by_session.setdefault(event["session_id"], []).append(event)
    result = []
    for session_events in by_session.values():
        session_events.sort(key=lambda e: e["ts"])
        current = [session_events[0]]
        for event in session_events[1:]:
            if event["ts"] - current[-1]["ts"] > gap:
                result.append(_visit(current))
                current = []
            current.append(event)
        result.append(_visit(current))
    return result


def _visit(events: list[dict]) -> dict:
    kinds = [e["type"] for e in events]
    entries: dict[tuple[str, str], bool] = {}
    for event in events:
        for entry in event.get("experiments") or []:
            key = (entry["id"], entry["variant"])
            entries[key] = entries.get(key, False) or bool(entry.get("qualified", False))
    return {
        "visitor": events[0]["visitor_id"],
        "start": events[0]["ts"],
        "end": events[-1]["ts"],
        "orders": kinds.count("order"),
        "revenue_cents": sum(round(e["revenue"] * 100) for e in events if e["type"] == "order"),
        "bounce": kinds.count("pageview") == 1 and "add_to_cart" not in kinds
        and "order" not in kinds,
        "error_visit": "error" in kinds,
        "entries": entries,
    }


def totals(events: list[dict], visit_list: list[dict]) -> dict[tuple[str, str, str], dict]:
    """Per (experiment, variant, population): event-level and visit-level totals."""
    result: dict[tuple[str, str, str], dict] = {}

    def row(key: tuple[str, str, str]) -> dict:
        return result.setdefault(key, {"events": 0, "pageviews": 0, "orders": 0,
                                       "revenue": 0, "units": 0, "visits": 0, "bounces": 0,
                                       "error_visits": 0})

    for event in events:
        for entry in event.get("experiments") or []:
            populations = ["assigned"] + (["qualified"] if entry.get("qualified") else [])
            for population in populations:
                r = row((entry["id"], entry["variant"], population))
                r["events"] += 1
                r["pageviews"] += event["type"] == "pageview"
                if event["type"] == "order":
                    r["orders"] += 1
                    r["revenue"] += round(event["revenue"] * 100)
                    r["units"] += event["units"]
    for visit in visit_list:
        for (experiment, variant), qualified in visit["entries"].items():
            for population in ["assigned"] + (["qualified"] if qualified else []):
                r = row((experiment, variant, population))
                r["visits"] += 1
                r["bounces"] += visit["bounce"]
                r["error_visits"] += visit["error_visit"]
    return result


def per_visitor(visit_list: list[dict]) -> dict[tuple[str, str, str], dict[str, list[int]]]:
    """Per (experiment, variant, population), per visitor: [visits, orders, revenue in cents,
    bounces, error visits] over the visits attributed to it."""
    result: dict[tuple[str, str, str], dict[str, list[int]]] = {}
    for visit in visit_list:
        for (experiment, variant), qualified in visit["entries"].items():
            for population in ["assigned"] + (["qualified"] if qualified else []):
                values = result.setdefault((experiment, variant, population), {}) \
                    .setdefault(visit["visitor"], [0, 0, 0, 0, 0])
                for i, amount in enumerate((1, visit["orders"], visit["revenue_cents"],
                                            visit["bounce"], visit["error_visit"])):
                    values[i] += amount
    return result
