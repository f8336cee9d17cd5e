"""Exact placement: every profile at every placement of H100-SXM5-80GB and A100-SXM4-40GB.

Preparing a claim allocated ``gpu-0-mig-<profile>-<id>-<start>`` must create a GPU instance whose
NVML placement is exactly that one, with a compute instance that delivers the SMs the profile
advertises (H100 1g.20gb: CI profile 7, 26 SMs -- not CI profile 0 with 16); unpreparing must leave
NVML empty.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dra_driver.devicemodel.naming import mig_device_name
from dra_driver.mig.catalog import load_catalog
from tests.kube_apiserver import KubeApiServer
from tests.prepare_harness import result, simulated_node

MODELS = ("H100-SXM5-80GB", "A100-SXM4-40GB")


def every_placement() -> list[object]:
    catalog = load_catalog()
    return [
        pytest.param(model, profile.profile_id, placement.start, id=f"{model}-{profile.name}-{placement}")
        for model in MODELS
        for profile in catalog.model(model).gpu_instance_profiles
        for placement in profile.placements
    ]


@pytest.mark.parametrize(("model", "profile_id", "start"), every_placement())
def test_prepare_creates_exactly_the_allocated_placement(
    api_server: KubeApiServer, tmp_path: Path, model: str, profile_id: int, start: int
) -> None:
    profile = load_catalog().model(model).profile_by_id(profile_id)
    device = mig_device_name(0, profile.name, profile_id, start)
    with simulated_node(tmp_path, [model], api=api_server) as node:
        service = node.service()
        ref = node.claim(f"{model.lower()}-{profile_id}-{start}", [result(device)])

        prepared = service.prepare([ref])[ref.uid]
        assert prepared.error == ""
        assert [d.device_name for d in prepared.devices] == [device]

        gis = node.nvml.gpu_instances(node.gpu_uuid())
        assert len(gis) == 1
        (gi,) = gis
        assert (gi.profile_id, gi.placement.start, gi.placement.size) == (profile_id, start, profile.placement_size)
        (ci,) = gi.compute_instances
        assert ci.multiprocessor_count == profile.multiprocessor_count
        if (model, profile.name) == ("H100-SXM5-80GB", "1g.20gb"):
            assert (ci.profile_id, ci.multiprocessor_count) == (7, 26)

        assert service.unprepare([ref])[ref.uid].error == ""
        assert node.instances() == []
