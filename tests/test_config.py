import re
from datetime import timedelta

import pytest

from abstream.config import DELTA_PACKAGE, KAFKA_PACKAGE, load_config
from abstream.errors import ConfigError
from abstream.layout import Layout


def test_defaults_need_no_file_and_no_environment():
    config = load_config(environ={})
    assert config.data_dir == "abstream-data"
    assert config.spark.master == "local[2]"
    assert config.spark.packages == [DELTA_PACKAGE, KAFKA_PACKAGE]
    assert config.source == "files"
    assert config.validate_.mode == "microbatch"
    assert config.sessionize.gap == timedelta(minutes=35)
    assert config.metrics.window == timedelta(minutes=5)
    assert config.metrics.slide is None


def test_yaml_file_then_environment_then_data_dir_argument(tmp_path):
    path = tmp_path / "abstream.yaml"
    path.write_text(
        "data_dir: /from/file\n"
        "spark:\n  master: local[1]\n  conf: {spark.sql.shuffle.partitions: 4}\n"
        "metrics:\n  window: 10 minutes\n  slide: 5 minutes\n"
        "ingest:\n  max_files_per_trigger: 3\n"
    )
    environ = {
        "ABSTREAM__INGEST__MAX_FILES_PER_TRIGGER": "7",
        "ABSTREAM__SPARK__CONF__spark.sql.adaptive.enabled": "true",
        "ABSTREAM__SESSIONIZE__LATENESS": "1 hour",
        "OTHER": "ignored",
    }
    config = load_config(path, environ=environ)
    assert config.data_dir == "/from/file"
    assert config.spark.master == "local[1]"
    assert config.spark.conf == {"spark.sql.shuffle.partitions": "4",
                                 "spark.sql.adaptive.enabled": "true"}
    assert config.metrics.window == timedelta(minutes=10)
    assert config.metrics.slide == timedelta(minutes=5)
    assert config.ingest.max_files_per_trigger == 7
    assert config.sessionize.lateness == timedelta(hours=1)
    assert load_config(path, environ=environ, data_dir="/cli").data_dir == "/cli"


def test_environment_sets_top_level_keys_and_mappings():
    config = load_config(environ={"ABSTREAM__DATA_DIR": "/env",
                                  "ABSTREAM__SPARK__CONF": "{spark.a: 1, spark.b: x}"})
    assert config.data_dir == "/env"
    assert config.spark.conf == {"spark.a": "1", "spark.b": "x"}


@pytest.mark.parametrize(("environ", "message"), [
    ({"ABSTREAM__SESSIONIZE__GAP": "35 parsecs"},
     "sessionize.gap: unknown time unit 'parsecs' in '35 parsecs'"),
    ({"ABSTREAM__INGEST__MAX_FILES_PER_TRIGGER": "-1"},
     "ingest.max_files_per_trigger: Input should be greater than 0 (got -1)"),
    ({"ABSTREAM__METRICS__HLL_LG_K": "30"}, "metrics.hll_lg_k: Input should be less than"),
    ({"ABSTREAM__INGEST__TYPO": "1"}, "ingest.typo: unknown setting"),
    ({"ABSTREAM__SPARK__LOG_LEVEL": "LOUD"}, "spark.log_level: Input should be"),
    ({"ABSTREAM__METRICS__SLIDE": "3 minutes"},
     "metrics: slide must be positive and divide the window length"),
])
def test_a_wrong_value_is_one_line_naming_the_key_and_where_it_came_from(environ, message):
    with pytest.raises(ConfigError) as caught:
        load_config(environ=environ)
    text = str(caught.value)
    assert message in text
    assert "\n" not in text
    if "SLIDE" not in next(iter(environ)):
        assert f"[from ${next(iter(environ))}]" in text


def test_file_errors_name_the_file(tmp_path):
    missing = tmp_path / "missing.yaml"
    with pytest.raises(ConfigError, match=r"cannot read config file .*missing\.yaml"):
        load_config(missing, environ={})
    broken = tmp_path / "broken.yaml"
    broken.write_text("spark: [unclosed\n")
    with pytest.raises(ConfigError, match=r"broken.yaml line \d+ is not valid YAML"):
        load_config(broken, environ={})
    listed = tmp_path / "list.yaml"
    listed.write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="must hold a mapping"):
        load_config(listed, environ={})
    typo = tmp_path / "typo.yaml"
    typo.write_text("sessionize:\n  gap: soon\n")
    with pytest.raises(ConfigError, match=r"sessionize.gap: .* \[in .*typo.yaml\]"):
        load_config(typo, environ={})


