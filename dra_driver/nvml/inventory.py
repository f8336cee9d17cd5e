"""Read the node's MIG inventory through NVML in one pass.

The device model is pure and takes a :class:`~dra_driver.nvml.types.NodeInventory`; this module is the
side-effecting half that fills it from :class:`~dra_driver.nvml.backend.Nvml`.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from dra_driver.host.pci import normalise_pci_bus_id, pcie_root
from dra_driver.nvml.backend import Nvml
from dra_driver.nvml.types import GpuInfo, GpuInstanceProfileInfo, GpuInventory, NodeInventory


def read_gpu_profiles(nvml: Nvml) -> list[tuple[GpuInfo, tuple[GpuInstanceProfileInfo, ...]]]:
    """Every GPU NVML lists, with its GI profiles (placements included); none for a GPU without MIG.

    The one read of "which GPUs, which profiles" both the publisher (via :func:`read_inventory`) and
    prepare (its device topology) use.  Reads NVML, changes nothing.
    """
    return [(gpu, tuple(nvml.gpu_instance_profiles(gpu.uuid)) if gpu.mig_capable else ()) for gpu in nvml.list_gpus()]


def read_inventory(nvml: Nvml, sysfs: Path = Path("/sys")) -> NodeInventory:
    """Every GPU with its GI profiles (and placements), existing GPU instances and PCIe root."""
    gpus = []
    for listed, profiles in read_gpu_profiles(nvml):
        gpu = dataclasses.replace(listed, pcie_root=pcie_root(normalise_pci_bus_id(listed.pci_bus_id), sysfs))
        instances = tuple(nvml.gpu_instances(gpu.uuid)) if gpu.mig_enabled else ()
        gpus.append(GpuInventory(gpu=gpu, profiles=profiles, gpu_instances=instances))
    return NodeInventory(
        driver_version=nvml.driver_version(),
        cuda_driver_version=nvml.cuda_driver_version(),
        gpus=tuple(gpus),
    )
