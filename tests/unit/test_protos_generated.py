"""Every proto of protos/ has its committed generated code in dra_driver/kubelet/protos (that the code is what
hack/gen_protos.py makes of it today: tests/integration/test_generated_files.py)."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
COMMITTED = REPO / "dra_driver" / "kubelet" / "protos"


def test_every_proto_has_generated_code() -> None:
    protos = sorted(p.stem for p in (REPO / "protos").glob("*.proto"))
    assert protos == ["dra_health_v1alpha1", "dra_v1", "dra_v1beta1", "pluginregistration_v1"]
    for stem in protos:
        for suffix in ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py"):
            assert (COMMITTED / f"{stem}{suffix}").is_file()
