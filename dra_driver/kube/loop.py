"""The one background-loop design of migdra's processes: a thread that runs level-triggered passes.

Every long-running background job of the node plugin, the reservation controller and the local
cluster is a :class:`ControlLoop`: the plugin's slice publisher, claim status reporter, placement
occupancy, realize before bind and GPU fault watcher, the controller's reservations, the local
scheduler and claim controller.  They share one life: start (with the informers they own), run one
pass -- :meth:`ControlLoop.sync`, which looks at the whole state and does whatever is missing -- after
every change and at the latest after :meth:`ControlLoop.next_wake` seconds (``resync`` unless the loop
has a deadline of its own: a backoff, a debounce, a queued write), and stop by waking and joining the
thread.  A change is a bump of the loop's :class:`~dra_driver.kube.informer.Changes`: an informer's
new list or event, or the loop's own :meth:`ControlLoop.trigger` (a write queued, a re-publish
asked for).  Because a pass looks at everything, a missed or coalesced change never loses work; the
changes only decide *when* to look again.  One thread per loop: a pass never runs concurrently with
itself, so a loop's own bookkeeping needs no locks.

Informers: those a loop *owns* (``informers``) it starts, stops and waits for before its first pass
(at most :data:`SYNC_TIMEOUT_SECONDS`; :meth:`ControlLoop.stop` ends that wait at once).  One informer
per kind per process: a cache several loops read is made once by whoever wires the process and
given to each as ``shared`` -- the loop listens to it, and its passes check ``wait_synced(0)`` before
deciding anything from it.
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
    """Subclasses call ``super().__init__`` -- with the informers they own and start (and the
    ``changes`` those report to), or the process's ``shared`` informers they only listen to, or none
    (a loop driven by :meth:`trigger` and its resync) -- and implement :meth:`sync`; :meth:`next_wake`
    may shorten the wait (a deadline of their own)."""

    def __init__(
        self,
        name: str,
        changes: Changes | None = None,
        informers: Sequence[Informer] = (),
        resync: float = 60.0,
        *,
        shared: Sequence[Informer] = (),
    ) -> None:
        self.name = name
        self.changes = changes if changes is not None else Changes()
        self.resync = resync
        self._informers = tuple(informers)
        self._shared = tuple(shared)
        for informer in self._shared:
            informer.listen(self.changes)
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._last_pass = time.monotonic()  # a pass finished, or the loop started

    @abstractmethod
    def sync(self) -> None:
        """One pass over the state: do whatever is missing."""

    def next_wake(self) -> float:
        """Seconds until the next pass at the latest (without a change)."""
        return self.resync

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def trigger(self) -> None:
        """Run a pass now (or right after the one running)."""
        self.changes.bump()

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
        for informer in self._informers + self._shared:
            if not informer.alive:
                return f"{self.name}: an informer's thread is not running"
        idle, limit = time.monotonic() - self._last_pass, STUCK_AFTER_RESYNCS * self.resync + SYNC_TIMEOUT_SECONDS
        if idle > limit:
            return f"{self.name}: no pass has finished for {idle:.0f} s (stuck after {limit:g} s)"
        return None

    def stop(self) -> None:
        self.finish()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)
        for informer in self._informers:
            informer.stop()

    def finish(self) -> None:
        """Run no further pass (the loop's own thread may call it: a fatal error); :meth:`stop` joins."""
        self._stopping.set()
        self.changes.bump()

    def wait_synced(self, timeout: float) -> bool:
        """Whether every informer of this loop listed within ``timeout`` seconds; :meth:`stop` ends the
        wait at once (an API outage must not hold up a stop)."""
        deadline = time.monotonic() + timeout
        seen = self.changes.count
        while not all(informer.wait_synced(0) for informer in self._informers + self._shared):
            remaining = deadline - time.monotonic()
            if self._stopping.is_set() or remaining <= 0:
                return False
            seen = self.changes.wait_past(seen, remaining)  # an informer bumps once listed, stop() too
        return True

    def _run(self) -> None:
        if self._informers:
            self.wait_synced(SYNC_TIMEOUT_SECONDS)
        while not self._stopping.is_set():
            seen = self.changes.count
            try:
                self.sync()
            except Exception:  # a bug in one pass must not stop the component; the next change retries
                log.exception("%s: pass failed", self.name)
            self._last_pass = time.monotonic()
            if self._stopping.is_set():
                return
            self.changes.wait_past(seen, max(0.05, self.next_wake()))
