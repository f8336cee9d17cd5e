"""Whether NVML still shows the instances a completed claim record names.

Start-up recovery adopts a completed record on it, and a prepare of a claim already prepared checks it
before it returns the recorded devices: an operator may have destroyed migdra's instance and created
another in its place (NVML may even give it the same GI ID), and a pod must never get a MIG UUID that
no longer exists.  Admin access and whole GPUs created nothing and are not checked.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from dra_driver.nvml.backend import Nvml
from dra_driver.nvml.errors import NvmlError
from dra_driver.nvml.types import GpuInstanceInfo
from kubeletplugin.prepare.errors import LockTimeoutError
from kubeletplugin.prepare.locks import KeyedLocks
from kubeletplugin.prepare.records import ClaimRecord

log = logging.getLogger(__name__)


def compute_verification_problems(record: ClaimRecord, instances: Mapping[str, Sequence[GpuInstanceInfo]]) -> list[str]:
    """Why ``record``'s instances do not match NVML's ``instances`` (per GPU UUID); [] = verified.  Pure."""
    problems: list[str] = []
    for device in record.devices:
        intent = device.intent
        if intent.admin_access or not intent.is_mig:
            continue
        name = intent.device_name
        if device.gpu_instance_id is None or device.compute_instance_id is None or device.mig_uuid is None:
            problems.append(f"{name}: the record lacks the realized GI/CI identity")
            continue
        gi = next((g for g in instances.get(intent.gpu_uuid, ()) if g.gpu_instance_id == device.gpu_instance_id), None)
        if gi is None:
            problems.append(f"{name}: GI {device.gpu_instance_id} no longer exists on GPU {intent.gpu_uuid}")
            continue
        if gi.placement != intent.placement or gi.profile_id != intent.profile_id:
            problems.append(
                f"{name}: GI {gi.gpu_instance_id} is profile {gi.profile_id} at {gi.placement}, the record says "
                f"profile {intent.profile_id} at {intent.placement}"
            )
            continue
        ci = next((c for c in gi.compute_instances if c.compute_instance_id == device.compute_instance_id), None)
        if ci is None:
            problems.append(f"{name}: CI {device.compute_instance_id} of GI {gi.gpu_instance_id} no longer exists")
        elif ci.mig_uuid != device.mig_uuid:
            problems.append(f"{name}: CI {ci.compute_instance_id} is {ci.mig_uuid}, the record says {device.mig_uuid}")
    return problems


def read_instances(
    nvml: Nvml, gpu_locks: KeyedLocks, gpu_uuids: set[str]
) -> tuple[dict[str, list[GpuInstanceInfo]], set[str]]:
    """GPU instances per GPU, and the GPUs that could not be read (to be left alone).

    Each GPU is read under its lock: a GI that another plugin process destroys in the middle of a
    read would make NVML fail the read (a stale handle), and a GPU that cannot be read is not acted on.
    """
    found: dict[str, list[GpuInstanceInfo]] = {}
    unreadable: set[str] = set()
    for gpu_uuid in sorted(gpu_uuids):
        try:
            with gpu_locks.hold(gpu_uuid):
                found[gpu_uuid] = nvml.gpu_instances(gpu_uuid)
        except (NvmlError, LockTimeoutError) as e:
            log.error("cannot read the instances of GPU %s (%s); its records are left untouched", gpu_uuid, e)
            unreadable.add(gpu_uuid)
    return found, unreadable


def record_gpus(record: ClaimRecord) -> set[str]:
    """The GPUs on which ``record`` may have created instances (admin access and whole GPUs create none)."""
    return {d.intent.gpu_uuid for d in record.devices if d.intent.is_mig and not d.intent.admin_access}


def read_verification_problems(nvml: Nvml, gpu_locks: KeyedLocks, record: ClaimRecord) -> list[str] | None:
    """Why a completed ``record`` does not match NVML now ([] = verified); None when a GPU is unreadable."""
    instances, unreadable = read_instances(nvml, gpu_locks, record_gpus(record))
    if unreadable:
        return None
    return compute_verification_problems(record, instances)
