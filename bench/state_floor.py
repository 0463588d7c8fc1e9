"""What a live micro-batch's state work costs at a steady state, per state design: the
floor under `make bench-sustained --live`'s hour-long hold.

At a steady state a live stream holds the events of the last gap + lateness (50 minutes by
default): rate x 3,000 events, in rate x 3,000 / ``EVENTS_PER_VISIT`` open visits, spread
over ``sessionize.state_generations`` snapshots (64). A micro-batch of ``--trigger``
seconds brings rate x trigger events, each touching an open visit. State of that size is
written once, in the state's own Parquet layout (sessionize's event schema; each visit's
events spread over the generations as a live stream spreads them), then each design's
state work for one micro-batch is timed, ``--repeat`` times:

- ``events`` (sessionize before its open visits were deltas): the touched visits' events
  read back from every generation (in a live stream every generation holds one of them),
  and a narrow row per open visit read to find them and written again;
- ``index``: no event read back (a visit's figures merged instead): the narrow row per open
  visit (a 64-bit hash of its session, its start and end, its generation) read to find the
  touched ones and written again;
- ``delta_narrow``: the same narrow rows, but a micro-batch writes only those of the visits
  it touched, as a delta of its own; finding the touched ones reads the base and the deltas
  (a compaction folds the deltas into the base every ``--compact-every`` micro-batches);
- ``delta_summaries``: the same, each row with the visit's summary a merge of its next
  events reads (its counters and experiment entries), no event read back;
- ``floor``: the micro-batch's new events written once, what every design pays.

    python -m bench.state_floor [--rate 5000 --rate 10000] [--trigger 10] [--repeat 3]

Prints a table, then one JSON object as the last line; writes it to bench/results/.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

from pyspark.sql import Column, DataFrame, Observation, SparkSession
from pyspark.sql import functions as F

from abstream.config import SparkSettings
from abstream.io.spark import spark_session
from abstream.schemas import SESSION_STATE
from bench.common import RESULTS, folder_bytes, log_progress, machine, write_result

log = logging.getLogger("bench.state_floor")
#: Events per visit in the benchmark dataset (1,976,274 events in 371,392 visits).
EVENTS_PER_VISIT = 5.3
#: Gap + lateness: how long a live stream holds an event (seconds).
HELD_SECONDS = 3_000
GENERATIONS = 64
_EXPERIMENTS = ("checkout_button", "search_ranking", "homepage_banner")


def _uuid(seed: Column, salt: str) -> Column:
    """A session or visitor id shaped as the beacons' (36 characters), from ``seed``."""
    hexed = F.sha2(F.concat(F.lit(salt), seed.cast("string")), 256)
    return F.concat_ws("-", *(hexed.substr(start, length) for start, length in
                              ((1, 8), (9, 4), (13, 4), (17, 4), (21, 12))))


def _time(event: Column) -> Column:
    """The event time of the event of id ``event``: a millisecond apart in arrival order."""
    return F.timestamp_seconds(F.lit(1_800_000_000) + event / 1000)


def _entries(visit: Column) -> Column:
    """The experiment entries every event of ``visit`` lists."""
    return F.array(*(F.struct(F.lit(name).alias("id"),
                              F.when((visit + i) % 2 == 0, "control")
                              .otherwise("treatment").alias("variant"),
                              ((visit + i) % 3 == 0).alias("qualified"))
                     for i, name in enumerate(_EXPERIMENTS)))


