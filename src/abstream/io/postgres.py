"""Connections to the PostgreSQL serving store (``serving.store: postgres``), without Spark.

A store that cannot be reached, refuses the login or fails a statement is a ``StoreError``:
one line naming the server (never the password) and PostgreSQL's reason.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from abstream.config import Config, PostgresSettings
from abstream.errors import AbstreamError, first_line

log = logging.getLogger(__name__)

#: The store's tables (``serving.store_schema`` creates them): the serving view's two, what
#: they equal and each write, and the published report with its version.
PROGRESS, WRITES, PUBLISHED, PUBLICATION = (
    "store_progress", "store_writes", "published_results", "publication")
#: The one row of ``store_progress`` and of ``publication``.
SERVING = "serving"



class StoreError(AbstreamError):
    """The serving store cannot be reached, refuses the login, lost the connection or
    failed a statement; ``cause`` is the driver's error."""

    def __init__(self, where: str, cause: BaseException) -> None:
        self.where, self.cause = where, cause
        reason = first_line(cause).removeprefix("connection failed: ")
        super().__init__(f"serving store {where}: {reason}")


@dataclass(frozen=True)
class Store:
    """Where the store is: its server and the schema abstream's tables are in."""

    settings: PostgresSettings

    @property
    def schema(self) -> str:
        return self.settings.db_schema

    @property
    def where(self) -> str:
        """The server and database, as messages name them (no password)."""
        given = conninfo_to_dict(self.settings.dsn)
        host = given.get("host") or "localhost"
        port = given.get("port") or "5432"
        return f"{given.get('user', '')}{'@' if given.get('user') else ''}{host}:{port}" \
               f"/{given.get('dbname', '')}"

    def table(self, name: str) -> sql.Composed:
        return sql.SQL("{}.{}").format(sql.Identifier(self.schema), sql.Identifier(name))

    def open(self) -> psycopg.Connection:
        """A new connection; ``StoreError`` when the server cannot be reached or refuses
        the login."""
        password = self.settings.password
        try:
            return psycopg.connect(
                self.settings.dsn, application_name="abstream",
                connect_timeout=max(1, round(self.settings.connect_timeout.total_seconds())),
                options="-c TimeZone=UTC",
                **({"password": password.get_secret_value()} if password else {}))
        except psycopg.Error as exc:
            raise StoreError(self.where, exc) from None

    @contextmanager
    def connect(self) -> Iterator[psycopg.Connection]:
        """A connection, committed and closed on leaving; ``StoreError`` when the server
        cannot be reached, refuses the login, or fails meanwhile."""
        connection = self.open()
        try:
            with connection:
                yield connection
        except psycopg.Error as exc:
            raise StoreError(self.where, exc) from None


class KeptConnection:
    """One autocommit connection to ``store``, opened at first use and again after the
    store failed (a long-lived reader's). Not shared between threads."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._connection: psycopg.Connection | None = None

    @contextmanager
    def use(self) -> Iterator[psycopg.Connection]:
        """The connection; ``StoreError`` when the store cannot be reached or fails a
        statement meanwhile, after which the next use opens a new one."""
        if self._connection is None or self._connection.closed:
            self._connection = self.store.open()
            self._connection.autocommit = True
        try:
            yield self._connection
        except psycopg.Error as exc:
            self.close()
            raise StoreError(self.store.where, exc) from None

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
        self._connection = None


def configured_store(config: Config) -> Store | None:
    """The PostgreSQL serving store, when ``serving.store`` is ``postgres``."""
    return Store(config.serving.postgres) if config.serving.store == "postgres" else None
