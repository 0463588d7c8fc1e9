"""Whether and with what retention VACUUM runs: real tables, commit times pinned."""

from datetime import timedelta

from abstream.lag.measure import MonitoredSource
from abstream.maintain.retention import readers_of, retention_for
from tests.lag.test_delta_lag import STEP, T0, Table

HOUR = 3600
#: Ten days after the table's first commit: past Delta's default retention of a week.
NOW_MS = (T0 + 10 * 24 * HOUR) * 1000


def _retention(spark, table, readers, margin=timedelta(hours=1)):
    return retention_for(spark, str(table.path), readers, margin, NOW_MS)


def test_vacuum_waits_for_a_reader_lagging_past_the_tables_own_retention(spark, tmp_path):
    table = Table(spark, tmp_path / "table")
    table.commit(10, 1)
    checkpoint = tmp_path / "checkpoint"
    table.read(checkpoint)
    table.commit(10, 1)  # version 1, committed at T0 + STEP: not processed yet
    table.sql("OPTIMIZE {t}")
    reader = MonitoredSource("lagging", str(checkpoint), str(table.path))

    retention = _retention(spark, table, [reader])
    assert retention.hours is None and retention.bound_by == "lagging"
    assert retention.table_hours == 168
    needed_hours = (NOW_MS / 1000 - (T0 + STEP)) / HOUR + 1
    assert "since version 1" in retention.reason and f"{needed_hours:,.1f} h" in retention.reason

    table.read(checkpoint)
    caught_up = _retention(spark, table, [reader])
    assert (caught_up.hours, caught_up.bound_by) == (168, None)
    assert "every reader caught up" in caught_up.reason


def test_a_reader_that_never_ran_keeps_everything_since_the_first_commit(spark, tmp_path):
    table = Table(spark, tmp_path / "table")
    table.commit(10, 1)
    table.commit(10, 1)
    never = MonitoredSource("newcomer", str(tmp_path / "no-checkpoint"), str(table.path))
    table.sql("ALTER TABLE {t} SET TBLPROPERTIES "
              "('delta.deletedFileRetentionDuration' = 'interval 240 hours')")
    # Version 0 was committed at T0, 240 hours ago: just within the table's own retention.
    within = _retention(spark, table, [never], margin=timedelta(0))
    assert (within.hours, within.bound_by) == (240, None)
    beyond = _retention(spark, table, [never], margin=timedelta(seconds=1))
    assert beyond.hours is None and beyond.bound_by == "newcomer"
    assert "has never run: it may read from version 0" in beyond.reason


def test_the_tables_own_retention_and_the_margin(spark, tmp_path):
    table = Table(spark, tmp_path / "table")
    table.sql("CREATE TABLE {t} (id BIGINT) USING delta "
              "TBLPROPERTIES ('delta.deletedFileRetentionDuration' = 'interval 30 days')")
    assert _retention(spark, table, []).hours == 30 * 24
    table.sql("ALTER TABLE {t} SET TBLPROPERTIES "
              "('delta.deletedFileRetentionDuration' = 'interval 0 hours')")
    assert _retention(spark, table, [], margin=timedelta(0)).hours == 0
    short = _retention(spark, table, [], margin=timedelta(minutes=90))
    assert short.hours is None and "90 minutes margin" in short.reason


def test_readers_are_matched_to_the_table_they_read(tmp_path):
    table = tmp_path / "events"
    mine = MonitoredSource("a", "cp", f"file://{table}/")
    other = MonitoredSource("b", "cp", str(tmp_path / "sessions"))
    assert readers_of(str(table), [mine, other]) == [mine]
