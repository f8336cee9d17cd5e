"""The cluster's occupancy, per node and GPU, as Prometheus gauges.

:class:`OccupancyMetrics` turns :func:`dra_driver.clusterview.compute_cluster_occupancy` (what
``migdra status`` prints too) into gauges on a registry passed in (tests use a fresh one).  Names
follow the node plugin's conventions (``migdra_`` prefix, base units, ``_ratio`` for a fraction;
docs/metrics.md):

- ``migdra_gpu_reserved_instances{node,gpu,profile}``: devices allocated claims hold;
- ``migdra_gpu_realized_instances{node,gpu,profile}``: of those, the ones the plugin created (0 while
  a reserved profile is not realized yet, so ``reserved - realized`` is always defined);
- ``migdra_gpu_free_memory_slices{node,gpu}`` and ``migdra_gpu_foreign_memory_slices{node,gpu}``;
- ``migdra_gpu_largest_allocatable_memory_slices{node,gpu}`` (0: nothing fits) and the info-style
  ``migdra_gpu_largest_allocatable_profile{node,gpu,profile}`` (1, only while something fits);
- ``migdra_gpu_fragmentation_ratio{node,gpu}``: 1 - largest allocatable placement / free memory slices;
- ``migdra_gpu_info{node,gpu,gpu_uuid,product}``: 1, to join these with series labelled by GPU UUID.

A whole GPU (MIG disabled) is one memory slice with profile ``gpu``.  An update names pools (a node's
GPUs) and replaces what those pools said: series of GPUs, profiles and largest profiles that are gone
are removed, not left at their last value; other pools' series stay as they are, so the controller
computes only the pools whose slices or claims changed (on 500 nodes, every GPU's gauges again on each
refresh cost more than the reservations).
Never reads the API itself; never writes anything but the registry.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from prometheus_client import CollectorRegistry, Gauge

from dra_driver.devicemodel.occupancy import GpuOccupancy

_GPU_LABELS = ("node", "gpu")
_PROFILE_LABELS = ("node", "gpu", "profile")


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
        self._series: dict[str, dict[Gauge, set[tuple[str, ...]]]] = {}  # pool -> its series of each gauge

    def update(self, pools: Mapping[str, Sequence[GpuOccupancy]]) -> None:
        """Set the gauges of each pool's GPUs (pool name -> its GPUs now; none: the pool is gone) and
        remove the series those pools had and have no more."""
        for pool, gpus in pools.items():
            self._update_pool(pool, gpus)

    def _update_pool(self, pool: str, gpus: Sequence[GpuOccupancy]) -> None:
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
        before = self._series.pop(pool, {})
        for gauge, series in values.items():
            for labels in before.get(gauge, set()) - set(series):
                gauge.remove(*labels)
            for labels, value in series.items():
                gauge.labels(*labels).set(value)
        if gpus:
            self._series[pool] = {gauge: set(series) for gauge, series in values.items()}
