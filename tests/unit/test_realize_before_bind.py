"""Realize before bind, the pure parts: which claims need realizing, which records realized ahead are
released, and what the realizer writes into status.devices (and what it leaves to the other writers)."""

from __future__ import annotations

from typing import Any

import pytest

from dra_driver import claimstatus
from dra_driver.kubelet.calls import ClaimRef
from dra_driver.resourceclaim import ResourceClaimView
from kubeletplugin.prepare.records import ClaimRecord, ClaimState, DeviceIntent, DeviceRecord
from kubeletplugin.realize_before_bind import (
    build_binding_condition,
    compute_binding_devices,
    compute_claims_to_realize,
    compute_records_to_release,
)

DRIVER = "gpu.migdra.io"
NODE = "node-a"
REALIZED = f"{DRIVER}/realized"
FAILED = f"{DRIVER}/realization-failed"
DEVICE = "gpu-0-mig-1g10gb-19-0"
OTHER = "gpu-0-mig-1g10gb-19-1"
NOW = "2026-01-01T00:00:00Z"


def result(device: str = DEVICE, *, pool: str = NODE, driver: str = DRIVER, binding: bool = True) -> dict[str, Any]:
    entry: dict[str, Any] = {"request": "gpu", "driver": driver, "pool": pool, "device": device}
    if binding:
        entry["bindingConditions"] = [f"{driver}/realized"]
        entry["bindingFailureConditions"] = [f"{driver}/realization-failed"]
    return entry


def condition(condition_type: str, status: str = "True") -> dict[str, Any]:
    return {"type": condition_type, "status": status, "reason": "R", "message": "", "lastTransitionTime": NOW}


def claim(
    name: str = "c",
    uid: str = "uid-c",
    results: list[dict[str, Any]] | None = None,
    devices: list[dict[str, Any]] | None = None,
) -> ResourceClaimView:
    status: dict[str, Any] = {}
    if results is not None:
        status["allocation"] = {"devices": {"results": results}}
    if devices is not None:
        status["devices"] = devices
    return ResourceClaimView.model_validate(
        {"metadata": {"namespace": "default", "name": name, "uid": uid}, "status": status}
    )


def entry(device: str, *conditions: dict[str, Any]) -> dict[str, Any]:
    return {"driver": DRIVER, "pool": NODE, "device": device, "conditions": list(conditions)}


def record(uid: str = "uid-c", *devices: str, ahead: bool = True) -> ClaimRecord:
    return ClaimRecord(
        claim_uid=uid,
        namespace="default",
        name="c",
        state=ClaimState.PREPARE_COMPLETED,
        devices=tuple(
            DeviceRecord(intent=DeviceIntent(device_name=d, request_names=("gpu",), gpu_uuid="GPU-1", gpu_minor=0))
            for d in devices or (DEVICE,)
        ),
        realized_ahead=ahead,
    )


@pytest.mark.parametrize(
    ("the_claim", "wanted"),
    [
        (claim(results=[result()]), True),
        (claim(results=[result(binding=False)]), False),
        (claim(results=None), False),
        (claim(results=[result(pool="node-b")]), False),
        (claim(results=[result(driver="net.example.com")]), False),
        (claim(results=[result()], devices=[entry(DEVICE, condition(REALIZED))]), False),
        (claim(results=[result()], devices=[entry(DEVICE, condition(FAILED))]), False),
        (claim(results=[result()], devices=[entry(DEVICE, condition(REALIZED, "False"))]), True),
        (claim(results=[result()], devices=[entry(DEVICE, condition("Ready"))]), True),
        (claim(results=[result(), result(OTHER)], devices=[entry(DEVICE, condition(REALIZED))]), True),
    ],
    ids=[
        "allocated-here-waiting",
        "no-binding-conditions",
        "not-allocated",
        "another-node's-pool",
        "another-driver",
        "already-realized",
        "already-failed",
        "realized-false",
        "only-ready",
        "one-of-two-devices-realized",
    ],
)
def test_which_claims_need_realizing(the_claim: ResourceClaimView, wanted: bool) -> None:
    refs = compute_claims_to_realize([the_claim], DRIVER, NODE)
    assert refs == ([ClaimRef("default", "c", "uid-c")] if wanted else [])


