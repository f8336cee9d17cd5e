"""What the controller's part of a claim's ``status.devices[]`` says, computed from its reservations.

Pure ``build_``/``compute_`` functions: the controller's loop reads, calls these, and writes.  The
ownership rules (which keys and conditions are the controller's, which the plugin's) are
:mod:`dra_driver.claimstatus`'s; this module only fills in the controller's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dra_driver import claimstatus
from dra_driver.claimstatus import (
    CONTROLLER,
    REASON_ALLOCATED,
    REASON_DEVICE_GONE,
    REASON_PLACEMENT_CONFLICT,
    RESERVED,
    SCHEMA_VERSION,
    EntryUpdate,
)
from dra_driver.controller.reservations import DeviceReservation, PublishedDevice, Verdict

_REASONS = {
    Verdict.RESERVED: REASON_ALLOCATED,
    Verdict.CONFLICT: REASON_PLACEMENT_CONFLICT,
    Verdict.GONE: REASON_DEVICE_GONE,
}


def _memory(bytes_: int) -> str:
    mib, rest = divmod(bytes_, 1 << 20)
    return f"{mib}Mi" if rest == 0 else str(bytes_)


def build_reservation_data(device: PublishedDevice) -> dict[str, Any]:
    """The reservation keys of ``data`` for one published device (docs/claim-status.md)."""
    data: dict[str, Any] = {"schemaVersion": SCHEMA_VERSION, "node": device.node, "gpuUUID": device.gpu_uuid}
    if device.gpu_minor is not None:
        data["gpuMinor"] = device.gpu_minor
    if device.profile is not None and device.placement is not None:
        data["profile"] = device.profile
        data["placement"] = {"start": device.placement.start, "size": device.placement.size}
    if device.memory_bytes is not None:
        data["memory"] = _memory(device.memory_bytes)
    if device.multiprocessors is not None:
        data["multiprocessors"] = device.multiprocessors
    return data


def describe_device(device: PublishedDevice) -> str:
    """``3g.40gb at memory slices 4-7 of GPU-... on node-1`` (or ``whole GPU GPU-... on node-1``)."""
    if device.profile is None or device.placement is None:
        return f"whole GPU {device.gpu_uuid} on {device.node}"
    return f"{device.profile} at {device.placement.describe()} of {device.gpu_uuid} on {device.node}"


def build_reserved_message(reservation: DeviceReservation) -> str:
    """The ``Reserved`` condition's message, also the Event's."""
    device = reservation.device
    if reservation.verdict is Verdict.GONE:
        return (
            f"device {reservation.device_name} of pool {reservation.pool} is no longer published "
            f"(the GPU, its MIG mode or the node changed); the claim holds a device that does not exist"
        )
    assert device is not None
    if reservation.verdict is Verdict.CONFLICT:
        others = [label for label in reservation.conflicts_with if label != reservation.claim_label]
        overlap = (
            f"{describe_device(device)} overlaps what {', '.join(others)} holds on the same GPU; "
            "at most one of them can be prepared (nothing was deallocated)"
        )
        if len(others) == len(reservation.conflicts_with):
            return overlap
        twice = (
            f"this claim holds two shares of device {reservation.device_name} ({describe_device(device)}); "
            "migdra prepares one share of a device per claim, so the node refuses the claim: ask for each "
            "share in a claim of its own (nothing was deallocated)"
        )
        return f"{twice}; also, {overlap}" if others else twice
    return f"Reserved {describe_device(device)}"


def build_reserved_condition(reservation: DeviceReservation, generation: int | None, now: str) -> dict[str, Any]:
    condition: dict[str, Any] = {
        "type": RESERVED,
        "status": "True" if reservation.verdict is Verdict.RESERVED else "False",
        "reason": _REASONS[reservation.verdict],
        "message": build_reserved_message(reservation)[:1024],
        "lastTransitionTime": now,
    }
    if generation is not None:
        condition["observedGeneration"] = generation
    return condition


def build_entry_update(reservation: DeviceReservation, generation: int | None, now: str) -> EntryUpdate | None:
    """The controller's update of one device's entry; None when there is nothing to say (a pool not
    completely listed).  A gone device keeps the data last written: it says where the claim was."""
    if reservation.verdict is Verdict.UNKNOWN:
        return None
    data = build_reservation_data(reservation.device) if reservation.device is not None else {}
    if reservation.share_id is not None and reservation.share_slices is not None:
        data["computeSlices"] = reservation.share_slices  # the share's part of the shared GPU instance
    return EntryUpdate(
        reservation.device_name,
        data,
        [build_reserved_condition(reservation, generation, now)],
        share_id=reservation.share_id,
    )


@dataclass(frozen=True, slots=True)
class Transition:
    """A change of a device's ``Reserved`` condition worth an Event."""

    reservation: DeviceReservation
    event_type: str  # Normal or Warning
    reason: str
    message: str


def compute_claim_devices(
    existing: Sequence[Mapping[str, Any]],
    driver: str,
    reservations: Sequence[DeviceReservation],
    generation: int | None,
    now: str,
) -> tuple[list[dict[str, Any]], list[Transition]]:
    """``status.devices`` with the controller's part as ``reservations`` say (all of one claim), and
    the ``Reserved`` transitions that deserve an Event; pure.  Unchanged input gives equal output."""
    devices = [dict(entry) for entry in existing]
    transitions: list[Transition] = []
    for reservation in reservations:
        update = build_entry_update(reservation, generation, now)
        if update is None:
            continue
        index = claimstatus.find_entry(devices, driver, reservation.pool, reservation.device_name, reservation.share_id)
        before = claimstatus.condition_of(devices[index], RESERVED) if index is not None else None
        devices = claimstatus.compute_merged_devices(devices, driver, reservation.pool, CONTROLLER, [update])
        condition = update.conditions[0]
        if before is None or (before.get("status"), before.get("reason")) != (condition["status"], condition["reason"]):
            reserved = condition["status"] == "True"
            transitions.append(
                Transition(
                    reservation,
                    "Normal" if reserved else "Warning",
                    RESERVED if reserved else str(condition["reason"]),
                    str(condition["message"]),
                )
            )
    return devices, transitions
