"""Prometheus metrics of the node plugin, on a registry passed in (tests use a fresh one each).

Names follow Prometheus conventions (``migdra_`` prefix, ``_total`` for counters, base units).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


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
        self.placement_republishes = Counter(
            "migdra_placement_republishes_total",
            "publish rounds for a change of the claims allocated here alone (dynamic placement), by result: "
            "written (the order changed: a new pool generation), unchanged (the same order: no write)",
            ["result"],
            registry=registry,
        )
        self.placement_republish_writes = Counter(
            "migdra_placement_republish_writes_total",
            "ResourceSlice API writes of the publish rounds for a change of the claims allocated here",
            registry=registry,
        )

    def observe_placement_republish(self, writes: int) -> None:
        self.placement_republishes.labels("written" if writes else "unchanged").inc()
        if writes:
            self.placement_republish_writes.inc(writes)


# Latencies from sub-millisecond NVML reads to multi-second prepares of busy GPUs.
_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class PrepareMetrics:
    """What NodePrepareResources / NodeUnprepareResources, NVML and the checkpoint report.

    Per claim, not per kubelet call: one call may carry many claims, and each succeeds or fails alone.
    ``result`` is ``success`` or ``error`` for claims; for NVML calls it is ``success`` or the migdra
    error class (``NvmlInsufficientResources``), so refusals can be told from slowness.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self.claims = Counter(
            "migdra_claims_total",
            "claims prepared or unprepared, by operation (prepare, unprepare) and result (success, error)",
            ["operation", "result"],
            registry=registry,
        )
        self.claim_duration = Histogram(
            "migdra_claim_duration_seconds",
            "seconds to prepare or unprepare one claim, NVML and checkpoint included",
            ["operation", "result"],
            buckets=_LATENCY_BUCKETS,
            registry=registry,
        )
        self.nvml_call_duration = Histogram(
            "migdra_nvml_call_duration_seconds",
            "seconds per NVML call, by NVML function and result",
            ["function", "result"],
            buckets=_LATENCY_BUCKETS,
            registry=registry,
        )
        self.checkpoint_write_duration = Histogram(
            "migdra_checkpoint_write_duration_seconds",
            "seconds per durable checkpoint write (temporary file, fsync, rename, directory fsync)",
            buckets=_LATENCY_BUCKETS,
            registry=registry,
        )

        self.status_backlog = Gauge(
            "migdra_claim_status_backlog",
            "claim status writes and Events waiting to be written (grows while the API server is unavailable)",
            registry=registry,
        )
        self.status_failures = Counter(
            "migdra_claim_status_failures_total",
            "failed claim status or Event write attempts, by kind (unavailable: retried; refused; error)",
            ["kind"],
            registry=registry,
        )

    def watch_status_backlog(self, backlog: Callable[[], int]) -> None:
        self.status_backlog.set_function(backlog)

    def observe_status_failure(self, kind: str) -> None:
        self.status_failures.labels(kind).inc()

    def observe_claim(self, operation: str, seconds: float, ok: bool) -> None:
        result = "success" if ok else "error"
        self.claims.labels(operation, result).inc()
        self.claim_duration.labels(operation, result).observe(seconds)

    def observe_nvml_call(self, function: str, seconds: float, result: str) -> None:
        self.nvml_call_duration.labels(function, result).observe(seconds)

    def observe_checkpoint_write(self, seconds: float) -> None:
        self.checkpoint_write_duration.observe(seconds)


class RealizeMetrics:
    """What realize before bind reports (:mod:`kubeletplugin.realizer`), per claim.

    ``result`` of a realization: ``success`` (the ``realized`` condition is set), ``failed`` (the
    ``realization-failed`` condition is set: the scheduler places the pod anew); of a release of a
    claim realized ahead that no pod will get: ``success`` or ``error`` (kept, tried again).
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self.realizations = Counter(
            "migdra_realizations_total",
            "claims realized before their pod was bound, by result (success, failed)",
            ["result"],
            registry=registry,
        )
        self.releases = Counter(
            "migdra_realization_releases_total",
            "claims realized ahead whose allocation went away before kubelet prepared them, released, by result "
            "(success, error)",
            ["result"],
            registry=registry,
        )

    def observe_realization(self, ok: bool) -> None:
        self.realizations.labels("success" if ok else "failed").inc()

    def observe_release(self, ok: bool) -> None:
        self.releases.labels("success" if ok else "error").inc()


class FaultMetrics:
    """What the GPU fault watcher and the device taints report (kubeletplugin.gpu_faults)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.device_taints = Gauge(
            "migdra_device_taints",
            "published devices carrying a taint, by GPU and taint key (e.g. gpu.migdra.io/xid)",
            ["gpu_uuid", "key"],
            registry=registry,
        )
        self.nvml_events = Counter(
            "migdra_nvml_events_total",
            "NVML health events received (ignored XIDs included), by GPU and type: xid, double-bit-ecc, gpu-lost",
            ["gpu_uuid", "type"],
            registry=registry,
        )
        self._reported: set[tuple[str, str]] = set()

    def observe_nvml_event(self, gpu_uuid: str, event_type: str) -> None:
        self.nvml_events.labels(gpu_uuid, event_type).inc()

    def report_taints(self, counts: Mapping[tuple[str, str], int]) -> None:
        """Set the gauge to ``counts``; a (GPU, key) no longer tainted reads 0."""
        for labels in self._reported | set(counts):
            self.device_taints.labels(*labels).set(counts.get(labels, 0))
        self._reported |= set(counts)
