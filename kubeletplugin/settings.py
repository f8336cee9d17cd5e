"""Settings of the node process, ``migdra kubelet-plugin``: every flag and its ``MIGDRA_*`` variable.

Two groups, each a pydantic-settings model with a documented field per setting (unit in the text):
:class:`PluginSettings` (the process: names, kubelet's directories, publishing, health, the API's
backoff, placement) and :class:`PrepareSettings` (the prepare path: files, concurrency, timeouts).
They are built once at start-up by the CLI (a flag wins over its variable; an invalid value is one
line naming the flag, :func:`dra_driver.errors.describe_settings_error`) and passed explicitly to
what needs them; nothing in the node process reads the environment itself.  The other commands'
groups live beside what reads them in the same way: :mod:`dra_driver.nvml.settings` (which NVML),
:mod:`dra_driver.controller.settings` (``migdra controller``), ``LogSettings`` in
:mod:`dra_driver.logs`.  docs/configuration.md is generated from these models.
"""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Annotated

from pydantic import Field, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from dra_driver.devicemodel.naming import check_driver_name, node_name_problem
from dra_driver.devicemodel.policy import DEFAULT_POLICY
from dra_driver.devicemodel.policy import placement_policy as policy_named
from dra_driver.devicemodel.vocabulary import DEFAULT_DRIVER_NAME
from dra_driver.flags import flag
from dra_driver.kube.failures import BackoffPolicy
from dra_driver.serving import parse_metrics_address

KUBELET_REGISTRY_DIR = Path("/var/lib/kubelet/plugins_registry")
KUBELET_PLUGINS_DIR = Path("/var/lib/kubelet/plugins")
PUBLISH_ROUNDS_BEFORE_STUCK = 3
DEFAULT_IGNORED_XIDS = frozenset({13, 31, 43, 45, 68, 109})
"""Application errors, not hardware faults (as NVIDIA's device plugin and DRA driver skip them)."""


class CrashPoint(enum.StrEnum):
    """Where a test may have prepare SIGKILL its process (``MIGDRA_TEST_CRASH_AT``), in the order prepare
    passes them (``PrepareContext.crash`` in kubeletplugin/prepare/kinds/base.py): a crash point dies the
    way ``kill -9`` does -- no exception handlers, no ``finally`` blocks, no atexit -- so the files and
    the (simulated) hardware are left
    exactly as a real crash would leave them.  The simulator's own fault plan (``MIGDRA_SIM_FAULTS``,
    ``kill_after``) covers crashes inside NVML calls."""

    AFTER_CHECKPOINT_STARTED = "after-checkpoint-started"
    AFTER_CHECKPOINT_REQUESTED = "after-checkpoint-requested"  # the GI request recorded, NVML not called yet
    AFTER_GPU_INSTANCE = "after-gpu-instance"  # the GI exists, its ID is not recorded yet
    AFTER_CHECKPOINT_GPU_INSTANCE = "after-checkpoint-gpu-instance"  # the GI ID recorded, no CI yet
    # a share: its CI request (placement, the CIs standing) recorded, NVML not called yet
    AFTER_CHECKPOINT_COMPUTE_INSTANCE_REQUESTED = "after-checkpoint-compute-instance-requested"
    AFTER_COMPUTE_INSTANCE = "after-compute-instance"
    AFTER_CHECKPOINT_COMPUTE_INSTANCE = "after-checkpoint-compute-instance"  # a share: its CI's identity recorded
    AFTER_CDI = "after-cdi"
    AFTER_CHECKPOINT_COMPLETED = "after-checkpoint-completed"


