"""Kafka over SASL_PLAINTEXT (PLAIN) on the test broker's second listener: the settings
reach Spark's Kafka source and sink and abstream's own clients, and the password shows in
no log line, message or output."""

from __future__ import annotations

import logging
import re
import time
from dataclasses import replace

import pytest

from abstream.components import COMPONENTS, Context
from abstream.config import KafkaSettings
from abstream.errors import AbstreamError
from abstream.generator import GeneratorSettings, generate_to_kafka
from abstream.kafka.broker import PLAIN_LOGIN_MODULE, LocalBroker
from abstream.kafka.topics import ensure_topics
from abstream.lag import LagMonitor, MonitoredSource
from abstream.runner import run_once
from tests.kafka.kafka_helpers import SASL_PASSWORD, SASL_USER, kafka_context, read_topic


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


def test_a_wrong_password_is_one_line_without_the_password(ctx, kafka_broker):
    wrong = "Wrong-Passw0rd"
    clients = sasl_context(ctx, kafka_broker, "sasl-wrong", password=wrong).config.kafka
    began = time.monotonic()
    with pytest.raises(AbstreamError) as caught:
        ensure_topics(clients, [clients.topic], 1)
    assert time.monotonic() - began < 5, "a refused password fails at once"
    assert re.fullmatch(rf"Kafka at {clients.bootstrap_servers} does not answer: .*SASL "
                        r"authentication error: Authentication failed: Invalid username or "
                        r"password.*", str(caught.value))

    ctx = sasl_context(ctx, kafka_broker, "sasl-wrong", spark_password=wrong)
    with pytest.raises(AbstreamError) as caught:
        run_once(ctx, [COMPONENTS["validate"]])
    assert re.fullmatch(r"validate failed: .*SaslAuthenticationException: Authentication "
                        r"failed: Invalid username or password.*", str(caught.value))
    assert wrong not in str(caught.value) and SASL_PASSWORD not in str(caught.value)
