"""One typed configuration: defaults, then an optional YAML file, then ABSTREAM__* variables.

Environment variables name a key path with double underscores: ``ABSTREAM__SPARK__MASTER``
sets ``spark.master``; ``ABSTREAM__DATA_DIR`` sets ``data_dir``. Values are read as YAML, so
``8`` is a number, ``true`` a boolean and ``{a: 1}`` a mapping. A value in the file may
reference an environment variable as ``${NAME}`` (``$${`` for a literal ``${``), so the file
can be shared without the secrets it uses.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from abstream.durations import parse_duration
from abstream.errors import ConfigError
from abstream.metrics.catalog import default_definitions
from abstream.metrics.definitions import Catalog, Definition, Dimension, Measure

ENV_PREFIX = "ABSTREAM__"
#: A replica's name (``--replica``): it names folders and Kafka topics.
REPLICA_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,31}")
DELTA_PACKAGE = "io.delta:delta-spark_4.2_2.13:4.4.0"
KAFKA_PACKAGE = "org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0"


def _duration(value: object) -> timedelta:
    if isinstance(value, timedelta):
        return value
    if isinstance(value, str):
        return parse_duration(value)
    raise ValueError(f"expected a duration like '35 minutes', got {value!r}")


Duration = Annotated[timedelta, BeforeValidator(_duration)]


def _spark_conf_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return str(value)
    raise ValueError(f"Spark settings are scalars, got {value!r}")


SparkConfValue = Annotated[str, BeforeValidator(_spark_conf_value)]


def _kafka_option_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return str(value)
    raise ValueError("Kafka client properties are scalars")


#: A Kafka client property's value: any of them may be a credential, so none is shown.
KafkaOptionValue = Annotated[SecretStr, BeforeValidator(_kafka_option_value)]

#: The maps of Kafka client properties under ``kafka``.
KAFKA_OPTION_MAPS = ("options", "spark_options", "client_options")

#: Setting names whose values are (or may hold) credentials: never shown in messages.
SECRET_NAME = re.compile(r"password|secret|jaas|token|key|dsn", re.IGNORECASE)


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


def _default_jars_cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "abstream" / "jars"


class SparkSettings(_Section):
    """How the SparkSession is built (ignored where spark-submit already built it)."""

    master: str = "local[2]"
    app_name: str = "abstream"
    #: Where a local-mode driver listens (its RPC, block manager and UI ports).
    bind_address: str = Field(default="127.0.0.1", min_length=1)
    conf: dict[str, SparkConfValue] = Field(default_factory=dict)
    packages: list[str] = Field(default_factory=lambda: [DELTA_PACKAGE, KAFKA_PACKAGE])
    manage_jars: bool = True
    jars_cache: Path = Field(default_factory=_default_jars_cache)
    log_level: Literal["ERROR", "WARN", "INFO", "DEBUG"] = "ERROR"


#: A place in an input JSON object: keys joined by dots (``user.anonymous_id``).
_PATH = re.compile(r"^[^.\s]+(\.[^.\s]+)*$")
#: A name abstream gives a column of bronze.
_COLUMN = re.compile(r"^[a-z_][a-z0-9_]*$")
#: Bronze columns that are not properties: the event's own, then where and when it was read.
CORE_COLUMNS = ("event_id", "event_ts", "session_id", "visitor_id", "type", "experiments")
LINEAGE_COLUMNS = ("source_file", "arrived_at", "ingested_at", "event_date")
#: Columns that stand beside an event's properties where visits are made.
SESSION_COLUMNS = ("visit_start", "counted_in", "late", "id", "variant", "qualified",
                   "exposed_at")
#: The beacon's event types (the default ``events.types``).
BEACON_TYPES = ("pageview", "add_to_cart", "order", "error")
PropertyType = Literal["string", "long", "double", "decimal", "boolean"]


def _path(value: str) -> str:
    if not _PATH.match(value):
        raise ValueError(f"{value!r} is not a path: keys joined by dots, without spaces")
    return value


JsonPath = Annotated[str, BeforeValidator(_path)]


class EventFields(_Section):
    """Where the fields every event has are in an input object."""

    event_id: JsonPath = "event_id"
    event_ts: JsonPath = "event_ts"
    #: None: a visitor's events form one stream, split into visits by the gap.
    session_id: JsonPath | None = "session_id"
    visitor_id: JsonPath = "visitor_id"
    type: JsonPath = "type"


class ExperimentsMapping(_Section):
    """Where an event lists its experiments: a list of objects (``shape: list``, each with
    the keys named here), or one object ``{experiment_id: variant}`` (``shape: map``, where
    every listed experiment counts as exposed)."""

    path: JsonPath = "experiments"
    shape: Literal["list", "map"] = "list"
    id: str = Field(default="id", min_length=1)
    variant: str = Field(default="variant", min_length=1)
    #: The key of the exposure flag in a list's objects; None: no flag (never exposed).
    qualified: str | None = Field(default="qualified", min_length=1)


class PropertySpec(_Section):
    """A property of the input kept in bronze, in the column of its name."""

    path: JsonPath
    type: PropertyType = "string"
    #: Bounds of a number (inclusive): a value outside them is refused.
    min: float | None = None
    max: float | None = None
    #: The event types that keep the property (NULL in the others); None: every type.
    types: list[str] | None = None

    @model_validator(mode="after")
    def _bounds_of_numbers(self) -> PropertySpec:
        if (self.min is not None or self.max is not None) and \
                self.type not in ("long", "double", "decimal"):
            raise ValueError(f"min and max bound numbers, not a {self.type}")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError("min must not be above max")
        return self


def _beacon_properties() -> dict[str, PropertySpec]:
    return {
        "page": PropertySpec(path="page"),
        "device": PropertySpec(path="device"),
        "country": PropertySpec(path="country"),
        "revenue": PropertySpec(path="revenue", type="decimal", min=0, max=1e15,
                                types=["order"]),
        "units": PropertySpec(path="units", type="long", min=0, types=["order"]),
        "page_load_ms": PropertySpec(path="page_load_ms", type="long", min=0,
                                     types=["pageview"]),
    }


class EventsSettings(_Section):
    """The input mapping: where abstream finds what it needs in each input JSON object.
    The defaults describe abstream's beacon."""

    fields: EventFields = Field(default_factory=EventFields)
    timestamp: Literal["iso8601", "epoch_millis", "epoch_seconds"] = "iso8601"
    #: The event types accepted (others are refused); None: any.
    types: list[str] | None = Field(default_factory=lambda: list(BEACON_TYPES))
    experiments: ExperimentsMapping = Field(default_factory=ExperimentsMapping)
    properties: dict[str, PropertySpec] = Field(default_factory=_beacon_properties)
    #: Per event type, the properties an event of that type must have.
    require: dict[str, list[str]] = Field(
        default_factory=lambda: {"order": ["revenue", "units"]})

    @model_validator(mode="after")
    def _consistent(self) -> EventsSettings:
        for name in self.properties:
            if not _COLUMN.match(name) or name in CORE_COLUMNS + LINEAGE_COLUMNS \
                    + SESSION_COLUMNS:
                raise ValueError(
                    f"properties: {name!r} cannot name a bronze column: use lower-case "
                    f"letters, digits and _, and none of "
                    f"{', '.join(CORE_COLUMNS + LINEAGE_COLUMNS + SESSION_COLUMNS)}")
        known = set(self.types) if self.types is not None else None
        for kind, names in self.require.items():
            if known is not None and kind not in known:
                raise ValueError(f"require: {kind!r} is not one of the event types "
                                 f"({', '.join(self.types or ())})")
            for name in names:
                if name not in self.properties:
                    raise ValueError(f"require.{kind}: {name!r} is not one of the properties "
                                     f"({', '.join(self.properties) or 'none'})")
        for name, spec in self.properties.items():
            unknown = [t for t in spec.types or () if known is not None and t not in known]
            if unknown:
                raise ValueError(f"properties.{name}.types: {unknown[0]!r} is not one of the "
                                 f"event types ({', '.join(self.types or ())})")
        paths = self.paths()
        for path in paths:
            for other in paths:
                if other.startswith(f"{path}."):
                    raise ValueError(f"{path!r} holds a value and {other!r} is inside it: "
                                     "a path cannot be both")
        return self

    def paths(self) -> list[str]:
        """Every path the mapping reads."""
        fields = [p for p in self.fields.model_dump().values() if p is not None]
        return [*fields, self.experiments.path, *(p.path for p in self.properties.values())]


