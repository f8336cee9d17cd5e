"""Per GPU, what holds each memory slice, what is realized, and what is still allocatable -- from the API objects alone.

The published ResourceSlices say, per MIG-enabled GPU, its counter set (``memory-slice-N`` at 1, or 0
for a slice a foreign instance occupies -- docs/device-model.md, "Instances migdra did not create" --
plus its SMs, engines and memory) and, per (profile, placement) device, what it consumes and its
``placementStart`` / ``placementSize``; a MIG-disabled GPU is one ``type=gpu`` device without counters.
Allocated ResourceClaims say which device each holds; what their ``status.devices[]`` entries say
(realized by the plugin, in conflict per the reservation controller) is read by the caller's
:data:`StatusReader` -- the schema is :mod:`dra_driver.claimstatus`'s, a layer above this one, so
:func:`dra_driver.clusterview.compute_cluster_occupancy` passes the one reader everybody
uses.  Together they give the picture an operator wants -- a row per GPU, a cell per memory slice --
and the numbers the controller exports as metrics.

A shared GPU-instance device (``shared`` attribute, docs/device-model.md) is one placement however many
claims hold it: each allocation result with a ``shareID`` names the shared device and is one
:class:`Instance` at that placement, its counters are taken once (the allocator pays them once), and it
is never listed as allocatable beside the exclusive device of the same placement.

What is *allocatable* is decided as kube-scheduler's allocator decides it for partitionable devices:
a published device fits when, for every counter it consumes, what it consumes is at most the counter
set's published value minus what the allocated devices consume.  Every number comes from the slices;
none is looked up in the catalog, so a foreign instance's SMs and engines (already taken off the
published counters) and a GPU model migdra does not know yet are handled alike.

Pure: the caller lists the objects (``make demo``, ``migdra status`` and the reservation controller's
metrics use it).  Never reads NVML or the API.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dra_driver.devicemodel.vocabulary import MEMORY_SLICE_COUNTER_PREFIX, SHARED_ATTRIBUTE, DeviceType
from dra_driver.jsontypes import JSON
from dra_driver.resourceclaim import DeviceRequestAllocationResult, ResourceClaimView

FREE = "."
FOREIGN = "x"
CONFLICT_MARK = "!"
WHOLE_GPU_PROFILE = DeviceType.GPU.value
"""The profile of a whole-GPU device (``type=gpu``, MIG disabled) in occupancy and metrics."""
_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


@dataclass(frozen=True)
class DeviceState:
    """What a claim's ``status.devices[]`` entry for one device says (nothing: not realized, no conflict)."""

    realized: bool = False  # the plugin's Ready condition is True
    mig_uuid: str | None = None
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    conflict: str | None = None  # "<reason>: <message>" when the controller's Reserved condition is False


StatusReader = Callable[[ResourceClaimView, str, str, str, str | None], DeviceState]
"""(claim, driver, pool, device name, shareID or None) -> what the claim's status says of that device
(of that share, for a share of a shared GPU instance)."""


def _no_status(claim: ResourceClaimView, driver: str, pool: str, device: str, share_id: str | None) -> DeviceState:
    return DeviceState()


@dataclass(frozen=True)
class Instance:
    """One device an allocated claim holds: the reservation, and what the plugin made of it."""

    claim: str  # namespace/name
    device: str
    profile: str
    placement_start: int
    placement_size: int
    realized: bool = False  # Ready=True (and, for a MIG device, a migUUID): the instance exists
    mig_uuid: str | None = None
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    conflict: str | None = None  # "<reason>: <message>" when the controller's Reserved condition is False
    share_id: str | None = None  # a share of a shared GPU instance: its shareID ...
    share_slices: int | None = None  # ... and the compute slices its own compute instance has

    @property
    def holder(self) -> str:
        """What holds this instance's memory slices: the claim, or for a share the shared GPU instance
        (``shared <device>``), which several claims hold together."""
        return f"shared {self.device}" if self.share_id is not None else self.claim


@dataclass(frozen=True)
class Allocatable:
    """A published device that still fits the GPU's counters: kube-scheduler could allocate it now."""

    device: str
    profile: str
    placement_start: int
    placement_size: int
    multiprocessors: int
    compute_slices_free: int | None = None  # a shared GPU instance shares hold: what more shares can have

    @property
    def is_share(self) -> bool:
        """Room for one more share of a shared GPU instance that exists: its memory slices are held."""
        return self.compute_slices_free is not None


