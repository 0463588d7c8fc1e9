"""Experiment health for Prometheus, from the ``experiment_results`` table that ``abstream
report --publish`` replaces: read at scrape time from its Delta log and Parquet files, with
no Spark, and read again only when the table has a new version."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from abstream.io.latest_rows import LatestRows

log = logging.getLogger(__name__)

_EXPERIMENT = ["experiment", "population"]
_COMPARISON = [*_EXPERIMENT, "variant", "metric", "role", "better"]


def _epoch(moment: datetime) -> float:
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


class ExperimentCollector(Collector):
    """The latest published results as gauges (nothing until something is published)."""

    def __init__(self, location: str) -> None:
        self.results = LatestRows(location)

    def rows(self) -> list[dict[str, Any]]:
        """The table's rows at its latest version (read once per version)."""
        return self.results.rows()

    def collect(self) -> Iterator[Metric]:
        srm = GaugeMetricFamily("abstream_experiment_srm_p_value",
                                "Sample-ratio-mismatch p-value of visitors per variant",
                                labels=_EXPERIMENT)
        threshold = GaugeMetricFamily("abstream_experiment_srm_threshold",
                                      "SRM p-values below this are a mismatch (report config)")
        visitors = GaugeMetricFamily("abstream_experiment_visitors", "Visitors of a variant",
                                     labels=[*_EXPERIMENT, "variant"])
        lift = GaugeMetricFamily("abstream_experiment_lift",
                                 "Relative lift of a variant over control", labels=_COMPARISON)
        low = GaugeMetricFamily("abstream_experiment_lift_ci_low",
                                "Lower end of the lift's confidence sequence", labels=_COMPARISON)
        high = GaugeMetricFamily("abstream_experiment_lift_ci_high",
                                 "Upper end of the lift's confidence sequence",
                                 labels=_COMPARISON)
        adjusted = GaugeMetricFamily(
            "abstream_experiment_p_value_adjusted",
            "p-value adjusted over the experiment and population's comparisons",
            labels=_COMPARISON)
        published = GaugeMetricFamily("abstream_experiment_results_published_timestamp_seconds",
                                      "When the results were published")
        rows = self.rows()
        for row in rows:
            key = [row["experiment_id"], row["population"]]
            if row["kind"] == "experiment":
                if row["srm_p_value"] is not None:
                    srm.add_metric(key, row["srm_p_value"])
            elif row["kind"] == "variant":
                visitors.add_metric([*key, row["variant"]], row["visitors"])
            elif row["lift"] is not None:
                labels = [*key, row["variant"], row["metric"], row["role"],
                          "higher" if row["higher_is_better"] else "lower"]
                lift.add_metric(labels, row["lift"])
                low.add_metric(labels, row["lift_ci_low"])
                high.add_metric(labels, row["lift_ci_high"])
                adjusted.add_metric(labels, row["p_value_adjusted"])
        if rows:
            published.add_metric([], max(_epoch(r["published_at"]) for r in rows))
            threshold.add_metric([], next((r["srm_threshold"] for r in rows
                                           if r["srm_threshold"] is not None), 0.0))
        yield from (srm, threshold, visitors, lift, low, high, adjusted, published)
