"""An exclusive MIG device: one GPU instance at exactly the allocated placement, with the compute
instance that covers all of it, for one claim.

    plan     the placement is free on NVML (or the occupant is named: another claim's, or foreign)
    create   under the GPU's lock: placement still free? → checkpoint: the GIs standing (the request)
             → GI at exactly that placement → checkpoint: its ID → the full CI (the CI profile whose SM
             count is the GI's: CI profile 7, not 0, in Hopper's 1g.20gb-type GIs; NVIDIA #1454/#1480)
             → its SMs checked; a failure after the GI exists destroys it, CI first (NVIDIA #1452 left
             the GI behind) -- one that cannot be destroyed stays recorded (:class:`InstanceLeftError`)
    undo     the claim failed later: CI, then GI destroyed; what cannot be stays recorded
    release  identity proven (:func:`find_instance_to_release`) → checkpoint: the GI alone → its CIs,
             then the GI destroyed (:func:`destroy_instance`)

The CI's identity is recorded with the claim's completed record, not on its own: a crash before that
leaves a GI whose CIs recovery destroys with it (the record names the GI).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from dra_driver.nvml.errors import NvmlError
from dra_driver.nvml.types import ComputeInstanceInfo, ComputeInstanceProfileInfo, GpuInstanceInfo
from kubeletplugin.prepare.conflicts import PlacementConflict, compute_placement_conflict, find_overlapping_instance
from kubeletplugin.prepare.devices import DeviceTarget
from kubeletplugin.prepare.errors import CapacityMismatchError, DeviceConflictError, RealizeError
from kubeletplugin.prepare.kinds.base import DeviceStep, InstanceLeftError
from kubeletplugin.prepare.kinds.gpu_instances import (
    create_recorded_gpu_instance,
    destroy_compute_instance,
    destroy_created_instance,
    destroy_gpu_instance,
    find_recorded_gpu_instance,
    mig_target,
    read_gpu_instances,
    release_errors,
    release_where,
    where,
)
from kubeletplugin.prepare.records import ClaimRecord, DeviceIntent, DeviceRecord
from kubeletplugin.settings import CrashPoint

log = logging.getLogger(__name__)


class ExclusiveMigDevice:
    """The steps of an exclusive MIG device (module docstring)."""

    creates_instances = True

    def plan(
        self, instances: Sequence[GpuInstanceInfo], intent: DeviceIntent, records: Iterable[ClaimRecord], claim_uid: str
    ) -> PlacementConflict | None:
        return compute_placement_conflict(instances, intent, records, claim_uid)

    def create(self, step: DeviceStep, device: DeviceRecord, target: DeviceTarget) -> DeviceRecord:
        """The device realized: its GI's ID recorded on the way, its CI's identity returned (the claim's
        completed record carries it)."""
        context = step.context
        standing = read_gpu_instances(context.nvml, target)
        _refuse_occupied(target, standing)
        device, gi = create_recorded_gpu_instance(step, device, target, standing)
        compute_instance_id: int | None = None
        try:
            device = step.record(device.with_gpu_instance(gi.gpu_instance_id), f"GI {gi.gpu_instance_id}")
            context.crash(CrashPoint.AFTER_CHECKPOINT_GPU_INSTANCE)
            ci_profile, ci = _create_full_compute_instance(step, target, gi.gpu_instance_id)
            compute_instance_id = ci.compute_instance_id
            context.crash(CrashPoint.AFTER_COMPUTE_INSTANCE)
            _check_delivered_sms(target, gi.gpu_instance_id, ci_profile, ci)
        except RealizeError as e:
            failure = destroy_created_instance(context.nvml, target.gpu_uuid, gi.gpu_instance_id, compute_instance_id)
            if failure is None:
                raise
            left = device.with_gpu_instance(gi.gpu_instance_id)
            raise InstanceLeftError(
                f"{e.message}; rolling back GI {gi.gpu_instance_id} failed ({failure})", left
            ) from e
        return device.with_compute_instance(ci.compute_instance_id, ci.mig_uuid, ci_profile.ci_profile_index)

    def undo(self, step: DeviceStep, device: DeviceRecord) -> bool:
        """Destroy what :meth:`create` made (CI, then GI); False: something is left (recorded for a retry)."""
        if device.gpu_instance_id is None:
            return True
        if device.mig_uuid is None:
            return False  # create's own roll-back failed already (InstanceLeftError): the GI stays recorded
        failure = destroy_created_instance(
            step.context.nvml, device.intent.gpu_uuid, device.gpu_instance_id, device.compute_instance_id
        )
        return failure is None

    def release(self, step: DeviceStep, device: DeviceRecord) -> None:
        release = find_instance_to_release(step, device)
        if release is not None:
            step.record_release(device, release.device)
            destroy_instance(step, release)


def _refuse_occupied(target: DeviceTarget, standing: Sequence[GpuInstanceInfo]) -> None:
    """Under the GPU's lock, right before creating: nothing of migdra's changes the GPU between this read,
    the recorded request and the creation, so an occupant found now is really there."""
    profile_name, placement = mig_target(target)
    in_the_way = find_overlapping_instance(standing, placement)
    if in_the_way is not None:
        raise DeviceConflictError(
            f"{where(target)} placement {placement} of {profile_name} is occupied by GPU instance "
            f"{in_the_way.gpu_instance_id} (profile {in_the_way.profile_id} at {in_the_way.placement}); "
            "migdra never falls back to another placement"
        )


def compute_full_ci_profile(
    profiles: Sequence[ComputeInstanceProfileInfo], gi_multiprocessor_count: int
) -> ComputeInstanceProfileInfo | None:
    """The CI profile that delivers all of a GI's SMs; pure.  None when no profile does.

    Several matches (not seen on any recorded GPU) resolve to the one spanning the most compute
    slices, then the lowest profile index, so the choice is deterministic.
    """
    full = [p for p in profiles if p.multiprocessor_count == gi_multiprocessor_count]
    if not full:
        return None
    return min(full, key=lambda p: (-p.slice_count, p.ci_profile_index))


def _create_full_compute_instance(
    step: DeviceStep, target: DeviceTarget, gpu_instance_id: int
) -> tuple[ComputeInstanceProfileInfo, ComputeInstanceInfo]:
    profile_name, _ = mig_target(target)
    assert target.profile is not None
    nvml = step.context.nvml
    sms = target.profile.multiprocessor_count
    try:
        ci_profiles = nvml.compute_instance_profiles(target.gpu_uuid, gpu_instance_id)
        ci_profile = compute_full_ci_profile(ci_profiles, sms)
        if ci_profile is None:
            offered = ", ".join(f"{p.ci_profile_index} ({p.multiprocessor_count} SMs)" for p in ci_profiles)
            raise CapacityMismatchError(
                f"{where(target)} {profile_name} advertises {sms} SMs, but no compute-instance "
                f"profile of GI {gpu_instance_id} delivers {sms} (offered: {offered})"
            )
        ci = nvml.create_compute_instance(target.gpu_uuid, gpu_instance_id, ci_profile.ci_profile_index)
    except NvmlError as e:
        raise RealizeError(f"{where(target)}: creating the compute instance failed: {e}") from e
    return ci_profile, ci


def _check_delivered_sms(
    target: DeviceTarget, gpu_instance_id: int, ci_profile: ComputeInstanceProfileInfo, ci: ComputeInstanceInfo
) -> None:
    profile_name, _ = mig_target(target)
    assert target.profile is not None
    sms = target.profile.multiprocessor_count
    if ci.multiprocessor_count < sms:
        raise CapacityMismatchError(
            f"{where(target)} {profile_name} advertises {sms} SMs, but compute instance "
            f"{ci.compute_instance_id} (CI profile {ci_profile.ci_profile_index}) of GI {gpu_instance_id} "
            f"delivers {ci.multiprocessor_count}"
        )
    log.info(
        "created CI %d (CI profile %d, %d SMs, %s) in GI %d on GPU %s",
        ci.compute_instance_id,
        ci_profile.ci_profile_index,
        ci.multiprocessor_count,
        ci.mig_uuid,
        gpu_instance_id,
        target.gpu_uuid,
    )


@dataclass(frozen=True, slots=True)
class InstanceToRelease:
    """What of an exclusive device's instance is migdra's to destroy, identity proven
    (:func:`find_instance_to_release`), and the device as its record must say *before* anything goes."""

    device: DeviceRecord  # the GI's ID and no CI identity -- or, with the GI kept, the device as recorded
    gpu_instance: GpuInstanceInfo
    compute_instances: tuple[ComputeInstanceInfo, ...]  # destroyed first
    destroy_gpu_instance: bool  # False: the GI is someone else's; only migdra's own CI in it goes


def find_instance_to_release(step: DeviceStep, device: DeviceRecord) -> InstanceToRelease | None:
    """The instance the exclusive MIG ``device`` records, if NVML shows it is still migdra's; None when
    nothing of migdra's is left to destroy (the device counts as released).  Reads only.

    Nothing is destroyed unless the record and NVML agree on identity:

    - GI ID recorded: that GI, if its profile and placement still match; else it is gone (released).
    - MIG UUID recorded too: the GI must hold the compute instance with that UUID and no other; a GI
      without it is someone else's, even with the same ID (an operator re-created it), and is left
      alone, loudly -- only migdra's own CI, if the GI still holds it beside another, is destroyed.
    - GI ID unknown (a crash before the ID was recorded): the GI at exactly the recorded placement
      with the recorded profile, only if the record proves migdra created it
      (:func:`~kubeletplugin.prepare.kinds.gpu_instances.find_unrecorded_gpu_instance`); any other GI
      there is left alone, loudly, and the device counts as released.
    - With no CI identity recorded (the plugin stopped between creating the GI and recording its
      CI), the CIs inside the (ours) GI are destroyed.

    The returned ``device`` names the GI alone (its ID, no CI identity): it is recorded before
    :func:`destroy_instance` runs, so a crash or a refused GI destroy after the CI is gone is retried
    against a GI of migdra's, not against a CI that no longer is (which would make the GI look foreign).
    Raises :class:`ReleaseError` when NVML cannot be read.
    """
    intent = device.intent
    assert intent.placement is not None
    assert intent.profile_id is not None
    with release_errors(device, "destroying the instance"):
        gi = find_recorded_gpu_instance(step.context.nvml, device)
    if gi is None:
        log.info("%s: no GPU instance left at %s, nothing to destroy", release_where(device), intent.placement)
        return None
    if device.mig_uuid is not None:
        theirs = [ci for ci in gi.compute_instances if ci.mig_uuid != device.mig_uuid]
        ours = [ci for ci in gi.compute_instances if ci.mig_uuid == device.mig_uuid]
        if theirs or not ours:
            log.error(
                "NOT DESTROYED: %s: GI %d at %s does not hold migdra's compute instance %s (it holds %s); "
                "it is not the instance migdra created, leaving it alone",
                release_where(device),
                gi.gpu_instance_id,
                intent.placement,
                device.mig_uuid,
                ", ".join(ci.mig_uuid for ci in gi.compute_instances) or "none",
            )
            if not ours:
                return None
            return InstanceToRelease(device, gi, tuple(ours), destroy_gpu_instance=False)
    releasing = device.gpu_instance_alone(gi.gpu_instance_id)
    return InstanceToRelease(releasing, gi, tuple(gi.compute_instances), destroy_gpu_instance=True)


def destroy_instance(step: DeviceStep, release: InstanceToRelease) -> None:
    """Destroy what :func:`find_instance_to_release` proved migdra's: the compute instances first, then
    the GI (unless it is someone else's).  An instance already gone counts as destroyed.  Raises
    :class:`ReleaseError` when NVML refuses (a process holds the device: kubelet retries)."""
    nvml = step.context.nvml
    device = release.device
    gi = release.gpu_instance
    gpu_uuid = device.intent.gpu_uuid
    with release_errors(device, "destroying the instance"):
        for ci in release.compute_instances:
            destroy_compute_instance(nvml, gpu_uuid, gi.gpu_instance_id, ci.compute_instance_id)
        if not release.destroy_gpu_instance:
            return
        destroy_gpu_instance(nvml, gpu_uuid, gi.gpu_instance_id)
    log.info(
        "destroyed GI %d at %s on GPU %s (%s)",
        gi.gpu_instance_id,
        device.intent.placement,
        gpu_uuid,
        release_where(device),
    )
