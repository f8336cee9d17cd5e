"""The rolling-update lock: one prepare or unprepare at a time across overlapping plugin instances.

During a rolling update of the DaemonSet the old and the new plugin pod serve kubelet side by side
(each on its own pod-UID socket names).  Kubelet may send a prepare to one and an unprepare to the
other at the same time; both act on the same GPUs (creating and destroying MIG instances, writing
CDI specs and the checkpoint), and two processes must never do that concurrently.  An exclusive
``flock`` on ``<plugin dir>/serialize.lock``, held around each call, serialises them -- the same
file the Go ``kubeletplugin`` package uses, so the rule also holds across implementations.

Each call opens the file anew: flock locks belong to an open file description, so two threads of
one process conflict with each other exactly as two processes do, and closing the descriptor
releases the lock even if the holder crashes.  Acquisition blocks; kubelet's 45 s call timeout is
the outer bound a waiting caller sees.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

LOCK_FILE_MODE = 0o600


class SerializeLock:
    """An exclusive ``flock`` on one file, taken per call with :meth:`held`."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @contextmanager
    def held(self) -> Iterator[None]:
        """Block until this caller holds the lock; release it on exit (also on exceptions)."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, LOCK_FILE_MODE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the flock
