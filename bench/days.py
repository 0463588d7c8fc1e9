"""How every table, checkpoint, state folder and log of the speed layer grows over days of
event time, with ``abstream maintain`` on its documented schedule.

A fast-forward, not a live run: one generated day of beacons (``--events-per-day``, its
event times spread over the 24 hours of 2026-01-05) is landed ``--days`` times into the
landing folder of ``abstream run`` (ingest and sessionize side by side, continuously, as
``make bench-sustained`` starts them, metrics endpoint on). Day ``d`` is the base day with
its event times ``d`` days later and its event, session and visitor ids prefixed with
``d`` (``next_round``), so the event times run over consecutive days. A day lands in
``--slices-per-day`` pieces in arrival order (24: an hour of the day's traffic each), the
next when ingest has taken the last one in (one piece per ingest micro-batch at most, so a
day is dozens of micro-batches as a day of a live stream is thousands, not one).

Once every component is caught up on the day (every lag row of the endpoint
``caught_up``), ``abstream maintain --json`` runs in a JVM of its own beside the pipeline,
as its documented daily cron job does (``15 3 * * * abstream maintain``, see
docs/batch-layer.md#maintenance): once per replayed day. Delta writes its log checkpoints
itself (every 10 commits); maintain does not touch the logs or the streaming checkpoints.
Then, per day: rows, live (snapshot) and stored (in the folder) data files and bytes, and
``_delta_log`` files and bytes of each pipeline table; files and bytes of each component's
checkpoint folder (and of its parts), of sessionize's state snapshots; the Delta log files
in all; ``--scrapes`` timed GETs of /metrics (median and max, and the exporter's own
``abstream_lag_scrape_duration_seconds``).

The check: for each series, its growth from the middle day to the last against the growth
of its data, as an exponent (``log(value growth) / log(data growth)``: 0 flat, 1
proportional). Table data (live and stored bytes) should track the table's rows (exponent
0.75-1.25: bytes per row about constant); logs, checkpoints, state, scrape time and what a
daily maintain run does (the bytes it rewrites per table, its seconds) should be bounded
against the records landed (exponent at most 0.25). Each series also has its per-day growth
ratio (value over the day before's) beside its data's. Every series is reported, failing or
not, and the exit status is 1 when one fails.

What a fast-forward cannot show: what waits for the wall clock. VACUUM deletes a file only
7 days (``delta.deletedFileRetentionDuration``) after a compaction removed it, Delta
deletes log files 30 days (``delta.logRetentionDuration``) after their commit; a run of
minutes reaches neither. And maintain compacts a day partition once its day ended
``maintain.closed_after`` ago by the wall clock, which the replayed days (January 2026)
always have: each run compacts the day just landed too.

    python -m bench.days [--days 7] [--events-per-day 2000000] [--seed 1]
        [--slices-per-day 24] [--scrapes 7]

Logs a table as the days go, then one JSON object as the last line; writes it to
bench/results/ and the run's log to bench/results/days-run.log.
"""

from __future__ import annotations

import argparse
import logging
import math
import shutil
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pyarrow.parquet as pq
from prometheus_client.parser import text_string_to_metric_families
from tests.servers import free_port

from abstream import topology
from abstream.generator.write import DEFAULT_START
from abstream.io.deltalog import DeltaLogReader
from abstream.lag.measure import CAUGHT_UP
from abstream.layout import Layout
from abstream.maintain.vacuum import stored_files
from abstream.rendering import render_table
from abstream.speed import ingest, sessionize
from bench.common import (
    COMPONENTS,
    EVENTS_PER_DAY,
    RESULTS,
    dataset,
    log_progress,
    machine,
    move_event_times,
    next_round,
    records_in,
    write_result,
)
from bench.maintain import maintain_tables
from bench.sustained import TRIGGERS, start_pipeline, stop_pipeline

log = logging.getLogger("bench.days")
DAY_SECONDS = 86_400
#: How long any wait (a piece taken in, a day processed) may take before the run gives up.
WAIT_SECONDS = 1800.0
POLL_SECONDS = 0.5
#: Exponent bounds of the verdicts: data that tracks its rows, and what should be bounded.
PROPORTIONAL = (0.75, 1.25)
BOUNDED = 0.25
GOLD = topology.EXPERIMENT_METRICS


