"""Harness for API-outage tests (no tests here): an API server that can be switched off and on again, and
the signals a test waits on (``tests.waiting.wait_for``) instead of polling: a write to the API server's
store, a line of a process's output.

``LocalAPIServer`` threads cannot be started twice, so "on again" is a new server on the same port that
loads the snapshot the stopped one wrote: every object comes back with its UID and resourceVersion, as
an API server restarted on top of its etcd would.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from migdra_devcluster.apiserver import LocalAPIServer
from tests.waiting import WAIT, wait_for


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class StoreChanges(threading.Event):
    """Set on every write to the API servers it watches (:meth:`watch` each one): a test waits with
    ``wait_for(what, probe, changes=...)``, which looks again after each write instead of polling."""

    def __init__(self, server: LocalAPIServer | None = None) -> None:
        super().__init__()
        if server is not None:
            self.watch(server)

    def watch(self, server: LocalAPIServer) -> None:
        server.store.add_listener(lambda event: self.set())
        self.set()


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
