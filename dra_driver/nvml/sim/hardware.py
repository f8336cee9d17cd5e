"""The MIG rules of the simulated GPUs, as pure functions over the persisted state.

This module owns what a real GPU decides: which GPU / compute instances can be created where, which
IDs and UUIDs they get, when MIG mode changes, and which NVML return code a refused request gets.
Every number comes from the MIG catalog (:func:`dra_driver.mig.catalog.load_catalog`); the only
NVML facts used directly are pynvml's constants (return codes, profile-index ranges, the names of the
``_ALL_ME`` / ``_NO_ME`` profile indices).

Functions either read a :class:`SimState` or mutate the GPU (and state) they are handed inside a store
transaction -- a GPU the transaction copied for the change
(:class:`~dra_driver.nvml.sim.state.StateChange`), never one reached otherwise; they raise
:class:`SimNvmlError` with an NVML return code for a refusal.  This module must never touch ctypes,
files, locks or clocks.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import pynvml

from dra_driver.mig.catalog import (
    RESOURCE_FIELDS,
    ComputeInstanceProfile,
    GpuInstanceProfile,
    GpuModel,
    Placement,
    load_catalog,
)
from dra_driver.nvml.sim.errors import HardwareRefusedError, SimNvmlError
from dra_driver.nvml.sim.state import SimComputeInstance, SimGpu, SimGpuInstance, SimState


def _profile_index_names(suffix: str) -> frozenset[int]:
    return frozenset(
        value
        for name, value in vars(pynvml).items()
        if name.startswith("NVML_GPU_INSTANCE_PROFILE_") and name.endswith(suffix) and isinstance(value, int)
    )


# nvml.h: an _ALL_ME profile takes every media engine and "prevents allocation of all but _NO_ME
# profiles" while it exists; the converse (no _ALL_ME while a media-using GI exists) follows from the
# engines being taken.  The indices are read from pynvml by name, not listed here.
_ALL_MEDIA_ENGINE_INDICES = _profile_index_names("_ALL_ME")
_NO_MEDIA_ENGINE_INDICES = _profile_index_names("_NO_ME")


@dataclass(frozen=True)
class MigDevice:
    """One MIG device: a compute instance together with the GPU instance that holds it."""

    gpu_instance: SimGpuInstance
    compute_instance: SimComputeInstance


def gpu_model(gpu: SimGpu) -> GpuModel:
    return load_catalog().gpus[gpu.model]


def gpu_profile(gpu: SimGpu, gi: SimGpuInstance) -> GpuInstanceProfile:
    return gpu_model(gpu).profile_by_id(gi.profile_id)


# --- look-ups -------------------------------------------------------------------------------------


def gpu_at(state: SimState, index: int) -> SimGpu:
    if not 0 <= index < len(state.gpus):
        raise SimNvmlError(pynvml.NVML_ERROR_INVALID_ARGUMENT, f"no GPU at index {index}")
    return state.gpus[index]


def require_mig_enabled(gpu: SimGpu) -> None:
    if not gpu.mig_mode_current:
        raise SimNvmlError(pynvml.NVML_ERROR_NOT_SUPPORTED, f"MIG mode is disabled on GPU {gpu.index}")


def find_gpu_instance(gpu: SimGpu, gpu_instance_id: int) -> SimGpuInstance | None:
    return next((gi for gi in gpu.gpu_instances if gi.gpu_instance_id == gpu_instance_id), None)


def find_compute_instance(gi: SimGpuInstance, compute_instance_id: int) -> SimComputeInstance | None:
    return next((ci for ci in gi.compute_instances if ci.compute_instance_id == compute_instance_id), None)


def gpu_instance_by_id(gpu: SimGpu, gpu_instance_id: int) -> SimGpuInstance:
    """nvmlDeviceGetGpuInstanceById: NOT_SUPPORTED with MIG off, NOT_FOUND for an unknown ID."""
    require_mig_enabled(gpu)
    gi = find_gpu_instance(gpu, gpu_instance_id)
    if gi is None:
        raise SimNvmlError(pynvml.NVML_ERROR_NOT_FOUND, f"GPU {gpu.index} has no GPU instance {gpu_instance_id}")
    return gi


def compute_instance_by_id(gi: SimGpuInstance, compute_instance_id: int) -> SimComputeInstance:
    ci = find_compute_instance(gi, compute_instance_id)
    if ci is None:
        raise SimNvmlError(
            pynvml.NVML_ERROR_NOT_FOUND,
            f"GPU instance {gi.gpu_instance_id} has no compute instance {compute_instance_id}",
        )
    return ci


def gpu_profile_by_index(state: SimState, gpu: SimGpu, nvml_profile_index: int) -> GpuInstanceProfile:
    """nvmlDeviceGetGpuInstanceProfileInfo(V): the argument is an NVML_GPU_INSTANCE_PROFILE_* index.

    An index the simulated *driver* does not know is INVALID_ARGUMENT, whatever pynvml knows (recorded:
    driver 580.159.04 answers index 17 so under pynvml 13.615); a known one the GPU lacks is
    NOT_SUPPORTED.  Answers with MIG disabled too (recorded).
    """
    known = load_catalog().gpu_instance_profile_index_count(state.driver_version)
    if not 0 <= nvml_profile_index < known:
        raise SimNvmlError(
            pynvml.NVML_ERROR_INVALID_ARGUMENT,
            f"driver {state.driver_version} knows GPU-instance profile indices 0-{known - 1}, not {nvml_profile_index}",
        )
    try:
        return gpu_model(gpu).profile_by_index(nvml_profile_index)
    except KeyError as e:
        raise SimNvmlError(pynvml.NVML_ERROR_NOT_SUPPORTED, str(e)) from e


def gpu_profile_by_id(gpu: SimGpu, profile_id: int) -> GpuInstanceProfile:
    """Profile IDs are chip specific; one this GPU does not have is an invalid argument (UNCONFIRMED)."""
    try:
        return gpu_model(gpu).profile_by_id(profile_id)
    except KeyError as e:
        raise SimNvmlError(pynvml.NVML_ERROR_INVALID_ARGUMENT, str(e)) from e


def compute_profile(gi_profile: GpuInstanceProfile, ci_profile_id: int) -> ComputeInstanceProfile:
    """A CI profile of this GI profile: out of NVML's range → INVALID_ARGUMENT, absent → NOT_SUPPORTED."""
    if not 0 <= ci_profile_id < pynvml.NVML_COMPUTE_INSTANCE_PROFILE_COUNT:
        raise SimNvmlError(pynvml.NVML_ERROR_INVALID_ARGUMENT, f"no compute-instance profile {ci_profile_id}")
    try:
        return gi_profile.compute_instance_profile(ci_profile_id)
    except KeyError as e:
        raise SimNvmlError(pynvml.NVML_ERROR_NOT_SUPPORTED, str(e)) from e


