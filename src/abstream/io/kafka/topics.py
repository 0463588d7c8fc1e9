"""Topics of the Kafka path: created when missing, and read for the lag monitor."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from abstream.config import KafkaSettings
from abstream.errors import AbstreamError, StepFailed
from abstream.io.kafka.clients import ClientLog, admin_client, consumer, unreachable

if TYPE_CHECKING:
    from confluent_kafka import Consumer
    from confluent_kafka.admin import AdminClient, ClusterMetadata, PartitionMetadata

log = logging.getLogger(__name__)

TIMEOUT_SECONDS = 10.0
#: How often a metadata request is retried within TIMEOUT_SECONDS (a refused credential
#: fails at once, not after the whole timeout).
ATTEMPT_SECONDS = 1.0


def ensure_topics(kafka: KafkaSettings, names: list[str], partitions: int) -> None:
    """Create the topics that do not exist yet (``partitions`` each, replication 1 on a
    one-broker cluster, else the broker's default); existing topics are left as they are.
    Returns once every topic has its partitions in the cluster's metadata."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import NewTopic

    client_log = ClientLog()
    admin = admin_client(kafka, client_log)
    try:
        metadata = _metadata(admin, kafka, client_log)
    except ConnectionError as exc:
        raise StepFailed("create topics", exc, str(exc)) from exc
    wanted = list(dict.fromkeys(names))
    missing = [name for name in wanted if name not in metadata.topics]
    if missing:
        replication = 1 if len(metadata.brokers) == 1 else -1
        futures = admin.create_topics([NewTopic(name, partitions, replication)
                                       for name in missing])
        for name, future in futures.items():
            try:
                future.result()
                log.info("created Kafka topic %s (%d partitions)", name, partitions)
            except KafkaException as exc:
                error = exc.args[0]
                if error.name() != "TOPIC_ALREADY_EXISTS":
                    raise AbstreamError(
                        f"cannot create Kafka topic {name}: {error.str()}") from None
    # Every topic, not only those created now: a run killed right after creating one may
    # have left it before its partitions reached the brokers' metadata.
    _await_partitions(admin, wanted)


def _metadata(client: AdminClient | Consumer, kafka: KafkaSettings, client_log: ClientLog,
              topic: str | None = None) -> ClusterMetadata:
    """The cluster's metadata (of one topic, or of all), or one line on why there is none."""
    from confluent_kafka import KafkaException

    deadline = time.monotonic() + TIMEOUT_SECONDS
    while True:
        try:
            return client.list_topics(topic, timeout=ATTEMPT_SECONDS)
        except KafkaException as exc:
            client.poll(0)  # serves the client's log
            if client_log.refused_credentials or time.monotonic() > deadline:
                raise ConnectionError(unreachable(kafka, client_log, exc.args[0].str())) \
                    from None


def _await_partitions(admin: AdminClient, names: list[str]) -> None:
    """New topics reach every broker's metadata, and their partitions a leader, a moment
    after creation; a query started before that would see no partitions, or be told the
    broker is not the partition's leader."""
    deadline = time.monotonic() + TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        topics = admin.list_topics(timeout=TIMEOUT_SECONDS).topics
        if all(name in topics and _led(topics[name].partitions) for name in names):
            return
        time.sleep(0.1)
    raise AbstreamError(f"Kafka topics {', '.join(names)} were created but have no partitions "
                        f"with a leader")


def _led(partitions: dict[int, PartitionMetadata]) -> bool:
    """Whether there are partitions and each has a leader."""
    return bool(partitions) and all(p.leader >= 0 and p.error is None
                                    for p in partitions.values())


@dataclass(frozen=True)
class PartitionPosition:
    """One partition: the offset a consumer reads next, the log's end, and the broker
    timestamp (ms) of the record at the next offset (None when caught up)."""

    partition: int
    next_offset: int
    end_offset: int
    next_timestamp_ms: int | None

    @property
    def behind(self) -> int:
        return max(0, self.end_offset - self.next_offset)


class TopicReader:
    """Reads partition ends and single records by offset, without joining a group."""

    def __init__(self, kafka: KafkaSettings) -> None:
        self._kafka, self._log = kafka, ClientLog()
        self._consumer = consumer(kafka, self._log, **{
            "group.id": "abstream-lag-monitor",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
            "fetch.wait.max.ms": 100,
        })

    def partitions(self, topic: str) -> list[int] | None:
        """The topic's partitions, or None when it does not exist (ConnectionError when the
        brokers do not answer)."""
        metadata = _metadata(self._consumer, self._kafka, self._log, topic)
        found = metadata.topics.get(topic)
        if found is None or found.error is not None or not found.partitions:
            return None
        return sorted(found.partitions)

    def positions(self, topic: str,
                  next_offsets: dict[int, int]) -> list[PartitionPosition] | None:
        """Each partition of ``topic`` with the consumer at ``next_offsets`` (the log start
        for partitions it has not read); None when the topic does not exist."""
        from confluent_kafka import TopicPartition

        partitions = self.partitions(topic)
        if partitions is None:
            return None
        result = []
        for partition in partitions:
            low, high = self._consumer.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=TIMEOUT_SECONDS)
            offset = max(next_offsets.get(partition, low), low)
            timestamp = self._timestamp_at(topic, partition, offset) if offset < high else None
            result.append(PartitionPosition(partition, offset, high, timestamp))
        return result

    def _timestamp_at(self, topic: str, partition: int, offset: int) -> int | None:
        from confluent_kafka import TopicPartition

        self._consumer.assign([TopicPartition(topic, partition, offset)])
        try:
            deadline = time.monotonic() + TIMEOUT_SECONDS
            while time.monotonic() < deadline:
                message = self._consumer.poll(0.5)
                if message is None or message.error() is not None:
                    continue
                if message.offset() >= offset:
                    return message.timestamp()[1]
            raise OSError(f"no record at {topic}/{partition}@{offset} within "
                          f"{TIMEOUT_SECONDS:.0f} s")
        finally:
            self._consumer.unassign()

    def close(self) -> None:
        self._consumer.close()
