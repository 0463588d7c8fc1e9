"""Values that change from one micro-batch to the next (watermarks, batch ids, the batch's
time) as columns whose generated code does not change with them.

Spark writes a literal of a primitive type (a long, a timestamp) into the Java it generates
for a plan, so a micro-batch whose plan differs from the last one's only in a watermark has
its classes compiled again (Janino), and their hot loops start over in the JVM's
interpreter. A decimal literal reaches the generated class by reference instead: the plans
of successive micro-batches built with these columns generate the same code, and Spark's
code cache and the JIT's compiled loops serve them all.

A value that only a comparison needs is compared as a decimal (``micros`` against
``micros_constant``); a column that carries the value (``long_constant``, ``instant``)
converts it in the generated code, behind a branch never taken that the optimizer cannot
fold away. A filter through either is not pushed down to a table's file statistics: keep
plain literals where a read skips files by them.
"""

from __future__ import annotations

from decimal import Decimal

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import DecimalType

#: Epoch microseconds as a decimal: 18 digits hold any time up to the year 33658.
_MICROS = DecimalType(18, 0)


def micros(timestamp: Column | str) -> Column:
    """A ``timestamp`` column's epoch microseconds, to compare with ``micros_constant``."""
    return F.unix_micros(F.col(timestamp) if isinstance(timestamp, str) else timestamp) \
        .cast(_MICROS)


def micros_constant(value: int) -> Column:
    """``value`` (epoch microseconds, or any whole number of 18 digits at most) as a literal
    passed to generated code by reference."""
    return F.lit(Decimal(value)).cast(_MICROS)


def long_constant(value: int) -> Column:
    """``value`` as a long column whose generated code is the same for every value."""
    never = F.when(F.spark_partition_id() < 0, F.lit(None).cast(_MICROS))
    return F.coalesce(never, micros_constant(value)).cast("long")


def instant(value: int) -> Column:
    """The timestamp ``value`` (epoch microseconds) as a column whose generated code is the
    same for every value."""
    return F.timestamp_micros(long_constant(value))
