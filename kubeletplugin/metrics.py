"""Prometheus metrics of the node plugin, on a registry passed in (tests use a fresh one each).

Names follow Prometheus conventions (``migdra_`` prefix, ``_total`` for counters, base units).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector


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
        self.control_plane_scale_limited = Gauge(
            "migdra_control_plane_scale_limited",
            "1 when the control plane's Kubernetes is older than 1.37, whose kube-scheduler slows down with the "
            "square of the nodes on partitionable devices (kubernetes/kubernetes#138917); 0 otherwise",
            registry=registry,
        )
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

        self.publish_rounds = Counter(
            "migdra_publish_rounds_total",
            "publish rounds (an NVML rescan, a trigger, a retry), by result: success (the API holds the slices "
            "rendered from the inventory, written or already there), or the kind of failure (api-unavailable, "
            "inventory-changed, refused, nvml, bug)",
            ["result"],
            registry=registry,
        )
        self.publish_rounds.labels("success")

    def observe_publish_round(self, result: str) -> None:
        self.publish_rounds.labels(result).inc()

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
    """What realize before bind reports (:mod:`kubeletplugin.realize_before_bind`), per claim.

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


@dataclass(frozen=True, slots=True)
class MigInstance:
    """A MIG instance migdra created for a claim, as the checkpoint records it (one info series)."""

    gpu_uuid: str
    mig_uuid: str
    profile: str
    gpu_instance_id: int
    compute_instance_id: int
    placement_start: int
    placement_size: int
    namespace: str
    claim: str
    claim_uid: str
    share_id: str = ""  # a share of a shared GI: its shareID (its own CI in a GI other shares hold too)
    compute_slices: int | None = None  # a share: its CI's compute slices; None: the whole GI's CI


MIG_INSTANCE_INFO = "migdra_mig_instance_info"
_MIG_INSTANCE_LABELS = (
    "node",
    "gpu_uuid",
    "mig_uuid",
    "profile",
    "gpu_instance_id",
    "compute_instance_id",
    "placement_start",
    "placement_size",
    # the claim's namespace, as the join with DCGM names it; the chart's ServiceMonitor scrapes with
    # honorLabels so the migdra pod's own namespace target label does not rename it to exported_namespace
    "namespace",
    "claim",
    "claim_uid",
    # a share (docs/sharing.md): several series name one GI, each its own CI; empty for a GI of one claim
    "share_id",
    "compute_slices",
)


class MigInstanceCollector(Collector):
    """``migdra_mig_instance_info``: 1 per MIG instance this plugin prepared, computed at scrape time
    from the checkpoint, so an unprepared instance's series is gone at the next scrape (no state to go
    stale).  Instances migdra did not create are not listed (``migdra_foreign_gpu_instances`` counts
    them): their claim is unknown, and this series exists to join a claim with DCGM's per-instance
    series (``gpu_uuid`` = DCGM's ``UUID``, ``gpu_instance_id`` = ``GPU_I_ID``; docs/metrics.md)."""

    def __init__(self, node: str, instances: Callable[[], Sequence[MigInstance]]) -> None:
        self._node = node
        self._instances = instances

    def _family(self) -> GaugeMetricFamily:
        return GaugeMetricFamily(
            MIG_INSTANCE_INFO,
            "1 for every MIG instance this plugin created for a claim (its identity, placement and claim)",
            labels=_MIG_INSTANCE_LABELS,
        )

    def describe(self) -> Iterator[Metric]:
        yield self._family()  # registering must not read the checkpoint

    def collect(self) -> Iterator[Metric]:
        family = self._family()
        for i in self._instances():
            family.add_metric(
                [
                    self._node,
                    i.gpu_uuid,
                    i.mig_uuid,
                    i.profile,
                    str(i.gpu_instance_id),
                    str(i.compute_instance_id),
                    str(i.placement_start),
                    str(i.placement_size),
                    i.namespace,
                    i.claim,
                    i.claim_uid,
                    i.share_id,
                    str(i.compute_slices) if i.compute_slices is not None else "",
                ],
                1,
            )
        yield family


def register_mig_instances(
    registry: CollectorRegistry, node: str, instances: Callable[[], Sequence[MigInstance]]
) -> None:
    """Serve ``migdra_mig_instance_info`` from ``instances`` (called at every scrape) on ``registry``."""
    registry.register(MigInstanceCollector(node, instances))
