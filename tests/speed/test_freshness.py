"""An order reaches gold within seconds of arriving, long before its visit closes, for the
assigned population and, after an exposure earlier in its visit, for the qualified one."""

import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from abstream.io.tables import METRICS_TABLE, SESSIONS_TABLE, read_table
from abstream.speed import pipeline_components
from abstream.speed.runner import run_continuously
from tests.helpers import beacon, dumps, reconfigure, wait_until, write_lines


@pytest.mark.slow
def test_an_order_is_in_gold_seconds_after_it_lands(ctx):
    for section in ("ingest", "sessionize"):
        ctx = reconfigure(ctx, section, trigger=timedelta(seconds=1))
    stop = threading.Event()
    runner = threading.Thread(target=run_continuously,
                              args=(ctx, pipeline_components(ctx.config), stop))
    now = datetime.now(UTC)
    ts = now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond // 1000:03d}Z"
    entries = [{"id": "exp", "variant": "treatment", "qualified": True}]
    listed = [{"id": "exp", "variant": "treatment", "qualified": False}]
    runner.start()
    try:
        write_lines(Path(ctx.layout.landing), "warm.jsonl",
                    [dumps(beacon("w1", ts, session="w", experiments=entries))])
        wait_until(lambda: _gold_orders(ctx) is not None, "gold rows", 180)
        landed = time.monotonic()
        write_lines(Path(ctx.layout.landing), "order.jsonl", [
            dumps(beacon("x1", ts, session="s", experiments=entries)),
            dumps(beacon("o1", ts, session="s", experiments=listed, kind="order",
                         revenue=42.5, units=1))])
        wait_until(lambda: _gold_orders(ctx) == (1, 1), "the order in gold", 60)
        seconds = time.monotonic() - landed
    finally:
        stop.set()
        runner.join(timeout=120)
    print(f"order landed -> in gold: {seconds:.1f} s")
    assert seconds < 30
    assert read_table(ctx.spark, SESSIONS_TABLE, ctx.layout).count() == 0, \
        "the visit is still open: the order did not wait for it"


def _gold_orders(ctx):
    """(assigned, qualified) orders in gold, None before any row."""
    gold = read_table(ctx.spark, METRICS_TABLE, ctx.layout)
    rows = {r["population"]: r["n"] for r in
            gold.groupBy("population").agg(F.sum("orders").alias("n")).collect()}
    return (rows["assigned"], rows.get("qualified")) if rows else None
