"""Identity on the claim, computed: what migdra's ``status.devices[]`` entries and Events of a claim
say, as pure functions of the checkpoint record and the claim as read.

After prepare migdra records on the ResourceClaim what each device *is* (NVIDIA #1456): for every
device an entry ``{driver, pool, device, conditions: [Ready=True], data: {gpuUUID, profile,
placement: {start, size}, migUUID, gpuInstanceID, computeInstanceID, node}}``, and a core/v1 Event
(``involvedObject`` = the claim, so ``kubectl describe resourceclaim`` shows it) for prepare success,
prepare failure and unprepare.  On unprepare our data keys and our ``Ready`` condition are removed
again (an entry with nothing left goes).  A prepared record gives identity + Ready for each of its
devices; no record, or one still being prepared or released, gives nothing of ours.

Entries merge: other drivers' entries, other pools' entries, other writers' conditions and data keys
are kept.  Never touched: an entry of another driver or pool, or one with a ``shareID`` (migdra
writes none).

Everything here is a ``build_``/``compute_`` function, pure; the writes, the queue and the
reconciler are :mod:`kubeletplugin.prepare.reporter`'s.  This module never talks to the API server.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dra_driver import claimstatus
from dra_driver.claimstatus import PLUGIN, READY, SCHEMA_VERSION, EntryUpdate, is_ours
from kubeletplugin.draservice import ClaimRef
from kubeletplugin.prepare.records import ClaimRecord, ClaimState, DeviceRecord

EVENT_PREPARED = "MigDevicesPrepared"
EVENT_PREPARE_FAILED = "MigDevicesPrepareFailed"
EVENT_UNPREPARED = "MigDevicesUnprepared"
EVENT_UNPREPARE_FAILED = "MigDevicesUnprepareFailed"
_MAX_EVENT_MESSAGE = 1024


def rfc3339(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


def build_device_data(device: DeviceRecord, node_name: str) -> dict[str, Any]:
    """The ``data`` object of one prepared device; pure."""
    intent = device.intent
    data: dict[str, Any] = {"schemaVersion": SCHEMA_VERSION, "gpuUUID": intent.gpu_uuid, "node": node_name}
    if intent.is_mig:
        assert intent.placement is not None
        data["profile"] = intent.profile_name
        data["placement"] = {"start": intent.placement.start, "size": intent.placement.size}
    if device.mig_uuid is not None:
        data["migUUID"] = device.mig_uuid
        data["gpuInstanceID"] = device.gpu_instance_id
        data["computeInstanceID"] = device.compute_instance_id
    if intent.admin_access:
        data["adminAccess"] = True
    return data


def build_ready_condition(device: DeviceRecord, generation: int | None, now: str) -> dict[str, Any]:
    intent = device.intent
    if intent.admin_access:
        reason, message = "AdminAccessReady", "admin access to what exists; migdra created nothing for this claim"
    elif intent.is_mig:
        reason = "MigInstanceReady"
        message = (
            f"{intent.profile_name} at placement {intent.placement}: GI {device.gpu_instance_id}, "
            f"CI {device.compute_instance_id}, {device.mig_uuid}"
        )
    else:
        reason, message = "GpuReady", f"whole GPU {intent.gpu_uuid}"
    condition: dict[str, Any] = {
        "type": READY,
        "status": "True",
        "reason": reason,
        "message": message,
        "lastTransitionTime": now,
    }
    if generation is not None:
        condition["observedGeneration"] = generation
    return condition


@dataclass(frozen=True, slots=True)
class DeviceStatusUpdate:
    """What migdra wants one device entry to say."""

    device_name: str
    data: Mapping[str, Any]
    condition: Mapping[str, Any]


def build_status_updates(
    record: ClaimRecord, node_name: str, generation: int | None, now: str
) -> list[DeviceStatusUpdate]:
    return [
        DeviceStatusUpdate(
            device.intent.device_name,
            build_device_data(device, node_name),
            build_ready_condition(device, generation, now),
        )
        for device in record.devices
    ]


def compute_merged_devices(
    existing: Sequence[Mapping[str, Any]], driver_name: str, pool_name: str, updates: Sequence[DeviceStatusUpdate]
) -> list[dict[str, Any]]:
    """``status.devices`` with ``updates`` merged in; pure.

    Entries of other drivers / pools / devices are kept as they are.  In ours, only the plugin's data
    keys and ``Ready`` change (:data:`dra_driver.claimstatus.PLUGIN`); the controller's ``Reserved``
    and keys, and anyone else's, are kept; ``Ready`` keeps its ``lastTransitionTime`` when its status
    does not change.
    """
    return claimstatus.compute_merged_devices(
        existing,
        driver_name,
        pool_name,
        PLUGIN,
        [EntryUpdate(update.device_name, update.data, [update.condition]) for update in updates],
    )


def compute_cleared_devices(
    existing: Sequence[Mapping[str, Any]],
    driver_name: str,
    pool_name: str,
    device_names: Collection[str] | None = None,
) -> list[dict[str, Any]]:
    """``status.devices`` without the plugin's data keys and ``Ready`` in our entries of these devices
    (``None``: every device of this driver in this pool); pure.  The keys shared with the reservation
    controller stay where its ``Reserved`` condition stands (docs/claim-status.md)."""
    return claimstatus.compute_cleared_devices(existing, driver_name, pool_name, PLUGIN, device_names)


def is_prepared(record: ClaimRecord | None) -> bool:
    """Whether the record says the claim's devices exist and were handed out (``PrepareCompleted``).

    A ``PrepareStarted`` record is a prepare in progress or a release that failed half-way: its
    devices are not ready, so the claim must not say they are.
    """
    return record is not None and record.state is ClaimState.PREPARE_COMPLETED


def compute_converged_devices(
    existing: Sequence[Mapping[str, Any]],
    driver_name: str,
    node_name: str,
    record: ClaimRecord | None,
    generation: int | None,
    now: str,
) -> list[dict[str, Any]]:
    """``status.devices`` as the checkpoint ``record`` says it must be; pure.

    Prepared: identity + Ready in an entry per device of the record (merged), and our keys cleared in
    any other entry of this driver in this node's pool (a device the claim no longer holds here).
    Otherwise: our keys cleared in every entry of this driver in this node's pool.  The pool is the
    node's name.  Equal to ``existing`` (same ``lastTransitionTime`` too) when nothing needs a write.
    """
    if record is None or not is_prepared(record):
        return compute_cleared_devices(existing, driver_name, node_name)
    updates = build_status_updates(record, node_name, generation, now)
    merged = compute_merged_devices(existing, driver_name, node_name, updates)
    held = {update.device_name for update in updates}
    elsewhere = {
        str(entry.get("device"))
        for entry in merged
        if is_ours(entry, driver_name, node_name) and entry.get("device") not in held
    }
    return compute_cleared_devices(merged, driver_name, node_name, elsewhere) if elsewhere else merged


def build_event(
    ref: ClaimRef, reason: str, message: str, event_type: str, driver_name: str, node_name: str, now: dt.datetime
) -> dict[str, Any]:
    """A core/v1 Event about the claim, named the way client-go's recorder names them."""
    stamp = rfc3339(now)
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{ref.name}.{time.time_ns():x}", "namespace": ref.namespace},
        "involvedObject": {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "name": ref.name,
            "namespace": ref.namespace,
            "uid": ref.uid,
        },
        "reason": reason,
        "message": message[:_MAX_EVENT_MESSAGE],
        "type": event_type,
        "source": {"component": f"{driver_name}-kubeletplugin", "host": node_name},
        "reportingComponent": f"{driver_name}/kubeletplugin",
        "reportingInstance": node_name,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }
