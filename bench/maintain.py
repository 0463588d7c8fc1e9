"""What ``abstream maintain`` does to the tables a long stream left: the speed layer over the
generated dataset of a size (as ``make bench`` runs it, ``run --once`` in a cold JVM), then
``abstream maintain --json`` in a cold JVM of its own, timed. Per table: live and stored
files and bytes before and after, the partitions compacted, the files vacuumed and why.

    python -m bench.maintain [--events 20000000] [--seed 1]

Prints a table, then one JSON object as the last line; writes it to bench/results/.
"""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime
from typing import Any

from bench.common import (
    RESULTS,
    dataset,
    dataset_parser,
    log_progress,
    machine,
    records_in,
    run_phase,
    write_result,
)

log = logging.getLogger("bench.maintain")


def maintain_tables(work: str) -> tuple[list[dict[str, Any]], float]:
    """``abstream maintain --json`` over the data dir ``work``: its reports and seconds."""
    began = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "abstream", "maintain", "--json",
                           "--data-dir", work], stdout=subprocess.PIPE, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1]), time.monotonic() - began


def _files(figures: dict[str, int] | None) -> str:
    return "-" if figures is None else f"{figures['files']:,} ({figures['bytes'] / 2**20:,.1f} MB)"


def print_table(result: dict[str, Any]) -> None:
    print(f"\n{'table':<20} {'live before':>22} {'live after':>22} {'stored after':>22} "
          f"{'compacted':>10} {'vacuumed':>22}")
    for table in result["tables"]:
        if not table["exists"]:
            continue
        print(f"{table['table']:<20} {_files(table['live_before']):>22} "
              f"{_files(table['live_after']):>22} {_files(table['stored_after']):>22} "
              f"{len(table['compacted']):>10} {_files(table['vacuumed']):>22}")


def main() -> int:
    parser = dataset_parser(__doc__, 20_000_000)
    args = parser.parse_args()
    log_progress()
    landing = dataset(args.events, args.seed)
    work = RESULTS / "work-maintain"
    shutil.rmtree(work, ignore_errors=True)
    records = records_in(landing)
    log.info("speed layer on %s beacons", f"{records:,}")
    speed = run_phase("pipeline", landing, work, None)
    log.info("maintain")
    tables, seconds = maintain_tables(str(work))
    result = {"benchmark": "maintain", "when": datetime.now(UTC).isoformat(timespec="seconds"),
              "events": records, "seed": args.seed,
              "speed_layer_seconds": speed["seconds"], "maintain_seconds": round(seconds, 1),
              "tables": tables, "machine": machine()}
    shutil.rmtree(work, ignore_errors=True)
    print_table(result)
    write_result(result, "maintain")
    return 0


if __name__ == "__main__":
    sys.exit(main())
