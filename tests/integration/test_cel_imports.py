"""What importing part of dra_driver.tools.cel costs, judged in a fresh interpreter (this one has celpy loaded)."""

from __future__ import annotations

import subprocess
import sys

import dra_driver.tools.cel


def test_pure_value_types_load_without_celpy() -> None:
    """API validation may use quantity/semver without paying for celpy and its parser."""
    code = "import sys, dra_driver.quantity, dra_driver.tools.cel.semver; print('celpy' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"
    assert all(hasattr(dra_driver.tools.cel, name) for name in dra_driver.tools.cel.__all__)
