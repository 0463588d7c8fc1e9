"""docs/design.md's contract in plain Python, independent of Spark: the ground truth for tests."""

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
    """The beacon if docs/design.md's rules accept it, else None."""
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
    """docs/design.md's visits: a session's events split where consecutive ones are > gap apart."""
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
    """A visit: its measures, its entries (experiment, variant) -> qualified, and the time
    of its first exposure to each experiment it was exposed to."""
    kinds = [e["type"] for e in events]
    entries: dict[tuple[str, str], bool] = {}
    exposure: dict[str, datetime] = {}
    for event in events:
        for entry in event.get("experiments") or []:
            key = (entry["id"], entry["variant"])
            qualified = bool(entry.get("qualified", False))
            entries[key] = entries.get(key, False) or qualified
            if qualified:
                exposure[entry["id"]] = min(exposure.get(entry["id"], event["ts"]), event["ts"])
    return {
        "visitor": events[0]["visitor_id"],
        "start": events[0]["ts"],
        "end": events[-1]["ts"],
        "events": events,
        "orders": kinds.count("order"),
        "revenue_cents": sum(_cents(e) for e in events if e["type"] == "order"),
        "bounce": kinds.count("pageview") == 1 and "add_to_cart" not in kinds
        and "order" not in kinds,
        "error_visit": "error" in kinds,
        "entries": entries,
        "exposure": exposure,
    }


def _cents(event: dict) -> int:
    return round(event["revenue"] * 100) if event["type"] == "order" else 0


def targets(visit: dict, event: dict) -> list[tuple[str, str, str]]:
    """What an event of ``visit`` counts for: (experiment, variant, population)."""
    result = []
    for (experiment, variant), qualified in visit["entries"].items():
        result.append((experiment, variant, "assigned"))
        if qualified and event["ts"] >= visit["exposure"][experiment]:
            result.append((experiment, variant, "qualified"))
    return result


def visit_targets(visit: dict) -> list[tuple[str, str, str]]:
    """What a visit counts for: every entry assigned, the exposed ones qualified."""
    return [(experiment, variant, population)
            for (experiment, variant), qualified in visit["entries"].items()
            for population in ["assigned"] + (["qualified"] if qualified else [])]


def totals(event_visits: list[dict], closed: list[dict] | None = None
           ) -> dict[tuple[str, str, str], dict]:
    """Per (experiment, variant, population): event-level totals over the events of
    ``event_visits`` and visit-level totals over ``closed`` (the same visits if None)."""
    result: dict[tuple[str, str, str], dict] = {}

    def row(key: tuple[str, str, str]) -> dict:
        return result.setdefault(key, {"events": 0, "pageviews": 0, "orders": 0,
                                       "revenue": 0, "units": 0, "visits": 0, "bounces": 0,
                                       "error_visits": 0})

    for visit in event_visits:
        for event in visit["events"]:
            for key in targets(visit, event):
                r = row(key)
                r["events"] += 1
                r["pageviews"] += event["type"] == "pageview"
                if event["type"] == "order":
                    r["orders"] += 1
                    r["revenue"] += _cents(event)
                    r["units"] += event["units"]
    for visit in event_visits if closed is None else closed:
        for key in visit_targets(visit):
            r = row(key)
            r["visits"] += 1
            r["bounces"] += visit["bounce"]
            r["error_visits"] += visit["error_visit"]
    return result


def per_visitor(visit_list: list[dict]) -> dict[tuple[str, str, str], dict[str, list[int]]]:
    """Per (experiment, variant, population), per visitor: [visits, orders, revenue in cents,
    bounces, error visits] over the visits attributed to it; the qualified population
    counts the orders from the visit's first exposure on."""
    result: dict[tuple[str, str, str], dict[str, list[int]]] = {}
    for visit in visit_list:
        for experiment, variant, population in visit_targets(visit):
            orders = [e for e in visit["events"] if e["type"] == "order"
                      and (population == "assigned"
                           or e["ts"] >= visit["exposure"][experiment])]
            values = result.setdefault((experiment, variant, population), {}) \
                .setdefault(visit["visitor"], [0, 0, 0, 0, 0])
            for i, amount in enumerate((1, len(orders), sum(_cents(e) for e in orders),
                                        visit["bounce"], visit["error_visit"])):
                values[i] += amount
    return result


def _holds(value: object, condition: dict) -> bool:
    """docs/metrics.md's property conditions."""
    if "exists" in condition and (value is not None) != condition["exists"]:
        return False
    comparisons = {k: v for k, v in condition.items() if k != "exists"}
    if comparisons and value is None:
        return False
    checks = {"equals": lambda b: value == b, "in": lambda b: value in b,
              "lt": lambda b: value < b, "le": lambda b: value <= b,
              "gt": lambda b: value > b, "ge": lambda b: value >= b}
    return all(checks[k](bound) for k, bound in comparisons.items())


