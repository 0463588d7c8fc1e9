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
FACTS = (DUPLICATES, LATE, STATE_ROWS, WATERMARK, OUTPUT_WATERMARK)
#: The key of a progress event under which the listener adds those facts for consumers.
REPORTED = "abstream"

#: Name of the observed metrics of gold freshness, and its histogram buckets (seconds).
FRESHNESS = "freshness"
FRESHNESS_BUCKETS = (1, 5, 15, 30, 60, 300, 900, 3600, 21600, 86400)
