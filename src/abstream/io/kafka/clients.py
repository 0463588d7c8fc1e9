"""abstream's own Kafka clients (librdkafka, through confluent_kafka): built from
``kafka.bootstrap_servers``, ``kafka.options`` and ``kafka.client_options``, logging into
abstream's log, and failing with one line that says why."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from abstream.config import KafkaSettings
from abstream.errors import ConfigError

if TYPE_CHECKING:
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient

log = logging.getLogger(__name__)

T = TypeVar("T")


#: How librdkafka starts a log line: the thread that logged it.
_THREAD = re.compile(r"^\[thrd:[^\]]*\]: ")


class ClientLog:
    """Takes a client's log lines into abstream's log at DEBUG (a client retries and says
    the same thing many times) and keeps its last failure: librdkafka logs why it cannot
    connect, and only says "transport failure" to the caller. Lines come in when the
    client is polled."""

    def __init__(self) -> None:
        self.failure: str | None = None

    def log(self, level: int, message: str, *args: object) -> None:
        log.debug(message, *args)
        if level >= logging.ERROR and args:
            self.failure = _THREAD.sub("", str(args[-1]))

    @property
    def refused_credentials(self) -> bool:
        """Whether the broker refused the client's credentials or TLS handshake, which
        retrying does not mend."""
        failure = (self.failure or "").lower()
        return "authentication" in failure or "handshake" in failure


def _properties(kafka: KafkaSettings, client_log: ClientLog, **settings: object
                ) -> dict[str, object]:
    return {**kafka.client_properties(), **settings, "logger": client_log}


def _created(make: Callable[[dict[str, object]], T], properties: dict[str, object]) -> T:
    from confluent_kafka import KafkaException

    try:
        return make(properties)
    except KafkaException as exc:
        raise ConfigError(f"config: kafka.options/kafka.client_options: {exc.args[0].str()}") \
            from None


def admin_client(kafka: KafkaSettings, client_log: ClientLog) -> AdminClient:
    from confluent_kafka.admin import AdminClient

    return _created(AdminClient, _properties(kafka, client_log))


def consumer(kafka: KafkaSettings, client_log: ClientLog, **settings: object) -> Consumer:
    from confluent_kafka import Consumer

    return _created(Consumer, _properties(kafka, client_log, **settings))


def producer(kafka: KafkaSettings, client_log: ClientLog, **settings: object) -> Producer:
    from confluent_kafka import Producer

    return _created(Producer, _properties(kafka, client_log, **settings))


def unreachable(kafka: KafkaSettings, client_log: ClientLog, reason: str) -> str:
    """One line on why the brokers do not answer: the client's own failure when it logged
    one, else what the call said."""
    return f"Kafka at {kafka.bootstrap_servers} does not answer: {client_log.failure or reason}"
