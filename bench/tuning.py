"""What each tuning setting of the default configuration does: the speed layer with one
setting put back to Spark's default (or changed), against the default configuration, on the
same beacons in the same run.

Each variant runs as the throughput benchmark's pipeline side does (``run --once`` in a cold
JVM), with its setting given as ABSTREAM__* environment variables.

    python -m bench.tuning [--events 500000] [--variants shuffle-200,object-agg-128,...]

Prints a table, then one JSON object as the last line; writes it to bench/results/, after
every variant (an interrupted run keeps the variants it measured).
"""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
from datetime import UTC, datetime

from bench.common import (
    COMPONENTS,
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

log = logging.getLogger("bench.tuning")
#: name -> ABSTREAM__* settings; "default" is abstream's configuration as shipped.
VARIANTS: dict[str, dict[str, str]] = {
    "default": {},
    "shuffle-200": {"ABSTREAM__SPARK__CONF":
                    "{spark.sql.shuffle.partitions: 200, "
                    "spark.databricks.delta.snapshotPartitions: 50}"},
    "object-agg-128": {"ABSTREAM__SPARK__CONF":
                       "{spark.sql.objectHashAggregate.sortBased.fallbackThreshold: 128}"},
    "compressed-cache": {"ABSTREAM__SPARK__CONF":
                         "{spark.sql.inMemoryColumnarStorage.compressed: true}"},
    "ingest-5-files": {"ABSTREAM__INGEST__MAX_FILES_PER_TRIGGER": "5"},
    "ingest-50-files": {"ABSTREAM__INGEST__MAX_FILES_PER_TRIGGER": "50"},
    "downstream-200-files": {"ABSTREAM__SESSIONIZE__MAX_FILES_PER_TRIGGER": "200"},
}


def variant_list(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in VARIANTS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown variant {unknown[0]!r}; "
                                         f"choose from {', '.join(VARIANTS)}")
    return names


def main() -> int:
    parser = dataset_parser(__doc__, 500_000)
    parser.add_argument("--variants", type=variant_list, default=list(VARIANTS),
                        help="comma-separated; 'default' is always run first")
    args = parser.parse_args()
    log_progress()
    landing = dataset(args.events, args.seed)
    records = records_in(landing)
    names = ["default"] + [name for name in args.variants if name != "default"]
    result = {"benchmark": "tuning", "events": records, "variants": {}, "machine": machine(),
              "master": "local[2]", "when": datetime.now(UTC).isoformat(timespec="seconds")}
    runs = result["variants"]
    for number, name in enumerate(names, 1):
        log.info("variant %d of %d: %s %s", number, len(names), name, VARIANTS[name])
        work = RESULTS / "work-tuning"
        shutil.rmtree(work, ignore_errors=True)
        measured = run_phase("pipeline", landing, work, None, VARIANTS[name])
        shutil.rmtree(work, ignore_errors=True)
        end_to_end = round(sum(measured["seconds"].values()), 2)
        default = runs["default"]["end_to_end"] if runs else end_to_end
        runs[name] = {"settings": VARIANTS[name], "seconds": measured["seconds"],
                      "end_to_end": end_to_end, "events_per_s": rate(records, end_to_end),
                      "time_vs_default": round(end_to_end / default, 3),
                      "peak_rss_mb": measured["peak_rss_mb"],
                      "state_disk_bytes": measured["state_disk_bytes"]}
        write_result(result, f"tuning-{records}", final=False)
    print_table(runs)
    write_result(result, f"tuning-{records}")
    return 0


def print_table(runs: dict[str, dict]) -> None:
    print(f"\n{'variant':<20} " + " ".join(f"{c.name + ' s':>13}" for c in COMPONENTS)
          + f" {'total s':>9} {'events/s':>9} {'x default time':>15}")
    for name, run in runs.items():
        print(f"{name:<20} " + " ".join(f"{run['seconds'][c.name]:>13.1f}" for c in COMPONENTS)
              + f" {run['end_to_end']:>9.1f} {run['events_per_s']:>9,}"
              + f" {run['time_vs_default']:>15}")


if __name__ == "__main__":
    sys.exit(main())
