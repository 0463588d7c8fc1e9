"""What the metric catalog costs the speed layer: the version before the catalog, the
default catalog, and a catalog of 20 definitions (2 of them quantiles) with 2 dimensions, on
the same beacons in the same run.

Each side runs as the throughput benchmark's pipeline side does (``run --once`` in a cold
JVM, peak RSS of its process tree sampled); the version before the catalog is the git
revision ``--before`` (default: the last commit before the input mapping and the catalog),
checked out into a worktree and run from there. The sides run in ``--repeat`` rounds, one
run of each per round, so that a slower spell of the machine falls on all of them; a side's
figures are those of its median run. Gold rows are counted from each gold table's Delta log
(its files' record counts).

    python -m bench.catalog_cost [--events 500000] [--before REV] [--repeat 3]

Prints a table, then one JSON object as the last line; writes it to bench/results/.
"""

from __future__ import annotations

import json
import logging
import shutil
import statistics
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from bench.common import (
    HERE,
    RESULTS,
    dataset,
    dataset_parser,
    log_progress,
    machine,
    rate,
    records_in,
    run_phase,
    write_result,
)

log = logging.getLogger("bench.catalog_cost")
#: The last commit before the input mapping and the metric catalog.
BEFORE = "23b9ccf"
GOLD_TABLES = ("experiment_metrics", "definition_metrics")
ORDER, PAGEVIEW = "order", "pageview"

#: 20 definitions of every kind but windows (which gold does not hold), two of them
#: quantiles, and two dimensions (the default catalog has none).
CATALOG: dict[str, Any] = {
    "dimensions": [{"name": "device", "property": "device"},
                   {"name": "country", "property": "country"}],
    "definitions": [
        {"name": "buyers", "kind": "proportion", "events": ORDER},
        {"name": "carters", "kind": "proportion", "events": "add_to_cart"},
        {"name": "error_seers", "kind": "proportion", "events": "error"},
        {"name": "big_buyers", "kind": "proportion",
         "events": {"type": ORDER, "where": {"revenue": {"ge": 100}}}},
        {"name": "pageviews", "kind": "mean", "events": PAGEVIEW},
        {"name": "orders", "kind": "mean", "events": ORDER},
        {"name": "revenue", "kind": "mean", "events": ORDER, "value": "revenue"},
        {"name": "units", "kind": "mean", "events": ORDER, "value": "units"},
        {"name": "revenue_capped", "kind": "mean", "events": ORDER, "value": "revenue",
         "cap": {"absolute": 500}},
        {"name": "slow_pageviews", "kind": "mean",
         "events": {"type": PAGEVIEW, "where": {"page_load_ms": {"gt": 2000}}}},
        {"name": "orders_per_visit", "kind": "mean", "unit": "visit", "events": ORDER},
        {"name": "converting_visits", "kind": "proportion", "unit": "visit", "events": ORDER},
        {"name": "conversion_rate", "kind": "ratio", "numerator": {"events": ORDER},
         "denominator": {"visits": "all"}},
        {"name": "bounce_rate", "kind": "ratio", "numerator": {"visits": "bounce"},
         "denominator": {"visits": "all"}},
        {"name": "error_visit_rate", "kind": "ratio", "numerator": {"visits": "error"},
         "denominator": {"visits": "all"}},
        {"name": "average_order_value", "kind": "ratio",
         "numerator": {"events": ORDER, "value": "revenue"}, "denominator": {"events": ORDER}},
        {"name": "units_per_order", "kind": "ratio",
         "numerator": {"events": ORDER, "value": "units"}, "denominator": {"events": ORDER}},
        {"name": "revenue_per_visit", "kind": "ratio",
         "numerator": {"events": ORDER, "value": "revenue"}, "denominator": {"visits": "all"}},
        {"name": "load_p95", "kind": "quantile", "events": PAGEVIEW, "value": "page_load_ms",
         "quantile": 0.95},
        {"name": "order_value_p50", "kind": "quantile", "events": ORDER, "value": "revenue",
         "quantile": 0.5},
    ],
}


def gold_rows(table: Path) -> int | None:
    """The rows of a Delta table from its log: the record counts of its live files (None:
    no such table)."""
    log_folder = table / "_delta_log"
    if not log_folder.is_dir():
        return None
    live: dict[str, int] = {}
    for commit in sorted(log_folder.glob("*.json")):
        for line in commit.read_text().splitlines():
            action = json.loads(line)
            if "add" in action:
                live[action["add"]["path"]] = json.loads(action["add"]["stats"])["numRecords"]
            elif "remove" in action:
                live.pop(action["remove"]["path"], None)
    return sum(live.values())


def checkout(revision: str, folder: Path) -> Path:
    """``revision`` of this repository, checked out (detached) into ``folder``."""
    root = HERE.parent
    subprocess.run(["git", "-C", str(root), "worktree", "remove", "--force", str(folder)],
                   capture_output=True, check=False)
    shutil.rmtree(folder, ignore_errors=True)
    subprocess.run(["git", "-C", str(root), "worktree", "add", "--detach", "--quiet",
                    str(folder), revision], check=True)
    return folder


