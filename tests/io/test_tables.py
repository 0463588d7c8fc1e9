"""The Delta tables: file statistics of the columns the pipeline filters on only, their
partitioning checked, and a creation a crash interrupted done again."""

import json
import logging
import os
import shutil
import threading
import time
from pathlib import Path

import pytest
from delta.tables import DeltaTable
from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, StructField, StructType

from abstream.config import EventsSettings, PropertySpec
from abstream.errors import AbstreamError, UsageError
from abstream.io.tables import (
    CHECKPOINT_INTERVAL,
    EVENTS_TABLE,
    METRICS_TABLE,
    SESSIONS_TABLE,
    TABLES,
    TableSpec,
    _clear_interrupted_creation,
    ensure_table,
    events_table,
)
from abstream.layout import Layout
from abstream.schemas import EVENTS, EXPERIMENT_METRICS, SESSIONS, VISIT_ENTRY
from tests.helpers import T0_BRONZE, bronze_row


def _stats_of_first_file(path: str) -> dict:
    for commit in sorted(Path(path, "_delta_log").glob("*.json")):
        for line in commit.read_text().splitlines():
            action = json.loads(line)
            if "add" in action:
                return json.loads(action["add"]["stats"])
    raise AssertionError(f"no data file in {path}")


#: A SQL literal of each non-nullable type the tables have (numbers: 0).
_LITERALS = {"string": "'x'", "timestamp": "current_timestamp()", "date": "current_date()",
             "boolean": "false"}


def _any_value(field: StructField) -> Column:
    """A value of the field's type (NULL where the field allows it)."""
    kind = field.dataType.simpleString()
    if field.nullable:
        sql = "NULL"
    elif kind.startswith("array"):
        sql = "array()"
    else:
        sql = _LITERALS.get(kind, "0")
    return F.expr(sql).cast(field.dataType).alias(field.name)


@pytest.mark.parametrize("spec", [EVENTS_TABLE, METRICS_TABLE], ids=lambda s: s.name)
def test_an_append_keeps_statistics_of_the_filtered_columns_only(spark, tmp_path, spec):
    path = ensure_table(spark, spec, Layout.of(tmp_path))
    schema = spark.read.format("delta").load(path).schema
    spark.range(1).select(*(_any_value(f) for f in schema.fields)) \
        .write.format("delta").mode("append").save(path)

    stats = _stats_of_first_file(path)

    assert set(stats["nullCount"]) == set(spec.stats_columns)


def test_tables_checkpoint_their_log_every_hundred_commits_not_ten(spark, tmp_path):
    layout = Layout.of(tmp_path)
    for spec in TABLES:
        properties = DeltaTable.forPath(spark, ensure_table(spark, spec, layout)) \
            .detail().first()["properties"]
        assert properties["delta.checkpointInterval"] == str(CHECKPOINT_INTERVAL), spec.name
    path = EVENTS_TABLE.path(layout)
    schema = spark.read.format("delta").load(path).schema
    for _ in range(11):
        spark.range(1).select(*(_any_value(f) for f in schema.fields)) \
            .write.format("delta").mode("append").save(path)

    assert DeltaTable.forPath(spark, path).history(1).first()["version"] == 11
    assert not (Path(path) / "_delta_log" / "_last_checkpoint").exists(), \
        "Delta's default would have checkpointed version 10"


def test_a_table_partitioned_otherwise_is_refused_with_one_line(spark, tmp_path):
    layout = Layout.of(tmp_path)
    spark.createDataFrame([], SESSIONS_TABLE.schema).write.format("delta") \
        .partitionBy("visit_date").save(SESSIONS_TABLE.path(layout))

    with pytest.raises(AbstreamError, match="partitioned by visit_date, this version of "
                                            "abstream partitions it by layer, visit_date"):
        ensure_table(spark, SESSIONS_TABLE, layout)



