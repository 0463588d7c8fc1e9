"""The one SparkSession factory: local[2] with Delta Lake by default, everything overridable.

Under ``spark-submit`` the session already exists (its master, JARs and static settings come
from the command line); the factory then only applies the runtime SQL settings.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from importlib import resources

from py4j.java_gateway import JavaClass
from py4j.protocol import Py4JError
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession

from abstream.config import Config, SparkSettings
from abstream.errors import AbstreamError, StepFailed
from abstream.io import jars

log = logging.getLogger(__name__)
#: What a Spark job or query that failed, or could not start, raises.
SPARK_ERRORS = (PySparkException, Py4JError)

#: Settings every abstream session gets unless the user's ``spark.conf`` says otherwise.
DEFAULT_CONF: dict[str, str] = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    "spark.sql.session.timeZone": "UTC",
    # Sized for local[2]; raise on a cluster (2-3x the cores).
    "spark.sql.shuffle.partitions": "2",
    "spark.databricks.delta.snapshotPartitions": "2",
    # The tasks of a listing Spark spreads over the cluster (VACUUM lists a table's every
    # file so): Spark's 10,000 made a VACUUM of a 10-file table take 35 s on local[2], 2
    # makes it 1.8 s.
    "spark.sql.sources.parallelPartitionDiscovery.parallelism": "2",
    "spark.ui.showConsoleProgress": "false",
    # Gold's aggregation holds HLL sketches, so Spark aggregates it with object buffers and,
    # past this many groups in a task (Spark's default: 128), sorts instead of hashing.
    "spark.sql.objectHashAggregate.sortBased.fallbackThreshold": "8192",
    # Micro-batches cache what they write more than once; compressing a cache that lives
    # one micro-batch costs more than the memory it saves.
    "spark.sql.inMemoryColumnarStorage.compressed": "false",
    # Spark keeps the classes it generates for the stages of a plan in a cache of 100 by
    # default. A micro-batch of ingest and one of sessionize plan more distinct stages than
    # that between them, so side by side each evicted the other's, and every micro-batch
    # compiled its stages again and the JIT compiled the new classes again (its compiler
    # threads took a third of the JVM's CPU in `make bench-sustained --live`). Static: under
    # spark-submit, pass it there.
    "spark.sql.codegen.cache.maxEntries": "1000",
    # A partitioned write (bronze by event_date) keeps a file open per partition instead of
    # sorting the micro-batch by partition first.
    "spark.sql.maxConcurrentOutputFileWriters": "8",
    # Spark's default pattern, and the Kafka client's JAAS setting (which holds its
    # credentials): the UI, the event log and plan descriptions show such values redacted.
    # Static: under spark-submit, pass it there.
    "spark.redaction.regex": "(?i)secret|password|token|access[.]?key|jaas",
    # PySpark records the Python call site of every Column it builds (a stack capture and
    # four calls into the JVM each), for the query context of an error: F.col took 2.07 ms
    # with it and 0.55 ms without, F.when 5.4 ms against 1.5 ms, and a micro-batch builds
    # thousands of Columns.
    "spark.python.sql.dataFrameDebugging.enabled": "false",
}

#: Classes PySpark names by their simple name each time it builds a Column (``functions``) or
#: hands a list of them to the JVM (``PythonUtils``): Py4J's view of the JVM asks the JVM for
#: such a name each time, which tries it in the default package, then in each package PySpark
#: imports whole, until one has it, and each miss searches every JAR on the class path (0.2-0.4
#: ms a lookup). Kept on the view as attributes, they are found in Python: ``F.struct`` of two
#: columns took 2.2-2.4 ms instead of 3.1-3.2 ms.
_RESOLVED = ("org.apache.spark.sql.functions", "org.apache.spark.api.python.PythonUtils",
             "org.apache.spark.sql.api.python.PythonSQLUtils")

#: Addresses that listen on every interface: a driver bound there advertises its host name.
_WILDCARDS = {"0.0.0.0", "::"}


def _local_only_conf(settings: SparkSettings) -> dict[str, str]:
    """Static settings that only take effect when abstream starts the JVM itself: the
    driver's RPC and block manager ports on ``spark.bind_address``."""
    conf = {"spark.driver.bindAddress": settings.bind_address}
    if settings.bind_address not in _WILDCARDS:
        conf["spark.driver.host"] = settings.bind_address
    return conf


