"""Lock files of the state directory held by another process: not taken, and the refusal names the holder
by PID and command line.  The in-process waits are tests/unit/test_prepare_locks.py."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kubeletplugin.prepare.checkpoint import CheckpointStore
from kubeletplugin.prepare.errors import CheckpointError
from kubeletplugin.prepare.locks import describe_lock_holders, try_flock

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
