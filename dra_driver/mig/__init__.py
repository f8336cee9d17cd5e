"""MIG hardware facts: the catalog of GPU models, GPU-instance and compute-instance profiles."""

from dra_driver.mig.catalog import (
    Architecture,
    ComputeInstanceProfile,
    GpuInstanceProfile,
    GpuModel,
    MigCatalog,
    Placement,
    load_catalog,
)

__all__ = [
    "Architecture",
    "ComputeInstanceProfile",
    "GpuInstanceProfile",
    "GpuModel",
    "MigCatalog",
    "Placement",
    "load_catalog",
]