@dataclass
class GpuOccupancy:
    """One GPU: its node, counter set (empty for a whole GPU), model and, per memory slice, the claim
    holding it (or None); the slices foreign instances occupy; the instances claims hold; what still fits.

    A whole GPU is one cell: ``slices`` has one entry, its device is the only allocatable one.
    """

    node: str
    counter_set: str
    product: str = ""
    slices: list[str | None] = field(default_factory=list)
    instances: list[Instance] = field(default_factory=list)
    foreign_slices: list[int] = field(default_factory=list)
    allocatable: list[Allocatable] = field(default_factory=list)
    name: str = ""  # gpu-<minor>
    pool: str = ""
    uuid: str = ""
    whole_gpu: bool = False

    @property
    def free_slices(self) -> int:
        """Memory slices neither a claim nor a foreign instance holds."""
        foreign = set(self.foreign_slices)
        return sum(1 for index, holder in enumerate(self.slices) if holder is None and index not in foreign)

    @property
    def largest_allocatable(self) -> Allocatable | None:
        """The largest device that still fits: most memory slices, then most SMs (then by profile name,
        then the lowest placement, so the answer is stable)."""
        placements = [a for a in self.allocatable if not a.is_share]  # a share's memory slices are held already
        ranked = sorted(placements, key=lambda a: (-a.placement_size, -a.multiprocessors, a.profile))
        return ranked[0] if ranked else None

    @property
    def largest_placements(self) -> list[int]:
        """Every placement start at which the largest allocatable profile still fits."""
        largest = self.largest_allocatable
        if largest is None:
            return []
        return sorted(a.placement_start for a in self.allocatable if a.profile == largest.profile and not a.is_share)

    @property
    def fragmentation(self) -> float:
        """1 - (largest allocatable placement size / free memory slices); 0 when nothing is free.

        0: all free memory can still go to one instance.  Towards 1: the free memory is scattered (or
        its SMs and engines are gone), so a claim for a larger profile will not fit although the GPU has
        that much memory free -- the number that says repacking would help.  1: memory is free but no
        device fits at all (docs/operations.md, "Cluster view").
        """
        free = self.free_slices
        if free == 0:
            return 0.0
        largest = self.largest_allocatable
        return 1.0 - (largest.placement_size if largest is not None else 0) / free

    def instances_by_profile(self, *, realized: bool) -> dict[str, int]:
        """Reserved instances per profile (``realized=False``: all of them), or only the realized ones."""
        counts: dict[str, int] = {}
        for instance in self.instances:
            if instance.realized or not realized:
                counts[instance.profile] = counts.get(instance.profile, 0) + 1
        return counts


def _attribute(device: JSON, name: str) -> Any:
    value = (device.get("attributes") or {}).get(name) or {}
    return next(iter(value.values()), None) if isinstance(value, Mapping) else None


def _amount(value: Any) -> int | None:
    """A counter or capacity value as migdra publishes it (``{"value": "132"}``); None when it is not an
    integer (another writer's quantity with a suffix): such a counter is treated as exhausted, so an
    unreadable number never makes a device look allocatable."""
    text = value.get("value") if isinstance(value, Mapping) else None
    try:
        return int(str(text))
    except ValueError:
        return None


def _counters(counters: Any) -> dict[str, int | None]:
    return {str(name): _amount(value) for name, value in (counters or {}).items()}


def _current_slices(slices: Iterable[JSON], driver: str) -> list[JSON]:
    """``driver``'s slices of each pool's newest generation: the allocator ignores older ones, which a
    republish in progress leaves behind for a moment."""
    ours = [s for s in slices if (s.get("spec") or {}).get("driver") == driver]
    newest: dict[str, int] = {}
    for resource_slice in ours:
        pool = (resource_slice.get("spec") or {}).get("pool") or {}
        name, generation = str(pool.get("name", "")), int(pool.get("generation") or 0)
        newest[name] = max(newest.get(name, generation), generation)
    return [
        s
        for s in ours
        if int(((s.get("spec") or {}).get("pool") or {}).get("generation") or 0)
        == newest[str(((s.get("spec") or {}).get("pool") or {}).get("name", ""))]
    ]


def share_compute_slices(result: DeviceRequestAllocationResult, driver: str) -> int | None:
    """The ``computeSlices`` a share's allocation result consumed (the name bare or qualified with the
    driver, as schedulers write it), or None; the one reading of it for the cluster view and the
    reservation controller."""
    value = result.consumed("computeSlices", driver)
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _instance(label: str, device: JSON, whole_gpu: bool, state: DeviceState) -> Instance | None:
    if whole_gpu:
        profile, start, size = WHOLE_GPU_PROFILE, 0, 1
    else:
        profile = str(_attribute(device, "profile") or "")
        start, size = _attribute(device, "placementStart"), _attribute(device, "placementSize")
        if not isinstance(start, int) or not isinstance(size, int):
            return None
    return Instance(
        claim=label,
        device=str(device.get("name", "")),
        profile=profile,
        placement_start=start,
        placement_size=size,
        realized=state.realized and (whole_gpu or state.mig_uuid is not None),
        mig_uuid=state.mig_uuid,
        gpu_instance_id=state.gpu_instance_id,
        compute_instance_id=state.compute_instance_id,
        conflict=state.conflict,
    )