def replayed(text: str, day: int) -> str:
    """The base day's lines ``text`` as replayed day ``day``: ids of the day's round
    (``next_round``), event times ``day`` days later (malformed ones as they are)."""
    return move_event_times(next_round(text, day), lambda ts: ts + day * DAY_SECONDS)


def slices(files: list[Path], records: int, pieces: int) -> Iterator[str]:
    """The lines of ``files`` in order, in ``pieces`` consecutive runs of about equal size."""
    size = math.ceil(records / pieces)
    lines: list[str] = []
    for path in files:
        with path.open() as handle:
            for line in handle:
                lines.append(line)
                if len(lines) == size:
                    yield "".join(lines)
                    lines = []
    if lines:
        yield "".join(lines)


@dataclass
class Reading:
    """One GET of the metrics endpoint: how long it took, and what it said."""

    seconds: float
    #: (component, source) -> status
    status: dict[tuple[str, str], str] = field(default_factory=dict)
    committed: dict[str, float] = field(default_factory=dict)
    state_rows: dict[str, float] = field(default_factory=dict)
    exporter_seconds: float = 0.0

    def caught_up(self, component: str | None = None) -> bool:
        """Whether every lag row (of ``component``, or of all) is caught up."""
        found = [s for (name, _), s in self.status.items() if component in (None, name)]
        return bool(found) and all(s == CAUGHT_UP for s in found)


def read(url: str) -> Reading | None:
    """A timed GET of the endpoint; None while it is not serving."""
    began = time.perf_counter()
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            text = response.read().decode()
    except OSError:
        return None
    found = Reading(time.perf_counter() - began)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = sample.labels
            if sample.name == "abstream_component_status" and sample.value == 1:
                found.status[(labels["component"], labels["source"])] = labels["status"]
            elif sample.name == "abstream_component_last_committed_batch":
                found.committed[labels["component"]] = sample.value
            elif sample.name == "abstream_query_state_rows":
                found.state_rows[labels["job"]] = sample.value
            elif sample.name == "abstream_lag_scrape_duration_seconds":
                found.exporter_seconds = sample.value
    return found


def wait_for(url: str, child: subprocess.Popen, done: Callable[[Reading], bool],
             what: str) -> Reading:
    """Poll the endpoint until ``done`` holds; the run's end or ``WAIT_SECONDS`` end it."""
    began = time.monotonic()
    while True:
        if child.poll() is not None:
            raise SystemExit(f"abstream run exited with {child.returncode} while waiting "
                             f"for {what}")
        found = read(url)
        if found is not None and done(found):
            return found
        if time.monotonic() - began > WAIT_SECONDS:
            raise SystemExit(f"{what}: still not done after {WAIT_SECONDS:.0f} s")
        time.sleep(POLL_SECONDS)


def size_of(paths: list[Path]) -> dict[str, int]:
    return {"files": len(paths), "bytes": sum(p.stat().st_size for p in paths)}


def files_below(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file()] if folder.exists() else []


def table_figures(location: Path) -> dict[str, int]:
    """Rows (from the Parquet footers of the live files), live and stored data files and
    bytes, ``_delta_log`` files and bytes (Hadoop's hidden checksums aside), its Delta
    checkpoints and versions."""
    reader = DeltaLogReader(str(location))
    reader.refresh()
    if reader.latest_version is None:
        return {}
    live = reader.snapshot_files(reader.latest_version)
    stored = stored_files(str(location))
    logs = [p for p in (location / "_delta_log").iterdir()
            if p.is_file() and not p.name.startswith(".")]
    return {"rows": sum(pq.read_metadata(location / unquote(f.path)).num_rows for f in live),
            "live_files": len(live), "live_bytes": sum(f.size for f in live),
            "stored_files": stored.files, "stored_bytes": stored.bytes,
            "log_files": len(logs), "log_bytes": sum(p.stat().st_size for p in logs),
            "log_checkpoints": sum(".checkpoint." in p.name for p in logs),
            "versions": reader.latest_version + 1}