def mig_devices(gpu: SimGpu) -> list[MigDevice]:
    """The GPU's MIG devices in NVML index order: ascending GI ID, then CI ID (UNCONFIRMED order)."""
    return [
        MigDevice(gi, ci)
        for gi in sorted(gpu.gpu_instances, key=lambda g: g.gpu_instance_id)
        for ci in sorted(gi.compute_instances, key=lambda c: c.compute_instance_id)
    ]


def max_mig_device_count(gpu: SimGpu) -> int:
    """nvmlDeviceGetMaxMigDeviceCount: 0 with MIG off, else one per compute slice (UNCONFIRMED)."""
    return gpu_model(gpu).max_compute_instances if gpu.mig_mode_current else 0


@dataclass(frozen=True)
class DeviceRef:
    """What a UUID names: a GPU, or one MIG device on it."""

    gpu: SimGpu
    mig_device: MigDevice | None


def device_by_uuid(state: SimState, device_uuid: str) -> DeviceRef | None:
    for gpu in state.gpus:
        if gpu.uuid == device_uuid:
            return DeviceRef(gpu, None)
        for device in mig_devices(gpu):
            if device.compute_instance.uuid == device_uuid:
                return DeviceRef(gpu, device)
    return None


# --- GPU instances --------------------------------------------------------------------------------


def _media_engine_conflict(new: GpuInstanceProfile, existing: GpuInstanceProfile) -> bool:
    new_takes_all = new.nvml_profile_index in _ALL_MEDIA_ENGINE_INDICES
    existing_takes_all = existing.nvml_profile_index in _ALL_MEDIA_ENGINE_INDICES
    new_needs_some = new.nvml_profile_index not in _NO_MEDIA_ENGINE_INDICES
    existing_needs_some = existing.nvml_profile_index not in _NO_MEDIA_ENGINE_INDICES
    return (new_takes_all and existing_needs_some) or (existing_takes_all and new_needs_some)


