"""requestPolicy of a shared device's capacities (DRAConsumableCapacity): kube-apiserver's rules, one failing
case per rule, each naming the field path, reason and message kubernetes/kubernetes
pkg/apis/resource/validation gives (v1.36); plus the device model's shared devices, which must pass."""

from __future__ import annotations

from typing import Any, Final

import pytest

from dra_driver.devicemodel import example_inventory
from dra_driver.devicemodel.config import DeviceModelConfig
from dra_driver.devicemodel.layout import render_slices
from dra_driver.devicemodel.pool import build_pool
from dra_driver.mig import load_catalog
from tests.unit.test_validation_kinds import DELETE, Case, changed, check, details, run

SHARED: Final[dict[str, Any]] = {
    "name": "gpu-0-shared-4g40gb-5-0",
    "allowMultipleAllocations": True,
    "attributes": {"shared": {"bool": True}},
    "capacity": {
        "computeSlices": {"value": "4", "requestPolicy": {"default": "1", "validValues": ["1", "2", "4"]}},
        "memory": {"value": "40Gi", "requestPolicy": {"default": "0", "validValues": ["0"]}},
        "bandwidth": {
            "value": "100",
            "requestPolicy": {"default": "10", "validRange": {"min": "10", "max": "50", "step": "10"}},
        },
    },
}
SLICE: Final[dict[str, Any]] = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceSlice",
    "metadata": {"name": "node-a-gpu.migdra.io-devices"},
    "spec": {
        "driver": "gpu.migdra.io",
        "pool": {"name": "node-a", "generation": 1, "resourceSliceCount": 1},
        "nodeName": "node-a",
        "devices": [SHARED],
    },
}
D0: Final = "spec.devices[0]"
SLICES: Final = f"{D0}.capacity[computeSlices].requestPolicy"
BANDWIDTH: Final = f"{D0}.capacity[bandwidth].requestPolicy"
VALID: Final = f"{SLICES}.validValues"
RANGE: Final = f"{BANDWIDTH}.validRange"
NOT_DEFAULT: Final = "default value is not valid according to the requestPolicy"


def test_a_shared_device_with_policies_is_valid() -> None:
    assert run("ResourceSlice", SLICE) == [], details(run("ResourceSlice", SLICE))


def test_the_device_models_shared_devices_pass_kube_rules() -> None:
    """As a node with ``sharedDevices: true`` publishes them (off by default)."""
    models = ["H100-SXM5-80GB", "A100-SXM4-40GB", "A30", "B200"]
    pool = build_pool(example_inventory(models), DeviceModelConfig(shared_devices=True))
    slices = render_slices(pool, "example-node", generation=1)
    shared = [d for s in slices for d in s["spec"].get("devices", []) if d.get("allowMultipleAllocations")]
    catalog = load_catalog()
    expected = sum(len(p.placements) for m in models for p in catalog.model(m).gpu_instance_profiles if p.share_sizes)
    assert len(shared) == expected > 0
    for item in slices:
        assert run("ResourceSlice", item) == [], details(run("ResourceSlice", item))


