"""GPU instances on NVML: the one place one is created (at exactly the allocated placement, announced
in the checkpoint first), found again from a record, and destroyed.

Both kinds that create instances -- an exclusive MIG device and a shared GPU instance -- create their
GI here (:func:`create_recorded_gpu_instance`): the GIs standing are recorded before NVML is asked, so
after a crash the record tells recovery exactly which GI may be migdra's
(:func:`find_unrecorded_gpu_instance`).  An occupied placement is an error, never a reason to move.
Callers hold the GPU's lock.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Sequence

from dra_driver.mig.catalog import Placement
from dra_driver.nvml.backend import Nvml
from dra_driver.nvml.errors import NvmlError, NvmlInsufficientResources, NvmlInUse, NvmlNotFound
from dra_driver.nvml.types import GpuInstanceInfo
from kubeletplugin.prepare.conflicts import find_overlapping_instance
from kubeletplugin.prepare.devices import DeviceTarget
from kubeletplugin.prepare.errors import DeviceConflictError, RealizeError, ReleaseError
from kubeletplugin.prepare.kinds.base import DeviceStep
from kubeletplugin.prepare.records import DeviceRecord
from kubeletplugin.settings import CrashPoint

log = logging.getLogger(__name__)


def where(target: DeviceTarget) -> str:
    return f"device {target.device_name}: GPU {target.gpu_uuid}"


def mig_target(target: DeviceTarget) -> tuple[str, Placement]:
    """``target``'s profile name and placement; only MIG targets are created."""
    assert target.profile is not None, "only a MIG target has an instance to create"
    assert target.placement is not None, "only a MIG target has an instance to create"
    return target.profile_name or target.profile.name, target.placement


def read_gpu_instances(nvml: Nvml, target: DeviceTarget) -> list[GpuInstanceInfo]:
    """The GPU's instances right before creating; :class:`RealizeError` when NVML cannot say."""
    try:
        return nvml.gpu_instances(target.gpu_uuid)
    except NvmlError as e:
        raise RealizeError(f"{where(target)}: reading its GPU instances before creating failed: {e}") from e


def create_recorded_gpu_instance(
    step: DeviceStep, device: DeviceRecord, target: DeviceTarget, standing: Sequence[GpuInstanceInfo]
) -> tuple[DeviceRecord, GpuInstanceInfo]:
    """Record the request (the GIs ``standing``, read under the GPU's lock with the placement free), then
    create the GI of ``target``'s profile at exactly its placement: the device as recorded, and the GI.
    The caller records the GI's ID next, before any compute instance exists.  Raises
    :class:`DeviceConflictError` (occupied) or :class:`RealizeError` (NVML, or the checkpoint, failed)."""
    device = step.record(
        device.requesting_gpu_instance(gi.gpu_instance_id for gi in standing), "the GPU-instance request"
    )
    step.context.crash(CrashPoint.AFTER_CHECKPOINT_REQUESTED)
    nvml = step.context.nvml
    profile_name, placement = mig_target(target)
    assert target.profile is not None
    try:
        gi = nvml.create_gpu_instance(target.gpu_uuid, target.profile.profile_id, placement)
    except NvmlInsufficientResources as e:
        occupant = _describe_occupant(nvml, target.gpu_uuid, placement)
        raise DeviceConflictError(
            f"{where(target)} placement {placement} of {profile_name} is occupied{occupant}; migdra never falls "
            f"back to another placement (NVML: {e.nvml_message})"
        ) from e
    except NvmlError as e:
        raise RealizeError(f"{where(target)}: creating the GPU instance failed: {e}") from e
    log.info(
        "created GI %d (%s, profile %d) at %s on GPU %s for device %s",
        gi.gpu_instance_id,
        profile_name,
        target.profile.profile_id,
        placement,
        target.gpu_uuid,
        target.device_name,
    )
    step.context.crash(CrashPoint.AFTER_GPU_INSTANCE)
    return device, gi


def destroy_created_instance(
    nvml: Nvml, gpu_uuid: str, gpu_instance_id: int, compute_instance_id: int | None
) -> str | None:
    """Destroy an instance this prepare call created (CI, then GI); the failure text, or None."""
    try:
        if compute_instance_id is not None:
            destroy_compute_instance(nvml, gpu_uuid, gpu_instance_id, compute_instance_id)
        destroy_gpu_instance(nvml, gpu_uuid, gpu_instance_id)
    except NvmlError as e:
        log.error(
            "ROLLBACK FAILED: GI %d on GPU %s created by this prepare call could not be destroyed: %s; it stays "
            "recorded in the checkpoint and is retried",
            gpu_instance_id,
            gpu_uuid,
            e,
        )
        return str(e)
    log.info("rolled back GI %d on GPU %s", gpu_instance_id, gpu_uuid)
    return None


