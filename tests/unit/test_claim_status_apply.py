"""Claim status by server-side apply, pure (dra_driver/claimstatus.py, prepare/claim_status.py): what each
writer applies, what a claim's managedFields say each manager holds, and when a write is skipped."""

from __future__ import annotations

import json
from typing import Any

import pytest

from dra_driver import claimstatus
from dra_driver.claimstatus import DeviceEntry, build_apply_body, compute_holdings, is_applied, plugin_field_manager
from dra_driver.mig.catalog import Placement
from dra_driver.resourceclaim import ResourceClaimView
from kubeletplugin.prepare.claim_status import build_plugin_entries
from kubeletplugin.prepare.records import ClaimRecord, ClaimState, DeviceIntent, DeviceRecord

DRIVER = "gpu.migdra.io"
POOL = "node-a"
NOW = "2026-03-01T00:00:00Z"
OURS = "gpu-0-mig-1g10gb-19-0"
SHARE = "9a6f8a3e-6b0e-4ad4-9dbb-0d12c9f7cf2a"
PLUGIN = plugin_field_manager(DRIVER, POOL)


def ready(time: str, status: str = "True", message: str = "m") -> dict[str, Any]:
    return {
        "type": "Ready",
        "status": status,
        "reason": "MigInstanceReady",
        "message": message,
        "lastTransitionTime": time,
    }


def record(state: ClaimState, *device_names: str, share_id: str | None = None) -> ClaimRecord:
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
                multiprocessor_count=16,
                memory_bytes=9856 << 20,
                share_id=share_id,
                share_size=1 if share_id else None,
            ),
            gpu_instance_id=9 + index,
            compute_instance_id=0,
            mig_uuid=f"MIG-{index}",
        )
        for index, name in enumerate(device_names)
    )
    return ClaimRecord(claim_uid="uid-1", namespace="ns", name="claim", state=state, devices=devices)


def managed(manager: str, *keys: tuple[dict[str, str], list[str], bool]) -> dict[str, Any]:
    """One managedFields entry as kube-apiserver writes it: per entry key, its condition types and data."""
    devices: dict[str, Any] = {}
    for key, conditions, data in keys:
        fields: dict[str, Any] = {".": {}, "f:device": {}, "f:driver": {}, "f:pool": {}}
        if conditions:
            fields["f:conditions"] = {"k:" + json.dumps({"type": t}): {".": {}, "f:status": {}} for t in conditions}
        if data:
            fields["f:data"] = {}
        devices["k:" + json.dumps(key, sort_keys=True, separators=(",", ":"))] = fields
    return {
        "manager": manager,
        "operation": "Apply",
        "subresource": "status",
        "fieldsType": "FieldsV1",
        "fieldsV1": {"f:status": {"f:devices": devices}},
    }


KEY = {"device": OURS, "driver": DRIVER, "pool": POOL}


def claim(devices: list[dict[str, Any]], *fields: dict[str, Any]) -> ResourceClaimView:
    """A claim as the API server returns it, read as every writer reads it."""
    return ResourceClaimView.model_validate(
        {
            "metadata": {"name": "claim", "namespace": "ns", "uid": "uid-1", "managedFields": list(fields)},
            "status": {"devices": devices},
        }
    )


def test_a_prepared_record_gives_one_entry_per_device_with_the_reservation_and_identity_keys() -> None:
    (entry,) = build_plugin_entries(claim([]), DRIVER, POOL, record(ClaimState.PREPARE_COMPLETED, OURS), None, NOW)
    assert (entry.pool, entry.device, entry.share_id) == (POOL, OURS, None)
    assert entry.data == {
        "schemaVersion": "v1",
        "node": POOL,
        "gpuUUID": "GPU-0",
        "gpuMinor": 0,
        "profile": "1g.10gb",
        "placement": {"start": 0, "size": 1},
        "memory": "9856Mi",
        "multiprocessors": 16,
        "migUUID": "MIG-0",
        "gpuInstanceID": 9,
        "computeInstanceID": 0,
    }
    assert [c["type"] for c in entry.conditions] == ["Ready"]


def test_a_share_names_its_compute_slices_not_the_gpu_instances_multiprocessors() -> None:
    truth = record(ClaimState.PREPARE_COMPLETED, OURS, share_id=SHARE)
    (entry,) = build_plugin_entries(claim([]), DRIVER, POOL, truth, None, NOW)
    assert entry.share_id == SHARE
    assert entry.data is not None
    assert entry.data["computeSlices"] == 1
    assert "multiprocessors" not in entry.data


