"""`make bench-state-floor`: the steady state it builds spreads each open visit's events
over the generations as a live stream does, and each design finds what a micro-batch
touches."""

from pathlib import Path

from bench.state_floor import INDEXES, State, _delta_design, _events_design, _index_design
from pyspark.sql import SparkSession
from pyspark.sql import functions as F


def test_each_design_finds_the_visits_a_micro_batch_touches(spark: SparkSession,
                                                            tmp_path: Path) -> None:
    state = State(spark, tmp_path, rate=4, trigger=5, generations=8)
    assert (state.held, state.visits, state.new) == (12_000, 2_264, 20)
    held = spark.read.parquet(str(state.events))
    spread = held.groupBy("session_id").agg(
        F.count(F.lit(1)).alias("events"), F.count_distinct("generation").alias("in"))
    assert spread.count() == state.visits
    assert spread.agg(F.min("events"), F.max("events")).first() == (5, 6)
    assert spread.agg(F.min("in")).first()[0] == 5, "a visit's events in five generations"
    assert held.agg(F.max("generation")).first()[0] == 7

    arriving = state.arriving().localCheckpoint()
    assert arriving.select("session_id").distinct().count() == state.new
    assert 5 * state.new <= _events_design(state, arriving) <= 6 * state.new
    assert _index_design(state, arriving) == state.new
    for kind in INDEXES:
        assert _delta_design(state, arriving, kind, compact_every=1) == state.new
        base = spark.read.parquet(str(state.base(kind)))
        assert base.count() == state.visits, "compacted: a row per open visit"
        assert base.where(F.col("generation") == 8).count() == state.new
    summaries = spark.read.parquet(str(state.base("summaries")))
    assert summaries.agg(F.sum("events")).first()[0] == state.held