def checkpoint_figures(folder: Path) -> dict[str, Any]:
    """Files and bytes of a component's checkpoint, in all and per top-level part."""
    return {**size_of(files_below(folder)),
            "parts": {part.name: size_of(files_below(part) if part.is_dir() else [part])
                      for part in sorted(folder.iterdir())} if folder.exists() else {}}


def measure(work: Path, url: str, scrapes: int) -> dict[str, Any]:
    """Everything a day is judged by, the pipeline caught up."""
    layout = Layout.of(work)
    tables = {name: table_figures(Path(layout.table(name))) for name in topology.PIPELINE_TABLES}
    checkpoints = {c.name: checkpoint_figures(Path(layout.checkpoint(c.name)))
                   for c in COMPONENTS}
    state = Path(layout.checkpoint(sessionize.NAME)) / "state"
    readings = [reading for _ in range(scrapes) if (reading := read(url)) is not None]
    if not readings:
        raise SystemExit("the metrics endpoint did not answer")
    scrape_ms = [r.seconds * 1000 for r in readings]
    return {
        "tables": tables,
        "checkpoints": checkpoints,
        "state": {**size_of(files_below(state)),
                  "snapshots": len(list(state.glob("batch=*"))) if state.exists() else 0,
                  "rows": readings[-1].state_rows.get(sessionize.NAME, 0.0)},
        "delta_log_files": sum(t.get("log_files", 0) for t in tables.values()),
        "landing": size_of(files_below(work / topology.LANDING)),
        "micro_batches": {name: int(batch) + 1 for name, batch in readings[-1].committed.items()},
        "scrape_ms": {"samples": [round(ms, 2) for ms in scrape_ms],
                      "median": round(statistics.median(scrape_ms), 2),
                      "max": round(max(scrape_ms), 2),
                      "exporter_median": round(statistics.median(
                          r.exporter_seconds * 1000 for r in readings), 2)},
    }