@pytest.mark.parametrize(
    "truth",
    [None, record(ClaimState.PREPARE_STARTED, OURS)],
    ids=["no record", "being prepared or released"],
)
def test_a_claim_not_prepared_here_gets_no_entry_which_gives_up_what_the_plugin_held(truth: ClaimRecord | None) -> None:
    assert build_plugin_entries(claim([]), DRIVER, POOL, truth, None, NOW) == []
    body = build_apply_body("ns", "claim", "uid-1", DRIVER, [])
    assert body["status"] == {}  # no devices at all: every entry this manager held is given up
    assert body["metadata"] == {"name": "claim", "namespace": "ns", "uid": "uid-1"}
    assert "allocation" not in json.dumps(body)


def test_ready_keeps_its_transition_time_while_its_status_does_not_change() -> None:
    existing = claim([{**KEY, "conditions": [ready("t0")]}])
    truth = record(ClaimState.PREPARE_COMPLETED, OURS)
    (entry,) = build_plugin_entries(existing, DRIVER, POOL, truth, None, NOW)
    assert entry.conditions[0]["lastTransitionTime"] == "t0"
    flipped = claim([{**KEY, "conditions": [ready("t0", status="False")]}])
    (entry,) = build_plugin_entries(flipped, DRIVER, POOL, truth, None, NOW)
    assert entry.conditions[0]["lastTransitionTime"] == NOW


def test_an_apply_body_holds_the_writers_entries_and_nothing_of_anyone_else() -> None:
    entries = [
        DeviceEntry(POOL, OURS, (ready(NOW),), {"migUUID": "MIG-0"}),
        DeviceEntry(POOL, "gpu-0-shared", (ready(NOW),), None, share_id=SHARE),
    ]
    body = build_apply_body("ns", "claim", "uid-1", DRIVER, entries)
    assert body["status"]["devices"] == [
        {**{"driver": DRIVER, "pool": POOL, "device": OURS}, "conditions": [ready(NOW)], "data": {"migUUID": "MIG-0"}},
        {"driver": DRIVER, "pool": POOL, "device": "gpu-0-shared", "shareID": SHARE, "conditions": [ready(NOW)]},
    ]
    assert set(body) == {"apiVersion", "kind", "metadata", "status"}


def test_holdings_are_read_per_manager_and_entry_from_managed_fields() -> None:
    share_key = {**KEY, "shareID": SHARE}
    holdings = compute_holdings(
        claim(
            [],
            managed("ctl", (KEY, ["Reserved"], False)),
            managed(PLUGIN, (KEY, ["Ready"], True), (share_key, ["Ready"], True)),
        )
    )
    ours = (DRIVER, POOL, OURS, None)
    assert holdings["ctl"][ours] == claimstatus.Holding(frozenset({"Reserved"}), data=False)
    assert holdings[PLUGIN][ours].data
    assert holdings[PLUGIN][(DRIVER, POOL, OURS, SHARE)].conditions == {"Ready"}
    assert claimstatus.data_held_by_others(holdings, "ctl", ours)
    assert not claimstatus.data_held_by_others(holdings, PLUGIN, ours)


def test_a_write_is_skipped_only_when_the_claim_says_exactly_what_the_writer_holds() -> None:
    data = {"migUUID": "MIG-0"}
    written = claim([{**KEY, "conditions": [ready("t0")], "data": data}], managed(PLUGIN, (KEY, ["Ready"], True)))
    same = DeviceEntry(POOL, OURS, (ready("t0"),), data)
    assert is_applied(written, PLUGIN, DRIVER, [same])
    assert not is_applied(written, PLUGIN, DRIVER, [DeviceEntry(POOL, OURS, (ready("t0", message="other"),), data)])
    assert not is_applied(written, PLUGIN, DRIVER, [DeviceEntry(POOL, OURS, (ready("t0"),), {"migUUID": "MIG-1"})])
    assert not is_applied(written, PLUGIN, DRIVER, [])  # it holds an entry it no longer wants
    assert is_applied(claim([{**KEY, "conditions": [ready("t0")]}]), PLUGIN, DRIVER, [])  # someone else's entry


def test_field_managers_fit_the_api_servers_limit() -> None:
    assert plugin_field_manager(DRIVER, "node-a") == "gpu.migdra.io/kubeletplugin/node-a"
    long_node = "n" * 253
    manager = plugin_field_manager(DRIVER, long_node)
    assert len(manager) == 128
    assert manager != plugin_field_manager(DRIVER, long_node[:-1] + "m")  # still one per node


def test_a_uid_mismatch_is_read_from_the_status_answer() -> None:
    mismatch = {"details": {"causes": [{"field": "metadata.uid", "reason": "FieldValueInvalid"}]}}
    assert claimstatus.is_uid_mismatch(mismatch)
    assert not claimstatus.is_uid_mismatch({"details": {"causes": [{"field": "status.allocation"}]}})
