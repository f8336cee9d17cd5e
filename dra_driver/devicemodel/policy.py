"""The placement policy: how the published devices are grouped into slices and ordered, which is how a
DRA driver steers kube-scheduler's choice.

kube-scheduler's allocator has no scoring: it takes the first solution in its search order
(docs/allocation.md, "The search order").  From 1.36 that order is: pools by name, the slices of a
pool by ``metadata.name``, the devices of a slice in list order; on 1.35 the slices come in no fixed
order and only the order *inside* each slice is the driver's.  So a policy decides two things:

- the **slice groups**: which devices share a slice, in the order the slices are named (the layout
  names them ``…-devices-000``, ``-001``, … so the name order is the list order, however many there
  are);
- the **device order** inside each group.

Shared GPU-instance devices (``Device.shared``) come in their own slice runs after every exclusive
device, ordered inside each run by the rule the policy applies to exclusive devices: claims for the
exclusive class (``mig.migdra.io``) never select them, and claims for the shared class
(``mig-shared.migdra.io``) select nothing else, so each kind keeps its own best-first order.

A policy sees the pool and the names of the pool's devices that allocated claims hold (its
*occupancy*); it must be deterministic: the same pool and occupancy always give the same slices.

Policies (``PLACEMENT_POLICIES``, chosen by the node plugin's ``placement_policy`` setting):

- ``static``: a good fixed order, blind to occupancy (below).
- ``dynamic``: best fit from the occupancy; re-published as claims come and go (docs/placement.md).
- ``name-order`` and ``hami``: faithful models of NVIDIA's DRA driver and of HAMi, for the packing
  benchmark; not meant for production.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

from dra_driver.devicemodel.fragmentation import fits, free_slices, gpu_profiles, placement_loss
from dra_driver.devicemodel.pool import Device, NodePool

MAX_DEVICES_PER_SLICE = 64  # 128, but 64 when any device consumes counters or has taints

DeviceGroups = list[tuple[Device, ...]]


class PlacementPolicy(Protocol):
    """Groups and orders a pool's devices for publishing."""

    name: str
    uses_occupancy: bool  # whether the order depends on ``allocated`` (then re-publish as it changes)

    def slice_groups(self, pool: NodePool, allocated: frozenset[str]) -> DeviceGroups:
        """The devices of each slice, slices in name order, each at most MAX_DEVICES_PER_SLICE long."""
        ...


def _split(pool: NodePool) -> tuple[list[Device], list[Device]]:
    """The pool's exclusive devices (and whole GPUs), then its shared ones, each in pool order."""
    return [d for d in pool.devices if not d.shared], [d for d in pool.devices if d.shared]


def _by_gpu(devices: Iterable[Device]) -> dict[int, list[Device]]:
    grouped: dict[int, list[Device]] = {}
    for device in devices:
        grouped.setdefault(device.gpu_minor, []).append(device)
    return grouped


def _memory_slices(pool: NodePool, minor: int, devices: Sequence[Device]) -> int:
    for counter_set in pool.counter_sets:
        if counter_set.gpu_minor == minor:
            return counter_set.memory_slices
    return max((d.placement.end for d in devices if d.placement is not None), default=0)


def _is_small(device: Device, memory_slices: int) -> bool:
    return device.placement is not None and 2 * device.placement.size < memory_slices


def pack_runs(runs: Iterable[Sequence[Device]]) -> DeviceGroups:
    """Consecutive runs of devices into slices of at most 64, in order, never splitting a run that fits
    in one slice: a run (one GPU's devices, one profile's) that shares a slice keeps its internal order
    even on 1.35, where only the order inside a slice counts."""
    groups: list[list[Device]] = []
    for run in runs:
        for start in range(0, len(run), MAX_DEVICES_PER_SLICE):  # a run longer than a slice is split
            part = run[start : start + MAX_DEVICES_PER_SLICE]
            if groups and len(groups[-1]) + len(part) <= MAX_DEVICES_PER_SLICE:
                groups[-1].extend(part)
            else:
                groups.append(list(part))
    return [tuple(group) for group in groups]


