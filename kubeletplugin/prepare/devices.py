"""Resolve an allocated device name to the hardware it means: GPU, GI profile and exact placement.

``gpu-<minor>-mig-<profile>-<gi profile id>-<start>`` names one legal (profile, placement) of the GPU
with that minor number; ``gpu-<minor>`` names a whole GPU with MIG disabled (nothing to create).
Names are parsed with :mod:`dra_driver.devicemodel.naming`, the one place that defines them, and
checked against what **NVML** reports now (the GPU exists, the profile exists on it, the placement is
one of NVML's possible placements): a stale or forged name is a per-claim error naming the device.

:func:`read_gpu_topology` is the side-effecting half (NVML reads only, never a mutation);
:func:`compute_device_target` is pure.
"""

from __future__ import annotations

from dataclasses import dataclass

from dra_driver.devicemodel.naming import gpu_device_name, mig_device_name, parse_mig_device_name, profile_name
from dra_driver.mig.catalog import MigCatalog, Placement, load_catalog
from dra_driver.nvml.backend import Nvml
from dra_driver.nvml.inventory import read_gpu_profiles
from dra_driver.nvml.types import GpuInfo, GpuInstanceProfileInfo
from kubeletplugin.prepare.errors import DeviceResolutionError


@dataclass(frozen=True, slots=True)
class GpuTopology:
    """One GPU and the GI profiles (with legal placements) NVML reports for it."""

    gpu: GpuInfo
    profiles: tuple[GpuInstanceProfileInfo, ...]


@dataclass(frozen=True, slots=True)
class DeviceTarget:
    """What a device name resolves to; ``profile``/``placement`` are None for a whole GPU.

    ``profile_name`` is the published name (``1g.20gb``), not NVML's (``MIG 1g.20gb``).
    """

    device_name: str
    gpu_uuid: str
    gpu_minor: int
    profile: GpuInstanceProfileInfo | None
    placement: Placement | None
    profile_name: str | None = None

    @property
    def is_mig(self) -> bool:
        return self.profile is not None


def read_gpu_topology(nvml: Nvml) -> tuple[GpuTopology, ...]:
    """Every GPU with its GI profiles (placements included); reads NVML, changes nothing.

    The same read as the publisher's inventory (:func:`~dra_driver.nvml.inventory.read_gpu_profiles`),
    without the instances and sysfs look-ups prepare does not need.
    """
    return tuple(GpuTopology(gpu, profiles) for gpu, profiles in read_gpu_profiles(nvml))


def compute_device_target(
    device_name: str,
    topology: tuple[GpuTopology, ...],
    *,
    admin_access: bool = False,
    catalog: MigCatalog | None = None,
) -> DeviceTarget:
    """Resolve ``device_name`` against ``topology``; pure.  Raises :class:`DeviceResolutionError`.

    Admin access may name a whole GPU whose MIG mode is on (it gets the parent device only); a normal
    allocation of ``gpu-<minor>`` needs MIG off, and a MIG device needs MIG on.
    """
    by_minor = {entry.gpu.minor_number: entry for entry in topology}
    parsed = parse_mig_device_name(device_name)
    if parsed is None:
        for entry in topology:
            if gpu_device_name(entry.gpu.minor_number) == device_name:
                if entry.gpu.mig_enabled and not admin_access:
                    raise DeviceResolutionError(
                        f"device {device_name}: GPU {entry.gpu.uuid} has MIG mode enabled, so the whole GPU "
                        "is not available (it is published only while MIG is off)"
                    )
                return DeviceTarget(device_name, entry.gpu.uuid, entry.gpu.minor_number, None, None)
        raise DeviceResolutionError(
            f"device {device_name}: not a device of this node (no GPU with that minor number, and not a MIG "
            "device name gpu-<minor>-mig-<profile>-<profile id>-<start>)"
        )
    minor, profile_id, start = parsed
    found = by_minor.get(minor)
    if found is None:
        known = ", ".join(str(m) for m in sorted(by_minor)) or "none"
        raise DeviceResolutionError(f"device {device_name}: no GPU with minor number {minor} (minors: {known})")
    entry = found
    profile = next((p for p in entry.profiles if p.profile_id == profile_id), None)
    if profile is None:
        known = ", ".join(f"{p.profile_id} ({p.name})" for p in entry.profiles) or "none (no MIG support)"
        raise DeviceResolutionError(
            f"device {device_name}: GPU {entry.gpu.uuid} has no GPU-instance profile {profile_id} (profiles: {known})"
        )
    catalog = catalog or load_catalog()
    name = profile_name(profile, catalog.identify(entry.gpu.pci_device_id, entry.gpu.name))
    placement = next((p for p in profile.placements if p.start == start), None)
    if placement is None:
        legal = ", ".join(str(p) for p in profile.placements)
        raise DeviceResolutionError(
            f"device {device_name}: start {start} is not a legal placement of {name} (profile {profile_id}) "
            f"on GPU {entry.gpu.uuid}; NVML's placements: {legal}"
        )
    expected = mig_device_name(minor, name, profile_id, start)
    if expected != device_name:
        raise DeviceResolutionError(
            f"device {device_name}: profile {profile_id} of GPU {minor} is {name}; the device is named {expected}"
        )
    if not entry.gpu.mig_enabled and not admin_access:
        raise DeviceResolutionError(f"device {device_name}: MIG mode is disabled on GPU {entry.gpu.uuid}")
    return DeviceTarget(device_name, entry.gpu.uuid, minor, profile, placement, name)
