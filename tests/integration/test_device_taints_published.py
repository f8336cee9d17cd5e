"""Slices with tainted devices, as the plugin renders them for a node with GPU faults, are accepted by the
local API server's validation (how faults become taints: tests/unit/test_device_taints.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from dra_driver.devicemodel.config import DeviceModelConfig
from dra_driver.devicemodel.faults import GpuFault, taint_pool
from dra_driver.devicemodel.layout import render_slices
from dra_driver.devicemodel.pool import NodePool, build_pool
from dra_driver.kube.client import SLICES, Client
from dra_driver.mig.catalog import Placement
from dra_driver.nvml.inventory import read_inventory
from tests.conftest import OpenSimulatedNode
from tests.kube_apiserver import KubeApiServer
from tests.unit.test_device_taints import DRIVER, _uuid


@pytest.fixture
def pool(simulated_node: OpenSimulatedNode) -> Iterator[NodePool]:
    with simulated_node("H100-SXM5-80GB:2") as nvml:
        yield build_pool(read_inventory(nvml), DeviceModelConfig())


def test_tainted_slices_are_accepted_by_the_api_server(api_server: KubeApiServer, pool: NodePool) -> None:
    faults = [
        GpuFault(_uuid(pool, 1), "gpu-lost", "", "2026-12-02T00:00:00Z"),
        GpuFault(_uuid(pool, 0), "xid", "48", "2026-12-02T00:00:00Z", Placement(start=0, size=1)),
    ]
    tainted = taint_pool(pool, faults)
    slices = render_slices(tainted, "node-a", 1)
    assert all(len(s["spec"].get("devices", [])) <= 64 for s in slices)
    kube = Client(configuration=api_server.configuration())
    for body in slices:
        kube.create(SLICES, body)
    stored = [d for s in kube.list(SLICES)[0] for d in s["spec"].get("devices", []) if d.get("taints")]
    assert sorted(d["name"] for d in stored) == sorted(d.name for d in tainted.devices if d.taints)
    assert len(stored) > 25  # GPU 1's devices and GPU 0's on memory slice 0
    assert {t["key"] for d in stored for t in d["taints"]} == {f"{DRIVER}/gpu-lost", f"{DRIVER}/xid"}
