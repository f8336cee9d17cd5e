"""A claim's plan: what each of its devices means on this node, checked before anything is recorded.

From this driver's allocation results in this node's pool: each device name resolved against NVML
(GPU, GI profile, placement), its requests and opaque configuration, its share; then the plan step of
each device's kind (:mod:`~kubeletplugin.prepare.kinds`): is its placement free?  Every problem of the
claim is reported at once -- its configuration, each of its devices -- so one failed prepare says all
that must change, and nothing is created for a claim that cannot be prepared.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from dra_driver.nvml.errors import NvmlError
from dra_driver.nvml.types import GpuInstanceInfo
from kubeletplugin.prepare.claims import AllocatedDevice, ClaimAllocation
from kubeletplugin.prepare.config import compute_device_config, parse_driver_configs
from kubeletplugin.prepare.devices import DeviceTarget, NodeGpus, compute_device_target
from kubeletplugin.prepare.errors import (
    DeviceConfigError,
    DeviceConflictError,
    DeviceResolutionError,
    PrepareError,
    RealizeError,
)
from kubeletplugin.prepare.kinds import PrepareContext, kind_of
from kubeletplugin.prepare.records import DeviceIntent, DeviceRecord, compute_conflicting_device

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ClaimPlan:
    """Each device's intent, in the order they will be created, and what it resolved to."""

    intents: tuple[DeviceIntent, ...]
    targets: dict[str, DeviceTarget]


def plan_claim(gpus: NodeGpus, allocation: ClaimAllocation, driver_name: str) -> ClaimPlan:
    """The claim's intents; empty when none of its results is this driver's.  Raises the first problem's
    type with every problem's message."""
    grouped = _group_by_device(allocation.devices)
    if not grouped:
        return ClaimPlan((), {})
    shares = _shares_by_device(allocation.devices)
    try:
        topology = gpus.topology(grouped)
    except NvmlError as e:
        raise RealizeError(f"reading the node's GPUs through NVML failed: {e}") from e
    problems: list[PrepareError] = []
    try:
        configs = parse_driver_configs(allocation.configs, driver_name)
    except DeviceConfigError as e:
        problems.append(e)
        configs = ()
    intents: list[DeviceIntent] = []
    targets: dict[str, DeviceTarget] = {}
    for device_name, (requests, admin_access) in grouped.items():
        share = shares.get(device_name)
        try:
            target = compute_device_target(device_name, topology, admin_access=admin_access)
            # Admin access to a shared device gets a shareID too (kube-scheduler gives every result on a
            # multi-allocatable device one): kept, so its status entry and kubelet's answer carry it;
            # DeviceIntent.is_share leaves admin access out, so nothing is created for it.
            if share is not None:
                if not target.shared:
                    raise DeviceResolutionError(
                        f"device {device_name}: a shareID was allocated, but it is not a shared device"
                    )
                problem = target.share_size_problem(share[1])
                if problem is not None:
                    raise DeviceResolutionError(problem)
        except DeviceResolutionError as e:
            problems.append(e)
            continue
        targets[device_name] = target
        intents.append(_intent_of(target, requests, admin_access, compute_device_config(configs, requests), share))
    if problems:
        raise type(problems[0])("; ".join(problem.message for problem in problems))
    return ClaimPlan(tuple(intents), targets)


def check_placements_free(context: PrepareContext, claim_uid: str, intents: Sequence[DeviceIntent]) -> None:
    """Refuse before touching anything: overlapping devices in the claim, or an occupied placement.

    Advisory: each kind's create checks again under the GPU's lock.  The records are read after the
    instances, so an instance another claim's prepare created is attributed to that claim.
    """
    instances: dict[str, list[GpuInstanceInfo]] = {}
    for position, intent in enumerate(intents):
        earlier = [DeviceRecord(intent=i) for i in intents[:position]]
        clash = compute_conflicting_device(intent, earlier)
        if clash is not None:
            raise DeviceConflictError(
                f"devices {clash.intent.device_name} and {intent.device_name} overlap on GPU {intent.gpu_uuid}"
            )
        kind = kind_of(intent)
        if not kind.creates_instances:
            continue
        if intent.gpu_uuid not in instances:
            instances[intent.gpu_uuid] = _read_gpu_instances(context, intent)
        conflict = kind.plan(instances[intent.gpu_uuid], intent, context.store.records(), claim_uid)
        if conflict is not None:
            raise DeviceConflictError(conflict.describe(intent))


