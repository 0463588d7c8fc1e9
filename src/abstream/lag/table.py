"""Lag rows as a table for people."""

from __future__ import annotations

from collections.abc import Sequence

from abstream.lag.measure import ERROR, LagRow
from abstream.rendering import duration, render_table

HEADER = ("component", "source", "status", "lag", "oldest unprocessed", "unprocessed",
          "bytes", "last batch")


def lag_table(rows: Sequence[LagRow]) -> str:
    """One line per component and source; the detail of failed rows after the table."""
    lines = [HEADER, *([
        row.component, row.source, row.status, duration(row.lag_seconds),
        row.oldest_unprocessed_commit_ts or "-", _unprocessed(row),
        f"{row.unprocessed_bytes:,}",
        "-" if row.last_committed_batch is None else str(row.last_committed_batch),
    ] for row in rows)]
    errors = [f"{row.component} on {row.source}: {row.detail}" for row in rows
              if row.detail and row.status == ERROR]
    return "\n".join([render_table(lines, left=range(len(HEADER))), *errors])


def _unprocessed(row: LagRow) -> str:
    if row.offsets_behind is not None:
        return f"{row.offsets_behind:,} records"
    return f"{row.unprocessed_versions} {'files' if row.source_kind == 'files' else 'versions'}"
