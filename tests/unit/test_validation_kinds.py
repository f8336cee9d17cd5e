"""resource.k8s.io/v1 kind rules: one valid object per kind, then one failing case per rule.

Each case changes one field of a valid object and names the error it must cause (field path, reason
and a fragment of the rendered detail).  Errors at other fields fail the case unless listed in
``also``, so a rule that fires where it should not is caught too.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import Any, Final

import pytest

from dra_driver.tools.validation import FieldError, validate

GROUP: Final = "resource.k8s.io"
DRIVER: Final = "gpu.migdra.io"
DELETE: Final = object()


def changed(obj: dict[str, Any], path: str, value: object) -> dict[str, Any]:
    """A deep copy of ``obj`` with ``path`` (``spec.devices[0].attributes[gpu.migdra.io/x]``) set or deleted."""
    result = copy.deepcopy(obj)
    tokens = [m.group(1) or m.group(2) for m in re.finditer(r"([^.\[\]]+)|\[([^\]]*)\]", path)]
    target: Any = result
    for token in tokens[:-1]:
        target = target[int(token)] if isinstance(target, list) else target.setdefault(token, {})
    last: Any = int(tokens[-1]) if isinstance(target, list) else tokens[-1]
    if value is DELETE:
        del target[last]
    elif isinstance(target, list) and last == len(target):
        target.append(value)
    else:
        target[last] = value
    return result


def run(kind: str, obj: dict[str, Any], old: dict[str, Any] | None = None, sub: str | None = None) -> list[FieldError]:
    return validate(GROUP, "v1", kind, obj, old, sub)


def details(errors: list[FieldError]) -> str:
    return "\n".join(error.detail() for error in errors) or "(no errors)"


# --- valid objects --------------------------------------------------------------------------------------------------

DEVICE: Final[dict[str, Any]] = {
    "name": "gpu-0-mig-1g-10gb-0",
    "attributes": {
        "gpu.migdra.io/profile": {"string": "1g.10gb"},
        "index": {"int": 0},
        "driverVersion": {"version": "550.54.15-rc.1+build.7"},
        "gpu.migdra.io/mig": {"bool": True},
        "gpu.migdra.io/placements": {"ints": [0, 1]},
    },
    "capacity": {"memory": {"value": "10Gi"}, "gpu.migdra.io/multiprocessors": {"value": 14}},
    "consumesCounters": [{"counterSet": "gpu-0", "counters": {"memory-slices": {"value": "1"}}}],
    "taints": [{"key": "gpu.migdra.io/unhealthy", "value": "xid-79", "effect": "NoSchedule"}],
}
DEVICE_SLICE: Final[dict[str, Any]] = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceSlice",
    "metadata": {"name": "node-a-gpu.migdra.io-devices"},
    "spec": {
        "driver": DRIVER,
        "pool": {"name": "node-a", "generation": 3, "resourceSliceCount": 2},
        "nodeName": "node-a",
        "devices": [DEVICE, {"name": "gpu-1", "attributes": {"uuid": {"string": "GPU-1"}}}],
    },
}
COUNTER_SLICE: Final[dict[str, Any]] = {
    "metadata": {"name": "node-a-gpu.migdra.io-counters"},
    "spec": {
        "driver": DRIVER,
        "pool": {"name": "node-a", "generation": 3, "resourceSliceCount": 2},
        "nodeSelector": {
            "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-a"]}]}]
        },
        "sharedCounters": [
            {"name": "gpu-0", "counters": {"memory-slices": {"value": "8"}, "compute-slices": {"value": "7"}}},
            {"name": "gpu-1", "counters": {"memory-slices": {"value": "8"}}},
        ],
    },
}
CLAIM: Final[dict[str, Any]] = {
    "metadata": {"name": "train", "namespace": "default"},
    "spec": {
        "devices": {
            "requests": [
                {
                    "name": "gpu",
                    "exactly": {
                        "deviceClassName": "mig.gpu.migdra.io",
                        "selectors": [
                            {"cel": {"expression": 'device.attributes["gpu.migdra.io"].profile == "1g.10gb"'}}
                        ],
                        "allocationMode": "ExactCount",
                        "count": 2,
                        "tolerations": [
                            {
                                "key": "gpu.migdra.io/unhealthy",
                                "operator": "Exists",
                                "effect": "NoExecute",
                                "tolerationSeconds": 30,
                            }
                        ],
                    },
                },
                {
                    "name": "mig",
                    "firstAvailable": [
                        {
                            "name": "big",
                            "deviceClassName": "mig.gpu.migdra.io",
                            "tolerations": [{"key": "k", "value": "v"}],
                        },
                        {"name": "small", "deviceClassName": "mig.gpu.migdra.io", "allocationMode": "All"},
                    ],
                },
            ],
            "constraints": [{"requests": ["gpu", "mig/big"], "matchAttribute": "gpu.migdra.io/parentUUID"}],
            "config": [
                {
                    "requests": ["gpu"],
                    "opaque": {"driver": DRIVER, "parameters": {"kind": "MigConfig", "sharing": "TimeSlicing"}},
                }
            ],
        }
    },
}
TEMPLATE: Final[dict[str, Any]] = {
    "metadata": {"name": "train", "namespace": "default"},
    "spec": {"metadata": {"labels": {"app": "train"}, "annotations": {"a.io/b": "c"}}, "spec": CLAIM["spec"]},
}
DEVICE_CLASS: Final[dict[str, Any]] = {
    "metadata": {"name": "mig.gpu.migdra.io"},
    "spec": {
        "selectors": [{"cel": {"expression": 'device.driver == "gpu.migdra.io"'}}],
        "config": [{"opaque": {"driver": DRIVER, "parameters": {"kind": "MigConfig"}}}],
        "extendedResourceName": "gpu.migdra.io/mig-1g.10gb",
    },
}
DEVICE_STATUS: Final[dict[str, Any]] = {
    "driver": DRIVER,
    "pool": "node-a",
    "device": "gpu-0-mig-1g-10gb-0",
    "conditions": [
        {"type": "Ready", "status": "True", "reason": "Configured", "lastTransitionTime": "2025-01-01T00:00:00Z"}
    ],
    "data": {"uuid": "MIG-1234"},
    "networkData": {"interfaceName": "eth1", "ips": ["10.1.2.3/24", "2001:db8::5/64"], "hardwareAddress": "aa:bb"},
}
ALLOCATION: Final[dict[str, Any]] = {
    "devices": {
        "results": [
            {"request": "gpu", "driver": DRIVER, "pool": "node-a", "device": "gpu-0-mig-1g-10gb-0"},
            {"request": "mig/big", "driver": DRIVER, "pool": "node-a/part-1", "device": "gpu-1"},
        ],
        "config": [
            {"source": "FromClass", "requests": [], "opaque": {"driver": DRIVER, "parameters": {"kind": "X"}}},
            {"source": "FromClaim", "requests": ["gpu"], "opaque": {"driver": DRIVER, "parameters": {"kind": "Y"}}},
        ],
    },
    "nodeSelector": {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-a"]}]}]
    },
}
ALLOCATED_CLAIM: Final[dict[str, Any]] = CLAIM | {
    "status": {
        "allocation": ALLOCATION,
        "reservedFor": [{"resource": "pods", "name": "train-0", "uid": "6f1c2a3e-0000-4000-8000-000000000001"}],
        "devices": [DEVICE_STATUS],
    }
}


@pytest.mark.parametrize(
    ("kind", "obj", "sub"),
    [
        pytest.param("ResourceSlice", DEVICE_SLICE, None, id="slice-with-devices"),
        pytest.param("ResourceSlice", COUNTER_SLICE, None, id="slice-with-shared-counters"),
        pytest.param("ResourceClaim", CLAIM, None, id="claim"),
        pytest.param("ResourceClaimTemplate", TEMPLATE, None, id="template"),
        pytest.param("DeviceClass", DEVICE_CLASS, None, id="device-class"),
        pytest.param("ResourceClaim", ALLOCATED_CLAIM, "status", id="claim-status"),
    ],
)
def test_valid_objects_have_no_errors(kind: str, obj: dict[str, Any], sub: str | None) -> None:
    assert run(kind, obj, None if sub is None else CLAIM, sub) == [], details(run(kind, obj, None, sub))


# --- one failing case per rule --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    path: str  # field changed in the valid object
    value: object  # new value, or DELETE
    field: str  # where the error must be
    reason: str
    fragment: str  # part of error.detail()
    also: tuple[str, ...] = ()  # other fields that may carry errors in this case


def check(
    kind: str, base: dict[str, Any], case: Case, old: dict[str, Any] | None = None, sub: str | None = None
) -> None:
    errors = run(kind, changed(base, case.path, case.value), old, sub)
    hits = [e for e in errors if e.field == case.field and e.reason == case.reason and case.fragment in e.detail()]
    assert hits, f"expected {case.reason} at {case.field} containing {case.fragment!r}, got:\n{details(errors)}"
    strays = [e for e in errors if e.field != case.field and e.field not in case.also]
    assert not strays, f"unexpected errors:\n{details(strays)}"


def _many(item: object, count: int) -> list[object]:
    return [copy.deepcopy(item) for _ in range(count)]


def _devices(count: int, **fields: object) -> list[dict[str, object]]:
    return [{"name": f"d-{i}", **fields} for i in range(count)]


def _counters(count: int) -> dict[str, object]:
    return {f"c-{i}": {"value": "1"} for i in range(count)}


D0 = "spec.devices[0]"
ATTRS = f"{D0}.attributes"
PROFILE = f"{ATTRS}[gpu.migdra.io/profile]"

SLICE_CASES = [
    pytest.param(Case("spec.driver", "", "spec.driver", "FieldValueRequired", "Required value"), id="driver-required"),
    pytest.param(
        Case("spec.driver", "GPU.migdra.io", "spec.driver", "FieldValueInvalid", "a lowercase RFC 1123 subdomain"),
        id="driver-lower-case",
    ),
    pytest.param(
        Case("spec.driver", "a" * 61 + ".io", "spec.driver", "FieldValueTooLong", "may not be more than 63 bytes"),
        id="driver-too-long",
    ),
    pytest.param(Case("spec.pool.name", "", "spec.pool.name", "FieldValueRequired", ""), id="pool-name-required"),
    pytest.param(
        Case("spec.pool.name", "node-a//x", "spec.pool.name", "FieldValueInvalid", 'Invalid value: "": a lowercase'),
        id="pool-name-segments",
    ),
    pytest.param(
        Case("spec.pool.name", "/".join(["a" * 60] * 5), "spec.pool.name", "FieldValueTooLong", "more than 253 bytes"),
        id="pool-name-too-long",
    ),
    pytest.param(
        Case("spec.pool.generation", -1, "spec.pool.generation", "FieldValueInvalid", "greater than or equal to zero"),
        id="pool-generation",
    ),
    pytest.param(
        Case(
            "spec.pool.resourceSliceCount", 0, "spec.pool.resourceSliceCount", "FieldValueInvalid", "greater than zero"
        ),
        id="pool-slice-count",
    ),
    pytest.param(
        Case("spec.nodeName", DELETE, "spec", "FieldValueRequired", "exactly one of `nodeName`, `nodeSelector`"),
        id="node-selection-required",
    ),
    pytest.param(
        Case("spec.allNodes", True, "spec", "FieldValueInvalid", '"{`nodeName`, `allNodes`}": exactly one of'),
        id="node-selection-one-of",
    ),
    pytest.param(
        Case(
            "spec.nodeName", "", "spec.nodeName", "FieldValueInvalid", "unset or set to a non-empty string", ("spec",)
        ),
        id="node-name-empty",
    ),
    pytest.param(
        Case("spec.nodeName", "Node_A", "spec.nodeName", "FieldValueInvalid", "RFC 1123 subdomain"),
        id="node-name-format",
    ),
    pytest.param(
        Case("spec.allNodes", False, "spec.allNodes", "FieldValueInvalid", "must be either unset or set to true"),
        id="all-nodes-false",
    ),
    pytest.param(
        Case("spec.devices[0].nodeName", "node-a", D0, "FieldValueInvalid", "only be set if `perDeviceNodeSelection`"),
        id="per-device-node-without-flag",
    ),
    pytest.param(Case(f"{D0}.name", "Bad_Name", f"{D0}.name", "FieldValueInvalid", "RFC 1123 label"), id="device-name"),
    pytest.param(Case(f"{D0}.name", "", f"{D0}.name", "FieldValueRequired", ""), id="device-name-required"),
    pytest.param(
        Case("spec.devices[1].name", DEVICE["name"], "spec.devices[1]", "FieldValueDuplicate", f'"{DEVICE["name"]}"'),
        id="device-name-unique",
    ),
    pytest.param(
        Case("spec.devices", _devices(129), "spec.devices", "FieldValueTooMany", "129: must have at most 128 items"),
        id="devices-128",
    ),
    pytest.param(
        Case(
            "spec.devices",
            _devices(65, taints=[{"key": "k", "effect": "NoSchedule"}]),
            "spec.devices",
            "FieldValueTooMany",
            "must have at most 64 items",
        ),
        id="devices-64-with-taints",
    ),
    pytest.param(
        Case(
            "spec.devices",
            [DEVICE, *_devices(64)],
            "spec.devices",
            "FieldValueTooMany",
            "65: must have at most 64 items",
        ),
        id="devices-64-with-counters",
    ),
    pytest.param(
        Case("spec.sharedCounters", [], "spec", "FieldValueInvalid", "only one of `sharedCounters` or `devices`"),
        id="devices-xor-shared-counters",
    ),
    pytest.param(
        Case(f"{ATTRS}[gpu.migdra.io/bad-name]", {"int": 1}, ATTRS, "FieldValueInvalid", "a valid C identifier"),
        id="attribute-name-identifier",
    ),
    pytest.param(
        Case(f"{ATTRS}[a/b/c]", {"int": 1}, ATTRS, "FieldValueInvalid", "must not contain more than one slash"),
        id="attribute-name-slashes",
    ),
    pytest.param(
        Case(f"{ATTRS}[{'x' * 33}]", {"int": 1}, ATTRS, "FieldValueTooLong", "may not be more than 32 bytes"),
        id="attribute-identifier-32",
    ),
    pytest.param(
        Case(f"{ATTRS}[{'a' * 64}/x]", {"int": 1}, ATTRS, "FieldValueTooLong", "may not be more than 63 bytes"),
        id="attribute-domain-63",
    ),
    pytest.param(
        Case(PROFILE, {"string": "a", "int": 1}, PROFILE, "FieldValueInvalid", "exactly one value must be specified"),
        id="attribute-two-values",
    ),
    pytest.param(
        Case(PROFILE, {}, PROFILE, "FieldValueInvalid", '"": exactly one value must be specified'),
        id="attribute-no-value",
    ),
    pytest.param(
        Case(PROFILE, {"strings": ["a"], "ints": [1]}, PROFILE, "FieldValueInvalid", "exactly one value"),
        id="attribute-two-lists",
    ),
    pytest.param(
        Case(f"{PROFILE}.string", "x" * 65, f"{PROFILE}.string", "FieldValueTooLong", "may not be more than 64 bytes"),
        id="attribute-string-64",
    ),
    pytest.param(
        Case(
            f"{PROFILE}",
            {"strings": ["ok", "x" * 65]},
            f"{PROFILE}.strings[1]",
            "FieldValueTooLong",
            "more than 64 bytes",
        ),
        id="attribute-strings-64",
    ),
    pytest.param(
        Case(
            f"{ATTRS}[driverVersion]",
            {"version": "1.2"},
            f"{ATTRS}[driverVersion].version",
            "FieldValueInvalid",
            "semver",
        ),
        id="attribute-version-semver",
    ),
    pytest.param(
        Case(
            f"{ATTRS}[driverVersion]",
            {"version": "1.2.3-" + "a" * 60},
            f"{ATTRS}[driverVersion].version",
            "FieldValueTooLong",
            "more than 64 bytes",
        ),
        id="attribute-version-64",
    ),
    pytest.param(
        Case(
            f"{ATTRS}[gpu.migdra.io/placements]",
            {"ints": []},
            f"{ATTRS}[gpu.migdra.io/placements].ints",
            "FieldValueInvalid",
            "must not be empty if specified",
        ),
        id="attribute-list-not-empty",
    ),
    pytest.param(
        Case(
            f"{ATTRS}[index]",
            {"int": "0"},
            f"{ATTRS}[index].int",
            "FieldValueInvalid",
            "must be of type integer",
            (f"{ATTRS}[index]",),
        ),
        id="attribute-int-type",
    ),
    pytest.param(
        Case(
            f"{D0}.capacity",
            {f"c{i}": {"value": "1"} for i in range(28)},
            D0,
            "FieldValueInvalid",
            "33: the total number of attributes and capacities must not exceed 32",
        ),
        id="attributes-and-capacities-32",
    ),
    pytest.param(
        Case(
            f"{D0}.capacity[memory].value",
            "10GB",
            f"{D0}.capacity[memory].value",
            "FieldValueInvalid",
            "quantities must match",
        ),
        id="capacity-quantity",
    ),
    pytest.param(
        Case(f"{D0}.capacity[memory]", {}, f"{D0}.capacity[memory].value", "FieldValueRequired", ""),
        id="capacity-value-required",
    ),
    pytest.param(
        Case(
            f"{D0}.consumesCounters",
            _many({"counterSet": "s", "counters": _counters(1)}, 3),
            f"{D0}.consumesCounters",
            "FieldValueTooMany",
            "must have at most 2 items",
        ),
        id="consumes-counters-2",
    ),
    pytest.param(
        Case(
            f"{D0}.consumesCounters[0].counters",
            _counters(33),
            f"{D0}.consumesCounters[0].counters",
            "FieldValueTooMany",
            "at most 32 items",
        ),
        id="consumed-counters-32",
    ),
    pytest.param(
        Case(
            f"{D0}.consumesCounters[1]",
            {"counterSet": "gpu-0", "counters": _counters(1)},
            f"{D0}.consumesCounters[1]",
            "FieldValueDuplicate",
            '"gpu-0"',
        ),
        id="consumed-counter-set-unique",
    ),
    pytest.param(
        Case(
            f"{D0}.consumesCounters[0].counterSet",
            "GPU_0",
            f"{D0}.consumesCounters[0].counterSet",
            "FieldValueInvalid",
            "RFC 1123 label",
        ),
        id="consumed-counter-set-name",
    ),
    pytest.param(
        Case(f"{D0}.consumesCounters[0].counters", {}, f"{D0}.consumesCounters[0].counters", "FieldValueRequired", ""),
        id="consumed-counters-required",
    ),
    pytest.param(
        Case(
            f"{D0}.taints",
            _many({"key": "k", "effect": "NoSchedule"}, 17),
            f"{D0}.taints",
            "FieldValueTooMany",
            "at most 16 items",
        ),
        id="taints-16",
    ),
    pytest.param(
        Case(
            f"{D0}.taints[0].effect",
            "PreferNoSchedule",
            f"{D0}.taints[0].effect",
            "FieldValueNotSupported",
            'Unsupported value: "PreferNoSchedule": supported values: "NoExecute", "NoSchedule", "None"',
        ),
        id="taint-effect",
    ),
    pytest.param(
        Case(f"{D0}.taints[0].effect", DELETE, f"{D0}.taints[0].effect", "FieldValueRequired", ""),
        id="taint-effect-required",
    ),
    pytest.param(
        Case(f"{D0}.taints[0].key", "a/b/c", f"{D0}.taints[0].key", "FieldValueInvalid", "label key"), id="taint-key"
    ),
    pytest.param(
        Case(
            f"{D0}.bindingConditions",
            [f"c{i}" for i in range(5)],
            f"{D0}.bindingConditions",
            "FieldValueTooMany",
            "at most 4 items",
        ),
        id="binding-conditions-4",
    ),
    pytest.param(
        Case(
            f"{D0}.bindingFailureConditions",
            [f"c{i}" for i in range(5)],
            f"{D0}.bindingFailureConditions",
            "FieldValueTooMany",
            "at most 4 items",
        ),
        id="binding-failure-conditions-4",
    ),
    pytest.param(
        Case(
            f"{D0}.bindingConditions",
            ["gpu.migdra.io/ready", "a b"],
            f"{D0}.bindingConditions[1]",
            "FieldValueInvalid",
            "name part",
        ),
        id="binding-condition-type",
    ),
    pytest.param(
        Case(
            "spec.pool.resourceSliceCount",
            "2",
            "spec.pool.resourceSliceCount",
            "FieldValueInvalid",
            "must be of type integer",
        ),
        id="wrong-json-type",
    ),
]


@pytest.mark.parametrize("case", SLICE_CASES)
def test_device_slice_rules(case: Case) -> None:
    check("ResourceSlice", DEVICE_SLICE, case)


S0 = "spec.sharedCounters[0]"
COUNTER_SLICE_CASES = [
    pytest.param(
        Case(
            "spec.sharedCounters",
            _many({"name": "s", "counters": _counters(1)}, 9),
            "spec.sharedCounters",
            "FieldValueTooMany",
            "at most 8 items",
        ),
        id="counter-sets-8",
    ),
    pytest.param(
        Case(f"{S0}.counters", _counters(33), f"{S0}.counters", "FieldValueTooMany", "at most 32 items"),
        id="counters-32",
    ),
    pytest.param(
        Case("spec.sharedCounters[1].name", "gpu-0", "spec.sharedCounters[1]", "FieldValueDuplicate", '"gpu-0"'),
        id="set-name-unique",
    ),
    pytest.param(Case(f"{S0}.name", "GPU_0", f"{S0}.name", "FieldValueInvalid", "RFC 1123 label"), id="set-name"),
    pytest.param(Case(f"{S0}.name", DELETE, f"{S0}.name", "FieldValueRequired", ""), id="set-name-required"),
    pytest.param(
        Case(
            f"{S0}.counters[Memory_Slices]",
            {"value": "1"},
            f"{S0}.counters",
            "FieldValueInvalid",
            '"Memory_Slices": a lowercase RFC 1123 label',
        ),
        id="counter-name",
    ),
    pytest.param(
        Case(
            f"{S0}.counters[memory-slices].value",
            "8 slices",
            f"{S0}.counters[memory-slices].value",
            "FieldValueInvalid",
            "quantities",
        ),
        id="counter-quantity",
    ),
    pytest.param(
        Case(
            "spec.nodeSelector.nodeSelectorTerms",
            [{"matchExpressions": [{"key": "a", "operator": "Exists"}]}] * 2,
            "spec.nodeSelector.nodeSelectorTerms",
            "FieldValueInvalid",
            "must have exactly one node selector term",
        ),
        id="node-selector-one-term",
    ),
    pytest.param(
        Case(
            "spec.nodeSelector.nodeSelectorTerms[0].matchFields[0].key",
            "metadata.labels",
            "spec.nodeSelector.nodeSelectorTerms[0].matchFields[0].key",
            "FieldValueInvalid",
            "not a valid field selector key",
        ),
        id="node-selector-field-key",
    ),
]


@pytest.mark.parametrize("case", COUNTER_SLICE_CASES)
def test_counter_slice_rules(case: Case) -> None:
    check("ResourceSlice", COUNTER_SLICE, case)


def test_per_device_node_selection_needs_exactly_one_per_device() -> None:
    spec = {
        **DEVICE_SLICE["spec"],
        "nodeName": None,
        "perDeviceNodeSelection": True,
        "devices": [
            {"name": "a", "nodeName": "node-a"},
            {"name": "b"},
            {"name": "c", "nodeName": "node-a", "allNodes": True},
        ],
    }
    errors = run("ResourceSlice", {"spec": spec})
    assert [(e.field, e.reason) for e in errors] == [
        ("spec.devices[1]", "FieldValueRequired"),
        ("spec.devices[2]", "FieldValueInvalid"),
    ], details(errors)
    assert "exactly one of `nodeName`, `nodeSelector`, or `allNodes` is required" in errors[0].detail()


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        pytest.param("spec.driver", "other.migdra.io", "spec.driver", id="driver"),
        pytest.param("spec.nodeName", "node-b", "spec.nodeName", id="node-name"),
        pytest.param("spec.pool.name", "node-b", "spec.pool.name", id="pool-name"),
    ],
)
def test_slice_identity_is_immutable(path: str, value: str, field: str) -> None:
    errors = run("ResourceSlice", changed(DEVICE_SLICE, path, value), DEVICE_SLICE)
    assert [(e.field, e.reason, e.message) for e in errors] == [(field, "FieldValueInvalid", "field is immutable")]


def test_slice_update_may_change_devices_and_generation() -> None:
    updated = changed(changed(DEVICE_SLICE, "spec.pool.generation", 4), "spec.devices[1].name", "gpu-2")
    assert run("ResourceSlice", updated, DEVICE_SLICE) == []


# --- claims and templates -------------------------------------------------------------------------------------------

R0 = "spec.devices.requests[0]"
X0 = f"{R0}.exactly"
R1 = "spec.devices.requests[1]"
SEL0 = f"{X0}.selectors[0].cel.expression"
CON0 = "spec.devices.constraints[0]"
CFG0 = "spec.devices.config[0]"
CLAIM_CASES = [
    pytest.param(
        Case(
            "spec.devices.requests",
            _devices(33, exactly={"deviceClassName": "c"}),
            "spec.devices.requests",
            "FieldValueTooMany",
            "at most 32 items",
            (f"{CON0}.requests[0]", f"{CON0}.requests[1]", f"{CFG0}.requests[0]"),
        ),
        id="requests-32",
    ),
    pytest.param(
        Case(
            f"{R0}.name",
            "GPU",
            f"{R0}.name",
            "FieldValueInvalid",
            "RFC 1123 label",
            (CON0 + ".requests[0]", CFG0 + ".requests[0]"),
        ),
        id="request-name",
    ),
    pytest.param(
        Case(f"{R1}.name", "gpu", R1, "FieldValueDuplicate", '"gpu"', (CON0 + ".requests[1]",)),
        id="request-name-unique",
    ),
    pytest.param(
        Case(
            f"{R1}.exactly",
            {"deviceClassName": "c"},
            R1,
            "FieldValueInvalid",
            "null: exactly one of `exactly` or `firstAvailable` is required, but multiple",
        ),
        id="exactly-and-first-available",
    ),
    pytest.param(
        Case(f"{R0}.exactly", DELETE, R0, "FieldValueRequired", "exactly one of `exactly` or `firstAvailable`"),
        id="exactly-or-first-available",
    ),
    pytest.param(
        Case(f"{X0}.deviceClassName", DELETE, f"{X0}.deviceClassName", "FieldValueRequired", ""), id="class-required"
    ),
    pytest.param(
        Case(f"{X0}.deviceClassName", "Mig_GPU", f"{X0}.deviceClassName", "FieldValueInvalid", "RFC 1123 subdomain"),
        id="class-name",
    ),
    pytest.param(
        Case(
            f"{X0}.allocationMode",
            "Some",
            f"{X0}.allocationMode",
            "FieldValueNotSupported",
            'supported values: "All", "ExactCount"',
        ),
        id="allocation-mode",
    ),
    pytest.param(
        Case(
            f"{X0}.allocationMode",
            "All",
            f"{X0}.count",
            "FieldValueInvalid",
            "2: must not be specified when allocationMode is 'All'",
        ),
        id="count-with-all",
    ),
    pytest.param(
        Case(f"{X0}.count", -1, f"{X0}.count", "FieldValueInvalid", "must be greater than zero"), id="count-positive"
    ),
    pytest.param(
        Case(
            f"{X0}.selectors",
            _many({"cel": {"expression": "true"}}, 33),
            f"{X0}.selectors",
            "FieldValueTooMany",
            "at most 32 items",
        ),
        id="selectors-32",
    ),
    pytest.param(  # kube compiles an empty expression rather than calling it required
        Case(SEL0, "", SEL0, "FieldValueInvalid", "compilation failed: ERROR: <input>:1:1: Syntax error"),
        id="expression-empty",
    ),
    pytest.param(
        Case(SEL0, "x" * 10241, SEL0, "FieldValueTooLong", "may not be more than 10240 bytes"), id="expression-10k"
    ),
    pytest.param(
        Case(
            SEL0,
            "device.attributes[",
            SEL0,
            "FieldValueInvalid",
            'Invalid value: "device.attributes[": compilation failed: ERROR: <input>:1:18: Syntax error',
        ),
        id="expression-syntax",
    ),
    pytest.param(
        Case(SEL0, "gpu.count > 1", SEL0, "FieldValueInvalid", "compilation failed: ERROR: <input>:1:1: undeclared"),
        id="expression-undeclared",
    ),
    pytest.param(
        Case(
            SEL0,
            "device.driver",
            SEL0,
            "FieldValueInvalid",
            'Invalid value: "device.driver": must evaluate to bool or the unknown type, not string',
        ),
        id="expression-not-bool",
    ),
    pytest.param(
        Case(
            f"{R1}.firstAvailable[0].selectors",
            [{"cel": {"expression": "true"}}, {"cel": {"expression": "device.nope"}}],
            f"{R1}.firstAvailable[0].selectors[1].cel.expression",
            "FieldValueInvalid",
            "compilation failed: ERROR: <input>:1:7: undefined field 'nope'",
        ),
        id="subrequest-expression-compiles",
    ),
    pytest.param(
        Case(f"{X0}.selectors[0]", {}, f"{X0}.selectors[0].cel", "FieldValueRequired", ""), id="selector-cel-required"
    ),
    pytest.param(
        Case(
            f"{R1}.firstAvailable",
            _devices(9, deviceClassName="c"),
            f"{R1}.firstAvailable",
            "FieldValueTooMany",
            "at most 8 items",
            (f"{CON0}.requests[1]",),
        ),
        id="subrequests-8",
    ),
    pytest.param(
        Case(f"{R1}.firstAvailable[1].name", "big", f"{R1}.firstAvailable[1]", "FieldValueDuplicate", '"big"'),
        id="subrequest-name-unique",
    ),
    pytest.param(
        Case(
            f"{R1}.firstAvailable[0].deviceClassName",
            "",
            f"{R1}.firstAvailable[0].deviceClassName",
            "FieldValueRequired",
            "",
        ),
        id="subrequest-class",
    ),
    pytest.param(
        Case(
            f"{R1}.firstAvailable[1].count",
            3,
            f"{R1}.firstAvailable[1].count",
            "FieldValueInvalid",
            "allocationMode is 'All'",
        ),
        id="subrequest-count-with-all",
    ),
    pytest.param(
        Case(
            f"{X0}.tolerations",
            _many({"operator": "Exists"}, 17),
            f"{X0}.tolerations",
            "FieldValueTooMany",
            "at most 16 items",
        ),
        id="tolerations-16",
    ),
    pytest.param(
        Case(
            f"{X0}.tolerations[0].operator",
            "In",
            f"{X0}.tolerations[0].operator",
            "FieldValueNotSupported",
            '"Equal", "Exists"',
        ),
        id="toleration-operator",
    ),
    pytest.param(
        Case(
            f"{X0}.tolerations[0].value",
            "v",
            f"{X0}.tolerations[0].value",
            "FieldValueInvalid",
            "must be empty for operator `Exists`",
        ),
        id="toleration-exists-value",
    ),
    pytest.param(
        Case(
            f"{X0}.tolerations[0].effect",
            "NoSchedule",
            f"{X0}.tolerations[0].effect",
            "FieldValueInvalid",
            "effect must be 'NoExecute' when `tolerationSeconds` is set",
        ),
        id="toleration-seconds-no-execute",
    ),
    pytest.param(
        Case(
            f"{R1}.firstAvailable[0].tolerations[0].effect",
            "Sometimes",
            f"{R1}.firstAvailable[0].tolerations[0].effect",
            "FieldValueNotSupported",
            '"NoExecute", "NoSchedule", "None"',
        ),
        id="toleration-effect",
    ),
    pytest.param(
        Case(
            f"{R1}.firstAvailable[0].tolerations[0].value",
            "-v",
            f"{R1}.firstAvailable[0].tolerations[0].value",
            "FieldValueInvalid",
            "a valid label must be",
        ),
        id="toleration-equal-value",
    ),
    pytest.param(
        Case(
            "spec.devices.constraints",
            _many({"matchAttribute": "a.io/b"}, 33),
            "spec.devices.constraints",
            "FieldValueTooMany",
            "at most 32 items",
        ),
        id="constraints-32",
    ),
    pytest.param(
        Case(
            f"{CON0}.requests[1]",
            "mig/tiny",
            f"{CON0}.requests[1]",
            "FieldValueInvalid",
            "must be the name of a request in the claim",
        ),
        id="constraint-request-exists",
    ),
    pytest.param(
        Case(
            f"{CON0}.requests[1]",
            "gpu/big",
            f"{CON0}.requests[1]",
            "FieldValueInvalid",
            "must be the name of a request",
        ),
        id="constraint-subrequest-of-exactly",
    ),
    pytest.param(
        Case(
            f"{CON0}.requests[1]",
            "a/b/c",
            f"{CON0}.requests[1]",
            "FieldValueInvalid",
            '"a/b/c": must be the name of a request',
        ),
        id="constraint-request-too-many-slashes",
    ),
    pytest.param(
        Case(f"{CON0}.requests[1]", "gpu", f"{CON0}.requests[1]", "FieldValueDuplicate", '"gpu"'),
        id="constraint-requests-unique",
    ),
    pytest.param(
        Case(
            f"{CON0}.matchAttribute",
            DELETE,
            CON0,
            "FieldValueRequired",
            'exactly one of "matchAttribute" or "distinctAttribute"',
        ),
        id="constraint-attribute-required",
    ),
    pytest.param(
        Case(
            f"{CON0}.distinctAttribute", "gpu.migdra.io/uuid", CON0, "FieldValueInvalid", "but multiple fields are set"
        ),
        id="constraint-match-xor-distinct",
    ),
    pytest.param(
        Case(
            f"{CON0}.matchAttribute",
            "parentUUID",
            f"{CON0}.matchAttribute",
            "FieldValueInvalid",
            "a fully qualified name must be a domain",
        ),
        id="constraint-fully-qualified",
    ),
    pytest.param(
        Case(
            "spec.devices.config",
            _many({"opaque": {"driver": DRIVER, "parameters": {}}}, 33),
            "spec.devices.config",
            "FieldValueTooMany",
            "at most 32 items",
        ),
        id="config-32",
    ),
    pytest.param(
        Case(f"{CFG0}.opaque", DELETE, f"{CFG0}.opaque", "FieldValueRequired", ""), id="config-opaque-required"
    ),
    pytest.param(
        Case(f"{CFG0}.opaque.driver", "GPU", f"{CFG0}.opaque.driver", "FieldValueInvalid", "RFC 1123 subdomain"),
        id="config-driver",
    ),
    pytest.param(
        Case(
            f"{CFG0}.opaque.parameters",
            [1, 2],
            f"{CFG0}.opaque.parameters",
            "FieldValueInvalid",
            '"<value omitted>": must be a valid JSON object',
        ),
        id="config-parameters-object",
    ),
    pytest.param(
        Case(
            f"{CFG0}.opaque.parameters",
            {"blob": "x" * 10240},
            f"{CFG0}.opaque.parameters",
            "FieldValueTooLong",
            "may not be more than 10240 bytes",
        ),
        id="config-parameters-10k",
    ),
    pytest.param(
        Case(f"{CFG0}.opaque.parameters", DELETE, f"{CFG0}.opaque.parameters", "FieldValueRequired", ""),
        id="config-parameters-required",
    ),
    pytest.param(
        Case(f"{CFG0}.requests[0]", "tpu", f"{CFG0}.requests[0]", "FieldValueInvalid", "must be the name of a request"),
        id="config-request-exists",
    ),
]


@pytest.mark.parametrize("case", CLAIM_CASES)
def test_claim_spec_rules(case: Case) -> None:
    check("ResourceClaim", CLAIM, case)


def test_template_uses_the_claim_rules_under_spec_spec() -> None:
    template = changed(TEMPLATE, "spec.spec.devices.requests[0].name", "GPU")
    errors = run("ResourceClaimTemplate", template)
    assert [e.field for e in errors] == [
        "spec.spec.devices.requests[0].name",
        "spec.spec.devices.constraints[0].requests[0]",
        "spec.spec.devices.config[0].requests[0]",
    ], details(errors)


def test_template_selectors_are_compiled() -> None:
    template = changed(TEMPLATE, "spec.spec.devices.requests[0].exactly.selectors[0].cel.expression", "1 + 1")
    errors = run("ResourceClaimTemplate", template)
    assert [(e.field, e.reason) for e in errors] == [
        ("spec.spec.devices.requests[0].exactly.selectors[0].cel.expression", "FieldValueInvalid")
    ], details(errors)


def test_a_compile_error_reads_like_cel_go() -> None:
    """kube's detail is ``compilation failed: `` and cel-go's issues: position, source line and caret."""
    (error,) = run("ResourceClaim", changed(CLAIM, SEL0, "device.attributes["))
    assert error.detail() == (
        f'{SEL0}: Invalid value: "device.attributes[": compilation failed: '
        "ERROR: <input>:1:18: Syntax error: mismatched input '<EOF>'\n | device.attributes[\n | .................^"
    )


def test_an_expression_over_the_length_limit_is_not_compiled() -> None:
    (error,) = run("ResourceClaim", changed(CLAIM, SEL0, "(" * 10241))
    assert (error.field, error.reason) == (SEL0, "FieldValueTooLong")


def test_template_metadata_labels_are_checked() -> None:
    errors = run("ResourceClaimTemplate", changed(TEMPLATE, "spec.metadata.labels", {"app": "-x"}))
    assert [(e.field, e.reason) for e in errors] == [("spec.metadata.labels", "FieldValueInvalid")]


@pytest.mark.parametrize(
    ("kind", "base"),
    [pytest.param("ResourceClaim", CLAIM, id="claim"), pytest.param("ResourceClaimTemplate", TEMPLATE, id="template")],
)
def test_claim_and_template_specs_are_immutable(kind: str, base: dict[str, Any]) -> None:
    path = (
        "spec.devices.requests[0].exactly.count"
        if kind == "ResourceClaim"
        else "spec.spec.devices.requests[0].exactly.count"
    )
    errors = run(kind, changed(base, path, 3), base)
    assert [(e.field, e.reason, e.message) for e in errors] == [("spec", "FieldValueInvalid", "field is immutable")]


def test_echoing_empty_lists_is_not_a_spec_change() -> None:
    echoed = changed(CLAIM, "spec.devices.requests[0].exactly.adminAccess", None)
    echoed = changed(echoed, "spec.devices.requests[1].firstAvailable[1].tolerations", [])
    assert run("ResourceClaim", echoed, CLAIM) == []


def test_main_update_of_claim_ignores_status() -> None:
    assert run("ResourceClaim", ALLOCATED_CLAIM, CLAIM) == []


# --- claim status ---------------------------------------------------------------------------------------------------

RES0 = "status.allocation.devices.results[0]"
ACFG0 = "status.allocation.devices.config[0]"
DS0 = "status.devices[0]"
NET = f"{DS0}.networkData"
STATUS_CASES = [
    pytest.param(
        Case(
            "status.allocation.devices.results",
            _many(ALLOCATION["devices"]["results"][0], 33),
            "status.allocation.devices.results",
            "FieldValueTooMany",
            "at most 32 items",
        ),
        id="results-32",
    ),
    pytest.param(
        Case(f"{RES0}.request", "tpu", f"{RES0}.request", "FieldValueInvalid", "must be the name of a request"),
        id="result-request",
    ),
    # status.devices[0] then names a device that is no longer allocated
    pytest.param(Case(f"{RES0}.driver", "", f"{RES0}.driver", "FieldValueRequired", "", (DS0,)), id="result-driver"),
    pytest.param(
        Case(f"{RES0}.pool", "Node_A", f"{RES0}.pool", "FieldValueInvalid", "RFC 1123 subdomain", (DS0,)),
        id="result-pool",
    ),
    pytest.param(
        Case(f"{RES0}.device", "gpu.0", f"{RES0}.device", "FieldValueInvalid", "must not contain dots", (DS0,)),
        id="result-device",
    ),
    pytest.param(
        Case(
            "status.allocation.devices.config",
            _many(ALLOCATION["devices"]["config"][0], 65),
            "status.allocation.devices.config",
            "FieldValueTooMany",
            "at most 64 items",
        ),
        id="allocation-config-64",
    ),
    pytest.param(
        Case(
            f"{ACFG0}.source",
            "FromNowhere",
            f"{ACFG0}.source",
            "FieldValueNotSupported",
            'supported values: "FromClaim", "FromClass"',
        ),
        id="allocation-config-source",
    ),
    pytest.param(
        Case(f"{ACFG0}.source", DELETE, f"{ACFG0}.source", "FieldValueRequired", ""),
        id="allocation-config-source-required",
    ),
    pytest.param(
        Case(
            f"{ACFG0}.opaque.parameters",
            "x",
            f"{ACFG0}.opaque.parameters",
            "FieldValueInvalid",
            "must be a valid JSON object",
        ),
        id="allocation-config-parameters",
    ),
    pytest.param(
        Case(
            "status.reservedFor",
            [{"resource": "pods", "name": f"p{i}", "uid": f"u{i}"} for i in range(257)],
            "status.reservedFor",
            "FieldValueTooMany",
            "257: must have at most 256 items",
        ),
        id="reserved-for-256",
    ),
    pytest.param(
        Case(
            "status.reservedFor[1]",
            {"resource": "pods", "name": "other", "uid": "6f1c2a3e-0000-4000-8000-000000000001"},
            "status.reservedFor[1]",
            "FieldValueDuplicate",
            '"6f1c2a3e',
        ),
        id="reserved-for-unique-uid",
    ),
    pytest.param(
        Case(
            "status.devices[1]",
            DEVICE_STATUS,
            "status.devices[1]",
            "FieldValueDuplicate",
            "Duplicate value: gpu.migdra.io/node-a/gpu-0-mig-1g-10gb-0",
        ),
        id="device-status-unique",
    ),
    pytest.param(
        Case(f"{DS0}.device", "GPU", f"{DS0}.device", "FieldValueInvalid", "RFC 1123 label", (DS0,)),
        id="device-status-device",
    ),
    pytest.param(
        Case(
            f"{DS0}.device",
            "gpu-1",
            DS0,
            "FieldValueInvalid",
            "Invalid value: gpu.migdra.io/node-a/gpu-1: must be an allocated device in the claim",
        ),
        id="device-status-not-allocated",
    ),
    pytest.param(
        Case(
            f"{DS0}.pool",
            "node-a/part-1",
            DS0,
            "FieldValueInvalid",
            "gpu.migdra.io/node-a/part-1/gpu-0-mig-1g-10gb-0: must be an allocated device in the claim",
        ),
        id="device-status-same-pool",
    ),
    pytest.param(
        Case(
            f"{DS0}.driver",
            "net.example.com",
            DS0,
            "FieldValueInvalid",
            "net.example.com/node-a/gpu-0-mig-1g-10gb-0: must be an allocated device in the claim",
        ),
        id="device-status-same-driver",
    ),
    pytest.param(
        Case(
            f"{DS0}.shareID",
            "6f1c2a3e-0000-4000-8000-000000000009",
            DS0,
            "FieldValueInvalid",
            "gpu-0-mig-1g-10gb-0/6f1c2a3e-0000-4000-8000-000000000009: must be an allocated device",
        ),
        id="device-status-same-share",
    ),
    pytest.param(
        Case(
            "status.allocation",
            DELETE,
            "status.reservedFor",
            "FieldValueForbidden",
            "status.reservedFor: Forbidden: may not be specified when `allocated` is not set",
            (DS0,),
        ),
        id="reserved-for-needs-allocation",
    ),
    pytest.param(
        Case("status.reservedFor[0].resource", DELETE, "status.reservedFor[0].resource", "FieldValueRequired", ""),
        id="reserved-for-resource-required",
    ),
    pytest.param(
        Case("status.reservedFor[0].name", "", "status.reservedFor[0].name", "FieldValueRequired", ""),
        id="reserved-for-name-required",
    ),
    pytest.param(
        Case("status.reservedFor[0].uid", DELETE, "status.reservedFor[0].uid", "FieldValueRequired", ""),
        id="reserved-for-uid-required",
    ),
    pytest.param(
        Case(
            f"{DS0}.conditions",
            [
                {"type": f"T{i}", "status": "True", "reason": "R", "lastTransitionTime": "2025-01-01T00:00:00Z"}
                for i in range(9)
            ],
            f"{DS0}.conditions",
            "FieldValueTooMany",
            "9: must have at most 8 items",
        ),
        id="conditions-8",
    ),
    pytest.param(
        Case(
            f"{DS0}.conditions[1]",
            DEVICE_STATUS["conditions"][0],
            f"{DS0}.conditions[1].type",
            "FieldValueDuplicate",
            '"Ready"',
        ),
        id="condition-type-unique",
    ),
    pytest.param(
        Case(
            f"{DS0}.conditions[0].status",
            "Yes",
            f"{DS0}.conditions[0].status",
            "FieldValueNotSupported",
            '"False", "True", "Unknown"',
        ),
        id="condition-status",
    ),
    pytest.param(
        Case(f"{DS0}.conditions[0].reason", DELETE, f"{DS0}.conditions[0].reason", "FieldValueRequired", "must be set"),
        id="condition-reason-required",
    ),
    pytest.param(
        Case(
            f"{DS0}.conditions[0].reason",
            "not ok",
            f"{DS0}.conditions[0].reason",
            "FieldValueInvalid",
            "a condition reason must start",
        ),
        id="condition-reason-format",
    ),
    pytest.param(
        Case(
            f"{DS0}.conditions[0].lastTransitionTime",
            DELETE,
            f"{DS0}.conditions[0].lastTransitionTime",
            "FieldValueRequired",
            "must be set",
        ),
        id="condition-time-required",
    ),
    pytest.param(
        Case(f"{DS0}.conditions[0].type", "a b", f"{DS0}.conditions[0].type", "FieldValueInvalid", "name part"),
        id="condition-type",
    ),
    pytest.param(
        Case(
            f"{DS0}.conditions[0].message",
            "m" * 32769,
            f"{DS0}.conditions[0].message",
            "FieldValueTooLong",
            "more than 32768 bytes",
        ),
        id="condition-message",
    ),
    pytest.param(
        Case(
            f"{DS0}.data", {"blob": "x" * 10240}, f"{DS0}.data", "FieldValueTooLong", "may not be more than 10240 bytes"
        ),
        id="data-10k",
    ),
    pytest.param(
        Case(f"{DS0}.data", "text", f"{DS0}.data", "FieldValueInvalid", "must be a valid JSON object"), id="data-object"
    ),
    pytest.param(
        Case(f"{NET}.interfaceName", "i" * 257, f"{NET}.interfaceName", "FieldValueTooLong", "more than 256 bytes"),
        id="interface-name-256",
    ),
    pytest.param(
        Case(f"{NET}.hardwareAddress", "a" * 129, f"{NET}.hardwareAddress", "FieldValueTooLong", "more than 128 bytes"),
        id="hardware-address-128",
    ),
    pytest.param(
        Case(
            f"{NET}.ips", [f"10.0.0.{i}/24" for i in range(17)], f"{NET}.ips", "FieldValueTooMany", "at most 16 items"
        ),
        id="ips-16",
    ),
    pytest.param(
        Case(f"{NET}.ips[0]", "10.1.2.3", f"{NET}.ips[0]", "FieldValueInvalid", "must be a valid CIDR value"),
        id="ip-cidr",
    ),
    pytest.param(
        Case(
            f"{NET}.ips[1]",
            "2001:DB8::5/64",
            f"{NET}.ips[1]",
            "FieldValueInvalid",
            'must be in canonical form ("2001:db8::5/64")',
        ),
        id="ip-canonical",
    ),
    pytest.param(
        Case(f"{NET}.ips[1]", "10.1.2.3/24", f"{NET}.ips[1]", "FieldValueDuplicate", '"10.1.2.3/24"'), id="ips-unique"
    ),
]


@pytest.mark.parametrize("case", STATUS_CASES)
def test_claim_status_rules(case: Case) -> None:
    check("ResourceClaim", ALLOCATED_CLAIM, case, old=CLAIM, sub="status")


def test_allocation_may_be_set_once_and_cleared_but_not_changed() -> None:
    changed_allocation = changed(ALLOCATED_CLAIM, "status.allocation.devices.results[1].device", "gpu-2")
    errors = run("ResourceClaim", changed_allocation, ALLOCATED_CLAIM, "status")
    assert [(e.field, e.reason, e.message) for e in errors] == [
        ("status.allocation", "FieldValueInvalid", "field is immutable")
    ]
    cleared = changed(ALLOCATED_CLAIM, "status", {})
    assert run("ResourceClaim", cleared, ALLOCATED_CLAIM, "status") == []
    unchanged_with_new_device_status = changed(ALLOCATED_CLAIM, "status.devices[0].conditions[0].status", "False")
    assert run("ResourceClaim", unchanged_with_new_device_status, ALLOCATED_CLAIM, "status") == []


def test_allocation_cannot_be_cleared_while_reserved() -> None:
    unreserved = changed(changed(ALLOCATED_CLAIM, "status.allocation", DELETE), "status.devices", DELETE)
    errors = run("ResourceClaim", unreserved, ALLOCATED_CLAIM, "status")
    assert [e.detail() for e in errors] == [
        "status.reservedFor: Forbidden: may not be specified when `allocated` is not set"
    ]
    released = changed(unreserved, "status.reservedFor", [])
    assert run("ResourceClaim", released, ALLOCATED_CLAIM, "status") == []


def test_device_status_needs_an_allocation() -> None:
    unallocated = changed(changed(ALLOCATED_CLAIM, "status.allocation", DELETE), "status.reservedFor", DELETE)
    errors = run("ResourceClaim", unallocated, CLAIM, "status")
    assert [e.detail() for e in errors] == [
        "status.devices[0]: Invalid value: gpu.migdra.io/node-a/gpu-0-mig-1g-10gb-0: "
        "must be an allocated device in the claim"
    ]


def test_device_status_may_name_an_allocated_share() -> None:
    share = "6f1c2a3e-0000-4000-8000-000000000009"
    shared = changed(ALLOCATED_CLAIM, "status.allocation.devices.results[0].shareID", share)
    shared = changed(shared, "status.devices[0].shareID", share)
    assert run("ResourceClaim", shared, CLAIM, "status") == [], details(run("ResourceClaim", shared, CLAIM, "status"))
    unshared = changed(shared, "status.devices[0].shareID", DELETE)
    assert [e.field for e in run("ResourceClaim", unshared, CLAIM, "status")] == [DS0]


def test_reserved_for_api_group_is_optional() -> None:
    with_group = changed(ALLOCATED_CLAIM, "status.reservedFor[0].apiGroup", "")
    assert run("ResourceClaim", with_group, CLAIM, "status") == []
    with_group = changed(ALLOCATED_CLAIM, "status.reservedFor[0].apiGroup", "example.com")
    assert run("ResourceClaim", with_group, CLAIM, "status") == []


def test_a_deleted_claim_takes_no_new_consumers() -> None:
    deleting = changed(ALLOCATED_CLAIM, "metadata.deletionTimestamp", "2025-01-01T00:00:00Z")
    added = changed(deleting, "status.reservedFor[1]", {"resource": "pods", "name": "train-1", "uid": "u-2"})
    errors = run("ResourceClaim", added, deleting, "status")
    assert [e.detail() for e in errors] == [
        "status.reservedFor: Forbidden: new entries may not be added while `deallocationRequested` or "
        "`deletionTimestamp` are set"
    ]
    removed = changed(deleting, "status.reservedFor", [])
    assert run("ResourceClaim", removed, deleting, "status") == []
    live = changed(ALLOCATED_CLAIM, "status.reservedFor[1]", {"resource": "pods", "name": "train-1", "uid": "u-2"})
    assert run("ResourceClaim", live, ALLOCATED_CLAIM, "status") == [], "a live claim may take new consumers"


def test_stored_allocation_is_not_revalidated() -> None:
    """Once stored, an allocation is only compared; a rule added later must not lock the claim."""
    stored = changed(ALLOCATED_CLAIM, "status.allocation.devices.results[0].request", "gone")
    assert run("ResourceClaim", stored, stored, "status") == []


# --- device classes -------------------------------------------------------------------------------------------------

CLASS_CASES = [
    pytest.param(
        Case(
            "spec.selectors",
            _many({"cel": {"expression": "true"}}, 33),
            "spec.selectors",
            "FieldValueTooMany",
            "at most 32 items",
        ),
        id="selectors-32",
    ),
    pytest.param(
        Case(
            "spec.selectors[0].cel.expression",
            "x" * 10241,
            "spec.selectors[0].cel.expression",
            "FieldValueTooLong",
            "more than 10240 bytes",
        ),
        id="expression-10k",
    ),
    pytest.param(
        Case(
            "spec.selectors[0].cel.expression",
            'device.driver = "gpu.migdra.io"',
            "spec.selectors[0].cel.expression",
            "FieldValueInvalid",
            "compilation failed: ERROR: <input>:1:",
        ),
        id="expression-compiles",
    ),
    pytest.param(
        Case(
            "spec.selectors[0].cel.expression",
            # four nested comprehensions: cel-go's estimate is far above 1,000,000 (kube refuses it)
            "device.attributes.all(d, device.attributes[d].all(i, "
            "device.attributes.all(e, device.attributes[e].all(j, d != e || i == j))))",
            "spec.selectors[0].cel.expression",
            "FieldValueInvalid",
            "too complex, exceeds cost limit",
        ),
        id="expression-too-complex",
    ),
    pytest.param(
        Case(
            "spec.selectors[0].cel.expression",
            "device.attributes",
            "spec.selectors[0].cel.expression",
            "FieldValueInvalid",
            "must evaluate to bool or the unknown type, not map(",
        ),
        id="expression-bool",
    ),
    pytest.param(
        Case(
            "spec.config",
            _many({"opaque": {"driver": DRIVER, "parameters": {}}}, 33),
            "spec.config",
            "FieldValueTooMany",
            "at most 32 items",
        ),
        id="config-32",
    ),
    pytest.param(
        Case("spec.config[0].opaque.parameters", DELETE, "spec.config[0].opaque.parameters", "FieldValueRequired", ""),
        id="config-parameters",
    ),
    pytest.param(
        Case(
            "spec.extendedResourceName",
            "mig",
            "spec.extendedResourceName",
            "FieldValueInvalid",
            '"mig": must be a valid extended resource name',
        ),
        id="extended-resource-name",
    ),
    pytest.param(
        Case(
            "spec.extendedResourceName",
            "kubernetes.io/mig",
            "spec.extendedResourceName",
            "FieldValueInvalid",
            "extended resource name",
        ),
        id="extended-resource-name-native",
    ),
]


@pytest.mark.parametrize("case", CLASS_CASES)
def test_device_class_rules(case: Case) -> None:
    check("DeviceClass", DEVICE_CLASS, case)


def test_device_class_update_applies_the_same_rules() -> None:
    errors = run("DeviceClass", changed(DEVICE_CLASS, "spec.extendedResourceName", "mig"), DEVICE_CLASS)
    assert [e.field for e in errors] == ["spec.extendedResourceName"]


# --- dispatch and ordering ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("group", "version", "kind", "sub"),
    [
        pytest.param("", "v1", "Pod", None, id="other-group"),
        pytest.param(GROUP, "v1beta1", "ResourceSlice", None, id="other-version"),
        pytest.param(GROUP, "v1", "DeviceTaintRule", None, id="kind-without-rules"),
        pytest.param(GROUP, "v1", "ResourceSlice", "status", id="subresource-without-rules"),
    ],
)
def test_objects_without_rules_pass(group: str, version: str, kind: str, sub: str | None) -> None:
    assert validate(group, version, kind, {"spec": {"driver": 5}}, None, sub) == []


def test_all_errors_are_returned_in_a_stable_order() -> None:
    broken = changed(DEVICE_SLICE, "spec.driver", "")
    broken = changed(broken, "spec.pool.resourceSliceCount", 0)
    broken = changed(broken, f"{ATTRS}[zeta-bad]", {"int": 1})
    broken = changed(broken, f"{ATTRS}[alpha-bad]", {"int": 1})
    errors = run("ResourceSlice", broken)
    assert [e.field for e in errors] == ["spec.driver", "spec.pool.resourceSliceCount", ATTRS, ATTRS]
    assert '"alpha-bad"' in errors[2].detail()
    assert '"zeta-bad"' in errors[3].detail()
    assert run("ResourceSlice", broken) == errors


def test_long_map_keys_are_shortened_in_paths() -> None:
    """Keys longer than a valid qualified name (96 bytes) are cut in the middle, as kube does."""
    key = "d" * 120 + ".io/x"
    errors = run("ResourceSlice", changed(DEVICE_SLICE, f"{ATTRS}[{key}]", {}))
    shown = [e.field for e in errors if e.field.startswith(ATTRS + "[")]
    assert shown == [f"{ATTRS}[{key[:47]}...{key[-46:]}]"], details(errors)


def test_a_result_may_name_a_subrequest() -> None:
    claim = changed(ALLOCATED_CLAIM, "status.allocation.devices.results[0].request", "mig/small")
    assert run("ResourceClaim", claim, CLAIM, "status") == []


def test_wrong_json_types_are_reported_not_raised() -> None:
    errors = run("ResourceClaim", {"spec": {"devices": {"requests": "gpu", "config": [5]}}})
    assert [(e.field, e.message) for e in errors] == [
        ("spec.devices.requests", "must be of type array"),
        ("spec.devices.config[0]", "must be of type object"),
        ("spec.devices.config[0].opaque", ""),
    ]
