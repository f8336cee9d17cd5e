"""Lock files of the state directory: bounded waits that say what to do, and lock files that can be removed
on release without letting two holders in.  A lock another process holds (and how its holder is named) is
tests/integration/test_prepare_locks_across_processes.py."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from kubeletplugin.prepare.errors import LockTimeoutError
from kubeletplugin.prepare.locks import KeyedLocks, release_flock, try_flock
from tests.waiting import wait_for


def test_a_claim_lock_wait_is_bounded_and_says_what_to_do(tmp_path: Path) -> None:
    ours, theirs = (KeyedLocks(tmp_path, prefix="claim-", kind="claim", timeout=0.2) for _ in range(2))
    with theirs.hold("uid-1"), pytest.raises(LockTimeoutError) as waited, ours.hold("uid-1"):
        pass
    assert waited.value.message.startswith(f"waited 0.2 s for the lock of claim uid-1 ({tmp_path}/claim-uid-1.lock)")
    assert waited.value.retryable
    with ours.hold("uid-2"):  # other keys are independent
        pass


def test_a_thread_of_the_same_process_is_waited_for_too(tmp_path: Path) -> None:
    locks = KeyedLocks(tmp_path, prefix="gpu-", kind="GPU", timeout=0.2)
    entered, release = threading.Event(), threading.Event()

    def hold() -> None:
        with locks.hold("GPU-1"):
            entered.set()
            release.wait(10)

    thread = threading.Thread(target=hold)
    thread.start()
    try:
        assert entered.wait(10)
        with pytest.raises(LockTimeoutError, match="another call in this plugin process"), locks.hold("GPU-1"):
            pass
        with locks.try_hold("GPU-1") as held:
            assert not held
    finally:
        release.set()
        thread.join(10)


def _descriptors_of(path: Path) -> int:
    """Descriptors of this process open on the inode ``path`` names now."""
    inode = os.stat(path).st_ino
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.stat(f"/proc/self/fd/{fd}").st_ino == inode:
                count += 1
        except OSError:
            continue
    return count


def test_a_waiter_that_locked_a_removed_lock_file_locks_the_new_one(tmp_path: Path) -> None:
    """The holder removes the file on release while a waiter has it open: the waiter then holds an inode
    nobody else can reach.  It must notice, and lock the file at the path instead -- else a third process
    would lock a new file at the same path and both would "hold" the lock."""
    path = tmp_path / "claim-uid-1.lock"
    held = try_flock(path, None)
    assert held is not None
    waited: list[int | None] = []
    waiter = threading.Thread(target=lambda: waited.append(try_flock(path, time.monotonic() + 20)))
    waiter.start()
    wait_for("the waiter to open the old inode", lambda: _descriptors_of(path) >= 2, timeout=20)
    assert _descriptors_of(path) == 2
    release_flock(path, held, remove=True)
    waiter.join(20)
    (fd,) = waited
    assert fd is not None
    try:
        assert os.fstat(fd).st_ino == os.stat(path).st_ino  # the path names the inode it holds
        assert try_flock(path, None) is None  # so a third one is kept out
    finally:
        release_flock(path, fd, remove=True)
    assert not path.exists()


def test_unsafe_keys_never_name_a_file_outside_the_directory(tmp_path: Path) -> None:
    locks = KeyedLocks(tmp_path / "locks", prefix="claim-", kind="claim", timeout=1)
    path = locks.lock_path("../../etc/passwd")
    assert path is not None
    assert path.parent == tmp_path / "locks"
    assert path.name.startswith("claim-sha256-")
