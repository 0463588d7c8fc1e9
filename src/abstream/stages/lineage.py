"""The bookkeeping columns every table of both layers carries: which layer wrote a row and
when."""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from abstream.schemas import WINDOW_DAY, with_window_date
from abstream.stages import constants
from abstream.times import now_micros


def lineage_columns(table: StructType, layer: str, **more: Column) -> list[Column]:
    """The ``table``'s columns in its order: ``layer``, ``computed_at`` (now: the write's
    time), ``more`` by name and the others as they are (one projection)."""
    now = constants.instant(now_micros())
    added = {"layer": F.lit(layer), "computed_at": now, **more}
    return [added[name].alias(name) if name in added else F.col(name)
            for name in table.fieldNames()]


def gold_columns(table: StructType, layer: str) -> list[Column]:
    """A gold ``table``'s columns as stored (``with_window_date``): its lineage and the day
    of each row's window."""
    day, source = WINDOW_DAY
    return lineage_columns(with_window_date(table), layer, **{day: F.to_date(source)})