_NUMBERS = ("long", "double", "decimal")


def catalog_problems(catalog: Catalog, events: EventsSettings) -> list[str]:
    """One line per thing a catalog reads that the input mapping does not have: event
    types, properties, numbers."""
    found = []
    for definition in catalog.definitions:
        sides = ("numerator", "denominator") if definition.kind == "ratio" else ("",)
        for side, measure in zip(sides, definition.measures(), strict=True):
            where = f"definition {definition.name!r}: " + (f"{side}." if side else "")
            found += _measure_problems(where, measure, events)
    for dimension in catalog.dimensions:
        if dimension.property not in events.properties:
            found.append(f"dimension {dimension.name!r}: property: {dimension.property!r} is "
                         f"not one of events.properties ({', '.join(events.properties)})")
    return found


def _measure_problems(where: str, measure: Measure, events: EventsSettings) -> list[str]:
    if measure.events is None:
        return []
    found = []
    known = events.properties
    for kind in measure.events.type or ():
        if events.types is not None and kind not in events.types:
            found.append(f"{where}events.type: {kind!r} is not one of the event types "
                         f"({', '.join(events.types)})")
    for name, condition in measure.events.where.items():
        if name not in known:
            found.append(f"{where}events.where: {name!r} is not one of events.properties "
                         f"({', '.join(known) or 'none'})")
        elif condition.compared() and known[name].type not in _NUMBERS:
            found.append(f"{where}events.where.{name}: lt, le, gt and ge compare numbers, "
                         f"and {name} is a {known[name].type}")
    if measure.value is not None:
        if measure.value not in known:
            found.append(f"{where}value: {measure.value!r} is not one of events.properties "
                         f"({', '.join(known) or 'none'})")
        elif known[measure.value].type not in _NUMBERS:
            found.append(f"{where}value: {measure.value} is a {known[measure.value].type}, "
                         "not a number")
    return found


