"""Where everything lives under the data directory: a local folder or any Hadoop URI
(``s3a://bucket/abstream``, ``hdfs://nn/abstream``, ``abfss://...``)."""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from abstream import topology
from abstream.config import Config, KafkaSettings
from abstream.errors import UsageError

#: How a Kafka topic is written where a place is expected.
KAFKA_SCHEME = "kafka://"


def is_uri(location: str) -> bool:
    scheme = urlparse(location).scheme
    return len(scheme) > 1 and scheme != "file"


#: The folder under the data dir that holds each replica's own (``run --replica NAME``).
REPLICAS = "replicas"


@dataclass(frozen=True)
class Layout:
    """Folders and Delta tables of one deployment, all below ``root``; the landing folder
    below ``input_root`` (a replica's is its data dir's, shared with the other replicas)."""

    root: str
    input_root: str

    @classmethod
    def of(cls, data_dir: str | Path, replica: str | None = None) -> Layout:
        """The data dir's layout, or its replica ``replica``'s."""
        text = str(data_dir)
        base = text.rstrip("/") if is_uri(text) else \
            str(Path(text.removeprefix("file://")).expanduser().absolute())
        root = base if replica is None else posixpath.join(base, REPLICAS, replica)
        return cls(root, base)

    @classmethod
    def of_config(cls, config: Config) -> Layout:
        """The layout of ``config``'s data dir and replica."""
        return cls.of(config.data_dir, config.replica)

    def _below(self, *parts: str) -> str:
        return posixpath.join(self.root, *parts)

    @property
    def landing(self) -> str:
        return posixpath.join(self.input_root, topology.LANDING)

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