def test_binding_devices_are_ours_with_the_realized_condition_once_each_in_allocation_order() -> None:
    the_claim = claim(results=[result(OTHER), result(DEVICE), result(OTHER), result("eth0", driver="net.example.com")])
    assert compute_binding_devices(the_claim, DRIVER, NODE) == ((OTHER, None), (DEVICE, None))


@pytest.mark.parametrize(
    ("claims", "the_record", "released"),
    [
        ([claim(results=[result()])], record(), False),
        ([], record(), True),
        ([claim(results=None)], record(), True),
        ([claim(uid="uid-new", results=[result()])], record(), True),
        ([claim(results=[result(OTHER)])], record(), True),
        ([claim(results=[result(), result(OTHER)])], record(), True),
        ([claim(results=[result(pool="node-b")])], record(), True),
        ([], record(ahead=False), False),
        ([claim(results=None)], record(ahead=False), False),
    ],
    ids=[
        "still-allocated",
        "claim-deleted",
        "deallocated",
        "re-created-with-another-uid",
        "re-allocated-to-another-device",
        "allocation-grew",
        "allocated-to-another-node",
        "claimed-by-kubelet-claim-deleted",
        "claimed-by-kubelet-deallocated",
    ],
)
def test_which_records_realized_ahead_are_released(
    claims: list[ResourceClaimView], the_record: ClaimRecord, released: bool
) -> None:
    assert compute_records_to_release([the_record], claims, DRIVER, NODE) == ([the_record] if released else [])


def test_the_realizer_applies_its_condition_alone_as_a_field_manager_of_its_own() -> None:
    """Its body holds the binding condition and nothing else (no data, no Ready), and its manager is
    neither the plugin's nor the controller's: the plugin giving up its part leaves the condition."""
    realized = build_binding_condition(DRIVER, True, "realized", 3, NOW)
    body = claimstatus.build_apply_body("ns", "c", "uid", DRIVER, [claimstatus.DeviceEntry(NODE, DEVICE, (realized,))])
    assert body["status"]["devices"] == [{"driver": DRIVER, "pool": NODE, "device": DEVICE, "conditions": [realized]}]
    assert realized["type"] == REALIZED
    assert realized["observedGeneration"] == 3
    managers = {
        claimstatus.realizer_field_manager(DRIVER, NODE),
        claimstatus.plugin_field_manager(DRIVER, NODE),
        claimstatus.controller_field_manager(DRIVER),
    }
    assert len(managers) == 3


def test_a_failure_condition_carries_the_error_cut_to_a_readable_length() -> None:
    failed = build_binding_condition(DRIVER, False, "x" * 5000, None, NOW)
    assert failed["type"] == FAILED
    assert failed["status"] == "True"
    assert failed["reason"] == "RealizationFailed"
    assert len(failed["message"]) == 1024
    assert "observedGeneration" not in failed


def test_a_checkpoint_record_without_the_mark_reads_as_claimed_by_kubelet() -> None:
    data = record().model_dump(mode="json", by_alias=True)
    assert data["realizedAhead"] is True
    del data["realizedAhead"]  # a record written by a migdra without realize before bind
    assert ClaimRecord.model_validate(data).realized_ahead is False


SHARED = "gpu-0-shared-4g40gb-5-0"
SHARE = "11111111-1111-4111-8111-111111111111"


def test_a_share_is_keyed_by_its_share_id_and_settled_only_by_its_own_entry() -> None:
    """A share's status entry carries its shareID (the API server keys entries so): the realizer looks
    for that entry, and an entry of the same device without the shareID does not settle the share."""
    shared = dict(result(SHARED), shareID=SHARE, consumedCapacity={"computeSlices": "1"})
    unsettled = claim(results=[shared], devices=[entry(SHARED, condition(REALIZED))])
    assert compute_binding_devices(unsettled, DRIVER, NODE) == ((SHARED, SHARE),)
    assert compute_claims_to_realize([unsettled], DRIVER, NODE) == [ClaimRef("default", "c", "uid-c")]
    settled_entry = dict(entry(SHARED, condition(REALIZED)), shareID=SHARE)
    settled = claim(results=[shared], devices=[settled_entry])
    assert compute_claims_to_realize([settled], DRIVER, NODE) == []