class IngestSettings(_Section):
    """landing (JSON lines) -> bronze ``events`` + quarantine ``rejected``."""

    trigger: Duration = timedelta(seconds=5)
    max_files_per_trigger: int = Field(default=50, gt=0)
    max_record_bytes: int = Field(default=65_536, gt=0)
    future_tolerance: Duration = timedelta(days=1)
    dedupe_window: Duration = timedelta(minutes=2)


class SessionizeSettings(_Section):
    """bronze -> silver ``sessions`` (closed visits) + gold ``experiment_metrics``."""

    trigger: Duration = timedelta(seconds=5)
    gap: Duration = timedelta(minutes=35)
    lateness: Duration = timedelta(minutes=15)
    #: Bronze files a micro-batch: each up to one ingest micro-batch's events of a day.
    max_files_per_trigger: int = Field(default=2, gt=0)
    #: Snapshots whose events the open visits may stay in before a micro-batch copies them
    #: into its own: enough for the micro-batches of a visit's life in a live stream (gap
    #: + lateness, 50 minutes, is 300-600 micro-batches of 5-10 s), so that few are copied.
    state_generations: int = Field(default=512, gt=0)


class MetricsSettings(_Section):
    """Gold ``experiment_metrics``: its event-time windows and visitor sketches."""

    window: Duration = timedelta(minutes=5)
    slide: Duration | None = None
    hll_lg_k: int = Field(default=12, ge=4, le=21)
    #: The metric catalog (docs/metrics.md); the default is the package's
    #: ``resources/metrics.yaml``.
    definitions: list[Definition] = Field(default_factory=default_definitions, min_length=1)
    #: What results are broken down by (``abstream report --by``): none unless declared.
    dimensions: list[Dimension] = Field(default_factory=list)

    @property
    def catalog(self) -> Catalog:
        return Catalog(definitions=self.definitions, dimensions=self.dimensions)

    @model_validator(mode="after")
    def _slide_fits_window(self) -> MetricsSettings:
        if self.slide is not None and (
            not timedelta(0) < self.slide <= self.window or self.window % self.slide
        ):
            raise ValueError("slide must be positive and divide the window length")
        self.catalog  # noqa: B018 (names must be distinct)
        return self


class BatchSettings(_Section):
    """bronze -> batch-layer sessions and gold rows for closed event-time ranges."""

    chunk: Duration = timedelta(days=1)
    chunk_events: int = Field(default=2_000_000, ge=1)
    closed_after: Duration = timedelta(hours=1)
    lookahead: Duration = timedelta(hours=12)

    @model_validator(mode="after")
    def _positive(self) -> BatchSettings:
        for name in ("chunk", "closed_after", "lookahead"):
            if getattr(self, name) <= timedelta(0):
                raise ValueError(f"{name} must be positive")
        return self


