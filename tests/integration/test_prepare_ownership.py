"""What the slice publisher is told while a prepare is running: migdra's own GI is never foreign.

The publisher builds the pool from what ``owned()`` names (GI IDs, and placements of GIs NVML is being
asked for) read before and after the node's instances, from its own thread.  A GI
migdra is creating must count as migdra's from the moment it exists, not only from
``PrepareCompleted``: otherwise the allocated device vanishes from the slices, the pool generation is
bumped twice and ``migdra_foreign_gpu_instances`` reports a false foreign instance.
"""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from dra_driver.devicemodel.config import DeviceModelConfig
from dra_driver.devicemodel.pool import OwnedInstances, build_pool
from dra_driver.mig.catalog import Placement
from dra_driver.nvml.inventory import read_inventory
from dra_driver.nvml.types import GpuInstanceInfo
from kubeletplugin.prepare import claim_path as claim_path_module
from kubeletplugin.prepare.checkpoint import CheckpointStore
from kubeletplugin.prepare.records import ClaimRecord, DeviceRecord
from tests.kube_apiserver import KubeApiServer
from tests.prepare_harness import Background, HeldCall, Node, result, simulated_node

H100 = "H100-SXM5-80GB"
DEVICE = "gpu-0-mig-1g20gb-15-4"  # GPU 0, 1g.20gb at 4:2 -> GI 5
PLACEMENT = Placement(start=4, size=2)


def gi_at(node: Node, gpu: str, placement: Placement) -> GpuInstanceInfo | None:
    return next((gi for gi in node.nvml.gpu_instances(gpu) if gi.placement == placement), None)


def test_a_gpu_instance_is_migdras_while_its_compute_instance_is_being_created(
    api_server: KubeApiServer, tmp_path: Path
) -> None:
    with simulated_node(tmp_path, [H100, H100], api=api_server) as node:
        service = node.service()
        gpu = node.gpu_uuid(0)
        ref = node.claim("slow-ci", [result(DEVICE)])

        with HeldCall(node.nvml, "create_compute_instance") as held:
            prepare = Background(service, [ref])
            held.wait_entered()  # the GI exists; its CI is being created: we are in the middle of prepare
            gi = gi_at(node, gpu, PLACEMENT)
            assert gi is not None, "the GPU instance was never created"
            assert gi.compute_instances == ()
            owned = (gpu, gi.gpu_instance_id) in service.checkpoint.owned().instances
            still_preparing = prepare.running
            # A publish round now: the node's instances, then owned() (the publisher's order).
            pool = build_pool(
                read_inventory(node.nvml), DeviceModelConfig(), owned_instances=service.checkpoint.owned().instances
            )
        results = prepare.join()

    assert owned, "owned() did not contain the GI migdra created while its prepare was running"
    assert still_preparing
    assert pool.foreign_instances == ()
    assert DEVICE in {device.name for device in pool.devices}
    assert results[ref.uid].error == ""


def test_a_gpu_instance_being_created_is_migdras_by_placement_until_its_id_is_recorded(
    api_server: KubeApiServer, tmp_path: Path
) -> None:
    with simulated_node(tmp_path, [H100, H100], api=api_server) as node:
        service = node.service()
        gpu = node.gpu_uuid(0)
        ref = node.claim("slow-gi", [result(DEVICE)])

        with HeldCall(node.nvml, "create_gpu_instance") as held:
            prepare = Background(service, [ref])
            held.wait_entered()  # NVML is being asked for the GI: no ID yet
            meanwhile = service.checkpoint.owned()
            still_preparing = prepare.running
        results = prepare.join()
        after = service.checkpoint.owned()

    assert meanwhile == OwnedInstances(placements=frozenset({(gpu, 15, PLACEMENT)}))
    assert still_preparing
    assert results[ref.uid].error == ""
    assert after == OwnedInstances(instances=frozenset({(gpu, 5)}))


def test_a_claim_that_collides_with_one_being_prepared_is_told_whose_it_is(
    api_server: KubeApiServer, tmp_path: Path
) -> None:
    """A double allocation during the CI creation of the first claim names that claim, not a stranger."""
    with simulated_node(tmp_path, [H100, H100], api=api_server) as node:
        service = node.service()
        first = node.claim("first", [result(DEVICE)])
        second = node.claim("second", [result(DEVICE)])

        with HeldCall(node.nvml, "create_compute_instance") as held:
            prepare = Background(service, [first])
            held.wait_entered()  # the first claim's GI exists; its CI is being created
            assert gi_at(node, node.gpu_uuid(0), PLACEMENT) is not None
            collided = service.prepare([second])[second.uid]
            still_preparing = prepare.running
        assert prepare.join()[first.uid].error == ""

    assert still_preparing
    assert "prepared for claim default/first" in collided.error
    assert "did not create" not in collided.error


class _RecordedSteps:
    """The device steps a prepare records in the checkpoint; ``fail_gpu_instance``: the GI's ID cannot be
    recorded (a full disk)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *, fail_gpu_instance: bool) -> None:
        self.devices: list[DeviceRecord] = []
        real = CheckpointStore.update_device

        def update_device(store: CheckpointStore, claim_uid: str, index: int, device: DeviceRecord) -> ClaimRecord:
            if fail_gpu_instance and device.gpu_instance_id is not None:
                raise OSError(errno.ENOSPC, "disk full")
            self.devices.append(device)
            return real(store, claim_uid, index, device)

        monkeypatch.setattr(CheckpointStore, "update_device", update_device)


def test_a_gpu_instance_whose_id_cannot_be_recorded_is_destroyed_before_anything_else(
    api_server: KubeApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    steps = _RecordedSteps(monkeypatch, fail_gpu_instance=True)
    with simulated_node(tmp_path, [H100], api=api_server) as node:
        service = node.service()
        ref = node.claim("disk-full", [result(DEVICE)])
        error = service.prepare([ref])[ref.uid].error
        assert "disk full" in error
        assert service.checkpoint.owned().instances == set()  # no GI left for the record to name
        assert node.instances() == []
        assert [device.gpu_instances_before for device in steps.devices] == [()]


def test_an_occupied_placement_is_refused_before_the_request_is_recorded(
    api_server: KubeApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The placement is checked again under the GPU's lock: a GI that appeared since is never in a request."""
    steps = _RecordedSteps(monkeypatch, fail_gpu_instance=False)
    # Skip the advisory check before the lock, as if the stranger appeared just after it.
    monkeypatch.setattr(claim_path_module, "check_placements_free", lambda context, claim_uid, intents: None)
    with simulated_node(tmp_path, [H100], api=api_server) as node:
        service = node.service()
        stranger, _ = node.foreign_instance(0, 15, 4, 2)
        ref = node.claim("appeared-meanwhile", [result(DEVICE)])
        error = service.prepare([ref])[ref.uid].error
        assert f"occupied by GPU instance {stranger}" in error
        assert steps.devices == []