def test_data_dir_may_be_a_hadoop_uri():
    config = load_config(environ={}, data_dir="s3a://bucket/abstream/")
    layout = Layout.of_config(config)
    assert layout.events == "s3a://bucket/abstream/tables/events"
    assert layout.checkpoint("ingest") == "s3a://bucket/abstream/checkpoints/ingest"
    assert Layout.of("relative").root.startswith("/")


def test_the_validation_stage_is_configured_under_its_own_name():
    config = load_config(environ={"ABSTREAM__SOURCE": "kafka", "ABSTREAM__VALIDATE__MODE": "async",
                                  "ABSTREAM__VALIDATE__ASYNC_CHECKPOINT_INTERVAL": "2 seconds"})
    assert (config.source, config.validate_.mode) == ("kafka", "async")
    assert config.validate_.async_checkpoint_interval == timedelta(seconds=2)
    with pytest.raises(ConfigError, match=r"validate.mode: .*'realtime'.*\(got 'fast'\)"):
        load_config(environ={"ABSTREAM__VALIDATE__MODE": "fast"})
    with pytest.raises(ConfigError, match="at least 5 seconds"):
        load_config(environ={"ABSTREAM__VALIDATE__REALTIME_CHECKPOINT_INTERVAL": "1 second"})


SECRET = "pa$$-0x1F: {hunter2"


def test_kafka_properties_reach_each_engine_under_its_own_names(tmp_path):
    path = tmp_path / "abstream.yaml"
    path.write_text(
        "kafka:\n"
        "  bootstrap_servers: broker:9093\n"
        "  options: {security.protocol: SASL_SSL, sasl.mechanism: PLAIN}\n"
        "  spark_options:\n"
        "    ssl.truststore.location: /etc/kafka/truststore.jks\n"
        "    sasl.jaas.config: org.apache.kafka.common.security.plain.PlainLoginModule"
        " required username=\"abstream\" password=\"${KAFKA_PASSWORD}\";\n"
        "  client_options: {sasl.username: abstream, sasl.password: '${KAFKA_PASSWORD}',"
        " ssl.ca.location: /etc/kafka/ca.pem, note: '$${NOT_A_REFERENCE}'}\n")
    kafka = load_config(path, environ={"KAFKA_PASSWORD": SECRET}).kafka
    assert kafka.spark_kafka_options() == {
        "kafka.bootstrap.servers": "broker:9093",
        "kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "PLAIN",
        "kafka.ssl.truststore.location": "/etc/kafka/truststore.jks",
        "kafka.sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule "
                                  f"required username=\"abstream\" password=\"{SECRET}\";"}
    assert kafka.client_properties() == {
        "bootstrap.servers": "broker:9093",
        "security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
        "sasl.username": "abstream", "sasl.password": SECRET,
        "ssl.ca.location": "/etc/kafka/ca.pem", "note": "${NOT_A_REFERENCE}"}
    assert SECRET not in repr(kafka) and SECRET not in str(kafka.model_dump())


def test_a_kafka_property_from_the_environment_is_taken_as_it_is():
    kafka = load_config(environ={
        "ABSTREAM__KAFKA__OPTIONS__SECURITY_PROTOCOL": "SASL_PLAINTEXT",
        "ABSTREAM__KAFKA__CLIENT_OPTIONS__SASL_PASSWORD": SECRET,
        "ABSTREAM__KAFKA__SPARK_OPTIONS": "{ssl.truststore.type: PKCS12}"}).kafka
    assert kafka.client_properties()["security.protocol"] == "SASL_PLAINTEXT"
    assert kafka.client_properties()["sasl.password"] == SECRET
    assert kafka.spark_kafka_options()["kafka.ssl.truststore.type"] == "PKCS12"


def test_a_credential_from_the_environment_is_taken_as_it_is():
    config = load_config(environ={"ABSTREAM__SPARK__CONF__spark.ssl.keyPassword": f"[{SECRET}",
                                  "ABSTREAM__SERVING__POSTGRES__PASSWORD": "0x1F",
                                  "ABSTREAM__SERVING__STORE": "postgres"})
    assert config.spark.conf["spark.ssl.keyPassword"] == f"[{SECRET}"
    assert config.serving.postgres.password.get_secret_value() == "0x1F"
    assert "0x1F" not in repr(config.serving)


