"""Realize before bind in the device model: the binding conditions every published device carries."""

from __future__ import annotations

import pytest

from dra_driver.devicemodel import example_inventory
from dra_driver.devicemodel.config import DeviceModelConfig
from dra_driver.devicemodel.layout import render_slices
from dra_driver.devicemodel.pool import build_pool
from dra_driver.devicemodel.vocabulary import realize_before_bind_conditions
from dra_driver.tools.validation import validate


@pytest.mark.parametrize(
    ("driver", "mig_enabled"),
    [("gpu.migdra.io", True), ("gpu.migdra.io", False), ("mig.example.com", True)],
    ids=["mig-devices", "whole-gpu", "other-driver"],
)
def test_with_realize_before_bind_every_device_waits_for_realized_and_fails_on_realization_failed(
    driver: str, mig_enabled: bool
) -> None:
    config = DeviceModelConfig(driver_name=driver)
    inventory = example_inventory(["H100-SXM5-80GB", "A30"], mig_enabled)
    pool = build_pool(inventory, config, binding=realize_before_bind_conditions(driver))
    slices = render_slices(pool, "node-a", generation=1)
    devices = [device for item in slices for device in item["spec"].get("devices", [])]
    assert devices
    for device in devices:
        assert device["bindingConditions"] == [f"{driver}/realized"], device["name"]
        assert device["bindingFailureConditions"] == [f"{driver}/realization-failed"], device["name"]
        assert "bindsToNode" not in device  # the pool is node-local: allocation.nodeSelector names the node anyway
    for item in slices:  # the API server's validation (condition types, at most 4 each) accepts them
        assert validate("resource.k8s.io", "v1", "ResourceSlice", item, None, None) == []


def test_without_the_setting_no_device_has_binding_conditions_and_the_pool_is_otherwise_equal() -> None:
    inventory = example_inventory(["H100-SXM5-80GB"])
    plain = build_pool(inventory, DeviceModelConfig())
    waiting = build_pool(inventory, DeviceModelConfig(), binding=realize_before_bind_conditions("gpu.migdra.io"))
    for device in plain.devices:
        body = device.to_api()
        assert "bindingConditions" not in body
        assert "bindingFailureConditions" not in body
    stripped = [
        {k: v for k, v in d.to_api().items() if k not in ("bindingConditions", "bindingFailureConditions")}
        for d in waiting.devices
    ]
    assert stripped == [d.to_api() for d in plain.devices]
