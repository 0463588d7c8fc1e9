"""abstream's own Kafka clients: built from the config, refused properties as one line."""

import pytest

from abstream.config import KafkaSettings
from abstream.errors import ConfigError
from abstream.io.kafka.clients import ClientLog, admin_client


def test_a_property_librdkafka_does_not_know_is_one_config_line():
    kafka = KafkaSettings.model_validate({"client_options": {"sasl.pasword": "Not-Shown-2"}})
    with pytest.raises(ConfigError) as caught:
        admin_client(kafka, ClientLog())
    assert str(caught.value) == 'config: kafka.options/kafka.client_options: No such ' \
        'configuration property: "sasl.pasword"'
