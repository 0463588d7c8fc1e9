"""The one root exception type; every user-facing error is an ``AbstreamError``."""


class AbstreamError(Exception):
    """An error a user can act on; the CLI prints its message as one line."""

    exit_code = 1


class ConfigError(AbstreamError):
    """A configuration value is missing, malformed or out of range."""

    exit_code = 2


class UsageError(AbstreamError):
    """A command was called in a way that cannot work (wrong arguments, wrong state)."""

    exit_code = 2


def first_line(exc: BaseException) -> str:
    """The first non-blank line of an exception's message (Java errors carry pages)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__


class Interrupted(AbstreamError):
    """The user asked to stop (Ctrl-C, SIGTERM) before the work was done."""

    exit_code = 130