def test_gold_partitioned_by_layer_only_is_partitioned_by_its_window_day_once(spark, tmp_path,
                                                                              caplog):
    """Gold written before it was partitioned by the day of its windows: rewritten once, in
    one commit, every row kept with its day; opened again, left as it is; this version's
    rows append to it."""
    layout = Layout.of(tmp_path)
    path = str(METRICS_TABLE.path(layout))
    DeltaTable.create(spark).location(path).addColumns(EXPERIMENT_METRICS) \
        .partitionedBy("layer").execute()
    days = ("2026-01-04 23:55:00", "2026-01-05 00:00:00", "2026-01-05 12:00:00")
    spark.createDataFrame([(d,) for d in days], "start string").select(*(
        F.to_timestamp("start").alias(f.name) if f.name == "window_start" else _any_value(f)
        for f in EXPERIMENT_METRICS.fields)).write.format("delta").mode("append").save(path)

    with caplog.at_level(logging.INFO, logger="abstream.io.tables"):
        ensure_table(spark, METRICS_TABLE, layout)
    assert "is partitioned by layer; this version partitions it by layer, window_date: " \
           "rewriting it once" in caplog.text
    table = DeltaTable.forPath(spark, path)
    assert table.detail().first()["partitionColumns"] == ["layer", "window_date"]
    assert [r["operation"] for r in table.history().collect()][:1] == ["WRITE"]
    version = table.history(1).first()["version"]
    rows = spark.read.format("delta").load(path)
    assert sorted((str(r["window_start"]), str(r["window_date"])) for r in rows.collect()) == [
        ("2026-01-04 23:55:00", "2026-01-04"), ("2026-01-05 00:00:00", "2026-01-05"),
        ("2026-01-05 12:00:00", "2026-01-05")]

    ensure_table(spark, METRICS_TABLE, layout)
    assert table.history(1).first()["version"] == version, "partitioned already: no rewrite"
    rows.limit(1).write.format("delta").mode("append") \
        .partitionBy(*METRICS_TABLE.partition_by).save(path)
    assert spark.read.format("delta").load(path).count() == 4

#: What a kill while Delta creates a table leaves: the log folder, with no commit in it.
INTERRUPTED_CREATIONS = {
    "empty log": [],
    "staged commits only": ["_staged_commits/"],
    "a temporary commit": ["_staged_commits/", ".00000000000000000000.json.0b1d.tmp",
                           "..00000000000000000000.json.0b1d.tmp.crc"],
}


def leave_half_created(path: str, state: str, seconds_ago: float = 60.0) -> None:
    """The table folder at ``path`` as a kill during its creation leaves it, that long ago."""
    log = Path(path, "_delta_log")
    log.mkdir(parents=True)
    for name in INTERRUPTED_CREATIONS[state]:
        if name.endswith("/"):
            (log / name).mkdir()
        else:
            (log / name).write_text('{"commitInfo":')
    then = time.time() - seconds_ago
    for place in [*log.iterdir(), log]:
        os.utime(place, (then, then))


def _described(spark, path):
    detail = spark.sql(f"DESCRIBE DETAIL delta.`{path}`").first()
    return (spark.read.format("delta").load(path).schema, detail["partitionColumns"],
            detail["properties"])


@pytest.fixture(scope="module")
def created_clean(spark, tmp_path_factory):
    """Each table as a creation that was not interrupted makes it."""
    layout = Layout.of(tmp_path_factory.mktemp("clean"))
    return {spec.name: _described(spark, ensure_table(spark, spec, layout)) for spec in TABLES}


def test_every_table_spec_is_listed():
    from abstream.io import tables

    specs = {v for v in vars(tables).values() if isinstance(v, tables.TableSpec)}
    assert specs == set(tables.TABLES)


@pytest.mark.parametrize("state", INTERRUPTED_CREATIONS)
@pytest.mark.parametrize("spec", TABLES, ids=lambda s: s.name)
def test_a_table_whose_creation_was_killed_is_created_again(spark, tmp_path, spec, state, *,
                                                            caplog, created_clean):
    layout = Layout.of(tmp_path)
    leave_half_created(spec.path(layout), state)

    with caplog.at_level(logging.WARNING, logger="abstream.io.tables"):
        path = ensure_table(spark, spec, layout)

    assert DeltaTable.isDeltaTable(spark, path)
    assert _described(spark, path) == created_clean[spec.name]
    assert [r.getMessage() for r in caplog.records] == [
        f"the {spec.name} table at {path} was left half-created (its log holds no commit, "
        "a crash during its creation): creating it again"]


