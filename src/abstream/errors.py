"""The one root exception type; every user-facing error is an ``AbstreamError``."""

from __future__ import annotations

import re


class AbstreamError(Exception):
    """An error a user can act on; the CLI prints its message as one line."""

    exit_code = 1


class ConfigError(AbstreamError):
    """A configuration value is missing, malformed or out of range."""

    exit_code = 2


class UsageError(AbstreamError):
    """A command was called in a way that cannot work (wrong arguments, wrong state)."""

    exit_code = 2


class Interrupted(AbstreamError):
    """The user asked to stop (Ctrl-C, SIGTERM) before the work was done."""

    exit_code = 130


class StepFailed(AbstreamError):
    """A step failed for a cause outside abstream (starting Spark, a download, a broker):
    the step and the cause stay attributes; the message is one line (by default the step
    and the first line of the cause)."""

    def __init__(self, step: str, cause: BaseException, message: str | None = None) -> None:
        self.step, self.cause = step, cause
        super().__init__(message or f"{step}: {first_line(cause)}")


class ComponentFailed(StepFailed):
    """A component's query failed and is not restarted again: its cause is permanent, or
    it failed ``failures`` times within the restart window."""

    def __init__(self, component: str, cause: BaseException, failures: int = 1) -> None:
        self.component, self.failures = component, failures
        times = f" {failures} times in a row" if failures > 1 else ""
        super().__init__(component, cause, f"{component} failed{times}: {root_cause(cause)}")


def first_line(exc: BaseException) -> str:
    """The first non-blank line of an exception's message (Java errors carry pages)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__


#: A line naming an exception and its message: ``java.io.IOException: No space left``,
#: ``Caused by: ...``, ``: java...`` (py4j's form) or ``abstream.errors.UsageError: ...``.
_RAISED = re.compile(r"^(?:Caused by: |: )?(?:[\w$]+\.)*(?P<name>[\w$]*(?:Exception|Error)): "
                     r"(?P<message>.+)$")
#: A query's failure in one line: ``[STREAM_FAILED] Query [...] terminated with exception: X``.
_TERMINATED = re.compile(r"terminated with exception: (.+)")
_SQLSTATE = re.compile(r"(?: SQLSTATE: \w+)+$")
#: Exceptions that only wrap the one that matters: a query that failed, a call into the
#: JVM or into Python's foreachBatch function that raised.
_WRAPPERS = ("StreamingQueryException", "Py4JJavaError", "Py4JException",
             "ForeachBatchUserFuncException", "SparkException", "ExecutionException")


def root_cause(exc: BaseException) -> str:
    """The line of a (Spark, Java, Python) error that says what went wrong: the first
    exception named in its text that does not merely wrap another, without its package."""
    text = str(exc)
    for line in [*text.splitlines(), *_TERMINATED.findall(text)]:
        found = _RAISED.match(_SQLSTATE.sub("", line.strip()))
        if found and found["name"] not in _WRAPPERS:
            return f"{found['name']}: {found['message'].strip()}"
    terminated = _TERMINATED.search(text)
    return _SQLSTATE.sub("", terminated[1] if terminated else first_line(exc))
