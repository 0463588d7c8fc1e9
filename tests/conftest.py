"""Shared fixtures: one real SparkSession (local[2], Delta) for the whole test session (each
of `make test`'s processes has its own), a Kafka broker, one run over generated beacons
that several modules compare their own runs with, and a small run with its reports."""

from __future__ import annotations

import fcntl
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from abstream.batch.layer import BatchRequest, run_batch
from abstream.generator.write import GeneratorSettings, generate
from abstream.io.kafka.broker import LocalBroker
from abstream.io.postgres_local import LocalPostgres
from abstream.io.spark import spark_session
from abstream.layout import Layout
from abstream.report.build import Report, build_report
from abstream.speed import Context, pipeline_components
from abstream.speed.progress import ProgressListener, RunStats
from abstream.speed.runner import run_once
from tests.helpers import DIMENSIONS, POSTGRES_PASSWORD, make_config
from tests.io.kafka.kafka_helpers import SASL_PASSWORD, SASL_USER
from tests.servers import free_port

#: Session fixtures that are whole pipeline runs, made before their first test.
SHARED_RUNS = ("beacons_run", "served")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The slow end-to-end tests first, then the modules that use a shared run, then the
    modules whose tests take minutes together (``long_module``): `make test`'s processes
    take modules in this order (``--no-loadscope-reorder``: else pytest-xdist orders them
    by their number of tests), so the longest start early and short ones fill the end."""
    heavy = {item.path for item in items
             if any(name in item.fixturenames for name in SHARED_RUNS)}
    items.sort(key=lambda item: (item.get_closest_marker("slow") is None,
                                 item.path not in heavy,
                                 item.get_closest_marker("long_module") is None))


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = spark_session(make_config(Path("unused")).spark)
    yield session
    session.stop()


@pytest.fixture
def ctx(spark: SparkSession, tmp_path: Path) -> Iterator[Context]:
    """A fresh data dir and run statistics, with the progress listener attached."""
    context = Context(spark, make_config(tmp_path / "data"), Layout.of(tmp_path / "data"),
                      RunStats())
    listener = ProgressListener(context.stats)
    spark.streams.addListener(listener)
    yield context
    spark.streams.removeListener(listener)
    for query in spark.streams.active:
        query.stop()


#: The beacons of ``beacons_run``: no late events, so the speed layer's visits are the
#: batch layer's, and no malformed lines.
BEACONS = GeneratorSettings(events=800, seed=31, malformed_rate=0.0, late_rate=0,
                            file_events=400)


@pytest.fixture(scope="session")
def beacons_run(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory,
                worker_id: str) -> Context:
    """``run --once`` and ``batch --all`` with the default config over generated beacons
    (``BEACONS``): the run that tests of other runs over the same lines compare theirs
    with. Made once for all of `make test`'s processes (the first to need it makes it, the
    others wait for it). Its tables are shared: read them, write nothing to its data dir."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if worker_id != "master" else base
    data = shared / "beacons" / "data"
    context = Context(spark, make_config(data), Layout.of(data), RunStats())
    with open(shared / "beacons.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        made = shared / "beacons" / "made"
        if not made.exists():
            shutil.rmtree(shared / "beacons", ignore_errors=True)
            generate(BEACONS, Path(context.layout.landing))
            run_once(context, pipeline_components(context.config))
            run_batch(context, BatchRequest("all"))
            made.touch()
    return context


@dataclass(frozen=True)
class Served:
    """A run with the default definitions and two dimensions, and its reports."""

    ctx: Context
    #: Built after the speed layer only, then after the batch layer too.
    provisional: Report
    final: Report


@pytest.fixture(scope="session")
def served(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Served:
    """``run --once``, the report, ``batch --all`` and the report again, over 4,000
    generated beacons with the dimensions device and country; comparisons from two units
    a side (small data). Modules that publish write into a data dir of their own, but for
    the report's tests of publishing."""
    data = tmp_path_factory.mktemp("report") / "data"
    ctx = Context(spark, make_config(data, report={"min_units": 2},
                                     metrics={"dimensions": DIMENSIONS}),
                  Layout.of(data), RunStats())
    listener = ProgressListener(ctx.stats)
    spark.streams.addListener(listener)
    try:
        generate(GeneratorSettings(events=4_000, seed=21, file_events=2_000),
                 Path(ctx.layout.landing))
        run_once(ctx, pipeline_components(ctx.config))
        provisional = build_report(spark, ctx.layout, ctx.config)
        run_batch(ctx, BatchRequest("all"))
        final = build_report(spark, ctx.layout, ctx.config)
    finally:
        spark.streams.removeListener(listener)
    return Served(ctx, provisional, final)


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBroker]:
    """One real single-node Kafka broker on loopback for the whole test session, with a
    SASL_PLAINTEXT listener (PLAIN) for the user ``SASL_USER``."""
    broker = LocalBroker(tmp_path_factory.mktemp("kafka"),
                         make_config(Path("unused")).kafka.local.jars_cache,
                         port=free_port(), controller_port=free_port(),
                         sasl_port=free_port(), sasl_users={SASL_USER: SASL_PASSWORD})
    broker.start()
    yield broker
    broker.stop()


@pytest.fixture(scope="session")
def postgres() -> Iterator[LocalPostgres]:
    """One real PostgreSQL server on loopback for the whole test session (Debian's
    programs), its user's password ``POSTGRES_PASSWORD``; tests use schemas of their own."""
    server = LocalPostgres(POSTGRES_PASSWORD).start()
    yield server
    server.remove()
