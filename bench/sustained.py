"""The highest rate the speed layer sustains with every component's lag under a bound.

A step runs ``abstream run`` (ingest and sessionize side by side, each on its own trigger,
its metrics endpoint on) in a fresh data folder and lands the throughput benchmark's
generated files in its landing folder at a fixed rate, each stamped with the time it
landed, as a client's upload would be. Every 5 seconds it reads each component's lag
(``abstream_component_lag_seconds``, the lag monitor's own figure, the largest over the
component's sources), the rows each component holds in state (sessionize: the events of
the open visits) and each component's last micro-batch's duration from the endpoint, and
itself the bytes of sessionize's state snapshots on disk and the resident memory of the
run's process tree. The first ``--warmup`` seconds are not judged; the step passes when
every lag stays under ``--max-lag`` for the next ``--hold`` seconds, and fails as soon as
one does not. Over the last ``--slope-window`` seconds of the judged time (30 minutes, or
all of it when shorter) it fits a least-squares line to each series (state rows, state
bytes, RSS, micro-batch seconds) and reports its slope per hour with the slope's standard
error (``slopes_per_hour``): flat is a slope within a few standard errors of 0, small
beside the series' mean. ``levelled_at_seconds`` is when sessionize's state first reached
95 % of its median over that window.

The dataset's event times are a day of traffic at 2,000,000 events a day, so a replay at
thousands of events/s runs event time hundreds of times faster than the clock: few
visits are open at once, and gold's freshness (an event's age when the micro-batch
counting it starts) is months. With ``--live`` each landed file's event times are moved
to the clock instead: the file's latest events at its landing time, the others before it
by their distance in the dataset divided by how much faster than the dataset's own rate
the step lands them. Event time then runs with the clock, as in production: every visit
stays open for the gap (35 minutes) after its last event, so the speed layer's state
holds every event landed in the last 35 minutes, and the step reports gold freshness p50
and p90 over its judged time (from the ``abstream_gold_freshness_seconds`` histogram,
interpolated in its buckets as PromQL's ``histogram_quantile`` does). A live step lands
the dataset again when it runs out, its event, session and visitor ids prefixed with the
round (``2-...``), so it can hold a rate for as long as asked: at steady state the state
holds the events of the visits active in the last gap + lateness, about the rate times
50 minutes (``expected_state_rows``).

Before the first step it measures the machine's pace (``machine_pace``: ``make bench``'s
naive baseline on its 2,000,000 beacons, cold) and reports each step's rate over it
(``rate_over_pace``): a rate that passed on one day compares with another day's by that
ratio, not by events/s.

A few events/s in small files (``--file-events``) measures what a micro-batch costs with
next to no events: each component's median micro-batch seconds (``batch_seconds_median``).

After a pass the rate goes up by ``--factor``; after the first
failure the search bisects between the best pass and the lowest failure, for ``--steps``
steps in all.

    python -m bench.sustained [--rate 4000] [--hold 300] [--warmup 60] [--max-lag 30] [--live]
        [--steps 4] [--slope-window 1800] [--file-events 10000]

Prints a table, then one JSON object as the last line (each step's figures); writes it
with every step's sampled series (``samples``), a chart of the best passing step (the last
step when none passed) and each step's log of ``abstream run`` to bench/results/.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from itertools import pairwise
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure
from prometheus_client.parser import text_string_to_metric_families
from tests.servers import free_port

from abstream.layout import Layout
from abstream.speed import sessionize
from bench.common import (
    COMPONENTS,
    EVENTS_PER_DAY,
    FILE_EVENTS,
    RESULTS,
    dataset,
    event_times,
    folder_bytes,
    log_progress,
    machine,
    move_event_times,
    next_round,
    process_tree_rss,
    write_result,
)
from bench.throughput import machine_pace

log = logging.getLogger("bench.sustained")
SCRAPE_SECONDS = 5.0
#: Dataset sizes the other benchmarks generate; a step lands files from the smallest that
#: lasts it.
DATASETS = (2_000_000, 5_000_000, 20_000_000)
STOP_SECONDS = 120
#: Triggers for the continuous run (the defaults, named so each result records them). A
#: component's lag peaks at about its trigger interval plus one micro-batch; shorter ones
#: spend more of the machine on each micro-batch's fixed cost.
TRIGGERS = {"ingest": "5 seconds", "sessionize": "5 seconds"}
#: A visit's events stay in state until its last event is this far behind the watermark.
HELD_SECONDS = (35 + 15) * 60
#: Sessionize's state reached this share of its level when it levelled off.
LEVEL = 0.95
#: The windows each component's time by step is split into (seconds of the step).
STEP_WINDOW = 300.0


@dataclass
class Sample:
    at: float
    landed: int
    lag: dict[str, float]
    system_lag: float
    state_rows: dict[str, float]
    state_bytes: int = 0
    rss_mb: float = 0.0
    #: Per component, the duration of the last micro-batch that ended since the sample
    #: before.
    batch_seconds: dict[str, float] = field(default_factory=dict)
    #: Per component, its micro-batches so far and their seconds in each step so far.
    batches: dict[str, float] = field(default_factory=dict)
    steps: dict[str, dict[str, float]] = field(default_factory=dict)


@dataclass
class Step:
    rate: int
    passed: bool = False
    reason: str = ""
    #: Seconds judged (after the warm-up).
    hold_seconds: float = 0.0
    max_lag_seconds: dict[str, float] = field(default_factory=dict)
    #: The most each lag reached during the warm-up, not judged.
    warmup_max_lag_seconds: dict[str, float] = field(default_factory=dict)
    freshness_p50_seconds: float | None = None
    freshness_p90_seconds: float | None = None
    samples: list[Sample] = field(default_factory=list)

    def judge(self, found: Scrape, elapsed: float, judged_from: Scrape | None, *,
              warmup: float, max_lag: float) -> None:
        """Take in a scrape ``elapsed`` seconds into the step: judged after ``warmup``
        seconds, from the scrape ``judged_from`` on (None: still warming up), failed
        (``reason``) once a lag reaches ``max_lag``."""
        lag = found.lag
        highest = self.warmup_max_lag_seconds if judged_from is None else self.max_lag_seconds
        for name, value in {**lag, "system": found.system_lag}.items():
            highest[name] = round(max(highest.get(name, 0.0), value), 1)
        if judged_from is None:
            return
        self.freshness_p50_seconds, self.freshness_p90_seconds = (
            quantile(q, judged_from.freshness, found.freshness) for q in (0.5, 0.9))
        self.hold_seconds = round(elapsed - warmup, 1)
        worst = max(lag, key=lambda name: lag[name])
        if lag[worst] >= max_lag:
            self.reason = f"{worst} lag {lag[worst]:.0f} s at {elapsed:.0f} s"

    def summary(self, slope_window: float) -> dict[str, Any]:
        return {**{key: value for key, value in asdict(self).items() if key != "samples"},
                **steady_state(self, slope_window),
                "step_seconds_by_window": steps_by_window(self.samples, STEP_WINDOW),
                "samples": [asdict(s) for s in self.samples]}


@dataclass
class Scrape:
    lag: dict[str, float] = field(default_factory=dict)
    state_rows: dict[str, float] = field(default_factory=dict)
    batches: dict[str, float] = field(default_factory=dict)
    durations: dict[str, float] = field(default_factory=dict)
    #: Per job, the seconds its micro-batches spent in each step so far.
    steps: dict[str, dict[str, float]] = field(default_factory=dict)
    system_lag: float = 0.0
    #: gold freshness: cumulative events per bucket bound (seconds; inf last).
    freshness: dict[float, float] = field(default_factory=dict)


def scrape(url: str) -> Scrape | None:
    """Each component's largest lag, each query's state rows and micro-batches run; None
    while the endpoint is not serving."""
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            text = response.read().decode()
    except OSError:
        return None
    found = Scrape()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "abstream_component_lag_seconds":
                name = sample.labels["component"]
                found.lag[name] = max(found.lag.get(name, 0.0), sample.value)
            elif sample.name == "abstream_query_state_rows":
                found.state_rows[sample.labels["job"]] = sample.value
            elif sample.name == "abstream_query_batches_total":
                found.batches[sample.labels["job"]] = sample.value
            elif sample.name == "abstream_query_batch_duration_seconds":
                found.durations[sample.labels["job"]] = sample.value
            elif sample.name == "abstream_query_step_seconds_total":
                found.steps.setdefault(sample.labels["job"], {})[sample.labels["step"]] = \
                    sample.value
            elif sample.name == "abstream_system_lag_seconds":
                found.system_lag = sample.value
            elif sample.name == "abstream_gold_freshness_seconds_bucket":
                found.freshness[float(sample.labels["le"])] = sample.value
    return found


def quantile(q: float, before: dict[float, float], after: dict[float, float]) -> float | None:
    """The ``q`` quantile of the events counted between two scrapes of a cumulative
    histogram, interpolated linearly in its bucket (PromQL's ``histogram_quantile``); None
    without events."""
    bounds = sorted(after)
    counts = [after[b] - before.get(b, 0.0) for b in bounds]
    if not counts or counts[-1] <= 0:
        return None
    rank = q * counts[-1]
    lower, below = 0.0, 0.0
    for bound, count in zip(bounds, counts, strict=True):
        if count >= rank:
            if math.isinf(bound):
                return lower
            return round(lower + (bound - lower) * (rank - below) / max(count - below, 1e-9), 1)
        lower, below = bound, count
    return None


def start_pipeline(work: Path, port: int, triggers: dict[str, str],
                   publish_every: str | None = None) -> subprocess.Popen:
    """``abstream run`` on ``work`` with these triggers, its endpoint on ``port``, and, when
    given, ``report.publish_every`` (``null``: no publishing)."""
    env = {**os.environ,
           **{f"ABSTREAM__{name.upper()}__TRIGGER": every for name, every in triggers.items()},
           "ABSTREAM__MONITOR__EXPORTER": f"{{host: 127.0.0.1, port: {port}}}",
           **({} if publish_every is None else
              {"ABSTREAM__REPORT__PUBLISH_EVERY": publish_every})}
    command = [sys.executable, "-m", "abstream", "run", "--data-dir", str(work)]
    with (work / "run.log").open("w") as output:
        return subprocess.Popen(command, env=env, stdout=output, stderr=subprocess.STDOUT)


def stop_pipeline(child: subprocess.Popen) -> None:
    child.send_signal(signal.SIGTERM)
    try:
        child.wait(STOP_SECONDS)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()


def live_lines(text: str, now: float, speedup: float) -> str:
    """``text``'s lines with their event times moved to the clock: the 99th percentile at
    ``now`` (the latest would be one of the dataset's deliberately far-future lines), each
    other one away from it by its distance in the dataset over ``speedup``. Event times that
    are not valid ISO-8601 (more malformed lines) are left as they are."""
    valid = sorted(t for t in event_times(text) if t is not None)
    if not valid:
        return text
    latest = valid[int(0.99 * (len(valid) - 1))]
    return move_event_times(text, lambda ts: now - (latest - ts) / speedup)


class Feeder:
    """Lands the dataset's files at a fixed rate, each stamped with its landing time; with
    ``live``, its event times moved to the clock too (``live_lines``), and the dataset
    landed again round after round (``next_round``) when it runs out."""

    def __init__(self, files: list[Path], landing: Path, rate: int, live: bool = False) -> None:
        self.files, self.landing, self.rate, self.live = files, landing, rate, live
        with files[0].open() as first:
            self.per_file = sum(1 for _ in first)
        self.began = time.monotonic()
        self.landed = 0

    def land_one(self) -> None:
        """Land the next file: a copy under a hidden name, stamped, then renamed (a link
        would stamp the dataset's own file, and later runs would read it out of order)."""
        round_, index = divmod(self.landed, len(self.files))
        path = self.files[index]
        name = path.name if round_ == 0 else f"{path.stem}-r{round_}{path.suffix}"
        hidden = self.landing / f".{name}"
        now = time.time()
        if self.live:
            hidden.write_text(live_lines(next_round(path.read_text(), round_), now,
                                         self.rate / (EVENTS_PER_DAY / 86_400)))
        else:
            shutil.copyfile(path, hidden)
        os.utime(hidden, (now, now))
        hidden.rename(self.landing / name)
        self.landed += 1

    def start(self) -> None:
        """Hold the rate from now on, counting what has landed already."""
        self.began = time.monotonic() - self.landed * self.per_file / self.rate

    def land_due(self) -> None:
        while (not self.exhausted
               and self.began + self.landed * self.per_file / self.rate <= time.monotonic()):
            self.land_one()

    @property
    def events(self) -> int:
        return self.landed * self.per_file

    @property
    def exhausted(self) -> bool:
        return not self.live and self.landed == len(self.files)


def warm_up(child: subprocess.Popen, url: str, feeder: Feeder) -> None:
    """Land one file and wait until every component has run a micro-batch: the JVM started
    and the first, cold micro-batches are behind before the rate is held."""
    feeder.land_one()
    names = {c.name for c in COMPONENTS}
    while True:
        if child.poll() is not None:
            raise SystemExit(f"abstream run exited with {child.returncode} while warming up")
        found = scrape(url)
        if found is not None and names <= set(found.batches):
            return
        time.sleep(1)


def sample(found: Scrape, batches: dict[str, float], at: float, landed: int, *, state: Path,
           pid: int) -> Sample:
    """A sample of a scrape (``found``; ``batches``: the micro-batch counts of the scrape
    before), with the bytes of the ``state`` folder and the RSS of ``pid``'s tree."""
    return Sample(at, landed, found.lag, found.system_lag, found.state_rows,
                  folder_bytes(state) if state.exists() else 0,
                  round(process_tree_rss(pid) / 2**20, 1),
                  {job: found.durations[job] for job, count in found.batches.items()
                   if count > batches.get(job, 0) and job in found.durations},
                  dict(found.batches), found.steps)


def steps_by_window(samples: list[Sample], window: float) -> list[dict[str, Any]]:
    """Each component's seconds a micro-batch in each step, per ``window`` seconds of the
    step (from the first sample at or after each window's start to the next one's): where
    a micro-batch's time goes as the state grows."""
    if not samples:
        return []
    edges: list[Sample] = []
    for sampled in samples:
        if not edges or sampled.at >= edges[-1].at + window:
            edges.append(sampled)
    if edges[-1] is not samples[-1]:
        edges.append(samples[-1])
    found = []
    for first, last in pairwise(edges):
        components: dict[str, Any] = {}
        for job, steps in last.steps.items():
            ran = last.batches.get(job, 0.0) - first.batches.get(job, 0.0)
            if ran <= 0:
                continue
            before = first.steps.get(job, {})
            components[job] = {"batches": ran, "seconds_per_batch": {
                name: round((seconds - before.get(name, 0.0)) / ran, 3)
                for name, seconds in sorted(steps.items())}}
        found.append({"from": first.at, "to": last.at, "components": components})
    return found


def run_step(rate: int, args: argparse.Namespace) -> Step:
    step = Step(rate)
    seconds = args.warmup + args.hold
    needed = rate * seconds
    # A live step lands the smallest dataset that lasts it, round after round.
    size = min(DATASETS[0], math.ceil(needed / args.file_events) * args.file_events) \
        if args.live else next((size for size in DATASETS if size >= needed),
                               math.ceil(needed / 1e6) * 1_000_000)
    source = dataset(size, args.seed, file_events=args.file_events)
    work = RESULTS / "work-sustained"
    shutil.rmtree(work, ignore_errors=True)
    (work / "landing").mkdir(parents=True)
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    log.info("%s events/s: starting abstream run", f"{rate:,}")
    child = start_pipeline(work, port, args.trigger, args.publish_every)
    feeder = Feeder(sorted(source.glob("beacons-*")), work / "landing", rate, args.live)
    state = Path(Layout.of(work).checkpoint(sessionize.NAME)) / "state"
    judged_from: Scrape | None = None
    batches: dict[str, float] = {}
    try:
        warm_up(child, url, feeder)
        log.info("%s events/s: landing files for %d s%s", f"{rate:,}", seconds,
                 ", event times live" if args.live else "")
        feeder.start()
        while True:
            feeder.land_due()
            elapsed = time.monotonic() - feeder.began
            found = scrape(url)
            if child.poll() is not None:
                step.reason = f"abstream run exited with {child.returncode}"
                break
            if found is not None:
                step.samples.append(sample(found, batches, round(elapsed, 1), feeder.events,
                                           state=state, pid=child.pid))
                batches = found.batches
                if elapsed >= args.warmup:
                    judged_from = judged_from or found
                step.judge(found, elapsed, judged_from, warmup=args.warmup,
                           max_lag=args.max_lag)
                if step.reason:
                    break
                log.info("%s events/s, %3.0f s: lag %s", f"{rate:,}", elapsed,
                         " ".join(f"{n}={v:.0f}s" for n, v in sorted(found.lag.items())))
            if elapsed >= seconds:
                step.passed = True
                break
            if feeder.exhausted:
                step.reason = "the dataset ran out"
                break
            time.sleep(max(0.0, SCRAPE_SECONDS - (time.monotonic() - feeder.began - elapsed)))
    finally:
        stop_pipeline(child)
        shutil.move(work / "run.log", RESULTS / f"sustained-{rate}-run.log")
        shutil.rmtree(work, ignore_errors=True)
    log.info("%s events/s: %s", f"{rate:,}", "passed" if step.passed else
             f"failed ({step.reason})")
    for window in steps_by_window(step.samples, STEP_WINDOW):
        for job, ran in sorted(window["components"].items()):
            log.info("    %4.0f-%4.0f s, %s, %d micro-batches, seconds a micro-batch: %s",
                     window["from"], window["to"], job, ran["batches"], ", ".join(
                         f"{name} {seconds:.2f}"
                         for name, seconds in ran["seconds_per_batch"].items()))
    return step


def search(args: argparse.Namespace) -> list[Step]:
    """Up by ``--factor`` while steps pass, down by half while none has, then bisect."""
    steps: list[Step] = []
    best, lowest_fail = 0, 0
    rate = args.rate
    for _ in range(args.steps):
        step = run_step(rate, args)
        steps.append(step)
        if step.passed:
            best = max(best, rate)
        else:
            lowest_fail = min(lowest_fail or rate, rate)
        if not lowest_fail:
            rate = int(round(best * args.factor, -2))
        elif not best:
            rate = int(round(lowest_fail / 2, -2))
        else:
            rate = int(round((best + lowest_fail) / 2, -2))
        if rate <= 0 or rate in {s.rate for s in steps}:
            break
    return steps


def slope(points: list[tuple[float, float]]) -> dict[str, float] | None:
    """The least-squares line through ``points`` (seconds, value): its slope per hour, the
    slope's standard error per hour (``noise_per_hour``), and the values' mean; None under
    three points or when they share one time."""
    n = len(points)
    if n < 3:
        return None
    mean_t = sum(t for t, _ in points) / n
    mean_v = sum(v for _, v in points) / n
    spread = sum((t - mean_t) ** 2 for t, _ in points)
    if spread == 0:
        return None
    per_second = sum((t - mean_t) * (v - mean_v) for t, v in points) / spread
    residuals = sum((v - mean_v - per_second * (t - mean_t)) ** 2 for t, v in points)
    error = math.sqrt(residuals / (n - 2) / spread)
    return {"per_hour": round(per_second * 3600, 3), "noise_per_hour": round(error * 3600, 3),
            "mean": round(mean_v, 3), "points": n}


def steady_state(step: Step, window: float) -> dict[str, Any]:
    """Over the last ``window`` seconds of the step's judged time: each series' slope per
    hour (``slope``), each component's median micro-batch seconds, when sessionize's state
    first reached ``LEVEL`` of its median there (``levelled_at_seconds``, seconds since the
    rate was first held), and the state a steady stream holds at this rate."""
    span = min(window, step.hold_seconds)
    judged = [s for s in step.samples if s.at >= step.samples[-1].at - span] \
        if step.samples else []
    name = sessionize.NAME
    series = {
        "state_rows": [(s.at, s.state_rows.get(name, 0.0)) for s in judged],
        "state_bytes": [(s.at, float(s.state_bytes)) for s in judged],
        "rss_mb": [(s.at, s.rss_mb) for s in judged]}
    slopes: dict[str, Any] = {key: slope(points) for key, points in series.items()}
    durations = {c.name: [(s.at, s.batch_seconds[c.name]) for s in judged
                          if c.name in s.batch_seconds] for c in COMPONENTS}
    slopes["batch_seconds"] = {name: slope(points) for name, points in durations.items()}
    rows = sorted(v for _, v in series["state_rows"])
    level = rows[len(rows) // 2] if rows else 0.0
    levelled = next((s.at for s in step.samples if level
                     and s.state_rows.get(name, 0.0) >= LEVEL * level), None)
    return {"slope_window_seconds": round(span, 1),
            "slopes_per_hour": slopes,
            "batch_seconds_median": {
                name: statistics.median(v for _, v in points) if points else None
                for name, points in durations.items()},
            "levelled_at_seconds": levelled,
            "state_rows_level": level, "expected_state_rows": step.rate * HELD_SECONDS}


def trigger(text: str) -> tuple[str, str]:
    name, _, every = text.partition("=")
    if name not in TRIGGERS or not every:
        raise argparse.ArgumentTypeError(f"expected COMPONENT=INTERVAL with a component of "
                                         f"{', '.join(TRIGGERS)}, got {text!r}")
    return name, every


def chart(step: Step, max_lag: float, path: Path) -> None:
    """The step's series against time: lags, state rows, state bytes and RSS, micro-batch
    durations."""
    figure = Figure(figsize=(11, 12))
    lag_axis, state_axis, bytes_axis, batch_axis = figure.subplots(4, 1, sharex=True)
    times = [s.at for s in step.samples]
    for component in COMPONENTS:
        lag_axis.plot(times, [s.lag.get(component.name, 0.0) for s in step.samples],
                      label=component.name)
        state_axis.plot(times, [s.state_rows.get(component.name, 0.0) for s in step.samples],
                        label=component.name)
        ended = [s for s in step.samples if component.name in s.batch_seconds]
        batch_axis.plot([s.at for s in ended], [s.batch_seconds[component.name] for s in ended],
                        ".", markersize=3, label=component.name)
    lag_axis.plot(times, [s.system_lag for s in step.samples], color="grey", linestyle=":",
                  label="system (landing to gold)")
    lag_axis.axhline(max_lag, color="red", linestyle="--", label="bound")
    lag_axis.set(title=f"lag (s) at {step.rate:,} events/s", ylim=(0, None))
    state_axis.set(title="state rows", ylim=(0, None))
    bytes_axis.plot(times, [s.state_bytes / 2**20 for s in step.samples],
                    label="sessionize state on disk (MB)")
    bytes_axis.plot(times, [s.rss_mb for s in step.samples], label="RSS of the run (MB)")
    bytes_axis.set(title="MB", ylim=(0, None))
    batch_axis.set(title="micro-batch seconds", xlabel="seconds since the rate was held",
                   ylim=(0, None))
    for axis in (lag_axis, state_axis, bytes_axis, batch_axis):
        axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=100)


def _slope_text(name: str, fitted: Any) -> str:
    if fitted is None:
        return f"{name} -"
    if "per_hour" not in fitted:
        return "; ".join(_slope_text(f"{name}[{key}]", value) for key, value in fitted.items())
    return f"{name} {fitted['per_hour']:+,.3g} ± {fitted['noise_per_hour']:,.2g} " \
        f"(mean {fitted['mean']:,.4g})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=4000, help="the first rate, events/s")
    parser.add_argument("--factor", type=float, default=1.25,
                        help="the next rate after a pass, until the first failure")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--warmup", type=int, default=60)
    parser.add_argument("--hold", type=int, default=300,
                        help="seconds judged after the warm-up (a live step can hold any)")
    parser.add_argument("--slope-window", type=float, default=1800.0,
                        help="the last seconds of the judged time the slopes are fitted on")
    parser.add_argument("--max-lag", type=float, default=30.0)
    parser.add_argument("--trigger", action="append", type=trigger, default=[],
                        metavar="COMPONENT=INTERVAL",
                        help="a component's trigger (default: "
                             + ", ".join(f"{n}={v}" for n, v in TRIGGERS.items()) + ")")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--file-events", type=int, default=FILE_EVENTS,
                        help="beacons a landed file holds (a rate of a few events/s with "
                             "small files: a micro-batch's fixed cost)")
    parser.add_argument("--live", action="store_true",
                        help="move each landed file's event times to the clock")
    parser.add_argument("--publish-every", metavar="INTERVAL",
                        help="report.publish_every of the run ('null': no publishing; "
                             "default: the config's, 5 minutes)")
    args = parser.parse_args()
    args.trigger = {**TRIGGERS, **dict(args.trigger)}
    log_progress()
    pace = machine_pace(args.seed)
    steps = search(args)
    passed = [s for s in steps if s.passed]
    best = max(passed, key=lambda s: s.rate) if passed else None
    result = {
        "benchmark": "sustained",
        "sustained_events_per_s": best.rate if best else 0,
        "max_lag_bound_s": args.max_lag,
        "hold_s": args.hold,
        "warmup_s": args.warmup,
        "event_times": "live" if args.live else "replayed",
        "triggers": args.trigger,
        "publish_every": args.publish_every,
        "steps": [{**s.summary(args.slope_window),
                   "rate_over_pace": round(s.rate / pace["events_per_s"], 3)} for s in steps],
        "machine": machine(),
        "machine_pace": pace,
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    columns = [c.name for c in COMPONENTS] + ["system"]
    print(f"\n{'events/s':>9} {'result':<8} " + " ".join(f"{name + ' max lag':>20}"
                                                      for name in columns)
          + f" {'freshness p50/p90':>18}")
    for step in steps:
        freshness = "/".join("-" if value is None else f"{value:.0f}" for value in
                             (step.freshness_p50_seconds, step.freshness_p90_seconds))
        print(f"{step.rate:>9,} {'pass' if step.passed else 'fail':<8} "
              + " ".join(f"{step.max_lag_seconds.get(name, 0.0):>19.1f}s" for name in columns)
              + f" {freshness + ' s':>18}"
              + ("" if step.passed else f"  {step.reason}"))
    print(f"machine pace: the naive baseline at {pace['events_per_s']:,} events/s "
          f"({pace['records']:,} beacons in {pace['seconds']} s, cold); each rate over it: "
          + ", ".join(f"{s['rate']:,}: {s['rate_over_pace']}" for s in result["steps"]))
    for summary in result["steps"]:
        print(f"{summary['rate']:>9,} slopes per hour over the last "
              f"{summary['slope_window_seconds']:.0f} s (± standard error): "
              + "; ".join(_slope_text(key, value)
                          for key, value in summary["slopes_per_hour"].items()))
        print(f"{summary['rate']:>9,} median micro-batch seconds: " + ", ".join(
            f"{name} {'-' if seconds is None else f'{seconds:.2f}'}"
            for name, seconds in summary["batch_seconds_median"].items()))
    # The file keeps every step's series; the line printed, their figures alone.
    stem = write_result(result, "sustained", final=False)
    print(json.dumps({**result, "steps": [{k: v for k, v in summary.items() if k != "samples"}
                                          for summary in result["steps"]]}))
    if steps:
        chart(best or steps[-1], args.max_lag, stem.with_suffix(".png"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
