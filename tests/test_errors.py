"""Errors keep what failed and why as attributes, and say it in one line."""

from abstream.errors import AbstreamError, ComponentFailed, StepFailed


def test_a_failed_step_keeps_its_step_and_cause_and_reads_as_one_line():
    cause = OSError("connection refused\n\tat some.java.Frame(Frame.java:1)")
    error = StepFailed("could not start Spark (spark://nowhere:7077)", cause)
    assert isinstance(error, AbstreamError)
    assert error.step.startswith("could not start Spark") and error.cause is cause
    assert str(error) == "could not start Spark (spark://nowhere:7077): connection refused"


def test_a_failed_component_is_a_failed_step_named_after_it():
    cause = RuntimeError("java.io.IOException: No space left on device")
    error = ComponentFailed("ingest", cause, failures=3)
    assert isinstance(error, StepFailed)
    assert (error.component, error.step, error.cause, error.failures) == (
        "ingest", "ingest", cause, 3)
    assert str(error) == "ingest failed 3 times in a row: IOException: No space left on device"
