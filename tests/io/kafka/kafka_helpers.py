"""Kafka test helpers: a context on the Kafka path with topics of the test's own, a reader
of whole topics."""

from __future__ import annotations

import hashlib
import time
from dataclasses import replace

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

from abstream.io.kafka.broker import LocalBroker
from abstream.speed import Context

#: The user of the test broker's SASL_PLAINTEXT listener.
SASL_USER = "abstream"
SASL_PASSWORD = "Kafka-Test-Passw0rd"


def kafka_context(ctx: Context, broker: LocalBroker, name: str, **validate: object) -> Context:
    """``ctx`` with ``source: kafka`` on ``broker`` and topics named after ``name``."""
    base = "t" + hashlib.sha1(name.encode(), usedforsecurity=False).hexdigest()[:10]
    kafka = ctx.config.kafka.model_copy(update={
        "bootstrap_servers": broker.bootstrap_servers, "topic": base,
        "valid_topic": f"{base}.valid", "rejected_topic": f"{base}.rejected"})
    settings = ctx.config.validate_.model_copy(update=validate)
    return replace(ctx, config=ctx.config.model_copy(
        update={"source": "kafka", "kafka": kafka, "validate_": settings}))


def produce_lines(bootstrap_servers: str, topic: str, lines: list[str]) -> None:
    """Each line as one record, delivered before returning."""
    produce_values(bootstrap_servers, topic, [line.encode() for line in lines])


def produce_values(bootstrap_servers: str, topic: str, values: list[bytes | None]) -> None:
    """Each value as one record, delivered before returning."""
    producer = Producer({"bootstrap.servers": bootstrap_servers, "linger.ms": 5})
    for value in values:
        while True:
            try:
                producer.produce(topic, value=value)
                break
            except BufferError:  # the local queue is full: let it drain
                producer.poll(0.1)
    assert producer.flush(60) == 0


def read_topic(bootstrap_servers: str, topic: str, expected: int = 0,
               timeout: float = 60.0) -> list[Message]:
    """Every record of ``topic``, from its start to its end as it is once at least
    ``expected`` records are there (or ``timeout`` has passed)."""
    consumer = Consumer({"bootstrap.servers": bootstrap_servers, "group.id": "read-topic",
                         "enable.auto.commit": False})
    deadline = time.monotonic() + timeout
    try:
        ends = _ends(consumer, topic)
        while sum(ends.values()) < expected and time.monotonic() < deadline:
            time.sleep(0.2)
            ends = _ends(consumer, topic)
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in ends])
        messages: list[Message] = []
        while len(messages) < sum(ends.values()) and time.monotonic() < deadline + 30:
            message = consumer.poll(0.5)
            if message is not None and not message.error() \
                    and message.offset() < ends[message.partition()]:
                messages.append(message)
        return messages
    finally:
        consumer.close()


#: Answers of a broker that has not yet taken up a new topic's partitions.
NOT_YET = {KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
           KafkaError.UNKNOWN_TOPIC_OR_PART}


def _ends(consumer: Consumer, topic: str) -> dict[int, int]:
    """Each partition's end offset; none while the topic or its leaders are not there yet."""
    found = consumer.list_topics(topic, timeout=10).topics.get(topic)
    if found is None or found.error is not None:
        return {}
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in found.partitions}
    except KafkaException as exc:
        if exc.args[0].code() in NOT_YET:
            return {}
        raise


def header(message: Message, name: str) -> str | None:
    return next((value.decode() for key, value in message.headers() or [] if key == name),
                None)
