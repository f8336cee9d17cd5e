"""Which exact placement every allocated claim of this driver holds, and which of them conflict.

A pure function of the cluster as listed: the ResourceSlices of the driver (what each device *is*:
node, GPU, profile, memory slices) and the ResourceClaims (what each claim was allocated).  The
controller writes the answer on the claims (:mod:`dra_driver.controller.status`); nothing here talks
to the API server.

Conflicts.  kube-scheduler never double-books a memory slice (the counters forbid it), so a conflict
means something outside the scheduler's view: stale slices, a second scheduler, an allocation written
by hand.  Two claims conflict when, on one GPU of one node, the memory slices their devices occupy
overlap (a whole-GPU device occupies all of them).  A claim naming a device no pool publishes any
more is ``DeviceGone`` -- but only when that pool is completely listed (every slice of its newest
generation is there): a pool half-way through a re-publish says nothing about what is gone, and the
controller must never act on a partial read.  Admin-access results create nothing and hold nothing,
so they neither conflict nor are conflicted with.

Shares.  A shared GPU-instance device (``gpu-<minor>-shared-…``, docs/sharing.md) may be allocated to
several claims, one result each with its own ``shareID``; each is one reservation.  Shares of the same
device do not conflict with each other -- they share its GPU instance by design -- unless together
they consume more ``computeSlices`` than the device has (a second scheduler, a hand-written
allocation): then every share of that device conflicts with the others.  A share conflicts with any
other device (exclusive or another shared device) whose memory slices overlap, exactly as exclusive
devices do.  Two shares of one device in *one* claim (kube-scheduler may give two requests of a claim
the same shared device) conflict with each other: the node prepares one share of a device per claim
(one CDI device per device name) and refuses the claim, so the controller must not call it reserved.
"""

from __future__ import annotations

import enum
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dra_driver.devicemodel.naming import parse_gpu_device_name, parse_mig_device_name, parse_shared_device_name
from dra_driver.devicemodel.occupancy import share_compute_slices
from dra_driver.devicemodel.vocabulary import SHARED_ATTRIBUTE
from dra_driver.jsontypes import JSON
from dra_driver.mig.catalog import Placement
from dra_driver.resourceclaim import ResourceClaimView


class Verdict(enum.Enum):
    RESERVED = "Reserved"
    CONFLICT = "PlacementConflict"
    GONE = "DeviceGone"
    UNKNOWN = "Unknown"  # the device's pool is not completely listed: say nothing


@dataclass(frozen=True, slots=True)
class PublishedDevice:
    """What the slices say one device is."""

    pool: str
    name: str
    node: str
    gpu_uuid: str
    gpu_minor: int | None
    profile: str | None  # None: a whole GPU
    placement: Placement | None  # None: a whole GPU
    memory_bytes: int | None
    multiprocessors: int | None
    memory_slices: int | None  # how many the GPU has (its counter set), for whole-GPU overlap
    compute_slices: int | None = None  # a shared device: the ``computeSlices`` its shares divide; else None

    @property
    def shared(self) -> bool:
        return self.compute_slices is not None


@dataclass(frozen=True, slots=True)
class DeviceReservation:
    """One allocated device of one claim, and the verdict on it."""

    claim_uid: str
    namespace: str
    claim_name: str
    pool: str
    device_name: str
    verdict: Verdict
    device: PublishedDevice | None  # None when the device is not published (gone or unknown)
    conflicts_with: tuple[str, ...] = ()  # "namespace/name" of the other claims (its own: two shares of the device)
    share_id: str | None = None  # a share of a shared device: its ``shareID``
    share_slices: int | None = None  # ... and the ``computeSlices`` it consumes

    @property
    def claim_label(self) -> str:
        return f"{self.namespace}/{self.claim_name}"


@dataclass
class Pool:
    """One pool's newest generation as listed: its devices, and whether every slice of it is there."""

    generation: int = -1
    slice_count: int = 0
    slices_seen: int = 0
    devices: dict[str, PublishedDevice] = field(default_factory=dict)
    memory_slices: dict[str, int] = field(default_factory=dict)  # counter set -> memory slices

    @property
    def complete(self) -> bool:
        return self.slices_seen >= self.slice_count > 0


def _attribute(device: JSON, name: str) -> Any:
    value = (device.get("attributes") or {}).get(name)
    return next(iter(value.values()), None) if isinstance(value, Mapping) and value else None


