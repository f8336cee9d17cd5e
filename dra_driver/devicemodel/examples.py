"""Deterministic example inventories and slices straight from the catalog, for tests, docs and tools.

The production path reads the inventory through NVML (``dra_driver.nvml.inventory``); this module
builds the inventory a freshly booted node with the given GPU models would report, without NVML, so
golden files, CEL examples and benchmarks are reproducible byte for byte.  A test keeps it equal to
what the simulated NVML reports for the same models.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from dra_driver.devicemodel.config import DeviceModelConfig
from dra_driver.devicemodel.layout import render_slices
from dra_driver.devicemodel.pool import build_pool
from dra_driver.devicemodel.vocabulary import DEFAULT_DRIVER_NAME
from dra_driver.mig.catalog import GpuModel, MigCatalog, load_catalog
from dra_driver.nvml.types import (
    GpuInfo,
    GpuInstanceProfileInfo,
    GpuInventory,
    MigMode,
    MigModeState,
    NodeInventory,
)

_EXAMPLE_NAMESPACE = uuid.UUID("6f1c1e0a-6d3f-4f58-9a55-6d6967647261")


def _profiles(model: GpuModel) -> tuple[GpuInstanceProfileInfo, ...]:
    return tuple(
        GpuInstanceProfileInfo(
            nvml_profile_index=p.nvml_profile_index,
            profile_id=p.profile_id,
            name=f"MIG {p.name}",
            slice_count=p.slice_count,
            instance_count=p.instance_count,
            multiprocessor_count=p.multiprocessor_count,
            copy_engine_count=p.copy_engine_count,
            decoder_count=p.decoder_count,
            encoder_count=p.encoder_count,
            jpeg_count=p.jpeg_count,
            ofa_count=p.ofa_count,
            memory_size_mb=p.memory_size_mb,
            is_p2p_supported=bool(p.is_p2p_supported),
            placements=p.placements,
        )
        for p in sorted(model.gpu_instance_profiles, key=lambda p: p.nvml_profile_index)
    )


def example_inventory(
    gpus: Sequence[str],
    mig_enabled: bool = True,
    driver_version: str = "580.65.06",
    cuda_driver_version: str = "13.0",
    catalog: MigCatalog | None = None,
) -> NodeInventory:
    """A node with ``gpus`` (catalog keys or aliases) at minors 0, 1, …, no instances created."""
    catalog = catalog or load_catalog()
    mode = MigMode.ENABLED if mig_enabled else MigMode.DISABLED
    entries = []
    for index, name in enumerate(gpus):
        model = catalog.model(name)
        major, minor = (int(part) for part in model.cuda_compute_capability.split("."))
        gpu = GpuInfo(
            index=index,
            uuid=f"GPU-{uuid.uuid5(_EXAMPLE_NAMESPACE, f'{index}/{model.key}')}",
            name=model.nvml_name,
            minor_number=index,
            pci_bus_id=f"00000000:{0x1B + 0x10 * index:02X}:00.0",
            pci_device_id=int(model.pci_device_id, 16),
            nvml_architecture=model.nvml_architecture,
            cuda_compute_capability=(major, minor),
            memory_total_bytes=model.total_memory_mib * 2**20,
            mig_mode=MigModeState(current=mode, pending=mode),
            numa_node=index * 2 // max(len(gpus), 1),
            nvml_brand=model.nvml_brand,
            nvml_addressing_mode=model.nvml_addressing_mode,
        )
        entries.append(GpuInventory(gpu=gpu, profiles=_profiles(model), gpu_instances=()))
    return NodeInventory(driver_version, cuda_driver_version, tuple(entries))


def example_slices(
    gpus: Sequence[str],
    mig_enabled: bool = True,
    driver_name: str = DEFAULT_DRIVER_NAME,
    node_name: str = "example-node",
) -> list[dict[str, Any]]:
    """The ResourceSlices such a node would publish (pool generation 1)."""
    pool = build_pool(example_inventory(gpus, mig_enabled), DeviceModelConfig(driver_name=driver_name))
    return render_slices(pool, node_name, generation=1)
