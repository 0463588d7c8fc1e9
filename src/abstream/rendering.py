"""Text for people: the one table renderer, and sizes and durations as people read them."""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence


def render_table(lines: Sequence[Sequence[str]], left: Collection[int] = (0,)) -> str:
    """Aligned columns, the header over a rule; the ``left`` columns left-aligned, the
    others right-aligned."""
    widths = [max(len(row[i]) for row in lines) for i in range(len(lines[0]))]
    text = ["  ".join(cell.ljust(w) if i in left else cell.rjust(w)
                      for i, (cell, w) in enumerate(zip(row, widths, strict=True))).rstrip()
            for row in lines]
    text.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(text)


def size(count: int) -> str:
    """Bytes in the largest binary unit below the count: ``1.5 MiB``."""
    units = ("B", "KiB", "MiB", "GiB")
    power = min(len(units) - 1, int(math.log(count, 1024))) if count > 0 else 0
    return f"{count:,} B" if power == 0 else f"{count / 1024 ** power:,.1f} {units[power]}"


def duration(seconds: float) -> str:
    """Seconds below two minutes, minutes below two hours, then hours."""
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"
