"""Claim status merging (prepare/claim_status.py, pure): our entries set and cleared, everyone else's kept."""

from __future__ import annotations

from typing import Any

import pytest

from dra_driver.mig.catalog import Placement
from kubeletplugin.prepare.claim_status import (
    DeviceStatusUpdate,
    clear_plugin_part,
    compute_converged_devices,
    merge_plugin_part,
)
from kubeletplugin.prepare.records import ClaimRecord, ClaimState, DeviceIntent, DeviceRecord

DRIVER = "gpu.migdra.io"
POOL = "node-a"


def ready(time: str, status: str = "True") -> dict[str, Any]:
    return {"type": "Ready", "status": status, "reason": "MigInstanceReady", "message": "m", "lastTransitionTime": time}


OTHER_DRIVER = {"driver": "net.example.com", "pool": POOL, "device": "eth0", "data": {"mac": "x"}}
UPDATE = DeviceStatusUpdate("gpu-0-mig-1g10gb-19-0", {"migUUID": "MIG-a", "node": POOL}, ready("2026-01-02T00:00:00Z"))


def test_merge_adds_our_entry_and_keeps_other_drivers() -> None:
    merged = merge_plugin_part([OTHER_DRIVER], DRIVER, POOL, [UPDATE])
    assert merged == [
        OTHER_DRIVER,
        {
            "driver": DRIVER,
            "pool": POOL,
            "device": "gpu-0-mig-1g10gb-19-0",
            "conditions": [ready("2026-01-02T00:00:00Z")],
            "data": {"migUUID": "MIG-a", "node": POOL},
        },
    ]


def test_merge_keeps_foreign_conditions_data_keys_and_unchanged_transition_time() -> None:
    existing = {
        "driver": DRIVER,
        "pool": POOL,
        "device": "gpu-0-mig-1g10gb-19-0",
        "conditions": [{"type": "Healthy", "status": "True", "reason": "X", "lastTransitionTime": "t0"}, ready("t1")],
        "data": {"team": "ml", "migUUID": "MIG-old"},
    }
    (merged,) = merge_plugin_part([existing], DRIVER, POOL, [UPDATE])
    assert merged["data"] == {"team": "ml", "migUUID": "MIG-a", "node": POOL}
    assert [c["type"] for c in merged["conditions"]] == ["Healthy", "Ready"]
    assert merged["conditions"][1]["lastTransitionTime"] == "t1"  # Ready was already True


def test_clear_removes_only_our_keys_and_condition() -> None:
    ours = merge_plugin_part([], DRIVER, POOL, [UPDATE])[0]
    shared = {**ours, "data": {**ours["data"], "team": "ml"}}
    assert clear_plugin_part([OTHER_DRIVER, ours], DRIVER, POOL, [UPDATE.device_name]) == [OTHER_DRIVER]
    cleared = clear_plugin_part([shared], DRIVER, POOL, [UPDATE.device_name])
    assert cleared == [{"driver": DRIVER, "pool": POOL, "device": UPDATE.device_name, "data": {"team": "ml"}}]


# -- converging to the checkpoint -------------------------------------------------------------------

NOW = "2026-03-01T00:00:00Z"
OURS = "gpu-0-mig-1g10gb-19-0"


def record(state: ClaimState, *device_names: str) -> ClaimRecord:
    devices = tuple(
        DeviceRecord(
            intent=DeviceIntent(
                device_name=name,
                request_names=("gpu",),
                gpu_uuid="GPU-0",
                gpu_minor=0,
                profile_id=19,
                profile_name="1g.10gb",
                placement=Placement(start=index, size=1),
            ),
            gpu_instance_id=9 + index,
            compute_instance_id=0,
            mig_uuid=f"MIG-{index}",
        )
        for index, name in enumerate(device_names)
    )
    return ClaimRecord(claim_uid="uid-1", namespace="ns", name="claim", state=state, devices=devices)


def our_entry(device: str = OURS, pool: str = POOL, **extra: Any) -> dict[str, Any]:
    return {
        "driver": DRIVER,
        "pool": pool,
        "device": device,
        "conditions": [ready("t0")],
        "data": {"migUUID": "MIG-gone", "gpuInstanceID": 3, "node": pool},
        **extra,
    }


