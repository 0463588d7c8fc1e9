"""Restarting failed components: exponential backoff, a budget of restarts per window.

A component's query can fail for reasons that pass (a full disk that is cleared, a broker or
object store that is briefly away, a table folder made writable again) and for reasons that
a restart cannot fix (a configuration or usage error). The first are restarted after a
pause that doubles with each failure in the window, up to ``run.max_restarts`` within
``run.restart_window``; one failure more, or a permanent cause, ends the run with a
``ComponentFailed`` naming the component and the cause.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict, deque
from collections.abc import Callable

from abstream.config import RunSettings
from abstream.durations import spark_interval
from abstream.errors import ComponentFailed, root_cause
from abstream.periodic import backoff_seconds

log = logging.getLogger(__name__)

#: Causes no restart can fix: abstream's own configuration and usage errors, raised in a
#: micro-batch and carried in the query's error text.
PERMANENT = ("abstream.errors.ConfigError", "abstream.errors.UsageError")


def is_permanent(cause: BaseException) -> bool:
    text = str(cause)
    return any(marker in text for marker in PERMANENT)


class Supervisor:
    """Decides, failure by failure, whether and when a component is started again."""

    def __init__(self, settings: RunSettings,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.settings, self.clock = settings, clock
        self._failures: dict[str, deque[float]] = defaultdict(deque)

    def failed(self, component: str, cause: BaseException) -> float:
        """Seconds to wait before starting ``component`` again after ``cause``; raises
        ``ComponentFailed`` when it is not to be restarted."""
        log.debug("%s failed", component, exc_info=cause)
        now = self.clock()
        failures = self._failures[component]
        failures.append(now)
        window = self.settings.restart_window.total_seconds()
        while failures and failures[0] < now - window:
            failures.popleft()
        if is_permanent(cause) or len(failures) > self.settings.max_restarts:
            raise ComponentFailed(component, cause, len(failures)) from cause
        delay = backoff_seconds(self.settings, len(failures))
        log.warning("%s failed: %s; restart %d of %d in %s (within %s)", component,
                    root_cause(cause), len(failures), self.settings.max_restarts,
                    f"{delay:.1f} s", spark_interval(self.settings.restart_window))
        return delay
