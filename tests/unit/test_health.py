"""Device health for kubelet: a device is healthy while its GPU answers NVML."""

from __future__ import annotations

import logging

import pynvml
import pytest

from dra_driver.devicemodel.config import DeviceModelConfig
from dra_driver.devicemodel.pool import build_pool
from dra_driver.nvml.backend import Nvml
from dra_driver.nvml.errors import NvmlUnexpectedError
from dra_driver.nvml.inventory import read_inventory
from dra_driver.nvml.types import GpuInfo
from kubeletplugin.device_health import NvmlDeviceHealth
from tests.conftest import OpenSimulatedNode


class LosingNvml(Nvml):
    """The real backend, except that one GPU has fallen off the bus."""

    lost: str | None = None

    def gpu(self, gpu_uuid: str) -> GpuInfo:
        if gpu_uuid == self.lost:
            raise NvmlUnexpectedError("nvmlDeviceGetIndex", pynvml.NVML_ERROR_GPU_IS_LOST, "GPU is lost", gpu_uuid)
        return super().gpu(gpu_uuid)


def test_devices_of_a_lost_gpu_are_unhealthy_and_the_rest_healthy(
    simulated_node: OpenSimulatedNode, caplog: pytest.LogCaptureFixture
) -> None:
    with simulated_node("H100-SXM5-80GB:2"):
        nvml = LosingNvml()
        nvml.init()
        try:
            pool = build_pool(read_inventory(nvml), DeviceModelConfig())
            health = NvmlDeviceHealth(nvml, "node-a", lambda: pool)
            report = health()
            assert len(report) == 2 * 25  # two H100s, 25 MIG devices each (no shared ones by default)
            assert {entry[2] for entry in report} == {True}
            assert {entry[0] for entry in report} == {"node-a"}

            nvml.lost = pool.devices[0].gpu_uuid
            caplog.set_level(logging.INFO, logger="kubeletplugin.device_health")
            report = health()
            health()  # logged once, not on every poll
            unhealthy = {name for _, name, healthy in report if healthy is False}
            assert unhealthy == {d.name for d in pool.devices if d.gpu_uuid == nvml.lost}
            assert len([r for r in caplog.records if r.levelno == logging.ERROR]) == 1

            nvml.lost = None
            assert {entry[2] for entry in health()} == {True}
        finally:
            nvml.shutdown()


def test_nothing_is_reported_before_the_first_publish() -> None:
    assert NvmlDeviceHealth(Nvml(), "node-a", lambda: None)() == []
