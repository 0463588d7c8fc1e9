"""A checkpoint with a torn last entry or without its metadata file resumes, and nothing is
written twice."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from abstream.errors import UsageError
from abstream.io.checkpoints import prepare_checkpoint
from abstream.io.tables import EVENTS_TABLE, read_table
from abstream.speed import COMPONENTS
from abstream.speed.runner import run_once
from tests.helpers import beacon, dumps, forget_commits_after, write_lines

TS = "2026-01-05T10:00:00.000Z"
INGEST = [COMPONENTS["ingest"]]


def _land(ctx, name: str, count: int) -> None:
    write_lines(Path(ctx.layout.landing), f"{name}.jsonl",
                [dumps(beacon(f"{name}{i}", TS)) for i in range(count)])


def _two_batches(ctx) -> Path:
    """Ingest has committed batches 0 (3 events) and 1 (2 events)."""
    _land(ctx, "a", 3)
    run_once(ctx, INGEST)
    _land(ctx, "b", 2)
    run_once(ctx, INGEST)
    return Path(ctx.layout.checkpoint("ingest"))


def _bronze(ctx) -> int:
    return read_table(ctx.spark, EVENTS_TABLE, ctx.layout).count()


def test_without_its_metadata_file_a_query_keeps_its_identity_and_writes_nothing_twice(ctx):
    checkpoint = _two_batches(ctx)
    identity = json.loads((checkpoint / "metadata").read_text())["id"]
    # A crash after batch 1 was written but before Spark committed it, and the metadata
    # file lost: Spark would replay batch 1 under a new query id.
    forget_commits_after(checkpoint, 0)
    (checkpoint / "metadata").unlink()
    run_once(ctx, INGEST)
    assert json.loads((checkpoint / "metadata").read_text())["id"] == identity
    assert _bronze(ctx) == 5, "the replayed batch was not appended again"


def test_a_torn_last_commit_is_set_aside_and_its_batch_replayed_once(ctx):
    checkpoint = _two_batches(ctx)
    commit = checkpoint / "commits" / "1"
    commit.write_text(commit.read_text()[:6])
    run_once(ctx, INGEST)
    assert (checkpoint / "commits" / "1.torn").exists()
    assert json.loads(commit.read_text().split("\n")[1]), "batch 1 committed again"
    assert _bronze(ctx) == 5


def test_a_torn_last_plan_is_set_aside_and_planned_again(ctx):
    checkpoint = _two_batches(ctx)
    _land(ctx, "c", 4)
    whole = (checkpoint / "offsets" / "1").read_text()
    (checkpoint / "offsets" / "2").write_text(whole[: len(whole) // 2])
    run_once(ctx, INGEST)
    assert (checkpoint / "offsets" / "2.torn").exists()
    assert (checkpoint / "commits" / "2").exists()
    assert _bronze(ctx) == 9


def test_a_damaged_plan_of_a_committed_batch_is_refused_with_one_line(spark, tmp_path):
    checkpoint = tmp_path / "checkpoint"
    for kind, text in (("offsets", 'v1\n{"batchWatermarkMs":0}\n{"logOffset":0}'),
                       ("commits", 'v1\n{"nextBatchWatermarkMs":0}')):
        (checkpoint / kind).mkdir(parents=True)
        (checkpoint / kind / "0").write_text(text)
    (checkpoint / "commits" / "1").write_text('v1\n{"nextBatchWatermarkMs":0}')
    (checkpoint / "offsets" / "1").write_text('v1\n{"batchWat')
    with pytest.raises(UsageError, match=r"^ingest: checkpoint entry .*/offsets/1 is damaged, "
                                         r"yet its micro-batch was committed; restore"):
        prepare_checkpoint(spark, "ingest", str(checkpoint), [])


def _half_written_first_plan(checkpoint: Path) -> None:
    """As a kill while Spark writes ``offsets/0`` under its temporary name leaves it."""
    offsets = checkpoint / "offsets"
    offsets.mkdir(parents=True)
    (offsets / ".0.0c870e4b-c72f-48ff-bd71-436c41be7da6.tmp").write_text('v1\n{"batchWat')
    (offsets / "..0.0c870e4b-c72f-48ff-bd71-436c41be7da6.tmp.crc").write_bytes(b"crc\0")


def _torn_first_plan(checkpoint: Path) -> None:
    (checkpoint / "offsets").mkdir(parents=True)
    (checkpoint / "offsets" / "0").write_text('v1\n{"batchWat')


@pytest.mark.parametrize("interrupted", [_half_written_first_plan, _torn_first_plan],
                         ids=["temporary file", "torn"])
def test_a_first_plan_a_crash_interrupted_is_planned_anew(ctx, caplog, interrupted):
    """Spark refuses to start a query whose logs are not empty before its first
    micro-batch: what the crash left is removed, with one line saying so."""
    checkpoint = Path(ctx.layout.checkpoint("ingest"))
    interrupted(checkpoint)
    _land(ctx, "a", 3)
    with caplog.at_level(logging.WARNING, logger="abstream.io.checkpoints"):
        run_once(ctx, INGEST)
    assert _bronze(ctx) == 3
    assert sorted(p.name for p in (checkpoint / "offsets").iterdir()) == [".0.crc", "0"]
    assert [r.getMessage().split(";")[0] for r in caplog.records
            if "first micro-batch" in r.getMessage()] == [
        "ingest: its first micro-batch's plan was interrupted (a crash)"]


def test_a_log_that_planned_nothing_yet_holds_commits_is_refused_and_kept(spark, tmp_path):
    checkpoint = tmp_path / "checkpoint"
    _half_written_first_plan(checkpoint)
    (checkpoint / "commits").mkdir()
    (checkpoint / "commits" / "0").write_text('v1\n{"nextBatchWatermarkMs":0}')
    before = sorted(p.relative_to(checkpoint) for p in checkpoint.rglob("*"))
    with pytest.raises(UsageError, match=r"^ingest: checkpoint .* has planned no micro-batch, "
                                         r"yet holds .*/commits/0; restore"):
        prepare_checkpoint(spark, "ingest", str(checkpoint), [])
    assert sorted(p.relative_to(checkpoint) for p in checkpoint.rglob("*")) == before
