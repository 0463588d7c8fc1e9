"""Kafka over SASL_PLAINTEXT (PLAIN) on the test broker's second listener: the settings
reach Spark's Kafka source and sink and abstream's own clients, and the password shows in
no log line, message or output."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
import time
from dataclasses import replace

import pytest

from abstream.config import KafkaSettings
from abstream.errors import AbstreamError
from abstream.generator.write import GeneratorSettings, generate_to_kafka
from abstream.io.kafka.broker import PLAIN_LOGIN_MODULE, LocalBroker
from abstream.io.kafka.topics import ensure_topics
from abstream.lag.measure import LagMonitor, MonitoredSource
from abstream.speed import COMPONENTS, Context
from abstream.speed.runner import run_once
from tests.helpers import reconfigure
from tests.io.kafka.kafka_helpers import SASL_PASSWORD, SASL_USER, kafka_context, read_topic
from tests.servers import free_port, is_loopback, listening_addresses


def sasl_settings(kafka: KafkaSettings, broker: LocalBroker, *, password: str = SASL_PASSWORD,
                  spark_password: str | None = None) -> KafkaSettings:
    """``kafka`` on the broker's SASL listener, each engine with its own property names."""
    jaas = f'{PLAIN_LOGIN_MODULE} required username="{SASL_USER}" ' \
        f'password="{spark_password or password}";'
    return KafkaSettings.model_validate({
        **kafka.model_dump(exclude={"options", "spark_options", "client_options"}),
        "bootstrap_servers": broker.sasl_bootstrap_servers,
        "options": {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"},
        "spark_options": {"sasl.jaas.config": jaas},
        "client_options": {"sasl.username": SASL_USER, "sasl.password": password}})


def sasl_context(ctx: Context, broker: LocalBroker, name: str, **passwords: str) -> Context:
    ctx = kafka_context(ctx, broker, name)
    kafka = sasl_settings(ctx.config.kafka, broker, **passwords)
    return replace(ctx, config=ctx.config.model_copy(update={"kafka": kafka}))


def test_validate_generator_and_lag_monitor_work_over_sasl_and_log_no_password(
        ctx, kafka_broker, caplog):
    caplog.set_level(logging.DEBUG, logger="abstream")
    ctx = sasl_context(ctx, kafka_broker, "sasl-validate")
    kafka = ctx.config.kafka
    ensure_topics(kafka, [kafka.topic], 1)
    generate_to_kafka(GeneratorSettings(events=300, seed=3, malformed_rate=0.0,
                                        duplicate_rate=0.0), kafka, kafka.topic)
    run_once(ctx, [COMPONENTS["validate"]])

    assert len(read_topic(kafka_broker.bootstrap_servers, kafka.valid_topic, 300)) == 300
    monitor = LagMonitor([MonitoredSource("validate", ctx.layout.checkpoint("validate"),
                                          f"kafka://{kafka.topic}")], kafka=kafka)
    try:
        [row] = monitor.rows()
    finally:
        monitor.close()
    assert (row.status, row.offsets_behind) == ("caught_up", 0)
    assert any(r.levelno == logging.DEBUG for r in caplog.records)
    assert SASL_PASSWORD not in caplog.text


def test_a_wrong_password_is_one_line_without_the_password(ctx, kafka_broker, caplog):
    caplog.set_level(logging.DEBUG, logger="abstream")
    wrong = "Wrong-Passw0rd"
    clients = sasl_context(ctx, kafka_broker, "sasl-wrong", password=wrong).config.kafka
    began = time.monotonic()
    with pytest.raises(AbstreamError) as caught:
        ensure_topics(clients, [clients.topic], 1)
    assert time.monotonic() - began < 5, "a refused password fails at once"
    assert re.fullmatch(rf"Kafka at {clients.bootstrap_servers} does not answer: .*SASL "
                        r"authentication error: Authentication failed: Invalid username or "
                        r"password.*", str(caught.value))

    ctx = reconfigure(sasl_context(ctx, kafka_broker, "sasl-wrong", spark_password=wrong),
                      "run", max_restarts=0)
    with pytest.raises(AbstreamError) as caught:
        run_once(ctx, [COMPONENTS["validate"]])
    assert re.fullmatch(r"validate failed: .*SaslAuthenticationException: Authentication "
                        r"failed: Invalid username or password.*", str(caught.value))
    assert wrong not in str(caught.value) and SASL_PASSWORD not in str(caught.value)
    assert "SaslAuthenticationException" in caplog.text, "the whole failure, at DEBUG"
    assert wrong not in caplog.text and SASL_PASSWORD not in caplog.text


def _abstream(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "abstream", *args], capture_output=True,
                          text=True, timeout=300, env={**os.environ, **env}, check=False)


