"""The committed generated files are exactly what their generators make today: the protobuf code
(dra_driver/kubelet/protos from protos/), the configuration tables of docs/configuration.md (from the settings
models and the CLI) and the MIG catalog (from the researched table, hack/data/mig-profiles.yaml).  Each
check runs its generator as a process, hence this tier."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
COMMITTED = REPO / "dra_driver" / "kubelet" / "protos"


def _files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file() and p.suffix in {".py", ".pyi"}}


def test_generated_code_is_fresh(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, str(REPO / "hack" / "gen_protos.py"), "--out", str(tmp_path)],
        check=True,
        capture_output=True,
        text=True,
    )
    fresh, committed = _files(tmp_path), _files(COMMITTED)
    assert sorted(committed) == sorted(fresh), "generated files added or removed; run hack/gen_protos.py"
    stale = [name for name in fresh if committed[name] != fresh[name]]
    assert not stale, f"stale generated code: {stale}; run hack/gen_protos.py"


def test_configuration_tables_are_generated_from_the_settings_models() -> None:
    result = subprocess.run(
        [sys.executable, str(REPO / "hack" / "gen_config_docs.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_shipped_catalog_is_fresh_against_the_researched_table() -> None:
    """hack/data/mig-profiles.yaml is in the repository, so the check always runs."""
    result = subprocess.run(
        [sys.executable, str(REPO / "hack" / "gen_mig_catalog.py"), "--check"],
        check=False,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