class PluginSettings(BaseSettings):
    """Settings of the node process (flags of ``migdra kubelet-plugin`` or ``MIGDRA_*`` variables)."""

    model_config = SettingsConfigDict(env_prefix="MIGDRA_", extra="forbid", frozen=True)

    node_name: str = Field(
        description="this node's name: the pool name and the slices' owner", json_schema_extra=flag()
    )
    driver_name: str = Field(
        default=DEFAULT_DRIVER_NAME, description="DRA driver name and attribute domain", json_schema_extra=flag()
    )
    kubeconfig: Path | None = Field(
        default=None, description="kubeconfig file; in-cluster config when unset", json_schema_extra=flag(path="file")
    )
    device_config: Path | None = Field(
        default=None, description="device model configuration (YAML)", json_schema_extra=flag(path="existing-file")
    )
    rescan_interval: float = Field(
        default=60.0, gt=0, description="seconds between NVML rescans", json_schema_extra=flag()
    )
    api_timeout: float = Field(
        default=10.0, gt=0, description="seconds per API server request (the process's one API client: every part)"
    )
    cleanup_on_exit: bool = Field(
        default=False,
        description="delete this node's ResourceSlices on exit",
        json_schema_extra=flag(off="--keep-slices-on-exit"),
    )
    metrics_address: str | None = Field(
        default=None,
        description="serve Prometheus metrics on HOST:PORT (e.g. 0.0.0.0:9400); off when unset",
        json_schema_extra=flag(metavar="HOST:PORT"),
    )
    healthcheck_address: str | None = Field(
        default=None,
        description="serve the liveness check (gRPC grpc.health.v1.Health, for a livenessProbe: grpc) on HOST:PORT "
        "(e.g. :51515): SERVING while kubelet's sockets answer and the publish loop and every other background "
        "loop run; off when unset",
        json_schema_extra=flag(metavar="HOST:PORT"),
    )
    registry_dir: Path = Field(
        default=KUBELET_REGISTRY_DIR,
        description="kubelet's plugin registration directory",
        json_schema_extra=flag(path="dir"),
    )
    plugin_dir: Path | None = Field(
        default=None,
        description="directory of dra.sock; default /var/lib/kubelet/plugins/<driver name>",
        json_schema_extra=flag(path="dir"),
    )
    pod_uid: str | None = Field(
        default=None,
        description="rolling-update mode: socket names carry this pod UID (from the downward API)",
        json_schema_extra=flag(),
    )
    shutdown_grace: float = Field(default=30.0, ge=0, description="seconds in-flight kubelet calls get at shutdown")
    health: bool = Field(
        default=True,
        description="serve kubelet's DRA resource-health stream (v1alpha1.DRAResourceHealth: kubelets with feature "
        "gate ResourceHealthStatus, beta and on from 1.36, open it for every plugin that offers it and show it in "
        "pod status): a device is unhealthy while its GPU does not answer NVML or while it carries a GPU fault's "
        "taint",
        json_schema_extra=flag(),
    )
    health_interval: float = Field(default=10.0, gt=0, description="seconds between health reports to kubelet")
    device_taints: bool = Field(
        default=True,
        description="watch NVML for GPU faults (XIDs, double-bit ECC, GPU lost) and publish the devices they "
        "concern with NoSchedule taints <driver>/xid, <driver>/double-bit-ecc, <driver>/gpu-lost, kept in "
        "the state directory across restarts (docs/operations.md); needs the whole plugin, not --publish-only",
        json_schema_extra=flag(),
    )
    health_clear_after: float = Field(
        default=0.0,
        ge=0,
        description="seconds without a new fault event after which a fault's taint is dropped by itself; 0: "
        "never (only `migdra health clear` drops it)",
        json_schema_extra=flag(metavar="SECONDS"),
    )
    health_ignored_xids: Annotated[frozenset[int], NoDecode] = Field(
        default=DEFAULT_IGNORED_XIDS,
        description="XIDs that taint nothing, comma-separated (default the application errors 13,31,43,45,68,109); "
        "an empty value ignores none",
        json_schema_extra=flag(metavar="XID,..."),
    )
    api_backoff_initial: float = Field(
        default=0.5,
        gt=0,
        description="seconds before the first retry of an API request the server did not answer, throttled or "
        "failed (publishing slices, writing claim status); doubled per failure up to MIGDRA_API_BACKOFF_MAX, "
        "with jitter. An API outage is retried for as long as it lasts",
    )
    api_backoff_max: float = Field(
        default=30.0, gt=0, description="the longest wait, in seconds, between retries of a failing API request"
    )
    status_reconcile_interval: float = Field(
        default=60.0,
        gt=0,
        description="seconds between reconciliations of the claims' status.devices with the checkpoint (one "
        "also runs at start): a claim says Ready with its MIG identity exactly while its instance exists",
    )
    realize_before_bind: bool = Field(
        default=False,
        description="realize before bind: devices are published with the binding condition <driver>/realized "
        "and the failure condition <driver>/realization-failed; the plugin creates a claim's MIG instance as "
        "soon as it is allocated here, before the pod is bound, and a failed creation sends the pod to another "
        "placement. Needs kube-scheduler's DRADeviceBindingConditions and DRAResourceClaimDeviceStatus; such "
        "pools are tried after all others (docs/prepare.md)",
        json_schema_extra=flag(),
    )
    placement_policy: str = Field(
        default=DEFAULT_POLICY,
        description="how the devices are grouped into slices and ordered, which steers kube-scheduler's choice: "
        "static (a fixed order, never re-published for claims) or dynamic (best fit from the claims allocated "
        "here: watches ResourceClaims and re-publishes the order as they come and go); name-order and hami are "
        "comparison baselines for benchmarks, not for production",
        json_schema_extra=flag(metavar="NAME"),
    )
    placement_debounce: float = Field(
        default=0.2,
        ge=0,
        description="dynamic placement: seconds from a change of the claims allocated here to the re-publish "
        "(changes meanwhile go with it)",
    )
    placement_min_interval: float = Field(
        default=1.0,
        ge=0,
        description="dynamic placement: the fewest seconds between two re-publishes for claim changes; a change "
        "in between is published at the end of that time",
    )

    @field_validator("node_name")
    @classmethod
    def _node_name(cls, value: str) -> str:
        problem = node_name_problem(value)
        if problem is not None:
            raise ValueError(
                f"not a Kubernetes node name: it {problem}; give the node's name as `kubectl get nodes` shows it"
            )
        return value

    @field_validator("driver_name")
    @classmethod
    def _driver_name(cls, value: str) -> str:
        return check_driver_name(value)

    @field_validator("placement_policy")
    @classmethod
    def _placement_policy(cls, value: str) -> str:
        policy_named(value)  # a ValueError naming the known ones
        return value

    @field_validator("health_ignored_xids", mode="before")
    @classmethod
    def _health_ignored_xids(cls, value: object) -> object:
        if not isinstance(value, str):
            return value
        xids = set()
        for item in (part.strip() for part in value.split(",")):
            if not item:
                continue
            if not item.isdigit():
                raise ValueError(f"{item!r} is not an XID; give XID numbers separated by commas, e.g. 13,31,43")
            xids.add(int(item))
        return frozenset(xids)

    @field_validator("metrics_address", "healthcheck_address")
    @classmethod
    def _metrics_address(cls, value: str | None) -> str | None:
        if value is not None:
            parse_metrics_address(value)
        return value

    @field_validator("api_backoff_max")
    @classmethod
    def _api_backoff_max(cls, value: float, info: ValidationInfo) -> float:
        initial = info.data.get("api_backoff_initial")
        if isinstance(initial, float) and value < initial:
            raise ValueError(f"must be at least MIGDRA_API_BACKOFF_INITIAL ({initial:g} s)")
        return value

    @property
    def publish_stuck_after(self) -> float:
        """Seconds without a finished publish round after which the liveness check fails: a few rescan
        intervals, each with the longest retry wait (a round failing through an API outage still finishes)."""
        return PUBLISH_ROUNDS_BEFORE_STUCK * (self.rescan_interval + self.api_backoff_max)

    @property
    def plugin_directory(self) -> Path:
        return self.plugin_dir or KUBELET_PLUGINS_DIR / self.driver_name

    @property
    def api_backoff(self) -> BackoffPolicy:
        """How every writer of this process (slices, claim status) waits between retries."""
        return BackoffPolicy(self.api_backoff_initial, self.api_backoff_max)


