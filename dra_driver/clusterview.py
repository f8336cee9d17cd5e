"""The cluster view: per node and GPU, which memory slices hold which claim, what is realized, what
still fits -- from the API objects alone, with the claims' status read as :mod:`dra_driver.claimstatus`
defines it (``Ready`` + ``migUUID`` from the plugin, ``Reserved`` from the controller).

The one way to compute it: ``migdra status`` prints it, the reservation controller exports it as
metrics (:mod:`dra_driver.controller.occupancy_metrics`), ``make demo`` shows it.  The per-GPU
arithmetic is :func:`dra_driver.devicemodel.occupancy.occupancy`'s (pure, beneath the status schema);
this module gives it the status reader.  Pure: never reads the API itself.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from dra_driver.claimstatus import READY, RESERVED, condition_of, find_entry
from dra_driver.devicemodel.occupancy import DeviceState, GpuOccupancy, occupancy


def read_device_state(claim: Mapping[str, Any], driver: str, pool: str, device: str) -> DeviceState:
    """What ``claim``'s ``status.devices[]`` entry of this device says: realized (``Ready`` True), its
    MIG identity, and a conflict when ``Reserved`` is False (``PlacementConflict``, ``DeviceGone``)."""
    entries = [e for e in (claim.get("status") or {}).get("devices") or [] if isinstance(e, Mapping)]
    index = find_entry(entries, driver, pool, device)
    if index is None:
        return DeviceState()
    entry = entries[index]
    raw_data = entry.get("data")
    data: Mapping[str, Any] = raw_data if isinstance(raw_data, Mapping) else {}
    ready, reserved = condition_of(entry, READY), condition_of(entry, RESERVED)
    conflict = None
    if reserved is not None and reserved.get("status") == "False":
        reason, message = reserved.get("reason") or "Unknown", reserved.get("message") or ""
        conflict = f"{reason}: {message}" if message else str(reason)
    mig_uuid, gi, ci = data.get("migUUID"), data.get("gpuInstanceID"), data.get("computeInstanceID")
    return DeviceState(
        realized=ready is not None and ready.get("status") == "True",
        mig_uuid=mig_uuid if isinstance(mig_uuid, str) and mig_uuid else None,
        gpu_instance_id=gi if isinstance(gi, int) else None,
        compute_instance_id=ci if isinstance(ci, int) else None,
        conflict=conflict,
    )


def compute_cluster_occupancy(
    slices: Iterable[Mapping[str, Any]], claims: Iterable[Mapping[str, Any]], driver: str
) -> list[GpuOccupancy]:
    """Every GPU of ``driver``: held slices, foreign slices, realized instances, what still fits; pure."""
    return occupancy(slices, claims, driver, read_device_state)
