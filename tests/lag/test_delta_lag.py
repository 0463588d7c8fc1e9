"""Exact lag on real Delta tables, with commit times pinned to known values."""

import json
import os
import time
from pathlib import Path

import pytest

from abstream.io import deltalog
from abstream.lag.measure import (
    BEHIND,
    CAUGHT_UP,
    ERROR,
    NEVER_RUN,
    SOURCE_MISSING,
    LagMonitor,
    MonitoredSource,
)

T0 = 1_750_000_000  # 2025-06-15T15:06:40Z; version v is committed at T0 + 600 * v
STEP = 600


class Table:
    """A real Delta table whose versions we write and whose commit times we pin."""

    def __init__(self, spark, path: Path, pin: bool = True):
        self.spark, self.path, self.pin = spark, path, pin
        self.sizes: dict[int, list[int]] = {}
        self.adds: dict[int, list[dict]] = {}

    @property
    def log(self) -> Path:
        return self.path / "_delta_log"

    def commit(self, rows: int, files: int) -> int:
        self.spark.range(rows).repartition(files).write.format("delta").mode("append") \
            .save(str(self.path))
        return self._pin()

    def sql(self, statement: str) -> int:
        self.spark.sql(statement.format(t=f"delta.`{self.path}`"))
        return self._pin()

    def _pin(self) -> int:
        version = max(int(p.name[:20]) for p in self.log.glob("*.json"))
        if self.pin:
            os.utime(self.log / f"{version:020d}.json", (T0 + STEP * version,) * 2)
        adds = [json.loads(line)["add"] for line in
                (self.log / f"{version:020d}.json").read_text().splitlines()
                if '"add"' in line]
        self.sizes[version] = [a["size"] for a in adds if a.get("dataChange", True)]
        self.adds[version] = adds
        return version

    def read(self, checkpoint: Path, max_files: int = 1000, **options) -> list[dict]:
        """Run a stream over the table to completion; return its end offset per batch."""
        reader = self.spark.readStream.format("delta").option("maxFilesPerTrigger", max_files)
        for key, value in options.items():
            reader = reader.option(key, value)
        query = reader.load(str(self.path)).writeStream.format("noop") \
            .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()
        query.awaitTermination()
        return [json.loads((checkpoint / "offsets" / str(n)).read_text().splitlines()[2])
                for n in sorted(int(p.name) for p in (checkpoint / "offsets").iterdir()
                                if p.name.isdigit())]


def forget_after(checkpoint: Path, batch: int) -> None:
    """The checkpoint as a query leaves it when it crashed right after batch ``batch``."""
    for kind in ("commits", "offsets"):
        for entry in (checkpoint / kind).iterdir():
            if entry.name.isdigit() and int(entry.name) > batch:
                entry.unlink()


def lag(checkpoint: Path, table: Path, now: float):
    monitor = LagMonitor([MonitoredSource("consumer", str(checkpoint), str(table))],
                         clock=lambda: now)
    (row,) = monitor.rows()
    return row


def seed_rule_lag(checkpoint: Path, table: Table, now: float) -> float:
    """The seed article's rule: versions above the end offset's reservoirVersion."""
    last = max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    end = json.loads((checkpoint / "offsets" / str(last)).read_text().splitlines()[2])
    newer = [v for v in table.sizes if v > end["reservoirVersion"]]
    return now - (T0 + STEP * min(newer)) if newer else 0.0


@pytest.fixture
def table(spark, tmp_path):
    return Table(spark, tmp_path / "table")


def test_never_run_counts_every_data_version(table, tmp_path):
    table.commit(10, 2)
    table.commit(10, 1)
    now = T0 + 3 * STEP
    row = lag(tmp_path / "no-checkpoint", table.path, now)
    assert row.status == NEVER_RUN
    assert row.oldest_unprocessed_version == 0
    assert row.lag_seconds == now - T0
    assert row.unprocessed_versions == 2
    assert row.unprocessed_bytes == sum(table.sizes[0]) + sum(table.sizes[1])
    assert row.latest_version == 1 and row.last_committed_batch is None


def test_caught_up_then_one_new_version_the_seed_rule_misses(table, tmp_path):
    table.commit(10, 2)
    table.commit(10, 2)
    checkpoint = tmp_path / "checkpoint"
    offsets = table.read(checkpoint)
    # Reading a version to its end records the *next* version with index -1.
    assert offsets[-1]["reservoirVersion"] == 2 and offsets[-1]["index"] == -1
    now = T0 + 10 * STEP
    row = lag(checkpoint, table.path, now)
    assert (row.status, row.lag_seconds, row.unprocessed_versions) == (CAUGHT_UP, 0.0, 0)
    assert row.last_processed_version == 1

    new = table.commit(10, 1)
    assert new == 2
    row = lag(checkpoint, table.path, now)
    assert row.status == BEHIND
    assert row.oldest_unprocessed_version == 2
    assert row.lag_seconds == now - (T0 + 2 * STEP)
    assert row.unprocessed_bytes == sum(table.sizes[2])
    assert row.last_processed_version == 1
    assert seed_rule_lag(checkpoint, table, now) == 0.0, "the seed's rule sees nothing"


