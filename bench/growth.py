"""How the speed layer's cost grows with the input: time, throughput, peak memory and state
at several sizes of the same traffic (a bigger dataset is a longer stream, not a denser one).

Each size runs as the throughput benchmark's pipeline side does (``run --once`` in a cold
JVM, peak RSS of its process tree sampled) and is kept in bench/results/growth/, so a size
given again is measured again and the others are kept. The table, the JSON and the chart
are drawn from every kept size.

    python -m bench.growth [--events 1000000 5000000 20000000] [--seed 1]

Prints a table, then one JSON object as the last line; writes it and a PNG chart to
bench/results/.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from bench.common import (
    COMPONENTS,
    RESULTS,
    dataset,
    log_progress,
    machine,
    records_in,
    run_phase,
    speed_layer_rates,
    write_result,
)

log = logging.getLogger("bench.growth")
POINTS = RESULTS / "growth"


def measure(events: int, seed: int) -> dict[str, Any]:
    """One size: the speed layer over its dataset, stored in POINTS."""
    landing = dataset(events, seed)
    records = records_in(landing)
    work = RESULTS / "work-growth"
    shutil.rmtree(work, ignore_errors=True)
    log.info("speed layer on %s beacons", f"{records:,}")
    result = run_phase("pipeline", landing, work, None)
    shutil.rmtree(work, ignore_errors=True)
    point = {
        "events": records,
        "seed": seed,
        **speed_layer_rates(records, result["seconds"]),
        "peak_rss_mb": result["peak_rss_mb"],
        "state_rows": result["state_rows"],
        "peak_state_rows": result["peak_state_rows"],
        "state_disk_bytes": result["state_disk_bytes"],
        "written": result["written"],
        "machine": machine(),
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    POINTS.mkdir(parents=True, exist_ok=True)
    (POINTS / f"{records}-seed{seed}.json").write_text(json.dumps(point, indent=2))
    return point


def linear_fit(xs: list[float], ys: list[float]) -> tuple[float, float, float]:
    """Least squares y = a + b x: intercept, slope and R²."""
    n = len(xs)
    mean_x, mean_y = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mean_x) ** 2 for x in xs)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / sxx
    intercept = mean_y - slope * mean_x
    total = sum((y - mean_y) ** 2 for y in ys)
    residual = sum((y - intercept - slope * x) ** 2 for x, y in zip(xs, ys, strict=True))
    return intercept, slope, 1.0 - residual / total if total else 1.0


def summarize(points: list[dict[str, Any]]) -> dict[str, Any]:
    events = [p["events"] for p in points]
    seconds = [p["seconds"]["end_to_end"] for p in points]
    result: dict[str, Any] = {"benchmark": "growth", "points": points}
    if len(points) >= 2:
        intercept, slope, r2 = linear_fit(events, seconds)
        rates = [p["end_to_end_events_per_s"] for p in points]
        result["fit"] = {
            "seconds_per_million_events": round(slope * 1e6, 2),
            "fixed_seconds": round(intercept, 2),
            "r2": round(r2, 5),
            "slowest_over_fastest_events_per_s": round(min(rates) / max(rates), 3),
        }
    result["when"] = datetime.now(UTC).isoformat(timespec="seconds")
    return result


def chart(points: list[dict[str, Any]], path: Path) -> None:
    millions = [p["events"] / 1e6 for p in points]
    figure = Figure(figsize=(11, 8))
    axes = figure.subplots(2, 2)
    time_axis, rate_axis, memory_axis, state_axis = axes.flat
    bottom = [0.0] * len(points)
    for component in COMPONENTS:
        part = [p["seconds"][component.name] for p in points]
        time_axis.bar(range(len(points)), part, bottom=bottom, label=component.name)
        bottom = [b + x for b, x in zip(bottom, part, strict=True)]
    time_axis.set_xticks(range(len(points)), [f"{m:g}" for m in millions])
    time_axis.set(title="time (s), stacked per component", xlabel="million beacons")
    time_axis.legend()
    rate_axis.plot(millions, [p["end_to_end_events_per_s"] for p in points], "o-",
                   label="end to end")
    for component in COMPONENTS:
        rate_axis.plot(millions, [p["per_component_events_per_s"][component.name]
                                  for p in points], "o--", label=component.name)
    rate_axis.set(title="events/s", xlabel="million beacons", xscale="log", ylim=(0, None))
    rate_axis.legend()
    memory_axis.plot(millions, [p["peak_rss_mb"] for p in points], "o-")
    memory_axis.set(title="peak resident memory (MB)", xlabel="million beacons",
                    xscale="log", ylim=(0, None))
    for component in COMPONENTS:
        state_axis.plot(millions, [p["peak_state_rows"][component.name] for p in points],
                        "o-", label=component.name)
    state_axis.set(title="most state rows after a micro-batch", xlabel="million beacons",
                   xscale="log", ylim=(0, None))
    state_axis.legend()
    figure.suptitle(f"abstream speed layer, run --once, {points[0]['machine']}")
    figure.tight_layout()
    figure.savefig(path, dpi=100)


def print_table(result: dict[str, Any]) -> None:
    names = [c.name for c in COMPONENTS]
    print(f"\n{'beacons':>11} " + " ".join(f"{n + ' s':>13}" for n in names)
          + f" {'total s':>9} {'events/s':>9} {'peak RSS MB':>12} {'peak state rows':>24}")
    for p in result["points"]:
        state = "/".join(f"{p['peak_state_rows'][n]:,}" for n in names)
        print(f"{p['events']:>11,} " + " ".join(f"{p['seconds'][n]:>13.1f}" for n in names)
              + f" {p['seconds']['end_to_end']:>9.1f} {p['end_to_end_events_per_s']:>9,}"
              + f" {p['peak_rss_mb']:>12,} {state:>24}")
    fit = result.get("fit")
    if fit:
        print(f"\ntime = {fit['fixed_seconds']} s + {fit['seconds_per_million_events']} s per "
              f"million beacons (R² {fit['r2']}); slowest / fastest events/s "
              f"{fit['slowest_over_fastest_events_per_s']}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, nargs="+",
                        default=[1_000_000, 5_000_000, 20_000_000])
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    log_progress()
    for events in sorted(args.events):
        measure(events, args.seed)
    points = sorted((json.loads(p.read_text()) for p in POINTS.glob(f"*-seed{args.seed}.json")),
                    key=lambda p: p["events"])
    result = summarize(points)
    print_table(result)
    stem = write_result(result, "growth")
    chart(points, stem.with_suffix(".png"))
    log.info("chart: %s", stem.with_suffix(".png"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
