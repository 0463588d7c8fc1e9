"""`abstream generate --to kafka`: the same beacons as the landing files, as messages."""

import os
import subprocess
import sys
import time
from pathlib import Path

from abstream.config import KafkaSettings
from abstream.generator.write import GeneratorSettings, generate, generate_to_kafka
from tests.helpers import landing_records
from tests.io.kafka.kafka_helpers import read_topic


def _consume(bootstrap: str, topic: str, expected: int) -> list[str]:
    return [m.value().decode() for m in read_topic(bootstrap, topic, expected)]


def test_kafka_gets_the_same_beacons_as_landing_files(kafka_broker, tmp_path):
    settings = GeneratorSettings(events=2_000, seed=5, file_events=500)
    summary = generate_to_kafka(
        settings, KafkaSettings(bootstrap_servers=kafka_broker.bootstrap_servers), "beacons-same")
    generate(settings, tmp_path)
    assert summary.records == 2_000
    messages = _consume(kafka_broker.bootstrap_servers, "beacons-same", 2_000)
    assert messages == landing_records(tmp_path), "same records, same order (one partition)"


def test_generate_to_kafka_from_the_command_line_at_a_rate(kafka_broker, tmp_path):
    env = {**os.environ, "ABSTREAM__KAFKA__BOOTSTRAP_SERVERS": kafka_broker.bootstrap_servers}
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "abstream", "generate", "--to", "kafka", "--topic", "paced",
         "--events", "1500", "--rate", "1000", "--data-dir", str(tmp_path)],
        capture_output=True, text=True, env=env, timeout=120, check=False)
    seconds = time.monotonic() - began
    assert done.returncode == 0, done.stderr
    assert "1,500 records" in done.stdout and "Kafka topic paced" in done.stdout
    assert seconds >= 1.4, "paced to the rate"
    assert len(_consume(kafka_broker.bootstrap_servers, "paced", 1_500)) == 1_500
    assert not Path(tmp_path, "landing").exists()
