"""Harness for API-outage tests (no tests here): an API server that can be switched off and on again, and
waits on explicit signals -- a write to the API server's store, a line of a process's output -- with
bounded timeouts instead of sleeping and hoping.

``LocalAPIServer`` threads cannot be started twice, so "on again" is a new server on the same port that
loads the snapshot the stopped one wrote: every object comes back with its UID and resourceVersion, as
an API server restarted on top of its etcd would.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from migdra_devcluster.apiserver import LocalAPIServer


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class StoreChanges:
    """Wakes a waiting test on every write to the API servers it watches (:meth:`watch` each one)."""

    def __init__(self, server: LocalAPIServer | None = None) -> None:
        self._changed = threading.Event()
        if server is not None:
            self.watch(server)

    def watch(self, server: LocalAPIServer) -> None:
        server.store.add_listener(lambda event: self._changed.set())
        self._changed.set()

    def wait_until(self, condition: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
        """Check ``condition`` now and after every write to the store, until it holds (or fail after ``timeout``)."""
        deadline = time.monotonic() + timeout
        while True:
            self._changed.clear()  # before the check: a write during the check wakes the wait below
            if condition():
                return
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self._changed.wait(remaining):
                raise AssertionError(f"not within {timeout:g} s: {what}")


class RestartableApiServer:
    """The local API server on a fixed port, with :meth:`stop` (an outage) and :meth:`start` (it is back)."""

    def __init__(self, root: Path) -> None:
        self.port = free_port()
        self.snapshot = root / "apiserver-snapshot.json"
        self.server: LocalAPIServer | None = None
        self.changes = StoreChanges()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> LocalAPIServer:
        server = LocalAPIServer(port=self.port, snapshot=self.snapshot).start()
        self.changes.watch(server)
        self.server = server
        return server

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None

    def wait_until(self, condition: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
        """Check ``condition`` now and after every write to the store, until it holds (or fail after ``timeout``)."""
        self.changes.wait_until(condition, what, timeout)


@contextmanager
def restartable_api_server(root: Path) -> Iterator[RestartableApiServer]:
    api = RestartableApiServer(root)
    api.start()
    try:
        yield api
    finally:
        api.stop()


class OutputLines:
    """Every line a process writes, read on a thread as it comes, so a test can wait for a line."""

    def __init__(self, stream: IO[str]) -> None:
        self.lines: list[str] = []
        self._cond = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._read, args=(stream,), name="output-lines", daemon=True)
        self._thread.start()

    def _read(self, stream: IO[str]) -> None:
        with stream:  # closed at the end of the output: the pipe is this reader's
            for line in stream:
                with self._cond:
                    self.lines.append(line.rstrip("\n"))
                    self._cond.notify_all()
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    @property
    def text(self) -> str:
        with self._cond:
            return "\n".join(self.lines)

    def count(self, match: Callable[[str], bool]) -> int:
        with self._cond:
            return sum(1 for line in self.lines if match(line))

    def wait_for(self, match: Callable[[str], bool], what: str, count: int = 1, timeout: float = 30.0) -> None:
        """Until ``count`` lines match; fails (with the output) after ``timeout`` or when the output ends."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while sum(1 for line in self.lines if match(line)) < count:
                remaining = deadline - time.monotonic()
                if self._closed or remaining <= 0:
                    why = "the process ended" if self._closed else f"not within {timeout:g} s"
                    raise AssertionError(f"{why}: {what}; output:\n" + "\n".join(self.lines[-40:]))
                self._cond.wait(remaining)

    def join(self, timeout: float = 30.0) -> None:
        self._thread.join(timeout)