def _events(spark: SparkSession, first: int, count: int, visits: int) -> DataFrame:
    """``count`` events (ids from ``first``) in sessionize's state schema: event ``i`` is of
    visit ``i % visits``, so a visit's events are ``visits`` apart in arrival order."""
    visit = F.col("id") % visits
    kinds = F.array(*(F.lit(k) for k in ("pageview", "pageview", "add_to_cart", "order")))
    kind = kinds[(F.col("id") % 4).cast("int")]
    columns = {
        "session_id": _uuid(visit, "s"), "visitor_id": _uuid(visit % (visits // 2 + 1), "v"),
        "event_ts": _time(F.col("id")), "type": kind,
        "revenue": F.when(kind == "order", (F.col("id") % 9000 / 100)).cast("decimal(18,2)"),
        "units": F.when(kind == "order", F.lit(1)).cast("long"),
        "page_load_ms": F.when(kind == "pageview", F.col("id") % 2000).cast("long"),
        "experiments": _entries(visit), "visit_start": _time(visit),
        "counted_in": F.lit(None).cast("timestamp"), "late": F.lit(False),
    }
    return spark.range(first, first + count).select(
        *(columns[field.name].cast(field.dataType).alias(field.name)
          for field in SESSION_STATE.fields))


#: The rows of an index of open visits: narrow (where its events are), or with the
#: visit's summary that a merge of its next events reads (its counters, its entries).
INDEXES = ("narrow", "summaries")


def _index(spark: SparkSession, held: int, visits: int, generations: int, kind: str
           ) -> DataFrame:
    """A row per open visit of the ``held`` events ``_events`` makes: its session's 64-bit
    hash, start, end and the generation that holds its last event, and for ``summaries``
    its counters and entries."""
    visit = F.col("id")
    events = F.ceil((F.lit(held) - visit) / visits)
    last = visit + (events - 1) * visits
    rows = spark.range(visits).select(
        F.xxhash64(_uuid(visit, "s")).alias("key"), _time(visit).alias("visit_start"),
        _time(last).alias("visit_end"),
        F.floor(last * generations / held).cast("int").alias("generation"),
        events.cast("long").alias("events"), _entries(visit).alias("entries"))
    if kind == "narrow":
        return rows.drop("events", "entries")
    return rows.select(
        "*", *((F.col("events") / share).cast("long").alias(name) for name, share in
               (("pageviews", 2), ("add_to_carts", 4), ("orders", 4), ("errors", 20))),
        (F.col("events") * F.lit(11.25)).cast("decimal(38,2)").alias("revenue")
    ).withColumn("entries", F.transform(
        "entries", lambda e: e.withField("exposed_at", F.col("visit_start"))))


class State:
    """Steady-state state of one rate under ``folder``, and one micro-batch's new events."""

    def __init__(self, spark: SparkSession, folder: Path, rate: int, trigger: int,
                 generations: int = GENERATIONS) -> None:
        self.spark, self.folder, self.generations = spark, folder, generations
        self.held = rate * HELD_SECONDS
        self.visits = int(self.held / EVENTS_PER_VISIT)
        self.new = rate * trigger
        log.info("rate %s/s: writing %s held events of %s open visits", f"{rate:,}",
                 f"{self.held:,}", f"{self.visits:,}")
        # A generation at a time: the events of one micro-batch's worth of arrivals each.
        for generation in range(generations):
            first, end = (self.held * g // generations for g in (generation, generation + 1))
            _events(spark, first, end - first, self.visits).write.mode("overwrite") \
                .parquet(str(self.events / f"generation={generation}"))
        for kind in INDEXES:
            _index(spark, self.held, self.visits, generations, kind).write.mode("overwrite") \
                .parquet(str(self.base(kind)))
        self.batch = 0

    @property
    def events(self) -> Path:
        return self.folder / "events"

    def base(self, kind: str = "narrow") -> Path:
        """The index of ``kind`` as a micro-batch finds it (compacted)."""
        return self.folder / f"index-{kind}"

    def deltas(self, kind: str) -> Path:
        """What the micro-batches since the last compaction wrote of the index of ``kind``."""
        return self.folder / f"deltas-{kind}"

    def arriving(self) -> DataFrame:
        """The next micro-batch's new events: the next ``new`` events of the stream, each
        of an open visit."""
        first = self.held + self.batch * self.new
        return _events(self.spark, first, self.new, self.visits)

    def touched(self, arriving: DataFrame) -> DataFrame:
        return F.broadcast(arriving.select(F.xxhash64("session_id").alias("key")).distinct())


def _rewrite(state: State, index: DataFrame, touched: DataFrame, into: Path) -> None:
    """The narrow rows of every open visit written again, the touched ones updated."""
    updated = index.join(touched, "key", "left_semi") \
        .withColumn("generation", F.lit(state.generations + state.batch))
    index.join(touched, "key", "left_anti").unionByName(updated) \
        .write.mode("overwrite").parquet(str(into))


def _events_design(state: State, arriving: DataFrame) -> int:
    touched = state.touched(arriving)
    index = state.spark.read.parquet(str(state.base()))
    sessions = F.broadcast(arriving.select("session_id").distinct())
    seen = Observation()
    state.spark.read.parquet(str(state.events)).join(sessions, "session_id", "left_semi") \
        .observe(seen, F.count(F.lit(1)).alias("rows")) \
        .write.format("noop").mode("overwrite").save()
    _rewrite(state, index, touched, state.folder / "index-next")
    return int(seen.get["rows"])


def _index_design(state: State, arriving: DataFrame) -> int:
    touched = state.touched(arriving)
    index = state.spark.read.parquet(str(state.base()))
    found = index.join(touched, "key", "left_semi").count()
    _rewrite(state, index, touched, state.folder / "index-next")
    return found


def _latest(index: DataFrame, keys: tuple[str, ...]) -> DataFrame:
    """The newest generation's row of ``index`` per ``keys``."""
    values = [c for c in index.columns if c not in (*keys, "generation")]
    return index.groupBy(*keys).agg(
        F.max_by(F.struct(*values), "generation").alias("v"),
        F.max("generation").alias("generation")).select(*keys, "v.*", "generation")


def _delta_design(state: State, arriving: DataFrame, kind: str, compact_every: int) -> int:
    touched = state.touched(arriving)
    base, deltas = state.base(kind), state.deltas(kind)
    index = state.spark.read.parquet(str(base))
    if deltas.exists():
        index = index.unionByName(state.spark.read.parquet(str(deltas)))
    rows = _latest(index.join(touched, "key", "left_semi"), ("key",)) \
        .withColumn("generation", F.lit(state.generations + state.batch)).localCheckpoint()
    rows.write.mode("append").parquet(str(deltas))
    if (state.batch + 1) % compact_every == 0:
        compacted = state.folder / "index-next"
        _latest(state.spark.read.parquet(str(base)).unionByName(
            state.spark.read.parquet(str(deltas))), ("key", "visit_start")) \
            .write.mode("overwrite").parquet(str(compacted))
        shutil.rmtree(deltas)
        shutil.rmtree(base)
        compacted.rename(base)
    return rows.count()


def _floor_design(state: State, arriving: DataFrame) -> int:
    arriving.write.mode("overwrite").parquet(str(state.folder / "new"))
    return state.new


def measure(spark: SparkSession, folder: Path, rate: int, trigger: int, *, repeat: int,
            compact_every: int) -> dict[str, Any]:
    """Each design's seconds per micro-batch at ``rate``, ``repeat`` micro-batches each."""
    state = State(spark, folder, rate, trigger)
    designs: dict[str, Callable[[State, DataFrame], int]] = {
        "floor": _floor_design, "index": _index_design,
        **{f"delta_{kind}": partial(_delta_design, kind=kind, compact_every=compact_every)
           for kind in INDEXES},
        "events": _events_design}
    seconds: dict[str, list[float]] = {name: [] for name in designs}
    found: dict[str, int] = {}
    for round_ in range(repeat + 1):
        for name, design in designs.items():
            arriving = state.arriving().localCheckpoint()
            began = time.monotonic()
            found[name] = design(state, arriving)
            took = time.monotonic() - began
            # The first round compiles and warms the JIT: not counted.
            if round_:
                seconds[name].append(round(took, 2))
            log.info("rate %s/s %-15s %6.2f s%s", f"{rate:,}", name, took,
                     "" if round_ else " (warm-up)")
        state.batch += 1
    return {
        "rate": rate, "held_events": state.held, "open_visits": state.visits,
        "new_events": state.new,
        "events_bytes": folder_bytes(state.events),
        **{f"{kind}_index_bytes": folder_bytes(state.base(kind)) for kind in INDEXES},
        "seconds": seconds,
        "median_seconds": {name: statistics.median(s) for name, s in seconds.items()},
        "rows_found": found,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, action="append",
                        help="events/s of the live stream (repeatable; 5000 and 10000)")
    parser.add_argument("--trigger", type=int, default=10, help="seconds per micro-batch")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--compact-every", type=int, default=30)
    args = parser.parse_args()
    log_progress()
    spark = spark_session(SparkSettings())
    work = RESULTS / "work-state-floor"
    steps = []
    for rate in args.rate or [5_000, 10_000]:
        shutil.rmtree(work, ignore_errors=True)
        steps.append(measure(spark, work, rate, args.trigger, repeat=args.repeat,
                             compact_every=args.compact_every))
    shutil.rmtree(work, ignore_errors=True)
    spark.stop()
    widths = {name: max(len(name), 8) for name in steps[0]["median_seconds"]}
    print(f"{'events/s':>9} {'held':>12} {'visits':>11} "
          + " ".join(f"{name:>{width}}" for name, width in widths.items()))
    for step in steps:
        print(f"{step['rate']:>9,} {step['held_events']:>12,} {step['open_visits']:>11,} "
              + " ".join(f"{step['median_seconds'][name]:>{width - 1}.2f}s"
                         for name, width in widths.items()))
    write_result({"when": datetime.now(UTC).isoformat(timespec="seconds"),
                  "machine": machine(), "trigger_seconds": args.trigger, "steps": steps},
                 "state-floor")
    return 0


if __name__ == "__main__":
    sys.exit(main())
