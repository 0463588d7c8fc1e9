"""A planted +10 % conversion lift (``generate --effect conversion=0.10``) is recovered by
the report's statistics: the interval covers it and p < 0.05.

The sample needs ~70,000 visits. The generator's beacons are sessionized here by the plain
Python reference of docs/design.md (which the pipeline's visits equal, item by item, in
``tests/batch/test_lambda.py`` and ``test_report.py``), and the visits go through the
report's Spark moments and statistics; running 400,000 events through ingest and the batch
layer as well would take minutes of the suite's time without testing anything more here.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

from abstream.config import ReportSettings
from abstream.generator.write import GeneratorSettings, generate
from abstream.report.build import experiment_report
from abstream.report.moments import served_series
from abstream.schemas import SESSIONS
from tests import reference
from tests.helpers import CATALOG, landing_records, write_lines

#: ~35,000 checkout_button visits per arm: a +10 % lift on a ~7.7 % conversion rate is then
#: ~3.7 standard errors from zero (power ~96 % at 5 %).
EVENTS = 400_000
PLANTED = 0.10
EXPERIMENT = "checkout_button"
VISIT_SCHEMA = (
    "visitor_id string, visit_start timestamp, orders long, revenue decimal(28,2), "
    "is_bounce boolean, is_error_visit boolean, final boolean, "
    f"experiments {SESSIONS['experiments'].dataType.simpleString()}, "
    "metric_parts map<string,double>, "
    f"metric_values {SESSIONS['metric_values'].dataType.simpleString()}")


def _visit_lines(visits: list[dict]) -> list[str]:
    return [json.dumps({
        "visitor_id": v["visitor"], "visit_start": v["start"].isoformat(),
        "orders": v["orders"], "revenue": v["revenue_cents"] / 100, "is_bounce": v["bounce"],
        "is_error_visit": v["error_visit"], "final": True,
        "experiments": [_entry(v, experiment, variant, qualified)
                        for (experiment, variant), qualified in v["entries"].items()],
        "metric_parts": {"visits": 1, "bounce_visits": int(v["bounce"]),
                         "error_visits": int(v["error_visit"]), "count[order]": v["orders"],
                         "sum_revenue[order]": v["revenue_cents"] / 100},
    }) for v in visits]


def _entry(visit: dict, experiment: str, variant: str, qualified: bool) -> dict:
    exposed_at = visit["exposure"][experiment] if qualified else None
    orders = [e for e in visit["events"] if e["type"] == "order"
              and exposed_at is not None and e["ts"] >= exposed_at]
    revenue = sum(round(e["revenue"] * 100) for e in orders) / 100
    return {"id": experiment, "variant": variant, "qualified": qualified,
            "exposed_at": exposed_at and exposed_at.isoformat(),
            "exposed_orders": len(orders), "exposed_revenue": revenue,
            "exposed_parts": {"count[order]": len(orders), "sum_revenue[order]": revenue}}


def test_a_planted_conversion_lift_is_recovered(spark, tmp_path):
    landing = tmp_path / "landing"
    generate(GeneratorSettings(events=EVENTS, seed=7, effects={"conversion": PLANTED},
                               late_rate=0, duplicate_rate=0, malformed_rate=0,
                               file_events=100_000, start=datetime(2026, 1, 5, tzinfo=UTC)),
             landing)
    events = [{**record, "ts": reference.parse_ts(record["event_ts"])}
              for record in map(json.loads, landing_records(landing))]
    visits = write_lines(tmp_path / "visits", "visits.jsonl",
                         _visit_lines(reference.visits(events)))
    times, series = served_series(spark.read.schema(VISIT_SCHEMA).json(str(visits)), 4,
                                  CATALOG)
    report = experiment_report(
        EXPERIMENT, "assigned", totals={},
        series={v: series[(EXPERIMENT, "assigned", v)] for v in ("control", "treatment")},
        times=times, settings=ReportSettings(), catalog=CATALOG)

    assert min(v.visitors for v in report.variants) > 15_000
    assert not report.srm_flagged
    conversion = next(c.result for c in report.comparisons if c.metric == "conversion_rate")
    assert conversion.fixed_lift.low <= PLANTED <= conversion.fixed_lift.high, conversion
    assert conversion.p_value < 0.05, conversion
    assert conversion.sequential_lift.low <= PLANTED <= conversion.sequential_lift.high
    assert conversion.sequential_p_value < 0.05, conversion
