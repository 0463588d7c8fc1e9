"""Work done every so often in a thread of the driver, beside the streaming queries."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta

from abstream.config import RunSettings


def backoff_seconds(settings: RunSettings, failures: int) -> float:
    """The pause after the ``failures``-th failure in a row: ``run.restart_backoff``,
    doubled with each failure, at most ``run.restart_backoff_max``."""
    return min(settings.restart_backoff.total_seconds() * 2 ** (failures - 1),
               settings.restart_backoff_max.total_seconds())


class Periodic:
    """Calls ``work`` every ``every`` (the first time after ``first`` seconds, by default
    ``every``) until stopped, or at once when woken. ``work`` returns how long to wait
    before its next call (seconds), or None for ``every``."""

    def __init__(self, name: str, every: timedelta, work: Callable[[], float | None],
                 first: float | None = None) -> None:
        self.every, self.work, self.first = every, work, first
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def wake(self) -> None:
        """Call ``work`` now (after the call under way, if any)."""
        self._wake.set()

    def stop(self) -> None:
        """Stop after the call under way, if any."""
        self._stop.set()
        self._wake.set()
        self._thread.join()

    def _run(self) -> None:
        wait = self.every.total_seconds() if self.first is None else self.first
        while True:
            self._wake.wait(wait)
            self._wake.clear()
            if self._stop.is_set():
                return
            delay = self.work()
            wait = self.every.total_seconds() if delay is None else delay
