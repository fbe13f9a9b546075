"""Background services: one thread each, a ``run_once`` tests call directly, start/stop/wake."""

from __future__ import annotations

import abc
import logging
import threading

log = logging.getLogger(__name__)
MAX_FAILURE_PAUSE = 2.0  # seconds between the rounds of a service that keeps failing


class Service(abc.ABC):
    """Runs ``run_once`` every ``interval_ms`` or when woken, until stopped."""

    name = "service"

    def __init__(self, interval_ms: float) -> None:
        self.interval_ms = interval_ms
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self.failures = 0
        self.last_error: BaseException | None = None

    def start(self) -> None:
        if self._thread is None:
            self._stopped.clear()
            self._thread = threading.Thread(target=self._loop, name=f"rocketstore-{self.name}", daemon=True)
            self._thread.start()

    @property
    def wake_event(self) -> threading.Event:
        return self._wake

    def wake(self) -> None:
        if not self._wake.is_set():
            self._wake.set()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _loop(self) -> None:
        while not self._stopped.is_set():
            self._wake.wait(self.wait_seconds())
            self._wake.clear()
            if self._stopped.is_set():
                break
            try:
                self.run_once()
                self.failures = 0
            except Exception as exc:  # a service keeps running; the failure is logged and counted
                self.failures += 1
                self.last_error = exc
                self.on_failure(exc)
            # after a failure rest: a full interval, doubling while it keeps failing (up to
            # MAX_FAILURE_PAUSE), so that a round failing at once (a full disk) neither spins nor floods the log
            interval = self.interval_ms / 1000
            backoff = max(interval, min(MAX_FAILURE_PAUSE, interval * 2 ** min(self.failures - 1, 16)))
            pause = max(self.pause_after_run(), backoff if self.failures else 0.0)
            if pause:
                self._stopped.wait(pause)

    def wait_seconds(self) -> float:
        """How long to sleep before the next round unless woken (``interval_ms`` by default)."""
        return self.interval_ms / 1000

    def pause_after_run(self) -> float:
        """Seconds to rest after a round even if woken (0: none)."""
        return 0.0

    def on_failure(self, exc: BaseException) -> None:
        """Log a failure: the first of a run (with its traceback, unless an OSError says what the
        system refused: a full disk, no descriptor left), then at 2, 4, 8, ... in a row."""
        if self.failures == 1 and isinstance(exc, OSError):
            log.error("%s failed: %s", self.name, exc)
        elif self.failures == 1:
            log.exception("%s failed", self.name, exc_info=exc)
        elif self.failures & (self.failures - 1) == 0:
            log.error("%s failed %d times in a row: %s", self.name, self.failures, exc)

    @abc.abstractmethod
    def run_once(self) -> object:
        """One round of the service's work."""

    def stop(self) -> None:
        """Stop the thread, then let the service finish its work (``on_stop``)."""
        self._stopped.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self.on_stop()

    def on_stop(self) -> None:  # noqa: B027 - a hook; most services have nothing to finish
        """Finish the service's work after its thread stopped."""
