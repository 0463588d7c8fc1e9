"""Where everything lives under the data directory: a local folder or any Hadoop URI
(``s3a://bucket/abstream``, ``hdfs://nn/abstream``, ``abfss://...``)."""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from abstream import topology
from abstream.config import KafkaSettings
from abstream.errors import UsageError

#: How a Kafka topic is written where a place is expected.
KAFKA_SCHEME = "kafka://"


def is_uri(location: str) -> bool:
    scheme = urlparse(location).scheme
    return len(scheme) > 1 and scheme != "file"


@dataclass(frozen=True)
class Layout:
    """Folders and Delta tables of one deployment, all below ``root``."""

    root: str

    @classmethod
    def of(cls, data_dir: str | Path) -> Layout:
        text = str(data_dir)
        if is_uri(text):
            return cls(text.rstrip("/"))
        return cls(str(Path(text.removeprefix("file://")).expanduser().absolute()))

    def _below(self, *parts: str) -> str:
        return posixpath.join(self.root, *parts)

    @property
    def landing(self) -> str:
        return self._below(topology.LANDING)

    def table(self, name: str) -> str:
        """The location of the Delta table ``name`` (one of ``topology``'s tables)."""
        return self._below("tables", name)

    @property
    def events(self) -> str:
        return self.table(topology.EVENTS)

    @property
    def rejected(self) -> str:
        return self.table(topology.REJECTED)

    @property
    def sessions(self) -> str:
        return self.table(topology.SESSIONS)

    @property
    def experiment_metrics(self) -> str:
        return self.table(topology.EXPERIMENT_METRICS)

    @property
    def definition_metrics(self) -> str:
        return self.table(topology.DEFINITION_METRICS)

    @property
    def batch_coverage(self) -> str:
        return self.table(topology.BATCH_COVERAGE)

    @property
    def experiment_results(self) -> str:
        return self.table(topology.EXPERIMENT_RESULTS)

    def place(self, name: str, kafka: KafkaSettings) -> str:
        """Where a component's input or output is: a folder, a table, or ``kafka://TOPIC``."""
        if topology.is_topic(name):
            return KAFKA_SCHEME + topic(name, kafka)
        return self.landing if name == topology.LANDING else self.table(name)

    def checkpoint(self, component: str) -> str:
        return self._below("checkpoints", component)

    def local(self, location: str | None = None) -> Path:
        """A location as a local path, for the tools that work on local files only."""
        location = self.root if location is None else location
        if is_uri(location):
            raise UsageError(f"{location} is not a local folder; this command needs one")
        return Path(location)


def topic(name: str, kafka: KafkaSettings) -> str:
    """The topic a ``kafka.<setting>`` place names."""
    return str(getattr(kafka, name.removeprefix(topology.TOPIC_PREFIX)))