def matches(event: dict, events: dict) -> bool:
    """Whether ``event`` meets a definition's ``events`` filter (``{type, where}``)."""
    types = events.get("type")
    if types is not None and event["type"] not in types:
        return False
    return all(_holds(event.get(name), c) for name, c in (events.get("where") or {}).items())


def measured(visit: dict, spec: dict, since: datetime | None,
             window: tuple[datetime, datetime] | None = None) -> list[float]:
    """The values (1 for a count) of a visit's events that a measure (``{events,
    value}``) counts: from ``since`` on (all when None), inside ``window`` when given,
    with the value."""
    values = []
    for event in visit["events"]:
        if since is not None and event["ts"] < since:
            continue
        if window is not None and not window[0] <= event["ts"] < window[1]:
            continue
        if matches(event, spec["events"]):
            value = 1.0 if spec.get("value") is None else event.get(spec["value"])
            if value is not None:
                values.append(float(value))
    return values


def measure(visit: dict, spec: dict, since: datetime | None,
            window: tuple[datetime, datetime] | None = None) -> float:
    """A visit's value of a measure (``{events, value}`` or ``{visits}``)."""
    if spec.get("visits") is not None:
        return float({"all": True, "bounce": visit["bounce"],
                      "error": visit["error_visit"]}[spec["visits"]])
    return sum(measured(visit, spec, since, window))


def _first_exposures(visit_list: list[dict], unit_of) -> dict[tuple, datetime]:
    """Per (experiment, population, unit): when its window starts: the first exposure
    (qualified), the start of the first visit in the experiment (assigned)."""
    first: dict[tuple, datetime] = {}
    for visit in visit_list:
        for experiment, _, population in visit_targets(visit):
            at = visit["exposure"][experiment] if population == "qualified" else visit["start"]
            key = (experiment, population, unit_of(visit))
            first[key] = min(first.get(key, at), at)
    return first


def _window(definition: dict, first: datetime) -> tuple[datetime, datetime] | None:
    window = definition.get("window")
    if window is None:
        return None
    start = first + _duration(window.get("delay", "0 seconds"))
    return start, start + _duration(window["length"])


def _duration(text: str) -> timedelta:
    amount, unit = text.split()
    return timedelta(**{unit if unit.endswith("s") else unit + "s": float(amount)})


def _unit_of(definition: dict):
    if definition.get("unit", "visitor") == "visitor":
        return lambda visit: visit["visitor"]
    return lambda visit: (visit["events"][0]["session_id"], visit["start"])


def quantile_sums(visit_list: list[dict], definition: dict, z: float
                  ) -> dict[tuple[str, str, str], dict[str, float]]:
    """Per (experiment, variant, population): a quantile definition's events ``n``, its
    ``estimate`` and the order statistics at ranks n(q -/+ z sqrt(q(1-q)/n)) (the smallest
    value whose rank reaches them), and over its units the sums of s (events at or below
    the estimate), m (events), s², m², s·m."""
    unit_of, q = _unit_of(definition), definition["quantile"]
    first = _first_exposures(visit_list, unit_of)
    values: dict[tuple[str, str, str], dict[object, list[float]]] = {}
    for visit in visit_list:
        for experiment, variant, population in visit_targets(visit):
            unit = unit_of(visit)
            since = visit["exposure"][experiment] if population == "qualified" else None
            window = _window(definition, first[(experiment, population, unit)])
            values.setdefault((experiment, variant, population), {}).setdefault(
                unit, []).extend(measured(visit, definition, since, window))
    result = {}
    for key, per_unit in values.items():
        ordered = sorted(v for vs in per_unit.values() for v in vs)
        n = len(ordered)
        if n == 0:
            continue

        def at(rank: float, ordered: list[float] = ordered) -> float:
            rank = min(max(rank, 0.0), 1.0)
            return ordered[max(0, math.ceil(rank * len(ordered)) - 1)]

        half = z * math.sqrt(q * (1 - q) / n)
        estimate = at(q)
        sums = {"n": n, "estimate": estimate, "lower": at(q - half), "upper": at(q + half),
                "units": 0, "sum_s": 0.0, "sum_m": 0.0, "sum_ss": 0.0, "sum_mm": 0.0,
                "sum_sm": 0.0}
        for vs in per_unit.values():
            if not vs:
                continue
            s, m = float(sum(v <= estimate for v in vs)), float(len(vs))
            sums["units"] += 1
            for name, amount in (("sum_s", s), ("sum_m", m), ("sum_ss", s * s),
                                 ("sum_mm", m * m), ("sum_sm", s * m)):
                sums[name] += amount
        result[key] = sums
    return result


