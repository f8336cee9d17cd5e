"""Mutual exclusion per key -- in this process and across plugin processes sharing the state directory.

During a rolling update two plugin processes (the old pod and the new one) serve kubelet side by side
on the same GPUs, checkpoint and CDI directory.  So every lock of the prepare path has two layers:
a :class:`threading.Lock` per key for the threads of this process, and an exclusive ``flock`` on a
file in the state directory for the other process.  The kernel drops a process's flocks when it dies
(even by SIGKILL), so a crashed plugin never blocks its successor, and a held flock proves a *live*
process is working under it.

The locks, always taken in this order so that no two holders deadlock:

1. **claim** (``<state dir>/locks/claim-<claim UID>.lock``): one prepare or unprepare of a claim at a
   time, node-wide (kubelet retrying while the first call runs, or the two pods of an update);
2. **GPU** (``<state dir>/locks/gpu-<GPU UUID>.lock``): one NVML mutation of a GPU at a time, so a
   GPU's instances are read, recorded and created without another process creating or destroying
   in between; claims on different GPUs still run in parallel;
3. **checkpoint** (``<state dir>/prepare.lock``, held by :mod:`~kubeletplugin.prepare.checkpoint` for
   each read-modify-write of the checkpoint only: a short critical section).

Claim lock files are removed on release, so UIDs do not accumulate.  Removing a lock file that
another process has open and is waiting on would let it lock an inode nobody else can reach while a
third process locks a new file at the same path; so a lock counts as held only when, *after* the
``flock`` succeeded, the path still names the very inode that was locked -- otherwise the file is
opened again and locked again.

Every wait is bounded: past the timeout a :class:`~kubeletplugin.prepare.errors.LockTimeoutError`
names the lock file, the process holding it where the kernel says (``/proc/locks``), and what to do.
This module never decides what a lock protects; callers do.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from kubeletplugin.prepare.errors import LockTimeoutError

LOCKS_DIR = "locks"
LOCK_FILE_MODE = 0o600
_SAFE_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_FIRST_POLL_S = 0.001
_LAST_POLL_S = 0.05
_PROC = Path("/proc")


def lock_file_name(prefix: str, key: str) -> str:
    """``<prefix><key>.lock``, or a digest of ``key`` when it is not a plain file name.

    Keys come from kubelet (claim UIDs) and NVML (GPU UUIDs); a key such as ``../x`` must never name
    a file outside the locks directory.
    """
    if _SAFE_KEY.match(key):
        return f"{prefix}{key}.lock"
    return f"{prefix}sha256-{hashlib.sha256(key.encode('utf-8', 'surrogateescape')).hexdigest()[:32]}.lock"


def try_flock(path: Path, deadline: float | None, clock: Callable[[], float] = time.monotonic) -> int | None:
    """An open descriptor of ``path`` holding an exclusive ``flock`` on the inode ``path`` names now.

    Polls until ``deadline`` (``clock`` time; None: one attempt).  None when the lock stayed held.
    The descriptor is close-on-exec: a child process (kubelet never starts one, tests do) must not
    inherit a plugin's locks.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, LOCK_FILE_MODE)
        try:
            if not _flock_until(fd, deadline, clock):
                os.close(fd)
                return None
            try:
                named = os.stat(path)
            except FileNotFoundError:
                named = None
            locked = os.fstat(fd)
            if named is not None and (named.st_dev, named.st_ino) == (locked.st_dev, locked.st_ino):
                return fd
        except BaseException:
            os.close(fd)
            raise
        # The holder removed the file while we waited: we hold an orphaned inode.  Start again.
        os.close(fd)


def release_flock(path: Path, fd: int, *, remove: bool) -> None:
    """Release a lock from :func:`try_flock`; ``remove``: delete its file first (while still holding it)."""
    try:
        if remove:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
    finally:
        os.close(fd)  # closing the last descriptor of the open file description drops the flock


def _flock_until(fd: int, deadline: float | None, clock: Callable[[], float]) -> bool:
    delay = _FIRST_POLL_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except OSError as e:
            if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise
        remaining = None if deadline is None else deadline - clock()
        if remaining is None or remaining <= 0:
            return False
        time.sleep(min(delay, remaining))
        delay = min(delay * 2, _LAST_POLL_S)


def describe_lock_holders(path: Path, proc: Path = _PROC) -> str:
    """Who holds the flock on ``path``, from the kernel's ``/proc/locks``: ``PID 4711 (migdra ...)``.

    Best effort: '' when the file or ``/proc/locks`` cannot be read or no holder is listed.  A PID of
    0 is a process this one cannot see (another container's PID namespace).
    """
    try:
        st = os.stat(path)
        lines = (proc / "locks").read_text(encoding="ascii", errors="replace").splitlines()
    except OSError:
        return ""
    wanted = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    holders: list[str] = []
    for line in lines:
        fields = line.split()
        # "1: FLOCK  ADVISORY  WRITE 4711 00:2b:1234 0 EOF"; waiters are listed as "1: -> FLOCK ..."
        if len(fields) < 6 or fields[1] != "FLOCK" or fields[5] != wanted or not fields[4].isdigit():
            continue
        pid = int(fields[4])
        holders.append(_describe_process(pid, proc))
    return ", ".join(holders)


