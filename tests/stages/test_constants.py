"""Per-micro-batch values as columns: right values, and the same generated code whatever the
value (a micro-batch reuses the classes of the one before)."""

from datetime import UTC, datetime

import pytest
from pyspark.sql import functions as F

from abstream.stages import constants
from abstream.times import micros_from

T0 = micros_from(datetime(2026, 1, 5, 10, 0, tzinfo=UTC))


def _generated_code(frame) -> str:
    """The Java Spark generates for ``frame``'s plan, without the plan's own text."""
    text = frame.sparkSession._jvm.org.apache.spark.sql.api.python.PythonSQLUtils \
        .explainString(frame._jdf.queryExecution(), "codegen")
    code = [line for line in text.splitlines() if line.startswith("/*")]
    assert code, "no whole-stage generated code in the plan"
    return "\n".join(code)


def _frame(spark):
    return spark.range(4).select(F.timestamp_micros(F.col("id") + T0).alias("ts"))


USES = {
    "a comparison": lambda frame, value: frame.where(
        constants.micros("ts") < constants.micros_constant(value)),
    "a long column": lambda frame, value: frame.select(
        "ts", constants.long_constant(value).alias("value")),
    "a timestamp column": lambda frame, value: frame.select(
        "ts", constants.instant(value).alias("value")),
}


@pytest.mark.parametrize("use", USES)
def test_generated_code_is_the_same_for_every_value(spark, use):
    frame = _frame(spark)
    one, other = (USES[use](frame, value) for value in (T0 + 2, T0 + 3))
    assert _generated_code(one) == _generated_code(other)
    assert one.count() == (2 if use == "a comparison" else 4)
    assert other.count() == (3 if use == "a comparison" else 4)


def test_a_plain_literal_changes_the_generated_code(spark):
    """What the columns avoid, so that the test above can fail."""
    frame = _frame(spark)
    one, other = (frame.where(F.col("ts") < F.timestamp_micros(F.lit(value)))
                  for value in (T0 + 2, T0 + 3))
    assert _generated_code(one) != _generated_code(other)


def test_columns_carry_their_values(spark):
    row = _frame(spark).limit(1).select(
        constants.long_constant(T0).alias("long"),
        F.unix_micros(constants.instant(T0)).alias("instant"),
        (constants.micros("ts") == constants.micros_constant(T0)).alias("equal"),
    ).first()
    assert row["long"] == T0
    assert row["instant"] == T0
    assert row["equal"] is True
