"""The conversion of the single-file checkpoint killed midway (``kill -9`` in a child process): nothing
lost, nothing duplicated.  The rest of the checkpoint is tests/unit/test_prepare_checkpoint.py."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from kubeletplugin.prepare.checkpoint import CheckpointStore
from kubeletplugin.prepare.records import build_claim_file
from tests.unit.test_prepare_checkpoint import BOOT, A, B, completed, realized, single_file

KILLED_MID_CONVERSION = """
import os, signal, sys
from pathlib import Path
import kubeletplugin.prepare.checkpoint as checkpoint

real, calls = checkpoint.write_file_atomically, []

def write(path, data, mode=0o644, before_replace=None, *, sync=True):
    calls.append(path)
    if len(calls) == int(sys.argv[2]):
        before_replace = lambda tmp: os.kill(os.getpid(), signal.SIGKILL)
    return real(path, data, mode, before_replace, sync=sync)

checkpoint.write_file_atomically = write
checkpoint.CheckpointStore(Path(sys.argv[1]), sys.argv[3]).load()
"""


@pytest.mark.parametrize("killed_at", [1, 2, 3], ids=["first-claim", "second-claim", "marker"])
def test_a_conversion_killed_midway_loses_and_duplicates_nothing(tmp_path: Path, killed_at: int) -> None:
    """``kill -9`` in the middle of the conversion (before the rename of the first claim's file, of the
    second's, of the marker): the single file stays, and the next load converts it from the start."""
    stale = completed("uid-stale", realized("gpu-0-mig-1g10gb-19-0", 0, 9))
    store = CheckpointStore(tmp_path, BOOT)
    store.directory.mkdir(parents=True)
    store.claim_path("uid-stale").write_bytes(build_claim_file(BOOT, stale))  # an earlier conversion's leftover
    single = single_file(tmp_path, BOOT, A, B)

    child = subprocess.run(
        [sys.executable, "-c", KILLED_MID_CONVERSION, str(tmp_path), str(killed_at), BOOT], check=False, timeout=60
    )
    assert child.returncode == -signal.SIGKILL
    assert store.path.read_bytes() == single  # the single file is the truth until the marker replaces it
    assert [p.name for p in store.directory.iterdir() if p.name.endswith(".tmp")] != [] or killed_at == 3

    outcome = store.load()
    assert (outcome.records, outcome.discarded) == ((A, B), ())
    assert sorted(p.name for p in store.directory.iterdir()) == ["uid-a.json", "uid-b.json"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.json", "claims", "prepare.lock"]
    assert json.loads(store.path.read_text())["data"]["schemaVersion"] == 2
