"""docs/configuration.md lists exactly the settings the code has (generated from the models and the CLI)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_configuration_tables_are_generated_from_the_settings_models() -> None:
    result = subprocess.run(
        [sys.executable, str(REPO / "hack" / "gen_config_docs.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
