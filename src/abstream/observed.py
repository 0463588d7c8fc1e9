"""What the speed layer reports of each micro-batch beyond Spark's own progress, by name: the
contract between the components, which observe it, and the monitor, which exports it."""

from __future__ import annotations

#: What a component's sink reports of a micro-batch besides the rows it wrote: repeats it
#: dropped, events behind its watermark it dropped, and the rows of state it carries on.
DUPLICATES = "duplicates dropped"
LATE = "late rows dropped"
STATE_ROWS = "state rows"
#: The event-time watermarks (epoch milliseconds) a component carries itself: its input
#: watermark, and the output watermark the operators after it read (docs/design.md,
#: "Watermarks per operator").
WATERMARK = "watermark ms"
OUTPUT_WATERMARK = "output watermark ms"
#: Gold freshness, the age of each event a micro-batch takes in at its start, as the parts
#: of a Prometheus histogram: the events, the sum of their ages and, per bucket bound, the
#: events at most that old (seconds).
FRESHNESS_BUCKETS = (1, 5, 15, 30, 60, 300, 900, 3600, 21600, 86400)
FRESHNESS_COUNT = "freshness count"
FRESHNESS_SUM = "freshness sum"


def freshness_bucket(bound: int) -> str:
    """The fact of gold freshness's bucket ``bound`` (seconds)."""
    return f"freshness le {bound}"


FRESHNESS_FACTS = (FRESHNESS_COUNT, FRESHNESS_SUM, *map(freshness_bucket, FRESHNESS_BUCKETS))
FACTS = (DUPLICATES, LATE, STATE_ROWS, WATERMARK, OUTPUT_WATERMARK, *FRESHNESS_FACTS)
#: The key of a progress event under which the listener adds those facts for consumers.
REPORTED = "abstream"
#: Among them, added by the listener: the seconds the component's micro-batches have spent
#: in each of its named steps so far in this process, by step.
STEPS = "step seconds"