class MaintainSettings(_Section):
    """``abstream maintain``: compaction of closed partitions, and a vacuum that keeps every
    file a monitored reader has not processed yet."""

    #: A day partition (event, ingest or visit date) is closed once its day ended this long
    #: ago: by then the late events and the visits that close late have been written.
    closed_after: Duration = timedelta(days=1)
    #: Added to the age of the oldest file a reader still needs (and the least retention):
    #: time for a reader's batch in flight, a batch job's snapshot and writes not committed.
    retention_margin: Duration = timedelta(hours=1)
    #: Tries of a partition's compaction that loses a race against a writer.
    attempts: int = Field(default=3, ge=1)

    @model_validator(mode="after")
    def _not_negative(self) -> MaintainSettings:
        for name in ("closed_after", "retention_margin"):
            if getattr(self, name) < timedelta(0):
                raise ValueError(f"{name} must not be negative")
        return self


def _default_kafka_jars() -> Path:
    return _default_jars_cache().parent / "kafka"


class LocalKafkaSettings(_Section):
    """``abstream kafka-local``: a single-node broker on 127.0.0.1 for development."""

    home: str | None = None
    port: int = Field(default=9092, ge=1, le=65535)
    controller_port: int = Field(default=9093, ge=1, le=65535)
    jars_cache: Path = Field(default_factory=_default_kafka_jars)


class KafkaSettings(_Section):
    """The broker and topics of the Kafka path (``source: kafka``)."""

    bootstrap_servers: str = "127.0.0.1:9092"
    topic: str = Field(default="beacons", min_length=1)
    valid_topic: str = Field(default="beacons.valid", min_length=1)
    rejected_topic: str = Field(default="beacons.rejected", min_length=1)
    #: Partitions of the topics abstream creates when they are missing.
    partitions: int = Field(default=1, ge=1)
    #: Client properties both engines name alike (``security.protocol``, ``sasl.mechanism``).
    options: dict[str, KafkaOptionValue] = Field(default_factory=dict)
    #: Properties of the Java client in Spark's Kafka source and sink only
    #: (``sasl.jaas.config``, ``ssl.truststore.location``, ...), given as ``kafka.<name>``.
    spark_options: dict[str, KafkaOptionValue] = Field(default_factory=dict)
    #: Properties of abstream's own Python clients (librdkafka) only
    #: (``sasl.username``, ``sasl.password``, ``ssl.ca.location``, ...).
    client_options: dict[str, KafkaOptionValue] = Field(default_factory=dict)
    local: LocalKafkaSettings = Field(default_factory=LocalKafkaSettings)

    @field_validator(*KAFKA_OPTION_MAPS)
    @classmethod
    def _property_names(cls, options: dict[str, SecretStr]) -> dict[str, SecretStr]:
        for name in options:
            if name.startswith("kafka."):
                raise ValueError(f"{name}: give the client property without 'kafka.'")
            if name == "bootstrap.servers":
                raise ValueError("set the brokers in kafka.bootstrap_servers")
        return options

    def spark_kafka_options(self) -> dict[str, str]:
        """The ``kafka.*`` options of Spark's Kafka source and sink, credentials revealed."""
        properties = {"bootstrap.servers": self.bootstrap_servers,
                      **_revealed(self.options), **_revealed(self.spark_options)}
        return {f"kafka.{name}": value for name, value in properties.items()}

    def client_properties(self) -> dict[str, str]:
        """The properties of a librdkafka client, credentials revealed."""
        return {"bootstrap.servers": self.bootstrap_servers, **_revealed(self.options),
                **_revealed(self.client_options)}


def _revealed(options: dict[str, SecretStr]) -> dict[str, str]:
    return {name: value.get_secret_value() for name, value in options.items()}


