"""What the benchmarks share: the generated dataset and its landing folders, the rewriting of
its lines when they are landed again (new ids per round, event times moved), the results
folder, the machine's description, rates, progress logging, the speed layer's run in a
process of its own (``throughput``'s phases) with the peak memory of its process tree, and
the wait for an AvailableNow query to end."""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from pyspark.sql.streaming import StreamingQuery

from abstream.config import EventsSettings
from abstream.generator.write import GeneratorSettings, format_ts, generate
from abstream.speed import ingest, sessionize
from abstream.stages.beacons import input_schema
from abstream.times import epoch_from_iso

log = logging.getLogger("bench.common")
HERE = Path(__file__).parent
RESULTS = HERE / "results"
DATA = HERE / "data"
#: The beacon as the JSON parser reads it.
BEACON = input_schema(EventsSettings())
#: The speed layer's components, in the order ``run --once`` runs them.
COMPONENTS = (ingest.COMPONENT, sessionize.COMPONENT)
SAMPLE_SECONDS = 0.25
#: The generated traffic's density in event time, whatever the dataset's size.
EVENTS_PER_DAY = 2_000_000
#: Beacons a landed file holds, unless told.
FILE_EVENTS = GeneratorSettings.file_events
_EVENT_TS = re.compile(r'"event_ts":"([0-9T:.+-]+Z)"')
_IDS = re.compile(r'"(event_id|session_id|visitor_id)":"')


def dataset(events: int, seed: int, per_day: int = EVENTS_PER_DAY,
            file_events: int = FILE_EVENTS) -> Path:
    """The landing files of ``events`` beacons from ``seed``, ``file_events`` a file,
    generated on first use.

    Every size is the same traffic, ``per_day`` events a day of event time
    (``EVENTS_PER_DAY`` unless told), for longer or shorter: a bigger dataset is a longer
    stream, not a denser one."""
    density = "" if per_day == EVENTS_PER_DAY else f"-perday{per_day}"
    files = "" if file_events == FILE_EVENTS else f"-file{file_events}"
    folder = DATA / f"beacons-{events}{density}{files}-seed{seed}"
    done = folder / "_summary.json"
    if not done.exists() or json.loads(done.read_text()).get("events_per_day") != per_day:
        shutil.rmtree(folder, ignore_errors=True)
        log.info("generating %s beacons (seed %d) into %s, once", f"{events:,}", seed, folder)
        settings = GeneratorSettings(events=events, seed=seed, file_events=file_events,
                                     span=timedelta(days=events / per_day))
        step = max(1, events // 10 // settings.file_events) * settings.file_events

        def progress(records: int) -> None:
            if records % step == 0 or records == events:
                log.info("generated %s of %s", f"{records:,}", f"{events:,}")

        summary = generate(settings, folder, progress)
        done.write_text(json.dumps({"records": summary.records, "events": summary.events,
                                    "events_per_day": per_day}))
    return folder


def _epoch(text: str) -> float | None:
    try:
        return epoch_from_iso(text)
    except ValueError:
        return None


def event_times(text: str) -> list[float | None]:
    """The event time (epoch seconds) of each of ``text``'s lines that has one, in order;
    None where it is not valid ISO-8601 (the dataset's malformed lines)."""
    return [_epoch(found) for found in _EVENT_TS.findall(text)]


def move_event_times(text: str, move: Callable[[float], float]) -> str:
    """``text``'s lines with each valid event time ``ts`` (epoch seconds) replaced by
    ``move(ts)``, to the millisecond; event times that are not valid ISO-8601 are left as
    they are."""

    def moved(match: re.Match[str]) -> str:
        ts = _epoch(match.group(1))
        if ts is None:
            return match.group(0)
        return f'"event_ts":"{format_ts(round(move(ts) * 1000))}"'

    return _EVENT_TS.sub(moved, text)


def next_round(text: str, round_: int) -> str:
    """``text``'s lines as the dataset's round ``round_`` lands them: their event, session
    and visitor ids prefixed with it (round 0 as they are)."""
    return text if round_ == 0 else _IDS.sub(rf'"\1":"{round_}-', text)


def link_landing(source: Path, landing: Path) -> None:
    """The dataset's files in a fresh landing folder, hard-linked where possible."""
    landing.mkdir(parents=True)
    for path in sorted(source.glob("beacons-*")):
        try:
            os.link(path, landing / path.name)
        except OSError:
            shutil.copy2(path, landing / path.name)


def folder_bytes(folder: Path) -> int:
    """The bytes of the files under ``folder``, as they are while a running job writes it:
    a file or folder that goes away while it is walked (a writer's ``_temporary``) counts
    for nothing."""
    total = 0
    for root, _, files in os.walk(folder):
        for name in files:
            try:
                total += os.stat(os.path.join(root, name)).st_size
            except FileNotFoundError:
                continue
    return total


def records_in(landing: Path) -> int:
    """How many records a generated dataset holds."""
    return json.loads((landing / "_summary.json").read_text())["records"]


def run_to_end(query: StreamingQuery, name: str, began: float) -> float:
    """Wait for an AvailableNow query to end, logging its micro-batches every 10 s; the
    seconds since ``began``."""
    while not query.awaitTermination(10):
        progress = query.lastProgress
        log.info("%s: micro-batch %s, %.0f s", name, progress and progress["batchId"],
                 time.monotonic() - began)
    return round(time.monotonic() - began, 2)


def process_tree_rss(root: int) -> int:
    """Resident bytes of ``root`` and all its descendants, each address space once.

    The JVM starts helper programs (Hadoop's local file system runs ``chmod`` and the like)
    by forking: until the child runs its program it is the JVM's image, and /proc shows it
    with the JVM's resident pages (with vfork, the very same pages). A descendant that still
    runs its parent's program is therefore counted as its parent, not again.
    """
    children: dict[int, list[int]] = {}
    resident: dict[int, int] = {}
    program: dict[int, str] = {}
    parents: dict[int, int] = {}
    page = os.sysconf("SC_PAGE_SIZE")
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            pages = int((entry / "statm").read_text().split()[1])
            exe = os.readlink(entry / "exe")
        except OSError:
            continue
        pid, parent = int(entry.name), int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(parent, []).append(pid)
        parents[pid], resident[pid], program[pid] = parent, pages * page, exe
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        todo.extend(children.get(pid, []))
        if pid not in resident or (pid != root and program[pid] == program.get(parents[pid])):
            continue
        total += resident[pid]
    return total


def run_phase(phase: str, landing: Path, work: Path, config_file: str | None,
              settings: dict[str, str] | None = None, *, source: Path | None = None,
              module: str = "bench.throughput") -> dict[str, Any]:
    """Run one side of a benchmark (``module``, ``bench.throughput`` by default, with
    ``--phase``) in a process of its own (``settings``: more environment variables;
    ``source``: another checkout of abstream to run, its ``src`` and ``bench``); its result
    (the last line of its output, JSON) and the peak RSS of its tree."""
    command = [sys.executable, "-m", module, "--phase", phase,
               "--landing", str(landing.resolve()), "--work", str(work.resolve()),
               *(["--config", config_file] if config_file else [])]
    env = {**os.environ, **(settings or {})}
    if source is not None:
        env["PYTHONPATH"] = os.pathsep.join((str(source / "src"), str(source)))
    child = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env, cwd=source)
    peak = 0
    finished = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not finished.wait(SAMPLE_SECONDS):
            peak = max(peak, process_tree_rss(child.pid))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    output, _ = child.communicate()
    finished.set()
    sampler.join()
    if child.returncode != 0:
        raise SystemExit(f"{phase} failed (exit {child.returncode})")
    return {**json.loads(output.strip().splitlines()[-1]), "peak_rss_mb": round(peak / 2**20)}


