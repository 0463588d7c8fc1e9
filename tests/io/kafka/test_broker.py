"""The local Kafka broker: a real KRaft node from Maven Central's JARs."""

import os
import subprocess
import sys
import time

from confluent_kafka import Consumer, Producer

from tests.servers import free_port, is_loopback, listening_addresses


def test_messages_go_through_the_broker_with_their_timestamps(kafka_broker):
    topic = "beacons-roundtrip"
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap_servers})
    sent_at = time.time()
    for i in range(100):
        producer.produce(topic, key=str(i % 4), value=f"event-{i}")
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": kafka_broker.bootstrap_servers,
                         "group.id": "roundtrip", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    received = []
    deadline = time.monotonic() + 60
    while len(received) < 100 and time.monotonic() < deadline:
        message = consumer.poll(1.0)
        if message is not None and not message.error():
            received.append(message)
    consumer.close()
    assert sorted(m.value().decode() for m in received) == sorted(
        f"event-{i}" for i in range(100))
    assert all(abs(m.timestamp()[1] / 1000 - sent_at) < 60 for m in received)


def test_kafka_local_starts_reports_and_stops(tmp_path):
    env = {**os.environ, "ABSTREAM__KAFKA__LOCAL__PORT": str(free_port()),
           "ABSTREAM__KAFKA__LOCAL__CONTROLLER_PORT": str(free_port())}

    def kafka_local(action):
        return subprocess.run([sys.executable, "-m", "abstream", "kafka-local", action,
                               "--data-dir", str(tmp_path)], capture_output=True, text=True,
                              env=env, timeout=180, check=False)

    try:
        started = kafka_local("start")
        assert started.returncode == 0, started.stderr
        assert "running (pid" in started.stdout
        assert "running (pid" in kafka_local("status").stdout
    finally:
        stopped = kafka_local("stop")
    assert stopped.returncode == 0 and "stopped" in stopped.stdout
    status = kafka_local("status")
    assert status.returncode == 1 and "stopped" in status.stdout
    assert (tmp_path / "kafka" / "data" / "meta.properties").exists()


def test_the_broker_listens_on_loopback_only(kafka_broker):
    found = listening_addresses(kafka_broker.pid())
    assert {port for _, port in found} == {kafka_broker.port, kafka_broker.controller_port,
                                           kafka_broker.sasl_port}
    assert all(is_loopback(address) for address, _ in found), found
