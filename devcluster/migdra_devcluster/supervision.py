"""Processes a development cluster starts: each restarted when it exits (as a DaemonSet's or a static
pod's container would be), each recorded in a pid file with its start time so that ``migdra sim down``
can stop a cluster whose supervisor was killed, and never signal a stranger that reused a pid.

Used by :mod:`migdra_devcluster.cluster` for migdra's own processes and by
:mod:`migdra_devcluster.upstream` for etcd and the Kubernetes components.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from dra_driver.durable import write_file_atomically

SUPERVISOR_PID = "sim.pid"
PLUGIN_PID = "plugin.pid"
PLUGIN_PID_GLOB = "nodes/*/plugin*.pid"
CONTROLLER_PID = "controller.pid"
UPSTREAM_PID_GLOB = "kube/*.pid"
"""The upstream components' pid files, under the workdir."""
REAL_NODE_PID_GLOB = "nodes/*/real/*.pid"
"""A real node's containerd and kubelet pid files, under the workdir."""
STOP_TIMEOUT_SECONDS = 15.0
_RESTART_BACKOFF = (0.5, 10.0)


class SupervisedProcess(ABC):
    """A process of the cluster, started again when it exits (until :meth:`stop`), as a DaemonSet's or
    Deployment's pod would be.  Subclasses say what to run."""

    def __init__(self, name: str, log_path: Path, pid_path: Path, progress: Callable[[str], None]) -> None:
        self.name = name
        self.progress = progress
        self.log_path = log_path
        self.pid_path = pid_path
        self.process: subprocess.Popen[bytes] | None = None
        self.restarts = 0
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._watch, name=name, daemon=True)

    @abstractmethod
    def argv(self) -> list[str]:
        """The command line to run."""

    def env(self) -> dict[str, str]:
        """The process's environment: this one's without ``MIGDRA_*`` (its settings are its flags)."""
        return {k: v for k, v in os.environ.items() if not k.startswith("MIGDRA_")}

    def start(self) -> None:
        self._spawn()
        self._thread.start()

    def _spawn(self) -> None:
        with self.log_path.open("ab") as log_file:  # appended to by restarts; a new cluster starts it afresh
            self.process = subprocess.Popen(
                self.argv(), stdout=log_file, stderr=subprocess.STDOUT, env=self.env(), start_new_session=True
            )
        record_process(self.pid_path, self.process.pid)

    def _watch(self) -> None:
        delay = _RESTART_BACKOFF[0]
        while not self._stopping.is_set():
            process = self.process
            if process is None:
                return
            started = time.monotonic()
            while process.poll() is None:
                if self._stopping.wait(0.2):
                    return
            if self._stopping.is_set():
                return
            delay = _RESTART_BACKOFF[0] if time.monotonic() - started > 30 else min(delay * 2, _RESTART_BACKOFF[1])
            self.progress(f"{self.name} exited with status {process.returncode}; restarting it in {delay:g} s")
            if self._stopping.wait(delay):
                return
            self.restarts += 1
            self._spawn()

    def take_pid_file(self, path: Path) -> None:
        """Record this process in ``path`` from now on (a rollout's new plugin takes its predecessor's)."""
        self.pid_path.replace(path)
        self.pid_path = path

    def exited(self) -> int | None:
        """The exit status of the current process, or None while it runs."""
        return None if self.process is None else self.process.poll()

    def log_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        process = self.process
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=STOP_TIMEOUT_SECONDS)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=5)
        self.pid_path.unlink(missing_ok=True)


@dataclass(frozen=True)
class RecordedProcess:
    """A process a supervisor started, as its pid file says: the pid and the process's start time.

    Why the start time: pids are reused, and ``sim down`` must never signal a stranger that happens
    to have the pid of a plugin that exited long ago.
    """

    path: Path
    pid: int
    start_time: int | None

    def alive(self) -> bool:
        return process_alive(self.pid) and (self.start_time is None or process_start_time(self.pid) == self.start_time)


def process_start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (``/proc/<pid>/stat`` field 22), or None."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


def record_process(path: Path, pid: int) -> None:
    """Write ``path`` atomically (a reader never sees half a pid): ``<pid> <start time>``."""
    start = process_start_time(pid)
    write_file_atomically(path, f"{pid} {start if start is not None else ''}\n".encode(), sync=False)


def recorded_processes(workdir: Path) -> list[RecordedProcess]:
    """Every pid file a supervisor wrote under ``workdir`` (the supervisor's first)."""
    found = []
    for path in [
        workdir / SUPERVISOR_PID,
        workdir / CONTROLLER_PID,
        *sorted(workdir.glob(PLUGIN_PID_GLOB)),  # plugin.pid, and a rollout's new process's plugin-<uid>.pid
        *sorted(workdir.glob(REAL_NODE_PID_GLOB), key=lambda p: p.name != "kubelet.pid"),  # kubelet first
        *sorted(workdir.glob(UPSTREAM_PID_GLOB)),
    ]:
        try:
            parts = path.read_text().split()
            found.append(RecordedProcess(path, int(parts[0]), int(parts[1]) if len(parts) > 1 else None))
        except (OSError, ValueError, IndexError):
            continue
    return found


def process_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, exited but not yet reaped by its parent, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state != "Z"


def stop_recorded(workdir: Path, timeout: float = 30.0) -> list[int]:
    """``migdra sim down``: SIGTERM the supervisor, wait for it, then kill any plugin left behind."""
    stopped: list[int] = []
    for record in recorded_processes(workdir):
        if not record.alive():
            record.path.unlink(missing_ok=True)
            continue
        os.kill(record.pid, signal.SIGTERM)
        limit = timeout if record.path.name == SUPERVISOR_PID else STOP_TIMEOUT_SECONDS
        deadline = time.monotonic() + limit
        while record.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        if record.alive():
            os.kill(record.pid, signal.SIGKILL)
        record.path.unlink(missing_ok=True)
        stopped.append(record.pid)
    return stopped