def _read_gpu_instances(context: PrepareContext, intent: DeviceIntent) -> list[GpuInstanceInfo]:
    """The GPU's instances: read without its lock first, so a prepare does not wait behind another
    claim's creation on the GPU just to look; a read that fails is read again under the lock.

    Why: a GI destroyed while NVML lists the GPU's instances (another claim being unprepared, in
    this or the other plugin process) fails the listing with INVALID_ARGUMENT (a stale handle).
    Under the GPU's lock no migdra process destroys anything, so the second read fails only for a
    reason of its own (or an operator destroying an instance at that very moment).
    """
    try:
        return context.nvml.gpu_instances(intent.gpu_uuid)
    except NvmlError as e:
        log.info("reading GPU %s failed (%s); reading it again under its lock", intent.gpu_uuid, e)
    try:
        with context.gpu_locks.hold(intent.gpu_uuid):
            return context.nvml.gpu_instances(intent.gpu_uuid)
    except NvmlError as e:
        raise RealizeError(f"device {intent.device_name}: reading GPU {intent.gpu_uuid} failed: {e}") from e


def _group_by_device(devices: Sequence[AllocatedDevice]) -> dict[str, tuple[tuple[str, ...], bool]]:
    """Results per device name (a device listed twice is one instance): its requests, admin-only?"""
    requests: dict[str, list[str]] = {}
    admin: dict[str, bool] = {}
    for device in devices:
        requests.setdefault(device.device_name, [])
        if device.request not in requests[device.device_name]:
            requests[device.device_name].append(device.request)
        admin[device.device_name] = admin.get(device.device_name, True) and device.admin_access
    return {name: (tuple(reqs), admin[name]) for name, reqs in requests.items()}


def _shares_by_device(devices: Sequence[AllocatedDevice]) -> dict[str, tuple[str, int]]:
    """(shareID, compute slices) per device name of the results that are shares.  One share per device
    per claim: two shares of one device in one claim are refused (one CDI device per device name)."""
    shares: dict[str, tuple[str, int]] = {}
    for device in devices:
        if device.share_id is None or device.share_size is None:
            continue
        known = shares.setdefault(device.device_name, (device.share_id, device.share_size))
        if known[0] != device.share_id:
            raise DeviceResolutionError(
                f"status.allocation.devices.results[{device.position}].shareID: device {device.device_name} is "
                f"allocated to this claim twice (shares {known[0]} and {device.share_id}); migdra prepares one "
                "share of a device per claim"
            )
    return shares


def _intent_of(
    target: DeviceTarget,
    requests: tuple[str, ...],
    admin_access: bool,
    env: dict[str, str],
    share: tuple[str, int] | None,
) -> DeviceIntent:
    profile = target.profile
    return DeviceIntent(
        device_name=target.device_name,
        request_names=requests,
        admin_access=admin_access,
        gpu_uuid=target.gpu_uuid,
        gpu_minor=target.gpu_minor,
        profile_id=profile.profile_id if profile is not None else None,
        profile_name=target.profile_name,
        placement=target.placement,
        multiprocessor_count=profile.multiprocessor_count if profile is not None else None,
        memory_bytes=profile.memory_size_mb << 20 if profile is not None else None,
        env=env,
        share_id=share[0] if share is not None else None,
        share_size=share[1] if share is not None else None,
    )
