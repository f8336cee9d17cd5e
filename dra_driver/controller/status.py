"""What the controller's part of a claim's ``status.devices[]`` says, computed from its reservations.

Pure ``build_``/``compute_`` functions: the controller's loop reads, calls these, and applies the body
(:func:`dra_driver.claimstatus.build_apply_body`).  Who owns which field of an entry (the controller
its ``Reserved`` condition, and ``data`` only while no other manager holds it) is
:mod:`dra_driver.claimstatus`'s; this module only fills in the controller's part.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dra_driver import claimstatus
from dra_driver.claimstatus import (
    REASON_ALLOCATED,
    REASON_DEVICE_GONE,
    REASON_PLACEMENT_CONFLICT,
    RESERVED,
    SCHEMA_VERSION,
    DeviceEntry,
)
from dra_driver.controller.reservations import DeviceReservation, PublishedDevice, Verdict
from dra_driver.resourceclaim import AllocatedDeviceStatus, EntryKey, ResourceClaimView

_REASONS = {
    Verdict.RESERVED: REASON_ALLOCATED,
    Verdict.CONFLICT: REASON_PLACEMENT_CONFLICT,
    Verdict.GONE: REASON_DEVICE_GONE,
}


def build_reservation_data(device: PublishedDevice, share_slices: int | None = None) -> dict[str, Any]:
    """The reservation keys of ``data`` for one published device (docs/claim-status.md); a share
    (``share_slices``: the compute slices it consumes) names its part of the GPU instance instead of
    the GPU instance's multiprocessors, which are not the share's."""
    data: dict[str, Any] = {"schemaVersion": SCHEMA_VERSION, "node": device.node, "gpuUUID": device.gpu_uuid}
    if device.gpu_minor is not None:
        data["gpuMinor"] = device.gpu_minor
    if device.profile is not None and device.placement is not None:
        data["profile"] = device.profile
        data["placement"] = {"start": device.placement.start, "size": device.placement.size}
        if device.memory_bytes is not None:
            data["memory"] = claimstatus.format_memory(device.memory_bytes)
        if share_slices is not None:
            data["computeSlices"] = share_slices
        elif device.multiprocessors is not None:
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


def build_entry(
    driver: str,
    reservation: DeviceReservation,
    existing: AllocatedDeviceStatus | None,
    holdings: Mapping[str, Mapping[EntryKey, claimstatus.Holding]],
    manager: str,
    generation: int | None,
    now: str,
) -> DeviceEntry | None:
    """What the controller applies to one device's entry; None when there is nothing to say (a pool not
    completely listed).  ``data`` is left out while another manager (the node plugin, once the
    instance exists) holds it; a gone device keeps the data the controller last wrote: it says where
    the claim was."""
    if reservation.verdict is Verdict.UNKNOWN:
        return None
    key = (driver, reservation.pool, reservation.device_name, reservation.share_id)
    data: Mapping[str, Any] | None = None
    if not claimstatus.data_held_by_others(holdings, manager, key):
        if reservation.device is not None:
            share_slices = reservation.share_slices if reservation.share_id is not None else None
            data = build_reservation_data(reservation.device, share_slices)
        elif existing is not None and isinstance(existing.data, Mapping):
            data = dict(existing.data)
    condition = claimstatus.keep_transition_time(existing, build_reserved_condition(reservation, generation, now))
    return DeviceEntry(reservation.pool, reservation.device_name, (condition,), data, reservation.share_id)


@dataclass(frozen=True, slots=True)
class Transition:
    """A change of a device's ``Reserved`` condition worth an Event."""

    reservation: DeviceReservation
    event_type: str  # Normal or Warning
    reason: str
    message: str


def compute_claim_entries(
    claim: ResourceClaimView,
    driver: str,
    manager: str,
    reservations: Sequence[DeviceReservation],
    generation: int | None,
    now: str,
    holdings: Mapping[str, Mapping[EntryKey, claimstatus.Holding]] | None = None,
) -> tuple[list[DeviceEntry] | None, list[Transition]]:
    """The entries the controller applies to one claim (``reservations``: all of the claim's, for the
    devices it still holds) and the ``Reserved`` transitions that deserve an Event; pure.

    ``holdings``: :func:`dra_driver.claimstatus.compute_holdings` of ``claim``, when the caller has them.
    None when some device's pool is not completely listed: an apply without that entry would give up
    what the controller holds of it, so nothing of the claim is written until every pool is known.
    """
    if holdings is None:
        holdings = claimstatus.compute_holdings(claim)
    entries: list[DeviceEntry] = []
    transitions: list[Transition] = []
    for reservation in reservations:
        current = claim.status_entry(driver, reservation.pool, reservation.device_name, reservation.share_id)
        entry = build_entry(driver, reservation, current, holdings, manager, generation, now)
        if entry is None:
            return None, []
        entries.append(entry)
        before = current.condition(RESERVED) if current is not None else None
        condition = entry.conditions[0]
        if before is None or (before.status, before.reason) != (condition["status"], condition["reason"]):
            reserved = condition["status"] == "True"
            transitions.append(
                Transition(
                    reservation,
                    "Normal" if reserved else "Warning",
                    RESERVED if reserved else str(condition["reason"]),
                    str(condition["message"]),
                )
            )
    return entries, transitions