def test_a_creation_at_work_elsewhere_is_waited_for_not_undone(spark, tmp_path, caplog):
    """A log without a commit that changed moments ago is another creator's: its commit is
    waited for, and the table it creates is the one used."""
    layout = Layout.of(tmp_path / "here")
    elsewhere = ensure_table(spark, SESSIONS_TABLE, Layout.of(tmp_path / "elsewhere"))
    path = SESSIONS_TABLE.path(layout)
    leave_half_created(path, "staged commits only", seconds_ago=0.0)

    def commit() -> None:
        time.sleep(1.0)
        for entry in Path(elsewhere, "_delta_log").glob("00000000000000000000.*"):
            # Written whole, as Delta's commits are: under a hidden name, then renamed.
            hidden = Path(path, "_delta_log", f".{entry.name}.tmp")
            shutil.copy(entry, hidden)
            hidden.replace(hidden.with_name(entry.name))

    creator = threading.Thread(target=commit)
    creator.start()
    with caplog.at_level(logging.WARNING, logger="abstream.io.tables"):
        ensure_table(spark, SESSIONS_TABLE, layout)
    creator.join()

    def table_id(location: str) -> str:
        return spark.sql(f"DESCRIBE DETAIL delta.`{location}`").first()["id"]

    assert table_id(path) == table_id(elsewhere)
    assert not caplog.records


@pytest.mark.parametrize("log_state", [None, "empty log"])
def test_a_folder_with_data_but_no_commit_is_refused_and_kept(spark, tmp_path, log_state):
    layout = Layout.of(tmp_path)
    path = Path(EVENTS_TABLE.path(layout))
    if log_state is not None:
        leave_half_created(str(path), log_state)
    data = path / "event_date=2026-01-05" / "part-00000.snappy.parquet"
    data.parent.mkdir(parents=True)
    data.write_bytes(b"PAR1")
    before = sorted(p.relative_to(path) for p in path.rglob("*"))

    with pytest.raises(UsageError, match=rf"^{path} holds files \(event_date=2026-01-05\) "
                                         r"but no Delta table, so abstream cannot create its "
                                         r"events table there: move them away \(nothing was "
                                         r"deleted\), or point data_dir elsewhere$"):
        ensure_table(spark, EVENTS_TABLE, layout)

    assert sorted(p.relative_to(path) for p in path.rglob("*")) == before


def test_a_table_delta_answers_no_for_is_kept_when_its_log_holds_a_commit(spark, tmp_path):
    """Delta can answer "no table" from the log it cached, for a table moved away while a
    query read it and moved back: a commit on disk is what counts, nothing is refused."""
    layout = Layout.of(tmp_path)
    path = ensure_table(spark, EVENTS_TABLE, layout)
    spark.createDataFrame([bronze_row("e1", T0_BRONZE)], EVENTS).write.format("delta") \
        .mode("append").save(path)
    before = sorted(p.relative_to(path) for p in Path(path).rglob("*"))

    _clear_interrupted_creation(spark, EVENTS_TABLE, path)

    assert sorted(p.relative_to(path) for p in Path(path).rglob("*")) == before
    assert spark.read.format("delta").load(path).count() == 1


def test_a_log_with_a_staged_commit_only_is_refused_and_kept(spark, tmp_path):
    layout = Layout.of(tmp_path)
    staged = Path(SESSIONS_TABLE.path(layout), "_delta_log", "_staged_commits")
    staged.mkdir(parents=True)
    commit = staged / "00000000000000000000.2f1c.json"
    commit.write_text("{}\n")

    with pytest.raises(UsageError, match=r"the sessions table at .* has commits staged but "
                                         r"none published"):
        ensure_table(spark, SESSIONS_TABLE, layout)

    assert commit.exists()


def _with_properties(**properties):
    return EventsSettings().model_copy(update={"properties": {
        **EventsSettings().properties,
        **{name: PropertySpec(path=name, type=kind) for name, kind in properties.items()}}})