def _capacity(device: JSON, name: str) -> int | None:
    value = ((device.get("capacity") or {}).get(name) or {}).get("value")
    try:
        return int(str(value))
    except ValueError:
        return None


def _memory_slice_count(counter_set: JSON) -> int:
    return sum(1 for name in counter_set.get("counters") or {} if str(name).startswith("memory-slice-"))


def compute_published_devices(slices: Iterable[JSON], driver: str) -> dict[str, Pool]:
    """The newest generation of every pool of ``driver``: its devices and whether it is complete."""
    pools: dict[str, Pool] = defaultdict(Pool)
    raw: dict[str, list[JSON]] = defaultdict(list)
    for resource_slice in slices:
        spec = resource_slice.get("spec") or {}
        if spec.get("driver") != driver:
            continue
        pool_spec = spec.get("pool") or {}
        name = str(pool_spec.get("name", ""))
        generation = int(pool_spec.get("generation", 0))
        pool = pools[name]
        if generation > pool.generation:
            pools[name] = pool = Pool(generation, int(pool_spec.get("resourceSliceCount", 1)))
            raw[name] = []
        if generation == pool.generation:
            pool.slices_seen += 1
            raw[name].append(spec)
    for name, specs in raw.items():
        pool = pools[name]
        for spec in specs:
            for counter_set in spec.get("sharedCounters") or []:
                pool.memory_slices[str(counter_set.get("name"))] = _memory_slice_count(counter_set)
        for spec in specs:
            node = str(spec.get("nodeName") or name)
            for device in spec.get("devices") or []:
                published = _published(name, node, device, pool.memory_slices)
                if published is not None:
                    pool.devices[published.name] = published
    return dict(pools)


def _published(pool: str, node: str, device: JSON, memory_slices: Mapping[str, int]) -> PublishedDevice | None:
    name = str(device.get("name", ""))
    mig = parse_mig_device_name(name) or parse_shared_device_name(name)
    minor = mig[0] if mig is not None else parse_gpu_device_name(name)
    shared = device.get("allowMultipleAllocations") is True or _attribute(device, SHARED_ATTRIBUTE) is True
    counter_sets = [str(c.get("counterSet")) for c in device.get("consumesCounters") or []]
    slice_count = memory_slices.get(counter_sets[0]) if counter_sets else None
    if _attribute(device, "type") == "mig":
        start, size = _attribute(device, "placementStart"), _attribute(device, "placementSize")
        if not isinstance(start, int) or not isinstance(size, int) or start < 0 or size <= 0:
            return None  # not a placement: the device is not one migdra can reserve
        return PublishedDevice(
            pool,
            name,
            node,
            str(_attribute(device, "parentUUID") or ""),
            minor,
            str(_attribute(device, "profile") or ""),
            Placement(start=start, size=size),
            _capacity(device, "memory"),
            _capacity(device, "multiprocessors"),
            slice_count,
            (_capacity(device, "computeSlices") or 0) if shared else None,
        )
    return PublishedDevice(
        pool,
        name,
        node,
        str(_attribute(device, "uuid") or ""),
        minor,
        None,
        None,
        _capacity(device, "memory"),
        _capacity(device, "multiprocessors"),
        slice_count,
    )


def _occupied(device: PublishedDevice) -> Placement:
    if device.placement is not None:
        return device.placement
    return Placement(start=0, size=device.memory_slices or 1 << 16)  # a whole GPU: all of it


def compute_reservations(
    claims: Iterable[ResourceClaimView], slices: Iterable[JSON], driver: str
) -> list[DeviceReservation]:
    """Every allocated (non-admin) device of ``driver`` in ``claims``, with its verdict; pure.

    Ordered by claim (namespace, name) and then by the claim's result order, one entry per distinct
    device of a claim (a device serving two requests is one instance).
    """
    pools = compute_published_devices(slices, driver)
    return pool_reservations(claims, pools, driver, every_pool_complete=_complete_listing(pools))


def claim_pools(claim: ResourceClaimView, driver: str) -> frozenset[str]:
    """The pools of ``driver`` in which ``claim`` holds a (non-admin) device."""
    return frozenset(r.pool for r in claim.results_of(driver) if not r.admin_access)


