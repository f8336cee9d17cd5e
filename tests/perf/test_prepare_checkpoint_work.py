"""A prepare's checkpoint disk work does not grow with the claims the node holds (docs/prepare.md §6).

Measured from outside the store, on the real prepare path: every atomic write the checkpoint module
makes (``write_file_atomically``, wrapped) and every fsync this process makes in the state directory.
A node filled with one-device claims: the last prepare writes what the first one wrote -- its own
claim's record, four times -- and never touches another claim's file.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import kubeletplugin.prepare.checkpoint as checkpoint_module
from tests.kube_apiserver import KubeApiServer
from tests.prepare_harness import Node, result, simulated_node

H100 = "H100-SXM5-80GB"
GPUS = 2


@dataclass
class Writes:
    """What the checkpoint wrote (path, bytes) and the fsyncs of files under the state directory."""

    state_dir: Path
    files: list[tuple[Path, int]] = field(default_factory=list)
    fsyncs: int = 0


@pytest.fixture
def node(api_server: KubeApiServer, tmp_path: Path) -> Iterator[Node]:
    with simulated_node(tmp_path, [H100] * GPUS, api=api_server) as simulated:
        yield simulated


@pytest.fixture
def writes(node: Node, monkeypatch: pytest.MonkeyPatch) -> Writes:
    seen = Writes(node.state_dir)
    real_write, real_fsync = checkpoint_module.write_file_atomically, os.fsync

    def write(path: Path, data: bytes, *args: Any, **kwargs: Any) -> Any:
        seen.files.append((path, len(data)))
        return real_write(path, data, *args, **kwargs)

    def fsync(fd: Any) -> None:
        real_fsync(fd)
        if os.readlink(f"/proc/self/fd/{fd if isinstance(fd, int) else fd.fileno()}").startswith(str(node.state_dir)):
            seen.fsyncs += 1

    monkeypatch.setattr(checkpoint_module, "write_file_atomically", write)
    monkeypatch.setattr(os, "fsync", fsync)
    return seen


def test_preparing_the_last_claim_of_a_full_node_writes_what_the_first_one_wrote(node: Node, writes: Writes) -> None:
    service = node.service()
    refs = [
        node.claim(f"c-{gpu}-{start}", [result(f"gpu-{gpu}-mig-1g10gb-19-{start}")])
        for start in range(7)
        for gpu in range(GPUS)
    ]
    spent: list[tuple[list[tuple[Path, int]], int]] = []
    for ref in refs:
        others = {
            uid: _identity(node.record_path(uid)) for uid in (r.uid for r in refs) if node.record_path(uid).exists()
        }
        writes.files, writes.fsyncs = [], 0
        assert service.prepare([ref])[ref.uid].error == ""
        spent.append((writes.files, writes.fsyncs))
        assert {uid: _identity(node.record_path(uid)) for uid in others} == others  # no other claim's file touched

    (first, first_fsyncs), (last, last_fsyncs) = spent[0], spent[-1]
    assert {path for path, _ in first} == {node.record_path(refs[0].uid)}
    assert {path for path, _ in last} == {node.record_path(refs[-1].uid)}
    assert len(first) == len(last) == 4  # PrepareStarted, GI requested, GI ID, PrepareCompleted
    assert first_fsyncs == last_fsyncs == 0  # records are not fsynced (docs/prepare.md §6)
    # Equal within what differs between the two claims' own records (names, and the GI IDs standing on
    # the GPU before the request: at most 6 on an H100, whatever the node holds).
    record_difference = abs(
        node.record_path(refs[-1].uid).stat().st_size - node.record_path(refs[0].uid).stat().st_size
    )
    assert abs(sum(n for _, n in last) - sum(n for _, n in first)) <= 4 * record_difference


def _identity(path: Path) -> tuple[int, int, int]:
    st = path.stat()
    return st.st_ino, st.st_mtime_ns, st.st_size
