"""``migdra gpus``: read the node's MIG inventory through NVML and present it.

Reading (:func:`read_inventory`) and presenting (:func:`render`) are separate so the same inventory
can be shown as a table for people or as JSON/YAML for scripts.  Numbers come from NVML; the catalog
is only used to name a GPU's model and to flag profiles whose catalog numbers are not confirmed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import yaml

from dra_driver.mig.catalog import GpuModel, Placement, load_catalog
from dra_driver.nvml.backend import Nvml
from dra_driver.nvml.types import GpuInfo, GpuInstanceInfo, GpuInstanceProfileInfo


@dataclass(frozen=True)
class ProfileView:
    profile: GpuInstanceProfileInfo
    name: str
    free: tuple[Placement, ...]
    uncertain: tuple[str, ...]


@dataclass(frozen=True)
class GpuView:
    gpu: GpuInfo
    model: GpuModel | None
    profiles: tuple[ProfileView, ...]
    instances: tuple[GpuInstanceInfo, ...]


@dataclass(frozen=True)
class Inventory:
    driver_version: str
    cuda_driver_version: str
    gpus: tuple[GpuView, ...]


def _free_placements(
    session: Nvml, gpu: GpuInfo, profile: GpuInstanceProfileInfo, instances: tuple[GpuInstanceInfo, ...]
) -> tuple[Placement, ...]:
    """Placements where a GI of this profile could be created now (MIG on, no overlap, capacity left)."""
    if not gpu.mig_enabled or session.remaining_capacity(gpu.uuid, profile.profile_id) == 0:
        return ()
    return tuple(p for p in profile.placements if not any(p.overlaps(gi.placement) for gi in instances))


def read_inventory(session: Nvml) -> Inventory:
    catalog = load_catalog()
    views = []
    for gpu in session.list_gpus():
        model = catalog.identify(gpu.pci_device_id, gpu.name)
        instances = tuple(session.gpu_instances(gpu.uuid)) if gpu.mig_enabled else ()
        profiles = []
        for profile in session.gpu_instance_profiles(gpu.uuid):
            known = None
            if model is not None:
                known = next((p for p in model.gpu_instance_profiles if p.profile_id == profile.profile_id), None)
            name = known.name if known else profile.name.removeprefix("MIG ")
            uncertain = tuple(sorted(known.uncertain)) if known else ()
            profiles.append(ProfileView(profile, name, _free_placements(session, gpu, profile, instances), uncertain))
        views.append(GpuView(gpu, model, tuple(profiles), instances))
    return Inventory(session.driver_version(), session.cuda_driver_version(), tuple(views))


def _profile_name(view: GpuView, profile_id: int) -> str:
    return next((p.name for p in view.profiles if p.profile.profile_id == profile_id), f"profile {profile_id}")


def _mig_mode_text(gpu: GpuInfo) -> str:
    if gpu.mig_mode is None:
        return "MIG not supported"
    text = "MIG enabled" if gpu.mig_mode.enabled else "MIG disabled"
    if gpu.mig_mode.reset_pending:
        text += f" (pending {'enable' if gpu.mig_mode.pending else 'disable'}: GPU reset required)"
    return text


def _table(inventory: Inventory, all_placements: bool) -> str:
    lines = [f"NVIDIA driver {inventory.driver_version}, CUDA {inventory.cuda_driver_version}", ""]
    any_uncertain = False
    for view in inventory.gpus:
        gpu = view.gpu
        model = view.model.key if view.model else "unknown model"
        lines.append(
            f"GPU {gpu.index}  {gpu.name}  [{model}]  {gpu.uuid}  {gpu.pci_bus_id}  minor {gpu.minor_number}  "
            f"{gpu.memory_total_bytes // 2**20} MiB  {_mig_mode_text(gpu)}"
        )
        for gi in view.instances:
            cis = ", ".join(f"CI {ci.compute_instance_id} {ci.mig_uuid}" for ci in gi.compute_instances) or "no CI"
            lines.append(
                f"  GI {gi.gpu_instance_id:<2} {_profile_name(view, gi.profile_id):<14} at {gi.placement}  ({cis})"
            )
        header = (
            f"  {'PROFILE':<16}{'ID':>4}{'SMS':>5}{'MEMORY':>11}{'CE':>4}{'DEC':>4}{'ENC':>4}{'JPG':>4}{'OFA':>4}"
            f"{'MAX':>5}  {'PLACEMENTS start:size (* = free now)' if all_placements else 'FREE PLACEMENTS'}"
        )
        lines.append(header)
        for pv in view.profiles:
            p = pv.profile
            shown = p.placements if all_placements else pv.free
            placements = " ".join(f"{pl}{'*' if pl in pv.free and all_placements else ''}" for pl in shown) or "-"
            mark = "†" if pv.uncertain else ""
            any_uncertain = any_uncertain or bool(pv.uncertain)
            lines.append(
                f"  {pv.name + mark:<16}{p.profile_id:>4}{p.multiprocessor_count:>5}{p.memory_size_mb:>7} MiB"
                f"{p.copy_engine_count:>4}{p.decoder_count:>4}{p.encoder_count:>4}{p.jpeg_count:>4}{p.ofa_count:>4}"
                f"{p.instance_count:>5}  {placements}"
            )
        lines.append("")
    if any_uncertain:
        lines.append("† the catalog marks some of this profile's numbers as inferred or estimated (see -o yaml)")
    return "\n".join(lines) + "\n"


def _as_data(inventory: Inventory) -> dict[str, object]:
    return {
        "driverVersion": inventory.driver_version,
        "cudaDriverVersion": inventory.cuda_driver_version,
        "gpus": [
            {
                "index": v.gpu.index,
                "uuid": v.gpu.uuid,
                "name": v.gpu.name,
                "model": v.model.key if v.model else None,
                "pciBusID": v.gpu.pci_bus_id,
                "minor": v.gpu.minor_number,
                "memoryMiB": v.gpu.memory_total_bytes // 2**20,
                "migEnabled": v.gpu.mig_enabled,
                "migResetPending": bool(v.gpu.mig_mode and v.gpu.mig_mode.reset_pending),
                "gpuInstances": [
                    {
                        "id": gi.gpu_instance_id,
                        "profile": _profile_name(v, gi.profile_id),
                        "profileID": gi.profile_id,
                        "placement": {"start": gi.placement.start, "size": gi.placement.size},
                        "computeInstances": [
                            {
                                "id": ci.compute_instance_id,
                                "profileID": ci.profile_id,
                                "migUUID": ci.mig_uuid,
                                "multiprocessors": ci.multiprocessor_count,
                            }
                            for ci in gi.compute_instances
                        ],
                    }
                    for gi in v.instances
                ],
                "profiles": [
                    {
                        "name": pv.name,
                        "profileID": pv.profile.profile_id,
                        "nvmlProfileIndex": pv.profile.nvml_profile_index,
                        "multiprocessors": pv.profile.multiprocessor_count,
                        "memoryMiB": pv.profile.memory_size_mb,
                        "copyEngines": pv.profile.copy_engine_count,
                        "decoders": pv.profile.decoder_count,
                        "encoders": pv.profile.encoder_count,
                        "jpegEngines": pv.profile.jpeg_count,
                        "ofaEngines": pv.profile.ofa_count,
                        "maxInstances": pv.profile.instance_count,
                        "placements": [{"start": p.start, "size": p.size} for p in pv.profile.placements],
                        "freePlacements": [{"start": p.start, "size": p.size} for p in pv.free],
                        "uncertainInCatalog": list(pv.uncertain),
                    }
                    for pv in v.profiles
                ],
            }
            for v in inventory.gpus
        ],
    }


def render(inventory: Inventory, output: str, *, all_placements: bool = True) -> str:
    if output == "json":
        return json.dumps(_as_data(inventory), indent=2) + "\n"
    if output == "yaml":
        return yaml.safe_dump(_as_data(inventory), sort_keys=False)
    return _table(inventory, all_placements)
