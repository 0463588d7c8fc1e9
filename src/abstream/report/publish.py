"""``abstream report --publish``: the report into the small Delta table
``experiment_results``, replaced each time, where the exporter and ``abstream serve`` read
it without Spark.

Per experiment and population: the SRM p-value (with the threshold it is judged by), the
experiment's JSON document (what ``abstream serve`` answers with), and a document per
declared dimension with its results per value; per variant: visitors; per comparison: the
lift with its confidence sequence (the interval valid however often it is read, whatever
``report.inference`` shows) and the adjusted p-value, with the metric's role and which way
is better, for the alert rules.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql.pandas.types import to_arrow_schema

from abstream.io.lease import Fence
from abstream.io.postgres import Store
from abstream.io.tables import RESULTS_TABLE, ensure_table
from abstream.layout import Layout
from abstream.report.build import Report
from abstream.schemas import EXPERIMENT_RESULTS
from abstream.serving.store import publish_results

log = logging.getLogger(__name__)

def result_rows(report: Report, published_at: datetime, breakdowns: Sequence[Report] = ()
                ) -> list[dict[str, Any]]:
    """The rows of ``experiment_results`` for ``report`` and its ``breakdowns`` (``report
    --by``, one per dimension)."""
    rows: list[dict[str, Any]] = []
    for breakdown in breakdowns:
        values: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for e in breakdown.experiments:
            values.setdefault((e.experiment_id, e.population), []).append(e.to_dict())
        rows += [{"published_at": published_at, "as_of": breakdown.as_of,
                  "experiment_id": experiment_id, "population": population,
                  "kind": "breakdown", "dimension": breakdown.dimension,
                  "document": json.dumps({"values": entries})}
                 for (experiment_id, population), entries in sorted(values.items())]
    threshold = report.settings.srm_threshold
    for e in report.experiments:
        key = {"published_at": published_at, "as_of": report.as_of,
               "experiment_id": e.experiment_id, "population": e.population}
        document = {"results": e.to_dict(), "series": e.series_dict()}
        rows.append({**key, "kind": "experiment", "srm_p_value": e.srm_p_value,
                     "srm_threshold": threshold, "document": json.dumps(document)})
        rows += [{**key, "kind": "variant", "variant": v.variant, "visitors": v.visitors}
                 for v in e.variants]
        for c in e.comparisons:
            interval = c.result.sequential_lift
            rows.append({**key, "kind": "comparison", "variant": c.variant,
                         "metric": c.metric, "role": c.role,
                         "higher_is_better": c.definition.higher_is_better, "lift": c.result.lift,
                         "lift_ci_low": interval.low if interval else None,
                         "lift_ci_high": interval.high if interval else None,
                         "p_value_adjusted": c.p_value_adjusted})
    return rows


def publish(spark: SparkSession, layout: Layout, report: Report, published_at: datetime,
            breakdowns: Sequence[Report] = (), *, store: Store | None = None,
            fence: Fence | None = None) -> int:
    """Replace ``experiment_results`` with the rows of ``report`` and its ``breakdowns``,
    and, with a serving ``store``, its published results (with a replica's ``fence``);
    how many rows were written."""
    rows = result_rows(report, published_at, breakdowns)
    path = ensure_table(spark, RESULTS_TABLE, layout)
    schema = to_arrow_schema(EXPERIMENT_RESULTS, timezone="UTC")
    table = pa.Table.from_pylist(rows, schema=schema)
    spark.createDataFrame(table).write.format("delta").mode("overwrite").save(path)
    log.info("published %d result rows to %s", len(rows), path)
    if store is not None:
        publish_results(store, rows, published_at, fence)
    return len(rows)