def occupancy(
    slices: Iterable[JSON], claims: Iterable[ResourceClaimView], driver: str, read_status: StatusReader = _no_status
) -> list[GpuOccupancy]:
    """Every GPU of ``driver``'s pools, sorted by node and GPU, with what allocated claims hold, what
    foreign instances occupy and what is still allocatable; ``read_status`` says what each held
    device became (by default nothing is read: every instance shows as reserved, none as realized)."""
    gpus: dict[tuple[str, str], GpuOccupancy] = {}
    published: dict[tuple[str, str], dict[str, int | None]] = {}  # (pool, counter set) -> counters
    devices: dict[tuple[str, str], JSON] = {}  # (pool, device name) -> device
    device_gpu: dict[tuple[str, str], tuple[str, str]] = {}
    for resource_slice in _current_slices(slices, driver):
        spec = resource_slice.get("spec") or {}
        pool = str((spec.get("pool") or {}).get("name", ""))
        node = str(spec.get("nodeName") or pool)
        for counter_set in spec.get("sharedCounters") or []:
            name = str(counter_set.get("name", ""))
            counters = _counters(counter_set.get("counters"))
            numbered = {
                int(key[len(MEMORY_SLICE_COUNTER_PREFIX) :]): value
                for key, value in counters.items()
                if key.startswith(MEMORY_SLICE_COUNTER_PREFIX) and key[len(MEMORY_SLICE_COUNTER_PREFIX) :].isdigit()
            }
            gpu = gpus.setdefault((pool, name), GpuOccupancy(node, name, pool=pool))
            gpu.name = name.removesuffix("-counter-set")
            gpu.slices = [None] * (max(numbered) + 1 if numbered else 0)
            gpu.foreign_slices = sorted(index for index, value in numbered.items() if value == 0)
            published[(pool, name)] = counters
        for device in spec.get("devices") or []:
            key = (pool, str(device.get("name", "")))
            devices[key] = device
            if _attribute(device, "type") == DeviceType.GPU.value and not device.get("consumesCounters"):
                whole = GpuOccupancy(node, "", pool=pool, name=key[1], whole_gpu=True, slices=[None])
                whole.uuid = str(_attribute(device, "uuid") or "")
                gpus[key] = whole
                device_gpu[key] = key
            for consumption in device.get("consumesCounters") or []:
                device_gpu[key] = (pool, str(consumption.get("counterSet", "")))
    for key, gpu_key in device_gpu.items():
        described = gpus.get(gpu_key)
        if described is not None:
            described.product = described.product or str(_attribute(devices[key], "productName") or "")
            described.uuid = described.uuid or str(_attribute(devices[key], "parentUUID") or "")

    held: set[tuple[str, str]] = set()
    # a shared GPU instance -> compute slices its shares hold (None: a share's size is not known)
    shares_held: dict[tuple[str, str], int | None] = {}
    for claim in claims:
        label = claim.metadata.label
        for result in claim.results_of(driver):
            # An admin-access allocation holds nothing: kube's allocator does not count it as in use.
            if result.admin_access:
                continue
            key = (result.pool, result.device)
            device, owner = devices.get(key), device_gpu.get(key)
            if device is None or owner is None or owner not in gpus:
                continue
            gpu = gpus[owner]
            share_id = result.share
            state = read_status(claim, driver, key[0], key[1], share_id)
            instance = _instance(label, device, gpu.whole_gpu, state)
            if instance is None:
                continue
            if share_id is not None:
                instance = dataclasses.replace(
                    instance, share_id=share_id, share_slices=share_compute_slices(result, driver)
                )
            held.add(key)
            if share_id is not None:  # a share of unknown size leaves nothing to say about room for more
                taken_so_far = shares_held.get(key, 0)
                size = instance.share_slices
                shares_held[key] = None if taken_so_far is None or size is None else taken_so_far + size
            gpu.instances.append(instance)
            for index in range(
                instance.placement_start, min(instance.placement_start + instance.placement_size, len(gpu.slices))
            ):
                gpu.slices[index] = instance.holder

    remaining = {key: dict(counters) for key, counters in published.items()}
    for key in held:
        for consumption in devices[key].get("consumesCounters") or []:
            left = remaining.get((key[0], str(consumption.get("counterSet", ""))))
            for name, amount in _counters(consumption.get("counters")).items():
                if left is not None and left.get(name) is not None:
                    left[name] = (left[name] or 0) - (amount or 0)
    for key, device in devices.items():
        owner = device_gpu.get(key)
        if owner is None or owner not in gpus:
            continue
        gpu = gpus[owner]
        sms = _amount((device.get("capacity") or {}).get("multiprocessors")) or 0
        if key in shares_held:  # a shared GPU instance that shares hold: room for more shares?
            capacity = _amount((device.get("capacity") or {}).get("computeSlices")) or 0
            taken = shares_held[key]
            if taken is not None and capacity > taken:
                start, size = _attribute(device, "placementStart"), _attribute(device, "placementSize")
                if isinstance(start, int) and isinstance(size, int):
                    profile = str(_attribute(device, "profile") or "")
                    gpu.allocatable.append(Allocatable(key[1], profile, start, size, sms, capacity - taken))
            continue
        if key in held or not _fits(key[0], device, remaining):
            continue
        if _attribute(device, SHARED_ATTRIBUTE) is True:
            continue  # the exclusive device of the same placement stands for it: one placement, one entry
        if gpu.whole_gpu:
            gpu.allocatable.append(Allocatable(key[1], WHOLE_GPU_PROFILE, 0, 1, sms))
            continue
        start, size = _attribute(device, "placementStart"), _attribute(device, "placementSize")
        if isinstance(start, int) and isinstance(size, int):
            gpu.allocatable.append(Allocatable(key[1], str(_attribute(device, "profile") or ""), start, size, sms))
    for gpu in gpus.values():
        gpu.allocatable.sort(key=lambda a: (a.placement_size, a.multiprocessors, a.profile, a.placement_start))
        gpu.instances.sort(key=lambda i: (i.placement_start, i.claim))
    return [gpus[key] for key in sorted(gpus, key=lambda k: (gpus[k].node, _natural(gpus[k].name)))]


