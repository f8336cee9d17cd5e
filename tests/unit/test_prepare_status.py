"""Claim status merging (pure): our entries set and cleared, everyone else's kept."""

from __future__ import annotations

from typing import Any

from kubeletplugin.prepare.status import DeviceStatusUpdate, compute_cleared_devices, compute_merged_devices

DRIVER = "gpu.migdra.io"
POOL = "node-a"


def ready(time: str, status: str = "True") -> dict[str, Any]:
    return {"type": "Ready", "status": status, "reason": "MigInstanceReady", "message": "m", "lastTransitionTime": time}


OTHER_DRIVER = {"driver": "net.example.com", "pool": POOL, "device": "eth0", "data": {"mac": "x"}}
UPDATE = DeviceStatusUpdate("gpu-0-mig-1g10gb-19-0", {"migUUID": "MIG-a", "node": POOL}, ready("2026-01-02T00:00:00Z"))


def test_merge_adds_our_entry_and_keeps_other_drivers() -> None:
    merged = compute_merged_devices([OTHER_DRIVER], DRIVER, POOL, [UPDATE])
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
    (merged,) = compute_merged_devices([existing], DRIVER, POOL, [UPDATE])
    assert merged["data"] == {"team": "ml", "migUUID": "MIG-a", "node": POOL}
    assert [c["type"] for c in merged["conditions"]] == ["Healthy", "Ready"]
    assert merged["conditions"][1]["lastTransitionTime"] == "t1"  # Ready was already True


def test_clear_removes_only_our_keys_and_condition() -> None:
    ours = compute_merged_devices([], DRIVER, POOL, [UPDATE])[0]
    shared = {**ours, "data": {**ours["data"], "team": "ml"}}
    assert compute_cleared_devices([OTHER_DRIVER, ours], DRIVER, POOL, [UPDATE.device_name]) == [OTHER_DRIVER]
    cleared = compute_cleared_devices([shared], DRIVER, POOL, [UPDATE.device_name])
    assert cleared == [{"driver": DRIVER, "pool": POOL, "device": UPDATE.device_name, "data": {"team": "ml"}}]