class ValidateSettings(_Section):
    """Kafka ``kafka.topic`` -> ``kafka.valid_topic`` + ``kafka.rejected_topic``: stateless.

    ``microbatch``: a micro-batch every ``trigger`` (0 = back to back), offsets written
    before and after each batch. ``async``: the same with asynchronous progress tracking,
    offsets written every ``async_checkpoint_interval``. ``realtime``: Spark's real-time
    mode, records flow as they arrive, offsets written every ``realtime_checkpoint_interval``.
    """

    mode: Literal["microbatch", "async", "realtime"] = "microbatch"
    trigger: Duration = timedelta(0)
    async_checkpoint_interval: Duration = timedelta(seconds=1)
    realtime_checkpoint_interval: Duration = timedelta(seconds=30)
    max_offsets_per_trigger: int | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _intervals(self) -> ValidateSettings:
        if self.realtime_checkpoint_interval < timedelta(seconds=5):
            raise ValueError("realtime_checkpoint_interval must be at least 5 seconds")
        if self.async_checkpoint_interval < timedelta(0):
            raise ValueError("async_checkpoint_interval must not be negative")
        return self


class ArchiveSettings(_Section):
    """Kafka ``kafka.valid_topic`` + ``kafka.rejected_topic`` -> bronze ``events`` +
    quarantine ``rejected`` (the checks and de-duplication of ``ingest`` apply)."""

    trigger: Duration = timedelta(seconds=5)
    max_offsets_per_trigger: int = Field(default=200_000, gt=0)


class RunSettings(_Section):
    """``abstream run``: how a component whose query fails is restarted."""

    #: Restarts of one component allowed within ``restart_window``; one failure more ends
    #: the run (0: the first failure does).
    max_restarts: int = Field(default=5, ge=0)
    restart_window: Duration = timedelta(minutes=30)
    #: The pause before the first restart; it doubles with each failure in the window.
    restart_backoff: Duration = timedelta(seconds=2)
    restart_backoff_max: Duration = timedelta(minutes=1)

    @model_validator(mode="after")
    def _positive(self) -> RunSettings:
        if self.restart_window <= timedelta(0):
            raise ValueError("restart_window must be positive")
        if self.restart_backoff_max < self.restart_backoff:
            raise ValueError("restart_backoff_max must not be below restart_backoff")
        return self


class MonitoredComponentSettings(_Section):
    """A streaming query to watch: its checkpoint and one source it reads."""

    name: str = Field(min_length=1)
    checkpoint: str = Field(min_length=1)
    source: str = Field(min_length=1)
    slo: Duration | None = None


class ExporterSettings(_Section):
    host: str = "127.0.0.1"
    port: int = Field(default=9108, ge=0, le=65535)


class MonitorSettings(_Section):
    """Lag monitoring: abstream's own components unless ``components`` lists others."""

    components: list[MonitoredComponentSettings] = Field(default_factory=list)
    include_own: bool = True
    tables: list[str] = Field(default_factory=list)
    slo: Duration = timedelta(minutes=15)
    exporter: ExporterSettings = Field(default_factory=ExporterSettings)
    pushgateway: str | None = None


MetricRole = Literal["primary", "secondary", "guardrail"]
#: How p-values are adjusted for an experiment's many comparisons.
Correction = Literal["holm", "bh", "none"]


class ReportSettings(_Section):
    """``abstream report``: every variant compared with its experiment's control."""

    confidence: float = Field(default=0.95, gt=0, lt=1)
    #: What the text and HTML show and mark significant: confidence sequences, valid however
    #: often the numbers are looked at (``sequential``), or fixed-horizon intervals, valid
    #: for one look at a sample size chosen in advance (``fixed``). JSON carries both.
    inference: Literal["sequential", "fixed"] = "sequential"
    #: Visitors (both arms together) at which the confidence sequence is narrowest: about
    #: the sample an experiment is expected to reach.
    sequential_tuning: int = Field(default=5_000, gt=0)
    #: A comparison is made once each side has this many visitors (visitors with orders,
    #: for the average order value): below it, the normal approximations do not hold.
    min_units: int = Field(default=30, ge=2)
    #: Multiple-comparison correction over every comparison (variant x metric) of an
    #: experiment and population: Holm (family-wise error), Benjamini-Hochberg (false
    #: discovery rate) or none.
    correction: Correction = "holm"
    #: Roles that replace those of the definitions of these names. A guardrail moving
    #: the wrong way is what the experiment alert rules watch.
    metrics: dict[str, MetricRole] = Field(default_factory=dict)
    #: An experiment's sample-ratio-mismatch p-value below this is flagged.
    srm_threshold: float = Field(default=0.001, gt=0, lt=1)
    #: Allocation weights per experiment and variant; an experiment not named here is
    #: expected to split its visitors equally among the variants seen.
    allocation: dict[str, dict[str, float]] = Field(default_factory=dict)
    #: Points of the lift-over-time series (cumulative, on a rounded time step).
    points: int = Field(default=24, ge=2, le=500)
    #: How often ``abstream run`` publishes the report (as ``report --publish``) while it
    #: runs; None: never.
    publish_every: Duration | None = Field(default=timedelta(minutes=5))

    @model_validator(mode="after")
    def _positive_weights(self) -> ReportSettings:
        for experiment, weights in self.allocation.items():
            if not weights or any(w <= 0 for w in weights.values()):
                raise ValueError(f"allocation of {experiment}: weights must be positive")
        return self


