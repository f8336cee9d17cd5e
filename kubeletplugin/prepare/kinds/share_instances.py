"""A shared GPU instance on NVML: which GI a share joins, its compute instance created at exactly the
chosen placement, and the release of a share -- its own CI, then the GI only after the last share.

The NVML steps of :mod:`~kubeletplugin.prepare.kinds.shared_gpu_instance`, which records each in the
checkpoint between them; nothing here writes the checkpoint or takes a lock (the caller holds the
GPU's).  Every GI a share record names was created by migdra for shares of that device: a share
records only the GI it created or the GI another share's record named, so a share never joins -- and
the last share may destroy -- only such a GI.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

from dra_driver.mig.catalog import Placement
from dra_driver.mig.compute_placement import describe_compute_instances
from dra_driver.nvml.backend import Nvml
from dra_driver.nvml.errors import NvmlComputeInstanceLeft, NvmlError, NvmlInsufficientResources
from dra_driver.nvml.types import ComputeInstanceInfo, GpuInstanceInfo
from kubeletplugin.prepare.conflicts import find_holder, records_gpu_instance
from kubeletplugin.prepare.devices import DeviceTarget
from kubeletplugin.prepare.errors import ComputeInstanceLeftError, DeviceConflictError, RealizeError
from kubeletplugin.prepare.kinds.gpu_instances import (
    destroy_compute_instance,
    destroy_gpu_instance,
    find_recorded_gpu_instance,
    mig_target,
    release_errors,
    release_where,
    where,
)
from kubeletplugin.prepare.records import ClaimRecord, DeviceIntent, DeviceRecord

log = logging.getLogger(__name__)


def find_share_holders(
    gi: GpuInstanceInfo, intent: DeviceIntent, records: Iterable[ClaimRecord], claim_uid: str
) -> list[tuple[ClaimRecord, DeviceRecord]]:
    """The shares of other claims whose records name ``gi`` as the shared GPU instance of ``intent``'s
    device; pure.  Empty when ``gi`` is not exactly that device's GI (profile, placement) or no live
    share record names it -- then it is someone else's (foreign, or an exclusive claim's) and a share
    must not join it.  Every GI a share record names was created by migdra for shares of that device:
    a share records only the GI it created or the GI another share's record named."""
    if gi.profile_id != intent.profile_id or gi.placement != intent.placement:
        return []
    return [
        (record, device)
        for record in records
        if record.claim_uid != claim_uid
        for device in record.devices
        if device.intent.is_share
        and device.intent.gpu_uuid == intent.gpu_uuid
        and device.intent.device_name == intent.device_name
        and device.gpu_instance_id == gi.gpu_instance_id
    ]


def shares_record_gpu_instance(
    gi: GpuInstanceInfo, intent: DeviceIntent, records: Iterable[ClaimRecord], claim_uid: str
) -> bool:
    """Whether ``gi`` is exactly the GI of ``intent``'s shared device (profile, placement) and a share of that
    device in another claim's record names it by ID or is creating it (its creation in flight); pure."""
    if gi.profile_id != intent.profile_id or gi.placement != intent.placement:
        return False
    return any(
        device.intent.is_share
        and device.intent.gpu_uuid == intent.gpu_uuid
        and device.intent.device_name == intent.device_name
        and records_gpu_instance(device, gi)
        for record in records
        if record.claim_uid != claim_uid
        for device in record.devices
    )


def find_shared_gpu_instance(
    standing: Sequence[GpuInstanceInfo],
    target: DeviceTarget,
    intent: DeviceIntent,
    records: Sequence[ClaimRecord],
    claim_uid: str,
) -> GpuInstanceInfo | None:
    """The shared GI this share joins (None: none stands, create it); pure.  Raises
    :class:`DeviceConflictError` when anything else occupies the placement: a GI of another profile or
    placement, or one at exactly the placement that no other share's record names (an instance migdra
    did not create, or an exclusive claim's): a share never joins a GI migdra did not create for shares."""
    profile_name, placement = mig_target(target)
    in_the_way = [gi for gi in standing if gi.placement.overlaps(placement)]
    if not in_the_way:
        return None
    gi = in_the_way[0]
    if len(in_the_way) == 1 and find_share_holders(gi, intent, records, claim_uid):
        return gi
    holder = find_holder(gi, target.gpu_uuid, records, claim_uid)
    whose = f"prepared for claim {holder.label} (UID {holder.claim_uid})" if holder else "that migdra did not create"
    raise DeviceConflictError(
        f"{where(target)} placement {placement} of {profile_name} is occupied by GPU instance {gi.gpu_instance_id} "
        f"(profile {gi.profile_id} at {gi.placement}) {whose}; a share joins only a GPU instance migdra created for "
        "shares of this device"
    )


