"""How fast ``abstream serve`` answers, warm, on a catalog of 20 published experiments, and
how soon its results page is interactive in Chromium.

A small speed-layer run (``--events`` generated beacons) gives a real report; its
experiments are published 20 times over under other names (``exp01_checkout_button``, ...),
so every document has a real report's shape and size. Then ``abstream serve`` runs in its
own process; after a warm-up, ``--requests`` requests go to the results of every experiment
and population, to the lift over time and to the list, one at a time, and beside them the
same number to ``/healthz`` (the floor: the same server and HTTP stack, no results). Last,
the experiment page is loaded ``--loads`` times in Debian's Chromium (Playwright), timed
from navigation to its comparisons and chart being drawn. With ``--store postgres`` the
results are published into a throwaway PostgreSQL server's serving store too, and
``serve`` answers from there.

    python -m bench.serve_latency [--events 20000] [--requests 2000] [--loads 20]
                                  [--store delta|postgres]

Prints a table, then one JSON object as the last line; writes it to bench/results/.
"""

from __future__ import annotations

import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import AbstractContextManager, nullcontext
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from playwright.sync_api import sync_playwright
from tests.helpers import store_settings
from tests.servers import free_port

from abstream.config import ServingSettings, load_config
from abstream.generator.write import GeneratorSettings, generate
from abstream.io.postgres import Store
from abstream.io.postgres_local import LocalPostgres
from abstream.report.build import Report, build_report
from abstream.report.publish import publish
from abstream.speed import pipeline_components
from abstream.speed.runner import pipeline, run_once
from bench.common import dataset_parser, log_progress, machine, write_result

log = logging.getLogger("bench.serve_latency")
EXPERIMENTS = 20


def _twenty(report: Report) -> Report:
    """``report``'s experiments repeated under other names until there are 20."""
    names = sorted({e.experiment_id for e in report.experiments})
    copies = []
    for i in range(EXPERIMENTS):
        source = names[i % len(names)]
        copies += [replace(e, experiment_id=f"exp{i + 1:02d}_{source}")
                   for e in report.experiments if e.experiment_id == source]
    return replace(report, experiments=copies)


def _published(work: Path, events: int, seed: int, store: Store | None) -> Report:
    """A small run's report, published as 20 experiments into ``work``'s results table
    (and ``store``)."""
    config = load_config(None, data_dir=work)
    with pipeline(config) as ctx:
        generate(GeneratorSettings(events=events, seed=seed), Path(ctx.layout.landing))
        run_once(ctx, pipeline_components(config))
        report = _twenty(build_report(ctx.spark, ctx.layout, config))
        publish(ctx.spark, ctx.layout, report, datetime.now(UTC), store=store)
    return report


class _Server(AbstractContextManager["_Server"]):
    """A throwaway PostgreSQL server and the serving settings that use it."""

    def __enter__(self) -> _Server:
        self.postgres = LocalPostgres(os.urandom(12).hex()).start()
        self.serving = ServingSettings.model_validate(store_settings(self.postgres, "bench"))
        return self

    def __exit__(self, *_: object) -> None:
        self.postgres.remove()

    def environment(self) -> dict[str, str]:
        postgres = self.serving.postgres
        return {"ABSTREAM__SERVING__STORE": "postgres",
                "ABSTREAM__SERVING__POSTGRES__DSN": postgres.dsn,
                "ABSTREAM__SERVING__POSTGRES__SCHEMA": postgres.db_schema,
                "ABSTREAM__SERVING__POSTGRES__PASSWORD": self.postgres.password}


def _get(url: str) -> float:
    """Seconds to answer ``url`` (its whole body read)."""
    began = time.perf_counter()
    with urllib.request.urlopen(url, timeout=10) as response:
        response.read()
    return time.perf_counter() - began


def _percentiles(seconds: list[float]) -> dict[str, float]:
    ordered = sorted(seconds)

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 2)

    return {"p50_ms": at(0.5), "p99_ms": at(0.99), "max_ms": at(1.0),
            "requests": len(ordered)}