def _percentile(values: list[float], p: float) -> float:
    """The p-th percentile with linear interpolation between the closest ranks."""
    ordered = sorted(values)
    position = p * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def unit_sums(visit_list: list[dict], definition: dict
              ) -> dict[tuple[str, str, str], dict[str, float]]:
    """Per (experiment, variant, population): a definition's sums over its units (``n``,
    ``x``, ``xx`` and, for a ratio, ``y``, ``yy``, ``xy``, ``with_y``), from its plain
    description (``Definition.model_dump``): the qualified population counts events from
    the visit's first exposure on, visit facts of the whole visit."""
    kind = definition["kind"]
    sides = [definition["numerator"], definition["denominator"]] if kind == "ratio" else \
        [{"events": definition.get("events"), "value": definition.get("value"),
          "visits": definition.get("visits")}]
    units: dict[tuple[str, str, str], dict[object, list[float]]] = {}
    unit_of = _unit_of(definition)
    first = _first_exposures(visit_list, unit_of)
    for visit in visit_list:
        unit = unit_of(visit)
        for experiment, variant, population in visit_targets(visit):
            since = visit["exposure"][experiment] if population == "qualified" else None
            window = _window(definition, first[(experiment, population, unit)])
            totals = units.setdefault((experiment, variant, population), {}) \
                .setdefault(unit, [0.0] * len(sides))
            for i, side in enumerate(sides):
                totals[i] += measure(visit, side, since, window)
    cap = definition.get("cap") or {}
    caps: dict[tuple[str, str], float] = {}
    if cap.get("percentile") is not None:
        pooled: dict[tuple[str, str], list[float]] = {}
        for (experiment, _, population), per_unit in units.items():
            pooled.setdefault((experiment, population), []).extend(
                t[0] for t in per_unit.values())
        caps = {key: _percentile(values, cap["percentile"]) for key, values in pooled.items()}
    result = {}
    for (experiment, variant, population), per_unit in units.items():
        limit = cap.get("absolute", caps.get((experiment, population)))
        sums = {"n": 0.0, "x": 0.0, "xx": 0.0}
        if kind == "ratio":
            sums |= {"y": 0.0, "yy": 0.0, "xy": 0.0, "with_y": 0.0}
        for totals in per_unit.values():
            x = float(totals[0] > 0) if kind == "proportion" else totals[0]
            if limit is not None:
                x = min(x, limit)
            sums["n"] += 1
            sums["x"] += x
            sums["xx"] += x * x
            if kind == "ratio":
                y = totals[1]
                sums["y"] += y
                sums["yy"] += y * y
                sums["xy"] += x * y
                sums["with_y"] += y != 0
        result[(experiment, variant, population)] = sums
    return result


def visit_value(visit: dict, prop: str) -> object:
    """A visit's value of a dimension's property: on its first event that has it."""
    return next((e[prop] for e in visit["events"] if e.get(prop) is not None), None)


def gold_totals(visit_list: list[dict], definition: dict, prop: str | None = None
                ) -> dict[tuple, dict]:
    """Per (experiment, variant, population, value of ``prop`` or None): what gold's
    ``definition_metrics`` holds of a definition over all windows, uncapped: the
    numerator's and the denominator's sums, the units (and those with a positive
    numerator), and the values of a quantile's events. A row's value of ``prop`` is its
    visit's (``visit_value``)."""
    sides = [definition["numerator"], definition["denominator"]] \
        if definition["kind"] == "ratio" else [{k: definition.get(k)
                                               for k in ("events", "value", "visits")}]
    unit_of = _unit_of(definition)
    result: dict[tuple, dict] = {}
    for visit in visit_list:
        value = None if prop is None else visit_value(visit, prop)
        for experiment, variant, population in visit_targets(visit):
            since = visit["exposure"][experiment] if population == "qualified" else None
            row = result.setdefault((experiment, variant, population, value), {
                "numerator": 0.0, "denominator": 0.0, "units": set(), "converted": set(),
                "values": []})
            amounts = [measure(visit, side, since) for side in sides]
            row["numerator"] += amounts[0]
            row["denominator"] += amounts[-1] if len(sides) == 2 else 0.0
            row["units"].add(unit_of(visit))
            if amounts[0] > 0:
                row["converted"].add(unit_of(visit))
            if definition["kind"] == "quantile":
                row["values"].extend(measured(visit, definition, since))
    return result