def _describe_process(pid: int, proc: Path) -> str:
    if pid == 0:
        return "a process in another PID namespace (another container)"
    if pid == os.getpid():
        return f"PID {pid} (this process)"
    try:
        raw = (proc / str(pid) / "cmdline").read_bytes()
    except OSError:
        return f"PID {pid}"
    command = " ".join(raw.decode(errors="replace").replace("\0", " ").split())  # one line, whatever argv holds
    if len(command) > 120:
        command = command[:117] + "..."
    return f"PID {pid} ({command})" if command else f"PID {pid}"


def describe_lock_timeout(path: Path, what: str, waited: float) -> str:
    """The message of a lock wait that timed out after ``waited`` seconds: the file, who holds it, what to do."""
    holders = describe_lock_holders(path)
    held_by = f"held by {holders}" if holders else "held by another process"
    return (
        f"waited {waited:g} s for {what} ({path}), {held_by}: another migdra kubelet plugin on this node is "
        "working under it (during a rolling update, the other plugin pod).  If that process is stuck, stop it "
        f"(find it with `fuser -v {path}`)"
    )


class KeyedLocks:
    """A lock per key: a :class:`threading.Lock` in this process and, with ``directory``, an ``flock``
    on ``<directory>/<prefix><key>.lock`` across processes.

    ``kind`` names the key in messages ("claim", "GPU").  ``timeout`` (seconds, None: wait for ever)
    bounds each :meth:`hold` as a whole.  ``remove_files``: delete a key's lock file on release (safe,
    see the module docstring); for keys that come and go, like claim UIDs.  A key's in-process lock
    exists while someone holds or waits for it, so keys do not accumulate in memory either.
    """

    def __init__(
        self,
        directory: Path | None = None,
        *,
        prefix: str = "",
        kind: str = "key",
        timeout: float | None = None,
        remove_files: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._directory = directory
        self._prefix = prefix
        self._kind = kind
        self._timeout = timeout
        self._remove_files = remove_files
        self._clock = clock
        self._locks: dict[str, tuple[threading.Lock, int]] = {}
        self._guard = threading.Lock()

    def lock_path(self, key: str) -> Path | None:
        """The file whose ``flock`` stands for ``key`` across processes (None: in-process only)."""
        if self._directory is None:
            return None
        return self._directory / lock_file_name(self._prefix, key)

    @contextmanager
    def hold(self, key: str) -> Iterator[None]:
        """Hold ``key``'s lock, waiting at most the timeout; raises :class:`LockTimeoutError`."""
        deadline = None if self._timeout is None else self._clock() + self._timeout
        lock = self._enter(key)
        try:
            wait = -1.0 if deadline is None else max(0.0, deadline - self._clock())
            if not lock.acquire(timeout=wait):
                raise LockTimeoutError(
                    f"waited {self._timeout:g} s for the lock of {self._kind} {key}: another call in this plugin "
                    "process is still working on it; kubelet retries the claim"
                )
            try:
                with self._file(key, deadline):
                    yield
            finally:
                lock.release()
        finally:
            self._leave(key)

    @contextmanager
    def try_hold(self, key: str) -> Iterator[bool]:
        """Hold ``key``'s lock if nobody does (no waiting); yields whether it is held."""
        lock = self._enter(key)
        try:
            if not lock.acquire(blocking=False):
                yield False
                return
            try:
                path = self.lock_path(key)
                fd = None if path is None else try_flock(path, None, self._clock)
                if path is not None and fd is None:
                    yield False
                    return
                try:
                    yield True
                finally:
                    if path is not None and fd is not None:
                        release_flock(path, fd, remove=self._remove_files)
            finally:
                lock.release()
        finally:
            self._leave(key)

    @contextmanager
    def _file(self, key: str, deadline: float | None) -> Iterator[None]:
        path = self.lock_path(key)
        if path is None:
            yield
            return
        fd = try_flock(path, deadline, self._clock)
        if fd is None:
            raise LockTimeoutError(describe_lock_timeout(path, f"the lock of {self._kind} {key}", self._timeout or 0.0))
        try:
            yield
        finally:
            release_flock(path, fd, remove=self._remove_files)

    def _enter(self, key: str) -> threading.Lock:
        with self._guard:
            lock, users = self._locks.get(key, (threading.Lock(), 0))
            self._locks[key] = (lock, users + 1)
            return lock

    def _leave(self, key: str) -> None:
        with self._guard:
            lock, users = self._locks[key]
            if users == 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)

    def __len__(self) -> int:
        with self._guard:
            return len(self._locks)

    def waiters(self, key: str) -> int:
        """Threads of this process holding or waiting for ``key`` (diagnostics and tests)."""
        with self._guard:
            return self._locks.get(key, (None, 0))[1]