class StaticPlacementPolicy:
    """Pack GPUs in minor order; on each GPU, small profiles from the high end, large ones from the low end.

    Filling 1g/2g instances from the top (start 6, 5, 4 …) and 3g/4g/7g from slice 0 keeps the big
    contiguous ranges free as long as possible: with a 1g at 6 and a 3g at 0, a 2g still fits at 4,
    whereas first-fit from slice 0 for everything would split the GPU into unusable holes.  Within a
    GPU, smaller profiles come first, so a selector that several profiles satisfy gets the best fit.
    GPUs are packed several to a slice (fewer, fuller slices: on 1.35 only the in-slice order counts).
    Blind to occupancy, so it never re-publishes for it: the API cost is nil.
    """

    name = "static"
    uses_occupancy = False

    def slice_groups(self, pool: NodePool, allocated: frozenset[str]) -> DeviceGroups:
        runs: list[list[Device]] = []
        for devices in _split(pool):
            by_gpu = _by_gpu(devices)
            runs.extend(self.order_devices(by_gpu[m], _memory_slices(pool, m, by_gpu[m])) for m in sorted(by_gpu))
        return pack_runs(runs)

    @staticmethod
    def order_devices(devices: Sequence[Device], memory_slices: int) -> list[Device]:
        def key(device: Device) -> tuple[int, int, int, int, str]:
            if device.placement is None:
                return (0, 0, 0, 0, device.name)
            start = device.placement.start
            return (
                device.placement.size,
                device.compute_slices,
                device.profile_id or 0,
                -start if _is_small(device, memory_slices) else start,
                device.name,
            )

        return sorted(devices, key=key)


class DynamicPlacementPolicy:
    """Best fit from the current occupancy, one slice run per profile.

    Devices are grouped by profile, smaller profiles first (a selector several profiles satisfy gets the
    smallest), every profile's devices of all GPUs together: a request for one profile then sees one
    slice, whose order is the driver's on 1.35 too.  Inside a profile, devices are ordered by

    1. whether the device fits now (its memory slices free): the others cannot be allocated anyway;
    2. the loss of capability of its GPU (:mod:`~dra_driver.devicemodel.fragmentation`): what larger
       profiles placing it there would make impossible, largest first -- so a 1g goes to a GPU that can
       no longer host a 7g before it breaks up an empty one, and on an empty H100 to slice 6, which
       keeps the 4g at 0 and the 2g placements at 0 and 2;
    3. fuller GPUs first (fewer free slices), then the static rule (small from the top, large from
       slice 0) and the GPU minor, for a stable order.

    The order changes as claims come and go: the node plugin re-publishes (debounced, rate-limited).
    Counters and device names never change, and a device moves between slices only as part of a whole
    new pool generation.

    **Interleaved** (``interleave=True``, the default, for Kubernetes 1.36+): the devices that fit now
    are listed rank by rank -- the best of every profile, then the second best of every profile, and so
    on, the profiles in the runs' order (smaller first, exclusive before shared) -- and the devices that
    do not fit follow, run by run.  kube-scheduler's allocator stops at the first device that passes,
    but evaluates the class and request selectors of every device it passes on the way
    (docs/device-model.md, "What kube-scheduler pays per node"): in runs, a claim for a 3g.40gb on an
    empty 8-GPU node walks the 168 smaller devices first; interleaved, it finds its device among the
    first dozen, and after the node's best few 3g.40gb have been taken (between two re-publishes) a
    dozen further per device taken -- devices in use are skipped before any selector is evaluated.
    The choice is the runs' choice: a profile's devices keep their order, so a claim for one profile
    gets the same device, and a selector that several profiles satisfy gets the best of the smallest
    that fits.  On 1.35, where slices come in no fixed order and only the order inside a slice holds,
    the node plugin turns it off and every profile stays in one slice
    (:mod:`kubeletplugin.control_plane_version`).
    """

    name = "dynamic"
    uses_occupancy = True

    def __init__(self, interleave: bool = True) -> None:
        self.interleave = interleave

    def slice_groups(self, pool: NodePool, allocated: frozenset[str]) -> DeviceGroups:
        free = free_slices(pool, allocated)
        exclusive, shared = _split(pool)
        by_gpu = _by_gpu(exclusive)
        profiles = {minor: gpu_profiles(devices) for minor, devices in by_gpu.items()}
        slices = {minor: _memory_slices(pool, minor, devices) for minor, devices in by_gpu.items()}
        whole = [d for d in exclusive if d.placement is None]

        def usable(device: Device) -> bool:  # a shared device with claims, or one whose memory slices are free
            return (device.shared and device.name in allocated) or fits(device, free)

        def order(device: Device) -> tuple[object, ...]:
            placement = device.placement
            assert placement is not None
            minor = device.gpu_minor
            gpu_free = free.get(minor, frozenset())
            # A shared device that already serves claims costs the GPU nothing more: it comes first.
            if device.shared and device.name in allocated:
                return (0, (), 0, 0, minor, device.name)
            if not usable(device):
                return (2, (), 0, 0, minor, device.name)
            loss = placement_loss(profiles.get(minor, ()), gpu_free, placement)
            preference = -placement.start if _is_small(device, slices.get(minor, 0)) else placement.start
            return (1, loss, len(gpu_free), preference, minor, device.name)

        ordered_runs = [*self._profile_runs(exclusive, order), *self._profile_runs(shared, order)]
        if self.interleave:
            ordered_runs = self._interleaved(ordered_runs, usable)
        runs = [sorted(whole, key=lambda d: d.gpu_minor), *ordered_runs] if whole else ordered_runs
        return pack_runs([run for run in runs if run])

    @staticmethod
    def _interleaved(runs: list[list[Device]], usable: Callable[[Device], bool]) -> list[list[Device]]:
        """The usable devices of all runs rank by rank (every run's first, then every run's second, ...),
        then each run's devices that are not usable."""
        fitting = [[d for d in run if usable(d)] for run in runs]
        ranks = max((len(run) for run in fitting), default=0)
        by_rank = [run[rank] for rank in range(ranks) for run in fitting if rank < len(run)]
        return [by_rank, *([d for d in run if not usable(d)] for run in runs)]

    @staticmethod
    def _profile_runs(devices: Iterable[Device], order: Callable[[Device], tuple[object, ...]]) -> list[list[Device]]:
        """One run per profile (smaller first), each in ``order``."""
        runs: dict[tuple[int, int, str], list[Device]] = {}
        for device in devices:
            if device.placement is not None:
                key = (device.placement.size, device.compute_slices, device.profile_name or "")
                runs.setdefault(key, []).append(device)
        return [sorted(runs[key], key=order) for key in sorted(runs)]


