"""`make demo`'s script says what went wrong when `migdra sim up` fails, at once -- not, minutes later,
that the cluster "did not get ready" in time."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_a_sim_up_that_fails_is_reported_as_failed_with_its_status_at_once(tmp_path: Path) -> None:
    env = {**os.environ, "MIGDRA_KUBE_BIN_DIR": str(tmp_path / "no-binaries")}  # sim up refuses it in one line
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "hack" / "demo.py"),
            "--state-dir",
            str(tmp_path / "demo"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,  # the demo would have waited its start bound (minutes: a first build) before
        check=False,
    )
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()
    assert "--kube-bin-dir" in last[-2], last  # sim up's own line, above
    assert last[-1] == "migdra sim up failed (exit status 2); its messages are above"