class ServeSettings(_Section):
    """``abstream serve``: the results API, read-only."""

    host: str = "127.0.0.1"
    port: int = Field(default=8765, ge=0, le=65535)
    #: The bearer token every request but ``/healthz`` must carry; required to bind
    #: anything but a loopback address. Give it from the environment
    #: (``ABSTREAM__SERVE__TOKEN``, or ``${NAME}`` in the file), never in the file itself.
    token: SecretStr | None = None


class PostgresSettings(_Section):
    """The PostgreSQL serving store (``serving.store: postgres``)."""

    #: libpq connection string or URI without the password, e.g.
    #: ``postgresql://abstream@db.internal:5432/experiments``.
    dsn: str = Field(default="postgresql://abstream@127.0.0.1:5432/abstream", min_length=1)
    #: Give it from the environment (``ABSTREAM__SERVING__POSTGRES__PASSWORD``, or ``${NAME}``
    #: in the file); unset, libpq's own ``PGPASSWORD`` or ``~/.pgpass`` apply.
    password: SecretStr | None = None
    #: The schema abstream's tables live in; created when missing.
    db_schema: str = Field(default="abstream", alias="schema",
                           pattern=r"^[a-z_][a-z0-9_]{0,62}$")
    #: How often ``abstream run`` brings the store up to the Delta tables.
    write_every: Duration = timedelta(seconds=10)
    connect_timeout: Duration = timedelta(seconds=5)

    @field_validator("dsn")
    @classmethod
    def _no_password_in_dsn(cls, dsn: str) -> str:
        from psycopg.conninfo import conninfo_to_dict
        from psycopg.errors import ProgrammingError

        try:
            given = conninfo_to_dict(dsn)
        except ProgrammingError:
            raise ValueError("not a libpq connection string or postgresql:// URI") from None
        if given.get("password"):
            raise ValueError("give the password in serving.postgres.password from an "
                             "environment variable, not in the dsn")
        return dsn

    @model_validator(mode="after")
    def _positive(self) -> PostgresSettings:
        if self.write_every <= timedelta(0) or self.connect_timeout <= timedelta(0):
            raise ValueError("write_every and connect_timeout must be positive")
        return self


class StandbySettings(_Section):
    """Active/standby replicas (``abstream run --replica NAME``): the lease in the PostgreSQL
    serving store that names the one replica writing it."""

    #: How often the leader renews its lease, and a standby looks whether it may take it.
    renew: Duration = timedelta(seconds=2)
    #: How long a renewal holds the lease, by the database's clock.
    lease: Duration = timedelta(seconds=10)
    #: The leader stops writing when it has not renewed for this long, by its own clock:
    #: before the lease runs out for the others.
    step_down: Duration = timedelta(seconds=6)
    #: ``caught_up``: a replica takes the lease only when its input position is at or past
    #: what the store says was last written; ``available``: as soon as the lease is free
    #: (the numbers served may then go back until it has caught up).
    takeover: Literal["caught_up", "available"] = "caught_up"

    @model_validator(mode="after")
    def _ordered(self) -> StandbySettings:
        if not timedelta(0) < self.renew < self.step_down < self.lease:
            raise ValueError("renew < step_down < lease must hold, all positive")
        return self


class ServingSettings(_Section):
    """Where the serving view and the published results are served from besides Delta."""

    #: ``delta``: the Delta tables only; ``postgres``: also a PostgreSQL store that the speed
    #: and batch layers write and ``abstream serve`` reads.
    store: Literal["delta", "postgres"] = "delta"
    postgres: PostgresSettings = Field(default_factory=PostgresSettings)


