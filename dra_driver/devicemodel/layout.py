"""Cut a :class:`~dra_driver.devicemodel.pool.NodePool` into ``resource.k8s.io/v1`` ResourceSlices.

Layout rules (Kubernetes 1.35+ partitionable devices, docs/resource-api.md, "ResourceSlice"):

- one pool per node, pool name = node name; every slice carries the pool's ``generation`` and the
  total ``resourceSliceCount``;
- counter sets live in their own slices (a slice holds devices *or* sharedCounters), at most 8 sets
  per slice;
- devices go into device slices of at most 64 devices (the limit when devices consume counters); which
  devices share a slice and their order inside it come from the placement policy
  (:mod:`dra_driver.devicemodel.policy`), which may look at the pool's occupancy;
- device slices are named in the policy's order with a zero-padded index
  (``<node>-<driver>-devices-000``, ``-001``, …): kube-scheduler 1.36+ visits a pool's slices sorted
  by name, so name order must be list order however many slices there are (``-10`` would sort before
  ``-2``).

Slice names are deterministic (``<node>-<driver>-counters-<n>``, ``<node>-<driver>-devices-<nnn>``) so
a republish updates slices in place instead of churning them.  Pure: no I/O.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dra_driver.devicemodel.policy import MAX_DEVICES_PER_SLICE, PlacementPolicy, StaticPlacementPolicy
from dra_driver.devicemodel.pool import Device, NodePool

MAX_COUNTER_SETS_PER_SLICE = 8
DEVICE_SLICE_INDEX_WIDTH = 3  # 1000 slices of 64 devices: far beyond any node
_MAX_NAME = 253


@dataclass(frozen=True, slots=True)
class SliceContent:
    """One slice's name and spec content, before pool generation and count are known."""

    name: str
    devices: tuple[Device, ...] = ()
    counter_sets: tuple[Mapping[str, Any], ...] = ()


def _slice_name(node_name: str, driver_name: str, kind: str, index: int, width: int = 0) -> str:
    number = f"{index:0{width}d}"
    name = f"{node_name}-{driver_name}-{kind}-{number}"
    if len(name) <= _MAX_NAME:
        return name
    digest = hashlib.sha256(f"{node_name}/{driver_name}".encode()).hexdigest()[:10]
    return f"{node_name[: _MAX_NAME - len(kind) - 24]}-{digest}-{kind}-{number}"


def plan_slices(
    pool: NodePool,
    node_name: str,
    policy: PlacementPolicy | None = None,
    allocated: frozenset[str] = frozenset(),
) -> list[SliceContent]:
    """The slices of the pool: counter slices first, then device slices in the policy's order.

    ``allocated``: names of the pool's devices that allocated claims hold (for an occupancy-aware policy).
    """
    policy = policy or StaticPlacementPolicy()
    contents: list[SliceContent] = []
    sets = [cs.to_api() for cs in sorted(pool.counter_sets, key=lambda cs: cs.gpu_minor)]
    for index, start in enumerate(range(0, len(sets), MAX_COUNTER_SETS_PER_SLICE)):
        chunk = tuple(sets[start : start + MAX_COUNTER_SETS_PER_SLICE])
        contents.append(SliceContent(_slice_name(node_name, pool.driver_name, "counters", index), counter_sets=chunk))
    groups = policy.slice_groups(pool, allocated)
    listed = [device.name for group in groups for device in group]
    if sorted(listed) != sorted(device.name for device in pool.devices):
        raise AssertionError(f"placement policy {policy.name!r} did not list every device of the pool exactly once")
    for index, group in enumerate(groups):
        if len(group) > MAX_DEVICES_PER_SLICE:
            raise AssertionError(f"placement policy {policy.name!r} put {len(group)} devices in one slice")
        name = _slice_name(node_name, pool.driver_name, "devices", index, DEVICE_SLICE_INDEX_WIDTH)
        contents.append(SliceContent(name, devices=group))
    return contents


def render_slices(
    pool: NodePool,
    node_name: str,
    generation: int,
    owner: Mapping[str, Any] | None = None,
    policy: PlacementPolicy | None = None,
    allocated: frozenset[str] = frozenset(),
    device_api: Callable[[Device], dict[str, object]] | None = None,
) -> list[dict[str, Any]]:
    """Complete ResourceSlice objects for the pool at ``generation``; ``owner`` is an ownerReference.

    ``device_api`` renders one device (default :meth:`Device.to_api`); a simulation passes a cached one
    so that the same device is the same dict in every re-publish, as in an informer's cache.
    """
    contents = plan_slices(pool, node_name, policy, allocated)
    return render_planned(contents, pool, node_name, generation, owner, device_api)


def render_planned(
    contents: Sequence[SliceContent],
    pool: NodePool,
    node_name: str,
    generation: int,
    owner: Mapping[str, Any] | None = None,
    device_api: Callable[[Device], dict[str, object]] | None = None,
) -> list[dict[str, Any]]:
    """The ResourceSlice objects of slices already planned (:func:`plan_slices`)."""
    to_api = device_api or Device.to_api
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
            spec["devices"] = [to_api(device) for device in content.devices]
        metadata: dict[str, Any] = {"name": content.name}
        if owner is not None:
            metadata["ownerReferences"] = [dict(owner)]
        slices.append({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": metadata, "spec": spec})
    return slices