def remove_checkout(folder: Path) -> None:
    subprocess.run(["git", "-C", str(HERE.parent), "worktree", "remove", "--force",
                    str(folder)], check=False)


def main() -> int:
    parser = dataset_parser(__doc__, 500_000)
    parser.add_argument("--before", default=BEFORE,
                        help="the git revision to measure as the version before the catalog")
    parser.add_argument("--repeat", type=int, default=3,
                        help="rounds of runs; each side's figures are its median run's")
    args = parser.parse_args()
    log_progress()
    landing = dataset(args.events, args.seed)
    records = records_in(landing)
    work = (RESULTS / "work-catalog").resolve()
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    catalog_file = work / "catalog-20.yaml"
    catalog_file.write_text(yaml.safe_dump({"metrics": CATALOG}, sort_keys=False))
    before = checkout(args.before, work / "before-src")
    sides: dict[str, tuple[str | None, Path | None]] = {
        f"before ({args.before})": (None, before), "default catalog": (None, None),
        "20 definitions, 2 dimensions": (str(catalog_file), None)}
    result: dict[str, Any] = {
        "benchmark": "catalog_cost", "events": records, "before": args.before, "sides": {},
        "catalog": CATALOG, "machine": machine(), "master": "local[2]",
        "when": datetime.now(UTC).isoformat(timespec="seconds")}
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in sides}
    try:
        for round_number in range(1, args.repeat + 1):
            for number, (name, (config_file, source)) in enumerate(sides.items(), 1):
                log.info("round %d of %d, side %d of %d: %s", round_number, args.repeat, number,
                         len(sides), name)
                data = work / f"side-{number}"
                measured = run_phase("pipeline", landing, data, config_file, source=source)
                runs[name].append({
                    "seconds": measured["seconds"],
                    "end_to_end": round(sum(measured["seconds"].values()), 2),
                    "peak_rss_mb": measured["peak_rss_mb"],
                    "step_seconds": measured["step_seconds"],
                    "gold_rows": {table: gold_rows(data / "tables" / table)
                                  for table in GOLD_TABLES}})
                shutil.rmtree(data, ignore_errors=True)
                result["sides"][name] = _median_run(runs[name], records)
                write_result(result, f"catalog-cost-{records}", final=False)
    finally:
        remove_checkout(before)
    _compare(result)
    print_table(result)
    write_result(result, f"catalog-cost-{records}")
    return 0


def _median_run(runs: list[dict[str, Any]], records: int) -> dict[str, Any]:
    """A side's figures: those of its median run by end-to-end time (of the two middle
    ones, the faster), with every run's time and the median peak RSS."""
    ordered = sorted(runs, key=lambda run: run["end_to_end"])
    median = ordered[(len(ordered) - 1) // 2]
    return {**median, "events_per_s": rate(records, median["end_to_end"]),
            "peak_rss_mb": round(statistics.median(run["peak_rss_mb"] for run in runs)),
            "runs_end_to_end": [run["end_to_end"] for run in runs]}


def _compare(result: dict[str, Any]) -> None:
    """Each side's time and peak RSS against the version before, and the 20-definition
    catalog's against the default catalog."""
    sides = list(result["sides"].values())
    before, default, big = sides
    for side in sides:
        side["time_vs_before"] = round(side["end_to_end"] / before["end_to_end"], 3)
        side["rss_vs_before"] = round(side["peak_rss_mb"] / before["peak_rss_mb"], 3)
    big["time_vs_default"] = round(big["end_to_end"] / default["end_to_end"], 3)


def print_table(result: dict[str, Any]) -> None:
    print(f"\n{'side':<30} {'seconds':>8} {'events/s':>9} {'x before':>9} {'peak RSS MB':>12} "
          f"{'x before':>9} {'gold rows':>10} {'definition rows':>16}")
    for name, side in result["sides"].items():
        rows = side["gold_rows"]
        print(f"{name:<30} {side['end_to_end']:>8.1f} {side['events_per_s']:>9,} "
              f"{side['time_vs_before']:>9} {side['peak_rss_mb']:>12,} "
              f"{side['rss_vs_before']:>9} {rows['experiment_metrics'] or 0:>10,} "
              f"{rows['definition_metrics'] or 0:>16,}")
    print(f"\n{'side':<30} every run, seconds (the table shows the median run)")
    for name, side in result["sides"].items():
        print(f"{name:<30} " + ", ".join(f"{s:.1f}" for s in side["runs_end_to_end"]))
    print(f"\n{'side':<30} sessionize's steps, seconds")
    for name, side in result["sides"].items():
        steps = side["step_seconds"].get("sessionize", {})
        print(f"{name:<30} " + ", ".join(f"{step} {s:.1f}" for step, s in steps.items()))
    big = list(result["sides"].values())[-1]
    print(f"\n20 definitions / default catalog = {big['time_vs_default']}x; "
          f"{result['events']:,} beacons; {result['machine']}")


if __name__ == "__main__":
    sys.exit(main())