UNTOUCHABLE = [
    OTHER_DRIVER,
    our_entry(pool="node-b"),  # this driver, another node's pool: that node's plugin writes it
]
SHARE = "9a6f8a3e-6b0e-4ad4-9dbb-0d12c9f7cf2a"


@pytest.mark.parametrize(
    "truth",
    [None, record(ClaimState.PREPARE_STARTED, OURS)],
    ids=["no record", "being prepared or released"],
)
def test_converge_clears_every_entry_of_ours_when_the_claim_is_not_prepared_here(truth: ClaimRecord | None) -> None:
    foreign_keys = our_entry(data={"migUUID": "MIG-gone", "reservedBy": "controller"})
    foreign_keys["conditions"] = [ready("t0"), {"type": "Healthy", "status": "True"}]
    existing = [*UNTOUCHABLE, foreign_keys, our_entry("gpu-0-mig-1g10gb-19-1"), our_entry(shareID=SHARE)]
    converged = compute_converged_devices(existing, DRIVER, POOL, truth, 1, NOW)
    assert converged == [
        *UNTOUCHABLE,
        {
            "driver": DRIVER,
            "pool": POOL,
            "device": OURS,
            "conditions": [{"type": "Healthy", "status": "True"}],
            "data": {"reservedBy": "controller"},
        },
    ]


def test_converge_writes_identity_and_ready_for_a_prepared_claim_and_clears_devices_it_no_longer_holds() -> None:
    truth = record(ClaimState.PREPARE_COMPLETED, OURS)
    existing = [*UNTOUCHABLE, our_entry("gpu-0-mig-1g10gb-19-1")]
    converged = compute_converged_devices(existing, DRIVER, POOL, truth, 1, NOW)
    assert converged[: len(UNTOUCHABLE)] == UNTOUCHABLE
    (written,) = converged[len(UNTOUCHABLE) :]
    assert (written["device"], written["data"]["migUUID"], written["data"]["gpuInstanceID"]) == (OURS, "MIG-0", 9)
    assert [(c["type"], c["status"], c["observedGeneration"]) for c in written["conditions"]] == [("Ready", "True", 1)]


def test_a_share_has_an_entry_keyed_by_its_share_id_and_other_keys_of_ours_are_cleared() -> None:
    """status.devices entries are keyed driver/pool/device/shareID: a share's entry carries its shareID,
    and an entry of the same device without it (or with another share's) is not the share's."""
    shared = "gpu-0-shared-4g40gb-5-0"
    base = record(ClaimState.PREPARE_COMPLETED, shared)
    device = base.devices[0]
    truth = base.model_copy(
        update={
            "devices": (device.model_copy(update={"intent": device.intent.model_copy(update={"share_id": SHARE})}),)
        }
    )
    reserved = {**our_entry(shared, data={"reservedBy": "controller"}), "conditions": [{"type": "Reserved"}]}
    existing = [*UNTOUCHABLE, our_entry(shared), reserved | {"shareID": "00000000-0000-0000-0000-000000000001"}]
    converged = compute_converged_devices(existing, DRIVER, POOL, truth, 1, NOW)
    assert converged[: len(UNTOUCHABLE)] == UNTOUCHABLE
    rest = converged[len(UNTOUCHABLE) :]
    # the other share's entry keeps what is not ours; the entry without shareID (ours only) goes
    assert rest[0] == reserved | {"shareID": "00000000-0000-0000-0000-000000000001"}
    (written,) = rest[1:]
    assert (written["device"], written["shareID"], written["data"]["migUUID"]) == (shared, SHARE, "MIG-0")
    assert compute_converged_devices(converged, DRIVER, POOL, truth, 1, NOW) == converged  # a fixed point


def test_converge_is_a_fixed_point_so_an_agreeing_claim_is_never_written() -> None:
    truth = record(ClaimState.PREPARE_COMPLETED, OURS)
    once = compute_converged_devices([OTHER_DRIVER], DRIVER, POOL, truth, 1, NOW)
    assert compute_converged_devices(once, DRIVER, POOL, truth, 1, "2027-01-01T00:00:00Z") == once
    cleared = compute_converged_devices(once, DRIVER, POOL, None, 1, NOW)
    assert compute_converged_devices(cleared, DRIVER, POOL, None, 1, NOW) == cleared == [OTHER_DRIVER]
