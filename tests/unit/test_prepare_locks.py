"""Lock files of the state directory: held across processes, bounded waits that name the holder, and
lock files that can be removed on release without letting two holders in."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kubeletplugin.prepare.checkpoint import CheckpointStore
from kubeletplugin.prepare.errors import CheckpointError, LockTimeoutError
from kubeletplugin.prepare.locks import KeyedLocks, describe_lock_holders, release_flock, try_flock

HOLD = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
sys.stdin.read()
"""


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    """Another process holding an flock on ``<tmp>/prepare.lock`` until the test ends: (path, its PID)."""
    path = tmp_path / "prepare.lock"
    child = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    assert child.stdin is not None
    try:
        assert child.stdout.readline() == "held\n"
        yield path, child.pid
    finally:
        child.stdin.close()
        child.wait(timeout=10)
        child.stdout.close()


def test_a_lock_another_process_holds_is_not_taken(holder: tuple[Path, int]) -> None:
    path, _ = holder
    assert try_flock(path, None) is None


def test_the_holder_of_a_lock_is_named_by_pid_and_command(holder: tuple[Path, int]) -> None:
    path, pid = holder
    assert describe_lock_holders(path).startswith(f"PID {pid} ({sys.executable} -c ")


def test_a_checkpoint_whose_lock_stays_held_refuses_to_start_naming_the_file_and_its_holder(
    holder: tuple[Path, int],
) -> None:
    path, pid = holder
    store = CheckpointStore(path.parent, "boot", lock_timeout=0.2)
    with pytest.raises(CheckpointError) as refused:
        store.load()
    message = str(refused.value)
    assert f"({path}), held by PID {pid} (" in message
    assert "another migdra kubelet plugin on this node" in message
    assert f"fuser -v {path}" in message
    assert "\n" not in message


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
    deadline = time.monotonic() + 20
    while _descriptors_of(path) < 2 and time.monotonic() < deadline:  # the waiter has opened the old inode
        time.sleep(0.005)
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
