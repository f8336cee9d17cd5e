"""Per-key retry bookkeeping for a level-triggered loop: who failed, when they may be tried again.

Why not sleep in the loop: the kubelet looks at every pod after every change; a pod whose prepare
failed must not be retried on each unrelated change (that would hammer a broken plugin) nor delay the
others.  So each key (a pod UID and what is being done to it) carries its own capped exponential
backoff (:class:`dra_driver.kube.failures.BackoffPolicy`) and a not-before time; the loop asks
:meth:`RetryTracker.due` before acting and sleeps at most until :meth:`RetryTracker.next_due`.
The clock is injectable so the bookkeeping is tested without waiting.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass

from dra_driver.kube.failures import Backoff, BackoffPolicy


@dataclass
class _Entry:
    backoff: Backoff
    not_before: float


class RetryTracker:
    """Failures and their backoff per key; not thread-safe (one loop owns it)."""

    def __init__(self, policy: BackoffPolicy, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.policy = policy
        self._clock = clock
        self._entries: dict[Hashable, _Entry] = {}

    def due(self, key: Hashable) -> bool:
        """Whether ``key`` may be tried now: it never failed, or its backoff has passed."""
        entry = self._entries.get(key)
        return entry is None or self._clock() >= entry.not_before

    def failed(self, key: Hashable, exc: BaseException | None = None) -> float:
        """Record a failure of ``key``; returns the seconds until it is due again."""
        entry = self._entries.get(key)
        if entry is None:
            entry = self._entries[key] = _Entry(self.policy.start(), 0.0)
        delay = entry.backoff.next_delay(exc)
        entry.not_before = self._clock() + delay
        return delay

    def failures(self, key: Hashable) -> int:
        """How many failures in a row ``key`` has had (0 after a success)."""
        entry = self._entries.get(key)
        return 0 if entry is None else entry.backoff.failures

    def succeeded(self, key: Hashable) -> None:
        """``key`` worked: its next failure starts from the initial delay again."""
        self._entries.pop(key, None)

    def forget(self, keep: Callable[[Hashable], bool]) -> None:
        """Drop the entries of keys that no longer matter (a pod that is gone)."""
        for key in [k for k in self._entries if not keep(k)]:
            del self._entries[key]

    def next_due(self) -> float | None:
        """Seconds until the earliest failed key is due (0 when one is due now), None when none failed."""
        if not self._entries:
            return None
        return max(0.0, min(entry.not_before for entry in self._entries.values()) - self._clock())