def _sasl_config_file(path, broker: LocalBroker) -> str:
    """A config file that names the password only as ``${KAFKA_PASSWORD}``."""
    path.write_text(
        "source: kafka\n"
        f"kafka:\n  bootstrap_servers: {broker.sasl_bootstrap_servers}\n"
        "  topic: sasl-cli\n"
        "  options: {security.protocol: SASL_PLAINTEXT, sasl.mechanism: PLAIN}\n"
        f"  spark_options: {{sasl.jaas.config: '{PLAIN_LOGIN_MODULE} required "
        f"username=\"{SASL_USER}\" password=\"${{KAFKA_PASSWORD}}\";'}}\n"
        f"  client_options: {{sasl.username: {SASL_USER}, sasl.password: '${{KAFKA_PASSWORD}}'}}\n")
    return str(path)


def test_commands_over_sasl_print_and_log_no_password(kafka_broker, tmp_path):
    config = _sasl_config_file(tmp_path / "abstream.yaml", kafka_broker)
    common = ["--config", config, "--data-dir", str(tmp_path / "data")]
    env = {"KAFKA_PASSWORD": SASL_PASSWORD}
    generated = _abstream(["generate", "--to", "kafka", "--events", "50", "--json", "-v",
                           *common], env)
    assert generated.returncode == 0, generated.stderr
    assert json.loads(generated.stdout)["records"] == 50

    lag = _abstream(["lag", "--json", "-v", *common], env)
    assert lag.returncode == 0, lag.stderr
    row = next(r for r in json.loads(lag.stdout) if r["source"] == "kafka://sasl-cli")
    assert (row["status"], row["offsets_behind"]) == ("never_run", 50)

    refused = _abstream(["lag", "--json", "-v", *common], {"KAFKA_PASSWORD": "Wrong-Passw0rd"})
    row = next(r for r in json.loads(refused.stdout) if r["source"] == "kafka://sasl-cli")
    assert row["status"] == "error"
    assert "Authentication failed: Invalid username or password" in row["detail"]
    assert "SASL authentication error" in refused.stderr, "the client's log, at DEBUG"
    for done in (generated, lag, refused):
        assert SASL_PASSWORD not in done.stdout + done.stderr
        assert "Wrong-Passw0rd" not in done.stdout + done.stderr


@pytest.mark.slow
def test_a_run_listens_on_loopback_only_and_a_refused_password_is_one_line(kafka_broker,
                                                                            tmp_path):
    """``abstream run`` with its exporter and a Spark driver whose web UI is on: every port
    the process and its JVM open is on loopback; Spark's Kafka client is refused, restarted
    once, and the run ends with one line, no Java stack trace and no password."""
    config = _sasl_config_file(tmp_path / "abstream.yaml", kafka_broker)
    ui, exporter = free_port(), free_port()
    wrong = "Wrong-Passw0rd"
    env = {**os.environ, "KAFKA_PASSWORD": SASL_PASSWORD,
           "ABSTREAM__KAFKA__SPARK_OPTIONS__SASL_JAAS_CONFIG":
               f'{PLAIN_LOGIN_MODULE} required username="{SASL_USER}" password="{wrong}";',
           "ABSTREAM__SPARK__CONF": f"{{spark.ui.enabled: true, spark.ui.port: {ui}}}",
           "ABSTREAM__MONITOR__EXPORTER__PORT": str(exporter),
           "ABSTREAM__RUN__MAX_RESTARTS": "1", "ABSTREAM__RUN__RESTART_BACKOFF": "100ms"}
    env.pop("SPARK_LOCAL_IP", None)
    run = subprocess.Popen([sys.executable, "-m", "abstream", "run", "validate", "--config",
                            config, "--data-dir", str(tmp_path / "data")], env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen: set = set()
    try:
        while run.poll() is None:
            seen |= listening_addresses(run.pid)
            time.sleep(0.2)
        stdout, stderr = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
    assert {ui, exporter} <= {port for _, port in seen}, seen
    assert all(is_loopback(address) for address, _ in seen), seen
    assert run.returncode == 1
    assert stderr.splitlines()[-1].startswith(
        "abstream: error: validate failed 2 times in a row: ")
    assert "restart 1 of 1" in stderr, "it was restarted once"
    assert "Authentication failed: Invalid username or password" in stderr.splitlines()[-1]
    assert "\tat " not in stderr, "no Java stack trace"
    assert wrong not in stdout + stderr and SASL_PASSWORD not in stdout + stderr
