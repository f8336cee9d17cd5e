"""Foreign instances are reported once when they appear and once when they go; metrics always."""

from __future__ import annotations

import dataclasses
import logging

import pytest
from prometheus_client import CollectorRegistry

from dra_driver.devicemodel import example_inventory
from dra_driver.devicemodel.config import DeviceModelConfig
from dra_driver.devicemodel.pool import build_pool
from dra_driver.mig import Placement
from dra_driver.nvml.types import GpuInstanceInfo
from kubeletplugin.metrics import PublishMetrics
from kubeletplugin.pool_report import PoolReporter
from kubeletplugin.publisher import PublishResult


def test_foreign_instances_are_logged_on_change_and_counted(caplog: pytest.LogCaptureFixture) -> None:
    inventory = example_inventory(["H100", "H100"])
    gpu0 = inventory.gpus[0]
    foreign = GpuInstanceInfo(gpu0.gpu.uuid, 2, 9, Placement(start=4, size=4))
    with_foreign = dataclasses.replace(
        inventory, gpus=(dataclasses.replace(gpu0, gpu_instances=(foreign,)), inventory.gpus[1])
    )
    registry = CollectorRegistry()
    reporter = PoolReporter(PublishMetrics(registry))

    def value(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, labels)

    caplog.set_level(logging.INFO, logger="kubeletplugin.pool_report")
    reporter.report_pool(build_pool(with_foreign, DeviceModelConfig()))
    reporter.report_pool(build_pool(with_foreign, DeviceModelConfig()))
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "GPU instance 2 (3g.40gb at 4:4)" in warnings[0].getMessage()
    assert value("migdra_foreign_gpu_instances", gpu_uuid=gpu0.gpu.uuid) == 1
    assert value("migdra_foreign_gpu_instances", gpu_uuid=inventory.gpus[1].gpu.uuid) == 0
    # 11 of the 25 placements per H100 overlap 4:4 (1g.10gb and 1g.10gb+me at 4, 5, 6; 1g.20gb at 4 and 6;
    # 2g at 4; 3g at 4; 7g) and are withheld; no shared devices by default
    assert value("migdra_published_devices", type="mig") == 25 + 25 - 11

    caplog.clear()
    reporter.report_pool(build_pool(inventory, DeviceModelConfig()))
    assert [r.levelno for r in caplog.records] == [logging.INFO]
    assert value("migdra_foreign_gpu_instances", gpu_uuid=gpu0.gpu.uuid) == 0
    assert value("migdra_published_devices", type="mig") == 2 * 25

    reporter.report_publish(PublishResult(created=2, updated=1, deleted=0, generation=3))
    assert value("migdra_resourceslice_writes_total", operation="create") == 2
    assert value("migdra_resourceslice_writes_total", operation="update") == 1
    assert value("migdra_pool_generation") == 3
