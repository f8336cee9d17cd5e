"""Temporary files of interrupted atomic writes are removed at start-up -- only those that are provably
abandoned: exactly of the writer's name pattern, of this driver's checkpoint (its marker or a claim's
record file) or CDI specs, and written by a process that is gone, under a lock no other plugin process
holds (docs/prepare.md, §7).

The leftovers are real: a child process writes through ``write_file_atomically`` and is SIGKILLed
right before the rename, as ``kill -9`` mid-write leaves them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from dra_driver.durable import process_is_gone
from kubeletplugin.prepare.cdi import spec_path
from kubeletplugin.prepare.locks import LOCKS_DIR, lock_file_name, release_flock, try_flock
from tests.kube_apiserver import KubeApiServer
from tests.prepare_harness import DRIVER, Node, result, simulated_node

H100 = "H100-SXM5-80GB"
KILLED_BEFORE_RENAME = """
import os, signal, sys
from pathlib import Path
from dra_driver.durable import write_file_atomically
write_file_atomically(Path(sys.argv[1]), b"{}", before_replace=lambda tmp: os.kill(os.getpid(), signal.SIGKILL))
"""


@pytest.fixture
def node(api_server: KubeApiServer, tmp_path: Path) -> Iterator[Node]:
    with simulated_node(tmp_path, [H100], api=api_server) as simulated:
        yield simulated


@pytest.fixture
def live_process() -> Iterator[int]:
    """The PID of a process that is alive for the whole test (a plugin pod mid-write, say)."""
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        yield child.pid
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(timeout=10)


def killed_mid_write(target: Path) -> Path:
    """The temporary file a writer of ``target`` killed right before its rename leaves behind."""
    target.parent.mkdir(parents=True, exist_ok=True)
    before = set(target.parent.iterdir())
    child = subprocess.run([sys.executable, "-c", KILLED_BEFORE_RENAME, str(target)], check=False, timeout=60)
    assert child.returncode == -signal.SIGKILL
    (left,) = set(target.parent.iterdir()) - before
    assert left.name.startswith(f".{target.name}.")
    assert left.name.endswith(".tmp")
    assert process_is_gone(int(left.name.split(".")[-3]))
    return left


def renamed(leftover: Path, pid: int) -> Path:
    """The same leftover, as if written by ``pid``."""
    parts = leftover.name.split(".")
    parts[-3] = str(pid)
    return leftover.rename(leftover.with_name(".".join(parts)))


def test_leftovers_of_dead_writers_are_removed_and_everything_else_is_kept(node: Node, live_process: int) -> None:
    checkpoint = node.state_dir / "checkpoint.json"
    cdi_of = {uid: spec_path(node.cdi_dir, DRIVER, uid) for uid in ("orphan-1", "busy-2", "live-3", "mine-4")}
    removed = [
        killed_mid_write(checkpoint),
        killed_mid_write(checkpoint),
        killed_mid_write(node.record_path("uid-1")),  # a claim's record file
        killed_mid_write(cdi_of["orphan-1"]),
        renamed(killed_mid_write(cdi_of["mine-4"]), os.getpid()),  # this very process, PID 1 in a container
    ]
    kept = [
        renamed(killed_mid_write(checkpoint), live_process),  # a writer that is alive
        renamed(killed_mid_write(node.record_path("uid-2")), live_process),
        renamed(killed_mid_write(cdi_of["live-3"]), live_process),
        killed_mid_write(cdi_of["busy-2"]),  # its claim is locked by another plugin process: mid-write?
        killed_mid_write(node.cdi_dir / "nvidia.com-gpu.json"),  # another vendor's spec
        killed_mid_write(node.state_dir / "other.json"),  # not the checkpoint
    ]
    (node.cdi_dir / ".checkpoint.json.tmp").write_text("")  # not of the exact form
    (node.state_dir / f".checkpoint.json.{live_process}.xyz.tmp").write_text("")
    kept += [node.cdi_dir / ".checkpoint.json.tmp", node.state_dir / f".checkpoint.json.{live_process}.xyz.tmp"]

    busy = node.state_dir / LOCKS_DIR / lock_file_name("claim-", "busy-2")
    fd = try_flock(busy, None)
    assert fd is not None
    try:
        node.service()
    finally:
        release_flock(busy, fd, remove=True)

    assert [p.name for p in removed if p.exists()] == []
    assert [p.name for p in kept if not p.exists()] == []


def test_a_restart_after_kill_9_mid_checkpoint_write_leaves_no_temporary_file(node: Node) -> None:
    """The checkpoint write of a prepare is interrupted for real; the restarted plugin cleans up after it."""
    service = node.service()
    ref = node.claim("kept", [result("gpu-0-mig-1g10gb-19-0")])
    assert service.prepare([ref])[ref.uid].error == ""
    service.close()
    record = node.record_path(ref.uid)
    leftover = killed_mid_write(record)
    assert record.read_bytes() != b"{}"  # the rename never happened

    restarted = node.service()
    assert not leftover.exists()
    assert restarted.prepare([ref])[ref.uid].error == ""  # the record itself is intact
    assert sorted(p.name for p in record.parent.iterdir() if p.name.endswith(".tmp")) == []