def gpu_instance_shortage(gpu: SimGpu, profile: GpuInstanceProfile) -> str | None:
    """Why no further GI of ``profile`` fits anywhere on the GPU now, or None if one might.

    Placement overlap is checked separately (:func:`free_gpu_placements`).
    """
    model = gpu_model(gpu)
    existing = [gpu_profile(gpu, gi) for gi in gpu.gpu_instances]
    if len(existing) >= model.max_gpu_instances:
        return f"GPU {gpu.index} already holds its maximum of {model.max_gpu_instances} GPU instances"
    if sum(1 for p in existing if p.profile_id == profile.profile_id) >= profile.instance_count:
        return f"profile {profile.name} allows {profile.instance_count} instance(s), all in use"
    if sum(p.slice_count for p in existing) + profile.slice_count > model.compute_slices:
        return f"not enough free compute slices for {profile.name}"
    budget = model.resource_budget
    for field in RESOURCE_FIELDS:
        if sum(getattr(p, field) for p in existing) + getattr(profile, field) > budget[field]:
            return f"not enough {field.removesuffix('_count')} left on GPU {gpu.index} for {profile.name}"
    blocker = next((p for p in existing if _media_engine_conflict(profile, p)), None)
    if blocker is not None:
        return f"{profile.name} cannot share media engines with {blocker.name}"
    return None


def free_gpu_placements(gpu: SimGpu, profile: GpuInstanceProfile) -> list[Placement]:
    """The profile's legal placements that overlap no existing GI, in catalog order."""
    occupied = [gi.placement for gi in gpu.gpu_instances]
    return [p for p in profile.placements if not any(p.overlaps(o) for o in occupied)]


def gpu_instance_remaining_capacity(gpu: SimGpu, profile: GpuInstanceProfile) -> int:
    """How many more GIs of ``profile`` could be created now (nvidia-smi -lgip "Free").

    With MIG disabled this is the full count, not NOT_SUPPORTED (recorded on H200, driver 580.159.04):
    the GPU holds no instances then, so the same computation gives it.
    """
    if gpu_instance_shortage(gpu, profile) is not None:
        return 0
    model = gpu_model(gpu)
    existing = [gpu_profile(gpu, gi) for gi in gpu.gpu_instances]
    same = sum(1 for p in existing if p.profile_id == profile.profile_id)
    free_compute = model.compute_slices - sum(p.slice_count for p in existing)
    return min(
        len(free_gpu_placements(gpu, profile)),
        profile.instance_count - same,
        model.max_gpu_instances - len(existing),
        free_compute // profile.slice_count,
    )


def _default_placement_order(model: GpuModel, profile: GpuInstanceProfile) -> list[Placement]:
    """Placements nvmlDeviceCreateGpuInstance tries, in the catalog's recorded order.

    Legal placements the recorded order does not mention are tried last, lowest start first, so a
    catalog gap cannot make a profile uncreatable without a placement.
    """
    ordered = [
        p
        for start in model.default_placement_order.get(profile.placement_size, ())
        if (p := profile.placement_at(start))
    ]
    return ordered + sorted((p for p in profile.placements if p not in ordered), key=lambda p: p.start)


def create_gpu_instance(gpu: SimGpu, profile_id: int, placement: Placement | None) -> SimGpuInstance:
    """nvmlDeviceCreateGpuInstance(WithPlacement) on ``gpu`` (mutated in place)."""
    require_mig_enabled(gpu)
    model = gpu_model(gpu)
    profile = gpu_profile_by_id(gpu, profile_id)
    if placement is not None and placement not in profile.placements:
        legal = ", ".join(str(p) for p in profile.placements)
        raise SimNvmlError(
            pynvml.NVML_ERROR_INVALID_ARGUMENT, f"{placement} is not a placement of {profile.name} (legal: {legal})"
        )
    shortage = gpu_instance_shortage(gpu, profile)
    if shortage is not None:
        raise SimNvmlError(pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES, shortage)
    free = free_gpu_placements(gpu, profile)
    if placement is None:
        chosen = next((p for p in _default_placement_order(model, profile) if p in free), None)
        if chosen is None:
            raise SimNvmlError(pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES, f"no free placement for {profile.name}")
    elif placement not in free:
        raise SimNvmlError(pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES, f"{placement} overlaps an existing GPU instance")
    else:
        chosen = placement
    gi = SimGpuInstance(gpu_instance_id=model.gpu_instance_id(chosen), profile_id=profile.profile_id, placement=chosen)
    # Non-overlapping placements always map to distinct IDs; a clash means a broken catalog rule.
    if find_gpu_instance(gpu, gi.gpu_instance_id) is not None:
        raise SimNvmlError(pynvml.NVML_ERROR_UNKNOWN, f"GI ID {gi.gpu_instance_id} would be assigned twice")
    gpu.gpu_instances.append(gi)
    return gi