class NameOrderPlacementPolicy:
    """NVIDIA's DRA driver, for comparison: one slice per GPU, devices sorted by name.

    Its slices are named by the Go slice controller (``<node>-<driver>-`` plus a generated suffix), so
    the order of the GPUs' slices is fixed but arbitrary: modelled by a hash of node and GPU.  Sorted by
    name, a GPU's devices come profile by profile with the lowest start first (``…-1g10gb-19-0`` before
    ``-19-1``), so small instances fill a GPU from slice 0 and break up the 3g/4g/7g ranges.
    """

    name = "name-order"
    uses_occupancy = False

    def slice_groups(self, pool: NodePool, allocated: frozenset[str]) -> DeviceGroups:
        groups: DeviceGroups = []
        for devices in _split(pool):
            by_gpu = _by_gpu(devices)

            def generated(minor: int, by_gpu: dict[int, list[Device]] = by_gpu) -> str:
                uuid = by_gpu[minor][0].gpu_uuid
                return hashlib.sha256(f"{pool.driver_name}/{uuid}".encode()).hexdigest()

            for minor in sorted(by_gpu, key=generated):
                groups.extend(pack_runs([sorted(by_gpu[minor], key=lambda d: d.name)]))  # never two GPUs in a slice
        return groups


class HamiPlacementPolicy:
    """HAMi's MIG placement, for comparison: GPUs in a fixed order, the first that fits wins; on a GPU,
    1g and 3g instances take the highest free start, every other profile the lowest.

    HAMi's own scheduler picks the free start from its occupancy view; with the allocator's first-fit
    over a list, listing 1g/3g placements highest start first and the rest lowest first gives exactly
    that choice.  One slice per GPU, in minor order.
    """

    name = "hami"
    uses_occupancy = False

    def slice_groups(self, pool: NodePool, allocated: frozenset[str]) -> DeviceGroups:
        def key(device: Device) -> tuple[int, int, int, int]:
            if device.placement is None:
                return (0, 0, 0, 0)
            start = device.placement.start
            high_first = device.compute_slices in (1, 3)
            return (
                device.placement.size,
                device.compute_slices,
                device.profile_id or 0,
                -start if high_first else start,
            )

        groups: DeviceGroups = []
        for devices in _split(pool):
            by_gpu = _by_gpu(devices)
            for minor in sorted(by_gpu):
                groups.extend(pack_runs([sorted(by_gpu[minor], key=key)]))
        return groups


PLACEMENT_POLICIES: dict[str, Callable[[], PlacementPolicy]] = {
    StaticPlacementPolicy.name: StaticPlacementPolicy,
    DynamicPlacementPolicy.name: DynamicPlacementPolicy,
    NameOrderPlacementPolicy.name: NameOrderPlacementPolicy,
    HamiPlacementPolicy.name: HamiPlacementPolicy,
}
PRODUCTION_POLICIES = ("static", "dynamic")
DEFAULT_POLICY = "dynamic"


def placement_policy(name: str) -> PlacementPolicy:
    """The policy called ``name``; a ValueError naming the known ones otherwise."""
    try:
        return PLACEMENT_POLICIES[name]()
    except KeyError:
        known = ", ".join(PLACEMENT_POLICIES)
        raise ValueError(f"unknown placement policy {name!r}; known: {known}") from None