class Config(_Section):
    data_dir: str = "abstream-data"
    #: This process's replica (``--replica``): its checkpoints, tables and Kafka topics are
    #: its own, under ``DATA_DIR/replicas/NAME``; the landing folder and the input topic
    #: are shared. None: a single deployment.
    replica: str | None = Field(default=None, pattern=f"^{REPLICA_NAME.pattern}$")
    #: Where beacons come from: JSON-lines files in the landing folder, or a Kafka topic.
    source: Literal["files", "kafka"] = "files"
    spark: SparkSettings = Field(default_factory=SparkSettings)
    ingest: IngestSettings = Field(default_factory=IngestSettings)
    sessionize: SessionizeSettings = Field(default_factory=SessionizeSettings)
    events: EventsSettings = Field(default_factory=EventsSettings)
    metrics: MetricsSettings = Field(default_factory=MetricsSettings)
    batch: BatchSettings = Field(default_factory=BatchSettings)
    kafka: KafkaSettings = Field(default_factory=KafkaSettings)
    validate_: ValidateSettings = Field(default_factory=ValidateSettings, alias="validate")
    archive: ArchiveSettings = Field(default_factory=ArchiveSettings)
    run: RunSettings = Field(default_factory=RunSettings)
    monitor: MonitorSettings = Field(default_factory=MonitorSettings)
    report: ReportSettings = Field(default_factory=ReportSettings)
    serve: ServeSettings = Field(default_factory=ServeSettings)
    serving: ServingSettings = Field(default_factory=ServingSettings)
    maintain: MaintainSettings = Field(default_factory=MaintainSettings)
    standby: StandbySettings = Field(default_factory=StandbySettings)

    @field_validator("metrics")
    @classmethod
    def _metrics_fit_events(cls, metrics: MetricsSettings, info: ValidationInfo
                            ) -> MetricsSettings:
        events = info.data.get("events")
        found = catalog_problems(metrics.catalog, events) if events is not None else []
        if found:
            raise ValueError(found[0])
        return metrics

    @field_validator("report")
    @classmethod
    def _roles_of_known_metrics(cls, report: ReportSettings, info: ValidationInfo
                                ) -> ReportSettings:
        metrics = info.data.get("metrics")
        unknown = [n for n in report.metrics if metrics and metrics.catalog.get(n) is None]
        if unknown and metrics is not None:
            raise ValueError(f"metrics: {unknown[0]!r} is not a metric of the catalog "
                             f"({', '.join(d.name for d in metrics.definitions)})")
        return report

    def with_data_dir(self, data_dir: Path | str | None) -> Config:
        return self if data_dir is None else self.model_copy(update={"data_dir": str(data_dir)})

    def for_replica(self, replica: str | None) -> Config:
        """This configuration as replica ``replica``'s, with its own validated and rejected
        topics (``<topic>.<replica>``); itself when ``replica`` is None."""
        if replica is None:
            return self
        if not REPLICA_NAME.fullmatch(replica):
            raise ConfigError(f"replica {replica!r}: lower-case letters, digits, '-' and '_', "
                              "at most 32, starting with a letter or digit")
        kafka = self.kafka.model_copy(update={
            "valid_topic": f"{self.kafka.valid_topic}.{replica}",
            "rejected_topic": f"{self.kafka.rejected_topic}.{replica}"})
        return self.model_copy(update={"replica": replica, "kafka": kafka})


def load_config(
    path: Path | str | None = None,
    environ: Mapping[str, str] | None = None,
    data_dir: Path | str | None = None,
    replica: str | None = None,
) -> Config:
    """Defaults < YAML file < environment < ``data_dir`` and ``replica`` arguments (the
    CLI's --data-dir and --replica)."""
    raw: dict[str, Any] = {}
    origins: dict[tuple[str, ...], str] = {}
    environ = environ if environ is not None else os.environ
    if path is not None:
        raw = _read_yaml(Path(path))
        _note_origins(raw, (), f"in {path}", origins)
        raw = _resolve_references(raw, (), environ, f"in {path}")
    for name, value in sorted(environ.items()):
        if name.startswith(ENV_PREFIX):
            keys = _env_keys(name)
            _set_path(raw, keys, _env_value(name, keys, value))
            origins[keys] = f"from ${name}"
    try:
        config = Config.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(_one_line(exc, origins)) from None
    return config.with_data_dir(data_dir).for_replica(replica or config.replica)


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    try:
        loaded = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"config file {path}{where} is not valid YAML") from None
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise ConfigError(f"config file {path} must hold a mapping of settings")
    return loaded


