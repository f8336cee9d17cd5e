"""What a MIG GPU can still host, and what placing one more instance would cost it.

A GPU's future is the set of its free memory slices: a profile fits where one of its placements lies
wholly inside that set.  Instances of a profile never overlap, and its placements are intervals, so the
most instances of a profile the free slices could still hold is found exactly by the greedy interval
rule (take the placement that ends first, skip those it overlaps, repeat).  The *capability* of a free
set is that count for every profile, largest profiles first; the *loss* of placing an instance is the
capability before minus after.  Comparing losses lexicographically is best fit: whatever does not
cost the GPU a larger profile wins, so small instances go where large ones were already impossible.

Pure and memory-slice based: SMs and engines are the counters' business (the scheduler checks them);
what fragments a GPU is its slices.  Used by the ``dynamic`` placement policy and by ``migdra plan``.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from dra_driver.devicemodel.pool import Device, NodePool
from dra_driver.devicemodel.vocabulary import memory_slice_counter
from dra_driver.mig.catalog import Placement


@dataclass(frozen=True, slots=True)
class ProfilePlacements:
    """One profile of a GPU and the placements its devices are published at."""

    name: str
    size: int  # memory slices of one instance
    compute_slices: int
    placements: tuple[Placement, ...]


def gpu_profiles(devices: Iterable[Device]) -> tuple[ProfilePlacements, ...]:
    """The profiles among one GPU's MIG devices, largest first (the order a capability is compared in)."""
    found: dict[str, tuple[int, int, set[Placement]]] = {}
    for device in devices:
        if device.placement is None or device.profile_name is None:
            continue
        entry = found.setdefault(device.profile_name, (device.placement.size, device.compute_slices, set()))
        entry[2].add(device.placement)
    profiles = [
        ProfilePlacements(name, size, compute, tuple(sorted(placements, key=lambda p: (p.end, p.start))))
        for name, (size, compute, placements) in found.items()
    ]
    return tuple(sorted(profiles, key=lambda p: (-p.size, -p.compute_slices, p.name)))


def most_instances(profile: ProfilePlacements, free: frozenset[int]) -> int:
    """How many instances of ``profile`` the free slices could hold at once (exact: greedy by end)."""
    count, boundary = 0, -1
    for placement in profile.placements:  # sorted by end
        if placement.start >= boundary and all(s in free for s in placement.slices()):
            count += 1
            boundary = placement.end
    return count


@functools.lru_cache(maxsize=1 << 16)
def capability(profiles: tuple[ProfilePlacements, ...], free: frozenset[int]) -> tuple[int, ...]:
    """Per profile (largest first), the most instances the free slices could still hold.

    Cached: a node's GPUs of one model share their profiles, and a GPU has few distinct free sets
    (2^8 at most), so a re-publish after every allocation costs lookups, not interval scans."""
    return tuple(most_instances(profile, free) for profile in profiles)


def placement_loss(
    profiles: Sequence[ProfilePlacements], free: frozenset[int], placement: Placement
) -> tuple[int, ...]:
    """What placing an instance at ``placement`` takes from the GPU's capability (lexicographic: lower wins)."""
    after = free.difference(placement.slices())
    return tuple(b - a for b, a in zip(capability(profiles, free), capability(profiles, after), strict=True))


def published_free_slices(pool: NodePool) -> dict[int, frozenset[int]]:
    """Per GPU minor, the memory slices its counter set offers (a foreign instance's are published as 0)."""
    return {
        cs.gpu_minor: frozenset(i for i in range(cs.memory_slices) if cs.counters.get(memory_slice_counter(i), 0) >= 1)
        for cs in pool.counter_sets
    }


def free_slices(pool: NodePool, allocated: Iterable[str]) -> dict[int, frozenset[int]]:
    """Per GPU minor, the memory slices neither a foreign instance nor an allocated device holds.

    ``allocated``: the names of the pool's devices that allocated claims hold (names not in the pool,
    e.g. of a device no longer published, are ignored: they hold nothing that is still offered).
    """
    by_name: Mapping[str, Device] = {device.name: device for device in pool.devices}
    free = published_free_slices(pool)
    for name in allocated:
        device = by_name.get(name)
        if device is None or device.placement is None or device.gpu_minor not in free:
            continue
        free[device.gpu_minor] = free[device.gpu_minor].difference(device.placement.slices())
    return free


def fits(device: Device, free: Mapping[int, frozenset[int]]) -> bool:
    """Whether the device's memory slices are all free (a whole GPU: whether it is not allocated)."""
    if device.placement is None:
        return True
    gpu_free = free.get(device.gpu_minor, frozenset())
    return all(s in gpu_free for s in device.placement.slices())
