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

from dra_driver.claimstatus import READY, RESERVED
from dra_driver.devicemodel.occupancy import DeviceState, GpuOccupancy, occupancy
from dra_driver.resourceclaim import ResourceClaimView


def read_device_state(
    claim: ResourceClaimView, driver: str, pool: str, device: str, share_id: str | None = None
) -> DeviceState:
    """What ``claim``'s ``status.devices[]`` entry of this device (and share) says: realized (``Ready``
    True), its MIG identity, and a conflict when ``Reserved`` is False (``PlacementConflict``,
    ``DeviceGone``)."""
    entry = claim.status_entry(driver, pool, device, share_id)
    if entry is None:
        return DeviceState()
    data = entry.data_fields
    ready, reserved = entry.condition(READY), entry.condition(RESERVED)
    conflict = None
    if reserved is not None and reserved.status == "False":
        reason = reserved.reason or "Unknown"
        conflict = f"{reason}: {reserved.message}" if reserved.message else reason
    mig_uuid, gi, ci = data.get("migUUID"), data.get("gpuInstanceID"), data.get("computeInstanceID")
    return DeviceState(
        realized=ready is not None and ready.status == "True",
        mig_uuid=mig_uuid if isinstance(mig_uuid, str) and mig_uuid else None,
        gpu_instance_id=gi if isinstance(gi, int) else None,
        compute_instance_id=ci if isinstance(ci, int) else None,
        conflict=conflict,
    )


def compute_cluster_occupancy(
    slices: Iterable[Mapping[str, Any]], claims: Iterable[ResourceClaimView], driver: str
) -> list[GpuOccupancy]:
    """Every GPU of ``driver``: held slices, foreign slices, realized instances, what still fits; pure."""
    return occupancy(slices, claims, driver, read_device_state)
