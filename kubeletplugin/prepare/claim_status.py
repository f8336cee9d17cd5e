"""The plugin's part of a claim's status, computed: what ``status.devices[]`` must say for a checkpoint
record (pure, no I/O; :mod:`~kubeletplugin.prepare.reporter` reads the claim and the record and writes).

After prepare migdra records on the ResourceClaim what each device *is* (NVIDIA #1456): for every
device an entry ``{driver, pool, device, conditions: [Ready=True], data: {gpuUUID, profile, placement:
{start, size}, migUUID, gpuInstanceID, computeInstanceID, node}}``.  On unprepare our data keys and our
``Ready`` condition are removed again (an entry with nothing left goes).  A prepared record gives
identity + Ready for each of its devices; no record, or one still being prepared or released, gives
nothing of ours (:func:`compute_converged_devices`, the one answer both a write and the
reconciliation compare against).

Entries merge through :mod:`dra_driver.claimstatus` (the schema and who owns which key, shared with
the reservation controller and realize before bind): other drivers' entries, other pools' entries,
other writers' conditions and data keys are kept; an entry of another driver or pool is never touched.
A share's entry is keyed by its ``shareID`` too (docs/claim-status.md, "Shares").

Kept apart from the writer so the rules can be read, and tested, without a client, a thread or a
clock: every function takes ``now`` and returns new lists (docs/claim-status.md).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dra_driver import claimstatus
from dra_driver.claimstatus import PLUGIN, READY, SCHEMA_VERSION, EntryUpdate, entry_key, is_ours
from kubeletplugin.prepare.records import ClaimRecord, ClaimState, DeviceRecord


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
    """The ``Ready`` condition of one prepared device; pure.  Its message names what was realized (GI,
    CI, MIG UUID; a share's ID and size) so ``kubectl describe resourceclaim`` answers "which instance"
    without a look at the node; ``observedGeneration`` is the claim's generation as prepared, when known."""
    intent = device.intent
    if intent.admin_access:
        reason, message = "AdminAccessReady", "admin access to what exists; migdra created nothing for this claim"
    elif intent.is_mig:
        reason = "MigInstanceReady"
        share = (
            f"share {intent.share_id} ({intent.share_size} compute slices) of " if intent.share_id is not None else ""
        )
        message = (
            f"{share}{intent.profile_name} at placement {intent.placement}: GI {device.gpu_instance_id}, "
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
    share_id: str | None = None  # a share's entry is keyed by its shareID too


def build_status_updates(
    record: ClaimRecord, node_name: str, generation: int | None, now: str
) -> list[DeviceStatusUpdate]:
    """What each device entry of a prepared ``record`` must say (data + ``Ready``); pure."""
    return [
        DeviceStatusUpdate(
            device.intent.device_name,
            build_device_data(device, node_name),
            build_ready_condition(device, generation, now),
            device.intent.share_id,
        )
        for device in record.devices
    ]


def merge_plugin_part(
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
        [EntryUpdate(update.device_name, update.data, [update.condition], update.share_id) for update in updates],
    )


def clear_plugin_part(
    existing: Sequence[Mapping[str, Any]],
    driver_name: str,
    pool_name: str,
    device_names: Collection[str] | None = None,
    keys: Collection[tuple[str, str | None]] | None = None,
) -> list[dict[str, Any]]:
    """``status.devices`` without the plugin's data keys and ``Ready`` in our entries of these devices
    (``None``: every device of this driver in this pool; ``keys``: exactly these (device, shareID)
    entries); pure.  The keys shared with the reservation controller stay where its ``Reserved``
    condition stands (docs/claim-status.md)."""
    return claimstatus.compute_cleared_devices(existing, driver_name, pool_name, PLUGIN, device_names, keys)


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
        return clear_plugin_part(existing, driver_name, node_name)
    updates = build_status_updates(record, node_name, generation, now)
    merged = merge_plugin_part(existing, driver_name, node_name, updates)
    held = {(update.device_name, update.share_id) for update in updates}
    elsewhere = {
        entry_key(entry) for entry in merged if is_ours(entry, driver_name, node_name) and entry_key(entry) not in held
    }
    return clear_plugin_part(merged, driver_name, node_name, keys=elsewhere) if elsewhere else merged