class PrepareSettings(BaseSettings):
    """Where prepare keeps its files, how much it does at once, and the test-only crash point."""

    model_config = SettingsConfigDict(env_prefix="MIGDRA_", extra="forbid", frozen=True)

    cdi_dir: Path = Field(
        default=Path("/var/run/cdi"),
        description="directory of the per-claim CDI spec files",
        json_schema_extra=flag(path="dir"),
    )
    state_dir: Path = Field(
        default=Path("/var/lib/kubelet/plugins/gpu.migdra.io"),
        description="directory of the checkpoint (checkpoint.json), its lock (prepare.lock) and the claim and GPU "
        "lock files (locks/); shared by the two plugin pods of a rolling update",
        json_schema_extra=flag(path="dir"),
    )
    device_metadata: bool = Field(
        default=True,
        description="write each prepared request's KEP-5304 device metadata file (the device's published "
        "attributes, MIG UUID, GI/CI IDs) and bind-mount it into the container through the claim's CDI spec "
        "at /var/run/kubernetes.io/dra-device-attributes/...; off: neither files nor mounts",
        json_schema_extra=flag(),
    )
    plugin_data_dir: Path = Field(
        default=Path("/var/lib/kubelet/plugins/gpu.migdra.io"),
        description="directory under which the device metadata files are written (dra-device-metadata/); the "
        "path must be the same on the host, since the container runtime bind-mounts from it; default: the "
        "plugin directory (--plugin-dir)",
        json_schema_extra=flag(path="dir"),
    )
    proc_root: Path = Field(
        default=Path("/proc"), description="procfs root for the NVIDIA capability files and /proc/devices"
    )
    driver_root: Path = Field(
        default=Path("/"),
        description="where this process reads the NVIDIA driver's files (libraries, binaries, firmware) that "
        "every claim's CDI spec bind-mounts into the container; in a pod: where the host's driver root is "
        "mounted (e.g. /driver-root). With --nvml simulated the driver files are added only when this is set",
        json_schema_extra=flag(path="dir"),
    )
    host_driver_root: Path | None = Field(
        default=None,
        description="the same directory as the host sees it: the CDI spec's host paths are written under it, "
        "since the container runtime reads them on the host (/ for a driver installed on the host, "
        "/run/nvidia/driver for the GPU Operator's driver container); default: --driver-root",
        json_schema_extra=flag(path="dir"),
    )
    cdi_hook_path: Path | None = Field(
        default=None,
        description="host path of nvidia-cdi-hook (the NVIDIA Container Toolkit's hook the CDI spec runs to "
        "create the library symlinks and update the ld cache); default: found in the driver root's usr/bin, "
        "usr/local/bin, bin, usr/local/nvidia/toolkit",
        json_schema_extra=flag("--nvidia-cdi-hook-path", path="file"),
    )
    cdi_driver_files: bool = Field(
        default=True,
        description="add the driver's user-space libraries, binaries, firmware and IPC sockets as read-only bind "
        "mounts plus the nvidia-cdi-hook hooks to every claim's CDI spec, so a stock CUDA image runs; off: device "
        "nodes and environment only (the image brings a matching libcuda)",
        json_schema_extra=flag(),
    )
    dev_root: Path = Field(
        default=Path("/"),
        description="host directory whose dev/ holds the /dev/nvidia* device nodes: each node's CDI hostPath is "
        "<dev root>/dev/...; / on a node with NVIDIA's driver; a directory of nodes made with mknod for simulated "
        "GPUs on a real node (the runtime reads a node's type and numbers from its hostPath)",
        json_schema_extra=flag(path="dir"),
    )
    cdi_device_nodes: bool = Field(
        default=True,
        description="put the /dev/nvidia* device nodes into the CDI specs; off only where the node has none (a "
        "simulated node: the runtime refuses a container whose device node is missing)",
        json_schema_extra=flag(),
    )
    prepare_workers: int = Field(
        default=64,
        ge=1,
        le=256,
        description="claims of one request prepared / unprepared concurrently (threads; a one-claim request "
        "runs in kubelet's gRPC call thread instead). A thread waits on its GPU's lock, so fewer threads than "
        "the claims of one request would queue claims of idle GPUs behind a busy one",
    )
    state_lock_timeout: float = Field(
        default=30.0,
        ge=0,
        description="seconds to wait for a lock of the state directory (the checkpoint's, a claim's, a GPU's) that "
        "another thread or plugin process holds; then that claim fails and kubelet retries it (at start-up: the "
        "plugin stops)",
    )
    test_crash_at: CrashPoint | None = Field(
        default=None, description="TESTS ONLY: SIGKILL this process at that point of prepare"
    )

    @field_validator("driver_root", "host_driver_root", "dev_root")
    @classmethod
    def _absolute(cls, value: Path | None) -> Path | None:
        if value is not None and not value.is_absolute():
            raise ValueError("must be an absolute path")
        return value

    @property
    def host_driver_directory(self) -> Path:
        """The driver root as the host sees it (``--host-driver-root``, else ``--driver-root``)."""
        return self.host_driver_root if self.host_driver_root is not None else self.driver_root