def maintained(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """Per table, what one maintain run did: partitions compacted, files merged, files
    vacuumed and why (or why not)."""
    return {r["table"]: {"compacted": len(r["compacted"]),
                         "files_compacted": sum(c["files_removed"] for c in r["compacted"]),
                         "bytes_compacted": sum(c["bytes_removed"] for c in r["compacted"]),
                         "vacuumed_files": (r["vacuumed"] or {}).get("files", 0),
                         "vacuum": (r["retention"] or {}).get("reason"),
                         "seconds": r["seconds"]}
            for r in reports if r["exists"]}


def land_day(day: int, pieces: Iterator[str], landing: Path, url: str,
             child: subprocess.Popen) -> int:
    """Land the pieces of day ``day``, each once ingest took in the one before; the lines
    landed."""
    lines = 0
    for index, text in enumerate(pieces):
        name = f"beacons-day{day:02d}-{index:04d}.jsonl"
        hidden = landing / f".{name}"
        hidden.write_text(replayed(text, day))
        hidden.rename(landing / name)
        lines += text.count("\n")
        wait_for(url, child, lambda r: r.caught_up(ingest.NAME), f"ingest to take in {name}")
    return lines


def judge(values: list[float], data: list[float], expect: str) -> dict[str, Any]:
    """A series against its data: per-day growth ratios of both, and the growth exponent
    from the middle day to the last with its verdict (``ok`` False when it fails)."""
    def ratios(series: list[float]) -> list[float | None]:
        return [round(b / a, 3) if a else None for a, b in pairwise(series)]

    judged: dict[str, Any] = {"expect": expect, "values": values, "growth": ratios(values),
                              "data_growth": ratios(data)}
    first = (len(values) - 1) // 2
    if len(values) < 2 or data[-1] <= data[first] or data[first] <= 0:
        return {**judged, "exponent": None, "verdict": "not judged: its data did not grow",
                "ok": True}
    before, after = values[first], values[-1]
    if before <= 0:
        exponent = 0.0 if after <= 0 else None
    else:
        exponent = math.log(after / before) / math.log(data[-1] / data[first]) \
            if after > 0 else -math.inf
    if exponent is None:
        verdict, ok = "grows from nothing", expect != "bounded"
    elif expect == "bounded":
        ok = exponent <= BOUNDED
        verdict = "bounded" if ok else "grows faster than its data" \
            if exponent > PROPORTIONAL[1] else "grows with its data"
    else:
        ok = exponent <= PROPORTIONAL[1]
        verdict = "tracks its data" if PROPORTIONAL[0] <= exponent <= PROPORTIONAL[1] else \
            "grows slower than its data" if ok else "grows faster than its data"
    return {**judged, "exponent": None if exponent is None or math.isinf(exponent)
            else round(exponent, 3), "verdict": verdict, "ok": ok}


def checks(days: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Every series of the run with its verdict: each table's data bytes against its rows;
    logs, checkpoints, state, Delta log files, scrape times and each maintain run's work
    (bytes it rewrote per table, its seconds) against the records landed."""
    landed = [float(d["records_landed"]) for d in days]

    def series(get: Callable[[dict[str, Any]], float]) -> list[float]:
        return [float(get(d)) for d in days]

    found: dict[str, dict[str, Any]] = {}
    for name in topology.PIPELINE_TABLES:
        rows = series(lambda d, n=name: d["tables"][n].get("rows", 0))
        for kind in ("live_bytes", "stored_bytes"):
            found[f"{name}.{kind}"] = {
                "against": f"{name} rows",
                **judge(series(lambda d, n=name, k=kind: d["tables"][n].get(k, 0)), rows,
                        "proportional")}
        for kind in ("log_bytes", "log_files"):
            found[f"{name}.{kind}"] = {
                "against": "records landed",
                **judge(series(lambda d, n=name, k=kind: d["tables"][n].get(k, 0)), landed,
                        "bounded")}
    bounded: dict[str, Callable[[dict[str, Any]], float]] = {
        **{f"checkpoint.{c.name}.{kind}": (lambda d, n=c.name, k=kind: d["checkpoints"][n][k])
           for c in COMPONENTS for kind in ("bytes", "files")},
        "state.bytes": lambda d: d["state"]["bytes"],
        "state.files": lambda d: d["state"]["files"],
        "delta_log_files": lambda d: d["delta_log_files"],
        "scrape_ms.median": lambda d: d["scrape_ms"]["median"],
        "scrape_ms.max": lambda d: d["scrape_ms"]["max"],
        "scrape_ms.exporter_median": lambda d: d["scrape_ms"]["exporter_median"],
        **{f"maintain.{name}.bytes_compacted":
           (lambda d, n=name: d["maintain"].get(n, {}).get("bytes_compacted", 0))
           for name in topology.PIPELINE_TABLES},
        "maintain.seconds": lambda d: d["seconds"]["maintain"],
    }
    for name, get in bounded.items():
        found[name] = {"against": "records landed", **judge(series(get), landed, "bounded")}
    return found


def _mib(count: float) -> str:
    return f"{count / 2**20:,.1f}"


def _kib(count: float) -> str:
    return f"{count / 2**10:,.0f}"


#: Gold in the table is ``experiment_metrics``; the JSON has ``definition_metrics`` too.
HEADER = ["day", "date", "records", "bronze rows", "silver rows", "gold rows",
          *(f"{layer} {what}" for layer in ("bronze", "silver", "gold")
            for what in ("MiB live/stored", "files live/stored", "log KiB/files")),
          "ckpt ingest KiB/files", "ckpt sessionize KiB/files (no state)", "state KiB/files",
          "delta log files", "scrape ms p50/max", "s"]


def row(day: dict[str, Any]) -> list[str]:
    tables = day["tables"]

    def data(name: str) -> list[str]:
        table = tables[name]
        return [f"{_mib(table.get('live_bytes', 0))}/{_mib(table.get('stored_bytes', 0))}",
                f"{table.get('live_files', 0)}/{table.get('stored_files', 0)}",
                f"{_kib(table.get('log_bytes', 0))}/{table.get('log_files', 0)}"]

    ingested, sessionized, state = (day["checkpoints"][ingest.NAME],
                                     day["checkpoints"][sessionize.NAME], day["state"])
    return [str(day["day"]), day["date"], f"{day['records_landed']:,}",
            *(f"{tables[n].get('rows', 0):,}" for n in (topology.EVENTS, topology.SESSIONS,
                                                        GOLD)),
            *data(topology.EVENTS), *data(topology.SESSIONS), *data(GOLD),
            f"{_kib(ingested['bytes'])}/{ingested['files']}",
            f"{_kib(sessionized['bytes'] - state['bytes'])}/"
            f"{sessionized['files'] - state['files']}",
            f"{_kib(state['bytes'])}/{state['files']}", str(day["delta_log_files"]),
            f"{day['scrape_ms']['median']:.1f}/{day['scrape_ms']['max']:.1f}",
            f"{day['seconds']['day']:.0f}"]


def progress_line(cells: list[str]) -> str:
    return "  ".join(cell.rjust(max(len(title), 9)) for cell, title in zip(cells, HEADER,
                                                                              strict=True))


def run(args: argparse.Namespace) -> dict[str, Any]:
    base = dataset(args.events_per_day, args.seed, per_day=args.events_per_day)
    records = records_in(base)
    files = sorted(base.glob("beacons-*"))
    work = RESULTS / "work-days"
    shutil.rmtree(work, ignore_errors=True)
    landing = work / topology.LANDING
    landing.mkdir(parents=True)
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    began = time.monotonic()
    log.info("%d days of %s beacons each: starting abstream run", args.days, f"{records:,}")
    child = start_pipeline(work, port, TRIGGERS)
    days: list[dict[str, Any]] = []
    landed = 0
    try:
        wait_for(url, child, lambda _: True, "the metrics endpoint")
        log.info("%s", progress_line(HEADER))
        for day in range(args.days):
            day_began = time.monotonic()
            landed += land_day(day, slices(files, records, args.slices_per_day), landing,
                               url, child)
            wait_for(url, child, Reading.caught_up, f"day {day} to be processed")
            processed = time.monotonic() - day_began
            reports, maintain_seconds = maintain_tables(str(work))
            wait_for(url, child, Reading.caught_up, f"the pipeline after maintain on day {day}")
            figures = {
                "day": day + 1,
                "date": (DEFAULT_START + timedelta(days=day)).date().isoformat(),
                "records_landed": landed,
                **measure(work, url, args.scrapes),
                "maintain": maintained(reports),
                "seconds": {"day": round(time.monotonic() - day_began, 1),
                            "landed_and_processed": round(processed, 1),
                            "maintain": round(maintain_seconds, 1)},
            }
            days.append(figures)
            log.info("%s", progress_line(row(figures)))
    finally:
        stop_pipeline(child)
        shutil.move(work / "run.log", RESULTS / "days-run.log")
        shutil.rmtree(work, ignore_errors=True)
    return {
        "benchmark": "days",
        "days": args.days, "events_per_day": args.events_per_day, "records_per_day": records,
        "seed": args.seed, "slices_per_day": args.slices_per_day, "scrapes": args.scrapes,
        "triggers": TRIGGERS,
        "maintain_schedule": "abstream maintain --json once per replayed day, after the day "
                             "is processed (the documented daily cron job)",
        "per_day": days,
        "checks": checks(days),
        "seconds": round(time.monotonic() - began, 1),
        "machine": machine(),
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=int, default=7)
    parser.add_argument("--events-per-day", type=int, default=EVENTS_PER_DAY)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--slices-per-day", type=int, default=24,
                        help="pieces a day lands in, one per ingest micro-batch at most")
    parser.add_argument("--scrapes", type=int, default=7,
                        help="timed GETs of the metrics endpoint after each day")
    args = parser.parse_args()
    if args.days < 1 or args.events_per_day < 1 or args.slices_per_day < 1 or args.scrapes < 1:
        parser.error("--days, --events-per-day, --slices-per-day and --scrapes must be positive")
    log_progress()
    result = run(args)
    log.info("\n%s", render_table([HEADER, *(row(day) for day in result["per_day"])],
                                  left=(1,)))
    failing = [name for name, check in result["checks"].items() if not check["ok"]]
    for name, check in result["checks"].items():
        exponent = "-" if check["exponent"] is None else f"{check['exponent']:.2f}"
        log.info("%-34s %-12s exponent %6s  per day %s  (data %s)  %s%s", name, check["expect"],
                 exponent, check["growth"], check["data_growth"], check["verdict"],
                 "" if check["ok"] else "  FAILS")
    result["failing"] = failing
    write_result(result, "days")
    return 1 if failing else 0


if __name__ == "__main__":
    sys.exit(main())
