"""Harness for API-outage tests (no tests here): a kube-apiserver of the test's own that can be switched off
and on again, and a process's output lines a test waits on (``tests.waiting.wait_for``).

The outage is real: kube-apiserver stops, every request is refused, and it comes back on the same port
over the same etcd, every object with its UID and resourceVersion, as after a restart in a cluster.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from tests.kube_apiserver import KubeApiServer, kube_apiserver, require_kube_binaries
from tests.waiting import WAIT, wait_for

RestartableApiServer = KubeApiServer
"""``stop()`` is the outage, ``start()`` its end."""


@contextmanager
def restartable_api_server(root: Path) -> Iterator[KubeApiServer]:
    """A kube-apiserver (and etcd) of the caller's own in ``root``; skipped without ``make kube``."""
    require_kube_binaries()
    with kube_apiserver(root / "kube-apiserver") as server:
        yield server


class OutputLines:
    """Every line a process writes, read on a thread as it comes, so a test can wait for a line."""

    def __init__(self, stream: IO[str]) -> None:
        self.lines: list[str] = []
        self._lock = threading.Lock()
        self._changed = threading.Event()  # set on every line and at the end of the output
        self._closed = False
        self._thread = threading.Thread(target=self._read, args=(stream,), name="output-lines", daemon=True)
        self._thread.start()

    def _read(self, stream: IO[str]) -> None:
        with stream:  # closed at the end of the output: the pipe is this reader's
            for line in stream:
                with self._lock:
                    self.lines.append(line.rstrip("\n"))
                self._changed.set()
        with self._lock:
            self._closed = True
        self._changed.set()

    @property
    def text(self) -> str:
        with self._lock:
            return "\n".join(self.lines)

    def count(self, match: Callable[[str], bool]) -> int:
        with self._lock:
            return sum(1 for line in self.lines if match(line))

    def tail(self, lines: int = 40) -> str:
        with self._lock:
            return "\n".join(self.lines[-lines:])

    def wait_for_line(self, what: str, match: Callable[[str], bool], count: int = 1, timeout: float = WAIT) -> None:
        """Until ``count`` lines match; fails (with the output) after ``timeout`` or when the output ends."""

        def matched() -> bool:
            closed = self._closed  # read before the lines: a line written before the end is counted
            if self.count(match) >= count:
                return True
            if closed:  # no line can come any more
                raise AssertionError(f"the process ended before {what}; output:\n{self.tail()}")
            return False

        wait_for(what, matched, timeout=timeout, changes=self._changed, detail=lambda: f"output:\n{self.tail()}")

    def join(self, timeout: float = 30.0) -> None:
        self._thread.join(timeout)
