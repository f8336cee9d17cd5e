"""Resolve an allocated device name to the hardware it means: GPU, GI profile and exact placement.

``gpu-<minor>-mig-<profile>-<gi profile id>-<start>`` names one legal (profile, placement) of the GPU
with that minor number, ``gpu-<minor>-shared-...`` the shared GPU instance of the same placement (one
GI, a compute instance per share, on GPU models the catalog knows); ``gpu-<minor>`` names a whole GPU
with MIG disabled (nothing to create).
Names are parsed with :mod:`dra_driver.devicemodel.naming`, the one place that defines them, and
checked against what **NVML** reports now (the GPU exists, the profile exists on it, the placement is
one of NVML's possible placements): a stale or forged name is a per-claim error naming the device.

:class:`NodeGpus` is the side-effecting half (NVML reads only, never a mutation);
:func:`compute_device_target` is pure.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterable
from dataclasses import dataclass

from dra_driver.devicemodel.naming import (
    gpu_device_name,
    mig_device_name,
    parse_mig_device_name,
    parse_shared_device_name,
    profile_name,
    shared_device_name,
)
from dra_driver.mig.catalog import GpuInstanceProfile, MigCatalog, Placement, load_catalog
from dra_driver.nvml.backend import Nvml
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
    shared: bool = False  # a shared device (gpu-<minor>-shared-...): the GI may hold several shares
    catalog_profile: GpuInstanceProfile | None = None  # the catalog's GI profile of a shared device

    @property
    def is_mig(self) -> bool:
        return self.profile is not None

    def share_size_problem(self, size: int) -> str | None:
        """Why a share of ``size`` compute slices cannot be had on this shared device; None if it can."""
        sizes = self.catalog_profile.share_sizes if self.catalog_profile is not None else ()
        if size in sizes:
            return None
        valid = ", ".join(str(s) for s in sizes) or "none"
        return (
            f"device {self.device_name}: a share of {size} compute slice(s) was allocated, but a share of "
            f"{self.profile_name} can have {valid} (consumedCapacity computeSlices)"
        )


def parse_any_mig_device_name(name: str) -> tuple[int, int, int, bool] | None:
    """(minor, GI profile ID, start, shared?) of an exclusive or a shared MIG device name; None otherwise."""
    exclusive = parse_mig_device_name(name)
    if exclusive is not None:
        return (*exclusive, False)
    shared = parse_shared_device_name(name)
    return (*shared, True) if shared is not None else None


class NodeGpus:
    """The node's GPUs for resolving device names: listed once, each read fresh only when a device names it.

    Why not read every GPU per prepare: that was ~440 NVML calls for a one-device claim on an 8-GPU
    node (identity, MIG mode and every profile with its placements of all eight), ~10 ms of NVML time
    per GPU on real hardware.  What can change is read again; what cannot is not:

    - the GPUs and their identities (UUID, minor number, PCI IDs, model) are fixed for an NVML session
      -- a GPU appears or disappears only with a driver reload, which ends the plugin's session -- so
      they are listed at the first prepare and kept, until a named GPU's MIG mode is not the listed
      one (see :meth:`topology`);
    - the MIG mode of a GPU can change at any moment (an administrator), so the GPU a device names is
      asked for its mode each time (:meth:`Nvml.mig_mode_and_profiles`, which keeps the profiles and
      placements per GPU for as long as that mode stays).

    GPUs no device of the call names appear with their listed identity and no profiles: resolving a
    device only ever looks at its own GPU.  Thread-safe; reads NVML, changes nothing.
    """

    def __init__(self, nvml: Nvml) -> None:
        self._nvml = nvml
        self._lock = threading.Lock()
        self._listed: tuple[GpuInfo, ...] | None = None

    def _gpus(self) -> tuple[GpuInfo, ...]:
        with self._lock:
            if self._listed is None:
                self._listed = tuple(self._nvml.list_gpus())
            return self._listed

    def topology(self, device_names: Iterable[str]) -> tuple[GpuTopology, ...]:
        """Every GPU; those ``device_names`` name with their MIG mode and profiles as NVML reports them now.

        A named GPU whose MIG mode is no longer the listed one makes the GPUs be listed again: changing
        the mode may reset or re-bind the GPU, and its minor number -- which device names, device nodes
        and capabilities use -- may change with it (docs/nvml-mig.md, "MIG mode, resets and privileges").
        """
        names = set(device_names)
        for attempt in (1, 2):
            gpus = self._gpus()
            named = {parsed[0] for parsed in map(parse_any_mig_device_name, names) if parsed is not None}
            named |= {gpu.minor_number for gpu in gpus if gpu_device_name(gpu.minor_number) in names}
            entries = []
            for gpu in gpus:
                if gpu.minor_number not in named or not gpu.mig_capable:
                    entries.append(GpuTopology(gpu, ()))
                    continue
                mode, profiles = self._nvml.mig_mode_and_profiles(gpu.uuid)
                if mode != gpu.mig_mode and attempt == 1:
                    break
                entries.append(GpuTopology(dataclasses.replace(gpu, mig_mode=mode), tuple(profiles)))
            else:
                return tuple(entries)
            with self._lock:
                self._listed = None
        return tuple(entries)


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
    parsed = parse_any_mig_device_name(device_name)
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
            "device name gpu-<minor>-mig-<profile>-<profile id>-<start> or gpu-<minor>-shared-...)"
        )
    minor, profile_id, start, shared = parsed
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
    model = catalog.identify(entry.gpu.pci_device_id, entry.gpu.name)
    name = profile_name(profile, model)
    placement = next((p for p in profile.placements if p.start == start), None)
    if placement is None:
        legal = ", ".join(str(p) for p in profile.placements)
        raise DeviceResolutionError(
            f"device {device_name}: start {start} is not a legal placement of {name} (profile {profile_id}) "
            f"on GPU {entry.gpu.uuid}; NVML's placements: {legal}"
        )
    expected = (shared_device_name if shared else mig_device_name)(minor, name, profile_id, start)
    if expected != device_name:
        raise DeviceResolutionError(
            f"device {device_name}: profile {profile_id} of GPU {minor} is {name}; the device is named {expected}"
        )
    if not entry.gpu.mig_enabled and not admin_access:
        raise DeviceResolutionError(f"device {device_name}: MIG mode is disabled on GPU {entry.gpu.uuid}")
    catalog_profile = None
    if shared:
        catalog_profile = (
            next((p for p in model.gpu_instance_profiles if p.profile_id == profile_id), None) if model else None
        )
        if catalog_profile is None or not catalog_profile.share_sizes:
            raise DeviceResolutionError(
                f"device {device_name}: GPU {entry.gpu.uuid} ({entry.gpu.name}) has no shared {name} device "
                "(its model is not in migdra's MIG catalog, or the profile holds one compute instance at a time)"
            )
    return DeviceTarget(device_name, entry.gpu.uuid, minor, profile, placement, name, shared, catalog_profile)
