"""The plugin's part of a claim's status, computed: the ``status.devices[]`` entries a checkpoint record
asks for (pure, no I/O; :mod:`~kubeletplugin.prepare.reporter` reads the claim and the record and
applies).

After prepare migdra records on the ResourceClaim what each device *is* (NVIDIA #1456): for every
device an entry ``{driver, pool, device, conditions: [Ready=True], data: {schemaVersion, node,
gpuUUID, gpuMinor, profile, placement, memory, multiprocessors or computeSlices, migUUID,
gpuInstanceID, computeInstanceID}}``, applied as the node's plugin field manager with force: the
plugin takes ``data`` over from the reservation controller (:mod:`dra_driver.claimstatus` says why)
and writes the reservation keys itself, so the entry says the same before and after.  On unprepare the
plugin applies no entry at all, which gives up its ``Ready`` and ``data`` (the controller writes its
reservation keys again).  A prepared record gives an entry per device; no record, or one still being
prepared or released, gives none (:func:`build_plugin_entries`, the one answer both a write and the
reconciliation compare against).  A share's entry is keyed by its ``shareID`` too
(docs/claim-status.md, "Shares").

Kept apart from the writer so the rules can be read, and tested, without a client, a thread or a
clock: every function takes ``now`` and returns new values (docs/claim-status.md).
"""

from __future__ import annotations

from typing import Any

from dra_driver import claimstatus
from dra_driver.claimstatus import READY, SCHEMA_VERSION, DeviceEntry
from dra_driver.resourceclaim import ResourceClaimView
from kubeletplugin.prepare.records import ClaimRecord, ClaimState, DeviceRecord


def build_device_data(device: DeviceRecord, node_name: str) -> dict[str, Any]:
    """The ``data`` object of one prepared device; pure.  The reservation keys are the controller's
    (:func:`dra_driver.controller.status.build_reservation_data`), from the record instead of the slice."""
    intent = device.intent
    data: dict[str, Any] = {
        "schemaVersion": SCHEMA_VERSION,
        "node": node_name,
        "gpuUUID": intent.gpu_uuid,
        "gpuMinor": intent.gpu_minor,
    }
    if intent.is_mig:
        assert intent.placement is not None
        data["profile"] = intent.profile_name
        data["placement"] = {"start": intent.placement.start, "size": intent.placement.size}
        if intent.memory_bytes is not None:
            data["memory"] = claimstatus.format_memory(intent.memory_bytes)
        if intent.share_id is not None and intent.share_size is not None:
            data["computeSlices"] = intent.share_size
        elif intent.multiprocessor_count is not None:
            data["multiprocessors"] = intent.multiprocessor_count
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


def is_prepared(record: ClaimRecord | None) -> bool:
    """Whether the record says the claim's devices exist and were handed out (``PrepareCompleted``).

    A ``PrepareStarted`` record is a prepare in progress or a release that failed half-way: its
    devices are not ready, so the claim must not say they are.
    """
    return record is not None and record.state is ClaimState.PREPARE_COMPLETED


def build_plugin_entries(
    claim: ResourceClaimView,
    driver_name: str,
    node_name: str,
    record: ClaimRecord | None,
    generation: int | None,
    now: str,
) -> list[DeviceEntry]:
    """The entries the node's plugin applies to ``claim`` as its checkpoint ``record`` says; pure.

    Prepared: ``data`` + ``Ready`` for each device of the record, in this node's pool (the pool is the
    node's name).  Otherwise none, which gives up whatever the plugin held of the claim.  ``Ready``
    keeps its ``lastTransitionTime`` while its status does not change.
    """
    if record is None or not is_prepared(record):
        return []
    entries: list[DeviceEntry] = []
    for device in record.devices:
        intent = device.intent
        current = claim.status_entry(driver_name, node_name, intent.device_name, intent.share_id)
        condition = claimstatus.keep_transition_time(current, build_ready_condition(device, generation, now))
        entries.append(
            DeviceEntry(
                node_name, intent.device_name, (condition,), build_device_data(device, node_name), intent.share_id
            )
        )
    return entries