def describe_share_refusal(target: DeviceTarget, gi: GpuInstanceInfo, size: int) -> str:
    """The one-line error of a share that finds no free CI placement in its GI: device, size, CIs, why."""
    assert target.catalog_profile is not None
    profile = target.catalog_profile
    present = [ci.placement for ci in gi.compute_instances]
    free = profile.slice_count - sum(p.size for p in present)
    legal = ", ".join(str(p) for p in profile.compute_instance_for_share(size).placements)
    why = (
        f"the free compute slices are not contiguous at a legal placement of a {size}-slice CI ({legal}): the GPU "
        "instance is fragmented"
        if free >= size
        else f"only {free} of its {profile.slice_count} compute slices are free"
    )
    return (
        f"device {target.device_name}: no free placement for a share of {size} compute slice(s) in GI "
        f"{gi.gpu_instance_id} on GPU {target.gpu_uuid} ({describe_compute_instances(present)}): {why}"
    )


def create_share_compute_instance(
    nvml: Nvml, target: DeviceTarget, gpu_instance_id: int, ci_profile_index: int, placement: Placement
) -> ComputeInstanceInfo:
    """The share's CI at exactly ``placement`` in the shared GI; raises :class:`DeviceConflictError`
    (occupied) or :class:`RealizeError`."""
    try:
        ci = nvml.create_compute_instance_at(target.gpu_uuid, gpu_instance_id, ci_profile_index, placement)
    except NvmlInsufficientResources as e:
        raise DeviceConflictError(
            f"{where(target)}: compute-instance placement {placement} in GI {gpu_instance_id} is occupied "
            f"(NVML: {e.nvml_message})"
        ) from e
    except NvmlComputeInstanceLeft as e:
        stray = e.compute_instance
        raise ComputeInstanceLeftError(
            f"{where(target)}: creating the share's compute instance failed: {e}",
            stray.compute_instance_id,
            stray.mig_uuid,
            stray.placement,
        ) from e
    except NvmlError as e:
        raise RealizeError(f"{where(target)}: creating the share's compute instance failed: {e}") from e
    log.info(
        "created CI %d (CI profile %d at %s, %d SMs, %s) in shared GI %d on GPU %s for device %s",
        ci.compute_instance_id,
        ci_profile_index,
        placement,
        ci.multiprocessor_count,
        ci.mig_uuid,
        gpu_instance_id,
        target.gpu_uuid,
        target.device_name,
    )
    return ci


def destroy_share_compute_instance(
    nvml: Nvml, device: DeviceRecord, others: Sequence[ClaimRecord]
) -> DeviceRecord | None:
    """Destroy the share ``device``'s own compute instance; the device as its record must say now (the
    shared GI alone, no CI identity), or None when the shared GI is gone (nothing of the share is left).

    ``others``: every other claim's record, read under the GPU's lock.  Identity first, as for
    exclusive devices: the GI with the recorded ID must still be the recorded profile at the recorded
    placement (else it is not migdra's any more: nothing is destroyed, None).  The share's CI is the one
    with the recorded MIG UUID; with none recorded (a crash between asking NVML for the CI and
    recording it) the CI at exactly the recorded CI placement that was not in the GI then
    (``computeInstancesBefore``) and that no other record names; with no request recorded, the share
    has no CI.  The service records the returned device before the GI's turn
    (:func:`destroy_shared_gpu_instance_if_last`), so a crash or a refusal after the CI is gone never
    looks for that CI again -- another share may get its placement.  Raises :class:`ReleaseError`
    when NVML refuses.
    """
    intent = device.intent
    assert intent.is_share, "an exclusive device is released by find_instance_to_release"
    assert device.gpu_instance_id is not None, "a share without its GI's ID is released as an exclusive device"
    gpu_uuid = intent.gpu_uuid
    where = release_where(device)
    with release_errors(device, "releasing the share"):
        gi = find_recorded_gpu_instance(nvml, device)
        if gi is None:
            log.info("%s: shared GI %s is gone, nothing to destroy", where, device.gpu_instance_id)
            return None
        named: set[tuple[int | None, str | None]] = {
            (d.gpu_instance_id, d.mig_uuid)
            for record in others
            for d in record.devices
            if d.intent.gpu_uuid == gpu_uuid and d.mig_uuid is not None
        }
        ours = _find_share_compute_instance(device, gi, named)
        if ours is not None:
            destroy_compute_instance(nvml, gpu_uuid, gi.gpu_instance_id, ours.compute_instance_id)
            log.info(
                "%s: destroyed the share's CI %d (%s) in GI %d",
                where,
                ours.compute_instance_id,
                ours.mig_uuid,
                gi.gpu_instance_id,
            )
    return device.share_compute_instance_gone()