def test_partially_processed_versions(table, tmp_path):
    table.commit(30, 3)  # version 0: three files
    table.commit(20, 2)  # version 1: two files
    checkpoint = tmp_path / "checkpoint"
    offsets = table.read(checkpoint, max_files=1, startingVersion=0)
    ends = [(o["reservoirVersion"], o["index"], o["isStartingVersion"]) for o in offsets]
    # Reading the last file of a version also passes its end: the offset moves to the next
    # version's base index (-1).
    assert ends == [(0, 0, False), (0, 1, False), (1, -1, False), (1, 0, False),
                    (2, -1, False)]
    now = T0 + 5 * STEP
    v0, v1 = table.sizes[0], table.sizes[1]
    expected = {  # batch -> (oldest unprocessed version, unprocessed bytes)
        0: (0, v0[1] + v0[2] + sum(v1)),
        1: (0, v0[2] + sum(v1)),
        2: (1, sum(v1)),
        3: (1, v1[1]),
    }
    for batch, (oldest, size) in sorted(expected.items(), reverse=True):
        forget_after(checkpoint, batch)
        row = lag(checkpoint, table.path, now)
        assert (row.status, row.oldest_unprocessed_version, row.unprocessed_bytes) == \
            (BEHIND, oldest, size), batch
        assert row.lag_seconds == now - (T0 + STEP * oldest)
        # The seed's rule calls the end offset's version done, in part or wholly unread.
        assert seed_rule_lag(checkpoint, table, now) == (
            now - (T0 + STEP) if oldest == 0 else 0.0)


def test_planned_but_uncommitted_batch_is_not_processed(table, tmp_path):
    table.commit(10, 1)
    table.commit(10, 1)
    checkpoint = tmp_path / "checkpoint"
    table.read(checkpoint, max_files=1, startingVersion=0)
    last = max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    assert lag(checkpoint, table.path, T0 + 5 * STEP).status == CAUGHT_UP
    (checkpoint / "commits" / str(last)).unlink()  # batch `last` was planned, not committed
    row = lag(checkpoint, table.path, T0 + 5 * STEP)
    assert (checkpoint / "offsets" / str(last)).exists()
    assert row.status == BEHIND and row.oldest_unprocessed_version == 1
    assert row.last_committed_batch == last - 1


def test_initial_snapshot_read_file_by_file(table, tmp_path):
    for _ in range(3):
        table.commit(20, 2)  # versions 0, 1, 2 with two files each
    checkpoint = tmp_path / "checkpoint"
    offsets = table.read(checkpoint, max_files=1)
    assert [(o["reservoirVersion"], o["index"], o["isStartingVersion"])
            for o in offsets] == [(2, i, True) for i in range(5)] + [(3, -1, False)]
    now = T0 + 9 * STEP
    # The snapshot lists files by modification time: version 0's, then 1's, then 2's.
    expected = {0: (0, 3), 1: (1, 2), 2: (1, 2), 3: (2, 1), 4: (2, 1)}
    for batch, (oldest, versions) in sorted(expected.items(), reverse=True):
        forget_after(checkpoint, batch)
        row = lag(checkpoint, table.path, now)
        assert (row.oldest_unprocessed_version, row.unprocessed_versions) == (oldest, versions)
        assert row.lag_seconds == now - (T0 + STEP * oldest)
        assert row.unprocessed_bytes == sum(
            sorted_snapshot_sizes(table)[batch + 1:]), batch


def sorted_snapshot_sizes(table):
    files = []
    for version in sorted(table.sizes):
        for line in (table.log / f"{version:020d}.json").read_text().splitlines():
            if '"add"' in line:
                add = json.loads(line)["add"]
                files.append((add["modificationTime"], add["path"], add["size"]))
    return [size for _, _, size in sorted(files)]


def test_housekeeping_versions_are_not_unprocessed_data(table, tmp_path):
    for _ in range(3):
        table.commit(20, 2)
    checkpoint = tmp_path / "checkpoint"
    table.read(checkpoint)
    optimize = table.sql("OPTIMIZE {t}")
    properties = table.sql("ALTER TABLE {t} SET TBLPROPERTIES ('abstream.note' = 'x')")
    assert (optimize, properties) == (3, 4)
    row = lag(checkpoint, table.path, T0 + 20 * STEP)
    assert (row.status, row.lag_seconds, row.unprocessed_versions) == (CAUGHT_UP, 0.0, 0)
    assert row.latest_version == 4 and row.last_processed_version == 4
    assert seed_rule_lag(checkpoint, table, T0 + 20 * STEP) > 0, \
        "counting versions, the seed's rule would page"