def _gpu_held(gpu: SimGpu) -> str | None:
    if gpu.busy:
        return f"a process holds GPU {gpu.index}"
    busy = next((d for d in mig_devices(gpu) if d.compute_instance.busy), None)
    if busy is not None:
        return f"a process holds MIG device {busy.compute_instance.uuid}"
    return None


def destroy_gpu_instance(gpu: SimGpu, gpu_instance_id: int) -> None:
    """nvmlGpuInstanceDestroy: IN_USE while compute instances exist or a process holds the GPU."""
    gi = gpu_instance_by_id(gpu, gpu_instance_id)
    if gi.compute_instances:
        raise SimNvmlError(
            pynvml.NVML_ERROR_IN_USE,
            f"GPU instance {gpu_instance_id} still has {len(gi.compute_instances)} compute instance(s)",
        )
    if gpu.busy:
        raise SimNvmlError(pynvml.NVML_ERROR_IN_USE, f"a process holds GPU {gpu.index}")
    gpu.gpu_instances.remove(gi)


# --- compute instances ----------------------------------------------------------------------------


def _compute_shortage(gi: SimGpuInstance, ci_profile: ComputeInstanceProfile) -> str | None:
    if sum(1 for ci in gi.compute_instances if ci.ci_profile_id == ci_profile.profile_id) >= ci_profile.instance_count:
        return f"compute profile {ci_profile.name} allows {ci_profile.instance_count} instance(s), all in use"
    return None


def free_compute_placements(gi: SimGpuInstance, ci_profile: ComputeInstanceProfile) -> list[Placement]:
    occupied = [ci.placement for ci in gi.compute_instances]
    return [p for p in ci_profile.placements if not any(p.overlaps(o) for o in occupied)]


def compute_instance_remaining_capacity(gi: SimGpuInstance, ci_profile: ComputeInstanceProfile) -> int:
    if _compute_shortage(gi, ci_profile) is not None:
        return 0
    same = sum(1 for ci in gi.compute_instances if ci.ci_profile_id == ci_profile.profile_id)
    return min(len(free_compute_placements(gi, ci_profile)), ci_profile.instance_count - same)


def _mig_uuid(state: SimState, gpu: SimGpu, gi: SimGpuInstance, compute_instance_id: int) -> str:
    # uuid5 gives the "MIG-xxxxxxxx-xxxx-5xxx-…" shape seen on R470+ drivers; the serial makes a
    # re-created instance at the same IDs a new device, as a new UUID tells consumers.
    state.instance_serial += 1
    name = f"mig/{gpu.uuid}/{gi.gpu_instance_id}/{compute_instance_id}/{state.instance_serial}"
    return f"MIG-{uuid.uuid5(uuid.UUID(state.uuid_namespace), name)}"


def create_compute_instance(
    state: SimState, gpu: SimGpu, gi: SimGpuInstance, ci_profile_id: int, placement: Placement | None
) -> SimComputeInstance:
    """nvmlGpuInstanceCreateComputeInstance(WithPlacement) inside ``gi`` (mutated in place)."""
    ci_profile = compute_profile(gpu_profile(gpu, gi), ci_profile_id)
    if placement is not None and placement not in ci_profile.placements:
        legal = ", ".join(str(p) for p in ci_profile.placements)
        raise SimNvmlError(
            pynvml.NVML_ERROR_INVALID_ARGUMENT, f"{placement} is not a placement of {ci_profile.name} (legal: {legal})"
        )
    shortage = _compute_shortage(gi, ci_profile)
    if shortage is not None:
        raise SimNvmlError(pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES, shortage)
    free = free_compute_placements(gi, ci_profile)
    if placement is None:
        if not free:
            raise SimNvmlError(
                pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES, f"no free compute slices for {ci_profile.name}"
            )
        chosen = free[0]
    elif placement not in free:
        raise SimNvmlError(pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES, f"{placement} overlaps a compute instance")
    else:
        chosen = placement
    taken = {ci.compute_instance_id for ci in gi.compute_instances}
    compute_instance_id = next(i for i in range(len(taken) + 1) if i not in taken)
    ci = SimComputeInstance(
        compute_instance_id=compute_instance_id,
        ci_profile_id=ci_profile.profile_id,
        placement=chosen,
        uuid=_mig_uuid(state, gpu, gi, compute_instance_id),
    )
    gi.compute_instances.append(ci)
    return ci


