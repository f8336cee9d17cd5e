"""The one model of a ResourceClaim (dra_driver/resourceclaim.py): what every part reads of a claim."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from dra_driver.resourceclaim import ResourceClaimView, describe_validation_error, parse_claims

DRIVER = "gpu.migdra.io"


def stored_claim() -> dict[str, Any]:
    """A claim as kube-apiserver stores it after kube-scheduler, the controller and the plugin wrote it."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "name": "c",
            "namespace": "ns",
            "uid": "uid-c",
            "generation": 2,
            "resourceVersion": "41",
            "managedFields": [
                {
                    "manager": f"{DRIVER}/controller",
                    "operation": "Apply",
                    "subresource": "status",
                    "fieldsV1": {"f:status": {"f:devices": {}}},
                }
            ],
        },
        "spec": {
            "devices": {
                "requests": [
                    {"name": "gpu", "exactly": {"deviceClassName": "mig.migdra.io", "count": 2, "adminAccess": None}},
                    {
                        "name": "either",
                        "firstAvailable": [
                            {"name": "big", "deviceClassName": "mig.migdra.io", "capacity": {"requests": {"x": "1"}}}
                        ],
                    },
                ],
                "constraints": [{"requests": ["gpu"], "matchAttribute": f"{DRIVER}/parentUUID"}],
                "config": [{"requests": ["gpu"], "opaque": {"driver": DRIVER, "parameters": {"a": 1}}}],
            }
        },
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": "gpu", "driver": DRIVER, "pool": "n1", "device": "gpu-0-mig-1g10gb-19-0"},
                        {
                            "request": "gpu",
                            "driver": DRIVER,
                            "pool": "n1",
                            "device": "gpu-0-shared-4g40gb-5-0",
                            "shareID": "s-1",
                            "consumedCapacity": {f"{DRIVER}/computeSlices": "2"},
                        },
                        {"request": "x", "driver": "other.io", "pool": "n1", "device": "d"},
                    ],
                    "config": None,
                }
            },
            "devices": [
                {
                    "driver": DRIVER,
                    "pool": "n1",
                    "device": "gpu-0-mig-1g10gb-19-0",
                    "conditions": [
                        {"type": "Ready", "status": "True", "reason": "R", "message": "", "lastTransitionTime": "t0"}
                    ],
                    "data": {"migUUID": "MIG-1"},
                },
                {
                    "driver": DRIVER,
                    "pool": "n1",
                    "device": "gpu-0-shared-4g40gb-5-0",
                    "shareID": "s-1",
                    "conditions": None,
                },
            ],
            "reservedFor": [{"resource": "pods", "name": "p", "uid": "pod-uid"}],
        },
    }


def test_a_stored_claim_reads_its_spec_allocation_status_entries_and_managers() -> None:
    claim = ResourceClaimView.model_validate(stored_claim())
    assert (claim.metadata.label, claim.metadata.generation, claim.metadata.resource_version) == ("ns/c", 2, "41")
    assert [m.manager for m in claim.metadata.managed_fields] == [f"{DRIVER}/controller"]
    gpu, either = claim.spec.devices.requests
    assert gpu.exactly is not None
    assert (gpu.exactly.device_class_name, gpu.exactly.count, gpu.exactly.admin_access) == ("mig.migdra.io", 2, None)
    (big,) = either.first_available
    assert big.capacity is not None
    assert big.capacity.requests == {"x": "1"}
    assert claim.spec.devices.constraints[0].match_attribute == f"{DRIVER}/parentUUID"
    assert claim.allocated
    assert [r.device for r in claim.results_of(DRIVER)] == ["gpu-0-mig-1g10gb-19-0", "gpu-0-shared-4g40gb-5-0"]
    assert [r.device for r in claim.results_of(DRIVER, "elsewhere")] == []
    exclusive, share = claim.results_of(DRIVER)
    assert (exclusive.share, share.share) == (None, "s-1")
    assert share.consumed("computeSlices", DRIVER) == "2", "a qualified capacity name is found by its bare name"
    entry = claim.status_entry(DRIVER, "n1", "gpu-0-mig-1g10gb-19-0")
    assert entry is not None
    ready = entry.condition("Ready")
    assert ready is not None
    assert (ready.status, ready.last_transition_time) == ("True", "t0")
    assert entry.data_fields == {"migUUID": "MIG-1"}
    assert claim.status_entry(DRIVER, "n1", "gpu-0-shared-4g40gb-5-0") is None, (
        "a share's entry is keyed by its shareID"
    )
    shared_entry = claim.status_entry(DRIVER, "n1", "gpu-0-shared-4g40gb-5-0", "s-1")
    assert shared_entry is not None
    assert shared_entry.conditions == (), "null is an absent field"
    assert claim.metadata.involved() == {
        "metadata": {"name": "c", "namespace": "ns", "uid": "uid-c", "resourceVersion": "41"}
    }


def test_a_claim_before_allocation_has_no_results_and_no_entries() -> None:
    claim = ResourceClaimView.model_validate({"metadata": {"name": "c", "namespace": "ns", "uid": "u"}, "status": None})
    assert not claim.allocated
    assert claim.results == ()
    assert claim.status_devices == ()
    assert claim.spec.devices.requests == ()


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        pytest.param(("metadata", "name"), None, "metadata.name", id="no-name"),
        pytest.param(
            ("status", "devices"),
            [{"driver": DRIVER, "pool": "n1"}],
            "status.devices.0.device",
            id="entry-without-device",
        ),
        pytest.param(
            ("spec", "devices", "requests"),
            [{"name": "r", "exactly": {"count": "two"}}],
            "spec.devices.requests.0.exactly.count",
            id="count-not-a-number",
        ),
    ],
)
def test_a_claim_of_the_wrong_shape_is_refused_in_one_line_naming_the_field_and_skipped_in_a_list(
    path: tuple[str, ...], value: Any, field: str
) -> None:
    broken = stored_claim()
    target = broken
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    with pytest.raises(ValidationError) as raised:
        ResourceClaimView.model_validate(broken)
    line = describe_validation_error(raised.value)
    assert line.startswith(f"{field}: ")
    assert "\n" not in line
    fine = stored_claim()
    assert [c.metadata.name for c in parse_claims([broken, fine])] == ["c"], "only the readable claim is read"


def test_the_view_never_refuses_fields_it_does_not_read() -> None:
    claim = stored_claim()
    claim["spec"]["devices"]["requests"][0]["exactly"]["futureField"] = {"anything": [1, 2]}
    claim["status"]["allocation"]["nodeSelector"] = {"nodeSelectorTerms": []}
    claim["status"]["futureStatus"] = "x"
    assert ResourceClaimView.model_validate(json.loads(json.dumps(claim))).metadata.uid == "uid-c"


def test_the_cyclic_collector_pause_resumes_it_as_it_was() -> None:
    import gc

    from dra_driver.gcpause import garbage_collector_paused

    def read_and_fail() -> None:
        with garbage_collector_paused():
            assert not gc.isenabled(), "paused in the block"
            raise RuntimeError("a reader fails")

    assert gc.isenabled()
    with pytest.raises(RuntimeError):
        read_and_fail()
    assert gc.isenabled(), "resumed, even after a failure"
    gc.disable()
    try:
        with garbage_collector_paused():
            pass
        assert not gc.isenabled(), "someone else's pause is theirs to end"
    finally:
        gc.enable()
