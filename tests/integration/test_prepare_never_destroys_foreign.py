"""migdra never destroys a GPU instance it did not create, whatever failed on the way.

The defect this protects against: a prepare whose CDI directory was read-only rolled its GI back, but
the unlink of the (absent) spec failed before the checkpoint was updated, so the record kept naming
GI 1.  An operator then created a 3g.40gb at 0:4 -- GI ID 1 again -- and unprepare, a retry or a
restart destroyed the operator's instance.  Rule: the record tells the truth before any step that
can fail, and a recorded MIG UUID must be found before its GI is destroyed.
"""

from __future__ import annotations

import errno
from collections.abc import Iterator
from pathlib import Path

import pytest

from dra_driver.mig.catalog import Placement
from dra_driver.nvml.errors import NvmlInUse
from kubeletplugin.prepare import cdi as cdi_module
from kubeletplugin.prepare import claim_files as claim_files_module
from tests.kube_apiserver import KubeApiServer
from tests.prepare_harness import Node, result, simulated_node

H100 = "H100-SXM5-80GB"
DEVICE = "gpu-0-mig-3g40gb-9-0"  # 3g.40gb at memory slices 0-3 -> GI ID 1


@pytest.fixture
def node(api_server: KubeApiServer, tmp_path: Path) -> Iterator[Node]:
    with simulated_node(tmp_path, [H100], api=api_server) as simulated:
        yield simulated


def _read_only_filesystem(*args: object, **kwargs: object) -> None:
    raise OSError(errno.EROFS, "Read-only file system")


def test_a_failed_prepare_on_a_read_only_cdi_directory_leaves_no_record_and_spares_the_operator(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    service = node.service()
    ref = node.claim("claim-a", [result(DEVICE)])
    with monkeypatch.context() as patched:
        patched.setattr(cdi_module, "write_cdi_spec", _read_only_filesystem)
        patched.setattr(claim_files_module, "delete_cdi_spec", _read_only_filesystem)
        failed = service.prepare([ref])[ref.uid]
    assert failed.error != ""
    assert "Read-only file system" in failed.error
    assert node.instances() == [], "the GI of the failed prepare was not rolled back"
    store = service.checkpoint
    assert store.get(ref.uid) is None, "the record still names a GI that no longer exists"

    operator_gi, operator_uuid = node.foreign_instance(0, profile_id=9, start=0, size=4)
    assert operator_gi == 1  # the very ID the failed prepare had recorded
    operators = [(0, 1, 9, 0, [(0, 2, operator_uuid)])]

    assert service.unprepare([ref])[ref.uid].error == ""
    assert node.instances() == operators
    retry = service.prepare([ref])[ref.uid]
    assert retry.error != ""
    assert "that migdra did not create" in retry.error
    assert node.instances() == operators
    service.close()
    node.service()  # a restart runs recovery over the checkpoint
    assert node.instances() == operators


@pytest.mark.parametrize("operator_creates_a_ci", [True, False], ids=["with-ci", "empty-gi"])
def test_a_record_whose_mig_uuid_is_gone_never_destroys_the_gi_standing_there(
    node: Node, operator_creates_a_ci: bool
) -> None:
    """A completed record's instance was replaced behind migdra's back: same GI ID, not its MIG UUID."""
    service = node.service()
    ref = node.claim("claim-b", [result(DEVICE)])
    assert service.prepare([ref])[ref.uid].error == ""
    (gpu, gi_id, _, _, [(ci_id, _, _)]) = node.instances()[0]
    uuid = node.gpu_uuid(gpu)
    node.nvml.destroy_compute_instance(uuid, gi_id, ci_id)  # an operator replaces the instance
    node.nvml.destroy_gpu_instance(uuid, gi_id)
    if operator_creates_a_ci:
        operator_gi, operator_uuid = node.foreign_instance(0, profile_id=9, start=0, size=4)
        operators = [(0, gi_id, 9, 0, [(0, 2, operator_uuid)])]
    else:
        operator_gi = node.nvml.create_gpu_instance(uuid, 9, Placement(start=0, size=4)).gpu_instance_id
        operators = [(0, gi_id, 9, 0, [])]
    assert operator_gi == gi_id

    assert service.unprepare([ref])[ref.uid].error == ""
    assert node.instances() == operators
    assert service.checkpoint.get(ref.uid) is None


def test_an_unprepare_whose_gi_destroy_fails_records_the_released_compute_instance(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CI destroyed, GI destroy refused: the record now names an empty GI of ours, and the retry finishes."""
    service = node.service()
    ref = node.claim("claim-c", [result(DEVICE)])
    assert service.prepare([ref])[ref.uid].error == ""
    original = node.nvml.destroy_gpu_instance

    def refuse(gpu_uuid: str, gpu_instance_id: int) -> None:
        raise NvmlInUse("nvmlGpuInstanceDestroy", 19, "In use by another client", gpu_uuid)

    monkeypatch.setattr(node.nvml, "destroy_gpu_instance", refuse)
    failed = service.unprepare([ref])[ref.uid]
    assert failed.error != ""
    record = service.checkpoint.get(ref.uid)
    assert record is not None
    (device,) = record.devices
    assert device.gpu_instance_id == 1
    assert device.mig_uuid is None, "the record still names the compute instance that was destroyed"
    assert [ci for *_, ci in node.instances()] == [[]]

    monkeypatch.setattr(node.nvml, "destroy_gpu_instance", original)
    assert service.unprepare([ref])[ref.uid].error == ""
    assert node.instances() == []
