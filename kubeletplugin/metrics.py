"""Prometheus metrics of the node plugin, on a registry passed in (tests use a fresh one each).

Names follow Prometheus conventions (``migdra_`` prefix, ``_total`` for counters, base units).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge


class PublishMetrics:
    """What the slice publisher and the inventory scan report."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.foreign_gpu_instances = Gauge(
            "migdra_foreign_gpu_instances",
            "GPU instances migdra did not create (left alone; their placements are withheld)",
            ["gpu_uuid"],
            registry=registry,
        )
        self.published_devices = Gauge(
            "migdra_published_devices", "devices in this node's ResourceSlices", ["type"], registry=registry
        )
        self.slice_writes = Counter(
            "migdra_resourceslice_writes_total", "ResourceSlice API writes", ["operation"], registry=registry
        )
        self.pool_generation = Gauge("migdra_pool_generation", "current pool generation", registry=registry)