def release_where(device: DeviceRecord) -> str:
    return f"device {device.intent.device_name}: GPU {device.intent.gpu_uuid}"


@contextlib.contextmanager
def release_errors(device: DeviceRecord, doing: str) -> Iterator[None]:
    """NVML's refusal of a release step as the claim's :class:`ReleaseError`: in use (a process holds
    the device: kubelet retries), or any other failure of ``doing``."""
    try:
        yield
    except NvmlInUse as e:
        raise ReleaseError(f"{release_where(device)}: the MIG device is still in use ({e}); kubelet retries") from e
    except NvmlError as e:
        raise ReleaseError(f"{release_where(device)}: {doing} at {device.intent.placement} failed: {e}") from e


def find_recorded_gpu_instance(nvml: Nvml, device: DeviceRecord) -> GpuInstanceInfo | None:
    """The GI ``device`` records, if it is still the recorded profile at the recorded placement: by its ID,
    or -- without one -- the GI the record proves migdra created (:func:`find_unrecorded_gpu_instance`)."""
    intent = device.intent
    if device.gpu_instance_id is not None:
        try:
            gi = nvml.gpu_instance(intent.gpu_uuid, device.gpu_instance_id)
        except NvmlNotFound:
            return None
        if gi.profile_id != intent.profile_id or gi.placement != intent.placement:
            log.warning(
                "GI %d on GPU %s is now profile %d at %s, not the recorded %s at %s: not ours, left alone",
                gi.gpu_instance_id,
                intent.gpu_uuid,
                gi.profile_id,
                gi.placement,
                intent.profile_id,
                intent.placement,
            )
            return None
        return gi
    ours, stranger = find_unrecorded_gpu_instance(device, nvml.gpu_instances(intent.gpu_uuid))
    if stranger is not None:
        log.error(
            "NOT DESTROYED: device %s of GPU %s: GI %d (profile %d at %s) stands at the recorded placement, but "
            "migdra did not create it: %s; left alone",
            intent.device_name,
            intent.gpu_uuid,
            stranger[0].gpu_instance_id,
            stranger[0].profile_id,
            stranger[0].placement,
            stranger[1],
        )
    return ours


def find_unrecorded_gpu_instance(
    device: DeviceRecord, instances: Sequence[GpuInstanceInfo]
) -> tuple[GpuInstanceInfo | None, tuple[GpuInstanceInfo, str] | None]:
    """For a device record without a GI ID: (the GI migdra created, None) or (None, (a stranger, why)).

    Pure.  A GI of the recorded profile at exactly the recorded placement is migdra's only if all of:

    - the record says NVML was asked for it (``gpuInstancesBefore`` is written, under the GPU's lock
      after the placement was found free, *before* the NVML call): without that, the crash came
      before the call and any GI there was created by someone else afterwards;
    - it is not one of the GIs that stood on the GPU at that moment;
    - it holds no compute instance: migdra records a GI's ID before it creates a compute instance in
      it, so a GI of migdra's whose ID is unrecorded is empty.

    ``(None, None)``: no GI of that profile at that placement.
    """
    intent = device.intent
    candidate = next(
        (gi for gi in instances if gi.placement == intent.placement and gi.profile_id == intent.profile_id), None
    )
    if candidate is None:
        return None, None
    if device.gpu_instances_before is None:
        return None, (candidate, "the record shows the plugin stopped before it asked NVML for a GPU instance")
    if candidate.gpu_instance_id in device.gpu_instances_before:
        return None, (candidate, "it already stood on the GPU when migdra asked NVML for its own")
    if candidate.compute_instances:
        uuids = ", ".join(ci.mig_uuid for ci in candidate.compute_instances)
        return None, (
            candidate,
            f"it holds compute instance(s) {uuids}, and migdra records a GI's ID before it creates a compute "
            "instance in it",
        )
    return candidate, None


def _describe_occupant(nvml: Nvml, gpu_uuid: str, placement: Placement) -> str:
    try:
        occupant = find_overlapping_instance(nvml.gpu_instances(gpu_uuid), placement)
    except NvmlError:
        return ""
    if occupant is None:
        return ""
    return f" by GPU instance {occupant.gpu_instance_id} (profile {occupant.profile_id} at {occupant.placement})"


def destroy_compute_instance(nvml: Nvml, gpu_uuid: str, gpu_instance_id: int, compute_instance_id: int) -> None:
    with contextlib.suppress(NvmlNotFound):  # already gone: the goal of a destroy is reached
        nvml.destroy_compute_instance(gpu_uuid, gpu_instance_id, compute_instance_id)


def destroy_gpu_instance(nvml: Nvml, gpu_uuid: str, gpu_instance_id: int) -> None:
    with contextlib.suppress(NvmlNotFound):
        nvml.destroy_gpu_instance(gpu_uuid, gpu_instance_id)