#: The JVM's collector when abstream starts it in local mode, where the driver also runs
#: every task: the throughput collector. G1's concurrent marking and write barriers took
#: 9 % of the demo's time on 2 cores (76.2 s against 69.0 s, three runs each); its short
#: pauses matter little on a 1 GB heap.
LOCAL_GC = "-XX:+UseParallelGC"


def _java_options(local: bool) -> str:
    config = resources.files("abstream") / "resources" / "log4j2.properties"
    options = [f"-Dlog4j2.configurationFile={config}"]
    if local:
        options.append(LOCAL_GC)
    return " ".join(options)


def _under_spark_submit() -> bool:
    return "PYSPARK_GATEWAY_PORT" in os.environ or SparkSession.getActiveSession() is not None


def spark_session(settings: SparkSettings) -> SparkSession:
    """Return the SparkSession for abstream, creating and configuring it if needed."""
    if _under_spark_submit():
        spark = SparkSession.builder.getOrCreate()
        for key, value in {**DEFAULT_CONF, **settings.conf}.items():
            if not spark.conf.isModifiable(key):
                continue
            spark.conf.set(key, value)
        spark.sparkContext.setLogLevel(settings.log_level)
        _prepare(spark)
        return spark

    builder = SparkSession.builder.master(settings.master).appName(settings.app_name)
    conf = dict(DEFAULT_CONF)
    local = settings.master.startswith("local")
    if local:
        conf.update(_local_only_conf(settings))
        # The web UI listens where SPARK_LOCAL_IP says (every interface when unset).
        os.environ["SPARK_LOCAL_IP"] = settings.bind_address
        # Python workers (if any) run in this interpreter's environment.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        # The JVM's native allocations (hundreds of threads) spread over glibc's default
        # 8 arenas per core otherwise, and its resident memory grows with the run.
        os.environ.setdefault("MALLOC_ARENA_MAX", "2")
    conf["spark.driver.extraJavaOptions"] = _java_options(local)
    if settings.manage_jars:
        conf.update(jars.jar_conf(settings))
    conf.update(settings.conf)
    for key, value in conf.items():
        builder = builder.config(key, value)
    try:
        spark = builder.getOrCreate()
    except Exception as exc:
        raise StepFailed(f"could not start Spark ({settings.master})", exc) from exc
    spark.sparkContext.setLogLevel(settings.log_level)
    if settings.manage_jars:
        jars.remember_resolved(settings, spark.sparkContext.getConf().get("spark.jars", None))
    _prepare(spark)
    return spark


def _prepare(spark: SparkSession) -> None:
    """Check that Delta Lake is on the classpath, and resolve ``_RESOLVED`` once."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None, "the session runs"
    if not isinstance(getattr(jvm, "io.delta.tables.DeltaTable"), JavaClass):
        raise AbstreamError(
            "Delta Lake is not on Spark's classpath: pass "
            f"--packages {','.join(SparkSettings().packages)} to spark-submit"
        )
    for name in _RESOLVED:
        setattr(jvm, name.rsplit(".", 1)[1], getattr(jvm, name))


@contextmanager
def session_conf(spark: SparkSession, settings: Mapping[str, str]) -> Iterator[None]:
    """Spark session settings for the duration of a block, then back as they were."""
    previous = {key: spark.conf.get(key, None) for key in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in previous.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


def fetch_jars(config: Config) -> list[str]:
    """Resolve the packages now (if not cached yet) and return the JAR files."""
    found = jars.cached_jars(config.spark)
    if found is None:
        spark_session(config.spark).stop()
        found = jars.cached_jars(config.spark) or []
    return found