CASES = [
    pytest.param(
        Case(
            f"{D0}.allowMultipleAllocations",
            DELETE,
            SLICES,
            "FieldValueForbidden",
            "allowMultipleAllocations must be true",
            (f"{D0}.capacity[memory].requestPolicy", BANDWIDTH),
        ),
        id="policy-needs-multiple-allocations",
    ),
    pytest.param(
        Case(
            f"{D0}.allowMultipleAllocations",
            False,
            SLICES,
            "FieldValueForbidden",
            "allowMultipleAllocations must be true",
            (f"{D0}.capacity[memory].requestPolicy", BANDWIDTH),
        ),
        id="policy-needs-multiple-allocations-true",
    ),
    pytest.param(
        Case(
            f"{SLICES}.validRange",
            {"min": "1"},
            SLICES,
            "FieldValueForbidden",
            'cannot specify "validValues" and "validRange" at the same time',
        ),
        id="values-and-range",
    ),
    pytest.param(
        Case(f"{SLICES}.default", DELETE, f"{SLICES}.default", "FieldValueRequired", "required when validValues"),
        id="values-need-default",
    ),
    pytest.param(
        Case(f"{BANDWIDTH}.default", DELETE, f"{BANDWIDTH}.default", "FieldValueRequired", "required when validRange"),
        id="range-needs-default",
    ),
    pytest.param(
        Case(
            f"{VALID}", ["2", "1", "4"], f"{VALID}[1]", "FieldValueInvalid", '"1": values must be sorted in ascending'
        ),
        id="values-ascending",
    ),
    pytest.param(
        Case(f"{VALID}", [str(i) for i in range(1, 12)], VALID, "FieldValueTooMany", "must have at most 10 items"),
        id="values-at-most-10",
    ),
    pytest.param(
        Case(f"{VALID}", ["1", "1", "4"], f"{VALID}[1]", "FieldValueDuplicate", 'Duplicate value: "1"'),
        id="values-unique",
    ),
    pytest.param(
        Case(f"{VALID}", ["1", "1000m", "4"], f"{VALID}[1]", "FieldValueDuplicate", 'Duplicate value: "1"', (VALID,)),
        id="values-unique-by-value",
    ),
    pytest.param(
        Case(
            f"{VALID}", ["1", "8"], f"{VALID}[1]", "FieldValueInvalid", '"8": option is larger than capacity value: 4'
        ),
        id="value-above-capacity",
    ),
    pytest.param(
        Case(f"{VALID}", ["2", "4"], VALID, "FieldValueInvalid", f'"1": {NOT_DEFAULT}'),
        id="values-include-default",
    ),
    pytest.param(
        Case(f"{RANGE}.min", DELETE, f"{RANGE}.min", "FieldValueRequired", "required when validRange is defined"),
        id="range-min-required",
    ),
    pytest.param(
        Case(
            f"{RANGE}",
            {"min": "200"},
            f"{RANGE}.min",
            "FieldValueInvalid",
            '"200": min is larger than capacity value: 100',
        ),
        id="range-min-above-capacity",
    ),
    pytest.param(
        Case(
            f"{BANDWIDTH}.default",
            "5",
            f"{RANGE}.min",
            "FieldValueInvalid",
            '"5": default is less than min: 10',
            (f"{RANGE}.step",),
        ),
        id="range-default-below-min",
    ),
    pytest.param(
        Case(
            f"{RANGE}",
            {"min": "10", "max": "200", "step": "10"},
            f"{RANGE}.max",
            "FieldValueInvalid",
            '"200": max is larger than capacity value: 100',
        ),
        id="range-max-above-capacity",
    ),
    pytest.param(
        Case(
            f"{RANGE}",
            {"min": "10", "max": "5"},
            f"{RANGE}.max",
            "FieldValueInvalid",
            '"10": min is larger than max: 5',
        ),
        id="range-min-above-max",
    ),
    pytest.param(
        Case(f"{BANDWIDTH}.default", "60", f"{RANGE}.max", "FieldValueInvalid", '"60": default is more than max: 50'),
        id="range-default-above-max",
    ),
    pytest.param(
        Case(
            f"{RANGE}.step",
            "95",
            f"{RANGE}.step",
            "FieldValueInvalid",
            '"95": one step 105 is larger than capacity value: 100',
        ),
        id="range-one-step-above-capacity",
    ),
    pytest.param(
        Case(
            f"{BANDWIDTH}.default",
            "15",
            f"{RANGE}.step",
            "FieldValueInvalid",
            '"15": value is not a multiple of a given step (10) from (10)',
        ),
        id="range-default-on-a-step",
    ),
    pytest.param(
        Case(
            f"{RANGE}.max",
            "45",
            f"{RANGE}.step",
            "FieldValueInvalid",
            '"45": value is not a multiple of a given step (10) from (10)',
        ),
        id="range-max-on-a-step",
    ),
    pytest.param(
        Case(f"{SLICES}.default", "lots", f"{SLICES}.default", "FieldValueInvalid", '"lots": quantities must match'),
        id="default-is-a-quantity",
    ),
]


@pytest.mark.parametrize("case", CASES)
def test_request_policy_rules(case: Case) -> None:
    check("ResourceSlice", SLICE, case)


def test_without_a_policy_a_shared_capacity_is_just_a_value() -> None:
    plain = changed(SLICE, f"{SLICES}", DELETE)
    assert run("ResourceSlice", plain) == [], details(run("ResourceSlice", plain))
    no_options = changed(SLICE, f"{VALID}", [])  # an empty validValues is no policy kind at all, as in kube
    assert run("ResourceSlice", no_options) == [], details(run("ResourceSlice", no_options))
