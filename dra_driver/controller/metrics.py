"""The cluster's occupancy, per node and GPU, as Prometheus gauges; and the one way to compute it.

:func:`compute_cluster_occupancy` is :func:`dra_driver.devicemodel.occupancy.occupancy` with the claim
status read as :mod:`dra_driver.claimstatus` defines it (``Ready`` + ``migUUID`` from the plugin,
``Reserved`` from this controller); ``migdra status`` prints the same result.  :class:`OccupancyMetrics`
turns it into gauges on a registry passed in (tests use a fresh one).  Names follow the node plugin's
conventions (``migdra_`` prefix, base units, ``_ratio`` for a fraction; docs/metrics.md):

- ``migdra_gpu_reserved_instances{node,gpu,profile}``: devices allocated claims hold;
- ``migdra_gpu_realized_instances{node,gpu,profile}``: of those, the ones the plugin created (0 while
  a reserved profile is not realized yet, so ``reserved - realized`` is always defined);
- ``migdra_gpu_free_memory_slices{node,gpu}`` and ``migdra_gpu_foreign_memory_slices{node,gpu}``;
- ``migdra_gpu_largest_allocatable_memory_slices{node,gpu}`` (0: nothing fits) and the info-style
  ``migdra_gpu_largest_allocatable_profile{node,gpu,profile}`` (1, only while something fits);
- ``migdra_gpu_fragmentation_ratio{node,gpu}``: 1 - largest allocatable placement / free memory slices;
- ``migdra_gpu_info{node,gpu,gpu_uuid,product}``: 1, to join these with series labelled by GPU UUID.

A whole GPU (MIG disabled) is one memory slice with profile ``gpu``.  Every update replaces the last:
series of GPUs, profiles and largest profiles that are gone are removed, not left at their last value.
Never reads the API itself; never writes anything but the registry.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Gauge

from dra_driver.claimstatus import READY, RESERVED, condition_of, find_entry
from dra_driver.devicemodel.occupancy import DeviceState, GpuOccupancy, occupancy

_GPU_LABELS = ("node", "gpu")
_PROFILE_LABELS = ("node", "gpu", "profile")


def read_device_state(claim: Mapping[str, Any], driver: str, pool: str, device: str) -> DeviceState:
    """What ``claim``'s ``status.devices[]`` entry of this device says: realized (``Ready`` True), its
    MIG identity, and a conflict when ``Reserved`` is False (``PlacementConflict``, ``DeviceGone``)."""
    entries = [e for e in (claim.get("status") or {}).get("devices") or [] if isinstance(e, Mapping)]
    index = find_entry(entries, driver, pool, device)
    if index is None:
        return DeviceState()
    entry = entries[index]
    raw_data = entry.get("data")
    data: Mapping[str, Any] = raw_data if isinstance(raw_data, Mapping) else {}
    ready, reserved = condition_of(entry, READY), condition_of(entry, RESERVED)
    conflict = None
    if reserved is not None and reserved.get("status") == "False":
        reason, message = reserved.get("reason") or "Unknown", reserved.get("message") or ""
        conflict = f"{reason}: {message}" if message else str(reason)
    mig_uuid, gi, ci = data.get("migUUID"), data.get("gpuInstanceID"), data.get("computeInstanceID")
    return DeviceState(
        realized=ready is not None and ready.get("status") == "True",
        mig_uuid=mig_uuid if isinstance(mig_uuid, str) and mig_uuid else None,
        gpu_instance_id=gi if isinstance(gi, int) else None,
        compute_instance_id=ci if isinstance(ci, int) else None,
        conflict=conflict,
    )


def compute_cluster_occupancy(
    slices: Iterable[Mapping[str, Any]], claims: Iterable[Mapping[str, Any]], driver: str
) -> list[GpuOccupancy]:
    """Every GPU of ``driver``: held slices, foreign slices, realized instances, what still fits; pure."""
    return occupancy(slices, claims, driver, read_device_state)


class OccupancyMetrics:
    """Per node and GPU: reserved and realized instances per profile, free and foreign memory slices,
    the largest allocatable profile and the fragmentation index."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.reserved_instances = Gauge(
            "migdra_gpu_reserved_instances",
            "devices of the GPU that allocated claims hold, per profile ('gpu' for a whole GPU)",
            _PROFILE_LABELS,
            registry=registry,
        )
        self.realized_instances = Gauge(
            "migdra_gpu_realized_instances",
            "reserved devices the node plugin has created (Ready=True with a MIG UUID), per profile",
            _PROFILE_LABELS,
            registry=registry,
        )
        self.free_memory_slices = Gauge(
            "migdra_gpu_free_memory_slices",
            "memory slices of the GPU neither a claim nor a foreign instance holds",
            _GPU_LABELS,
            registry=registry,
        )
        self.foreign_memory_slices = Gauge(
            "migdra_gpu_foreign_memory_slices",
            "memory slices of the GPU that instances migdra did not create occupy",
            _GPU_LABELS,
            registry=registry,
        )
        self.largest_allocatable_memory_slices = Gauge(
            "migdra_gpu_largest_allocatable_memory_slices",
            "memory slices of the largest device that still fits the GPU's counters (0: none fits)",
            _GPU_LABELS,
            registry=registry,
        )
        self.largest_allocatable_profile = Gauge(
            "migdra_gpu_largest_allocatable_profile",
            "1 for the profile of the largest device that still fits the GPU (no series when none fits)",
            _PROFILE_LABELS,
            registry=registry,
        )
        self.gpu_info = Gauge(
            "migdra_gpu_info",
            "1 per GPU: its device-model name (gpu), NVML UUID and product, to join the per-GPU series with "
            "series labelled by GPU UUID (migdra_mig_instance_info, DCGM's UUID)",
            ("node", "gpu", "gpu_uuid", "product"),
            registry=registry,
        )
        self.fragmentation = Gauge(
            "migdra_gpu_fragmentation_ratio",
            "1 - largest allocatable placement / free memory slices; 0 when nothing is free",
            _GPU_LABELS,
            registry=registry,
        )
        self._series: dict[Gauge, set[tuple[str, ...]]] = {}

    def update(self, gpus: Sequence[GpuOccupancy]) -> None:
        """Set every gauge from ``gpus`` and remove the series no GPU of ``gpus`` has any more."""
        values: dict[Gauge, dict[tuple[str, ...], float]] = {
            gauge: {}
            for gauge in (
                self.reserved_instances,
                self.realized_instances,
                self.free_memory_slices,
                self.foreign_memory_slices,
                self.largest_allocatable_memory_slices,
                self.largest_allocatable_profile,
                self.fragmentation,
                self.gpu_info,
            )
        }
        for gpu in gpus:
            where = (gpu.node, gpu.name)
            reserved, realized = gpu.instances_by_profile(realized=False), gpu.instances_by_profile(realized=True)
            for profile, count in reserved.items():
                values[self.reserved_instances][(*where, profile)] = count
                values[self.realized_instances][(*where, profile)] = realized.get(profile, 0)
            values[self.free_memory_slices][where] = gpu.free_slices
            values[self.foreign_memory_slices][where] = len(gpu.foreign_slices)
            largest = gpu.largest_allocatable
            values[self.largest_allocatable_memory_slices][where] = largest.placement_size if largest else 0
            if largest is not None:
                values[self.largest_allocatable_profile][(*where, largest.profile)] = 1
            values[self.fragmentation][where] = gpu.fragmentation
            values[self.gpu_info][(*where, gpu.uuid, gpu.product)] = 1
        for gauge, series in values.items():
            for labels in self._series.get(gauge, set()) - set(series):
                gauge.remove(*labels)
            for labels, value in series.items():
                gauge.labels(*labels).set(value)
            self._series[gauge] = set(series)