@pytest.mark.parametrize(("environ", "file", "message"), [
    ({}, "kafka: {client_options: {sasl.password: '${KAFKA_PASSWORD}'}}",
     r"^config: kafka.client_options.sasl.password: environment variable KAFKA_PASSWORD is "
     r"not set \[in .*abstream.yaml\]$"),
    ({"ABSTREAM__KAFKA__CLIENT_OPTIONS": "hunter2"}, "",
     r"^config: kafka.client_options: Input should be a valid dictionary "
     r"\[from \$ABSTREAM__KAFKA__CLIENT_OPTIONS\]$"),
    ({"ABSTREAM__KAFKA__SPARK_OPTIONS": "{sasl.jaas.config: " + SECRET}, "",
     r"^\$ABSTREAM__KAFKA__SPARK_OPTIONS: value is not valid YAML$"),
    ({"ABSTREAM__SERVING__POSTGRES__DSN": "postgresql://abstream:hunter2@db/abstream"}, "",
     r"^config: serving.postgres.dsn: give the password in serving.postgres.password from an "
     r"environment variable, not in the dsn \[from \$ABSTREAM__SERVING__POSTGRES__DSN\]$"),
    ({"ABSTREAM__SERVING__POSTGRES__DSN": f"host=db password={SECRET[:8]} ="}, "",
     r"^config: serving.postgres.dsn: not a libpq connection string or postgresql:// URI "
     r"\[from \$ABSTREAM__SERVING__POSTGRES__DSN\]$"),
    ({}, "kafka: {spark_options: {kafka.sasl.jaas.config: x}}",
     r"^config: kafka.spark_options: kafka.sasl.jaas.config: give the client property "
     r"without 'kafka.' \[in .*\]$"),
    ({}, "kafka: {options: {bootstrap.servers: x}}",
     r"^config: kafka.options: set the brokers in kafka.bootstrap_servers \[in .*\]$"),
])
def test_a_config_error_names_the_key_and_never_shows_a_credential(tmp_path, environ, file,
                                                                     message):
    path = tmp_path / "abstream.yaml"
    path.write_text(file)
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ=environ)
    assert re.match(message, str(caught.value)), str(caught.value)
    assert SECRET not in str(caught.value) and "hunter2" not in str(caught.value)


def test_the_default_input_mapping_is_the_beacon():
    events = load_config(environ={}).events
    assert events.paths() == ["event_id", "event_ts", "session_id", "visitor_id", "type",
                              "experiments", "page", "device", "country", "revenue", "units",
                              "page_load_ms"]
    assert events.require == {"order": ["revenue", "units"]}


@pytest.mark.parametrize(("events", "message"), [
    ("{fields: {visitor_id: 'user..id'}}",
     "events.fields.visitor_id: 'user..id' is not a path: keys joined by dots, without spaces"),
    ("{fields: {visitor_id: user, session_id: user.session}}",
     "events: 'user' holds a value and 'user.session' is inside it: a path cannot be both"),
    ("{properties: {amount: {path: a, type: double}}}",
     "events: require.order: 'revenue' is not one of the properties (amount)"),
    ("{properties: {Amount: {path: a}}, require: {}}",
     "events: properties: 'Amount' cannot name a bronze column"),
    ("{properties: {visitor_id: {path: a}}, require: {}}",
     "events: properties: 'visitor_id' cannot name a bronze column"),
    ("{properties: {device: {path: d, min: 0}}, require: {}}",
     "events.properties.device: min and max bound numbers, not a string"),
    ("{properties: {items: {path: i, type: long, types: [checkout]}}, require: {}}",
     "events: properties.items.types: 'checkout' is not one of the event types"),
    ("{require: {checkout: [revenue]}}",
     "events: require: 'checkout' is not one of the event types"),
    ("{timestamp: unix}", "events.timestamp: Input should be 'iso8601', 'epoch_millis' or "
                          "'epoch_seconds'"),
])
def test_a_mapping_that_cannot_work_is_one_line_naming_the_key(tmp_path, events, message):
    path = tmp_path / "abstream.yaml"
    path.write_text(f"events: {events}\n")
    with pytest.raises(ConfigError) as error:
        load_config(path, environ={})
    assert str(error.value).startswith(f"config: {message}")
    assert "\n" not in str(error.value)
