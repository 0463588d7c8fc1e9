"""The published results as ``abstream serve`` answers with them: per experiment and
population, the document ``report --publish`` wrote (``experiment_results``), read through
the table's Delta log without Spark, again only when the table has a new version."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from abstream.io.latest_rows import LatestRows


def iso(moment: datetime | None) -> str | None:
    """``moment`` as ISO-8601 in UTC with ``Z`` (a naive time is UTC)."""
    if moment is None:
        return None
    moment = moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    return moment.isoformat().replace("+00:00", "Z")


@dataclass(frozen=True)
class Entry:
    """One experiment and population as published."""

    experiment_id: str
    population: str
    data_through: str | None
    computed_at: str | None
    results: dict[str, Any]
    series: dict[str, Any]
    #: Per dimension, the results per value (``report --by``'s entries).
    breakdowns: dict[str, list[dict[str, Any]]]

    def summary(self) -> dict[str, Any]:
        """What the experiments list shows of it."""
        return {"experiment_id": self.experiment_id, "population": self.population,
                "variants": [v["variant"] for v in self.results["variants"]],
                "final": self.results["final"], "data_through": self.data_through,
                "computed_at": self.computed_at, "dimensions": sorted(self.breakdowns)}


@dataclass(frozen=True)
class Published:
    """The results at one version of the table (``version`` None: nothing published)."""

    version: int | None
    entries: dict[tuple[str, str], Entry]

    def experiments(self) -> set[str]:
        return {experiment for experiment, _ in self.entries}


class PublishedResults:
    """The results table at ``location``, as ``Published`` at its latest version."""

    def __init__(self, location: str) -> None:
        self._rows = LatestRows(location)
        self._published = Published(None, {})

    def latest(self) -> Published:
        rows = self._rows.rows()
        if self._rows.version != self._published.version:
            self._published = Published(self._rows.version, _entries(rows))
        return self._published


def _entries(rows: list[dict[str, Any]]) -> dict[tuple[str, str], Entry]:
    """The published experiments and populations (rows published before documents were,
    which have none, are not)."""
    breakdowns: dict[tuple[str, str], dict[str, list[dict[str, Any]]]] = {}
    for row in rows:
        if row["kind"] == "breakdown":
            breakdowns.setdefault((row["experiment_id"], row["population"]), {})[
                row["dimension"]] = json.loads(row["document"])["values"]
    entries = {}
    for row in rows:
        if row["kind"] != "experiment" or row.get("document") is None:
            continue
        document = json.loads(row["document"])
        key = (row["experiment_id"], row["population"])
        entries[key] = Entry(*key, data_through=iso(row["as_of"]),
                             computed_at=iso(row["published_at"]),
                             results=document["results"], series=document["series"],
                             breakdowns=breakdowns.get(key, {}))
    return dict(sorted(entries.items()))
