"""GPU faults as ``resource.k8s.io/v1`` device taints: which published devices a fault concerns.

Pure: a fault is a value (what broke, where, since when), :func:`taint_pool` a function of a pool and
faults.  Where faults come from (NVML events) and how they are kept (the plugin's taint store) is
the node plugin's business, not this module's.

Which devices a fault taints:

- a fault of the whole GPU (an XID NVML did not attribute to a GPU instance, a double-bit ECC error,
  the GPU lost) taints every device of that GPU;
- a fault attributed to a GPU instance taints every device whose placement **overlaps** that
  instance's memory slices -- the device at exactly that placement and every larger or smaller one
  sharing a slice with it.  Why overlapping and not only the exact placement: the memory slices (and
  the compute slices on them) are what was running when the fault came; a new claim on any device
  that uses one of them lands on the same hardware, which is what a cluster admin means by "keep new
  work off the faulty part".  Devices on other slices of the GPU stay schedulable;
- the whole-GPU device (MIG off) is tainted by every fault of its GPU.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from dra_driver.mig.catalog import Placement

if TYPE_CHECKING:
    from dra_driver.devicemodel.pool import Device, NodePool

MAX_TAINTS_PER_DEVICE = 16
"""resource.k8s.io/v1 (1.35+) allows 16 taints per device (docs/resource-api.md, "ResourceSlice")."""

XID_TAINT = "xid"
GPU_LOST_TAINT = "gpu-lost"
ECC_TAINT = "double-bit-ecc"
TAINT_NAMES = (XID_TAINT, GPU_LOST_TAINT, ECC_TAINT)
"""The taint keys' names under the driver's domain: ``<driver name>/xid`` etc."""


@dataclass(frozen=True, slots=True, order=True)
class DeviceTaint:
    """One ``devices[].taints[]`` entry: ``timeAdded`` as RFC 3339 (when the fault was first seen)."""

    key: str
    value: str
    effect: str
    time_added: str

    def to_api(self) -> dict[str, object]:
        body: dict[str, object] = {"key": self.key, "effect": self.effect, "timeAdded": self.time_added}
        if self.value:
            body["value"] = self.value
        return body


@dataclass(frozen=True, slots=True)
class GpuFault:
    """A fault of GPU ``gpu_uuid``: ``name`` one of :data:`TAINT_NAMES`, ``value`` e.g. the XID;
    ``placement`` the faulty GPU instance's memory slices, None for the whole GPU."""

    gpu_uuid: str
    name: str
    value: str
    time_added: str
    placement: Placement | None = None

    def concerns(self, device: Device) -> bool:
        if device.gpu_uuid != self.gpu_uuid:
            return False
        if self.placement is None or device.placement is None:
            return True
        return self.placement.overlaps(device.placement)


def device_taints(device: Device, faults: Iterable[GpuFault], driver_name: str) -> tuple[DeviceTaint, ...]:
    """The taints of one device: one per (key, value), the earliest ``timeAdded``, at most 16, sorted."""
    earliest: dict[tuple[str, str], str] = {}
    for fault in faults:
        if fault.concerns(device):
            key = (f"{driver_name}/{fault.name}", fault.value)
            earliest[key] = min(earliest.get(key, fault.time_added), fault.time_added)
    taints = sorted(DeviceTaint(key, value, "NoSchedule", added) for (key, value), added in earliest.items())
    return tuple(taints[:MAX_TAINTS_PER_DEVICE])


def taint_pool(pool: NodePool, faults: Iterable[GpuFault]) -> NodePool:
    """``pool`` with every device carrying the taints of the faults that concern it.

    No faults: the same pool object (a rescan without faults changes nothing)."""
    faults = tuple(faults)
    if not faults:
        return pool
    devices = tuple(replace(d, taints=device_taints(d, faults, pool.driver_name)) for d in pool.devices)
    return replace(pool, devices=devices)


def tainted_devices(pool: NodePool) -> Mapping[tuple[str, str], int]:
    """(GPU UUID, taint key) -> how many devices carry it: the ``migdra_device_taints`` gauge."""
    counts: dict[tuple[str, str], int] = {}
    for device in pool.devices:
        for key in {taint.key for taint in device.taints}:
            counts[(device.gpu_uuid, key)] = counts.get((device.gpu_uuid, key), 0) + 1
    return counts
