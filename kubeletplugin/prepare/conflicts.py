"""Whether a device's placement is taken on its GPU, and by whose instance; pure.

The plan step of the kinds that create instances (:mod:`~kubeletplugin.prepare.kinds`) asks this
before anything is recorded or created, so a claim that cannot be prepared fails without touching the
GPU, naming the occupant: another claim's instance (named by its checkpoint record) or one migdra did
not create.  It never decides which device a claim gets and never suggests another placement.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from dra_driver.mig.catalog import Placement
from dra_driver.nvml.types import GpuInstanceInfo
from kubeletplugin.prepare.records import ClaimRecord, DeviceIntent, DeviceRecord


def find_overlapping_instance(instances: Sequence[GpuInstanceInfo], placement: Placement) -> GpuInstanceInfo | None:
    """The first GPU instance whose memory slices overlap ``placement``."""
    return next((gi for gi in instances if gi.placement.overlaps(placement)), None)


def records_gpu_instance(device: DeviceRecord, gi: GpuInstanceInfo) -> bool:
    """Whether ``device`` (of the same GPU) records ``gi``: by its ID, or as the GI being created as."""
    if device.owns_instance:
        return device.gpu_instance_id == gi.gpu_instance_id
    return (
        device.creation_in_flight
        and device.intent.placement == gi.placement
        and device.intent.profile_id == gi.profile_id
    )


def find_holder(
    gi: GpuInstanceInfo, gpu_uuid: str, records: Iterable[ClaimRecord], claim_uid: str
) -> ClaimRecord | None:
    """The first record of another claim that names ``gi`` (by its ID, or as its creation in flight)."""
    return next(
        (
            record
            for record in records
            if record.claim_uid != claim_uid
            and any(d.intent.gpu_uuid == gpu_uuid and records_gpu_instance(d, gi) for d in record.devices)
        ),
        None,
    )


@dataclass(frozen=True, slots=True)
class PlacementConflict:
    """A GPU instance standing where a device must be created, and the claim whose record names it."""

    occupant: GpuInstanceInfo
    holder: ClaimRecord | None  # None: no record names it -- an instance migdra did not create

    def describe(self, intent: DeviceIntent) -> str:
        """The per-claim error: device, placement, occupant, whose it is; never a fallback."""
        occupant = self.occupant
        who = (
            f"prepared for claim {self.holder.label} (UID {self.holder.claim_uid})"
            if self.holder is not None
            else "that migdra did not create"
        )
        return (
            f"device {intent.device_name}: placement {intent.placement} on GPU {intent.gpu_uuid} is occupied by "
            f"GPU instance {occupant.gpu_instance_id} (profile {occupant.profile_id} at {occupant.placement}) "
            f"{who}; "
            + (
                "a share joins only a GPU instance migdra created for shares of this device"
                if intent.is_share
                else "migdra never falls back to another placement"
            )
        )


def compute_placement_conflict(
    instances: Sequence[GpuInstanceInfo], intent: DeviceIntent, records: Iterable[ClaimRecord], claim_uid: str
) -> PlacementConflict | None:
    """Whether ``intent``'s placement is taken on its GPU, given the GPU's ``instances`` and the checkpoint's
    ``records`` (read *after* the instances, so a GI in ``instances`` that migdra created is named by
    one of them).  None for a free placement.  The occupant is attributed to the first record of another
    claim that names it, else to nobody (a foreign instance)."""
    assert intent.placement is not None
    occupant = find_overlapping_instance(instances, intent.placement)
    if occupant is None:
        return None
    return PlacementConflict(occupant, find_holder(occupant, intent.gpu_uuid, tuple(records), claim_uid))