def write_result(result: dict[str, Any], name: str, final: bool = True) -> Path:
    """``result`` to bench/results/NAME-<its time>.json and, when ``final``, as the last line
    to stdout (a partial result is written over by the next); the path without its suffix,
    for files that go with it."""
    RESULTS.mkdir(exist_ok=True)
    stem = RESULTS / f"{name}-{result['when'][:19].replace(':', '')}"
    stem.with_suffix(".json").write_text(json.dumps(result, indent=2))
    if final:
        print(json.dumps(result))
    return stem


def speed_layer_rates(records: int, seconds: dict[str, float]) -> dict[str, Any]:
    """Per-component seconds with their end-to-end total, and events/s of each."""
    total = sum(seconds.values())
    return {
        "seconds": {**seconds, "end_to_end": round(total, 2)},
        "end_to_end_events_per_s": rate(records, total),
        "per_component_events_per_s": {name: rate(records, s) for name, s in seconds.items()},
    }


def log_progress() -> None:
    """Progress lines with their time to stderr, without py4j's chatter."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s",
                        datefmt="%H:%M:%S", stream=sys.stderr)
    logging.getLogger("py4j").setLevel(logging.ERROR)


def machine() -> str:
    return f"{platform.node()}, {os.cpu_count()} cores, {platform.machine()}"


def rate(events: int, seconds: float) -> int:
    return round(events / seconds) if seconds > 0 else 0


def dataset_parser(doc: str, events: int) -> argparse.ArgumentParser:
    """A benchmark's arguments: the first line of its docstring ``doc`` as the description,
    the size of its dataset (``--events``, ``events`` by default) and ``--seed``."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--events", type=int, default=events)
    parser.add_argument("--seed", type=int, default=1)
    return parser
