"""Settings of the prepare path (flags of ``migdra kubelet-plugin`` or ``MIGDRA_*`` variables).

Built once at start-up by the node process and passed to :class:`~kubeletplugin.prepare.service.
PrepareService` explicitly; nothing in the prepare package reads the environment itself.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from kubeletplugin.prepare.crashpoints import CrashPoint


class PrepareSettings(BaseSettings):
    """Where prepare keeps its files, how much it does at once, and the test-only crash point."""

    model_config = SettingsConfigDict(env_prefix="MIGDRA_", extra="forbid", frozen=True)

    cdi_dir: Path = Field(default=Path("/var/run/cdi"), description="directory of the per-claim CDI spec files")
    state_dir: Path = Field(
        default=Path("/var/lib/kubelet/plugins/gpu.migdra.io"),
        description="directory of the checkpoint (checkpoint.json), its lock (prepare.lock) and the claim and GPU "
        "lock files (locks/); shared by the two plugin pods of a rolling update",
    )
    device_metadata: bool = Field(
        default=True,
        description="write each prepared request's KEP-5304 device metadata file (the device's published "
        "attributes, MIG UUID, GI/CI IDs) and bind-mount it into the container through the claim's CDI spec "
        "at /var/run/kubernetes.io/dra-device-attributes/...; off: neither files nor mounts",
    )
    plugin_data_dir: Path = Field(
        default=Path("/var/lib/kubelet/plugins/gpu.migdra.io"),
        description="directory under which the device metadata files are written (dra-device-metadata/); the "
        "path must be the same on the host, since the container runtime bind-mounts from it; default: the "
        "plugin directory (--plugin-dir)",
    )
    proc_root: Path = Field(
        default=Path("/proc"), description="procfs root for the NVIDIA capability files and /proc/devices"
    )
    driver_root: Path = Field(
        default=Path("/"),
        description="where this process reads the NVIDIA driver's files (libraries, binaries, firmware) that "
        "every claim's CDI spec bind-mounts into the container; in a pod: where the host's driver root is "
        "mounted (e.g. /driver-root). With --nvml simulated the driver files are added only when this is set",
    )
    host_driver_root: Path | None = Field(
        default=None,
        description="the same directory as the host sees it: the CDI spec's host paths are written under it, "
        "since the container runtime reads them on the host (/ for a driver installed on the host, "
        "/run/nvidia/driver for the GPU Operator's driver container); default: --driver-root",
    )
    cdi_hook_path: Path | None = Field(
        default=None,
        description="host path of nvidia-cdi-hook (the NVIDIA Container Toolkit's hook the CDI spec runs to "
        "create the library symlinks and update the ld cache); default: found in the driver root's usr/bin, "
        "usr/local/bin, bin, usr/local/nvidia/toolkit",
    )
    cdi_driver_files: bool = Field(
        default=True,
        description="add the driver's user-space libraries, binaries, firmware and IPC sockets as read-only bind "
        "mounts plus the nvidia-cdi-hook hooks to every claim's CDI spec, so a stock CUDA image runs; off: device "
        "nodes and environment only (the image brings a matching libcuda)",
    )
    cdi_device_nodes: bool = Field(
        default=True,
        description="put the /dev/nvidia* device nodes into the CDI specs; off only where the node has none (a "
        "simulated node: the runtime refuses a container whose device node is missing)",
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
    api_timeout: float = Field(default=10.0, gt=0, description="seconds per API server request")
    test_crash_at: CrashPoint | None = Field(
        default=None, description="TESTS ONLY: SIGKILL this process at that point of prepare"
    )

    @field_validator("driver_root", "host_driver_root")
    @classmethod
    def _absolute(cls, value: Path | None) -> Path | None:
        if value is not None and not value.is_absolute():
            raise ValueError("must be an absolute path")
        return value

    @property
    def host_driver_directory(self) -> Path:
        """The driver root as the host sees it (``--host-driver-root``, else ``--driver-root``)."""
        return self.host_driver_root if self.host_driver_root is not None else self.driver_root