def destroy_compute_instance(gpu: SimGpu, gi: SimGpuInstance, compute_instance_id: int) -> None:
    """nvmlComputeInstanceDestroy: IN_USE while a process holds the MIG device or the GPU."""
    ci = compute_instance_by_id(gi, compute_instance_id)
    if ci.busy:
        raise SimNvmlError(pynvml.NVML_ERROR_IN_USE, f"a process holds MIG device {ci.uuid}")
    if gpu.busy:
        raise SimNvmlError(pynvml.NVML_ERROR_IN_USE, f"a process holds GPU {gpu.index}")
    gi.compute_instances.remove(ci)


# --- MIG mode and operator actions ----------------------------------------------------------------


def set_mig_mode(gpu: SimGpu, enable: bool) -> int:
    """nvmlDeviceSetMigMode; returns the activationStatus (an NVML return code, 0 = done).

    Ampere only records the *pending* mode (it takes effect at a GPU reset); Hopper and newer switch
    at once.  A GPU a process holds cannot be unbound: the call succeeds, reports IN_USE in
    activationStatus, and nothing changes.
    """
    if enable == gpu.mig_mode_current == gpu.mig_mode_pending:
        return int(pynvml.NVML_SUCCESS)
    if not enable and gpu.gpu_instances:
        raise SimNvmlError(
            pynvml.NVML_ERROR_IN_USE, f"GPU {gpu.index} still has {len(gpu.gpu_instances)} GPU instance(s)"
        )
    if _gpu_held(gpu) is not None:
        return int(pynvml.NVML_ERROR_IN_USE)
    gpu.mig_mode_pending = enable
    if not gpu_model(gpu).mig_mode_change_requires_reset:
        gpu.mig_mode_current = enable
    return int(pynvml.NVML_SUCCESS)


def reset_gpu(gpu: SimGpu) -> None:
    """``nvidia-smi -r``: apply the pending MIG mode.  Refused while instances exist or a process holds it."""
    if gpu.gpu_instances:
        raise HardwareRefusedError(
            f"GPU {gpu.index} still has GPU instances {sorted(g.gpu_instance_id for g in gpu.gpu_instances)}; "
            "destroy them before resetting"
        )
    held = _gpu_held(gpu)
    if held is not None:
        raise HardwareRefusedError(f"cannot reset GPU {gpu.index}: {held}")
    gpu.mig_mode_current = gpu.mig_mode_pending


def gpu_of_device(state: SimState, device_uuid: str) -> SimGpu:
    """The GPU that is, or holds the MIG device, ``device_uuid`` (an operator names devices by UUID)."""
    ref = device_by_uuid(state, device_uuid)
    if ref is None:
        raise HardwareRefusedError(f"no GPU or MIG device with UUID {device_uuid!r}")
    return ref.gpu


def set_busy(gpu: SimGpu, device_uuid: str, busy: bool) -> None:
    """A process starts (``busy``) or stops holding ``gpu`` or its MIG device named by ``device_uuid``."""
    if gpu.uuid == device_uuid:
        gpu.busy = busy
        return
    device = next((d for d in mig_devices(gpu) if d.compute_instance.uuid == device_uuid), None)
    if device is None:
        raise HardwareRefusedError(f"GPU {gpu.index} has no MIG device with UUID {device_uuid!r}")
    device.compute_instance.busy = busy


# --- a new machine --------------------------------------------------------------------------------

# First PCI bus of the simulated GPUs and the stride between them, the way a server's root ports
# spread its GPUs (00000000:1B:00.0, 00000000:2B:00.0, ...).
_FIRST_PCI_BUS = 0x1B
_PCI_BUS_STRIDE = 0x10


def new_machine(
    seed: str, models: list[GpuModel], mig_enabled: bool, driver_version: str, cuda_driver_version: int
) -> SimState:
    """A fresh machine with ``models`` at NVML indices 0, 1, …; UUIDs derive from ``seed`` alone."""
    namespace = uuid.uuid5(uuid.NAMESPACE_URL, f"migdra-sim:{seed}")
    gpus = []
    for index, model in enumerate(models):
        slot = _FIRST_PCI_BUS + _PCI_BUS_STRIDE * index
        gpus.append(
            SimGpu(
                index=index,
                model=model.key,
                uuid=f"GPU-{uuid.uuid5(namespace, f'gpu/{index}')}",
                pci_domain=slot >> 8,
                pci_bus=slot & 0xFF,
                numa_node=index * 2 // len(models),  # two sockets, GPUs split between them
                mig_mode_current=mig_enabled,
                mig_mode_pending=mig_enabled,
            )
        )
    return SimState(
        driver_version=driver_version,
        cuda_driver_version=cuda_driver_version,
        uuid_namespace=str(namespace),
        gpus=gpus,
    )