def _requests(base: str, report: Report, count: int) -> dict[str, dict[str, float]]:
    """Warm, one at a time: the results, the lift over time, the list, and /healthz."""
    paths = [f"/api/v1/experiments/{e.experiment_id}/results?population={e.population}"
             for e in report.experiments]
    series = [f"/api/v1/experiments/{e.experiment_id}/timeseries?population={e.population}"
              f"&metric=conversion_rate" for e in report.experiments]
    for path in [*paths, *series, "/api/v1/experiments", "/healthz"] * 5:
        _get(base + path)
    timed: dict[str, list[float]] = {"results": [], "timeseries": [], "experiments": [],
                                     "healthz": []}
    for i in range(count):
        timed["results"].append(_get(base + paths[i % len(paths)]))
        timed["healthz"].append(_get(base + "/healthz"))
        if i % 4 == 0:
            timed["timeseries"].append(_get(base + series[i % len(series)]))
            timed["experiments"].append(_get(base + "/api/v1/experiments"))
    return {name: _percentiles(seconds) for name, seconds in timed.items()}


def _page_loads(base: str, experiment: str, loads: int) -> list[float]:
    """Seconds from navigation to the experiment page's comparisons and chart drawn."""
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=shutil.which("chromium"),
                                             args=["--no-sandbox"])
        page = browser.new_page()
        url = f"{base}/?experiment={experiment}&population=assigned"
        page.goto(url)
        page.wait_for_selector("#lift-chart")
        seconds = []
        for _ in range(loads):
            began = time.perf_counter()
            page.goto(url)
            page.wait_for_selector("tr.comparison")
            page.wait_for_selector("#lift-chart")
            seconds.append(time.perf_counter() - began)
        browser.close()
    return seconds


def main() -> None:
    parser = dataset_parser(__doc__, 20_000)
    parser.add_argument("--requests", type=int, default=2_000)
    parser.add_argument("--loads", type=int, default=20)
    parser.add_argument("--store", choices=("delta", "postgres"), default="delta",
                        help="where serve reads the published results from")
    args = parser.parse_args()
    log_progress()
    postgres: AbstractContextManager[_Server | None] = \
        _Server() if args.store == "postgres" else nullcontext()
    with tempfile.TemporaryDirectory(prefix="serve-latency-") as folder, postgres as store:
        work = Path(folder) / "data"
        log.info("a speed-layer run over %s beacons, its report published as %d experiments "
                 "(%s)", f"{args.events:,}", EXPERIMENTS, args.store)
        report = _published(work, args.events, args.seed,
                            None if store is None else Store(store.serving.postgres))
        port = free_port()
        began = time.monotonic()
        server = subprocess.Popen([sys.executable, "-m", "abstream", "serve", "--data-dir",
                                   str(work), "--port", str(port)],
                                  env={**os.environ,
                                       **({} if store is None else store.environment())})
        base = f"http://127.0.0.1:{port}"
        try:
            while True:
                try:
                    _get(base + "/healthz")
                    break
                except OSError:
                    time.sleep(0.02)
            started = time.monotonic() - began
            log.info("serve answered after %.2f s; %s requests of each kind", started,
                     f"{args.requests:,}")
            latency = _requests(base, report, args.requests)
            log.info("the experiment page, %d loads in Chromium", args.loads)
            loads = _page_loads(base, report.experiments[0].experiment_id, args.loads)
        finally:
            server.terminate()
            server.wait(timeout=30)
    result: dict[str, Any] = {
        "benchmark": "serve_latency", "when": datetime.now(UTC).isoformat(),
        "machine": machine(), "experiments": EXPERIMENTS, "store": args.store,
        "populations": len(report.experiments), "started_seconds": round(started, 2),
        "latency": latency,
        "results_p99_over_healthz_p99": round(
            latency["results"]["p99_ms"] / latency["healthz"]["p99_ms"], 2),
        "page_interactive_seconds": {"median": round(statistics.median(loads), 3),
                                     "max": round(max(loads), 3), "loads": len(loads)}}
    print(f"{'path':<12} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'requests':>9}")
    for name, figures in latency.items():
        print(f"{name:<12} {figures['p50_ms']:>8} {figures['p99_ms']:>8} {figures['max_ms']:>8}"
              f" {figures['requests']:>9,}")
    print(f"experiment page interactive: median {result['page_interactive_seconds']['median']}"
          f" s, max {result['page_interactive_seconds']['max']} s over {len(loads)} loads; "
          f"serve answered {started:.2f} s after its start; {machine()}")
    write_result(result, f"serve-latency-{args.store}")


if __name__ == "__main__":
    main()