def destroy_shared_gpu_instance_if_last(nvml: Nvml, device: DeviceRecord, others: Sequence[ClaimRecord]) -> None:
    """Destroy the shared GI of ``device`` -- a share whose own CI is gone
    (:func:`destroy_share_compute_instance`) -- only if no other claim's record names it (the last
    share) and it holds no compute instance at all.

    A CI no record names inside the GI (someone else's) keeps the GI, loudly.  The last share destroys
    the GI whoever created it: every GI a share record names is migdra's (docs/prepare.md §4b).  Raises
    :class:`ReleaseError` when NVML refuses.
    """
    intent = device.intent
    assert device.gpu_instance_id is not None
    gpu_uuid = intent.gpu_uuid
    gi_id = device.gpu_instance_id
    where = release_where(device)
    # Only shares of this very device count: GI IDs are reused, so a stale record of another device
    # (an exclusive claim whose GI was destroyed before its record was dropped) naming the same ID must
    # not keep this GI alive -- it would leak once that record is rolled back.
    sharers = [
        r.label
        for r in others
        if any(
            d.intent.is_share
            and d.intent.gpu_uuid == gpu_uuid
            and d.intent.device_name == intent.device_name
            and d.gpu_instance_id == gi_id
            for d in r.devices
        )
    ]
    if sharers:
        log.info("%s: shared GI %d stays, claims %s still use it", where, gi_id, ", ".join(sharers))
        return
    with release_errors(device, "releasing the share"):
        left = list(nvml.gpu_instance(gpu_uuid, gi_id).compute_instances)
        if left:
            log.error(
                "NOT DESTROYED: %s: shared GI %d holds compute instance(s) %s that no claim of migdra's names; "
                "leaving it alone",
                where,
                gi_id,
                ", ".join(ci.mig_uuid for ci in left),
            )
            return
        destroy_gpu_instance(nvml, gpu_uuid, gi_id)
    log.info("%s: destroyed shared GI %d at %s (its last share)", where, gi_id, intent.placement)


def _find_share_compute_instance(
    device: DeviceRecord, gi: GpuInstanceInfo, named: set[tuple[int | None, str | None]]
) -> ComputeInstanceInfo | None:
    """The CI of the share ``device`` records in ``gi`` (see :func:`destroy_share_compute_instance`); None: it
    has none."""
    if device.mig_uuid is not None:
        return next((ci for ci in gi.compute_instances if ci.mig_uuid == device.mig_uuid), None)
    if device.compute_instances_before is None or device.compute_instance_placement is None:
        return None  # NVML was never asked for this share's CI
    candidate = next((ci for ci in gi.compute_instances if ci.placement == device.compute_instance_placement), None)
    if candidate is None:
        return None
    if candidate.compute_instance_id in device.compute_instances_before or (
        (gi.gpu_instance_id, candidate.mig_uuid) in named
    ):
        log.warning(
            "device %s: CI %d (%s) at %s in GI %d is not this share's (it stood before, or another claim names it); "
            "left alone",
            device.intent.device_name,
            candidate.compute_instance_id,
            candidate.mig_uuid,
            candidate.placement,
            gi.gpu_instance_id,
        )
        return None
    if device.compute_instance_profile_id is not None and candidate.profile_id != device.compute_instance_profile_id:
        return None
    return candidate
