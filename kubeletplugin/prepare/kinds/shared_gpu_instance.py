"""A share of a shared GPU instance: a compute instance of its own, for one claim, in a GI that the
shares of one shared device use together (docs/sharing.md).

    plan     the placement is free, or holds exactly this device's GI, named by another claim's share
    create   under the GPU's lock: the GI another share's record names is joined
             (:func:`~kubeletplugin.prepare.kinds.share_instances.find_shared_gpu_instance`); else it is
             created as an exclusive device's is (checkpoint: request, then ID) → checkpoint: the GI
             (created or joined) → the CI placement chosen (``dra_driver.mig.compute_placement``, among
             NVML's legal ones) → checkpoint: the CI request (the CIs standing, the placement) → the CI
             at exactly that placement → checkpoint: its identity.  A failure destroys what this call
             created: its CI, and the GI if it created it (no other share can have joined: the lock is held)
    undo     its CI destroyed; the GI too unless another claim's share names it
    release  its own CI destroyed → checkpoint: the GI alone → the GI destroyed if no other record
             names it.  A share whose GI's ID was never recorded is released as an exclusive device (its
             GI, if migdra made it, is empty); one that never asked NVML has nothing to release.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

from dra_driver.mig.catalog import ComputeInstanceProfile, Placement
from dra_driver.mig.compute_placement import choose_compute_placement
from dra_driver.nvml.errors import NvmlError
from dra_driver.nvml.types import GpuInstanceInfo
from kubeletplugin.prepare.conflicts import PlacementConflict, compute_placement_conflict
from kubeletplugin.prepare.devices import DeviceTarget
from kubeletplugin.prepare.errors import ComputeInstanceLeftError, DeviceConflictError, RealizeError
from kubeletplugin.prepare.kinds.base import DeviceStep, InstanceLeftError
from kubeletplugin.prepare.kinds.exclusive_mig import ExclusiveMigDevice
from kubeletplugin.prepare.kinds.gpu_instances import create_recorded_gpu_instance, destroy_created_instance
from kubeletplugin.prepare.kinds.share_instances import (
    create_share_compute_instance,
    describe_share_refusal,
    destroy_share_compute_instance,
    destroy_shared_gpu_instance_if_last,
    find_shared_gpu_instance,
    shares_record_gpu_instance,
)
from kubeletplugin.prepare.records import ClaimRecord, DeviceIntent, DeviceRecord
from kubeletplugin.settings import CrashPoint

log = logging.getLogger(__name__)

_AS_EXCLUSIVE = ExclusiveMigDevice()


class SharedGpuInstance:
    """The steps of a share (module docstring)."""

    creates_instances = True

    def plan(
        self, instances: Sequence[GpuInstanceInfo], intent: DeviceIntent, records: Iterable[ClaimRecord], claim_uid: str
    ) -> PlacementConflict | None:
        """The unlocked check must not refuse a share that races the share creating its GI (between
        NVML's answer and the recorded GI ID): an occupant that is exactly this device's GI, named or
        being created by another claim's share, is the GI it joins -- :meth:`create`, under the GPU's
        lock, decides whether it really does."""
        records = tuple(records)
        conflict = compute_placement_conflict(instances, intent, records, claim_uid)
        if conflict is not None and shares_record_gpu_instance(conflict.occupant, intent, records, claim_uid):
            return None
        return conflict

    def create(self, step: DeviceStep, device: DeviceRecord, target: DeviceTarget) -> DeviceRecord:
        context = step.context
        intent = device.intent
        assert target.catalog_profile is not None
        assert intent.share_size is not None
        try:
            standing = context.nvml.gpu_instances(intent.gpu_uuid)
        except NvmlError as e:
            raise RealizeError(
                f"device {intent.device_name}: reading GPU {intent.gpu_uuid} before creating failed: {e}"
            ) from e
        joined = find_shared_gpu_instance(standing, target, intent, context.store.records(), step.claim_uid)
        if joined is None:
            device, gi = create_recorded_gpu_instance(step, device, target, standing)
            created_gi: int | None = gi.gpu_instance_id
        else:
            gi, created_gi = joined, None
            log.info("device %s: joining shared GI %d", intent.device_name, gi.gpu_instance_id)
        ci_id: int | None = None
        try:
            device = step.record(
                device.with_shared_gpu_instance(gi.gpu_instance_id, created=created_gi is not None),
                f"GI {gi.gpu_instance_id}",
            )
            context.crash(CrashPoint.AFTER_CHECKPOINT_GPU_INSTANCE)
            ci_profile = target.catalog_profile.compute_instance_for_share(intent.share_size)
            legal = _legal_compute_placements(step, intent, gi.gpu_instance_id, ci_profile)
            present = [ci.placement for ci in gi.compute_instances]
            chosen = choose_compute_placement(target.catalog_profile, present, intent.share_size, legal)
            if chosen is None:
                raise DeviceConflictError(describe_share_refusal(target, gi, intent.share_size))
            standing_cis = (ci.compute_instance_id for ci in gi.compute_instances)
            device = step.record(
                device.requesting_compute_instance(standing_cis, chosen, ci_profile.ci_profile_index),
                "the compute-instance request",
            )
            context.crash(CrashPoint.AFTER_CHECKPOINT_COMPUTE_INSTANCE_REQUESTED)
            ci = create_share_compute_instance(
                context.nvml, target, gi.gpu_instance_id, ci_profile.ci_profile_index, chosen
            )
            ci_id = ci.compute_instance_id
            context.crash(CrashPoint.AFTER_COMPUTE_INSTANCE)
            device = step.record(
                device.with_compute_instance(ci.compute_instance_id, ci.mig_uuid), f"CI {ci.compute_instance_id}"
            )
            context.crash(CrashPoint.AFTER_CHECKPOINT_COMPUTE_INSTANCE)
        except (RealizeError, DeviceConflictError) as e:
            _roll_back(step, device, e, gi.gpu_instance_id, ci_id, created_gi)
            raise
        return device

    def undo(self, step: DeviceStep, device: DeviceRecord) -> bool:
        """Its CI, and its GI unless another claim's share joined it meanwhile; False: something is left."""
        if device.gpu_instance_id is None:
            return True
        others = step.context.other_records(step.claim_uid)
        released = destroy_share_compute_instance(step.context.nvml, device, others)
        if released is not None:  # no record to follow: the claim's record goes as a whole
            destroy_shared_gpu_instance_if_last(step.context.nvml, released, others)
        return True

    def release(self, step: DeviceStep, device: DeviceRecord) -> None:
        if device.gpu_instance_id is None:
            if not device.creation_requested:
                # It stopped before it either asked NVML for a GI or joined one: nothing of it exists,
                # and a GI at its placement is another share's (or not migdra's).
                log.info("device %s: the share never had an instance; nothing to release", device.intent.device_name)
                return
            _AS_EXCLUSIVE.release(step, device)  # its GI, if migdra made it, is empty
            return
        others = step.context.other_records(step.claim_uid)
        released = destroy_share_compute_instance(step.context.nvml, device, others)
        if released is None:
            return  # the shared GI is gone: nothing of the share is left
        device = step.record_release(device, released)
        destroy_shared_gpu_instance_if_last(step.context.nvml, device, others)


def _legal_compute_placements(
    step: DeviceStep, intent: DeviceIntent, gpu_instance_id: int, ci_profile: ComputeInstanceProfile
) -> tuple[Placement, ...] | None:
    """Where NVML says a CI of ``ci_profile`` may sit in this GI (the catalog's placements are inferred:
    NVML is the authority on the hardware); a difference from the catalog is logged once per GPU and
    profile.  None (the catalog's, logged) when NVML cannot say."""
    try:
        legal = step.context.nvml.compute_instance_possible_placements(
            intent.gpu_uuid, gpu_instance_id, ci_profile.ci_profile_index
        )
    except NvmlError as e:
        log.warning(
            "device %s: NVML did not list the placements of %s (%s); using the catalog's",
            intent.device_name,
            ci_profile.name,
            e,
        )
        return None
    known = step.context.placement_differences
    difference = (intent.gpu_uuid, intent.profile_id, ci_profile.name, tuple(legal))
    if tuple(legal) != tuple(ci_profile.placements) and difference not in known:
        known.add(difference)
        log.warning(
            "device %s: NVML places %s at %s, the catalog at %s; NVML's are used",
            intent.device_name,
            ci_profile.name,
            ", ".join(str(p) for p in legal) or "nowhere",
            ", ".join(str(p) for p in ci_profile.placements),
        )
    return tuple(legal)


def _roll_back(
    step: DeviceStep,
    device: DeviceRecord,
    error: RealizeError | DeviceConflictError,
    gi_id: int,
    ci_id: int | None,
    created_gi: int | None,
) -> None:
    """Destroy what this share's create made (its CI; the GI if it created it); returns when all is gone
    (the caller re-raises ``error``), raises :class:`InstanceLeftError` with the device as recorded when
    something stays."""
    intent = device.intent
    stray = error if isinstance(error, ComputeInstanceLeftError) else None
    if stray is not None:  # NVML put it elsewhere and would not destroy it: one more try
        ci_id = stray.compute_instance_id
    failure: str | None = None
    ci_left = False
    try:
        if ci_id is not None:
            step.context.nvml.destroy_compute_instance(intent.gpu_uuid, gi_id, ci_id)
    except NvmlError as e:
        failure, ci_left = str(e), True
    if failure is None and created_gi is not None:
        failure = destroy_created_instance(step.context.nvml, intent.gpu_uuid, created_gi, None)
    if failure is None and stray is not None:  # the second try destroyed it after all
        raise RealizeError(f"{error.message}; the roll-back destroyed it on a second try") from error
    if failure is None:
        return
    left = device.with_gpu_instance(gi_id)
    if ci_left and stray is not None:  # recorded, so a release destroys it, and then the GI
        left = left.with_stray_compute_instance(stray.compute_instance_id, stray.mig_uuid, stray.placement)
    raise InstanceLeftError(f"{error.message}; rolling back the share failed ({failure})", left) from error