def test_lag_grows_with_the_wall_clock_while_the_consumer_is_stopped(table, tmp_path):
    table.commit(10, 1)
    checkpoint = tmp_path / "checkpoint"
    table.read(checkpoint)
    table.commit(10, 1)
    monitor = LagMonitor([MonitoredSource("c", str(checkpoint), str(table.path))])
    ticks = iter([T0 + 2 * STEP, T0 + 2 * STEP + 100])
    monitor.clock = lambda: next(ticks)
    first, second = monitor.rows()[0], monitor.rows()[0]
    assert second.lag_seconds - first.lag_seconds == 100


def test_missing_table_wrong_table_and_empty_table(spark, table, tmp_path):
    row = lag(tmp_path / "checkpoint", tmp_path / "nowhere", T0)
    assert row.status == SOURCE_MISSING
    table.commit(10, 1)
    checkpoint = tmp_path / "checkpoint"
    table.read(checkpoint)
    other = Table(spark, tmp_path / "other")
    other.commit(5, 1)
    row = lag(checkpoint, other.path, T0)
    assert row.status == ERROR and "reads no table" in row.detail
    empty = tmp_path / "empty"
    spark.sql(f"CREATE TABLE delta.`{empty}` (id BIGINT) USING delta")
    row = lag(tmp_path / "never", empty, T0)
    assert (row.status, row.lag_seconds, row.unprocessed_versions) == (NEVER_RUN, 0.0, 0)


def test_snapshot_when_early_commits_are_gone(spark, tmp_path):
    table = Table(spark, tmp_path / "table", pin=False)  # file times are real: commits too
    table.sql("CREATE TABLE {t} (id BIGINT) USING delta "
              "TBLPROPERTIES ('delta.checkpointInterval' = '2')")
    for _ in range(3):
        table.commit(10, 1)
    assert (table.log / f"{2:020d}.checkpoint.parquet").exists()
    adds = {v: table.adds[v] for v in (1, 2, 3)}
    for version in (0, 1):  # log clean-up: the checkpoint at 2 now stands for them
        (table.log / f"{version:020d}.json").unlink(missing_ok=True)
    now = time.time() + 100
    row = lag(tmp_path / "never", table.path, now)
    assert row.status == NEVER_RUN
    assert row.unprocessed_bytes == sum(a["size"] for files in adds.values() for a in files)
    # Files from before the replayed commits count from their own modification time.
    oldest_ms = adds[1][0]["modificationTime"]
    assert row.lag_seconds == pytest.approx(now - oldest_ms / 1000, abs=0.001)
    assert row.oldest_unprocessed_version is None
    assert row.unprocessed_versions == 2


def test_a_monitor_lets_go_of_the_commits_behind_its_consumers(spark, tmp_path, monkeypatch):
    """A monitor that follows a table for days holds the commits since its slowest
    consumer's position (from the checkpoint before it), not every commit it has read, and
    measures the same lag as a fresh one."""
    monkeypatch.setattr(deltalog, "FORGET_AFTER", 2)
    # Real commit times: Delta would clean up commits pinned years back at its checkpoints.
    table = Table(spark, tmp_path / "table", pin=False)
    table.sql("CREATE TABLE {t} (id BIGINT) USING delta "
              "TBLPROPERTIES ('delta.checkpointInterval' = '2')")
    for _ in range(5):
        table.commit(10, 1)
    table.read(tmp_path / "consumer")  # read to version 5: its position is (6, -1)
    for _ in range(3):
        table.commit(10, 2)
    now = time.time() + 100
    source = MonitoredSource("consumer", str(tmp_path / "consumer"), str(table.path))
    monitor = LagMonitor([source], clock=lambda: now)
    (first,) = monitor.rows()
    reader = monitor.table(str(table.path))
    assert min(reader.versions) == 5, "the checkpoint at 4 stands for versions 0-4; 6 is not read"
    (again,) = monitor.rows()
    (fresh,) = LagMonitor([source], clock=lambda: now).rows()
    assert first == again == fresh
    assert first.status == BEHIND
    assert first.unprocessed_versions == 3
    # A consumer without a position yet needs every commit: nothing is let go.
    never = LagMonitor([source, MonitoredSource("new", str(tmp_path / "new"),
                                                str(table.path))], clock=lambda: now)
    never.rows()
    assert min(never.table(str(table.path)).versions) == 0
