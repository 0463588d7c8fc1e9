"""Event-time watermarks per operator, as docs/design.md ("Watermarks per operator") sets
them out for chained operators.

A watermark is an event time (epoch microseconds) before which an operator expects no more
input; None means nothing is known yet (no input can be late). Each operator has

- an input watermark: the minimum of the output watermarks of the operators it reads;
- an output watermark: the minimum of its input watermark and the earliest event time it
  still holds in state, so the rows it emits later are never behind the watermark of the
  operators after it.
"""

from __future__ import annotations

from datetime import timedelta


def source_watermark(seen_until: int | None, lateness: timedelta) -> int | None:
    """The watermark of a source: the latest event time seen, less the allowed lateness."""
    if seen_until is None:
        return None
    return seen_until - lateness // timedelta(microseconds=1)


def input_watermark(*upstream_outputs: int | None) -> int | None:
    """The minimum of the upstream operators' output watermarks."""
    if not upstream_outputs or any(w is None for w in upstream_outputs):
        return None
    return min(w for w in upstream_outputs if w is not None)


def output_watermark(input_: int | None, earliest_held: int | None) -> int | None:
    """The input watermark, held back to the earliest event time still in state."""
    if input_ is None or earliest_held is None:
        return input_
    return min(input_, earliest_held)


def held_source_watermark(previous: int | None, seen_until: int | None,
                          read_until: int | None, lateness: timedelta,
                          earliest_unread: int | None, *, inside: bool) -> int | None:
    """A source's watermark after a micro-batch: the latest of the ``previous`` one (it never
    moves back), the latest event time of the input read whole (``seen_until``) less the
    lateness, and, for a micro-batch that ended ``inside`` a unit of input (a commit, a
    snapshot), the latest event time read (``read_until``) less the lateness held back to
    the earliest event the micro-batch left unread there (``earliest_unread``; where that
    is unknown, only the input read whole counts)."""
    candidates = [previous, source_watermark(seen_until, lateness)]
    read = source_watermark(read_until, lateness)
    if not inside:
        candidates.append(read)
    elif read is not None and earliest_unread is not None:
        candidates.append(min(read, earliest_unread))
    known = [c for c in candidates if c is not None]
    return max(known) if known else None