def _env_keys(name: str) -> tuple[str, ...]:
    parts = name[len(ENV_PREFIX):].split("__")
    if not all(parts):
        raise ConfigError(f"${name}: empty key segment in the variable name")
    # Spark settings keep their case (spark.sql.shuffle.partitions, ...Enabled).
    if len(parts) > 2 and [p.lower() for p in parts[:2]] == ["spark", "conf"]:
        return ("spark", "conf", "__".join(parts[2:]))
    keys = tuple(p.lower() for p in parts)
    # Kafka client properties have dots where a variable name can only have underscores:
    # ABSTREAM__KAFKA__CLIENT_OPTIONS__SASL_PASSWORD sets kafka.client_options.sasl.password.
    if _is_kafka_property(keys):
        return (*keys[:2], keys[2].replace("_", "."))
    return keys


def _is_kafka_property(keys: tuple[str, ...]) -> bool:
    return len(keys) == 3 and keys[0] == "kafka" and keys[1] in KAFKA_OPTION_MAPS


def _env_value(name: str, keys: tuple[str, ...], value: str) -> Any:
    """The variable's value read as YAML; a Kafka client property's or a credential's as it
    is (a password such as ``0x1F`` or ``1e3`` is not a number)."""
    if _is_kafka_property(keys) or any(SECRET_NAME.search(key) for key in keys):
        return value
    try:
        return yaml.safe_load(value) if value.strip() else value
    except yaml.YAMLError:
        shown = "" if _may_hold_secret(keys) else f": {value!r}"
        raise ConfigError(f"${name}: value is not valid YAML{shown}") from None


def _may_hold_secret(keys: tuple[str, ...]) -> bool:
    """Whether the setting at ``keys`` may be a credential (its value is then never shown)."""
    return keys[:2] in {("kafka", name) for name in KAFKA_OPTION_MAPS} \
        or any(SECRET_NAME.search(key) for key in keys)


_REFERENCE = re.compile(r"\$(\$?)\{([A-Za-z_][A-Za-z0-9_]*)\}")


def _resolve_references(node: Any, keys: tuple[str, ...], environ: Mapping[str, str],
                        origin: str) -> Any:
    """The file's settings with each ``${NAME}`` replaced by the variable's value."""
    if isinstance(node, dict):
        return {key: _resolve_references(value, (*keys, str(key)), environ, origin)
                for key, value in node.items()}
    if isinstance(node, list):
        return [_resolve_references(value, (*keys, str(i)), environ, origin)
                for i, value in enumerate(node)]
    if not isinstance(node, str):
        return node

    def value_of(match: re.Match[str]) -> str:
        escaped, name = match.groups()
        if escaped:
            return "${" + name + "}"
        if name not in environ:
            raise ConfigError(f"config: {'.'.join(keys)}: environment variable {name} is "
                              f"not set [{origin}]")
        return environ[name]

    return _REFERENCE.sub(value_of, node)


def _set_path(raw: dict[str, Any], keys: tuple[str, ...], value: Any) -> None:
    node = raw
    for key in keys[:-1]:
        child = node.get(key)
        if not isinstance(child, dict):
            child = {}
            node[key] = child
        node = child
    node[keys[-1]] = value


def _note_origins(
    node: Any, prefix: tuple[str, ...], origin: str, origins: dict[tuple[str, ...], str]
) -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            _note_origins(value, (*prefix, str(key)), origin, origins)
    else:
        origins[prefix] = origin


def _one_line(exc: ValidationError, origins: dict[tuple[str, ...], str]) -> str:
    parts = []
    for error in exc.errors():
        loc = tuple(str(p) for p in error["loc"])
        key = ".".join(loc) or "config"
        message = error["msg"].removeprefix("Value error, ")
        if error["type"] == "extra_forbidden":
            message = "unknown setting"
        elif "input" in error and not isinstance(error["input"], dict | list) \
                and not _may_hold_secret(loc):
            message = f"{message} (got {error['input']!r})"
        origin = next((origins[loc[:i]] for i in range(len(loc), 0, -1) if loc[:i] in origins),
                      next((o for keys, o in origins.items() if keys[:len(loc)] == loc), ""))
        parts.append(f"{key}: {message}" + (f" [{origin}]" if origin else ""))
    return "config: " + "; ".join(parts)
