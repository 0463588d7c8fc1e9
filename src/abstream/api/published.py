"""The published results as ``abstream serve`` answers with them: per experiment and
population, the document ``report --publish`` wrote, read again only when there is a new
version: from the Delta table ``experiment_results`` through its log without Spark, or,
with ``serving.store: postgres``, from the store's ``published_results`` (its version is
``publication``'s)."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from abstream.io.latest_rows import LatestRows
from abstream.io.postgres import PUBLICATION, PUBLISHED, SERVING, KeptConnection, Store


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


class Source(Protocol):
    def latest(self) -> Published: ...


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


class StoredResults:
    """The serving store's published results, as ``Published`` at its latest version; one
    connection, opened again after the store failed."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._published = Published(None, {})
        self._lock = threading.Lock()
        self._connection = KeptConnection(store)

    def latest(self) -> Published:
        """``StoreError`` when the store cannot answer."""
        with self._lock, self._connection.use() as connection:
            return self._read(connection)

    def _read(self, connection: psycopg.Connection) -> Published:
        try:
            with connection.cursor(row_factory=dict_row) as cursor:
                version = self._version(cursor)
        except psycopg.errors.UndefinedTable:
            return Published(None, {})
        if version != self._published.version:
            with connection.transaction(), connection.cursor(row_factory=dict_row) as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                version = self._version(cursor)
                rows = cursor.execute(sql.SQL("SELECT * FROM {}").format(
                    self.store.table(PUBLISHED))).fetchall()
            self._published = Published(version, _entries(rows))
        return self._published

    def _version(self, cursor: psycopg.Cursor[dict[str, Any]]) -> int | None:
        """The publication's version, None before the first publish."""
        row = cursor.execute(sql.SQL("SELECT version FROM {} WHERE store = %s").format(
            self.store.table(PUBLICATION)), (SERVING,)).fetchone()
        return int(row["version"]) if row and row["version"] else None


def _entries(rows: list[dict[str, Any]]) -> dict[tuple[str, str], Entry]:
    """The published experiments and populations (rows published before documents were,
    which have none, are not)."""
    breakdowns: dict[tuple[str, str], dict[str, list[dict[str, Any]]]] = {}
    for row in rows:
        if row["kind"] == "breakdown":
            breakdowns.setdefault((row["experiment_id"], row["population"]), {})[
                row["dimension"]] = _document(row)["values"]
    entries = {}
    for row in rows:
        if row["kind"] != "experiment" or row.get("document") is None:
            continue
        document = _document(row)
        key = (row["experiment_id"], row["population"])
        entries[key] = Entry(*key, data_through=iso(row["as_of"]),
                             computed_at=iso(row["published_at"]),
                             results=document["results"], series=document["series"],
                             breakdowns=breakdowns.get(key, {}))
    return dict(sorted(entries.items()))


def _document(row: dict[str, Any]) -> dict[str, Any]:
    """A row's document: JSON text in Delta, already parsed from the store's ``jsonb``."""
    document = row["document"]
    return json.loads(document) if isinstance(document, str) else document
