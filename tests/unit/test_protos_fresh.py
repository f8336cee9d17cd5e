"""The committed generated code (dra_driver/kubelet/protos) is exactly what hack/gen_protos.py makes of protos/."""

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


def test_every_proto_has_generated_code() -> None:
    protos = sorted(p.stem for p in (REPO / "protos").glob("*.proto"))
    assert protos == ["dra_health_v1alpha1", "dra_v1", "dra_v1beta1", "pluginregistration_v1"]
    for stem in protos:
        for suffix in ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py"):
            assert (COMMITTED / f"{stem}{suffix}").is_file()