def test_a_property_added_to_the_mapping_is_a_new_bronze_column_null_before(spark, tmp_path,
                                                                            caplog):
    layout = Layout.of(tmp_path)
    path = ensure_table(spark, events_table(EventsSettings()), layout)
    spark.range(1).select(*(_any_value(f) for f in EVENTS.fields)) \
        .write.format("delta").mode("append").save(path)
    wider = events_table(_with_properties(browser="string", first_visit="boolean"))

    with caplog.at_level(logging.INFO, logger="abstream.io.tables"):
        ensure_table(spark, wider, layout)
        ensure_table(spark, wider, layout)

    bronze = spark.read.format("delta").load(path)
    assert bronze.columns == [*EVENTS.fieldNames(), "browser", "first_visit"]
    assert bronze.select("browser", "first_visit").collect() == [(None, None)]
    assert [r.getMessage() for r in caplog.records] == [
        f"the events table at {path} has new columns: browser, first_visit (the rows written "
        "before read them as NULL)"]


def test_a_property_whose_type_changed_is_refused_with_one_line(spark, tmp_path):
    layout = Layout.of(tmp_path)
    ensure_table(spark, events_table(EventsSettings()), layout)

    with pytest.raises(AbstreamError, match=r"^the events table at .* holds units as bigint, "
                                            r"this version and configuration make it double: "
                                            r"keep its type, or give the property another "
                                            r"name$"):
        ensure_table(spark, events_table(_with_properties(units="double")), layout)


def test_silver_from_before_the_metric_catalog_gains_its_part_columns(spark, tmp_path,
                                                                      caplog):
    """A sessions table written before visits kept their metric parts: the parts column
    and the entries' field are added, the rows written before read them as NULL, and
    visits of this version append."""
    layout = Layout.of(tmp_path)
    entry = StructType([f for f in VISIT_ENTRY.fields if f.name != "exposed_parts"])
    before = StructType([StructField(f.name, ArrayType(entry), f.nullable)
                         if f.name == "experiments" else f
                         for f in SESSIONS.fields if f.name != "metric_parts"])
    path = str(SESSIONS_TABLE.path(layout))
    DeltaTable.create(spark).location(path).addColumns(before) \
        .partitionedBy(*SESSIONS_TABLE.partition_by).execute()
    spark.range(1).select(*(_any_value(f) for f in before.fields)) \
        .write.format("delta").mode("append").save(path)

    with caplog.at_level(logging.INFO, logger="abstream.io.tables"):
        assert ensure_table(spark, SESSIONS_TABLE, layout) == path

    assert [r.getMessage() for r in caplog.records] == [
        f"the sessions table at {path} has new columns: experiments.element.exposed_parts, "
        "metric_parts (the rows written before read them as NULL)"]
    silver = spark.read.format("delta").load(path)
    assert silver.schema["experiments"].dataType.simpleString() == \
        ArrayType(VISIT_ENTRY).simpleString()
    assert silver.select("metric_parts").collect() == [(None,)]
    spark.range(1).select(*(_any_value(f) for f in SESSIONS.fields)) \
        .write.format("delta").mode("append").save(path)
    assert spark.read.format("delta").load(path).count() == 2



def test_creators_of_one_table_at_the_same_moment_all_get_it(spark, tmp_path):
    """A component and a reader of its table may create it at once, in one process: the
    creation that fails on the other's uses the table the other created. (Before, one
    creation in seven raced into that failure: about one round in two below.)"""
    for round_ in range(6):
        layout = Layout.of(tmp_path / str(round_))
        failures: list[str] = []

        def create(spec: TableSpec, layout: Layout = layout,
                   failures: list[str] = failures) -> None:
            try:
                ensure_table(spark, spec, layout)
            except Exception as exc:
                failures.append(f"{spec.name}: {exc}")

        creators = [threading.Thread(target=create, args=(spec,))
                    for spec in TABLES for _ in range(2)]
        for creator in creators:
            creator.start()
        for creator in creators:
            creator.join()
        assert not failures, f"round {round_}: {failures}"
        assert all(Path(spec.path(layout), "_delta_log", f"{0:020}.json").exists()
                   for spec in TABLES)
