"""Cut a :class:`~dra_driver.devicemodel.pool.NodePool` into ``resource.k8s.io/v1`` ResourceSlices.

Layout rules (Kubernetes 1.35+ partitionable devices, see resource-api.md):

- one pool per node, pool name = node name; every slice carries the pool's ``generation`` and the
  total ``resourceSliceCount``;
- counter sets live in their own slices (a slice holds devices *or* sharedCounters), at most 8 sets
  per slice;
- devices go into device slices of at most 64 devices (the limit when devices consume counters);
  whole GPUs are kept together and several GPUs share a slice where they fit, because the scheduler
  honours device order only *inside* a slice: fewer, fuller slices give the placement policy more say;
- device order inside a slice comes from the placement policy.

Slice names are deterministic (``<node>-<driver>-counters-<n>``, ``<node>-<driver>-devices-<n>``) so a
republish updates slices in place instead of churning them.  Pure: no I/O.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dra_driver.devicemodel.policy import PlacementPolicy, StaticPlacementPolicy
from dra_driver.devicemodel.pool import Device, NodePool

MAX_DEVICES_PER_SLICE = 64  # 128, but 64 when any device consumes counters or has taints
MAX_COUNTER_SETS_PER_SLICE = 8
_MAX_NAME = 253


@dataclass(frozen=True, slots=True)
class SliceContent:
    """One slice's name and spec content, before pool generation and count are known."""

    name: str
    devices: tuple[Device, ...] = ()
    counter_sets: tuple[Mapping[str, Any], ...] = ()


def _slice_name(node_name: str, driver_name: str, kind: str, index: int) -> str:
    name = f"{node_name}-{driver_name}-{kind}-{index}"
    if len(name) <= _MAX_NAME:
        return name
    digest = hashlib.sha256(f"{node_name}/{driver_name}".encode()).hexdigest()[:10]
    return f"{node_name[: _MAX_NAME - len(kind) - 24]}-{digest}-{kind}-{index}"


def plan_slices(pool: NodePool, node_name: str, policy: PlacementPolicy | None = None) -> list[SliceContent]:
    """The slices of the pool: counter slices first, then device slices, in a stable order."""
    policy = policy or StaticPlacementPolicy()
    contents: list[SliceContent] = []
    sets = [cs.to_api() for cs in sorted(pool.counter_sets, key=lambda cs: cs.gpu_minor)]
    for index, start in enumerate(range(0, len(sets), MAX_COUNTER_SETS_PER_SLICE)):
        chunk = tuple(sets[start : start + MAX_COUNTER_SETS_PER_SLICE])
        contents.append(SliceContent(_slice_name(node_name, pool.driver_name, "counters", index), counter_sets=chunk))

    by_gpu: dict[int, list[Device]] = {}
    for device in pool.devices:
        by_gpu.setdefault(device.gpu_minor, []).append(device)
    slices_of_gpu = {cs.gpu_minor: cs.memory_slices for cs in pool.counter_sets}
    batches: list[list[Device]] = []
    for minor in policy.order_gpus(list(by_gpu)):
        memory_slices = slices_of_gpu.get(minor) or _memory_slices(by_gpu[minor])
        ordered = policy.order_devices(by_gpu[minor], memory_slices)
        for start in range(0, len(ordered), MAX_DEVICES_PER_SLICE):  # a GPU larger than a slice is split
            part = ordered[start : start + MAX_DEVICES_PER_SLICE]
            if batches and len(batches[-1]) + len(part) <= MAX_DEVICES_PER_SLICE:
                batches[-1].extend(part)
            else:
                batches.append(list(part))
    for index, batch in enumerate(batches):
        contents.append(SliceContent(_slice_name(node_name, pool.driver_name, "devices", index), devices=tuple(batch)))
    return contents


def _memory_slices(devices: Sequence[Device]) -> int:
    return max((d.placement.end for d in devices if d.placement is not None), default=0)


def render_slices(
    pool: NodePool,
    node_name: str,
    generation: int,
    owner: Mapping[str, Any] | None = None,
    policy: PlacementPolicy | None = None,
) -> list[dict[str, Any]]:
    """Complete ResourceSlice objects for the pool at ``generation``; ``owner`` is an ownerReference."""
    contents = plan_slices(pool, node_name, policy)
    slices = []
    for content in contents:
        spec: dict[str, Any] = {
            "driver": pool.driver_name,
            "pool": {"name": node_name, "generation": generation, "resourceSliceCount": len(contents)},
            "nodeName": node_name,
        }
        if content.counter_sets:
            spec["sharedCounters"] = [dict(cs) for cs in content.counter_sets]
        else:
            spec["devices"] = [device.to_api() for device in content.devices]
        metadata: dict[str, Any] = {"name": content.name}
        if owner is not None:
            metadata["ownerReferences"] = [dict(owner)]
        slices.append({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": metadata, "spec": spec})
    return slices