def _fits(pool: str, device: JSON, remaining: Mapping[tuple[str, str], Mapping[str, int | None]]) -> bool:
    """Whether every counter ``device`` consumes still has that much left (an unknown set or counter,
    or an unreadable amount, does not fit: the allocator would refuse it too)."""
    for consumption in device.get("consumesCounters") or []:
        left = remaining.get((pool, str(consumption.get("counterSet", ""))))
        if left is None:
            return False
        for name, amount in _counters(consumption.get("counters")).items():
            available = left.get(name)
            if amount is None or available is None or amount > available:
                return False
    return True


def _natural(name: str) -> tuple[Any, ...]:
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name))


def claim_letters(gpus: Iterable[GpuOccupancy]) -> dict[str, str]:
    """A letter per claim, in the order the claims first appear on the GPUs' memory slices."""
    letters: dict[str, str] = {}
    for gpu in gpus:
        for holder in gpu.slices:
            if holder is not None and holder not in letters:
                letters[holder] = _ALPHABET[len(letters) % len(_ALPHABET)]
    return letters


def slice_cells(gpu: GpuOccupancy, letters: Mapping[str, str]) -> list[str]:
    """One cell per memory slice: the holding claim's letter, ``x`` foreign, ``.`` free."""
    foreign = set(gpu.foreign_slices)
    return [
        letters.get(holder, "?") if holder is not None else FOREIGN if index in foreign else FREE
        for index, holder in enumerate(gpu.slices)
    ]


def render_occupancy(gpus: Iterable[GpuOccupancy]) -> str:
    """A text map: per GPU one row of memory slices (a letter per claim, ``x`` foreign, ``.`` free) and
    a legend; a claim the reservation controller reports in conflict is marked ``!``."""
    listed = list(gpus)
    letters = claim_letters(listed)
    rows: list[str] = []
    conflicts = {i.holder for gpu in listed for i in gpu.instances if i.conflict is not None}
    sharers: dict[str, list[str]] = {}
    for gpu in listed:
        for instance in gpu.instances:
            if instance.share_id is not None:
                sharers.setdefault(instance.holder, []).append(f"{instance.claim} ({instance.share_slices}c)")
    for gpu in listed:
        cells = " ".join(slice_cells(gpu, letters))
        rows.append(f"{gpu.node:<10} {gpu.name:<8} [{cells}]  {gpu.free_slices}/{len(gpu.slices)} free")
    legend = [
        f"  {letter} = {holder}{': ' + ', '.join(sharers[holder]) if holder in sharers else ''}"
        f"{'  ' + CONFLICT_MARK + ' conflict (Reserved=False)' if holder in conflicts else ''}"
        for holder, letter in letters.items()
    ]
    if any(gpu.foreign_slices for gpu in listed):
        legend.append(f"  {FOREIGN} = an instance migdra did not create (foreign)")
    return "\n".join(rows + (["", "memory slices held by:", *legend] if legend else [])) + "\n"
