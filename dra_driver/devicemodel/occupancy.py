"""Which memory slices of which GPU hold which claim, read from the API objects alone.

The published ResourceSlices say, per GPU, how many memory slices it has (the ``memory-slice-N``
counters of its counter set) and, per MIG placement, the GPU it belongs to (``consumesCounters``) and
its ``placementStart`` / ``placementSize``; allocated ResourceClaims say which placement each holds.
Together they give the picture an operator wants first -- a row per GPU, a cell per memory slice.
Pure: the caller lists the objects (``make demo`` and ``migdra status`` use it).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

JSON = Mapping[str, Any]
_SLICE_COUNTER = re.compile(r"^memory-slice-(\d+)$")
FREE = "."


@dataclass
class GpuOccupancy:
    """One GPU: its node, counter set, model and, per memory slice, the claim holding it (or None)."""

    node: str
    counter_set: str
    product: str = ""
    slices: list[str | None] = field(default_factory=list)
    instances: list[tuple[str, str, int, int]] = field(default_factory=list)  # (claim, profile, start, size)

    @property
    def free_slices(self) -> int:
        return sum(1 for holder in self.slices if holder is None)


def _attribute(device: JSON, name: str) -> Any:
    value = (device.get("attributes") or {}).get(name) or {}
    return next(iter(value.values()), None) if isinstance(value, Mapping) else None


def occupancy(slices: Iterable[JSON], claims: Iterable[JSON], driver: str) -> list[GpuOccupancy]:
    """Every GPU of ``driver``'s pools, sorted by node and counter set, with what allocated claims hold."""
    gpus: dict[tuple[str, str], GpuOccupancy] = {}
    devices: dict[tuple[str, str], JSON] = {}  # (pool, device name) -> device
    device_gpu: dict[tuple[str, str], tuple[str, str]] = {}
    for resource_slice in slices:
        spec = resource_slice.get("spec") or {}
        if spec.get("driver") != driver:
            continue
        pool = (spec.get("pool") or {}).get("name", "")
        node = spec.get("nodeName") or pool
        for counter_set in spec.get("sharedCounters") or []:
            numbers = [
                int(m.group(1)) for name in counter_set.get("counters") or {} if (m := _SLICE_COUNTER.match(name))
            ]
            gpu = gpus.setdefault((pool, counter_set["name"]), GpuOccupancy(node, counter_set["name"]))
            gpu.slices = [None] * (max(numbers) + 1 if numbers else 0)
        for device in spec.get("devices") or []:
            devices[(pool, device["name"])] = device
            for consumption in device.get("consumesCounters") or []:
                device_gpu[(pool, device["name"])] = (pool, consumption["counterSet"])
    for (pool, name), key in device_gpu.items():
        described = gpus.get(key)
        if described is not None and not described.product:
            described.product = str(_attribute(devices[(pool, name)], "productName") or "")
    for claim in claims:
        meta = claim.get("metadata") or {}
        label = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
        results = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or []
        for result in results:
            if result.get("driver") != driver:
                continue
            key = (result.get("pool", ""), result.get("device", ""))
            device, gpu_key = devices.get(key), device_gpu.get(key)
            if device is None or gpu_key is None or gpu_key not in gpus:
                continue
            gpu = gpus[gpu_key]
            start, size = _attribute(device, "placementStart"), _attribute(device, "placementSize")
            if not isinstance(start, int) or not isinstance(size, int):
                continue
            gpu.instances.append((label, str(_attribute(device, "profile") or ""), start, size))
            for index in range(start, min(start + size, len(gpu.slices))):
                gpu.slices[index] = label
    return [gpus[key] for key in sorted(gpus, key=lambda k: (gpus[k].node, _natural(k[1])))]


def _natural(name: str) -> tuple[Any, ...]:
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name))


def render_occupancy(gpus: Iterable[GpuOccupancy]) -> str:
    """A text map: per GPU one row of memory slices (a letter per claim, ``.`` free) and a legend."""
    rows: list[str] = []
    letters: dict[str, str] = {}
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
    for gpu in gpus:
        cells = []
        for holder in gpu.slices:
            if holder is None:
                cells.append(FREE)
                continue
            if holder not in letters:
                letters[holder] = alphabet[len(letters) % len(alphabet)]
            cells.append(letters[holder])
        gpu_name = gpu.counter_set.removesuffix("-counter-set")
        rows.append(f"{gpu.node:<10} {gpu_name:<8} [{' '.join(cells)}]  {gpu.free_slices}/{len(gpu.slices)} free")
    legend = [f"  {letter} = {holder}" for holder, letter in letters.items()]
    return "\n".join(rows + (["", "memory slices held by:", *legend] if legend else [])) + "\n"