def pool_reservations(
    claims: Iterable[ResourceClaimView],
    pools: Mapping[str, Pool],
    driver: str,
    *,
    every_pool_complete: bool,
    only_pool: str | None = None,
) -> list[DeviceReservation]:
    """:func:`compute_reservations` from pools already read (:func:`compute_published_devices`), for the
    devices of ``only_pool`` alone if given: every verdict depends only on the device's own pool (a
    conflict is two devices of one GPU, and one pool is one node's GPUs), and on whether *every* pool
    is completely listed when the device's pool is absent (``every_pool_complete``), which is how the
    reservation controller recomputes one node's reservations without the others'."""
    held: list[_Held] = []
    for claim in sorted(claims, key=lambda c: (c.metadata.namespace, c.metadata.name)):
        seen: set[tuple[str, str, str]] = set()
        for result in claim.results_of(driver):
            if result.admin_access:
                continue
            share_id = result.share
            key = (result.pool, result.device)
            if only_pool is not None and key[0] != only_pool:
                continue
            if (*key, share_id or "") in seen:
                continue
            seen.add((*key, share_id or ""))
            pool = pools.get(key[0])
            device = pool.devices.get(key[1]) if pool is not None else None
            if device is not None:
                verdict = Verdict.RESERVED
            elif pool is not None and pool.complete:
                verdict = Verdict.GONE
            elif pool is None and every_pool_complete:
                verdict = Verdict.GONE  # the node's whole pool went (node removed): every other pool is whole
            else:
                verdict = Verdict.UNKNOWN
            consumed = share_compute_slices(result, driver) if share_id is not None else None
            held.append(_Held(claim, key[0], key[1], device, verdict, share_id, consumed))

    conflicts = _conflicts(held)
    reservations: list[DeviceReservation] = []
    for index, entry in enumerate(held):
        meta = entry.claim.metadata
        others = tuple(sorted(conflicts.get(index, ())))
        reservations.append(
            DeviceReservation(
                meta.uid,
                meta.namespace,
                meta.name,
                entry.pool,
                entry.device_name,
                Verdict.CONFLICT if others else entry.verdict,
                entry.device,
                others,
                entry.share_id,
                entry.share_slices,
            )
        )
    return reservations


@dataclass(frozen=True, slots=True)
class _Held:
    """One allocated device of one claim, before conflicts are known."""

    claim: ResourceClaimView
    pool: str
    device_name: str
    device: PublishedDevice | None
    verdict: Verdict
    share_id: str | None
    share_slices: int | None


def _conflicts(held: list[_Held]) -> dict[int, set[str]]:
    """Index into ``held`` -> labels of the other claims it conflicts with (see the module docstring)."""
    by_gpu: dict[tuple[str, str], list[int]] = defaultdict(list)
    for index, entry in enumerate(held):
        if entry.device is not None:
            by_gpu[(entry.device.node, entry.device.gpu_uuid)].append(index)
    conflicts: dict[int, set[str]] = defaultdict(set)
    for indices in by_gpu.values():
        for position, first in enumerate(indices):
            for second in indices[position + 1 :]:
                a, b = held[first], held[second]
                assert a.device is not None
                assert b.device is not None
                if a.claim.metadata.uid == b.claim.metadata.uid:
                    if a.device is b.device and a.device.shared and a.share_id is not None and b.share_id is not None:
                        conflicts[first].add(a.claim.metadata.label)  # the claim itself: two shares of one device
                        conflicts[second].add(b.claim.metadata.label)
                    continue
                if a.device is b.device and a.device.shared and a.share_id is not None and b.share_id is not None:
                    continue  # shares of one GPU instance: over-commit is checked below
                if _occupied(a.device).overlaps(_occupied(b.device)):
                    conflicts[first].add(b.claim.metadata.label)
                    conflicts[second].add(a.claim.metadata.label)
    shares: dict[tuple[str, str], list[int]] = defaultdict(list)
    for index, entry in enumerate(held):
        if entry.device is not None and entry.device.shared:
            shares[(entry.pool, entry.device_name)].append(index)
    for indices in shares.values():
        device = held[indices[0]].device
        assert device is not None
        consumed = sum(held[index].share_slices or 0 for index in indices)
        if consumed <= (device.compute_slices or 0):
            continue
        for index in indices:  # more compute slices than the GPU instance has: every share conflicts
            conflicts[index].update(
                held[other].claim.metadata.label
                for other in indices
                if held[other].claim.metadata.uid != held[index].claim.metadata.uid
            )
    return conflicts


def _complete_listing(pools: Mapping[str, Pool]) -> bool:
    """Whether every pool listed is complete: then a pool that is absent is absent, not half-listed."""
    return all(pool.complete for pool in pools.values())
