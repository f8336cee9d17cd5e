"""Mutual exclusion per key: one lock per GPU (NVML mutations) and one per claim (prepare/unprepare).

Claims on different GPUs run in parallel; two calls for the same claim (kubelet retrying while the
first is still running) or two mutations of the same GPU run one after the other.  Lock order is
always claim, then GPU, then the checkpoint's own lock, so the three never deadlock.

A key's lock exists while someone holds or waits for it, so claim UIDs do not accumulate.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class KeyedLocks:
    """A :class:`threading.Lock` per key, reference-counted."""

    def __init__(self) -> None:
        self._locks: dict[str, tuple[threading.Lock, int]] = {}
        self._guard = threading.Lock()

    @contextmanager
    def hold(self, key: str) -> Iterator[None]:
        with self._guard:
            lock, users = self._locks.get(key, (threading.Lock(), 0))
            self._locks[key] = (lock, users + 1)
        try:
            with lock:
                yield
        finally:
            with self._guard:
                _, users = self._locks[key]
                if users == 1:
                    del self._locks[key]
                else:
                    self._locks[key] = (lock, users - 1)

    def __len__(self) -> int:
        with self._guard:
            return len(self._locks)
