"""A control loop: a component made of informers and one level-triggered thread.

The claim controller and the scheduler have the same life: start their informers, wait for the first
lists, then run one pass over the whole cached state after every change (and at least every
``resync`` seconds, so a missed event costs at most that long), and stop by waking and joining the
thread.  One thread per loop: a pass never runs concurrently with itself, so a component's own
bookkeeping needs no locks.
"""

from __future__ import annotations

import logging
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence

from dra_driver.kube.informer import Changes, Informer

log = logging.getLogger(__name__)

SYNC_TIMEOUT_SECONDS = 30.0
"""How long a loop waits for its informers' first lists before its first pass (it runs anyway)."""
STUCK_AFTER_RESYNCS = 3
"""A loop that finished no pass for this many resync intervals (plus the first lists' wait) is stuck."""


class ControlLoop(ABC):
    """Subclasses create ``changes`` and their informers, call ``super().__init__``, and implement
    :meth:`sync`; :meth:`next_wake` may shorten the wait (a deadline of their own)."""

    def __init__(self, name: str, changes: Changes, informers: Sequence[Informer], resync: float) -> None:
        self.name = name
        self.changes = changes
        self.resync = resync
        self._informers = tuple(informers)
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._last_pass = time.monotonic()  # a pass finished, or the loop started

    @abstractmethod
    def sync(self) -> None:
        """One pass over the cached state: do whatever is missing."""

    def next_wake(self) -> float:
        """Seconds until the next pass at the latest (without a change)."""
        return self.resync

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def start(self) -> None:
        for informer in self._informers:
            informer.start()
        self._last_pass = time.monotonic()
        self._thread.start()

    def liveness_problem(self) -> str | None:
        """Why this started loop is not alive -- its thread or an informer's has died, or no pass has
        finished for :data:`STUCK_AFTER_RESYNCS` resyncs (plus the first lists' wait) -- or None."""
        if self._stopping.is_set():
            return None  # stopping on purpose
        if self._thread.ident is None:
            return f"{self.name}: not started yet"
        if not self._thread.is_alive():
            return f"{self.name}: its thread is not running"
        for informer in self._informers:
            if not informer.alive:
                return f"{self.name}: an informer's thread is not running"
        idle, limit = time.monotonic() - self._last_pass, STUCK_AFTER_RESYNCS * self.resync + SYNC_TIMEOUT_SECONDS
        if idle > limit:
            return f"{self.name}: no pass has finished for {idle:.0f} s (stuck after {limit:g} s)"
        return None

    def stop(self) -> None:
        self._stopping.set()
        self.changes.bump()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        for informer in self._informers:
            informer.stop()

    def wait_synced(self, timeout: float) -> bool:
        return all(informer.wait_synced(timeout) for informer in self._informers)

    def _run(self) -> None:
        self.wait_synced(SYNC_TIMEOUT_SECONDS)
        while not self._stopping.is_set():
            seen = self.changes.count
            try:
                self.sync()
            except Exception:  # a bug in one pass must not stop the component; the next change retries
                log.exception("%s: pass failed", self.name)
            self._last_pass = time.monotonic()
            self.changes.wait_past(seen, max(0.05, self.next_wake()))
